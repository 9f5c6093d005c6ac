"""What the "Elastic training" view shows of one task, built from persisted data only. Pure: no I/O.

Inputs are what outlives every Airflow component: the run report the operator returned (XCom
``return_value``, or ``report`` when it failed; docs/operators.md), the ``elastic_run`` entry of the
task state store (JobSet name and uid, full restarts, escalations, incarnation history and the
trigger's monitor state), the verdicts on the run directory's checkpoints, and the local trainer's
``recoveries.jsonl``. While a run is still going there is no report yet: recoveries, budgets and
advice are then folded from the state store with the same functions the operator uses.

The step-over-time series is what the trainer did: the (time, step) points its log digest kept of
each incarnation (:attr:`operators.recovery.LogDigest.points`, thinned to a bounded count), with each
recovery's detection, restore and first step and each full restart's rewind, from the task's start to
its end. Only when no step was read from the log do checkpoint commit times stand in (``source``
says which). ``training`` says what kind of run it was (clean, in-process recoveries, full restarts,
trained nothing, or unknown when the log was not read) in words the page shows as they are, and
``startup`` splits the time before the first step into waiting for the trainer and its first
(compiling) step, so the page labels that span for what it is.

``capacity`` is the run's time in Kueue's hands and around its steps: where it stands now (queued, provisioning,
starting, training, recovering, preempted, evicted for another reason, deactivated, in no queue), Kueue's reason,
the time queued, from admission to the first step, training, and after the last step; the preemptions and every
other eviction (each with its ``eviction`` kind: a PodsReady timeout, a stopped queue, ...) with when and the steps
they cost. The timeline's ``spans`` draw the queue waits, the preemptions, the other evictions (kind ``evicted``,
named by their ``eviction``), the provisioning within a wait, the tail after the last step (final save,
shutdown, until the JobSet's end) and Airflow resuming the task after that end as spans of their own, so an idle
stretch is never read as training badput; each wait's
span carries its short name (``label``), the provisioning within it and, after an eviction, Kueue's words and the
steps it cost, so the page's waits table reads from the spans alone. The budgets show the PodsReady-timeout evictions
against ``max_pods_ready_evictions``; an eviction is never counted as one of MaxText's in-process retries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from elastic_training.operators import run_layout
from elastic_training.operators.advice import PeriodChoice
from elastic_training.operators.observations import MonitorState
from elastic_training.operators.period_replan import REPLAN_KEY
from elastic_training.operators.pool_avoidance import Avoidance
from elastic_training.operators.queueing import EvictionKind
from elastic_training.operators.recovery import (
    PREEMPTION,
    SCALE_UP,
    CostModel,
    Incarnation,
    LogDigest,
    capacity,
    first_step_span,
    preemption_report,
    recovery_report,
)
from elastic_training.operators.run_report import (
    BudgetAllowances,
    CapacityTimes,
    Escalation,
    PeriodReplan,
    PreemptionEntry,
    RecoveryEntry,
    ReportError,
    RunReport,
    escalations_of,
    period_choice_from_json,
)

JsonObj = dict[str, Any]


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def digests(state: Mapping[str, Any]) -> list[tuple[str, LogDigest, Mapping[str, Any]]]:
    """Each incarnation's JobSet name, folded log and counters: the closed ones, then the current one."""
    found: list[tuple[str, LogDigest, Mapping[str, Any]]] = []
    for item in state.get("history") or []:
        if isinstance(item, Mapping):
            found.append((str(item.get("jobset_name") or ""), LogDigest.from_json(item.get("digest")), item))
    monitor = state.get("monitor")
    if isinstance(monitor, Mapping) and state.get("jobset_name"):
        found.append((str(state["jobset_name"]), LogDigest.from_json(monitor.get("digest")), monitor))
    return found


def live_recoveries(state: Mapping[str, Any]) -> list[RecoveryEntry]:
    """Recoveries folded from the state store (no cost: the chip count is only in the report)."""
    return [
        dataclasses.replace(
            recovery_report(r, mean_step_seconds=digest.mean_step_seconds, costs=CostModel(chips=0)),
            cost=None,
            chip_seconds_lost=None,
        )
        for _, digest, _ in digests(state)
        for r in digest.all_recoveries
        if r.kind != PREEMPTION
    ]


def _monitor(state: Mapping[str, Any]) -> Mapping[str, Any]:
    monitor = state.get("monitor")
    return monitor if isinstance(monitor, Mapping) else {}


def _escalations(report: RunReport | None, state: Mapping[str, Any]) -> tuple[Escalation, ...]:
    """The report's escalations; while there is none (or it has none), the state store's."""
    if report is not None and report.escalations:
        return report.escalations
    stored = state.get("escalations")
    try:
        return escalations_of(stored) if isinstance(stored, list) else ()
    except ReportError:  # a state entry this release cannot read: no escalations shown, never a failed page
        return ()


def eviction_label(kind: str) -> str:
    """How the view names a Kueue eviction after an admission (a preemption when its kind is not known)."""
    return _EVICTION_LABELS[_eviction_kind(kind)]


_EVICTION_LABELS = {
    EvictionKind.PREEMPTED: "preemption",
    EvictionKind.PODS_READY_TIMEOUT: "evicted: pods not ready in time (Kueue's waitForPodsReady)",
    EvictionKind.QUEUE_STOPPED: "evicted: its Kueue queue was stopped",
    EvictionKind.ADMISSION_CHECK: "evicted: an admission check asked for a retry",
    EvictionKind.NODE_FAILURES: "evicted: node failures",
    EvictionKind.DEACTIVATED: "deactivated",
    EvictionKind.REQUEUING_LIMIT_EXCEEDED: "deactivated: Kueue's requeuing limit reached",
    EvictionKind.OTHER: "evicted by Kueue",
}
# The timeline's words for a wait, short enough to sit inside its span.
_EVICTION_SHORT = {
    EvictionKind.PREEMPTED: "preemption",
    EvictionKind.PODS_READY_TIMEOUT: "pods-ready timeout",
    EvictionKind.QUEUE_STOPPED: "queue stopped",
    EvictionKind.ADMISSION_CHECK: "admission check retry",
    EvictionKind.NODE_FAILURES: "node failures",
    EvictionKind.DEACTIVATED: "deactivated",
    EvictionKind.REQUEUING_LIMIT_EXCEEDED: "requeuing limit",
    EvictionKind.OTHER: "evicted",
}
QUEUED_FOR_QUOTA = "queued for quota"


def _eviction_kind(kind: str) -> EvictionKind:
    try:
        return EvictionKind(kind) if kind else EvictionKind.PREEMPTED
    except ValueError:
        return EvictionKind.OTHER


def _pods_ready_row(report: RunReport | None, allowed: BudgetAllowances, seen: list[Any]) -> JsonObj:
    """Kueue's evictions for a PodsReady timeout, against max_pods_ready_evictions (free of every restart budget)."""
    used = (
        report.pods_ready_evictions
        if report is not None
        else sum(d.evictions(EvictionKind.PODS_READY_TIMEOUT) for _, d, _ in seen)
    )
    recovery = allowed.pods_ready_recovery_timeout_seconds
    detail = "Kueue evictions for a PodsReady timeout; one more than allowed fails the run"
    if recovery is not None:
        detail += f" (Kueue's recoveryTimeout: {recovery:.0f} s)"
    return {"name": "pods-ready evictions", "used": used, "allowed": allowed.max_pods_ready_evictions, "detail": detail}


def budgets(report: RunReport | None, state: Mapping[str, Any]) -> list[JsonObj]:
    """Each budget, used against allowed (``allowed`` is ``None`` when the report did not carry it)."""
    allowed = report.budgets if report is not None else BudgetAllowances()
    monitor = _monitor(state)
    window = allowed.slice_restart_window_seconds
    times = sorted(t for t in monitor.get("slice_restart_times") or [] if _num(t) is not None)
    peak = _peak_in_window(times, window) if window else len(times)
    seen = digests(state)
    current = seen[-1][1] if seen else LogDigest()
    attempts = allowed.elastic_max_retries
    escalated = [e.reason for e in _escalations(report, state)]
    stall_timeout, startup_timeout = allowed.stall_timeout_seconds, allowed.startup_timeout_seconds
    jobset_restarts = (report.jobset_restarts if report is not None else 0) or _int(monitor.get("jobset_restarts"))
    return [
        {
            "name": "slice restarts in window",
            "used": peak,
            "allowed": allowed.max_slice_restarts,
            "detail": None if window is None else f"most slice restarts within any {window:.0f} s window",
        },
        {
            "name": "in-process retries",
            # a Kueue eviction is a new trainer after a re-admission, not one of MaxText's in-process attempts
            "used": sum(1 for r in current.all_recoveries if r.kind != PREEMPTION),
            "allowed": None if attempts is None else max(0, attempts - 1),
            "detail": "elastic_max_retries counts attempts, the first run included",
        },
        {
            "name": "JobSet restarts",
            "used": jobset_restarts or 0,
            "allowed": allowed.jobset_max_restarts,
            "detail": "failurePolicy.maxRestarts",
        },
        {
            "name": "full restarts",
            "used": report.full_restarts if report is not None else int(state.get("full_restarts") or 0),
            "allowed": allowed.max_full_restarts,
            "detail": "delete and recreate the JobSet, resuming from the last valid step",
        },
        {
            "name": "stalls",
            "used": escalated.count("stalled"),
            "allowed": None,
            "detail": None if stall_timeout is None else f"no progress for {stall_timeout:.0f} s escalates",
        },
        {
            "name": "start-ups timed out",
            "used": escalated.count("startup_timed_out"),
            "allowed": None,
            "detail": None
            if startup_timeout is None
            else f"a trainer not training {startup_timeout:.0f} s after its start escalates",
        },
        _pods_ready_row(report, allowed, seen),
    ]


@dataclass(frozen=True)
class _Capacity:
    """The run's time around its steps and in Kueue's hands, as the view shows it."""

    phase: str | None
    queue_reason: str | None
    times: CapacityTimes
    preemptions: tuple[PreemptionEntry, ...]

    def to_json(self) -> JsonObj:
        return {
            "phase": self.phase,
            "queue_reason": self.queue_reason,
            **self.times.to_json(),
            "preemptions": [
                {
                    **p.to_json(),
                    "label": eviction_label(p.eviction),
                    "short": _EVICTION_SHORT[_eviction_kind(p.eviction)],
                }
                for p in self.preemptions
            ],
        }


def _capacity(report: RunReport | None, state: Mapping[str, Any], now: float | None) -> _Capacity:
    """From the report when it measured them, else folded from the state store with the operator's functions."""
    seen = digests(state)
    times = capacity([Incarnation(name, 0, 0, d) for name, d, _ in seen], now)
    preemptions = tuple(
        preemption_report(r, mean_step_seconds=d.mean_step_seconds, costs=CostModel(chips=0))
        for _, d, _ in seen
        for r in d.all_recoveries
        if r.kind == PREEMPTION
    )
    if report is not None and report.capacity is not None:
        times, preemptions = report.capacity, report.preemptions
    phase, reason = None, ""
    monitor = state.get("monitor")
    if isinstance(monitor, Mapping):
        folded = MonitorState.from_json(monitor)
        phase = folded.run_phase(now if now is not None else folded.started_at).value
        reason = folded.queue_reason
    return _Capacity("ended" if report is not None else phase, reason or None, times, preemptions)


def capacity_view(report: RunReport | None, state: Mapping[str, Any], now: float | None) -> JsonObj:
    """The run's time around its steps and in Kueue's hands: from the report, else folded from the state store."""
    return _capacity(report, state, now).to_json()


def _spans(cap: _Capacity, ended_at: float | None) -> list[JsonObj]:
    """The timeline's spans: each wait for Kueue (queued for quota, preempted, or evicted for another reason, which the
    span names with Kueue's words and the steps it cost; within it, provisioning: quota reserved and the admission
    checks pending, with what the checks said), the tail after the last step and Airflow's resume of the task after
    the JobSet's end. ``label`` is the span's short name."""
    evicted_at = {p.at: p for p in cap.preemptions}
    provisioning: list[JsonObj] = []
    for start, done in cap.times.provisioning_spans:  # within a wait: quota reserved, capacity being provisioned
        end = done if done is not None else ended_at
        if end is not None:
            said = [note for at, note in cap.times.provisioning_notes if start <= at <= end]
            seconds = round(max(0.0, end - start), 3)
            provisioning.append(
                {
                    "kind": "provisioning",
                    "from": start,
                    "to": end,
                    "seconds": seconds,
                    "label": "provisioning",
                    "said": said,
                }
            )
    found: list[JsonObj] = []
    for start, admitted in cap.times.queue_spans:
        end = admitted if admitted is not None else ended_at
        if end is None:
            continue
        span: JsonObj = {"kind": "queued", "from": start, "to": end, "seconds": round(max(0.0, end - start), 3)}
        span["label"] = QUEUED_FOR_QUOTA
        said = [note for at, note in cap.times.queue_notes if start <= at <= end]
        if said:
            span["reason"] = "; ".join(dict.fromkeys(said))
        inside = sum(max(0.0, min(p["to"], end) - max(p["from"], start)) for p in provisioning)
        span["provisioning_seconds"] = round(inside, 3)
        entry = evicted_at.get(start)
        if entry is not None:
            kind = _eviction_kind(entry.eviction)
            span["kind"] = "preempted" if kind is EvictionKind.PREEMPTED else "evicted"
            span["eviction"] = eviction_label(entry.eviction)
            span["eviction_kind"] = kind.value
            span["label"] = _EVICTION_SHORT[kind]
            span.update(reason=entry.reason, step=entry.step, steps_lost=entry.steps_lost)
        found.append(span)
    found.extend(provisioning)
    return found + _after_the_last_step(cap.times, ended_at)


def _after_the_last_step(times: CapacityTimes, ended_at: float | None) -> list[JsonObj]:
    """The tail after the last step and, after the JobSet's end, Airflow resuming the task."""
    found: list[JsonObj] = []
    last, tail, resume = times.last_step_at, times.tail_seconds, times.resume_seconds
    if last is None:
        return found
    # The report's own tail: the task's end date comes a moment after the report.
    end = last + tail if tail is not None else ended_at
    if end is not None and end > last:
        found.append(
            {"kind": "tail", "from": last, "to": end, "seconds": round(end - last, 3), "label": "after the last step"}
        )
    if tail is not None and resume:
        to = round(last + tail + resume, 3)
        found.append(
            {"kind": "resume", "from": last + tail, "to": to, "seconds": resume, "label": "Airflow resuming the task"}
        )
    return found


def _peak_in_window(times: Sequence[float], window: float) -> int:
    peak, start = 0, 0
    for end, t in enumerate(times):
        while t - times[start] >= window:
            start += 1
        peak = max(peak, end - start + 1)
    return peak


class _Line:
    """The timeline being drawn: points ``(t, order, step)``, failure markers and rewinds.

    ``order`` keeps a rewind's two points (the failed step, then the restored one) in sequence at one time.
    """

    def __init__(self) -> None:
        self.points: list[tuple[float, int, int]] = []
        self.failures: list[JsonObj] = []
        self.rewinds: list[JsonObj] = []

    def failure(self, at: float, step: int | None, kind: str) -> None:
        self.failures.append({"t": at, "step": step, "kind": kind})
        if step is not None:
            self.points.append((at, 1, step))

    def rewind(self, at: float, from_step: int | None, to_step: int, *, hold: bool = True) -> None:
        """The line back from ``from_step`` to ``to_step`` at ``at``; ``hold``: level at ``from_step`` until then."""
        if hold and from_step is not None:
            self.points.append((at, 0, from_step))
        self.points.append((at, 2, to_step))
        self.rewinds.append({"t": at, "from_step": from_step, "to_step": to_step})

    def recovery(self, r: RecoveryEntry) -> None:
        if r.detected_at is not None:
            self.failure(r.detected_at, r.failed_step, "scale up" if r.kind == SCALE_UP else "slice failure")
        if r.restored_at is not None:
            back = r.restored_step if r.restored_step is not None else -1
            self.rewind(r.restored_at, r.failed_step, back)
            if r.first_step_at is not None:
                self.points.append((r.first_step_at, 1, back + 1))

    def preemption(self, p: PreemptionEntry) -> None:
        if p.at is None:
            return
        self.failure(p.at, p.step, eviction_label(p.eviction))
        if p.restored_at is not None and p.restored_step is not None:
            self.rewind(p.restored_at, p.step, p.restored_step)

    def escalation(self, e: Escalation) -> None:
        if e.at is None:
            return
        self.failure(e.at, e.latest_step, f"full restart ({e.reason})")
        if e.resumed_from_step is not None:
            # From the delete to the new incarnation the line slopes: no step ran, none is held.
            self.rewind(e.at + (e.seconds_to_recreate or 0.0), e.latest_step, e.resumed_from_step, hold=False)

    def commits(
        self, checkpoints: Sequence[Mapping[str, Any]], started_at: float | None, ended_at: float | None
    ) -> None:
        """Checkpoint commits as the line's points, those outside the task left out (an earlier run's steps)."""
        for ckpt in checkpoints:
            at, step = _num(ckpt.get("committed_at")), _int(ckpt.get("step"))
            if at is None or step is None:
                continue
            if (started_at is not None and at < started_at) or (ended_at is not None and at > ended_at):
                continue
            self.points.append((at, 1, step))


def timeline(
    *,
    started_at: float | None,
    ended_at: float | None,
    final_step: int | None,
    recoveries: Sequence[RecoveryEntry],
    escalations: Sequence[Escalation],
    checkpoints: Sequence[Mapping[str, Any]],
    steps: Sequence[tuple[float, int]] = (),
    preemptions: Sequence[PreemptionEntry] = (),
    spans: Sequence[Mapping[str, Any]] = (),
) -> JsonObj:
    """Steps over time: points ``[t, step]``, failure markers and rewinds (from ``failed_step`` to the restored one).

    ``steps`` are the trainer's own (time, step) points; checkpoint commits stand in only without them.
    """
    line = _Line()
    if started_at is not None:
        line.points.append((started_at, 0, -1))
    line.points.extend((t, 1, n) for t, n in steps)
    if not steps:
        line.commits(checkpoints, started_at, ended_at)
    for r in recoveries:
        line.recovery(r)
    for p in preemptions:
        line.preemption(p)
    for e in escalations:
        line.escalation(e)
    if ended_at is not None and final_step is not None:
        line.points.append((ended_at, 3, final_step))
    points = sorted(line.points, key=lambda p: (p[0], p[1]))
    return {
        "points": [[round(t, 3), s] for t, _, s in points],
        "failures": line.failures,
        "rewinds": line.rewinds,
        "spans": [dict(span) for span in spans],
        "source": "trainer log" if steps else "checkpoints" if len(points) > 1 else None,
    }


def training(
    *,
    finished: bool,
    report: RunReport | None,
    digests_seen: Sequence[LogDigest],
    recoveries: int,
    full_restarts: int,
    final_step: int | None,
    evictions: int = 0,
) -> JsonObj:
    """What kind of run it was, in a sentence: clean, recovered, restarted, trained nothing, or unknown; Kueue's
    ``evictions`` (preemptions included) are said beside its own failures, never read as none."""
    executed = sum(d.steps_executed for d in digests_seen)
    resumed = next((d.resumed_from_step for d in digests_seen if d.resumed_from_step is not None), None)
    if report is not None:
        executed = report.steps_executed
    if executed == 0 and resumed is not None and resumed >= 0 and (final_step is None or final_step == resumed):
        note = f"Resumed at step {resumed} and trained nothing"
        note += ": that step was already the final one." if final_step == resumed else " yet."
        return {"kind": "nothing", "steps_executed": 0, "resumed_from_step": resumed, "note": note}
    if executed == 0:
        note = "No step of the trainer was read from its log"
        note += " (goodput and step time are unknown)." if finished else " yet."
        return {"kind": "unknown", "steps_executed": 0, "resumed_from_step": resumed, "note": note}
    start = "from scratch" if resumed in (None, -1) else f"resuming at step {resumed}"
    kind = "restarted" if full_restarts else "recovered" if recoveries else "clean"
    evicted = f"{evictions} Kueue eviction{'' if evictions == 1 else 's'}" if evictions else ""
    what = {
        "clean": f"with no failure of its own and {evicted}" if evicted else "with no failure",
        "recovered": f"with {recoveries} in-process recover{'y' if recoveries == 1 else 'ies'}",
        "restarted": f"with {full_restarts} full restart{'' if full_restarts == 1 else 's'}"
        + (f" and {recoveries} in-process recover{'y' if recoveries == 1 else 'ies'}" if recoveries else ""),
    }[kind]
    if evicted and kind != "clean":
        what += f" and {evicted}"
    verb = "Trained" if finished else "Training:"
    return {
        "kind": kind,
        "steps_executed": executed,
        "resumed_from_step": resumed,
        "note": f"{verb} {executed} step{'' if executed == 1 else 's'} {start}, {what}.",
    }


def startup(
    started_at: float | None, first: LogDigest | None, report: RunReport | None = None, now: float | None = None
) -> JsonObj | None:
    """The time before the first step: the trainer starting (pods, image, runtime), then its first step (compile).

    It counts from the admission: a wait in Kueue's queue before it is queue time (``capacity``), not start-up.
    The span is :func:`operators.recovery.first_step_span`'s, the one the report's
    ``admission_to_first_step_seconds`` holds, so the chart's start-up and the capacity line say one number.
    """
    if first is None or first.first_step_at is None:
        return None
    end = now if now is not None else first.first_step_at
    span = first_step_span(first, end, started_at=started_at)
    if span is None:
        return None
    start, total = span
    reported = report.capacity.admission_to_first_step_seconds if report and report.capacity else None
    if reported is not None and first.first_admitted_at is not None:
        total = reported  # the report's number, made when the run ended, is the one the capacity line shows
    step_seconds = first.first_step_seconds or 0.0
    return {
        "seconds": round(total, 3),
        "from": round(start, 3),
        "first_step_seconds": round(step_seconds, 3),
        "before_first_step_seconds": round(max(0.0, total - step_seconds), 3),
    }


def plan(report: RunReport | None, state: Mapping[str, Any]) -> JsonObj:
    """What the run decided from earlier runs before its launch, when it decided anything.

    ``node_pool_avoidance`` (``avoid_failing_node_pools``: the pools avoided, the failing ones, why) is ``None``
    when the option was off; ``checkpoint_period_choice`` (``checkpoint_period="auto"``: the period, its bounds,
    the goodput predicted and, once the run ended, achieved) is ``None`` for a fixed period;
    ``checkpoint_period_replan`` (the restart with a shorter period the run's own failures called for, and why) is
    ``None`` when there was none. From the report; while there is none, from the plan the operator keeps in the task
    state store.
    """
    avoidance: Avoidance | None = None
    choice: PeriodChoice | None = None
    achieved: float | None = None
    replanned: PeriodReplan | None = None
    if report is not None:
        avoidance, choice, achieved = report.node_pool_avoidance, report.checkpoint_period_choice, report.goodput
        replanned = report.checkpoint_period_replan
    elif isinstance(stored := state.get("plan"), Mapping):
        avoidance = Avoidance.from_json(stored.get("node_pool_avoidance"))
        try:
            choice = period_choice_from_json(stored.get("checkpoint_period_choice"))
        except ReportError:  # a plan this release cannot read: shown as none, never a failed page
            choice = None
        try:
            replanned = PeriodReplan.from_json(stored.get(REPLAN_KEY))
        except ReportError:
            replanned = None
    return {
        "node_pool_avoidance": avoidance.to_json() if avoidance is not None and avoidance.enabled else None,
        "checkpoint_period_choice": None if choice is None else {**choice.to_json(), "achieved_goodput": achieved},
        REPLAN_KEY: None if replanned is None else replanned.to_json(),
    }


@dataclass(frozen=True)
class _Seen:
    """What the view folds from the state store and the report, shared by its parts."""

    report: RunReport | None
    state: Mapping[str, Any]
    monitor: Mapping[str, Any]
    live: list[tuple[str, LogDigest, Mapping[str, Any]]]
    recoveries: list[RecoveryEntry]
    escalations: tuple[Escalation, ...]

    @property
    def current(self) -> LogDigest:
        return self.live[-1][1] if self.live else LogDigest()

    @property
    def every(self) -> list[LogDigest]:
        return [d for _, d, _ in self.live]


def _seen(report: RunReport | None, state: Mapping[str, Any]) -> _Seen:
    return _Seen(
        report=report,
        state=state,
        monitor=_monitor(state),
        live=digests(state),
        recoveries=list(report.recoveries) if report is not None and report.recoveries else live_recoveries(state),
        escalations=_escalations(report, state),
    )


def _jobset(seen: _Seen) -> JsonObj:
    report, state, monitor = seen.report, seen.state, seen.monitor
    return {
        "name": (report.jobset_name if report else None) or state.get("jobset_name"),
        "uid": state.get("jobset_uid"),
        "namespace": report.namespace if report else None,
        "incarnations": list(report.jobsets) if report and report.jobsets else [name for name, _, _ in seen.live],
        "phase": monitor.get("phase"),
        "failure_detail": monitor.get("failure_detail") or None,
    }


def _counts(seen: _Seen, cap: _Capacity) -> JsonObj:
    report = seen.report
    return {
        "slice_restarts": report.slice_restarts if report else _int(seen.monitor.get("slice_restarts")),
        "recoveries": len(seen.recoveries),
        "full_restarts": report.full_restarts if report else _int(seen.state.get("full_restarts")),
        "steps_lost": report.steps_lost if report else None,
        "preemptions": sum(1 for p in cap.preemptions if p.eviction in ("", EvictionKind.PREEMPTED)),
        "pods_ready_evictions": sum(1 for p in cap.preemptions if p.eviction == EvictionKind.PODS_READY_TIMEOUT),
        "evictions": len(cap.preemptions),
    }


def _goodput(seen: _Seen, cap: _Capacity, steps_executed: int) -> JsonObj:
    report = seen.report
    mean_step = report.mean_step_seconds if report else None
    return {
        "goodput": report.goodput if report else None,
        "goodput_with_queue": report.goodput_with_queue if report else None,
        "queued_seconds": cap.times.queued_seconds,
        "wall_seconds": report.wall_seconds if report else None,
        "mean_step_seconds": mean_step if mean_step is not None else _mean_of(seen.every),
        "steps_executed": steps_executed,
        "startup_step_seconds": report.startup_step_seconds if report else None,
        "chips": report.chips if report else None,
        "price_per_chip_hour": report.price_per_chip_hour if report else None,
        "chip_seconds_lost": report.chip_seconds_lost if report else None,
        "cost_lost": report.cost_lost if report else None,
    }


def _progress(seen: _Seen, rendered: Mapping[str, Any]) -> JsonObj:
    final_step = seen.report.final_step if seen.report else None
    target = seen.report.target_step if seen.report else None
    rendered_steps = _as_int(rendered.get("steps"))
    if target is None and rendered_steps is not None:
        target = rendered_steps - 1
    latest = seen.current.latest_step
    return {
        "current_step": final_step if final_step is not None and final_step >= 0 else latest,
        "target_step": target,
        "final_step": final_step,
    }


def _line(
    seen: _Seen,
    cap: _Capacity,
    *,
    started: float | None,
    ended: float | None,
    now: float | None,
    nothing: bool,
    checkpoints: Sequence[Mapping[str, Any]],
) -> JsonObj:
    """The timeline, or an empty one for a run that trained nothing (a line from start to end would draw training)."""
    if nothing:
        return {"points": [], "failures": [], "rewinds": [], "spans": [], "source": None}
    final_step = seen.report.final_step if seen.report else None
    return timeline(
        started_at=started,
        ended_at=ended,
        final_step=final_step if final_step is not None and final_step >= 0 else None,
        recoveries=seen.recoveries,
        escalations=seen.escalations,
        steps=sorted(p for d in seen.every for p in d.points),
        preemptions=cap.preemptions,
        spans=_spans(cap, ended if ended is not None else now),
        checkpoints=checkpoints,
    )


def run_view(
    *,
    task: Mapping[str, Any],
    report: RunReport | None,
    state: Mapping[str, Any] | None,
    checkpoints: Mapping[str, Any] | None,
    recovery_records: Sequence[Mapping[str, Any]] = (),
    rendered: Mapping[str, Any] | None = None,
    now: float | None = None,
) -> JsonObj:
    """Everything the view shows of one elastic task; every part may be missing, none raises.

    ``now`` (Unix time) says where a run still going stands and closes an open queue wait; default: its end.
    """
    seen = _seen(report, state or {})
    rendered = rendered or {}
    started = _num(seen.state.get("started_at")) or _num(task.get("start_ts"))
    ended = _num(task.get("end_ts"))
    cap = _capacity(report, seen.state, now if now is not None else ended)
    kind = training(
        finished=report is not None,
        report=report,
        digests_seen=seen.every,
        recoveries=len(seen.recoveries),
        full_restarts=(report.full_restarts if report else _int(seen.state.get("full_restarts"))) or 0,
        final_step=report.final_step if report else None,
        evictions=len(cap.preemptions),
    )
    steps = [c for c in (checkpoints or {}).get("steps") or [] if isinstance(c, Mapping)]
    advice = report.advice if report is not None else None
    return {
        **dict(task),
        "jobset": _jobset(seen),
        "slices": {
            "configured": _as_int(rendered.get("num_slices")),
            "live": seen.current.live_slices,
            "restarts_by_slice": dict(seen.monitor.get("slice_restarts_by_slice") or {}),
        },
        "progress": _progress(seen, rendered),
        "run_directory": (report.run_directory if report else None) or _run_directory(rendered),
        "report_available": report is not None,
        "failure": report.failure if report else None,
        "history": {"key": report.history_key, "notes": list(report.history_notes)} if report else None,
        "counts": _counts(seen, cap),
        "capacity": cap.to_json(),
        "budgets": budgets(report, seen.state),
        "recoveries": [r.to_json() for r in seen.recoveries],
        "recovery_records": list(recovery_records),
        "escalations": [e.to_json() for e in seen.escalations],
        "checkpoints": checkpoints,
        "goodput": _goodput(seen, cap, kind["steps_executed"]),
        "advice": None if advice is None else advice.to_json(),
        "plan": plan(report, seen.state),
        "training": kind,
        "startup": startup(started, seen.every[0] if seen.every else None, report, now),
        "timeline": _line(
            seen, cap, started=started, ended=ended, nothing=kind["kind"] == "nothing", now=now, checkpoints=steps
        ),
    }


def _mean_of(seen: Sequence[LogDigest]) -> float | None:
    steady = sum(d.steps_executed - d.startup_steps for d in seen)
    if steady > 0:
        return max(0.0, sum(d.step_seconds_total - d.startup_step_seconds for d in seen)) / steady
    executed = sum(d.steps_executed for d in seen)
    return sum(d.step_seconds_total for d in seen) / executed if executed else None


def _as_int(value: Any) -> int | None:
    try:
        return int(str(value).strip()) if value is not None and not isinstance(value, bool) else None
    except ValueError:
        return None


def _run_directory(rendered: Mapping[str, Any]) -> str | None:
    base, name = rendered.get("base_output_directory"), rendered.get("run_name")
    if isinstance(base, str) and isinstance(name, str) and base and name:
        return run_layout.run_directory(base, name)
    return None


def summary(view: Mapping[str, Any]) -> JsonObj:
    """One row of the recent-runs list."""
    keys = ("dag_id", "run_id", "task_id", "map_index", "state", "start_date", "end_date")
    return {
        **{k: view.get(k) for k in keys},
        "current_step": view["progress"]["current_step"],
        "target_step": view["progress"]["target_step"],
        "slice_restarts": view["counts"]["slice_restarts"],
        "full_restarts": view["counts"]["full_restarts"],
        "recoveries": view["counts"]["recoveries"],
        "goodput": view["goodput"]["goodput"],
        "queued_seconds": view["capacity"].get("queued_seconds"),
        "preemptions": view["counts"]["preemptions"],
        "phase": view["capacity"].get("phase"),
        "jobset": view["jobset"]["name"],
        "training": view["training"]["kind"],
    }
