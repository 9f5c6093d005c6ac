"""Checkpoint-period advice against numbers worked by hand (see the arithmetic beside each case)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from elastic_training.operators.advice import AdviceError, AdviceInputs, advise, goodput
from elastic_training.operators.checkpoints.timing import mean_save_seconds, save_seconds
from elastic_training.operators.run_report import RunReport
from tests.support.recovery_logs import report_with


def inputs(**changes: Any) -> AdviceInputs:
    # M = 1000 s / 2 failures = 500 s; C = 4 s; one step = 1 s; R = 10 s.
    values: dict[str, Any] = {
        "failures": 2,
        "wall_seconds": 1000.0,
        "step_seconds": 1.0,
        "checkpoint_save_seconds": 4.0,
        "checkpoint_period": 10,
        "steps": 1000,
        "recovery_seconds": 10.0,
    }
    values.update(changes)
    return AdviceInputs(**values)


def test_young_daly_optimum_and_both_goodputs() -> None:
    advice = advise(inputs())
    # tau* = sqrt(2 * 4 * 500) = sqrt(4000) = 63.2456 s = 63.2 steps.
    assert advice.optimal_interval_seconds == pytest.approx(63.245553, abs=1e-6)
    assert advice.mtbf_seconds == 500.0
    # G(63) = 1 - 4/63 - (31.5 + 10)/500 = 1 - 0.0634921 - 0.083 = 0.8535079
    # G(64) = 1 - 4/64 - (32 + 10)/500 = 1 - 0.0625 - 0.084 = 0.8535000 -> 63 wins.
    assert advice.optimal_period == 63
    assert advice.optimal_goodput == pytest.approx(0.853508, abs=1e-6)
    # G(10) = 1 - 4/10 - (5 + 10)/500 = 1 - 0.4 - 0.03 = 0.57
    assert advice.configured_period == 10
    assert advice.configured_goodput == pytest.approx(0.57, abs=1e-9)
    assert not advice.capped_at_run_length
    assert "checkpoint_period=63" in advice.summary() and "instead of 10" in advice.summary()


def test_no_failures_at_all_checkpoints_only_at_the_end() -> None:
    advice = advise(inputs(failures=0, checkpoint_period=100))
    # M infinite: the failure term vanishes, tau* is unbounded -> the run's own length, 1000 steps.
    assert advice.mtbf_seconds is None and advice.optimal_interval_seconds is None
    assert advice.capped_at_run_length
    assert advice.optimal_period == 1000
    assert advice.optimal_goodput == pytest.approx(1 - 4 / 1000)  # 0.996
    assert advice.configured_goodput == pytest.approx(1 - 4 / 100)  # 0.96
    assert "no failure was observed" in advice.summary()


def test_period_longer_than_the_run_counts_as_one_save_at_the_end() -> None:
    # 50 steps of 1 s, one failure in 100 s (M = 100), C = 2, R = 0. tau* = sqrt(2*2*100) = 20 s.
    advice = advise(
        inputs(
            failures=1,
            wall_seconds=100.0,
            steps=50,
            checkpoint_period=500,
            checkpoint_save_seconds=2.0,
            recovery_seconds=0.0,
        )
    )
    # The configured period is past the end: it behaves as tau = 50 s. G = 1 - 2/50 - 25/100 = 0.71.
    assert advice.configured_goodput == pytest.approx(0.71)
    # G(20) = 1 - 0.1 - 0.1 = 0.8; G(21) = 1 - 0.0952381 - 0.105 = 0.7997619 -> 20.
    assert advice.optimal_period == 20
    assert advice.optimal_goodput == pytest.approx(0.8)


def test_optimum_past_the_run_is_capped_at_its_length() -> None:
    # M = 10000 s, C = 50 s: tau* = sqrt(2*50*10000) = 1000 s > 200 steps of 1 s.
    advice = advise(
        inputs(
            failures=1,
            wall_seconds=10000.0,
            steps=200,
            checkpoint_save_seconds=50.0,
            checkpoint_period=200,
            recovery_seconds=0.0,
        )
    )
    assert advice.capped_at_run_length and advice.optimal_period == 200
    assert advice.optimal_period == advice.configured_period
    assert "already the best period" in advice.summary()
    # G(200) = 1 - 50/200 - 100/10000 = 0.74
    assert advice.optimal_goodput == pytest.approx(0.74)


def test_free_checkpoints_mean_every_step() -> None:
    advice = advise(inputs(checkpoint_save_seconds=0.0))
    # tau* = 0 -> the shortest period, 1 step: G(1) = 1 - 0 - (0.5 + 10)/500 = 0.979
    assert advice.optimal_period == 1
    assert advice.optimal_goodput == pytest.approx(0.979)


def test_goodput_is_clamped_and_needs_a_positive_interval() -> None:
    assert goodput(1.0, save_seconds=100.0, mtbf_seconds=10.0, recovery_seconds=0.0) == 0.0
    assert goodput(10.0, save_seconds=0.0, mtbf_seconds=math.inf, recovery_seconds=99.0) == 1.0
    with pytest.raises(AdviceError):
        goodput(0.0, save_seconds=1.0, mtbf_seconds=10.0, recovery_seconds=0.0)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"wall_seconds": 0.0}, "wall_seconds must be a positive number"),
        ({"step_seconds": float("nan")}, "step_seconds must be a positive number"),
        ({"checkpoint_save_seconds": -1.0}, "checkpoint_save_seconds must be a number >= 0"),
        ({"failures": -1}, "failures must be >= 0"),
        ({"checkpoint_period": 0}, "checkpoint_period and steps must be >= 1"),
        ({"failures": True}, "failures must be an integer"),
    ],
)
def test_impossible_inputs_are_refused(change: dict[str, Any], words: str) -> None:
    with pytest.raises(AdviceError, match=words):
        inputs(**change)


def test_run_report_carries_budgets_and_advice() -> None:
    report = report_with(2)
    assert report["budgets"] == {"max_slice_restarts": 3}
    assert report["checkpoint_period"] == 5 and report["checkpoint_save_seconds"] == 0.5
    advice = report["advice"]
    assert advice is not None
    # Two recoveries in 200 s: M = 100 s; each took 5 s (R = 5); C = 0.5 s; step 1 s.
    # tau* = sqrt(2 * 0.5 * 100) = 10 s -> 10 steps: G(10) = 1 - 0.05 - (5 + 5)/100 = 0.85.
    assert advice["failures"] == 2 and advice["recovery_seconds"] == pytest.approx(5.0)
    assert advice["optimal_period"] == 10 and advice["optimal_goodput"] == pytest.approx(0.85)
    # G(5) = 1 - 0.1 - (2.5 + 5)/100 = 0.825
    assert advice["configured_goodput"] == pytest.approx(0.825)
    assert advise(RunReport.from_json(report).advice_inputs()).to_json() == advice


def test_report_without_a_measured_save_time_has_no_advice() -> None:
    report = RunReport.from_json({**report_with(1), "checkpoint_save_seconds": None})
    assert report.advice is None and report.to_json()["advice"] is None
    with pytest.raises(AdviceError, match="no 'checkpoint_save_seconds'"):
        report.advice_inputs()


def test_save_seconds_from_orbax_metadata(tmp_path: Path) -> None:
    for step, (start, end) in {10: (1_000_000_000, 3_500_000_000), 20: (5_000_000_000, 5_500_000_000)}.items():
        (tmp_path / str(step)).mkdir()
        (tmp_path / str(step) / "_CHECKPOINT_METADATA").write_text(
            f'{{"init_timestamp_nsecs": {start}, "commit_timestamp_nsecs": {end}}}'
        )
    (tmp_path / "30").mkdir()  # no metadata: skipped
    (tmp_path / "40").mkdir()
    (tmp_path / "40" / "_CHECKPOINT_METADATA").write_text("[not json")
    paths = [str(tmp_path / s) for s in ("10", "20", "30", "40")]
    assert save_seconds(paths) == [2.5, 0.5]
    assert mean_save_seconds(paths) == 1.5
    assert mean_save_seconds(paths[2:]) is None
