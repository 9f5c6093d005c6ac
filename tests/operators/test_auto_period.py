"""``checkpoint_period="auto"`` (operators/advice.py ``auto_period``): the Young/Daly period from the last runs'
failure rate and save time, clamped between the steps a save takes and half the run."""

from __future__ import annotations

import math

from elastic_training.operators.advice import (
    PRIOR_FAILURES,
    AdviceError,
    AdviceInputs,
    advise,
    auto_period,
    period_bounds,
)
from elastic_training.operators.failure_history import RunRecord

STEPS = 10_000


def past(run_id: str, *, failures: int, wall: float = 3600.0, step: float = 1.0, save: float = 20.0) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        ended_at=0.0,
        wall_seconds=wall,
        failures_total=failures,
        mean_step_seconds=step,
        checkpoint_save_seconds=save,
        recovery_seconds=30.0,
        checkpoint_period=100,
    )


def test_frequent_failures_pick_a_shorter_period_than_none() -> None:
    stormy = auto_period([past("a", failures=6), past("b", failures=4)], steps=STEPS, fallback=10)
    calm = auto_period([past("a", failures=0), past("b", failures=0)], steps=STEPS, fallback=10)
    assert stormy.period < calm.period
    lower, upper = stormy.bounds
    assert lower <= stormy.period <= upper and lower <= calm.period <= upper == STEPS // 2
    # Young/Daly over both runs: 10 failures in 7200 s, one more assumed (PRIOR_FAILURES), a save of 20 s:
    # tau* = sqrt(2 * 20 * 7200 / 11) = 161.8 s; calm runs: sqrt(2 * 20 * 7200) = 536.7 s, not "never".
    assert stormy.mtbf_seconds == round(7200 / 11, 6) and stormy.period in (161, 162) and stormy.clamped is None
    assert calm.mtbf_seconds == 7200.0 and calm.period in (536, 537) and calm.clamped is None
    assert stormy.predicted_goodput is not None and 0 < stormy.predicted_goodput < 1
    assert "10 failure(s) (+1 assumed): one every 655 s" in stormy.reason
    # Only a run too short for the model's interval reaches the run-length bound.
    short = auto_period([past("a", failures=0)], steps=400, fallback=10)
    assert short.period == 200 and short.clamped == "run_length"


def test_the_same_model_as_the_advice() -> None:
    choice = auto_period([past("a", failures=5)], steps=STEPS, fallback=10)
    inputs = AdviceInputs(
        failures=5 + PRIOR_FAILURES,
        wall_seconds=3600.0,
        step_seconds=1.0,
        checkpoint_save_seconds=20.0,
        checkpoint_period=1,
        steps=STEPS,
        recovery_seconds=30.0,
    )
    advice = advise(inputs)
    assert choice.period == advice.optimal_period and choice.predicted_goodput == advice.optimal_goodput


def test_never_more_often_than_a_save_allows() -> None:
    # A save of 50 steps' time and a failure every 36 s: the model wants ~60 s; the floor is 50 steps.
    choice = auto_period([past("a", failures=100, save=50.0)], steps=STEPS, fallback=10)
    assert choice.bounds[0] == 50 and choice.period >= 50
    slow_save = auto_period([past("a", failures=3000, save=50.0)], steps=STEPS, fallback=10)
    assert slow_save.period == 50 and slow_save.clamped == "save_time" and "raised to 50" in slow_save.reason
    assert period_bounds(steps=20, step_seconds=1.0, save_seconds=100.0) == (10, 10)  # half the run caps the floor
    assert period_bounds(steps=20, step_seconds=None, save_seconds=None) == (1, 10)


def test_without_measured_runs_the_fallback() -> None:
    empty = auto_period([], steps=100, fallback=10)
    assert (empty.period, empty.runs, empty.predicted_goodput) == (10, 0, None)
    assert "no earlier run in the history" in empty.reason
    unmeasured = RunRecord(run_id="x", ended_at=0.0, wall_seconds=10.0)
    assert "measured" in auto_period([unmeasured], steps=100, fallback=10).reason
    assert auto_period([], steps=8, fallback=10).period == 4  # within the bounds too
    assert math.isfinite(auto_period([past("a", failures=1)], steps=100, fallback=10).wall_seconds)


def test_numbers_read_back_are_bounded_so_nothing_overflows() -> None:
    """A stored history is anyone's edit: a near-zero step time made ``save / step`` infinite and ``math.ceil`` of
    it raised OverflowError; huge, zero and non-finite numbers are bounded or ignored instead."""
    hostile = [
        past("tiny-step", failures=1, wall=100.0, step=5e-324, save=1.0),
        past("zero-save", failures=0, wall=1e7, step=0.5, save=0.0),
        past("huge", failures=2**31 - 1, wall=1e7, step=1e7, save=1e7),
        past("tiny-wall", failures=1, wall=1e-300, step=1.0, save=1.0),
    ]
    for run in hostile:
        choice = auto_period([run], steps=100, fallback=10)
        assert 1 <= choice.period <= 50 and choice.runs == 1, run.run_id
    both = auto_period(hostile, steps=100, fallback=10)
    assert 1 <= both.period <= 50 and both.runs == 4
    for value in (math.nan, math.inf):  # not a measurement: left out, so the fallback
        choice = auto_period([past("odd", failures=1, step=value)], steps=100, fallback=10)
        assert choice.period == 10 and choice.runs == 0
    # the run's own advice refuses a step time the model cannot divide by, rather than overflowing
    try:
        AdviceInputs(
            failures=1,
            wall_seconds=100.0,
            step_seconds=5e-324,
            checkpoint_save_seconds=1.0,
            checkpoint_period=10,
            steps=100,
        )
    except AdviceError as error:
        assert "step_seconds" in str(error)
    else:
        raise AssertionError("a 5e-324 s step was accepted")
