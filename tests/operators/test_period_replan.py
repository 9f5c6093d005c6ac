"""operators/period_replan.py: a run that turns stormy is replanned to a shorter period, one as planned is not, nor
one too near its end to repay the restart; unsound figures are refused."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest

from elastic_training.operators.advice import AdviceError
from elastic_training.operators.period_replan import ReplanBasis, RunSoFar, overhead, replan, replan_run

PLANNED_MTBF = 36_000.0  # auto planned for a failure every 10 h
PLANNED_PERIOD = round(math.sqrt(2 * 10.0 * PLANNED_MTBF))  # Young/Daly's for that plan: 849 steps of 1 s


def run(failures: int, seconds: float, left: int = 14_400, period: int = PLANNED_PERIOD) -> RunSoFar:
    return RunSoFar(
        period=period, failures=failures, training_seconds=seconds, steps_left=left,
        step_seconds=1.0, save_seconds=10.0, recovery_seconds=60.0,
    )  # fmt: skip


def test_a_run_that_turns_stormy_is_replanned_shorter_and_the_gain_is_net_of_the_restart() -> None:
    # Ten failures in the first half hour: the posterior's MTBF is (1800 + 36000) / 11 s, its period under a third
    # of the planned one, and 4 hours left repay the restart many times.
    found = replan(run(10, 1800.0), PLANNED_MTBF, factor=3.0, restart_seconds=300.0)
    assert found is not None
    assert math.isclose(found.mtbf_seconds, 37_800.0 / 11)
    assert found.period == int(math.sqrt(2 * 10.0 * found.mtbf_seconds)) and found.period * 3 <= PLANNED_PERIOD
    now, then = (
        overhead(PLANNED_PERIOD, run(10, 1800.0), found.mtbf_seconds),
        overhead(found.period, run(10, 1800.0), found.mtbf_seconds),
    )
    assert math.isclose(found.net_gain_seconds, 14_400 * (now - then) - 300.0)


def test_a_run_as_planned_or_near_its_end_or_without_a_plan_is_left_alone() -> None:
    assert replan(run(1, 7200.0), PLANNED_MTBF) is None  # one failure in 2 hours: not far from the plan
    assert replan(run(10, 1800.0, left=100), PLANNED_MTBF) is None  # too little left to repay a restart
    assert replan(run(10, 1800.0), None) is None  # no plan (auto ran its fallback)
    assert replan(run(10, 1800.0), PLANNED_MTBF, factor=1e9) is None  # never that much shorter
    assert replan(run(10, 1800.0, period=100), PLANNED_MTBF) is None  # already short


@pytest.mark.parametrize(
    "field",
    [{"step_seconds": 0.0}, {"save_seconds": -1.0}, {"training_seconds": math.nan}, {"period": 0}, {"failures": -1}],
)
def test_unsound_figures_are_refused(field: dict[str, float]) -> None:
    figures = {
        "period": 10, "failures": 1, "training_seconds": 1.0, "steps_left": 1,
        "step_seconds": 1.0, "save_seconds": 1.0, "recovery_seconds": 1.0, **field,
    }  # fmt: skip
    with pytest.raises(AdviceError, match="unsound run for a replan"):
        RunSoFar(**figures)  # type: ignore[arg-type]


CHOICE = {
    "source": "runs", "mtbf_seconds": PLANNED_MTBF, "step_seconds": 1.0,
    "checkpoint_save_seconds": 10.0, "recovery_seconds": 60.0,
}  # fmt: skip


def test_the_basis_comes_from_a_measured_choice_and_anything_unsound_turns_the_rule_off() -> None:
    basis = ReplanBasis.from_choice(PLANNED_PERIOD, CHOICE)
    assert basis == ReplanBasis(PLANNED_PERIOD, PLANNED_MTBF, 1.0, 10.0, 60.0)
    assert basis.restart_seconds is None  # the trigger measures it
    assert ReplanBasis.from_json(basis.to_json()) == basis  # as the trigger is serialized
    assert ReplanBasis.from_choice(PLANNED_PERIOD, {**CHOICE, "source": "prior"}) is not None
    assert ReplanBasis.from_choice(PLANNED_PERIOD, {**CHOICE, "source": "fallback"}) is None  # nothing measured
    assert ReplanBasis.from_choice(PLANNED_PERIOD, {**CHOICE, "mtbf_seconds": None}) is None  # no failure rate
    unsound: tuple[Any, ...] = (None, [], "x", {**basis.to_json(), "period": True}, {**basis.to_json(), "factor": 0.5})
    for stored in unsound:
        assert ReplanBasis.from_json(stored) is None
    for figure in ("period", "step_seconds", "planned_mtbf_seconds"):
        assert ReplanBasis.from_json({**basis.to_json(), figure: "10"}) is None
    assert ReplanBasis.from_json({**basis.to_json(), "restart_seconds": math.inf}) is None


def test_a_restart_costs_the_basis_own_downtime_or_else_the_measured_start() -> None:
    measured = ReplanBasis(PLANNED_PERIOD, PLANNED_MTBF, 1.0, 10.0, 60.0)
    figures: dict[str, Any] = {"failures": 10, "training_seconds": 1800.0, "steps_left": 14_400}
    cheap = replan_run(measured, **figures, restart_seconds=100.0)
    assert cheap is not None and cheap == replan(run(10, 1800.0), PLANNED_MTBF, restart_seconds=100.0)
    # A start that took longer than the shorter period would save: no restart.
    assert replan_run(measured, **figures, restart_seconds=cheap.net_gain_seconds + 101.0) is None
    fixed = ReplanBasis(PLANNED_PERIOD, PLANNED_MTBF, 1.0, 10.0, 60.0, restart_seconds=300.0)
    assert replan_run(fixed, **figures, restart_seconds=1e9) == replan(run(10, 1800.0), PLANNED_MTBF)


def _stormy_state(now: float, failures: int) -> Any:
    from elastic_training.operators.observations import MonitorState
    from elastic_training.operators.recovery import Recovery

    state = MonitorState(jobset_uid="u-1", started_at=now - 1900.0)  # created 100 s before its first step
    state.digest.first_step_at, state.digest.latest_step = now - 1800.0, 1800
    state.digest.recoveries = [
        Recovery(detected_at=now - 1700.0 + 150 * n, failed_step=100 + 150 * n, first_step_at=now - 1640.0 + 150 * n)
        for n in range(failures)
    ]
    return state


def test_the_trigger_wakes_the_operator_to_replan_at_a_failure_that_calls_for_it_and_only_then() -> None:
    """The trigger's decide loop with an ``auto`` run's basis: ten slice failures in its first half hour yield a
    ``replan`` event with the shorter period, the restart measured from the incarnation's start; one failure, or no
    basis (a fixed period, or ``auto``'s fallback), goes on waiting (cut off here by a deadline)."""
    from elastic_training.operators.triggers import EventStatus, JobSetTrigger, _Monitor
    from tests.support.trigger_runs import BUDGETS

    basis = ReplanBasis(PLANNED_PERIOD, PLANNED_MTBF, 1.0, 10.0, 60.0)

    def first(failures: int, replan_kwarg: dict[str, Any] | None, deadline: float | None = None) -> dict[str, Any]:
        now = time.time()
        trigger = JobSetTrigger(
            name="run-1", namespace="ml", uid="u-1", target_step=16_199, budgets=BUDGETS,
            replan=replan_kwarg, deadline=deadline, poll_interval=0.05,
        )  # fmt: skip
        trigger = JobSetTrigger(**trigger.serialize()[1])  # as the triggerer rebuilds it
        state = _stormy_state(now, failures)
        monitor = _Monitor(trigger, state, hook=None, watches=object())  # type: ignore[arg-type]
        return asyncio.run(monitor._decide_loop([]))

    event = first(10, basis.to_json())
    assert (event["status"], event["reason"]) == (EventStatus.REPLAN.value, "replan")
    expected = replan_run(basis, failures=10, training_seconds=1800.0, steps_left=14_400, restart_seconds=100.0)
    assert expected is not None and event["replan"]["period"] == expected.period
    assert math.isclose(event["replan"]["net_gain_seconds"], expected.net_gain_seconds, rel_tol=1e-3)
    assert f"checkpoint_period {PLANNED_PERIOD} -> {expected.period}" in event["message"]
    assert "10 slice failures in 30 min of training" in event["message"]
    assert "net of a 100 s restart" in event["message"]
    for failures, kwarg in ((1, basis.to_json()), (10, None), (10, {"period": "x"})):
        assert first(failures, kwarg, deadline=time.time() + 0.3)["status"] == EventStatus.DEADLINE.value


def test_the_operators_settings_are_read_from_airflows_config_and_an_unusable_one_is_its_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from elastic_training.operators.run_state import RunState
    from tests.support.lifecycle_runs import _elastic

    operator = _elastic(tmp_path, "settings", steps=2000, checkpoint_period="auto")
    spec = operator.build_spec()
    ids: dict[str, Any] = {"dag_id": "d", "task_id": "pretrain", "run_id": "r", "map_index": -1}
    run = RunState({"plan": {"try_number": 1, "checkpoint_period_choice": {**CHOICE, "period": PLANNED_PERIOD}}}, **ids)
    for name in ("FACTOR", "RESTART_SECONDS"):
        monkeypatch.delenv(f"AIRFLOW__ELASTIC_TRAINING__AUTO_REPLAN_{name}", raising=False)
    assert operator._replan_settings() == (2.0, None)  # the defaults: 2 times shorter, the restart measured
    basis = ReplanBasis.from_json(operator._replan_basis(spec, run))
    assert basis == ReplanBasis(spec.checkpoint_period, PLANNED_MTBF, 1.0, 10.0, 60.0)
    monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__AUTO_REPLAN_FACTOR", "3")
    monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__AUTO_REPLAN_RESTART_SECONDS", "300")
    assert operator._replan_settings() == (3.0, 300.0)
    for factor, restart in (("x", "-1"), ("0.5", "nan"), ("inf", "soon")):
        monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__AUTO_REPLAN_FACTOR", factor)
        monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__AUTO_REPLAN_RESTART_SECONDS", restart)
        capsys.readouterr()
        assert operator._replan_settings() == (2.0, None)
        warned = capsys.readouterr().out  # Airflow's task logger writes there
        assert f"auto_replan_factor {factor!r} is unusable" in warned
        assert f"auto_replan_restart_seconds {restart!r} is unusable" in warned
    monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__AUTO_REPLAN_FACTOR", "0")
    assert operator._replan_basis(spec, run) is None  # turned off
    monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__AUTO_REPLAN_FACTOR", "3")
    run.plan = {**(run.plan or {}), "checkpoint_period_replan": {"period": 5}}
    assert operator._replan_basis(spec, run) is None  # replanned once this try already
    assert _elastic(tmp_path, "fixed", steps=2000)._replan_basis(spec, RunState({}, **ids)) is None  # a fixed period


@pytest.mark.parametrize("found", [None, "x", {"period": "5"}, {"period": 0}, {"period": PLANNED_PERIOD}])
def test_an_unusable_replan_event_changes_nothing_and_the_run_is_watched_on(found: Any, tmp_path: Any) -> None:
    """The event is stored input (the trigger's serialized kwargs): one without a sound, shorter period recreates
    nothing, spends nothing, records no replan, and the task defers again on the same JobSet."""
    from airflow.sdk.exceptions import TaskDeferred

    from elastic_training.operators.run_state import STATE_KEY, RunState
    from tests.support.lifecycle_runs import _elastic, _stored, _TaskInstance

    operator = _elastic(tmp_path, "garbled", steps=2000, checkpoint_period="auto")
    plan = {"try_number": 1, "checkpoint_period_choice": {**CHOICE, "period": PLANNED_PERIOD}}
    store = _stored("garbled-js", "u-1", plan=plan)
    context: Any = {"ti": _TaskInstance("pretrain", "manual__garbled"), "task_state_store": store}
    run = RunState.load(context)
    spec = operator._planned(operator.build_spec(), run)
    assert spec.checkpoint_period == PLANNED_PERIOD
    with pytest.raises(TaskDeferred) as deferred:
        operator._replan_period(context, spec, run, {"status": "replan", "replan": found})
    state = store[STATE_KEY]
    assert state["jobset_name"] == "garbled-js" and not state.get("escalations")
    assert "checkpoint_period_replan" not in state["plan"] and not state.get("budget_base")
    assert deferred.value.trigger.name == "garbled-js" and deferred.value.trigger.replan is not None
