"""The view's pure parts: the step timeline, budgets while a run is still going, missing data."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from elastic_training.operators.advice import auto_period
from elastic_training.operators.observations import parse_time
from elastic_training.operators.pool_avoidance import Avoidance, disabled
from elastic_training.operators.recovery import MAX_STEP_POINTS, CostModel, Incarnation, LogDigest, run_report
from elastic_training.operators.run_report import (
    BudgetAllowances,
    PeriodReplan,
    RecoveryEntry,
    RunReport,
    escalations_of,
)
from elastic_training.plugin.view import budgets, run_view, timeline
from tests.support.capacity_run import QUOTA, capacity_run

RECOVERY = {"detected_at": 110.0, "failed_step": 24, "restored_at": 118.0, "restored_step": 20, "first_step_at": 120.0}


def test_timeline_has_the_failure_the_rewind_and_checkpoints_in_time_order() -> None:
    line = timeline(
        started_at=100.0,
        ended_at=200.0,
        final_step=59,
        recoveries=[RecoveryEntry.from_json(RECOVERY)],
        escalations=escalations_of(
            [{"at": 150.0, "latest_step": 40, "resumed_from_step": 30, "seconds_to_recreate": 5.0, "reason": "stalled"}]
        ),
        checkpoints=[
            {"step": 10, "committed_at": 105.0},
            {"step": 20, "committed_at": 108.0},
            {"step": 0, "committed_at": 50.0},
        ],  # left over from an earlier run of the directory
    )
    assert line["points"] == [
        [100.0, -1],
        [105.0, 10],
        [108.0, 20],
        [110.0, 24],
        [118.0, 24],
        [118.0, 20],
        [120.0, 21],
        [150.0, 40],
        [155.0, 30],
        [200.0, 59],
    ]
    assert line["rewinds"] == [
        {"t": 118.0, "from_step": 24, "to_step": 20},
        {"t": 155.0, "from_step": 40, "to_step": 30},
    ]
    assert [f["kind"] for f in line["failures"]] == ["slice failure", "full restart (stalled)"]


def test_budgets_of_a_running_task_come_from_the_state_store() -> None:
    digest = LogDigest()
    digest.feed(1.0, "completed step: 0, seconds: 1.0")
    digest.feed(2.0, "Elastic event detected")
    state = {
        "jobset_name": "js",
        "full_restarts": 1,
        "monitor": {"slice_restart_times": [10.0, 20.0, 4000.0], "jobset_restarts": 2, "digest": digest.to_json()},
    }
    found = {b["name"]: (b["used"], b["allowed"]) for b in budgets(None, state)}
    assert found["slice restarts in window"] == (3, None)  # no window known without the report
    assert found["full restarts"] == (1, None) and found["JobSet restarts"] == (2, None)
    assert found["in-process retries"] == (1, None)
    allowed = {"slice_restart_window_seconds": 3600.0, "max_slice_restarts": 2}
    windowed = budgets(RunReport.from_json({"target_step": 29, "budgets": allowed}), state)
    assert windowed[0]["used"] == 2 and windowed[0]["allowed"] == 2  # 10 and 20 within an hour, 4000 alone


def test_a_task_with_nothing_persisted_yet_still_has_a_view() -> None:
    view = run_view(
        task={"dag_id": "d", "run_id": "r", "task_id": "t"},
        report=None,
        state=None,
        checkpoints=None,
        rendered={"steps": "100", "num_slices": "4", "base_output_directory": "/b/", "run_name": "n"},
    )
    assert view["progress"] == {"current_step": None, "target_step": 99, "final_step": None}
    assert view["slices"]["configured"] == 4 and view["run_directory"] == "/b/n"
    assert view["recoveries"] == [] and view["advice"] is None and view["timeline"]["points"] == []


# ---- the view's numbers on the four kinds of run ---------------------------------------------------------

DATA = Path(__file__).parent / "data"


def cri_lines(path: Path) -> list[tuple[float, str]]:
    """A head pod's log as the kubelet keeps it (CRI: ``<RFC 3339> stdout F <line>``), as (Unix time, line)."""
    found = []
    for raw in path.read_text().splitlines():
        stamp, _, _, text = raw.split(" ", 3)
        at = parse_time(stamp)
        assert at is not None
        found.append((at, text))
    return found


def absl(at: float, text: str) -> tuple[float, str]:
    return at, f"I1201 10:00:00.000000 4242 trainer.py:208] {text}"


def trainer_steps(
    first: int, last: int, t0: float, *, compile_seconds: float, seconds: float = 0.5
) -> list[tuple[float, str]]:
    """The local trainer's lines for steps ``first..last`` after a start or restore (its first step compiles)."""
    lines, at = [], t0
    for step in range(first, last + 1):
        took = compile_seconds if step == first else seconds
        at += took
        lines.append(absl(at, f"completed step: {step}, seconds: {took:.3f}, live slice count: 2, loss: 3.0"))
    return lines


def start(at: float, restored: int | None) -> tuple[float, str]:
    if restored is None:
        return absl(at, "No existing checkpoints found, not restoring checkpoint.")
    return absl(at, f"restoring from this run's directory step {restored}")


def recovery(at: float, restored: int) -> list[tuple[float, str]]:
    return [
        absl(at, "Elastic event detected. Traceback (most recent call last):"),
        absl(at + 0.2, "Elastic attempt 2 out of 4"),
        absl(at + 6.0, "Sufficient slices active: 2 >= 2. Active indices: [0, 1]"),
        start(at + 7.0, restored),
    ]


def finished_view(
    incarnations: list[LogDigest],
    *,
    started: float,
    ended: float,
    final_step: int | None,
    escalations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The view of a finished task, built as the operator builds its report and state entry."""
    report = run_report(
        incarnations=[Incarnation(f"js-{i}", 0, 0, d) for i, d in enumerate(incarnations)],
        escalations=escalations_of(escalations or []),
        namespace="default",
        run_directory="/data/run",
        target_step=29,
        final_step=final_step,
        wall_seconds=ended - started,
        costs=CostModel(chips=2),
    )
    state = {
        "jobset_name": f"js-{len(incarnations) - 1}",
        "started_at": started,
        "full_restarts": len(escalations or []),
        "escalations": escalations or [],
        "history": [{"jobset_name": f"js-{i}", "digest": d.to_json()} for i, d in enumerate(incarnations[:-1])],
        "monitor": {"digest": incarnations[-1].to_json()},
    }
    task = {"dag_id": "d", "run_id": "r", "task_id": "pretrain", "start_ts": started, "end_ts": ended}
    return run_view(task=task, report=report, state=state, checkpoints=None)


def clean() -> dict[str, Any]:
    lines = cri_lines(DATA / "clean_run_head.log")  # a real nightly run on the local cluster, 30 steps
    return finished_view(
        [LogDigest().feed_all(lines)], started=lines[0][0] - 2.0, ended=lines[-1][0] + 5.0, final_step=29
    )


def resumed_nothing() -> dict[str, Any]:
    lines = [start(1010.0, 29), absl(1011.0, "Closing manager, waiting for monitor thread to stop...")]
    return finished_view([LogDigest().feed_all(lines)], started=1000.0, ended=1020.0, final_step=29)


def recovered() -> dict[str, Any]:
    lines = [start(1020.0, None), *trainer_steps(0, 14, 1020.0, compile_seconds=10.0)]  # step 14 at t=1037
    lines += [*recovery(1040.0, 10), *trainer_steps(11, 29, 1047.0, compile_seconds=4.0)]
    return finished_view([LogDigest().feed_all(lines)], started=1000.0, ended=1070.0, final_step=29)


def restarted() -> dict[str, Any]:
    first = [start(1020.0, None), *trainer_steps(0, 14, 1020.0, compile_seconds=10.0)]  # stalls after step 14
    second = [start(1080.0, 10), *trainer_steps(11, 29, 1080.0, compile_seconds=10.0)]
    escalation = {"reason": "stalled", "at": 1060.0, "latest_step": 14, "resumed_from_step": 10, "steps_lost": 4}
    escalation["seconds_to_recreate"] = 5.0
    digests = [LogDigest().feed_all(first), LogDigest().feed_all(second)]
    return finished_view(digests, started=1000.0, ended=1110.0, final_step=29, escalations=[escalation])


@pytest.mark.parametrize(
    ("make", "kind", "executed", "mean_step", "goodput", "note"),
    [
        # 30 steps; the first took 13.07 s (compiling), the other 29 took 1.174 s in all; 2 chips.
        (clean, "clean", 30, 1.174 / 29, None, "Trained 30 steps from scratch, with no failure."),
        (resumed_nothing, "nothing", 0, None, 0.0, "Resumed at step 29 and trained nothing: that step was already"),
        # steps 0-14 and 11-29: 34 run, 4 again; steady mean 0.5 s; productive 30 x 0.5 = 15 s of 70 s.
        (recovered, "recovered", 34, 0.5, 15 / 70, "Trained 34 steps from scratch, with 1 in-process recovery."),
        # the same steps, 4 lost to the full restart: productive 15 s of 110 s.
        (restarted, "restarted", 34, 0.5, 15 / 110, "Trained 34 steps from scratch, with 1 full restart."),
    ],
)
def test_the_numbers_of_each_kind_of_run(
    make: Any, kind: str, executed: int, mean_step: float | None, goodput: float | None, note: str
) -> None:
    view = make()
    assert view["training"]["kind"] == kind
    assert view["training"]["note"].startswith(note)
    assert view["goodput"]["steps_executed"] == executed
    assert view["goodput"]["mean_step_seconds"] == (None if mean_step is None else pytest.approx(mean_step, abs=1e-4))
    if goodput is not None:
        assert view["goodput"]["goodput"] == pytest.approx(goodput, abs=1e-4)
    else:
        assert 0 < view["goodput"]["goodput"] < 1
    steps = [s for _, s in view["timeline"]["points"]]
    if kind == "nothing":
        assert steps == []  # no line is drawn for a run that trained nothing
    else:
        assert view["timeline"]["source"] == "trainer log"
        assert set(range(30)) <= set(steps)  # every step the trainer logged, not a line between checkpoints
        assert steps[0] == -1 and steps[-1] == 29


def test_a_clean_runs_start_up_is_split_into_waiting_and_the_compiling_first_step() -> None:
    view = clean()
    startup = view["startup"]
    assert startup["first_step_seconds"] == pytest.approx(13.07)
    assert startup["seconds"] == pytest.approx(startup["before_first_step_seconds"] + 13.07, abs=1e-3)
    assert startup["before_first_step_seconds"] > 20  # the pod started, JAX imported, configuration read
    # goodput: 30 steady-length steps of 0.0405 s over the run's wall time; positive, and no 13 s compile in it
    assert view["goodput"]["goodput"] == pytest.approx(30 * 1.174 / 29 / view["goodput"]["wall_seconds"], abs=1e-4)


def test_the_rewinds_of_recoveries_and_restarts_are_in_the_line() -> None:
    assert recovered()["timeline"]["rewinds"] == [{"t": 1047.0, "from_step": 14, "to_step": 10}]
    assert restarted()["timeline"]["rewinds"] == [{"t": 1065.0, "from_step": 14, "to_step": 10}]


def test_a_run_whose_log_was_never_read_has_an_unknown_goodput_not_zero() -> None:
    view = finished_view([LogDigest()], started=1000.0, ended=1100.0, final_step=29)
    assert view["training"]["kind"] == "unknown" and view["goodput"]["goodput"] is None
    assert view["goodput"]["mean_step_seconds"] is None
    view = run_view(
        task={"dag_id": "d", "run_id": "r", "task_id": "t", "start_ts": 1000.0, "end_ts": 1100.0},
        report=None,
        state={"monitor": {"digest": LogDigest().to_json()}, "jobset_name": "js"},
        checkpoints={"steps": [{"step": 10, "committed_at": 1050.0}, {"step": 29, "committed_at": 1090.0}]},
    )
    assert view["timeline"]["source"] == "checkpoints"  # said so: the page labels the line as commits only


def test_the_step_series_stays_bounded_on_a_long_run() -> None:
    digest = LogDigest().feed_all(trainer_steps(0, 100_000, 0.0, compile_seconds=1.0, seconds=0.01))
    assert len(digest.step_points) <= MAX_STEP_POINTS
    assert digest.points[-1] == (digest.latest_step_at, 100_000)
    assert len(json.dumps(digest.to_json())) < 20_000


def _queued_preempted_digest(
    reason: str = "Preempted: to accommodate a higher-priority workload", eviction: str = ""
) -> LogDigest:
    """Queued 100 s, steps 0..29, preempted (or evicted: ``eviction``) at 140 for 200 s, restored step 20, steps
    21..59 to t=398."""
    digest = LogDigest()
    digest.queued(0.0, preempted=False)
    digest.admitted(100.0)
    digest.feed(105.0, "No existing checkpoints found, not restoring checkpoint.")
    for i, step in enumerate(range(30)):
        digest.feed(110.0 + i, f"completed step: {step}, seconds: 1.000")
    digest.queued(140.0, preempted=True, reason=reason, eviction=eviction)
    digest.admitted(340.0)
    digest.feed(350.0, "restoring from this run's directory step 20")
    for i, step in enumerate(range(21, 60)):
        digest.feed(360.0 + i, f"completed step: {step}, seconds: 1.000")
    return digest


def _queued_preempted_view(
    *,
    task_ended_at: float,
    digest: LogDigest | None = None,
    budgets: BudgetAllowances | None = None,
    released_at: float | None = None,
) -> dict[str, Any]:
    """The view of that run, its report written at t=430 and its task ended at ``task_ended_at``; its JobSet ended
    at ``released_at`` when known."""
    digest = digest or _queued_preempted_digest()
    report = run_report(
        incarnations=[Incarnation("js", 0, 0, digest)],
        escalations=[],
        namespace="default",
        run_directory="/r",
        target_step=59,
        final_step=59,
        wall_seconds=430.0,
        costs=CostModel(chips=8),
        ended_at=430.0,
        released_at=released_at,
        budgets=budgets,
    )
    task = {"task_id": "pretrain", "start_ts": 0.0, "end_ts": task_ended_at}
    state = {"jobset_name": "js", "monitor": {"phase": "completed", "digest": digest.to_json()}}
    return run_view(task=task, report=report, state=state, checkpoints=None)


def test_the_view_shows_queue_time_preemptions_and_the_tail_as_spans_of_their_own() -> None:
    view = _queued_preempted_view(task_ended_at=430.0)
    capacity = view["capacity"]
    assert capacity["queued_seconds"] == 300.0 and capacity["admission_to_first_step_seconds"] == 10.0
    assert capacity["tail_seconds"] == 32.0 and capacity["phase"] == "ended"
    assert view["counts"]["preemptions"] == 1 and view["counts"]["recoveries"] == 0
    spans = [(s["kind"], s["from"], s["to"]) for s in view["timeline"]["spans"]]
    assert spans == [("queued", 0.0, 100.0), ("preempted", 140.0, 340.0), ("tail", 398.0, 430.0)]
    assert [f["kind"] for f in view["timeline"]["failures"]] == ["preemption"]
    assert {"t": 350.0, "from_step": 29, "to_step": 20} in view["timeline"]["rewinds"]
    assert view["goodput"]["queued_seconds"] == 300.0
    assert view["goodput"]["goodput"] > view["goodput"]["goodput_with_queue"]
    assert view["startup"]["from"] == 100.0  # start-up counts from the admission, not the queue


def test_the_tail_span_is_the_reports_tail_not_the_tasks_end_date() -> None:
    """The task ends a moment after its report is written: the span and the capacity line say one number."""
    view = _queued_preempted_view(task_ended_at=431.5)
    [tail] = [s for s in view["timeline"]["spans"] if s["kind"] == "tail"]
    assert tail["seconds"] == view["capacity"]["tail_seconds"] == 32.0 and tail["to"] == 430.0


def test_airflow_resuming_the_task_after_the_jobset_ended_is_a_span_of_its_own_after_the_tail() -> None:
    """The JobSet completed at 402; the report came at 430: the tail ends at 402, and the chart shows the 28 s
    after it as Airflow's, not the run's (the nightly's chart on the real scheduler ran on 10 s past its tail)."""
    view = _queued_preempted_view(task_ended_at=430.5, released_at=402.0)
    assert view["capacity"]["tail_seconds"] == 4.0 and view["capacity"]["resume_seconds"] == 28.0
    spans = [(s["kind"], s["from"], s["to"], s["seconds"]) for s in view["timeline"]["spans"]]
    assert spans[-2:] == [("tail", 398.0, 402.0, 4.0), ("resume", 402.0, 430.0, 28.0)]
    assert view["goodput"]["wall_seconds"] == 402.0


def test_a_queued_run_still_waiting_says_so_with_kueue_s_reason() -> None:
    digest = LogDigest()
    digest.queued(1000.0, preempted=False)
    monitor = {
        "phase": "suspended",
        "started_at": 1000.0,
        "queue_managed": True,
        "queue_state": "pending",
        "queue_reason": "Pending: insufficient unused quota for google.com/tpu",
        "digest": digest.to_json(),
    }
    view = run_view(
        task={"task_id": "pretrain", "start_ts": 1000.0},
        report=None,
        state={"jobset_name": "js", "monitor": monitor},
        checkpoints=None,
        now=1600.0,
    )
    assert view["capacity"]["phase"] == "queued"
    assert view["capacity"]["queue_reason"].startswith("Pending: insufficient unused quota")
    assert view["capacity"]["queued_seconds"] == 600.0
    assert view["timeline"]["spans"] == [
        {
            "kind": "queued",
            "from": 1000.0,
            "to": 1600.0,
            "seconds": 600.0,
            "label": "queued for quota",
            "provisioning_seconds": 0.0,
        }
    ]


def test_start_up_and_admission_to_first_step_are_one_number() -> None:
    """Not behind Kueue the admission is the JobSet's creation (whole seconds), a moment after the task started:
    the chart's start-up and the capacity line measure one span, with one function, and say one number."""
    digest = LogDigest()
    digest.admitted(1001.0)  # creationTimestamp, floored to the second
    digest.feed(1030.0, "No existing checkpoints found, not restoring checkpoint.")
    for i, step in enumerate(range(10)):
        digest.feed(1042.2 + i, f"completed step: {step}, seconds: {12.0 if step == 0 else 1.0:.3f}")
    state = {"jobset_name": "js", "started_at": 1001.6, "monitor": {"phase": "active", "digest": digest.to_json()}}
    task = {"task_id": "pretrain", "start_ts": 1000.0, "end_ts": 1060.0}
    running = run_view(task={**task, "end_ts": None}, report=None, state=state, checkpoints=None, now=1055.0)
    report = run_report(
        incarnations=[Incarnation("js", 0, 0, digest)],
        escalations=(),
        namespace="default",
        run_directory="/r",
        target_step=9,
        final_step=9,
        wall_seconds=58.0,
        costs=CostModel(chips=1),
        ended_at=1059.0,
    )
    ended = run_view(task=task, report=report, state=state, checkpoints=None)
    for view in (running, ended):
        assert view["startup"]["seconds"] == view["capacity"]["admission_to_first_step_seconds"] == 41.2
        assert view["startup"]["from"] == 1001.0
        assert view["startup"]["before_first_step_seconds"] == pytest.approx(41.2 - 12.0)


def test_the_view_shows_what_the_run_decided_from_earlier_runs() -> None:
    """The node pools ``avoid_failing_node_pools`` kept the run off and the period ``checkpoint_period=auto`` chose:
    from the report once the run ended, from the plan in the state store while it runs; nothing when both were off."""
    avoidance = Avoidance(enabled=True, avoided=("pool-b",), failing=("pool-b",), reason="pool-b failed 3 times")
    choice = auto_period([], steps=30, fallback=10)
    plan_json = {"node_pool_avoidance": avoidance.to_json(), "checkpoint_period_choice": choice.to_json()}
    digest = LogDigest().feed_all([(1000.0 + i, f"completed step: {i}, seconds: 1.0") for i in range(30)])
    state = {"jobset_name": "js", "plan": plan_json, "monitor": {"phase": "active", "digest": digest.to_json()}}
    task = {"task_id": "pretrain", "start_ts": 999.0}
    running = run_view(task=task, report=None, state=state, checkpoints=None, now=1031.0)
    assert running["plan"]["node_pool_avoidance"]["avoided"] == ["pool-b"]
    assert running["plan"]["checkpoint_period_choice"]["period"] == 10
    assert running["plan"]["checkpoint_period_choice"]["achieved_goodput"] is None  # not known before the end
    assert running["plan"]["checkpoint_period_choice"]["source"] == "fallback"  # why: nothing was known
    report = run_report(
        incarnations=[Incarnation("js", 0, 0, digest)],
        escalations=(),
        namespace="default",
        run_directory="/r",
        target_step=29,
        final_step=29,
        wall_seconds=40.0,
        costs=CostModel(chips=1),
    )
    planned = dataclasses.replace(report, node_pool_avoidance=avoidance, checkpoint_period_choice=choice)
    ended = run_view(task={**task, "end_ts": 1040.0}, report=planned, state=state, checkpoints=None)
    assert ended["plan"]["node_pool_avoidance"]["reason"] == "pool-b failed 3 times"
    assert ended["plan"]["checkpoint_period_choice"]["achieved_goodput"] == report.goodput is not None
    off = dataclasses.replace(report, node_pool_avoidance=disabled())
    assert run_view(task=task, report=off, state={}, checkpoints=None)["plan"] == {
        "node_pool_avoidance": None,
        "checkpoint_period_choice": None,
        "checkpoint_period_replan": None,
    }
    # A replan mid-run (issue 55): from the plan while the run goes on, from the report once it ended; a stored one
    # without a period is none.
    replan = PeriodReplan(period=4, from_period=10, mtbf_seconds=30.0, net_gain_seconds=12.0, reason="3 failures")
    replanned = {**state, "plan": {**plan_json, "checkpoint_period_replan": replan.to_json()}}
    assert (
        run_view(task=task, report=None, state=replanned, checkpoints=None, now=1031.0)["plan"][
            "checkpoint_period_replan"
        ]
        == replan.to_json()
    )
    shown = dataclasses.replace(report, checkpoint_period_replan=replan)
    assert run_view(task=task, report=shown, state={}, checkpoints=None)["plan"]["checkpoint_period_replan"] == {
        "period": 4, "from_period": 10, "mtbf_seconds": 30.0, "net_gain_seconds": 12.0, "reason": "3 failures"
    }  # fmt: skip
    assert RunReport.from_json(shown.to_json()).checkpoint_period_replan == replan
    broken = {**state, "plan": {**plan_json, "checkpoint_period_replan": {"period": "four"}}}
    shown_broken = run_view(task=task, report=None, state=broken, checkpoints=None)["plan"]
    assert shown_broken["checkpoint_period_replan"] is None
    assert shown_broken["checkpoint_period_choice"]["period"] == 10  # a garbled replan hides nothing else
    # What reading the history left out or could not read, and the history the run used (the page's link).
    noted = dataclasses.replace(report, history_key="k.m1", history_notes=("the failure history k.m1: 1 left out",))
    assert run_view(task=task, report=noted, state={}, checkpoints=None)["history"] == {
        "key": "k.m1",
        "notes": ["the failure history k.m1: 1 left out"],
    }
    assert running["history"] is None  # no report yet


def test_budgets_count_stalls_and_start_ups_timed_out_apart() -> None:
    escalations = escalations_of(
        [
            {"reason": "startup_timed_out", "at": 1.0, "jobset_name": "run-0"},
            {"reason": "stalled", "at": 2.0, "jobset_name": "run-1"},
            {"reason": "startup_timed_out", "at": 3.0, "jobset_name": "run-2"},
        ]
    )
    report = run_report(
        incarnations=[Incarnation("run-2", 0, 0, LogDigest())],
        escalations=escalations,
        namespace="default",
        run_directory="/tmp/run",
        target_step=9,
        final_step=None,
        wall_seconds=60.0,
        costs=CostModel(chips=8),
        budgets=BudgetAllowances(stall_timeout_seconds=300.0, startup_timeout_seconds=1800.0),
    )
    rows = {row["name"]: row for row in budgets(report, {})}
    assert rows["stalls"]["used"] == 1 and rows["stalls"]["detail"] == "no progress for 300 s escalates"
    assert rows["start-ups timed out"]["used"] == 2
    assert rows["start-ups timed out"]["detail"] == "a trainer not training 1800 s after its start escalates"
    assert RunReport.from_json(report.to_json()).budgets.startup_timeout_seconds == 1800.0  # the report carries it


def test_an_eviction_that_is_not_a_preemption_is_shown_as_what_it_was() -> None:
    """A PodsReady timeout: its own span and failure label, counted apart from preemptions, against its limit."""
    said = "PodsReadyTimeout: Exceeded the PodsReady timeout default/jobset-js-1a2b3"
    digest = _queued_preempted_digest(reason=said, eviction="pods_ready_timeout")
    allowed = BudgetAllowances(max_pods_ready_evictions=3, pods_ready_recovery_timeout_seconds=180.0)
    view = _queued_preempted_view(task_ended_at=430.0, digest=digest, budgets=allowed)
    label = "evicted: pods not ready in time (Kueue's waitForPodsReady)"
    [evicted] = [s for s in view["timeline"]["spans"] if s["kind"] == "evicted"]
    assert (evicted["from"], evicted["to"], evicted["eviction"]) == (140.0, 340.0, label)
    assert [f["kind"] for f in view["timeline"]["failures"]] == [label]
    counts = view["counts"]
    assert (counts["preemptions"], counts["pods_ready_evictions"], counts["evictions"]) == (0, 1, 1)
    [entry] = view["capacity"]["preemptions"]
    assert entry["eviction"] == "pods_ready_timeout" and entry["reason"] == said
    rows = {row["name"]: row for row in view["budgets"]}
    assert (rows["pods-ready evictions"]["used"], rows["pods-ready evictions"]["allowed"]) == (1, 3)
    assert "Kueue's recoveryTimeout: 180 s" in rows["pods-ready evictions"]["detail"]
    # While it runs (no report yet), the same from the state store.
    live = {row["name"]: row for row in budgets(None, {"jobset_name": "js", "monitor": {"digest": digest.to_json()}})}
    assert live["pods-ready evictions"]["used"] == 1 and live["pods-ready evictions"]["allowed"] is None


def test_each_wait_is_named_with_kueue_s_words_and_the_provisioning_within_it() -> None:
    """The browser journey's capacity story (tests/support/capacity_run.py), as the view folds it: the spans the page
    draws, the sentence, and the budgets (an eviction is no in-process retry)."""
    end = 1_796_000_000.0
    run, report = capacity_run(end)
    t0 = run.started_at
    state = {"jobset_name": run.jobset_name, "started_at": t0, "monitor": run.monitor.to_json()}
    stored = RunReport.from_json(json.loads(json.dumps(report.to_json())))
    view = run_view(task={"task_id": "pretrain", "end_ts": end + 1}, report=stored, state=state, checkpoints=None)
    spans = view["timeline"]["spans"]
    waits = [(s["kind"], s["label"], s["from"] - t0, s["seconds"], s["provisioning_seconds"]) for s in spans[:4]]
    assert waits == [
        ("queued", "queued for quota", 0.0, 120.0, 60.0),
        ("preempted", "preemption", 180.0, 70.0, 20.0),
        ("evicted", "pods-ready timeout", 290.0, 60.0, 19.0),
        ("evicted", "queue stopped", 385.0, 60.0, 15.0),
    ]
    assert [s.get("eviction_kind") for s in spans[:4]] == [None, "preempted", "pods_ready_timeout", "queue_stopped"]
    assert [s.get("reason", "").split(":")[0] for s in spans[:4]] == [
        "Pending",  # the first wait for quota, in Kueue's words (QuotaReserved=False)
        "Preempted",
        "PodsReadyTimeout",
        "ClusterQueueStopped",
    ]
    assert [(s.get("step"), s.get("steps_lost")) for s in spans[:4]] == [(None, None), (39, 9), (59, 9), (69, 9)]
    provisioning = [s for s in spans if s["kind"] == "provisioning"]
    assert [(s["from"] - t0, s["seconds"]) for s in provisioning] == [
        (60.0, 60.0),
        (230.0, 20.0),
        (331.0, 19.0),
        (430.0, 15.0),
    ]
    assert spans[0]["reason"] == f"Pending: {QUOTA}"
    # Each provisioning's outcome is its own, the same words said again included.
    assert [s["said"] for s in provisioning] == [
        ["admission check dws-prov Ready: Capacity is found in the cluster"]
    ] * 4
    assert spans[-1]["kind"] == "tail" and spans[-1]["seconds"] == 11.0
    assert (
        view["training"]["note"] == "Trained 107 steps from scratch, with no failure of its own and 3 Kueue evictions."
    )
    assert [(p["label"], p["short"]) for p in view["capacity"]["preemptions"]] == [
        ("preemption", "preemption"),
        ("evicted: pods not ready in time (Kueue's waitForPodsReady)", "pods-ready timeout"),
        ("evicted: its Kueue queue was stopped", "queue stopped"),
    ]
    rows = {row["name"]: row["used"] for row in view["budgets"]}
    assert rows["in-process retries"] == 0 and rows["pods-ready evictions"] == 1
