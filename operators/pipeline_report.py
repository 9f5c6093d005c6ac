"""Readable summaries of a pipeline run: the recovery timeline of the pretraining and each stage's result.

Pure functions over the values the stages leave in XCom (the pretraining run report described in
docs/operators.md, the drill's result, the checkpoint verdict, the gate's metrics, the dataset event),
shared by the fault-drill DAG's report task and ``elastic-training demo``. Nothing here is measured:
every line restates something a stage observed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

PHASES = ("wait_for_slices", "restore", "first_step", "total")
_PHASE_TITLES = {
    "wait_for_slices": "detection -> slices back",
    "restore": "restore from checkpoint",
    "first_step": "restore -> first step",
    "total": "detection -> first step",
}


def _seconds(value: Any) -> str:
    return "n/a" if not isinstance(value, int | float) else f"{value:.2f} s"


def recovery_summary(report: Mapping[str, Any], drill: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The recovery timeline of a pretraining run report, with the injected fault when there was one.

    Returns ``fault``, ``recoveries`` (each: ``failed_step``, ``restored_step``, ``steps_lost``,
    ``detection_seconds`` after the fault when known, ``phases``), ``steps_lost``, ``slice_restarts``,
    ``in_process_recoveries``, ``full_restarts``, ``escalations``, ``final_step`` and ``lines`` (text).
    """
    drill = drill or {}
    fault_at = drill.get("deleted_at") if drill.get("fired") else None
    lines: list[str] = []
    if drill.get("armed"):
        if drill.get("fired"):
            lines.append(
                f"fault: force-deleted worker pod {drill.get('pod')} (slice {drill.get('slice')}) "
                f"after step {drill.get('step_seen')} (asked: {drill.get('at_step')})"
            )
        else:
            lines.append(f"fault: armed for step {drill.get('at_step')} but not fired: {drill.get('reason')}")
    recoveries: list[dict[str, Any]] = []
    for number, recovery in enumerate(report.get("recoveries") or [], 1):
        phases = dict(recovery.get("phase_seconds") or {})
        detected = recovery.get("detected_at")
        detection = (
            round(detected - fault_at, 3)
            if isinstance(detected, int | float) and isinstance(fault_at, int | float)
            else None
        )
        item = {
            "failed_step": recovery.get("failed_step"),
            "restored_step": recovery.get("restored_step"),
            "steps_lost": recovery.get("steps_lost"),
            "slices": recovery.get("slices"),
            "complete": recovery.get("complete"),
            "detection_seconds": detection,
            "phases": {name: phases.get(name) for name in PHASES},
        }
        recoveries.append(item)
        lines.append(
            f"recovery {number}: in-process, failed at step {item['failed_step']}, restored step "
            f"{item['restored_step']}, {item['steps_lost']} steps lost, {item['slices']} slices after it"
        )
        if detection is not None:
            lines.append(f"  {'fault -> detection':<26}: {_seconds(detection)}")
        for name in PHASES:
            lines.append(f"  {_PHASE_TITLES[name]:<26}: {_seconds(phases.get(name))}")
    escalations = [dict(e) for e in report.get("escalations") or []]
    for escalation in escalations:
        lines.append(
            f"escalation: full restart ({escalation.get('reason')}): resumed from step "
            f"{escalation.get('resumed_from_step')}, {escalation.get('steps_lost')} steps lost, "
            f"{_seconds(escalation.get('seconds_to_recreate'))} to recreate"
        )
    if not recoveries and not escalations:
        lines.append("no recovery was needed")
    lines.append(
        f"slice restarts {report.get('slice_restarts', 0)}, in-process recoveries "
        f"{report.get('in_process_recoveries', 0)}, full restarts {report.get('full_restarts', 0)}, "
        f"steps lost {report.get('steps_lost', 0)}, final step {report.get('final_step')} of "
        f"{report.get('target_step')}"
    )
    return {
        "fault": dict(drill),
        "recoveries": recoveries,
        "steps_lost": report.get("steps_lost", 0),
        "slice_restarts": report.get("slice_restarts", 0),
        "in_process_recoveries": report.get("in_process_recoveries", 0),
        "full_restarts": report.get("full_restarts", 0),
        "escalations": escalations,
        "final_step": report.get("final_step"),
        "lines": lines,
    }


def stage_lines(stages: Sequence[tuple[str, str, float | None, str]]) -> list[str]:
    """One line per stage: name, state, duration and what it produced."""
    lines = []
    for name, state, seconds, result in stages:
        duration = "" if seconds is None else f"{seconds:6.1f} s"
        lines.append(f"  {name:<26} {state:<15} {duration:>8}  {result}")
    return lines


def _share(value: Any) -> str:
    return "n/a" if not isinstance(value, int | float) else f"{value:.3f}"


def time_summary(report: Mapping[str, Any], queue_name: str | None = None) -> list[str]:
    """Where a pretraining run's wall time went, and what its goodput is made of (text lines).

    ``goodput`` (run report) is the time of the steps kept over the time the run held capacity: the wall time
    less the time queued behind Kueue. A short run on the local cluster is mostly not steps: admission to the
    first step (pods scheduled and started, imports, compilation, a restore), the recoveries and checkpoint saves
    between steps, and the tail after the last step (the final save, shutdown, the JobSet's completion seen), so
    its goodput is low; these lines say which part took what.
    """
    wall = report.get("wall_seconds")
    queued = report.get("queued_seconds")
    goodput = report.get("goodput")
    holding = wall - (queued or 0.0) if isinstance(wall, int | float) else None
    kept = goodput * holding if isinstance(goodput, int | float) and holding is not None else None
    training = report.get("training_seconds")
    between = training - kept if isinstance(training, int | float) and kept is not None else None
    parts = [queued, report.get("admission_to_first_step_seconds"), training, report.get("tail_seconds")]
    known = [p for p in parts if isinstance(p, int | float)]
    rest = max(0.0, wall - sum(known)) if isinstance(wall, int | float) and len(known) == len(parts) else None
    behind = f"behind Kueue LocalQueue {queue_name}" if queue_name else "no Kueue queue"
    preemptions = len(report.get("preemptions") or [])
    lines = [
        f"time: {_seconds(wall)} wall ({behind}; {preemptions} preemption{'' if preemptions == 1 else 's'})",
        f"  {'queued before admission':<26}: {_seconds(queued)} (waiting for quota: no chips held, never a stall)",
        f"  {'admission -> first step':<26}: {_seconds(report.get('admission_to_first_step_seconds'))} "
        "(pods scheduled and started, imports, compilation, restore)",
        f"  {'first step -> last step':<26}: {_seconds(training)} ({_seconds(kept)} of steps kept; "
        f"{_seconds(between)} recoveries, checkpoint saves, steps run again)",
        f"  {'after the last step (tail)':<26}: {_seconds(report.get('tail_seconds'))} "
        "(final checkpoint save, shutdown, the JobSet's completion seen)",
        f"  {'other':<26}: {_seconds(rest)} (the operator's checks and launch; a full restart's recreation)",
        f"goodput {_share(goodput)} = {_seconds(kept)} of steps kept / {_seconds(holding)} holding capacity "
        f"(queue time apart); {_share(report.get('goodput_with_queue'))} over the whole wall time",
    ]
    return lines
