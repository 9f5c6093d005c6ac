"""``checkpoint_period="auto"`` (operators/advice.py ``auto_period``): the Young/Daly period from the history's runs of
the same shape, failures per slice-second of training, weighted by age; the fallback until there is evidence; at
most a bounded change per run; an interval on what it read; hostile numbers that give a period, not an error."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest

from elastic_training.operators.advice import (
    AUTO_SETTINGS,
    AdviceError,
    AdviceInputs,
    AutoSettings,
    advise,
    auto_period,
    period_bounds,
    shape_fingerprint,
)
from elastic_training.operators.failure_history import FailureHistory, RunRecord
from elastic_training.operators.run_report import CapacityTimes, period_choice_from_json
from elastic_training.operators.shape_prior import ShapeEstimate
from elastic_training.operators.spec import ElasticRunSpec
from tests.support.reports import full_report

STEPS = 5_000  # of 1 s: half a run, the evidence needed to leave the fallback, is 2500 s of training
SHAPE = "v1:0123456789abcdef"
RATE_ONLY = dataclasses.replace(AUTO_SETTINGS, save_failures=False)
PRIOR = AUTO_SETTINGS.prior_failures  # the failures assumed on top of those seen (Jeffreys' half a failure)


def young_daly(save_seconds: float, mtbf_seconds: float) -> tuple[int, int]:
    """The whole steps of 1 s either side of Young/Daly's first-order interval."""
    tau = math.sqrt(2 * save_seconds * mtbf_seconds)
    return math.floor(tau), math.ceil(tau)


def past(
    run_id: str,
    *,
    failures: int,
    training: float = 3600.0,
    wall: float | None = None,
    step: float = 1.0,
    save: float = 20.0,
    slices: int = 1,
    period: int | None = 100,
    fingerprint: str = SHAPE,
) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        ended_at=0.0,
        slices=slices,
        wall_seconds=training if wall is None else wall,
        training_seconds=training,
        failures_total=failures,
        mean_step_seconds=step,
        checkpoint_save_seconds=save,
        recovery_seconds=30.0,
        checkpoint_period=period,
        fingerprint=fingerprint,
    )


def choose(runs: list[RunRecord], **kwargs: Any) -> Any:
    options: dict[str, Any] = {"steps": STEPS, "fallback": 10, "fingerprint": SHAPE, "settings": RATE_ONLY}
    return auto_period(runs, **{**options, **kwargs})


def test_frequent_failures_pick_a_shorter_period_than_none() -> None:
    no_bound = dataclasses.replace(RATE_ONLY, half_life_runs=0.0)  # the newest run alone: exact numbers
    stormy = choose([past("a", failures=10)], settings=no_bound)
    calm = choose([past("a", failures=0)], settings=no_bound)
    assert stormy.period < calm.period
    lower, upper = stormy.bounds
    assert lower <= stormy.period <= upper and lower <= calm.period <= upper == STEPS // 2
    # Young/Daly: 10 failures in 3600 s, half a failure more assumed, a save of 20 s: tau* = sqrt(2 * 20 * 3600 /
    # 10.5) = 117.1 s; a calm run: sqrt(2 * 20 * 3600 / 0.5) = 536.7 s, not "never".
    assert stormy.mtbf_seconds == round(3600 / (10 + PRIOR), 6) and stormy.clamped is None
    assert stormy.period in young_daly(20, 3600 / (10 + PRIOR))
    assert calm.mtbf_seconds == 3600 / PRIOR and calm.period in young_daly(20, 3600 / PRIOR) and calm.clamped is None
    assert stormy.predicted_goodput is not None and 0 < stormy.predicted_goodput < 1
    every = round(3600 / (10 + PRIOR))
    said = f"10 failure(s) (+{PRIOR:g} assumed) over 3600 slice-seconds of training: one every {every} s"
    assert said in stormy.reason
    # Only a run too short for the model's interval reaches the run-length bound.
    short = choose([past("a", failures=0)], steps=400)
    assert short.period == 200 and short.clamped == "run_length"


def test_the_same_model_as_the_advice() -> None:
    choice = choose([past("a", failures=5)])
    assert (2 * (5 + PRIOR)).is_integer()  # the advice counts whole failures: 5 and those assumed, over two hours
    inputs = AdviceInputs(
        failures=int(2 * (5 + PRIOR)),
        wall_seconds=2 * 3600.0,
        step_seconds=1.0,
        checkpoint_save_seconds=20.0,
        checkpoint_period=1,
        steps=STEPS,
        recovery_seconds=30.0,
    )
    advice = advise(inputs)
    assert choice.period == advice.optimal_period and choice.predicted_goodput == advice.optimal_goodput


def test_the_rate_is_over_training_time_not_the_wall_time_around_it() -> None:
    # The same training, once with a day of queue waits, retry delays and a clear between tries around it.
    plain = choose([past("a", failures=6), past("b", failures=6)])
    waited = choose([past("a", failures=6, wall=90_000.0), past("b", failures=6, wall=3600.0)])
    assert waited.period == plain.period and waited.mtbf_seconds == plain.mtbf_seconds
    assert waited.wall_seconds == 93_600.0 and waited.training_seconds == 7200.0


def test_failures_count_per_slice_and_scale_to_the_run() -> None:
    # Two runs of 2 slices for an hour each, 4 failures each, and the failures assumed: per slice.
    runs = [past("a", failures=4, slices=2), past("b", failures=4, slices=2)]
    weights = 1 + 0.5 ** (1 / AUTO_SETTINGS.half_life_runs)  # the older run weighs less
    on_two = choose(runs, slices=2)
    on_four = choose(runs, slices=4)
    slice_seconds = 2 * 3600.0 * weights
    assert on_two.mtbf_seconds == pytest.approx(slice_seconds / ((4 * weights + PRIOR) * 2), rel=1e-6)
    assert on_four.mtbf_seconds == pytest.approx(on_two.mtbf_seconds / 2, rel=1e-6)
    assert on_four.period < on_two.period and on_four.slices == 4


def test_runs_of_another_shape_are_left_out() -> None:
    other = "v1:ffffffffffffffff"
    mixed = [past("a", failures=0, save=2.0, fingerprint=other), past("b", failures=30), past("c", failures=30)]
    mine = choose(mixed)
    assert mine.runs == 2 and mine.runs_other_shape == 1 and mine.checkpoint_save_seconds == 20.0
    assert mine == dataclasses.replace(choose(mixed[1:]), runs_other_shape=1)
    only_other = choose([mixed[0]])
    assert only_other.runs == 0 and only_other.period == 10 and "1 of another" in only_other.reason
    # Entries from before the fingerprint was kept are of an unknown shape: left out too, counted.
    old = dataclasses.replace(mixed[1], fingerprint="")
    assert choose([old]).period == 10 and choose([old]).runs_other_shape == 1
    # No fingerprint asked (a caller without a spec): every run counts.
    assert choose(mixed, fingerprint="").runs == 3


def test_the_fallback_until_half_a_run_of_training_was_seen() -> None:
    died_early = choose([past("a", failures=3, training=1000.0), past("b", failures=1, training=1000.0)])
    assert (died_early.period, died_early.runs, died_early.predicted_goodput) == (10, 0, None)
    assert "too little evidence: the 2 earlier run(s) of this shape trained 2000 s, less than 0.5 run(s)" in (
        died_early.reason
    )
    enough = choose([past("a", failures=3, training=1000.0), past("b", failures=1, training=2000.0)])
    assert enough.runs == 2 and enough.period != 10


def test_the_period_moves_a_bounded_step_per_run() -> None:
    # Calm runs at period 400 (a fixed period, or the model's choice then: enough evidence before the newest run).
    calm = [past(f"c{n}", failures=0, training=60_000.0, period=400) for n in range(3)]
    no_age = dataclasses.replace(RATE_ONLY, half_life_runs=1e6)
    wanted = choose(calm, settings=dataclasses.replace(no_age, max_increase=1e9)).period
    bounded = choose(calm, settings=no_age)
    assert wanted == STEPS // 2 and bounded.period == 1600 and bounded.clamped == "change_bound"
    assert bounded.optimal_period > wanted and bounded.previous_period == 400  # the model's, before any bound
    assert "moved only to 1600 from the last run's 400" in bounded.reason
    # Down: at most /8 per run.
    storm = choose([*calm, past("s", failures=10_000, training=60_000.0, period=4000)], settings=no_age)
    assert storm.period == 500 and storm.clamped == "change_bound" and storm.optimal_period < 500
    # The run before the first choice ran the fallback: nothing learned to stay near, so no bound.
    first = choose([past("a", failures=0, training=60_000.0, period=10)])
    assert first.previous_period is None and first.clamped is None and first.period > 40


def test_the_choice_carries_an_interval_that_narrows_with_evidence() -> None:
    few = choose([past("a", failures=3)])
    many = choose([past(str(n), failures=3) for n in range(40)])
    for c in (few, many):
        assert c.confidence == 0.9
        assert c.mtbf_low_seconds < c.mtbf_seconds < c.mtbf_high_seconds  # type: ignore[operator]
        assert c.period_low <= c.period <= c.period_high  # type: ignore[operator]
        assert c.goodput_low <= c.predicted_goodput <= c.goodput_high  # type: ignore[operator]
    width = {c.runs: c.mtbf_high_seconds / c.mtbf_low_seconds for c in (few, many)}  # type: ignore[operator]
    assert width[1] > 5 > 2 > width[40]
    # 3 failures + 0.5 assumed in 3600 s: the Gamma(3.5) posterior's 5 % and 95 % points of the rate are 1.084 and
    # 7.034 failures per 3600 s (chi-square with 7 degrees of freedom, halved); the approximation is within 2 %.
    assert PRIOR == 0.5
    assert few.mtbf_high_seconds == pytest.approx(3600 / 1.084, rel=0.02)
    assert few.mtbf_low_seconds == pytest.approx(3600 / 7.034, rel=0.02)
    # It survives the report's JSON, the plan's too.
    assert period_choice_from_json(json.loads(json.dumps(many.to_json()))) == many


def test_failures_that_saves_bring_make_saves_dearer_not_the_period_shorter() -> None:
    # A night at period 10 (a save every 30 s) had 20 failures, nights at 200 (every 220 s) 2 each: failures follow
    # the saves, not the hours. The rate-only model reads a stormy fleet and shortens the period; the fit does not.
    runs = [past("fallback", failures=20, training=12_000.0, period=10)]
    runs += [past(f"n{n}", failures=2, training=12_000.0, period=200) for n in range(6)]
    rate_only = choose(runs)
    fitted = choose(runs, settings=AUTO_SETTINGS)
    assert fitted.period > rate_only.period and fitted.mtbf_seconds > rate_only.mtbf_seconds  # type: ignore[operator]
    # Without saves per second that differ between runs, the fit stays near the rate-only model.
    steady = [past(f"n{n}", failures=4, training=12_000.0, period=200) for n in range(6)]
    assert choose(steady, settings=AUTO_SETTINGS).period == pytest.approx(choose(steady).period, rel=0.1)


def test_failures_that_interrupted_saves_are_told_apart_at_one_period() -> None:
    # The same six nights at period 200, 4 failures each, now recorded with which of them interrupted a save (the
    # restore went to an older step). A save takes 20 of every 220 s: by chance about 0.4 of 4 would.
    def nights(in_saves: int | None) -> list[RunRecord]:
        runs = [past(f"n{n}", failures=4, training=12_000.0, period=200) for n in range(6)]
        return [dataclasses.replace(r, failures_in_saves=in_saves) for r in runs]

    unknown = choose(nights(None), settings=AUTO_SETTINGS)
    brought = choose(nights(3), settings=AUTO_SETTINGS)
    steady = choose(nights(0), settings=AUTO_SETTINGS)
    # Three in four during a save, ten times chance: the saves brought them, the hours are calmer, the period longer.
    assert brought.mtbf_seconds > 2.5 * steady.mtbf_seconds  # type: ignore[operator]
    assert brought.period > unknown.period
    # None during a save: every failure is the hours', as the rate-only model reads them.
    assert steady.mtbf_seconds == pytest.approx(choose(nights(0)).mtbf_seconds, rel=1e-6)
    assert steady.period <= unknown.period
    # Without a save time the steady rate's share of in-save failures is unknown: read as a run that does not say.
    untimed = [dataclasses.replace(r, checkpoint_save_seconds=None) for r in nights(3)]
    as_unknown = [dataclasses.replace(r, failures_in_saves=None) for r in untimed]
    assert choose(untimed, settings=AUTO_SETTINGS) == choose(as_unknown, settings=AUTO_SETTINGS)


def test_never_more_often_than_a_save_allows() -> None:
    # A save of 50 steps' time and a failure every 36 s: the model wants ~60 s; the floor is 50 steps.
    choice = choose([past("a", failures=100, save=50.0)])
    assert choice.bounds[0] == 50 and choice.period >= 50
    slow_save = choose([past("a", failures=3000, save=50.0)])
    assert slow_save.period == 50 and slow_save.clamped == "save_time" and "raised to 50" in slow_save.reason
    assert period_bounds(steps=20, step_seconds=1.0, save_seconds=100.0) == (10, 10)  # half the run caps the floor
    assert period_bounds(steps=20, step_seconds=None, save_seconds=None) == (1, 10)


@pytest.mark.parametrize(
    "record",
    [
        past("tiny-step", failures=3, step=1e-300, training=1e7),
        past("huge-everything", failures=2**31 - 1, training=1e7, save=1e7, step=1e7, slices=2**31 - 1),
        past("tiny-training", failures=2**31 - 1, training=1e-300, step=1e-300),
        past("zero-save", failures=5, save=0.0),
        past("no-period", failures=5, period=None),
    ],
    ids=lambda r: r.run_id,
)
def test_hostile_numbers_give_a_period_within_the_bounds(record: RunRecord) -> None:
    # Each parses (the history's own checks) and gives a period, never an OverflowError or a ZeroDivisionError.
    parsed = FailureHistory.parse(FailureHistory((record,)).render()).runs
    for settings in (AUTO_SETTINGS, RATE_ONLY):
        choice = choose(list(parsed), settings=settings)
        lower, upper = choice.bounds
        assert lower <= choice.period <= upper and isinstance(choice.period, int)
        json.dumps(choice.to_json(), allow_nan=False)


def test_without_measured_runs_the_fallback() -> None:
    empty = choose([], steps=100)
    assert (empty.period, empty.runs, empty.predicted_goodput) == (10, 0, None)
    assert "no earlier run in the history" in empty.reason
    unmeasured = RunRecord(run_id="x", ended_at=0.0, wall_seconds=10.0, fingerprint=SHAPE)  # no training time
    assert "measured" in choose([unmeasured], steps=100).reason
    assert choose([], steps=8).period == 4  # within the bounds too
    with pytest.raises(AdviceError):
        AutoSettings(max_increase=0.5)


def test_the_model_refuses_a_step_time_it_cannot_divide_by() -> None:
    """A near-zero step time made ``save / step`` infinite and ``math.ceil`` of it raised OverflowError: the
    model's inputs refuse it, and ``auto`` clamps a step read back (a stored history is anyone's edit)."""
    with pytest.raises(AdviceError, match="step_seconds"):
        AdviceInputs(
            failures=1,
            wall_seconds=100.0,
            step_seconds=5e-324,
            checkpoint_save_seconds=1.0,
            checkpoint_period=10,
            steps=100,
        )
    for value in (math.nan, math.inf):  # not a measurement: refused when the history is read
        with pytest.raises(ValueError):
            RunRecord.from_json({**past("odd", failures=1).to_json(), "mean_step_seconds": value})


def spec(**changes: Any) -> ElasticRunSpec:
    base = ElasticRunSpec(
        run_name="nightly",
        base_output_directory="gs://b/runs",
        steps=5000,
        checkpoint_period=100,
        num_slices=2,
        maxtext_args={"model_name": "llama2-7b", "per_device_batch_size": "4", "dataset_path": "gs://b/data"},
        tpu_type="v5p",
        tpu_topology="2x2x1",
        image="maxtext:2026-12-01",
    )
    return dataclasses.replace(base, **changes)


def test_the_shape_fingerprint_is_what_decides_step_and_save_times() -> None:
    mine = shape_fingerprint(spec())
    assert mine.startswith("v1:") and len(mine) == 19
    same = [
        spec(run_name="other", steps=900, checkpoint_period=7, num_slices=8, image="maxtext:2026-12-02"),
        spec(base_output_directory="/tmp/x"),
        spec(maxtext_args={"model_name": "llama2-7b", "per_device_batch_size": "4", "dataset_path": "gs://c/d"}),
    ]
    assert {shape_fingerprint(s) for s in same} == {mine}
    other = [
        spec(maxtext_args={"model_name": "llama2-13b", "per_device_batch_size": "4"}),
        spec(maxtext_args={"model_name": "llama2-7b", "per_device_batch_size": "8"}),
        spec(tpu_topology="2x2x2"),
        spec(tpu_type="v5e"),
        spec(runtime="local"),
    ]
    assert len({shape_fingerprint(s) for s in other} | {mine}) == len(other) + 1


def test_the_history_entry_carries_training_time_and_shape() -> None:
    report = dataclasses.replace(full_report(), capacity=CapacityTimes(queued_seconds=900.0, training_seconds=321.5))
    record = report.history_record(run_id="r", ended_at=1.0, succeeded=True, fingerprint=SHAPE)
    assert record.training_seconds == 321.5 and record.fingerprint == SHAPE
    again = FailureHistory.parse(FailureHistory((record,)).render()).runs[0]
    assert again == record
    # An entry from before these were kept still parses, with neither.
    old = {k: v for k, v in record.to_json().items() if k not in ("training_seconds", "fingerprint")}
    assert RunRecord.from_json(old) == dataclasses.replace(record, training_seconds=None, fingerprint="")
    assert math.isfinite(choose([again], steps=100).wall_seconds)


ESTIMATE = ShapeEstimate(step_seconds=2.0, save_seconds=16.0, recovery_seconds=110.0, source="a test's estimate")


def test_before_any_run_the_prior_chooses_and_says_so() -> None:
    # The stated prior (0.2 failures a slice-hour, half a failure's weight) on 4 slices: one failure every 4500 s,
    # so Young's sqrt(2 * 16 * 4500) = 379 s, about 190 steps of 2 s, not the fallback's 10.
    first = choose([], slices=4, estimate=ESTIMATE, settings=AUTO_SETTINGS)
    assert first.source == "prior" and first.runs == 0 and first.mtbf_seconds == 4500.0
    assert abs(first.period - math.sqrt(2 * 16 * 4500) / 2) <= 1
    assert first.period_low is not None and first.period_high is not None
    assert first.period_low < first.period < first.period_high  # half a failure's evidence: a wide interval
    assert "no run of this shape measured yet, so the prior: a test's estimate" in first.reason
    assert "0.2 per slice-hour" in first.reason
    # No estimate (a model the table does not list): the fallback, and the choice says so.
    assert choose([], slices=4, settings=AUTO_SETTINGS).source == "fallback"
    # Once a run of the shape was measured, its own evidence replaces the prior entirely.
    after = choose(
        [past("a", failures=4, training=6000.0, step=2.0, save=16.0)],
        slices=4,
        estimate=ESTIMATE,
        settings=AUTO_SETTINGS,
    )
    assert after.source == "runs" and after.runs == 1 and "the last 1 run(s) of this shape" in after.reason
    assert after.period != first.period


def test_the_settings_of_before_issue_55_run_the_fallback_first() -> None:
    before = dataclasses.replace(AUTO_SETTINGS, prior_failures_per_slice_hour=0.0)
    assert choose([], estimate=ESTIMATE, settings=before).period == 10


def test_a_choice_stored_before_issue_55_reads_back_with_its_source() -> None:
    from_runs, fallback = choose([past("a", failures=4, training=6000.0)]).to_json(), choose([]).to_json()
    del from_runs["source"], fallback["source"]
    assert [period_choice_from_json(c).source for c in (from_runs, fallback)] == ["runs", "fallback"]  # type: ignore[union-attr]
