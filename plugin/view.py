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

``capacity`` is the run's time in Kueue's hands and around its steps: where it stands now (queued, starting,
training, recovering, preempted, in no queue), Kueue's reason, the time queued, from admission to the first step,
training, and after the last step; the preemptions with when and the steps they cost. The timeline's ``spans``
draw the queue waits, the preemptions and the tail after the last step (final save, shutdown, completion seen)
as spans of their own, so an idle stretch is never read as training badput.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from elastic_training.operators import run_layout
from elastic_training.operators.advice import advice_for_report
from elastic_training.operators.observations import MonitorState
from elastic_training.operators.recovery import (
    PREEMPTION,
    SCALE_UP,
    CostModel,
    Incarnation,
    LogDigest,
    capacity,
    preemption_report,
    recovery_report,
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


def live_recoveries(state: Mapping[str, Any]) -> list[JsonObj]:
    """Recoveries folded from the state store (no cost: the chip count is only in the report)."""
    recoveries: list[JsonObj] = []
    for _, digest, _ in digests(state):
        recoveries.extend(
            recovery_report(r, mean_step_seconds=digest.mean_step_seconds, costs=CostModel(chips=0))
            for r in digest.all_recoveries
            if r.kind != PREEMPTION
        )
    for recovery in recoveries:
        recovery["cost"] = recovery["chip_seconds_lost"] = None
    return recoveries


def budgets(report: Mapping[str, Any] | None, state: Mapping[str, Any]) -> list[JsonObj]:
    """Each budget, used against allowed (``allowed`` is ``None`` when the report did not carry it)."""
    allowed = (report or {}).get("budgets") or {}
    monitor = state.get("monitor") if isinstance(state.get("monitor"), Mapping) else {}
    window = _num(allowed.get("slice_restart_window_seconds"))
    times = sorted(t for t in (monitor or {}).get("slice_restart_times") or [] if _num(t) is not None)
    peak = _peak_in_window(times, window) if window else len(times)
    current = digests(state)[-1][1] if digests(state) else LogDigest()
    elastic_attempts = _int(allowed.get("elastic_max_retries"))
    escalations = (report or {}).get("escalations") or state.get("escalations") or []
    stalls = sum(1 for e in escalations if isinstance(e, Mapping) and e.get("reason") == "stalled")
    full = _int((report or {}).get("full_restarts"))
    return [
        {
            "name": "slice restarts in window",
            "used": peak,
            "allowed": _int(allowed.get("max_slice_restarts")),
            "detail": None if window is None else f"most slice restarts within any {window:.0f} s window",
        },
        {
            "name": "in-process retries",
            "used": len(current.all_recoveries),
            "allowed": None if elastic_attempts is None else max(0, elastic_attempts - 1),
            "detail": "elastic_max_retries counts attempts, the first run included",
        },
        {
            "name": "JobSet restarts",
            "used": _int((report or {}).get("jobset_restarts")) or _int((monitor or {}).get("jobset_restarts")) or 0,
            "allowed": _int(allowed.get("jobset_max_restarts")),
            "detail": "failurePolicy.maxRestarts",
        },
        {
            "name": "full restarts",
            "used": full if full is not None else int(state.get("full_restarts") or 0),
            "allowed": _int(allowed.get("max_full_restarts")),
            "detail": "delete and recreate the JobSet, resuming from the last valid step",
        },
        {
            "name": "stalls",
            "used": stalls,
            "allowed": None,
            "detail": None
            if allowed.get("stall_timeout_seconds") is None
            else f"no progress for {float(allowed['stall_timeout_seconds']):.0f} s escalates",
        },
    ]


def capacity_view(report: Mapping[str, Any] | None, state: Mapping[str, Any], now: float | None) -> JsonObj:
    """The run's time around its steps and in Kueue's hands: from the report, else folded from the state store."""
    monitor = state.get("monitor") if isinstance(state.get("monitor"), Mapping) else None
    seen = digests(state)
    times = capacity([Incarnation(name, 0, 0, d) for name, d, _ in seen], now)
    preemptions = [
        preemption_report(r, mean_step_seconds=d.mean_step_seconds, costs=CostModel(chips=0))
        for _, d, _ in seen
        for r in d.all_recoveries
        if r.kind == PREEMPTION
    ]
    if report is not None and "queued_seconds" in report:
        keys = ("queued_seconds", "admission_to_first_step_seconds", "training_seconds", "tail_seconds")
        times = {**times, **{k: report.get(k) for k in (*keys, "last_step_at", "queue_spans")}}
        preemptions = [dict(p) for p in report.get("preemptions") or [] if isinstance(p, Mapping)]
    phase, reason = None, ""
    if monitor is not None:
        folded = MonitorState.from_json(monitor)
        phase = folded.run_phase(now if now is not None else folded.started_at).value
        reason = folded.queue_reason
    return {
        "phase": "ended" if report is not None else phase,
        "queue_reason": reason or None,
        **times,
        "preemptions": preemptions,
    }


def _spans(cap: Mapping[str, Any], ended_at: float | None) -> list[JsonObj]:
    """The timeline's spans: each wait for Kueue (queued, or preempted) and the tail after the last step."""
    preempted_at = {_num(p.get("at")) for p in cap.get("preemptions") or []}
    found: list[JsonObj] = []
    for span in cap.get("queue_spans") or []:
        if not isinstance(span, Sequence) or len(span) != 2:
            continue
        start, end = _num(span[0]), _num(span[1]) if span[1] is not None else ended_at
        if start is None or end is None:
            continue
        kind = "preempted" if start in preempted_at else "queued"
        found.append({"kind": kind, "from": start, "to": end, "seconds": round(max(0.0, end - start), 3)})
    last, tail = _num(cap.get("last_step_at")), _num(cap.get("tail_seconds"))
    if last is not None and tail is not None:
        ended_at = last + tail  # the report's own tail: the task's end date comes a moment after the report
    if last is not None and ended_at is not None and ended_at > last:
        found.append({"kind": "tail", "from": last, "to": ended_at, "seconds": round(ended_at - last, 3)})
    return found


def _peak_in_window(times: Sequence[float], window: float) -> int:
    peak, start = 0, 0
    for end, t in enumerate(times):
        while t - times[start] >= window:
            start += 1
        peak = max(peak, end - start + 1)
    return peak


def timeline(
    *,
    started_at: float | None,
    ended_at: float | None,
    final_step: int | None,
    recoveries: Sequence[Mapping[str, Any]],
    escalations: Sequence[Mapping[str, Any]],
    checkpoints: Sequence[Mapping[str, Any]],
    steps: Sequence[tuple[float, int]] = (),
    preemptions: Sequence[Mapping[str, Any]] = (),
    spans: Sequence[Mapping[str, Any]] = (),
) -> JsonObj:
    """Steps over time: points ``[t, step]``, failure markers and rewinds (from ``failed_step`` to the restored one).

    ``steps`` are the trainer's own (time, step) points; checkpoint commits stand in only without them.
    """
    points: list[tuple[float, int, int]] = []  # (t, order, step): order keeps a rewind's two points in sequence
    if started_at is not None:
        points.append((started_at, 0, -1))
    points.extend((t, 1, n) for t, n in steps)
    for ckpt in checkpoints if not steps else ():
        at, step = _num(ckpt.get("committed_at")), _int(ckpt.get("step"))
        outside = (started_at is not None and at is not None and at < started_at) or (
            ended_at is not None and at is not None and at > ended_at
        )  # a step left from an earlier run of the same run directory
        if at is not None and step is not None and not outside:
            points.append((at, 1, step))
    failures: list[JsonObj] = []
    rewinds: list[JsonObj] = []
    for r in recoveries:
        detected, failed = _num(r.get("detected_at")), _int(r.get("failed_step"))
        restored_at, restored = _num(r.get("restored_at")), _int(r.get("restored_step"))
        first_at = _num(r.get("first_step_at"))
        if detected is not None:
            kind = "scale up" if r.get("kind") == SCALE_UP else "slice failure"
            failures.append({"t": detected, "step": failed, "kind": kind})
            if failed is not None:
                points.append((detected, 1, failed))
        if restored_at is not None:
            back = restored if restored is not None else -1
            if failed is not None:
                points.append((restored_at, 0, failed))
            points.append((restored_at, 2, back))
            rewinds.append({"t": restored_at, "from_step": failed, "to_step": back})
            if first_at is not None:
                points.append((first_at, 1, back + 1))
    for p in preemptions:
        at, step = _num(p.get("at")), _int(p.get("step"))
        restored_at, restored = _num(p.get("restored_at")), _int(p.get("restored_step"))
        if at is None:
            continue
        failures.append({"t": at, "step": step, "kind": "preemption"})
        if step is not None:
            points.append((at, 1, step))
        if restored_at is not None and restored is not None:
            if step is not None:
                points.append((restored_at, 0, step))
            points.append((restored_at, 2, restored))
            rewinds.append({"t": restored_at, "from_step": step, "to_step": restored})
    for e in escalations:
        at, latest, resumed = _num(e.get("at")), _int(e.get("latest_step")), _int(e.get("resumed_from_step"))
        if at is None:
            continue
        failures.append({"t": at, "step": latest, "kind": f"full restart ({e.get('reason')})"})
        if latest is not None:
            points.append((at, 1, latest))
        if resumed is not None:
            again = at + (_num(e.get("seconds_to_recreate")) or 0.0)
            points.append((again, 2, resumed))
            rewinds.append({"t": again, "from_step": latest, "to_step": resumed})
    if ended_at is not None and final_step is not None:
        points.append((ended_at, 3, final_step))
    points.sort(key=lambda p: (p[0], p[1]))
    return {
        "points": [[round(t, 3), s] for t, _, s in points],
        "failures": failures,
        "rewinds": rewinds,
        "spans": [dict(span) for span in spans],
        "source": "trainer log" if steps else "checkpoints" if len(points) > 1 else None,
    }


def training(
    *,
    finished: bool,
    report: Mapping[str, Any] | None,
    digests_seen: Sequence[LogDigest],
    recoveries: int,
    full_restarts: int,
    final_step: int | None,
) -> JsonObj:
    """What kind of run it was, in a sentence: clean, recovered, restarted, trained nothing, or unknown."""
    executed = sum(d.steps_executed for d in digests_seen)
    resumed = next((d.resumed_from_step for d in digests_seen if d.resumed_from_step is not None), None)
    if report is not None and _int(report.get("steps_executed")) is not None:
        executed = int(report["steps_executed"])
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
    what = {
        "clean": "with no failure",
        "recovered": f"with {recoveries} in-process recover{'y' if recoveries == 1 else 'ies'}",
        "restarted": f"with {full_restarts} full restart{'' if full_restarts == 1 else 's'}"
        + (f" and {recoveries} in-process recover{'y' if recoveries == 1 else 'ies'}" if recoveries else ""),
    }[kind]
    verb = "Trained" if finished else "Training:"
    return {
        "kind": kind,
        "steps_executed": executed,
        "resumed_from_step": resumed,
        "note": f"{verb} {executed} step{'' if executed == 1 else 's'} {start}, {what}.",
    }


def startup(started_at: float | None, first: LogDigest | None) -> JsonObj | None:
    """The time before the first step: the trainer starting (pods, image, runtime), then its first step (compile).

    It counts from the admission: a wait in Kueue's queue before it is queue time (``capacity``), not start-up.
    """
    if started_at is None or first is None or first.first_step_at is None:
        return None
    if first.first_admitted_at is not None and first.queue_spans:
        started_at = max(started_at, first.first_admitted_at)
    step_seconds = first.first_step_seconds or 0.0
    total = max(0.0, first.first_step_at - started_at)
    return {
        "seconds": round(total, 3),
        "from": round(started_at, 3),
        "first_step_seconds": round(step_seconds, 3),
        "before_first_step_seconds": round(max(0.0, total - step_seconds), 3),
    }


def run_view(
    *,
    task: Mapping[str, Any],
    report: Mapping[str, Any] | None,
    state: Mapping[str, Any] | None,
    checkpoints: Mapping[str, Any] | None,
    recovery_records: Sequence[Mapping[str, Any]] = (),
    rendered: Mapping[str, Any] | None = None,
    now: float | None = None,
) -> JsonObj:
    """Everything the view shows of one elastic task; every part may be missing, none raises.

    ``now`` (Unix time) says where a run still going stands and closes an open queue wait; default: its end.
    """
    state = state or {}
    rendered = rendered or {}
    monitor = state.get("monitor") if isinstance(state.get("monitor"), Mapping) else {}
    live = digests(state)
    current = live[-1][1] if live else LogDigest()
    recoveries = list((report or {}).get("recoveries") or live_recoveries(state))
    escalations = list((report or {}).get("escalations") or state.get("escalations") or [])
    steps = [c for c in (checkpoints or {}).get("steps") or [] if isinstance(c, Mapping)]
    started = _num(state.get("started_at")) or _num(task.get("start_ts"))
    ended = _num(task.get("end_ts"))
    final_step = _int((report or {}).get("final_step"))
    latest = current.latest_step
    target = _int((report or {}).get("target_step"))
    rendered_steps = _as_int(rendered.get("steps"))
    if target is None and rendered_steps is not None:
        target = rendered_steps - 1
    advice = (report or {}).get("advice")
    if advice is None and report:
        advice = advice_for_report(report)
    every = [d for _, d, _ in live]
    steps_seen = sorted(p for d in every for p in d.points)
    full_restarts = _first_int((report or {}).get("full_restarts"), state.get("full_restarts")) or 0
    kind = training(
        finished=report is not None,
        report=report,
        digests_seen=every,
        recoveries=len(recoveries),
        full_restarts=full_restarts,
        final_step=final_step,
    )
    mean_step = _num((report or {}).get("mean_step_seconds"))
    if mean_step is None:
        mean_step = _mean_of(every)
    cap = capacity_view(report, state, now if now is not None else ended)
    return {
        **dict(task),
        "jobset": {
            "name": (report or {}).get("jobset_name") or state.get("jobset_name"),
            "uid": state.get("jobset_uid"),
            "namespace": (report or {}).get("namespace"),
            "incarnations": (report or {}).get("jobsets") or [name for name, _, _ in live],
            "phase": (monitor or {}).get("phase"),
            "failure_detail": (monitor or {}).get("failure_detail") or None,
        },
        "slices": {
            "configured": _as_int(rendered.get("num_slices")),
            "live": current.live_slices,
            "restarts_by_slice": dict((monitor or {}).get("slice_restarts_by_slice") or {}),
        },
        "progress": {
            "current_step": final_step if final_step is not None and final_step >= 0 else latest,
            "target_step": target,
            "final_step": final_step,
        },
        "run_directory": (report or {}).get("run_directory") or _run_directory(rendered),
        "report_available": report is not None,
        "failure": (report or {}).get("failure"),
        "counts": {
            "slice_restarts": _first_int((report or {}).get("slice_restarts"), (monitor or {}).get("slice_restarts")),
            "recoveries": len(recoveries),
            "full_restarts": _first_int((report or {}).get("full_restarts"), state.get("full_restarts")),
            "steps_lost": _int((report or {}).get("steps_lost")),
            "preemptions": len(cap["preemptions"]),
        },
        "capacity": cap,
        "budgets": budgets(report, state),
        "recoveries": recoveries,
        "recovery_records": list(recovery_records),
        "escalations": escalations,
        "checkpoints": checkpoints,
        "goodput": {
            "goodput": _num((report or {}).get("goodput")),
            "goodput_with_queue": _num((report or {}).get("goodput_with_queue")),
            "queued_seconds": _num(cap.get("queued_seconds")),
            "wall_seconds": _num((report or {}).get("wall_seconds")),
            "mean_step_seconds": mean_step,
            "steps_executed": kind["steps_executed"],
            "startup_step_seconds": _num((report or {}).get("startup_step_seconds")),
            "chips": _int((report or {}).get("chips")),
            "price_per_chip_hour": _num((report or {}).get("price_per_chip_hour")),
            "chip_seconds_lost": _num((report or {}).get("chip_seconds_lost")),
            "cost_lost": _num((report or {}).get("cost_lost")),
        },
        "advice": advice,
        "training": kind,
        "startup": startup(started, every[0] if every else None),
        "timeline": {"points": [], "failures": [], "rewinds": [], "spans": [], "source": None}
        if kind["kind"] == "nothing"  # no step ran: a line from the start to the end would draw training
        else timeline(
            started_at=started,
            ended_at=ended,
            final_step=final_step if final_step is not None and final_step >= 0 else None,
            recoveries=recoveries,
            escalations=escalations,
            checkpoints=steps,
            steps=steps_seen,
            preemptions=cap["preemptions"],
            spans=_spans(cap, ended if ended is not None else now),
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


def _first_int(*values: Any) -> int | None:
    return next((v for v in map(_int, values) if v is not None), None)


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
