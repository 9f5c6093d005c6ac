"""The operator's plan from the failure history (``ElasticJobSetOperator._planned_or_not``) never fails a run.

The history is read through the real Task SDK ``Variable`` calls, answered at the SDK's client boundary
(``task_runner.SUPERVISOR_COMMS``) by ``tests/support/variable_comms.py``; no cluster is
needed since only ``checkpoint_period="auto"`` plans here (the pool avoidance lists nodes).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from elastic_training.operators import Capacity, ElasticJobSetOperator
from elastic_training.operators import elastic_operator as module
from elastic_training.operators.advice import shape_fingerprint
from elastic_training.operators.failure_history import FailureHistory, RunRecord
from elastic_training.operators.history_store import history_key, load_history
from elastic_training.operators.run_report import RunReport
from elastic_training.operators.run_state import RunState
from tests.support.variable_comms import VariableComms, variable_comms

T0 = 1_760_000_000.0


class _TI:
    dag_id, task_id, run_id, map_index = "nightly", "pretrain", "manual__1", -1


@pytest.fixture
def comms() -> Iterator[VariableComms]:
    with variable_comms() as fake:
        yield fake


def auto_operator(tmp_path: Path, period: int | str = "auto") -> ElasticJobSetOperator:
    return ElasticJobSetOperator(
        task_id="pretrain",
        run_name="nightly",
        base_output_directory=str(tmp_path),
        steps=100,
        checkpoint_period=period,
        num_slices=1,
        runtime="local",
    )


def plan(operator: ElasticJobSetOperator) -> tuple[Any, RunState]:
    run = RunState({}, dag_id="nightly", task_id="pretrain", run_id="manual__1", map_index=-1)
    spec = operator._planned_or_not({"ti": _TI()}, operator.build_spec(), run)
    return spec, run


def measured_run(shape: str) -> RunRecord:
    """An hour of training of ``shape`` with 4 failures, 1 s a step and 20 s a save: enough for ``auto`` to choose."""
    return RunRecord(
        run_id="r1",
        ended_at=T0,
        wall_seconds=3600.0,
        training_seconds=3600.0,
        failures_total=4,
        mean_step_seconds=1.0,
        checkpoint_save_seconds=20.0,
        fingerprint=shape,
    )


def test_a_hostile_history_plans_from_its_sound_runs(comms: VariableComms, tmp_path: Path) -> None:
    shape = shape_fingerprint(auto_operator(tmp_path).build_spec())
    sound = measured_run(shape)
    good = json.loads(FailureHistory().with_run(sound).render())["runs"][0]
    hostile = [
        {
            "run_id": "tiny",
            "ended_at": T0,
            "wall_seconds": 100.0,
            "training_seconds": 100.0,
            "fingerprint": shape,
            "mean_step_seconds": 5e-324,
            "checkpoint_save_seconds": 1.0,
            "failures_total": 1,
        },
        {"run_id": "xss", "ended_at": T0, "pools": ["<script>x</script>"], "failures_total": 50},
        {"run_id": "types", "ended_at": "yesterday", "slices": "3"},
    ]
    comms.values[history_key("nightly", "pretrain")] = json.dumps({"version": 1, "runs": [good, *hostile]})
    spec, run = plan(auto_operator(tmp_path))
    choice = run.plan["checkpoint_period_choice"]  # type: ignore[index]
    assert "planning_error" not in (run.plan or {})
    assert choice["runs"] == 2 and spec.checkpoint_period == choice["period"]  # r1 and "tiny" (bounded)
    assert 1 <= spec.checkpoint_period <= 50


def test_a_planning_error_runs_without_the_plan_and_says_why(
    comms: VariableComms, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fault is injected in the planner (``auto_period`` raising OverflowError, as the unbounded advice did on
    a near-zero stored step time): whatever raises while planning, the run gets the unplanned spec."""

    def overflowing(*args: Any, **kwargs: Any) -> Any:
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr(module, "auto_period", overflowing)
    warnings: list[str] = []
    operator = auto_operator(tmp_path)
    monkeypatch.setattr(operator.log, "warning", lambda *a: warnings.append(a[0] % a[1:]))
    spec, run = plan(operator)
    assert spec.checkpoint_period == 10  # "auto" without a plan: the documented fallback
    assert "OverflowError" in run.plan["planning_error"]  # type: ignore[index]
    reason = run.plan["node_pool_avoidance"]["reason"]  # type: ignore[index]
    assert reason.startswith("planning from the failure history failed (OverflowError")
    assert any("the run goes ahead without the plan" in w for w in warnings), warnings
    # the saved plan is what a resumed try applies: no error again
    assert operator._planned(operator.build_spec(), run).checkpoint_period == 10


def test_a_planning_error_keeps_what_the_historys_read_left_out_in_the_report(
    comms: VariableComms, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read came before the failure: its notes (a record left out) reach the report with the planning error."""

    def overflowing(*args: Any, **kwargs: Any) -> Any:
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr(module, "auto_period", overflowing)
    hostile = {"run_id": "xss", "ended_at": T0, "pools": ["<script>x</script>"]}
    comms.values[history_key("nightly", "pretrain")] = json.dumps({"version": 1, "runs": [hostile]})
    operator = auto_operator(tmp_path)
    _, run = plan(operator)
    assert "OverflowError" in run.plan["planning_error"]  # type: ignore[index]
    report = operator._record_history({"ti": _TI()}, RunReport(target_step=99), run, succeeded=True)
    assert any("1 stored entr(ies) left out" in n and "'xss'" in n for n in report.history_notes), report


def test_a_planning_error_still_reads_kueues_pods_ready_timeouts(
    comms: VariableComms, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kueue's waitForPodsReady does not come from the history: a failed plan still carries it (here from the
    task's option, the ConfigMap being unreadable without a cluster), so the launch warnings and the report's
    budgets keep it."""

    def overflowing(*args: Any, **kwargs: Any) -> Any:
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr(module, "auto_period", overflowing)
    operator = auto_operator(tmp_path)
    operator.capacity = Capacity(queue_name="team", kueue_pods_ready_timeout=600)
    _, run = plan(operator)
    assert "OverflowError" in run.plan["planning_error"]  # type: ignore[index]
    assert run.plan["kueue_pods_ready"]["timeout_seconds"] == 600  # type: ignore[index]


def test_what_the_history_reads_left_out_or_could_not_read_is_in_the_report(
    comms: VariableComms, tmp_path: Path
) -> None:
    key = history_key("nightly", "pretrain")
    hostile = {"run_id": "xss", "ended_at": T0, "pools": ["<script>x</script>"]}
    comms.values[key] = stored = json.dumps({"version": 1, "runs": [hostile]})
    operator = auto_operator(tmp_path)
    _, run = plan(operator)
    report = operator._record_history({"ti": _TI()}, RunReport(target_step=99), run, succeeded=True)
    assert report.history_key == key
    assert any("1 stored entr(ies) left out" in n and "'xss'" in n for n in report.history_notes), report
    [copy] = [k for k in comms.values if ".corrupt-" in k]  # moved to per-run Variables: the old value kept aside
    assert comms.values[copy] == stored and any(copy in n for n in report.history_notes)
    assert RunReport.from_json(report.to_json()).history_notes == report.history_notes

    comms.failing = {"GetVariableKeys"}  # the API server stops answering: the plan and the write both say so
    _, run = plan(operator)
    report = operator._record_history({"ti": _TI()}, RunReport(target_step=99), run, succeeded=True)
    assert any("could not be read" in n and n.endswith("not used") for n in report.history_notes), report
    assert any("run manual__1 was not recorded" in n for n in report.history_notes), report
    assert report.to_json()["history_notes"] == list(report.history_notes)


def test_the_plan_is_made_per_try_from_that_tries_options(comms: VariableComms, tmp_path: Path) -> None:
    """One plan per try: a try keeps its plan (a resumed or re-deferred try launches as planned), the next try plans
    again from the history as it is then, and from the options of that try (turned off before a clear: no plan)."""
    operator = auto_operator(tmp_path)
    run = RunState({}, dag_id="nightly", task_id="pretrain", run_id="manual__1", map_index=-1)
    ti = _TI()

    def planned(op: ElasticJobSetOperator, try_number: int) -> Any:
        ti.try_number = try_number  # type: ignore[attr-defined]
        return op._planned_or_not({"ti": ti}, op.build_spec(), run)

    assert planned(operator, 1).checkpoint_period == 10  # no history yet: the fallback
    failing = measured_run(shape_fingerprint(operator.build_spec()))
    comms.values[history_key("nightly", "pretrain")] = FailureHistory().with_run(failing).render()
    assert planned(operator, 1).checkpoint_period == 10 and run.plan["try_number"] == 1  # type: ignore[index]
    second = planned(operator, 2)
    assert run.plan["try_number"] == 2 and run.plan["checkpoint_period_choice"]["runs"] == 1  # type: ignore[index]
    assert second.checkpoint_period != 10
    fixed = auto_operator(tmp_path, period=25)
    assert planned(fixed, 3).checkpoint_period == 25  # the option off on the third try: try 2's choice dropped
    assert run.plan["try_number"] == 3 and "checkpoint_period_choice" not in run.plan  # type: ignore[operator]
    assert run.plan["node_pool_avoidance"]["enabled"] is False  # type: ignore[index]


def test_mapped_instances_and_a_shared_key_are_recorded_apart_by_the_operator(
    comms: VariableComms, tmp_path: Path
) -> None:
    """The operator's own record: each mapped instance in its own history; under a ``failure_history_key`` several
    instances name, each its own record, though they share the run id."""
    operator = auto_operator(tmp_path)
    run = RunState({}, dag_id="nightly", task_id="pretrain", run_id="manual__1", map_index=-1)
    keys = []
    for index in (0, 1):
        ti = _TI()
        ti.map_index = index
        keys.append(operator._record_history({"ti": ti}, RunReport(target_step=99), run, succeeded=True).history_key)
    assert keys == [history_key("nightly", "pretrain", 0), history_key("nightly", "pretrain", 1)]
    assert [[r.run_id for r in load_history(k, print).history.runs] for k in keys] == [["manual__1"], ["manual__1"]]
    shared = "elastic_training_failure_history.team"
    operator.history = dataclasses.replace(operator.history, failure_history_key=shared)
    for index in (0, 1):
        ti = _TI()
        ti.map_index = index
        operator._record_history({"ti": ti}, RunReport(target_step=99), run, succeeded=True)
    assert sorted(r.run_id for r in load_history(shared, print).history.runs) == [
        "nightly/pretrain[0]/manual__1",
        "nightly/pretrain[1]/manual__1",
    ]
