"""A finished elastic run's metrics and a checkpoint verdict, sent through Airflow's stats (StatsD or OpenTelemetry).

Airflow 3 routes every metric through ``airflow.sdk.observability.stats`` (apache/airflow
``task-sdk/src/airflow/sdk/_shared/observability/metrics/stats.py``): the task runner's ``main()`` initialises it from
``[metrics]`` (``statsd_on``, ``otel_on``, ``statsd_datadog_enabled``; without one, metrics are dropped), and
``Stats.incr/gauge/timing`` go to that backend. Names sit under ``elastic_training.`` and carry ``dag_id`` and
``task_id`` as tags: StatsD puts them on the wire only with ``statsd_influxdb_enabled`` (``name,dag_id=…``) or
DogStatsD, OpenTelemetry keeps them as attributes. What varies by outcome or phase is in the name, not a tag, so
plain StatsD keeps it. A timing is milliseconds on the wire (the StatsD client's and Airflow's OTel logger's unit).

One owner: the operators call these at their edge, from the finished :class:`RunReport` and the checkpoint
verdict (docs/operations.md, "Metrics", lists every name); nothing in the pure policy sends anything.
"""

from __future__ import annotations

import math
from datetime import timedelta
from enum import StrEnum
from typing import Any, Protocol

from elastic_training.operators.run_report import RecoveryEntry, RunReport

PREFIX = "elastic_training"

# A slice failure more than this before MaxText noticed it is an older one (a restart in place that the same
# elastic event did not follow), not the failure this recovery detected.
MAX_DETECTION_SECONDS = 3600.0


class ValidationOutcome(StrEnum):
    """What a checkpoint validation concluded: the chosen step, a fallback to an older one, or neither."""

    VALID = "valid"
    FALLBACK = "fallback"
    INVALID = "invalid"
    UNKNOWN = "unknown"  # storage could not be read: the task retries


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


def detection_seconds(report: RunReport, recovery: RecoveryEntry) -> float | None:
    """From the slice failure (Kubernetes' own time) to MaxText's elastic event, or ``None`` when no failure of the
    report precedes the event within :data:`MAX_DETECTION_SECONDS` (a scale-up has none)."""
    if recovery.detected_at is None or recovery.kind != "slice_down":
        return None
    before = [f.at for f in report.slice_failures if 0.0 <= recovery.detected_at - f.at <= MAX_DETECTION_SECONDS]
    return round(recovery.detected_at - max(before), 3) if before else None


def run_metrics(report: RunReport) -> list[tuple[str, str, float]]:
    """(kind, name, value) of every metric of ``report``, in sending order; an unknown value sends nothing (nor a
    value no measurement gives)."""
    sent: list[tuple[str, str, float | None]] = [
        ("incr", f"{PREFIX}.{name}", getattr(report, name))
        for name in ("slice_restarts", "in_process_recoveries", "full_restarts", "preemption_count", "steps_lost")
    ]
    if report.capacity is not None:
        sent.append(("timing", f"{PREFIX}.queued_time", report.capacity.queued_seconds))
        sent.append(("timing", f"{PREFIX}.provisioning_time", report.capacity.provisioning_seconds))
        sent.append(("timing", f"{PREFIX}.resume_time", report.capacity.resume_seconds))
    for recovery in report.recoveries:
        phases = [("detection", detection_seconds(report, recovery)), *recovery.phase_seconds.items()]
        sent.extend(("timing", f"{PREFIX}.recovery_time.{phase}", seconds) for phase, seconds in phases)
    if report.goodput is not None:
        sent.append(("gauge", f"{PREFIX}.goodput", report.goodput))
    # A stored report is anyone's edit: a negative, NaN or infinite value is no measurement.
    return [(kind, name, value) for kind, name, value in sent if value is not None and 0 <= value < math.inf]


def emit_run_metrics(report: RunReport, *, dag_id: str, task_id: str, stats: StatsSink | None = None) -> list[str]:
    """Send a run report's metrics (:func:`run_metrics`); returns the names sent."""
    sink = stats or _airflow_stats()
    tags = {"dag_id": dag_id, "task_id": task_id}
    metrics = run_metrics(report)
    for kind, name, value in metrics:
        if kind == "incr":
            sink.incr(name, int(value), tags=tags)
        elif kind == "timing":
            sink.timing(name, timedelta(seconds=value), tags=tags)
        else:
            sink.gauge(name, value, tags=tags)
    return [name for _, name, _ in metrics]


def emit_validation_outcome(
    outcome: ValidationOutcome, *, dag_id: str, task_id: str, stats: StatsSink | None = None
) -> str:
    """Count one checkpoint validation under its outcome; returns the name sent."""
    name = f"{PREFIX}.checkpoint_validation.{outcome.value}"
    (stats or _airflow_stats()).incr(name, 1, tags={"dag_id": dag_id, "task_id": task_id})
    return name
