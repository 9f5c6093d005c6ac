"""Recovery records: derived fields, phases, and the JSON lines file."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from elastic_training.local.workloads.recovery_log import RecoveryLog, RecoveryRecord
from elastic_training.operators.constants import RECOVERY_RECORD_RE, RECOVERY_RECORDS_FILE


def _record(**fields: object) -> RecoveryRecord:
    base: dict[str, object] = {
        "run_name": "r",
        "kind": "slice_down",
        "failed_attempt": 1,
        "failure_detected_at": 100.0,
        "error": "DATA_LOSS: x",
        "lost_slices": [1],
        "step_at_failure": 57,
        "slices_before": [0, 1],
    }
    return RecoveryRecord(**{**base, **fields})  # type: ignore[arg-type]


def test_steps_lost_and_phases() -> None:
    record = _record(
        slices_ready_at=101.5,
        restore_started_at=101.6,
        restore_finished_at=102.0,
        step_restored=50,
        first_step_after_recovery=51,
        first_step_completed_at=102.25,
        outcome="recovered",
    )
    assert record.steps_lost == 7
    assert record.phase_seconds() == {
        "wait_for_slices": 1.5,
        "prepare_restore": pytest.approx(0.1),
        "restore": pytest.approx(0.4),
        "first_step": 0.25,
        "total": 2.25,
    }
    assert _record(step_restored=None).steps_lost == 58  # nothing restored: everything from step 0 again
    assert _record(step_at_failure=None).steps_lost is None
    assert _record().phase_seconds()["total"] is None


def test_written_as_json_lines_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    log = RecoveryLog(str(tmp_path / "run"))
    log.write(_record(step_restored=50, outcome="recovered"))
    log.write(_record(failed_attempt=2, outcome="failed"))
    records = log.read()
    assert [r["failed_attempt"] for r in records] == [1, 2]
    assert records[0]["steps_lost"] == 7 and "phase_seconds" in records[0]
    assert (tmp_path / "run" / RECOVERY_RECORDS_FILE).exists()
    assert [json.loads(m[1]) for m in RECOVERY_RECORD_RE.finditer(caplog.text)] == records


def test_without_a_run_directory_only_logs() -> None:
    log = RecoveryLog(None)
    log.write(_record())
    assert log.read() == []
