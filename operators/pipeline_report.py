"""Readable summaries of a pipeline run: the recovery timeline of the pretraining and each stage's result.

Pure functions over the values the stages leave in XCom (the pretraining run report described in
docs/operators.md, the drill's result, the checkpoint verdict, the gate's metrics, the dataset event),
shared by the fault-drill DAG's report task and ``elastic-training demo``. Nothing here is measured:
every line restates something a stage observed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from elastic_training.operators.run_report import PHASES, CapacityTimes, RecoveryEntry, RunReport

_PHASE_TITLES = {
    "wait_for_slices": "detection -> slices back",
    "restore": "restore from checkpoint",
    "first_step": "restore -> first step",
    "total": "detection -> first step",
}
__all__ = ["PHASES", "counted", "recovery_summary", "share", "stage_lines", "time_summary"]


def counted(number: Any, noun: str, plural: str | None = None) -> str:
    """``1 step``, ``2 steps``: a count with its noun, plural (``plural``, else ``noun`` + s) unless it is one."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def _seconds(value: Any) -> str:
    return "n/a" if not isinstance(value, int | float) else f"{value:.2f} s"


def _fault_lines(drill: Mapping[str, Any]) -> list[str]:
    """What the drill did: the pod it deleted and when, or why it did not fire."""
    if not drill.get("armed"):
        return []
    if drill.get("fired"):
        return [
            f"fault: force-deleted worker pod {drill.get('pod')} (slice {drill.get('slice')}) "
            f"after step {drill.get('step_seen')} (asked: {drill.get('at_step')})"
        ]
    return [f"fault: armed for step {drill.get('at_step')} but not fired: {drill.get('reason')}"]


def _recovery(number: int, recovery: RecoveryEntry, fault_at: Any) -> tuple[dict[str, Any], list[str]]:
    """One in-process recovery of the summary, and its lines: steps, detection after the fault, each phase."""
    detected = recovery.detected_at
    known = detected is not None and isinstance(fault_at, int | float) and detected >= fault_at
    # A recovery detected before the fault (slices that came up late at the start: a scale-up) is not its detection.
    detection = round(detected - fault_at, 3) if known else None
    phases = recovery.phase_seconds.to_json()
    item = {
        "failed_step": recovery.failed_step,
        "restored_step": recovery.restored_step,
        "steps_lost": recovery.steps_lost,
        "slices": recovery.slices,
        "complete": recovery.complete,
        "detection_seconds": detection,
        "phases": phases,
    }
    what = "scale-up in process (slices added)" if recovery.kind == "scale_up" else "in-process"
    lines = [
        f"recovery {number}: {what}, failed at step {item['failed_step']}, restored step {item['restored_step']}, "
        f"{counted(item['steps_lost'], 'step')} lost, {counted(item['slices'], 'slice')} after it"
    ]
    if detection is not None:
        lines.append(f"  {'fault -> detection':<26}: {_seconds(detection)}")
    lines += [f"  {_PHASE_TITLES[name]:<26}: {_seconds(phases[name])}" for name in PHASES]
    return item, lines


def recovery_summary(report: RunReport, drill: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The recovery timeline of a pretraining run report, with the injected fault when there was one.

    Returns ``fault``, ``recoveries`` (each: ``failed_step``, ``restored_step``, ``steps_lost``,
    ``detection_seconds`` after the fault when known, ``phases``), ``steps_lost``, ``slice_restarts``,
    ``in_process_recoveries``, ``full_restarts``, ``escalations``, ``final_step`` and ``lines`` (text).
    """
    drill = drill or {}
    fault_at = drill.get("deleted_at") if drill.get("fired") else None
    lines = _fault_lines(drill)
    recoveries: list[dict[str, Any]] = []
    for number, recovery in enumerate(report.recoveries, 1):
        item, item_lines = _recovery(number, recovery, fault_at)
        recoveries.append(item)
        lines += item_lines
    escalations = [e.to_json() for e in report.escalations]
    for escalation in report.escalations:
        lines.append(
            f"escalation: full restart ({escalation.reason}): resumed from step "
            f"{escalation.resumed_from_step}, {counted(escalation.steps_lost, 'step')} lost, "
            f"{_seconds(escalation.seconds_to_recreate)} to recreate"
        )
    if not recoveries and not escalations:
        lines.append("no recovery was needed")
    lines.append(
        f"slice restarts {report.slice_restarts}, in-process recoveries {report.in_process_recoveries}, full "
        f"restarts {report.full_restarts}, steps lost {report.steps_lost}, final step {report.final_step} of "
        f"{report.target_step}"
    )
    return {
        "fault": dict(drill),
        "recoveries": recoveries,
        "steps_lost": report.steps_lost,
        "slice_restarts": report.slice_restarts,
        "in_process_recoveries": report.in_process_recoveries,
        "full_restarts": report.full_restarts,
        "escalations": escalations,
        "final_step": report.final_step,
        "lines": lines,
    }


def stage_lines(stages: Sequence[tuple[str, str, float | None, str]]) -> list[str]:
    """One line per stage: name, state, duration and what it produced."""
    lines = []
    for name, state, seconds, result in stages:
        duration = "" if seconds is None else f"{seconds:6.1f} s"
        lines.append(f"  {name:<26} {state:<15} {duration:>8}  {result}")
    return lines


def share(value: Any) -> str:
    """A share such as goodput as the report prints it (``0.536``), ``n/a`` where it is not known."""
    return "n/a" if not isinstance(value, int | float) or isinstance(value, bool) else f"{value:.3f}"


def time_summary(report: RunReport, queue_name: str | None = None) -> list[str]:
    """Where a pretraining run's wall time went, and what its goodput is made of (text lines).

    ``goodput`` (run report) is the time of the steps kept over the time the run held capacity: the wall time
    less the time queued behind Kueue. A short run on the local cluster is mostly not steps: admission to the
    first step (pods scheduled and started, imports, compilation, a restore), the recoveries and checkpoint saves
    between steps, and the tail after the last step (the final save, shutdown, until the JobSet completed), so
    its goodput is low; these lines say which part took what. The wall time ends at the JobSet's end as Kubernetes
    stamps it when that is known: what follows, Airflow resuming the deferred task, holds no chips and is said apart.
    """
    times = report.capacity or CapacityTimes()
    known_times = report.capacity is not None
    wall = report.wall_seconds
    queued = times.queued_seconds if known_times else None
    goodput = report.goodput
    holding = wall - (queued or 0.0)
    kept = goodput * holding if goodput is not None else None
    training = times.training_seconds if known_times else None
    between = training - kept if training is not None and kept is not None else None
    to_first_step = times.admission_to_first_step_seconds
    parts = [queued, to_first_step, training, times.tail_seconds]
    known = [p for p in parts if p is not None]
    rest = max(0.0, wall - sum(known)) if len(known) == len(parts) else None
    behind = f"behind Kueue LocalQueue {queue_name}" if queue_name else "no Kueue queue"
    preemptions = len(report.preemptions)
    lines = [
        f"time: {_seconds(wall)} wall ({behind}; {preemptions} preemption{'' if preemptions == 1 else 's'})",
        f"  {'queued before admission':<26}: {_seconds(queued)} (waiting for quota: no chips held, never a stall)",
        f"  {'admission -> first step':<26}: {_seconds(to_first_step)} "
        "(pods scheduled and started, imports, compilation, restore)",
        f"  {'first step -> last step':<26}: {_seconds(training)} ({_seconds(kept)} of steps kept; "
        f"{_seconds(between)} recoveries, checkpoint saves, steps run again)",
        f"  {'after the last step (tail)':<26}: {_seconds(times.tail_seconds)} "
        "(final checkpoint save, shutdown, until the JobSet's completion)",
        f"  {'other':<26}: {_seconds(rest)} (the operator's checks and launch; a full restart's recreation)",
        f"goodput {share(goodput)} = {_seconds(kept)} of steps kept / {_seconds(holding)} holding capacity "
        f"(queue time apart); {share(report.goodput_with_queue)} over the whole wall time",
    ]
    if times.resume_seconds is not None:
        lines.append(
            f"then, no capacity held: {_seconds(times.resume_seconds)} from the JobSet's end to the report "
            "(Airflow resuming the deferred task, and any retry of it; outside the wall time and goodput)"
        )
    return lines
