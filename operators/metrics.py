"""A finished elastic run's metrics, sent through Airflow's stats (StatsD or OpenTelemetry, as configured).

Airflow 3 routes every metric through ``airflow.sdk.observability.stats`` (the backend is chosen by
``[metrics] statsd_on`` / ``otel_on``; without one, metrics are dropped). Names sit under
``elastic_training.`` and carry ``dag_id`` and ``task_id`` as tags (StatsD drops tags unless
``statsd_datadog_enabled`` or influx tagging is on; OpenTelemetry keeps them as attributes):

- ``elastic_training.slice_restarts`` and ``elastic_training.full_restarts`` (counters),
- ``elastic_training.recovery_seconds.<phase>`` per recovery and phase (``wait_for_slices``,
  ``restore``, ``first_step``, ``total``; timings),
- ``elastic_training.steps_lost`` (counter) and ``elastic_training.goodput`` (gauge, 0..1).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Protocol

from elastic_training.operators.run_report import RunReport

PREFIX = "elastic_training"


class StatsSink(Protocol):
    """The three calls of Airflow's ``Stats`` this module uses."""

    def incr(self, stat: str, count: int | None = ..., rate: int | float | None = ..., *, tags: Any = ...) -> None: ...

    def gauge(
        self, stat: str, value: float, rate: int | float | None = ..., delta: bool | None = ..., *, tags: Any = ...
    ) -> None: ...

    def timing(self, stat: str, dt: Any, *, tags: Any = ...) -> None: ...


def _airflow_stats() -> StatsSink:
    from airflow.sdk.observability.stats import Stats

    return Stats()


def emit_run_metrics(report: RunReport, *, dag_id: str, task_id: str, stats: StatsSink | None = None) -> list[str]:
    """Send a run report's metrics; returns the names sent (a failure to send never fails the task)."""
    sink = stats or _airflow_stats()
    tags = {"dag_id": dag_id, "task_id": task_id}
    sent: list[str] = []

    def count(name: str, value: int) -> None:
        if value >= 0:
            sink.incr(f"{PREFIX}.{name}", value, tags=tags)
            sent.append(f"{PREFIX}.{name}")

    count("slice_restarts", report.slice_restarts)
    count("full_restarts", report.full_restarts)
    count("steps_lost", report.steps_lost)
    for recovery in report.recoveries:
        for phase, seconds in recovery.phase_seconds.items():
            if seconds is not None and seconds >= 0:
                sink.timing(f"{PREFIX}.recovery_seconds.{phase}", timedelta(seconds=seconds), tags=tags)
                sent.append(f"{PREFIX}.recovery_seconds.{phase}")
    if report.goodput is not None:
        sink.gauge(f"{PREFIX}.goodput", report.goodput, tags=tags)
        sent.append(f"{PREFIX}.goodput")
    return sent
