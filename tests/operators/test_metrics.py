"""A run report's metrics and a checkpoint verdict, sent through Airflow's stats: their names and values from a
report, then the datagrams a real StatsD socket on 127.0.0.1 receives from Airflow's own StatsD backend.

The end-to-end run (a slice killed in a ``dag.test()`` run, Airflow configured by its environment) is
tests/plugin/test_real_run.py's ``test_the_runs_metrics_reached_statsd``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from elastic_training.operators.metrics import (
    ValidationOutcome,
    detection_seconds,
    emit_run_metrics,
    emit_validation_outcome,
    run_metrics,
)
from elastic_training.operators.run_report import RecoveryEntry, ReportError, RunReport
from tests.support.statsd_listener import StatsdListener, airflow_stats_from_environment

REPORT = {
    "target_step": 99,
    "slice_restarts": 3,
    "in_process_recoveries": 2,
    "full_restarts": 1,
    "preemption_count": 1,
    "steps_lost": 7,
    "goodput": 0.81,
    "queued_seconds": 12.5,
    "provisioning_seconds": 4.0,
    "resume_seconds": 2.5,
    "slice_failures": [
        {"at": 990.0, "kind": "lost_host", "slice": 1},
        {"at": 1096.0, "kind": "trainer_error", "slice": 0},
        {"at": 2000.0, "kind": "lost_host", "slice": 1},  # after both recoveries: detected by neither
    ],
    "recoveries": [
        {
            "detected_at": 1000.0,
            "phase_seconds": {"wait_for_slices": 2.0, "restore": 1.5, "first_step": 0.5, "total": 4.0},
        },
        {
            "detected_at": 1100.0,
            "phase_seconds": {"wait_for_slices": 3.0, "restore": None, "first_step": None, "total": None},
        },
    ],
}


def test_the_names_and_values_of_a_report() -> None:
    assert run_metrics(RunReport.from_json(REPORT)) == [
        ("incr", "elastic_training.slice_restarts", 3),
        ("incr", "elastic_training.in_process_recoveries", 2),
        ("incr", "elastic_training.full_restarts", 1),
        ("incr", "elastic_training.preemption_count", 1),
        ("incr", "elastic_training.steps_lost", 7),
        ("timing", "elastic_training.queued_time", 12.5),
        ("timing", "elastic_training.provisioning_time", 4.0),
        ("timing", "elastic_training.resume_time", 2.5),
        ("timing", "elastic_training.recovery_time.detection", 10.0),
        ("timing", "elastic_training.recovery_time.wait_for_slices", 2.0),
        ("timing", "elastic_training.recovery_time.restore", 1.5),
        ("timing", "elastic_training.recovery_time.first_step", 0.5),
        ("timing", "elastic_training.recovery_time.total", 4.0),
        ("timing", "elastic_training.recovery_time.detection", 4.0),
        ("timing", "elastic_training.recovery_time.wait_for_slices", 3.0),
        ("gauge", "elastic_training.goodput", 0.81),
    ]


def test_detection_is_the_newest_slice_failure_before_the_event_within_an_hour() -> None:
    report = RunReport.from_json(REPORT)
    assert [detection_seconds(report, r) for r in report.recoveries] == [10.0, 4.0]
    # No failure before it (a report of earlier releases), one over an hour old, or a scale-up: unknown, not sent.
    assert detection_seconds(report, RecoveryEntry(detected_at=900.0)) is None
    assert detection_seconds(report, RecoveryEntry(detected_at=2000.0 + 3600.5)) is None
    assert detection_seconds(report, RecoveryEntry(detected_at=1000.0, kind="scale_up")) is None
    assert detection_seconds(report, RecoveryEntry()) is None


def test_unknown_values_send_nothing_and_wrong_ones_never_reach_the_metrics() -> None:
    """A report's values are checked where it is read (``RunReport.from_json``); unknown ones are skipped."""
    for wrong in ({"slice_restarts": "3"}, {"recoveries": ["x"]}, {"goodput": "high"}):
        with pytest.raises(ReportError, match="wrong type"):
            RunReport.from_json({"target_step": 9, **wrong})
    hostile = RunReport.from_json(
        {"target_step": 9, "goodput": float("nan"), "queued_seconds": float("inf"), "steps_lost": -3}
    )
    sent = [name.removeprefix("elastic_training.") for _, name, _ in run_metrics(hostile)]
    assert sent == ["slice_restarts", "in_process_recoveries", "full_restarts", "preemption_count", "provisioning_time"]
    names = [name for _, name, _ in run_metrics(RunReport(target_step=9, recoveries=(RecoveryEntry(),)))]
    assert names == [
        f"elastic_training.{name}"
        for name in ("slice_restarts", "in_process_recoveries", "full_restarts", "preemption_count", "steps_lost")
    ]


@pytest.fixture
def statsd() -> Iterator[StatsdListener]:
    listener = StatsdListener()
    try:
        with airflow_stats_from_environment(listener.environment()):
            yield listener
    finally:
        listener.close()


def test_airflows_statsd_backend_sends_every_metric_with_its_tags(statsd: StatsdListener) -> None:
    sent = emit_run_metrics(RunReport.from_json(REPORT), dag_id="nightly", task_id="pretrain")
    received = statsd.wait_for(lambda got: len(got) >= len(sent))
    tags = {"dag_id": "nightly", "task_id": "pretrain"}
    assert [(d.name, d.kind, d.value, d.tags) for d in received] == [
        (name, {"incr": "c", "timing": "ms", "gauge": "g"}[kind], value * 1000 if kind == "timing" else value, tags)
        for kind, name, value in run_metrics(RunReport.from_json(REPORT))
    ]


@pytest.mark.parametrize("outcome", list(ValidationOutcome))
def test_a_checkpoint_verdict_is_counted_under_its_outcome(statsd: StatsdListener, outcome: Any) -> None:
    name = emit_validation_outcome(outcome, dag_id="nightly", task_id="validate_checkpoint")
    [datagram] = statsd.wait_for(lambda got: len(got) >= 1)
    assert name == f"elastic_training.checkpoint_validation.{outcome.value}" == datagram.name
    assert (datagram.kind, datagram.value) == ("c", 1.0)
    assert datagram.tags == {"dag_id": "nightly", "task_id": "validate_checkpoint"}
