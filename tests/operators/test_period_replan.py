"""operators/period_replan.py: a run that turns stormy is replanned to a shorter period, one as planned is not, nor
one too near its end to repay the restart; unsound figures are refused."""

from __future__ import annotations

import math

import pytest

from elastic_training.operators.advice import AdviceError
from elastic_training.operators.period_replan import RunSoFar, overhead, replan

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
