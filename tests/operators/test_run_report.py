"""The run report as one typed object: what lands in XCom, read back, from this release and from earlier ones."""

from __future__ import annotations

import json
from typing import Any

import pytest

from elastic_training.operators.advice import AUTO_PERIOD
from elastic_training.operators.recovery import CostModel, Incarnation, LogDigest, run_report
from elastic_training.operators.run_report import (
    REPORT_VERSION,
    BudgetAllowances,
    ReportError,
    RunReport,
)
from tests.support.recovery_logs import steps
from tests.support.reports import full_report

# The keys the operator has always written (docs/operators.md, "The run report"); ``version`` comes on top.
DOCUMENTED_KEYS = set(
    [
        "jobset_name",
        "namespace",
        "jobsets",
        "run_directory",
        "target_step",
        "final_step",
        "slice_restarts",
        "in_process_recoveries",
        "full_restarts",
        "jobset_restarts",
        "scale_up_recoveries",
        "preemptions",
        "preemption_count",
        "pods_ready_evictions",
        "evictions",
        "preemption_recreations",
        "queued_seconds",
        "queue_spans",
        "provisioning_seconds",
        "provisioning_spans",
        "provisioning_notes",
        "queue_notes",
        "admission_to_first_step_seconds",
        "training_seconds",
        "tail_seconds",
        "resume_seconds",
        "last_step_at",
        "slice_evictions",
        "escalations",
        "recoveries",
        "steps_lost",
        "chip_seconds_lost",
        "cost_lost",
        "goodput",
        "goodput_with_queue",
        "mean_step_seconds",
        "chips",
        "price_per_chip_hour",
        "wall_seconds",
        "budgets",
        "checkpoint_period",
        "checkpoint_save_seconds",
        "advice",
        "num_slices",
        "slice_failures",
        "node_pools",
        "node_pool_avoidance",
        "history_key",
        "history_notes",
        "steps_executed",
        "startup_step_seconds",
        "resumed_from_step",
        "trained_nothing",
    ]
)


def test_the_report_round_trips_through_json() -> None:
    report = full_report()
    assert report.recoveries and report.preemptions and report.escalations  # every part is there
    again = RunReport.from_json(json.loads(json.dumps(report.to_json(), allow_nan=False)))
    assert again == report
    assert again.to_json() == report.to_json()


def test_the_json_keeps_its_keys_and_adds_the_version() -> None:
    data = full_report().to_json()
    assert data["version"] == REPORT_VERSION
    assert set(data) == DOCUMENTED_KEYS | {"version", "checkpoint_period_choice"}
    assert data["checkpoint_period_choice"]["mode"] == AUTO_PERIOD
    assert data["checkpoint_period_choice"]["achieved_goodput"] == data["goodput"]
    assert data["budgets"] == {
        "max_slice_restarts": 3,
        "slice_restart_window_seconds": 3600.0,
        "elastic_max_retries": 4,
    }
    [escalation] = data["escalations"]
    assert escalation["quarantined"] == ["/r/checkpoints/quarantine/25"] and escalation["preemption"] is False
    assert "failure" not in data and "already_at_target" not in data  # present only when they say something


def test_an_unversioned_report_of_an_earlier_release_is_read() -> None:
    """The shape stored before ``version`` (and before queue times and pools): what it lacks reads as unknown."""
    stored: dict[str, Any] = {
        "jobset_name": "run-a",
        "namespace": "default",
        "run_directory": "/r",
        "target_step": 99,
        "final_step": 99,
        "slice_restarts": 1,
        "in_process_recoveries": 1,
        "full_restarts": 0,
        "jobset_restarts": 0,
        "escalations": [],
        "recoveries": [
            {
                "slices": 3,
                "failed_step": 29,
                "restored_step": 20,
                "steps_lost": 9,
                "detected_at": 40.0,
                "slices_ready_at": 42.0,
                "restored_at": 43.0,
                "first_step_at": 45.0,
                "phase_seconds": {"wait_for_slices": 2.0, "restore": 1.0, "first_step": 2.0, "total": 5.0},
                "chip_seconds_lost": 112.0,
                "cost": 0.05,
                "complete": True,
            }
        ],
        "steps_lost": 9,
        "chips": 8,
        "price_per_chip_hour": 1.5,
        "chip_seconds_lost": 112.0,
        "cost_lost": 0.05,
        "mean_step_seconds": 1.0,
        "goodput": 0.9,
        "wall_seconds": 200,
        "jobsets": ["run-a"],
        "advice": {"configured_period": 1},  # derived, not read: the model gives it again
    }
    report = RunReport.from_json(stored)
    assert report.version == REPORT_VERSION and report.wall_seconds == 200.0
    assert report.recoveries[0].kind == "slice_down" and report.recoveries[0].phase_seconds.total == 5.0
    assert report.capacity is None and report.preemptions == () and report.node_pool_avoidance is None
    assert report.budgets == BudgetAllowances() and report.checkpoint_save_seconds is None
    assert report.advice is None  # no save time measured then
    assert report.to_json()["version"] == REPORT_VERSION


def test_a_newer_version_is_refused_with_what_to_do() -> None:
    data = {**full_report().to_json(), "version": REPORT_VERSION + 1}
    with pytest.raises(ReportError, match=f"version {REPORT_VERSION + 1}, newer than this elastic-training reads"):
        RunReport.from_json(data)
    for bad in ("1", 0, True):
        with pytest.raises(ReportError, match="version must be a whole number"):
            RunReport.from_json({**data, "version": bad})


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"target_step": None}, "no 'target_step'"),
        ({"wall_seconds": "soon"}, "wall_seconds must be a number"),
        ({"full_restarts": 1.5}, "full_restarts must be an integer"),
        ({"recoveries": [3]}, "each of recoveries must be an object"),
        ({"escalations": [{"quarantined": "x"}]}, "quarantined must be a list"),
        ({"queue_spans": [[1.0]]}, "a queue span"),
        ({"slice_failures": [{"at": 1.0, "kind": "meteor"}]}, "a slice failure"),
        ({"checkpoint_period_choice": {"period": 5}}, "checkpoint_period_choice"),
    ],
)
def test_a_wrong_value_is_refused_naming_it(change: dict[str, Any], words: str) -> None:
    with pytest.raises(ReportError, match=words):
        RunReport.from_json({**full_report().to_json(), **change})


def test_the_advice_is_the_models_over_the_reports_own_measurements() -> None:
    report = full_report()
    advice = report.advice
    assert advice is not None and advice.configured_period == 10
    assert advice.failures == 2  # the recovery and the full restart
    assert report.to_json()["advice"] == advice.to_json()


def test_the_history_entry_comes_from_the_typed_report() -> None:
    report = full_report()
    record = report.history_record(run_id="scheduled__1", ended_at=500.0, succeeded=True)
    assert record.failures == report.slice_failures and record.pools == ("a", "b") and record.slices == 2
    assert record.failures_total == 2 and record.checkpoint_period == 10
    assert record.recovery_seconds == pytest.approx((5.0 + 12.5) / 2)


def test_a_run_with_nothing_measured_still_makes_a_report() -> None:
    report = run_report(
        incarnations=[Incarnation("run", 0, 0, LogDigest().feed_all(steps(0, 3, 1.0)))],
        escalations=(),
        namespace="default",
        run_directory="/r",
        target_step=2,
        final_step=2,
        wall_seconds=10.0,
        costs=CostModel(chips=1),
    )
    assert RunReport.from_json(json.loads(json.dumps(report.to_json()))) == report
