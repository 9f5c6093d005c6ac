"""A run report's metrics reach whatever backend Airflow's stats module is initialised with."""

from __future__ import annotations

from typing import Any

import pytest

from elastic_training.operators.metrics import emit_run_metrics
from elastic_training.operators.run_report import RecoveryEntry, ReportError, RunReport


class Recorder:
    """A stats backend that keeps every call (Airflow's ``StatsLogger`` shape)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any, Any]] = []

    def incr(self, stat: str, count: int = 1, rate: float = 1, *, tags: Any = None) -> None:
        self.calls.append(("incr", stat, count, tags))

    def decr(self, stat: str, count: int = 1, rate: float = 1, *, tags: Any = None) -> None:
        self.calls.append(("decr", stat, count, tags))

    def gauge(self, stat: str, value: float, rate: float = 1, delta: bool = False, *, tags: Any = None) -> None:
        self.calls.append(("gauge", stat, value, tags))

    def timing(self, stat: str, dt: Any, *, tags: Any = None) -> None:
        self.calls.append(("timing", stat, dt.total_seconds(), tags))


REPORT = {
    "target_step": 99,
    "slice_restarts": 3,
    "full_restarts": 1,
    "steps_lost": 7,
    "goodput": 0.81,
    "recoveries": [
        {"phase_seconds": {"wait_for_slices": 2.0, "restore": 1.5, "first_step": 0.5, "total": 4.0}},
        {"phase_seconds": {"wait_for_slices": 3.0, "restore": None, "first_step": None, "total": None}},
    ],
}


def test_metrics_go_through_airflow_stats() -> None:
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
    from airflow.sdk.observability import stats

    recorder = Recorder()
    stats.initialize(factory=lambda: recorder, export_legacy_names=False)  # type: ignore[arg-type,return-value]
    try:
        emit_run_metrics(RunReport.from_json(REPORT), dag_id="d", task_id="t")
    finally:
        stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
    tags = {"dag_id": "d", "task_id": "t"}
    assert recorder.calls == [
        ("incr", "elastic_training.slice_restarts", 3, tags),
        ("incr", "elastic_training.full_restarts", 1, tags),
        ("incr", "elastic_training.steps_lost", 7, tags),
        ("timing", "elastic_training.recovery_seconds.wait_for_slices", 2.0, tags),
        ("timing", "elastic_training.recovery_seconds.restore", 1.5, tags),
        ("timing", "elastic_training.recovery_seconds.first_step", 0.5, tags),
        ("timing", "elastic_training.recovery_seconds.total", 4.0, tags),
        ("timing", "elastic_training.recovery_seconds.wait_for_slices", 3.0, tags),
        ("gauge", "elastic_training.goodput", 0.81, tags),
    ]


def test_wrong_values_never_reach_the_metrics_and_unknown_ones_are_skipped() -> None:
    """A report's values are checked where it is read (``RunReport.from_json``); an unknown goodput sends nothing."""
    for wrong in ({"slice_restarts": "3"}, {"recoveries": ["x"]}, {"goodput": "high"}):
        with pytest.raises(ReportError, match="wrong type"):
            RunReport.from_json({"target_step": 9, **wrong})
    recorder = Recorder()
    sent = emit_run_metrics(
        RunReport(target_step=9, goodput=None, recoveries=(RecoveryEntry(),)), dag_id="d", task_id="t", stats=recorder
    )
    assert sent == [f"elastic_training.{name}" for name in ("slice_restarts", "full_restarts", "steps_lost")]
    assert "elastic_training.goodput" not in [stat for _, stat, _, _ in recorder.calls]
