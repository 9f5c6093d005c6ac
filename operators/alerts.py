"""Alerts: the moments of an elastic run a platform team wants to hear about, sent through Airflow's notifiers.

The operators never send mail or Slack messages themselves: they call the notifiers they are given, Airflow's own
mechanism (``airflow.sdk.bases.notifier.BaseNotifier``, as ``on_failure_callback`` takes it; the SMTP provider's
``SmtpNotifier``, the Slack provider's ``SlackNotifier`` / ``SlackWebhookNotifier``), or any callable taking the
task context. Each call gets the task's context with one more key, ``elastic_training_alert`` (:data:`CONTEXT_KEY`):
the event, a title, a message and its details (:meth:`Alert.payload`), so a notifier's templates can say
``{{ elastic_training_alert.title }}``. BaseNotifier renders its template fields in place (irreversibly,
``render_template_fields``), so each call goes to a shallow copy: the second alert is not the first one's text.

The events (:class:`AlertEvent`): a full restart (its reason and the budget left), a budget spent (the task fails),
a Kueue preemption or a slice's pods evicted, a wait for admission past a threshold, a checkpoint judged invalid
(moved aside) or unknown (storage could not say), and a missed deadline (Airflow 3.3's ``DeadlineAlert``, whose
callback :func:`deadline_missed` hands the same payload to the same notifier in the triggerer).

The operator is deferrable: what happens while it waits is seen by its trigger, which wakes it (an event of status
``notice``) when :func:`news` has something; the operator, not the trigger, calls the notifiers, and keeps what it
told (:class:`Seen`, in the task state store) so nothing is told twice. A notifier's error is logged and never
fails the run.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from elastic_training.operators.observations import MonitorState
from elastic_training.operators.policy import JobSetPhase
from elastic_training.operators.shown import shown

if TYPE_CHECKING:
    from airflow.sdk.definitions.deadline import DeadlineAlert

CONTEXT_KEY = "elastic_training_alert"
DEFAULT_QUEUED_AFTER_SECONDS = 1800.0
DEADLINE_CALLBACK = "elastic_training.operators.alerts.deadline_missed"
MAX_DEADLINE_SECONDS = 7 * 24 * 3600  # a nightly run's deadline within a week of its start
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h)\s*$")
_CLOCK = re.compile(r"^\s*([01]?\d|2[0-3]):([0-5]\d)\s*$")

Notifier = Callable[[Any], Any]  # a BaseNotifier, or any callable taking the task context


class AlertEvent(StrEnum):
    """What happened (the payload's ``event``)."""

    FULL_RESTART = "full_restart"
    BUDGET_SPENT = "budget_spent"
    PREEMPTED = "preempted"
    EVICTED = "evicted"
    QUEUED_TOO_LONG = "queued_too_long"
    CHECKPOINT_INVALID = "checkpoint_invalid"
    CHECKPOINT_UNKNOWN = "checkpoint_unknown"
    DEADLINE_MISSED = "deadline_missed"


@dataclass(frozen=True)
class Alert:
    """One event to tell: a title for a subject line, a message a person can act on, and its details (JSON)."""

    event: AlertEvent
    title: str
    message: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def payload(self, context: Mapping[str, Any]) -> dict[str, Any]:
        """What a notifier finds under ``elastic_training_alert``: the alert and the task it came from."""
        ti = context.get("ti")
        index = getattr(ti, "map_index", None)
        return self.payload_of(
            dag_id=str(getattr(ti, "dag_id", "") or ""),
            task_id=str(getattr(ti, "task_id", "") or ""),
            run_id=str(getattr(ti, "run_id", "") or ""),
            map_index=int(index) if index is not None else -1,
            try_number=int(getattr(ti, "try_number", 0) or 0),
        )

    def payload_of(
        self, *, dag_id: str, run_id: str, task_id: str = "", map_index: int = -1, try_number: int = 0
    ) -> dict[str, Any]:
        """The payload for a run (and task) named outright: a deadline is the DAG run's, no task's."""
        return {
            "event": self.event.value,
            "title": self.title,
            "message": self.message,
            "details": dict(self.details),
            "dag_id": dag_id,
            "task_id": task_id,
            "run_id": run_id,
            "map_index": map_index,
            "try_number": try_number,
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
        }


@dataclass(frozen=True)
class Alerts:
    """The operators' ``alerts`` argument: the notifiers to call, and how long a wait for admission may last before
    it is told (``queued_after``, seconds; ``None``: never told)."""

    notifiers: tuple[Notifier, ...]
    queued_after: float | None = DEFAULT_QUEUED_AFTER_SECONDS

    def __post_init__(self) -> None:
        for notifier in self.notifiers:
            if isinstance(notifier, type):  # calling the class would only build a notifier, never send
                raise TypeError(
                    f"alerts: {notifier.__qualname__} is a class; pass an instance of it, built with its arguments"
                )
            if not callable(notifier):
                raise TypeError(f"alerts: a notifier must be a BaseNotifier or a callable, got {shown(notifier)}")
        if self.queued_after is not None:
            seconds = self.queued_after
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds < math.inf:
                raise ValueError(f"alerts: queued_after must be a positive number of seconds, got {shown(seconds)}")

    @classmethod
    def of(cls, value: Any) -> Alerts | None:
        """The argument as given: ``None``, an `Alerts`, one notifier, or a sequence of them."""
        if value is None or isinstance(value, Alerts):
            return value
        if callable(value):
            return cls((value,))
        if isinstance(value, Sequence) and not isinstance(value, str | bytes):
            return cls(tuple(value))
        raise TypeError(f"alerts must be a notifier, a list of notifiers or an Alerts, got {shown(value)}")

    def trigger_kwargs(self, seen: Seen) -> dict[str, Any]:
        """What the trigger needs to know when to wake the operator for news (its ``alerts`` kwarg)."""
        return {"seen": seen.to_json(), "queued_after": self.queued_after}


def send(alerts: Alerts | None, context: Mapping[str, Any], alert: Alert, log: Any) -> int:
    """Call every notifier with the context and the alert; returns how many answered without an error.

    A notifier's error is logged (with its traceback) and goes no further: an alert never fails the run.
    """
    if alerts is None or not alerts.notifiers:
        return 0
    payload = alert.payload(context)
    log.info("alert %s: %s", alert.event.value, alert.message)
    sent = 0
    for notifier in alerts.notifiers:
        called = dict(context)
        called[CONTEXT_KEY] = payload
        target = copy.copy(notifier) if hasattr(notifier, "render_template_fields") else notifier
        try:
            target(called)
            sent += 1
        except Exception:
            log.warning("the notifier %s failed on the %s alert", _name(notifier), alert.event.value, exc_info=True)
    return sent


def _name(notifier: Any) -> str:
    return str(getattr(notifier, "__qualname__", None) or type(notifier).__qualname__)


# -- what the trigger sees and the operator tells ----------------------------------------------------------------


@dataclass
class Seen:
    """What was told about the incarnation watched now (JSON in the task state store and the trigger's kwargs)."""

    jobset_uid: str | None = None
    preemptions: int = 0
    evictions: int = 0
    queued_since: float | None = None  # the start of the wait for admission already told

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, *, jobset_uid: str | None) -> Seen:
        """What was told about ``jobset_uid``: stored counts of another incarnation (or unreadable ones) are none."""
        if not isinstance(data, Mapping) or data.get("jobset_uid") != jobset_uid:
            return cls(jobset_uid=jobset_uid)
        try:
            since = data.get("queued_since")
            return cls(
                jobset_uid=jobset_uid,
                preemptions=max(0, int(data.get("preemptions") or 0)),
                evictions=max(0, int(data.get("evictions") or 0)),
                queued_since=None if since is None else float(since),
            )
        except (TypeError, ValueError, OverflowError):
            return cls(jobset_uid=jobset_uid)


# Kueue says why a Workload waits (its QuotaReserved condition) within seconds of its creation; on a loaded cluster it
# took longer than a 10 s threshold. A wait is told with Kueue's reason, or this long past its threshold without one.
REASON_GRACE_SECONDS = 30.0


def _open_wait(state: MonitorState) -> float | None:
    """The start of the wait for admission under way (queued, or preempted and waiting), or ``None``."""
    digest = state.digest
    if state.phase is not JobSetPhase.SUSPENDED or not digest.suspended:
        return None
    start = digest.queue_spans[-1][0]
    return float(start) if start is not None else None


def news(state: MonitorState, seen: Seen, *, now: float, queued_after: float | None) -> list[Alert]:
    """What happened to the incarnation since ``seen``: preemptions, evictions, a wait for admission past
    ``queued_after``. Pure: the trigger asks it to know when to wake the operator, the operator to know what to tell.
    """
    found: list[Alert] = []
    digest = state.digest
    preemptions = digest.preempted_spans
    if preemptions > seen.preemptions:
        recovery = next((r for r in reversed(digest.all_recoveries) if r.kind == "preemption"), None)
        said = f" (Kueue: {recovery.reason})" if recovery is not None and recovery.reason else ""
        found.append(
            Alert(
                AlertEvent.PREEMPTED,
                "elastic run preempted by Kueue",
                f"the JobSet was preempted by Kueue{said}: it waits to be admitted again and resumes from its last "
                "checkpoint (no budget spent)",
                {"preemptions": preemptions, "reason": recovery.reason if recovery is not None else ""},
            )
        )
    if state.slice_evictions > seen.evictions:
        found.append(
            Alert(
                AlertEvent.EVICTED,
                "elastic run's slice evicted",
                f"{state.slice_evictions - seen.evictions} slice eviction(s) (pods evicted or preempted by the node's "
                "owner, not failed): the slice restarts, no slice budget spent",
                {"evictions": state.slice_evictions, "by_slice": dict(state.slice_evictions_by_slice)},
            )
        )
    waiting_since = _queued_news(state, seen, now=now, queued_after=queued_after)
    if waiting_since is not None and queued_after is not None:
        waited = now - waiting_since
        said = f"; Kueue: {state.queue_reason}" if state.queue_reason else ""
        found.append(
            Alert(
                AlertEvent.QUEUED_TOO_LONG,
                "elastic run still waiting for admission",
                f"waiting for Kueue's admission for {waited:.0f} s (told after {queued_after:.0f} s){said}",
                {
                    "queued_seconds": round(waited, 1),
                    "queued_after": queued_after,
                    "since": waiting_since,
                    "reason": state.queue_reason,
                },
            )
        )
    return found


def told(state: MonitorState, seen: Seen, *, now: float, queued_after: float | None) -> Seen:
    """``seen`` once :func:`news` has been told."""
    waiting_since = _queued_news(state, seen, now=now, queued_after=queued_after)
    queued = seen.queued_since if waiting_since is None else waiting_since
    return Seen(
        jobset_uid=seen.jobset_uid,
        preemptions=max(seen.preemptions, state.digest.preempted_spans),
        evictions=max(seen.evictions, state.slice_evictions),
        queued_since=queued,
    )


def next_news_at(state: MonitorState, seen: Seen, *, queued_after: float | None) -> float | None:
    """When a wait for admission under way becomes news if nothing changes (the trigger wakes then)."""
    found = _queued_due(state, seen, queued_after=queued_after)
    return None if found is None else found[1]


def _queued_due(state: MonitorState, seen: Seen, *, queued_after: float | None) -> tuple[float, float] | None:
    """The start of the wait for admission under way, not told yet, and when it is news: ``queued_after`` past its
    start once Kueue has said why, :data:`REASON_GRACE_SECONDS` later without it; ``None`` when there is none."""
    waiting_since = _open_wait(state)
    if queued_after is None or waiting_since is None or seen.queued_since == waiting_since:
        return None
    return waiting_since, waiting_since + queued_after + (0.0 if state.queue_reason else REASON_GRACE_SECONDS)


def _queued_news(state: MonitorState, seen: Seen, *, now: float, queued_after: float | None) -> float | None:
    """The start of the wait for admission under way when it is news at ``now``, else ``None``."""
    found = _queued_due(state, seen, queued_after=queued_after)
    return found[0] if found is not None and now >= found[1] else None


def tell_news(alerts: Alerts, context: Mapping[str, Any], state: MonitorState, seen: Seen, log: Any) -> Seen:
    """Tell the notifiers what :func:`news` has since ``seen``; what was told then (for the state store)."""
    now = time.time()
    for alert in news(state, seen, now=now, queued_after=alerts.queued_after):
        send(alerts, context, alert, log)
    return told(state, seen, now=now, queued_after=alerts.queued_after)


# -- the operators' alerts -------------------------------------------------------------------------------------


def full_restart(reason: str, message: str, *, used: int, allowed: int, latest_step: int | None) -> Alert:
    """An escalation to a full restart: the decision's reason and the full-restart budget left after it."""
    left = max(0, allowed - used)
    return Alert(
        AlertEvent.FULL_RESTART,
        f"elastic run escalated to full restart {used} of {allowed}",
        f"{message} ({left} full restart(s) left)",
        {
            "reason": reason,
            "full_restarts_used": used,
            "max_full_restarts": allowed,
            "full_restarts_left": left,
            "latest_step": latest_step,
        },
    )


def budget_spent(budget: str, message: str, *, reason: str, full_restarts_used: int, allowed: int) -> Alert:
    """A budget ran out and the task fails."""
    return Alert(
        AlertEvent.BUDGET_SPENT,
        f"elastic run failed: {budget} spent",
        message,
        {"budget": budget, "reason": reason, "full_restarts_used": full_restarts_used, "max_full_restarts": allowed},
    )


def checkpoint_invalid(step: int | None, path: str, problems: Sequence[object], *, moved_to: str | None) -> Alert:
    """A step judged invalid (a corrupt, incomplete or uncommitted save)."""
    where = f": moved aside to {moved_to}" if moved_to else ""
    said = [str(p) for p in problems]
    return Alert(
        AlertEvent.CHECKPOINT_INVALID,
        f"checkpoint step {step} is not valid",
        f"checkpoint step {step} at {path} is not valid{where}: {'; '.join(said)[:1000]}",
        {"step": step, "path": path, "problems": said[:20], "moved_to": moved_to},
    )


def checkpoint_unknown(path: str, why: str) -> Alert:
    """Storage could not say whether the checkpoints are valid (unknown, not invalid: nothing was moved)."""
    return Alert(
        AlertEvent.CHECKPOINT_UNKNOWN,
        "checkpoints could not be checked",
        f"the checkpoints under {path} could not be checked (unknown, not invalid: nothing was moved): {why}"[:2000],
        {"path": path, "why": why[:1000]},
    )


# -- one place for the DAG: a notifier named in the config, and the deadline ------------------------------------


@dataclass(frozen=True)
class AlertRoute:
    """Where a DAG's alerts go: a notifier class (its import path) and the keyword arguments it is built with.

    The same pair builds the operators' notifier (:meth:`alerts`) and the deadline's callback (:meth:`deadline`),
    which the triggerer builds again from the path, so it must be importable there (a provider's notifier is).
    """

    notifier: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    queued_after: float | None = DEFAULT_QUEUED_AFTER_SECONDS

    def __post_init__(self) -> None:
        if not isinstance(self.notifier, str) or not re.fullmatch(r"[A-Za-z_][\w.]*\.[A-Za-z_]\w*", self.notifier):
            raise ValueError(f"alert_notifier must be the import path of a notifier class, got {shown(self.notifier)}")
        if not isinstance(self.kwargs, Mapping) or not all(isinstance(k, str) for k in self.kwargs):
            raise ValueError(f"alert_notifier_kwargs must be a JSON object, got {shown(self.kwargs)}")

    @classmethod
    def from_config(cls) -> AlertRoute | None:
        """The route of ``[elastic_training] alert_notifier`` / ``alert_notifier_kwargs`` / ``alert_queued_after``
        (``None`` when no notifier is named); `ValueError` naming the option when one cannot be read."""
        from elastic_training.operators import config

        path = config.get_option(config.ALERT_NOTIFIER).strip()
        if not path:
            return None
        text = config.get_option(config.ALERT_NOTIFIER_KWARGS).strip() or "{}"
        try:
            kwargs = json.loads(text)
        except ValueError as error:
            raise ValueError(f"[elastic_training] alert_notifier_kwargs is not JSON: {error}") from None
        if not isinstance(kwargs, dict):
            raise ValueError(f"[elastic_training] alert_notifier_kwargs must be a JSON object, got {shown(kwargs)}")
        after = config.get_option(config.ALERT_QUEUED_AFTER).strip()
        try:
            queued_after = float(after) if after else None
        except ValueError:
            raise ValueError(f"[elastic_training] alert_queued_after must be seconds, got {shown(after)}") from None
        if queued_after is not None and not 0 < queued_after < math.inf:
            raise ValueError(f"[elastic_training] alert_queued_after must be positive, got {shown(after)}")
        return cls(path, kwargs, queued_after)

    def notifier_class(self) -> Any:
        module, _, name = self.notifier.rpartition(".")
        try:
            found = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as error:
            raise ValueError(f"alert_notifier {self.notifier!r} cannot be imported: {error}") from None
        if not callable(found):
            raise ValueError(f"alert_notifier {self.notifier!r} is not a class or callable")
        return found

    def alerts(self) -> Alerts:
        """The operators' ``alerts``: one notifier built from the route."""
        return Alerts((self.notifier_class()(**self.kwargs),), queued_after=self.queued_after)

    def deadline(self, finished_by: str) -> DeadlineAlert | None:
        """Airflow's ``DeadlineAlert`` for ``finished_by`` (``""``: none), missed → :func:`deadline_missed`."""
        from airflow.sdk.definitions.callback import AsyncCallback
        from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference

        within = deadline_interval(finished_by)
        if within is None:
            return None
        interval, from_logical_date = within
        reference = DeadlineReference.DAGRUN_LOGICAL_DATE if from_logical_date else DeadlineReference.DAGRUN_QUEUED_AT
        return DeadlineAlert(
            reference=reference,
            interval=interval,
            callback=AsyncCallback(
                DEADLINE_CALLBACK,
                kwargs={"notifier": self.notifier, "notifier_kwargs": dict(self.kwargs), "finished_by": finished_by},
            ),
            name=f"finished by {finished_by.strip()}",
        )


def configured_deadline(route: AlertRoute | None) -> DeadlineAlert | None:
    """The deadline of ``[elastic_training] nightly_deadline`` through ``route`` (``None``: no deadline, or no
    notifier to tell: a deadline nobody hears of is not declared)."""
    from elastic_training.operators import config

    finished_by = config.get_option(config.NIGHTLY_DEADLINE)
    try:
        deadline_interval(finished_by)
    except ValueError as error:
        raise ValueError(f"[elastic_training] nightly_deadline: {error}") from None
    return None if route is None else route.deadline(finished_by)


def deadline_interval(finished_by: str) -> tuple[timedelta, bool] | None:
    """``"HH:MM"`` (that time of the run's logical day, UTC: the nightly run of 00:00 done by 08:00) or a duration
    from when the run was queued (``"90m"``, ``"6h"``, ``"45s"``): the interval and whether it counts from the
    logical date. ``""``: no deadline. `ValueError` naming what it takes otherwise."""
    text = finished_by.strip() if isinstance(finished_by, str) else None
    if text is None:
        raise ValueError(f"a deadline must be text, got {shown(finished_by)}")
    if not text:
        return None
    if clock := _CLOCK.match(text):
        return timedelta(hours=int(clock.group(1)), minutes=int(clock.group(2))), True
    if duration := _DURATION.match(text):
        number, unit = float(duration.group(1)), duration.group(2)
        seconds = number * {"s": 1, "m": 60, "min": 60, "h": 3600}[unit]
        if 0 < seconds <= MAX_DEADLINE_SECONDS:
            return timedelta(seconds=seconds), False
    raise ValueError(
        f"a deadline is HH:MM (UTC, of the run's logical day) or a duration such as 90m, 6h or 45s, up to 7 days; "
        f"got {shown(finished_by)}"
    )


def deadline_alert(context: Mapping[str, Any], finished_by: str) -> dict[str, Any]:
    """The payload of a missed deadline, from the context Airflow's scheduler gives the callback."""
    found_run, found_deadline = context.get("dag_run"), context.get("deadline")
    run: Mapping[str, Any] = found_run if isinstance(found_run, Mapping) else {}
    deadline: Mapping[str, Any] = found_deadline if isinstance(found_deadline, Mapping) else {}
    due = deadline.get("deadline_time")
    due_text = due.isoformat() if isinstance(due, datetime) else str(due or "")
    dag_id, run_id = str(run.get("dag_id") or ""), str(run.get("dag_run_id") or run.get("run_id") or "")
    alert = Alert(
        AlertEvent.DEADLINE_MISSED,
        f"{dag_id} missed its deadline",
        f"DAG run {run_id} of {dag_id} was not finished by {due_text} (finished by {finished_by}); "
        f"it is {run.get('state') or 'still running'}",
        {"deadline_time": due_text, "finished_by": finished_by, "state": run.get("state")},
    )
    return alert.payload_of(dag_id=dag_id, run_id=run_id)


async def deadline_missed(
    context: Mapping[str, Any] | None = None,
    *,
    notifier: str,
    notifier_kwargs: Mapping[str, Any] | None = None,
    finished_by: str = "",
) -> str:
    """The ``AsyncCallback`` of the DAG's deadline: the notifier built in the triggerer, told the missed deadline.

    Airflow 3.3 calls it so (apache/airflow ``airflow/models/deadline.py``, ``Deadline.handle_miss``: the callback's
    kwargs plus ``context`` = ``{"dag_run": <the run as the REST API shows it>, "deadline": {"id", "deadline_time"}}``;
    ``airflow/triggers/callback.py``, ``CallbackTrigger.run``: the path imported and awaited in the triggerer, its
    result or error stored on the callback). A notifier with ``async_notify`` is awaited (as Airflow's deadline docs
    use them); one with only ``notify`` runs in a thread, so the triggerer's event loop never blocks on it.
    """
    called: dict[str, Any] = dict(context or {})
    called[CONTEXT_KEY] = deadline_alert(called, finished_by)
    instance = AlertRoute(notifier, dict(notifier_kwargs or {})).notifier_class()(**dict(notifier_kwargs or {}))
    if _overrides(instance, "async_notify"):
        instance.context = called
        await instance
    else:
        await asyncio.to_thread(instance, called)
    return f"told {notifier} at {time.time():.0f}"


def _overrides(instance: Any, method: str) -> bool:
    """Whether the notifier defines ``method`` itself (BaseNotifier's own raises NotImplementedError)."""
    from airflow.sdk import BaseNotifier

    own = getattr(type(instance), method, None)
    return own is not None and own is not getattr(BaseNotifier, method, None)
