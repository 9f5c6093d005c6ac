"""`JobSetTrigger`: watch one JobSet incarnation without holding a worker slot.

It watches the JobSet (by name), its child Jobs and pods (by the ``jobset-name`` label), the Kueue Workload of a
JobSet that carries a queue label (by Kueue's ``kueue.x-k8s.io/job-uid`` label; read-only, for the queue's reason),
and follows the head pod's trainer log, folding all of it into a :class:`~operators.observations.MonitorState`.
The watches are the triggerer process's shared ones (:mod:`operators.shared_watches`: one list+watch per
connection, namespace and kind, whatever the number of triggers); a JobSet Kueue has not admitted yet has no pods,
so its trigger subscribes to its Jobs and pods, and follows the log, only once it is admitted.
After every change it asks the pure policy what it would do; it wakes the operator (yields one event) only when the
answer is not "continue": the JobSet ended, a budget is spent, training stalled, or its own deadline passed; for a
JobSet whose workers keep off failing node pools (``relax_after_seconds`` set), when a worker pod has been unschedulable
that long (:mod:`operators.scheduling`), so the operator can drop the avoidance; for a run ``checkpoint_period="auto"``
planned (``replan`` set), when its slice failures so far call for a restart with a shorter period
(:mod:`operators.period_replan`); and, when it is given ``alerts``, when something the operator tells its notifiers
about happened while it waited (a preemption, an eviction, a wait for admission past its threshold:
:func:`operators.alerts.news`), with status ``notice``. It is side-effect free: it never creates, deletes or patches
anything, so running it twice (a triggerer failover) is harmless. Watches relist on 410 and reconnect with backoff;
transient API errors never end it. A refusal does, after a few tries (as the provider's ``watch_pod_events`` gives up on
a 403): a watch's, or a log read's (``get pods/log`` refused, or a kubelet the API server cannot reach), since progress
it cannot read would look like a stall and restart a healthy run.

Events are plain dicts: ``{"status": EventStatus, "reason", "message", "state", "name", "namespace"}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import math
import time
from collections.abc import AsyncIterator, Coroutine, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from elastic_training.operators import config
from elastic_training.operators.alerts import Seen, news, next_news_at
from elastic_training.operators.backoff import Backoff
from elastic_training.operators.constants import (
    HEAD_MAIN_CONTAINER,
    LABEL_JOBSET_UID,
    LABEL_REPLICATED_JOB_NAME,
    WORKER_REPLICATED_JOB,
)
from elastic_training.operators.observations import MonitorState, parse_time
from elastic_training.operators.period_replan import Replan, ReplanBasis, replan_run
from elastic_training.operators.policy import Action, Budgets, JobSetPhase, RunPhase, decide
from elastic_training.operators.queueing import QUOTA_RESERVED
from elastic_training.operators.recovery import SLICE_DOWN
from elastic_training.operators.scheduling import Unschedulable, describe, unschedulable
from elastic_training.operators.shared_watches import SharedWatches, WatchKey, WatchKind, shared_watches

if TYPE_CHECKING:
    from elastic_training.operators.hooks import AsyncJobSetHook

NO_CURSOR_TAIL_LINES = 5000  # adopting a JobSet with no log cursor: fold only its recent history
FINAL_LOG_WAIT_SECONDS = 3.0
# Failed log reads in a row (other than a refusal, which the watches' REFUSED_ATTEMPTS bounds), and for at
# least this long, before the trigger ends with an error: a burst of 5xx from the API server is ridden out (as
# the watches ride it out), an unreachable kubelet is not; well under the default stall_timeout (30 min).
LOG_UNREADABLE_ATTEMPTS = 10
LOG_UNREADABLE_SECONDS = 300.0
# Airflow 3.3 fails a deferred task whose trigger fires so soon that the resumed attempt is already running
# when the scheduler drains the executor's "success" for the deferring attempt (apache/airflow#71580,
# #72716; seen here 5-7 s after deferral). A trigger therefore decides nothing final in its first seconds.
DEFAULT_DEFER_SETTLE_SECONDS = float(config.DEFER_SETTLE_SECONDS.default)
MAX_DEFER_SETTLE_SECONDS = 300.0
SETTLE_CONFIG = (config.SECTION, config.DEFER_SETTLE_SECONDS.name)


def defer_settle_seconds() -> float:
    """``[elastic_training] defer_settle_seconds``: how long a trigger started now holds a final decision."""
    from airflow.configuration import conf

    seconds = conf.getfloat(*SETTLE_CONFIG, fallback=DEFAULT_DEFER_SETTLE_SECONDS)
    if not 0.0 <= seconds <= MAX_DEFER_SETTLE_SECONDS:  # also refuses nan and inf
        raise ValueError(
            f"[elastic_training] defer_settle_seconds must be between 0 and {MAX_DEFER_SETTLE_SECONDS:.0f}, "
            f"got {seconds}"
        )
    return seconds


class EventStatus(StrEnum):
    """Why the trigger woke the operator."""

    DECISION = "decision"  # the policy would not continue: terminal JobSet, budget spent, stall
    DEADLINE = "deadline"
    ERROR = "error"
    UNSCHEDULABLE = "unschedulable"  # a worker pod unschedulable for relax_after_seconds (avoidance to drop)
    REPLAN = "replan"  # an auto run's slice failures call for a restart with a shorter checkpoint period
    NOTICE = "notice"  # news for the operator's alerts (operators.alerts.news); the run goes on


class JobSetTrigger(BaseTrigger):
    """Watch a JobSet, its pods and its trainer log until the policy wants the operator to act.

    :param name: JobSet name. :param namespace: its namespace.
    :param uid: the incarnation's uid; a JobSet of the same name with another uid counts as gone.
    :param target_step: the final step (``steps - 1``).
    :param budgets: the :class:`~operators.policy.Budgets` (or their :meth:`~operators.policy.Budgets.to_json`,
        as Airflow rebuilds a trigger from its serialized kwargs).
    :param full_restarts_used: full restarts before this incarnation.
    :param state: the last persisted :class:`~operators.observations.MonitorState` (JSON).
    :param kubernetes_conn_id: the cncf-kubernetes connection.
    :param deadline: Unix time after which it yields a ``deadline`` event (``None``: none).
    :param poll_interval: seconds between checks of timers (the stall rule) when nothing changes.
    :param delete_on_kill: delete the JobSet when a user kills the deferred task.
    :param settle_seconds: for this long after it starts, a final decision waits (the watches go on) and is
        made again when the time is up (see :func:`defer_settle_seconds`); an error event waits too.
    :param relax_after_seconds: yield an ``unschedulable`` event once a worker pod has been unschedulable this long
        (``None``: never; the operator sets it while the workers avoid node pools).
    :param relax_not_before: Unix time before which no ``unschedulable`` event is yielded (the operator looked
        and waits again).
    :param alerts: ``{"seen": Seen JSON, "queued_after": seconds or None}``: wake the operator (``notice``) on
        :func:`operators.alerts.news` since ``seen`` (``None``: never; the operator has no notifiers).
    :param replan: a :class:`~operators.period_replan.ReplanBasis` (JSON): at each slice failure, yield a ``replan``
        event (its ``replan`` key: the :class:`~operators.period_replan.Replan`) when the run's failures so far call
        for a restart with a shorter period (``None``, or anything unsound: never).
    """

    def __init__(
        self,
        *,
        name: str,
        namespace: str,
        uid: str | None,
        target_step: int,
        budgets: Budgets | Mapping[str, Any],
        full_restarts_used: int = 0,
        state: dict[str, Any] | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        deadline: float | None = None,
        poll_interval: float = 10.0,
        delete_on_kill: bool = True,
        settle_seconds: float = 0.0,
        relax_after_seconds: float | None = None,
        relax_not_before: float = 0.0,
        alerts: Mapping[str, Any] | None = None,
        replan: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.name = name
        self.namespace = namespace
        self.uid = uid
        self.target_step = target_step
        self.budgets = budgets if isinstance(budgets, Budgets) else Budgets.from_json(budgets)
        self.full_restarts_used = full_restarts_used
        self.state = dict(state or {})
        self.kubernetes_conn_id = kubernetes_conn_id
        self.deadline = deadline
        self.poll_interval = poll_interval
        self.delete_on_kill = delete_on_kill
        self.settle_seconds = settle_seconds
        self.relax_after_seconds = relax_after_seconds
        self.relax_not_before = relax_not_before
        self.alerts = dict(alerts) if alerts is not None else None
        self.replan = dict(replan) if replan is not None else None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "name": self.name,
                "namespace": self.namespace,
                "uid": self.uid,
                "target_step": self.target_step,
                "budgets": self.budgets.to_json(),
                "full_restarts_used": self.full_restarts_used,
                "state": self.state,
                "kubernetes_conn_id": self.kubernetes_conn_id,
                "deadline": self.deadline,
                "poll_interval": self.poll_interval,
                "delete_on_kill": self.delete_on_kill,
                "settle_seconds": self.settle_seconds,
                "relax_after_seconds": self.relax_after_seconds,
                "relax_not_before": self.relax_not_before,
                "alerts": self.alerts,
                "replan": self.replan,
            },
        )

    async def _hook(self) -> AsyncJobSetHook:
        # The Kubernetes clients take seconds to import (tens on a loaded machine); importing them on
        # the triggerer's event loop would stall every other trigger it runs. A worker thread does it.
        hooks = await asyncio.to_thread(importlib.import_module, "elastic_training.operators.hooks")
        hook: AsyncJobSetHook = hooks.AsyncJobSetHook(conn_id=self.kubernetes_conn_id)
        return hook

    async def on_kill(self) -> None:
        """A user killed the deferred task (mark failed, clear): delete the JobSet unless told to keep it."""
        if self.delete_on_kill:
            self.log.info("task killed: deleting JobSet %s", self.name)
            hook = await self._hook()
            try:
                await hook.delete_jobset(self.name, self.namespace, uid=self.uid)
            finally:
                await hook.close()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # Monotonic, on the triggerer's own clock: it starts after the deferral, whatever the hosts' clocks say.
        settled_at = time.monotonic() + self.settle_seconds
        monitor = _Monitor(self, MonitorState.from_json(self.state), await self._hook(), settled_at)
        try:
            event = await monitor.run()
        except Exception as error:  # a bug must reach the operator as an event, not kill the triggerer silently
            self.log.exception("JobSet trigger failed")
            event = monitor.event(EventStatus.ERROR, "error", f"{type(error).__name__}: {error}")
            if (hold := settled_at - time.monotonic()) > 0:
                await asyncio.sleep(hold)
        yield TriggerEvent(event)  # type: ignore[no-untyped-call]


class _Monitor:
    """The trigger's running state: its subscriptions to the shared watches feed one MonitorState; the main loop
    decides. ``hook`` serves the log follow (a stream per head pod, so a client per trigger)."""

    def __init__(
        self,
        trigger: JobSetTrigger,
        state: MonitorState,
        hook: AsyncJobSetHook,
        settled_at: float = 0.0,
        watches: SharedWatches | None = None,
    ) -> None:
        self.trigger = trigger
        self.settled_at = settled_at  # time.monotonic() before which a final decision waits
        self.state = state
        if not state.started_at:  # no persisted state: the incarnation is watched from now on
            state.started_at = time.time()
        self.hook = hook
        self.watches = watches if watches is not None else shared_watches()
        self.budgets = trigger.budgets
        self.changed = asyncio.Event()
        self.pods_changed = asyncio.Event()  # the pods subscription brought something: the head pod may be known
        self.pods_listed = asyncio.Event()  # the pods subscription's first list arrived
        self.queue_managed = asyncio.Event()  # the JobSet carries a queue label: its Workload is watched
        self.admitted_once = False  # its Workload shows an admission, now or before (preempted, requeued)
        self.children = False  # subscribed to the Jobs and pods, following the log
        self.tasks: list[asyncio.Task[None]] = []
        self.run_phase: RunPhase | None = None
        self.log = trigger.log
        # worker pods kube-scheduler left unschedulable, by uid (read again from the pods after a rebuild)
        self.unschedulable: dict[str, Unschedulable] = {}
        self.replan_basis = ReplanBasis.from_json(trigger.replan)
        self.replan_weighed = 0  # the slice failures the replan rule last weighed

    def event(self, status: EventStatus, reason: str, message: str, **extra: Any) -> dict[str, Any]:
        return {
            "status": status.value,
            "reason": reason,
            "message": message,
            "name": self.trigger.name,
            "namespace": self.trigger.namespace,
            "state": self.state.to_json(),
            **extra,
        }

    async def run(self) -> dict[str, Any]:
        self._start(self._watch_jobset(), "jobset")
        self._start(self._watch_workloads(), "workloads")
        try:
            return await self._decide_loop(self.tasks)
        finally:
            self.children = True  # nothing opens now
            for task in self.tasks:
                task.cancel()
            for task in self.tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            with contextlib.suppress(Exception):
                await self.hook.close()

    def _start(self, work: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(work, name=name)
        task.add_done_callback(lambda _: self.changed.set())
        self.tasks.append(task)

    def _subscribe(self, kind: WatchKind, value: str) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        key = WatchKey(self.trigger.kubernetes_conn_id, self.trigger.namespace, kind)
        return self.watches.subscribe(key, value)

    def _queued(self) -> bool:
        """Suspended in a Kueue queue and never admitted, as far as the JobSet, the state and the Workload tell."""
        state = self.state
        return (
            state.phase is JobSetPhase.SUSPENDED
            and state.queue_managed
            and state.digest.first_admitted_at is None
            and not self.admitted_once
        )

    def _open_children(self, *, anyway: bool = False) -> None:
        """Subscribe to the Jobs and pods and follow the log, once the JobSet is past its queue (or ``anyway``)."""
        if self.children or (self._queued() and not anyway):
            return
        self.children = True
        self._start(self._watch_pods(), "pods")
        self._start(self._watch_jobs(), "jobs")
        self._start(self._follow_log(), "log")

    async def _decide_loop(self, watchers: list[asyncio.Task[None]]) -> dict[str, Any]:
        trigger = self.trigger
        while True:
            for watcher in watchers:  # a watcher that gave up (refused access) ends the wait with its error
                error = watcher.exception() if watcher.done() and not watcher.cancelled() else None
                if error is not None:
                    raise error
            now = time.time()
            if trigger.deadline is not None and now >= trigger.deadline:
                return self.event(EventStatus.DEADLINE, "deadline", "the trigger's deadline passed")
            observation = self.state.observation(
                now=now,
                target_step=trigger.target_step,
                full_restarts_used=trigger.full_restarts_used,
                elastic_timeout_seconds=self.budgets.elastic_timeout_seconds,
            )
            decision = decide(observation, self.budgets)
            self._note_phase(now, decision.message)
            settling = self.settled_at - time.monotonic()
            if decision.action is not Action.CONTINUE and settling <= 0:
                await self._catch_up_log()
                return self.event(EventStatus.DECISION, decision.reason.value, decision.message)
            stranded, relax_at = self._stranded(now)
            if stranded and settling <= 0:
                return self.event(EventStatus.UNSCHEDULABLE, EventStatus.UNSCHEDULABLE.value, describe(stranded, now))
            if (replanned := self._replan(now)) is not None and settling <= 0:
                return replanned
            told = self._news(now)
            if told and settling <= 0:
                return self.event(EventStatus.NOTICE, told[0], told[1])
            wake = [now + trigger.poll_interval]
            if relax_at is not None:
                wake.append(relax_at)
            if told:
                wake.append(now + settling)
            if (news_at := self._news_at()) is not None:
                wake.append(news_at)
            if decision.action is not Action.CONTINUE:  # settling: watch on, then decide again on what is then
                wake.append(now + settling)
            if decision.recheck_at is not None:
                wake.append(decision.recheck_at)
            if trigger.deadline is not None:
                wake.append(trigger.deadline)
            self.changed.clear()
            # asyncio.timeout, not wait_for: Python 3.11's wait_for drops a cancellation that comes in the turn
            # the change does (CPython gh-86296), and the loop would run on after the triggerer cancelled it.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.05, min(wake) - now)):
                    await self.changed.wait()

    def _stranded(self, now: float) -> tuple[list[Unschedulable], float | None]:
        """The worker pods unschedulable for ``relax_after_seconds`` (once ``relax_not_before`` is past), and when
        the next one will be (``None``: no pod waits, or the trigger was not asked)."""
        after = self.trigger.relax_after_seconds
        if after is None or not self.unschedulable:
            return [], None
        found = sorted(self.unschedulable.values(), key=lambda u: (u.since, u.pod))
        due = max(found[0].since + after, self.trigger.relax_not_before)
        if now < due:
            return [], due
        return [u for u in found if u.waited(now) >= after], None

    def _note_scheduling(self, pod: dict[str, Any], *, deleted: bool) -> None:
        labels = pod.get("metadata", {}).get("labels") or {}
        uid = str(pod.get("metadata", {}).get("uid") or "")
        if labels.get(LABEL_REPLICATED_JOB_NAME) != WORKER_REPLICATED_JOB or not uid:
            return
        waiting = None if deleted else unschedulable(pod)
        if waiting is None:
            self.unschedulable.pop(uid, None)
        else:
            self.unschedulable[uid] = waiting

    def _replan(self, now: float) -> dict[str, Any] | None:
        """A ``replan`` event when a slice failure not weighed yet makes the rule restart the run shorter."""
        basis, digest = self.replan_basis, self.state.digest
        recoveries = [*digest.recoveries, *([digest.open_recovery] if digest.open_recovery else [])]
        failures = sum(1 for recovery in recoveries if recovery.kind == SLICE_DOWN)
        if basis is None or failures <= self.replan_weighed or digest.first_step_at is None:
            return None
        self.replan_weighed = failures
        training = now - digest.first_step_at
        steps_left = self.trigger.target_step - (digest.latest_step if digest.latest_step is not None else -1)
        restart = digest.first_step_at - self.state.started_at  # what this incarnation's start took
        found = replan_run(
            basis, failures=failures, training_seconds=training, steps_left=steps_left, restart_seconds=restart
        )
        if found is None:
            return None
        message = replan_message(
            basis, found, failures=failures, training_seconds=training, restart_seconds=basis.restart_cost(restart)
        )
        return self.event(EventStatus.REPLAN, EventStatus.REPLAN.value, message, replan=found.to_json())

    def _news(self, now: float) -> tuple[str, str] | None:
        """The first piece of news for the operator's alerts since what it told (``None``: none, or no alerts)."""
        alerts = self.trigger.alerts
        if alerts is None:
            return None
        seen = Seen.from_json(alerts.get("seen"), jobset_uid=self.trigger.uid)
        found = news(self.state, seen, now=now, queued_after=alerts.get("queued_after"))
        return (found[0].event.value, found[0].message) if found else None

    def _news_at(self) -> float | None:
        alerts = self.trigger.alerts
        if alerts is None:
            return None
        seen = Seen.from_json(alerts.get("seen"), jobset_uid=self.trigger.uid)
        return next_news_at(self.state, seen, queued_after=alerts.get("queued_after"))

    def _note_phase(self, now: float, message: str) -> None:
        phase = self.state.run_phase(now)
        if phase is not self.run_phase:
            self.run_phase = phase
            self.log.info("JobSet %s: %s (%s)", self.trigger.name, phase.value, message)

    async def _watch_jobset(self) -> None:
        async for kind, obj in self._subscribe(WatchKind.JOBSETS, self.trigger.name):
            found: dict[str, Any] | None = obj
            if kind == "SYNC":
                items = obj.get("items") or []
                found = items[0] if items else None
            if kind == "DELETED" or found is None:
                self.state.on_jobset(None)
            elif self.trigger.uid and found.get("metadata", {}).get("uid") != self.trigger.uid:
                self.state.on_jobset(None)  # same name, another incarnation: ours is gone
            else:
                self.state.on_jobset(found, now=time.time())
                if self.state.queue_managed:
                    self.queue_managed.set()
            self._open_children()
            self.changed.set()

    async def _watch_workloads(self) -> None:
        """The JobSet's Kueue Workload, once the JobSet shows a queue label (others have none to read)."""
        await self.queue_managed.wait()
        uid = self.state.jobset_uid or self.trigger.uid
        if not uid:
            self._open_children(anyway=True)  # no Workload to tell whether it was admitted
            return
        async for kind, obj in self._subscribe(WatchKind.WORKLOADS, uid):
            now = time.time()
            if kind == "SYNC":
                items = [w for w in obj.get("items") or [] if isinstance(w, dict)]
                newest = max(items, key=_created, default=None)
                self.state.on_workload(newest, now=now)
                self.admitted_once = self.admitted_once or _ever_admitted(newest)
            else:
                self.state.on_workload(None if kind == "DELETED" else obj, now=now)
                self.admitted_once = self.admitted_once or (kind != "DELETED" and _ever_admitted(obj))
            self._open_children()
            self.changed.set()
        self.state.on_workloads_unserved(time.time())  # Kueue's Workloads are not served: nothing will tell
        self.changed.set()
        self._open_children(anyway=True)

    async def _watch_pods(self) -> None:
        async for kind, obj in self._subscribe(WatchKind.PODS, self.trigger.name):
            now = time.time()
            if kind == "SYNC":
                items = [p for p in obj.get("items") or [] if self._ours(p)]
                self.state.forget_missing(alive_pods={str(p.get("metadata", {}).get("uid")) for p in items})
                self.unschedulable.clear()
                for pod in items:
                    self._restarted(self.state.on_pod(pod, deleted=False, now=now))
                    self._note_scheduling(pod, deleted=False)
                self.pods_listed.set()
            elif self._ours(obj):
                self._restarted(self.state.on_pod(obj, deleted=kind == "DELETED", now=now))
                self._note_scheduling(obj, deleted=kind == "DELETED")
            self.pods_changed.set()
            self.changed.set()

    async def _watch_jobs(self) -> None:
        async for kind, obj in self._subscribe(WatchKind.JOBS, self.trigger.name):
            now = time.time()
            if kind == "SYNC":
                items = [j for j in obj.get("items") or [] if self._ours(j)]
                self.state.forget_missing(alive_jobs={str(j.get("metadata", {}).get("uid")) for j in items})
                for job in items:
                    self._restarted(self.state.on_job(job, deleted=False, now=now))
            elif self._ours(obj):
                self._restarted(self.state.on_job(obj, deleted=kind == "DELETED", now=now))
            self.changed.set()

    def _restarted(self, slices: list[int]) -> None:
        if slices:
            self.log.info("slice restart: slices %s of JobSet %s", slices, self.trigger.name)

    def _ours(self, obj: dict[str, Any]) -> bool:
        owner_uid = (obj.get("metadata", {}).get("labels") or {}).get(LABEL_JOBSET_UID)
        return not self.trigger.uid or owner_uid in (None, self.trigger.uid)

    async def _follow_log(self) -> None:
        backoff = Backoff(base=0.5, cap=30.0)
        failures = _LogFailures(self.trigger.kubernetes_conn_id, self.trigger.namespace)
        while True:
            pod, uid = self.state.head_pod, self.state.head_pod_uid
            if pod is None or uid is None:  # until the pods subscription names the head pod
                self.pods_changed.clear()
                await self.pods_changed.wait()
                continue
            read_any = await self._read_log(pod, uid, follow=True, failures=failures)
            if read_any:
                backoff.reset()
            await asyncio.sleep(backoff.next_delay())

    async def _read_log(self, pod: str, uid: str, *, follow: bool, failures: _LogFailures | None = None) -> bool:
        since, tail = self._log_window(uid)
        read_any = False
        try:
            async for stamp, text in self.hook.follow_log(
                pod, self.trigger.namespace, HEAD_MAIN_CONTAINER, since_seconds=since, tail_lines=tail, follow=follow
            ):
                if self.state.on_log_line(stamp, text, uid):
                    read_any = True
                    self.changed.set()
            if failures is not None:
                failures.reset()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if failures is None:
                self.log.debug("log of %s: %s: %s", pod, type(error).__name__, error)
            else:  # a refusal or an unreachable kubelet, repeated, ends the wait: unread progress looks like a stall
                failures.record(pod, error, self.log)
        return read_any

    def _log_window(self, uid: str) -> tuple[int | None, int | None]:
        if self.state.log_cursor_pod_uid == uid and self.state.log_cursor:
            at = parse_time(self.state.log_cursor) or time.time()
            return max(1, math.ceil(time.time() - at) + 2), None
        if self.state.log_cursor_pod_uid is None and self.state.digest.steps_executed:
            return None, NO_CURSOR_TAIL_LINES  # adopted mid-run with no cursor
        return None, None  # a new head pod: its whole log is short and all of it matters

    async def _catch_up_log(self) -> None:
        """Fold the log's last lines (the final steps, the stop message) before reporting.

        A JobSet that ended before this trigger started (a task killed mid-run and run again, adopting it) is
        decided on at once: the pods' first list, which names the head pod, is waited for, or nothing is read."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FINAL_LOG_WAIT_SECONDS):  # not wait_for: see _decide_loop
                if self.state.head_pod is None and self.children:
                    await self.pods_listed.wait()
                pod, uid = self.state.head_pod, self.state.head_pod_uid
                if pod is not None and uid is not None:
                    await self._read_log(pod, uid, follow=False)


def replan_message(
    basis: ReplanBasis, found: Replan, *, failures: int, training_seconds: float, restart_seconds: float
) -> str:
    """Why the run is restarted with a shorter period, in figures."""
    return (
        f"{failures} slice failure{'s' if failures != 1 else ''} in {training_seconds / 60:.0f} min of training: an "
        f"MTBF of {found.mtbf_seconds / 60:.0f} min against the {basis.planned_mtbf_seconds / 60:.0f} min "
        f"checkpoint_period=auto planned for; checkpoint_period {basis.period} -> {found.period} saves "
        f"{found.net_gain_seconds:.0f} s over the rest of the run, net of a {restart_seconds:.0f} s restart"
    )


def _created(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("creationTimestamp") or "")


def _ever_admitted(workload: dict[str, Any] | None) -> bool:
    """Whether a Workload shows an admission, now or before: anything but a ``QuotaReserved`` that is not true.

    A Workload that has only waited carries no condition or ``QuotaReserved=False`` (reason ``Pending``); Kueue adds
    ``Admitted``, then on a preemption ``Evicted``, ``Preempted`` and ``Requeued``, and keeps them
    (kubernetes-sigs/kueue apis/kueue/v1beta2/workload_types.go). Anything else counts as admitted: the trigger
    then watches the JobSet's Jobs and pods, which only costs a subscription.
    """
    status = (workload or {}).get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for condition in conditions or []:
        if not isinstance(condition, dict):
            continue
        if condition.get("type") != QUOTA_RESERVED or str(condition.get("status")) == "True":
            return True
    return False


class _LogFailures:
    """Consecutive failures to read the head pod's log, and when they stop being a hiccup.

    A container not started yet (400) or a pod gone (404) is normal and retried quietly. A refusal (401/403:
    the Role lacks ``get pods/log``) or an API server that cannot reach the kubelet (5xx, connection errors)
    hides every progress line; retried a few times (a token being rotated, a kubelet restarting), it becomes a
    `ClusterAccessError` naming the permission or the kubelet, instead of a stall the policy would "mend".
    """

    def __init__(self, conn_id: str, namespace: str) -> None:
        self.conn_id, self.namespace = conn_id, namespace
        self.count = 0
        self.since = 0.0  # time.monotonic() of the first failure in the row

    def reset(self) -> None:
        self.count = 0

    def record(self, pod: str, error: BaseException, log: Any) -> None:
        from elastic_training.operators.hooks import REFUSAL_ADVICE, REFUSED_ATTEMPTS, ClusterAccessError

        status = getattr(error, "status", None)
        if status in (400, 404):
            self.count = 0
            log.debug("log of %s: HTTP %s (not started yet, or gone)", pod, status)
            return
        if self.count == 0:
            self.since = time.monotonic()
        self.count += 1
        log.warning("reading the log of %s failed (%d in a row): %s: %s", pod, self.count, type(error).__name__, error)
        if status in (401, 403):
            if self.count < REFUSED_ATTEMPTS:
                return
        elif self.count < LOG_UNREADABLE_ATTEMPTS or time.monotonic() - self.since < LOG_UNREADABLE_SECONDS:
            return
        if status in (401, 403):
            raise ClusterAccessError(
                f"connection {self.conn_id!r} may not get pods/log in namespace {self.namespace!r} (HTTP {status}, "
                f"{self.count} times in a row): the trainer's progress cannot be read; {REFUSAL_ADVICE[status]}"
            )
        raise ClusterAccessError(
            f"the log of pod {pod} in namespace {self.namespace!r} could not be read {self.count} times in a row "
            f"({type(error).__name__}: {str(error)[:300]}): the API server may not reach the node's kubelet; the "
            "trainer's progress cannot be read, so no stall is judged"
        )
