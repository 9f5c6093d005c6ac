"""One structured record per in-process recovery: `<run directory>/recoveries.jsonl`, and logged.

Timestamps are wall-clock Unix seconds (`time.time()`), so they can be lined up with the moment a test or
an operator injected the fault. Steps follow MaxText: `step_at_failure` is the last completed step before
the failure, `step_restored` the checkpoint step restored, and the first step after recovery is
`step_restored + 1`, so `steps_lost = step_at_failure - step_restored` steps are run again.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Literal

from etils import epath

from elastic_training.local.workloads.config import join_path
from elastic_training.operators.constants import RECOVERY_RECORDS_FILE

_logger = logging.getLogger(__name__)

RecoveryKind = Literal["slice_down", "scale_up"]
RecoveryOutcome = Literal["recovered", "failed"]


@dataclasses.dataclass
class RecoveryRecord:
    """What happened during one recovery; filled in as it progresses."""

    run_name: str
    kind: RecoveryKind
    failed_attempt: int
    failure_detected_at: float
    error: str
    lost_slices: list[int]
    step_at_failure: int | None
    slices_before: list[int]
    slices_ready_at: float | None = None
    active_slices: list[int] | None = None
    restore_started_at: float | None = None
    restore_finished_at: float | None = None
    step_restored: int | None = None
    first_step_after_recovery: int | None = None
    first_step_completed_at: float | None = None
    outcome: RecoveryOutcome | None = None

    @property
    def steps_lost(self) -> int | None:
        """Completed steps that have to be run again (from scratch when nothing was restored)."""
        if self.step_at_failure is None:
            return None
        return self.step_at_failure - (self.step_restored if self.step_restored is not None else -1)

    def phase_seconds(self) -> dict[str, float | None]:
        """Durations of the phases from detection to the first step after recovery."""

        def span(start: float | None, end: float | None) -> float | None:
            return None if start is None or end is None else round(end - start, 6)

        return {
            "wait_for_slices": span(self.failure_detected_at, self.slices_ready_at),
            "prepare_restore": span(self.slices_ready_at, self.restore_started_at),
            "restore": span(self.restore_started_at, self.restore_finished_at),
            "first_step": span(self.restore_finished_at, self.first_step_completed_at),
            "total": span(self.failure_detected_at, self.first_step_completed_at),
        }

    def to_json(self) -> dict[str, Any]:
        """The JSON object written to `recoveries.jsonl` (the fields plus `steps_lost` and `phase_seconds`)."""
        return {**dataclasses.asdict(self), "steps_lost": self.steps_lost, "phase_seconds": self.phase_seconds()}


class RecoveryLog:
    """Appends records to `<run directory>/recoveries.jsonl` (local disk or gs://; only logged without one)."""

    def __init__(self, run_directory: str | None) -> None:
        self.path = join_path(run_directory, RECOVERY_RECORDS_FILE) if run_directory else None

    def write(self, record: RecoveryRecord) -> None:
        """Persist and log one record."""
        line = json.dumps(record.to_json(), sort_keys=True)
        _logger.info("Recovery record: %s", line)
        if self.path is None:
            return
        path = epath.Path(self.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.startswith("gs://"):
            # Object stores cannot append: rewrite the object with the new line.
            existing = path.read_text() if path.exists() else ""
            path.write_text(existing + line + "\n")
        else:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(line + "\n")

    def read(self) -> list[dict[str, Any]]:
        """All records written so far."""
        if self.path is None:
            return []
        path = epath.Path(self.path)
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
