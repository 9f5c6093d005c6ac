"""Three answers about a step: valid, invalid, unknown (could not look), case by case. Pure."""

from __future__ import annotations

import pytest

from elastic_training.operators.checkpoints import CheckpointReport, Finding, Problem, StepVerdict
from elastic_training.operators.checkpoints.answers import Answer, answer, unknown_reason


def verdict(step: int, *codes: Problem) -> StepVerdict:
    return StepVerdict(step, f"/run/checkpoints/{step}", tuple(Finding(c, "", "detail") for c in codes))


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        ((), Answer.VALID),
        ((Problem.COMMIT_MARKER_MISSING,), Answer.INVALID),
        ((Problem.OCDBT_INDEX_UNREADABLE,), Answer.INVALID),  # a damaged index was read
        ((Problem.STORAGE_ERROR,), Answer.UNKNOWN),
        ((Problem.DIRECTORY_UNREADABLE,), Answer.UNKNOWN),
        ((Problem.LISTING_TRUNCATED,), Answer.UNKNOWN),
        ((Problem.OCDBT_INDEX_NOT_READ,), Answer.UNKNOWN),  # a timeout, an unavailable backend
        ((Problem.OCDBT_INDEX_NOT_CHECKED,), Answer.UNKNOWN),  # no tensorstore: never valid
        # What was "missing" may be the outage's doing: never moved.
        ((Problem.ITEM_MISSING, Problem.LISTING_TRUNCATED), Answer.UNKNOWN),
    ],
)
def test_answer(codes: tuple[Problem, ...], expected: Answer) -> None:
    assert answer(verdict(20, *codes)) is expected


def report(*steps: StepVerdict, error: str | None = None) -> CheckpointReport:
    return CheckpointReport("/run", "/run/checkpoints", None, steps=steps, error=error)


def test_unknown_reason() -> None:
    assert unknown_reason(report(verdict(10), verdict(20))) is None
    assert unknown_reason(report(verdict(10), verdict(20, Problem.COMMIT_MARKER_MISSING))) is None
    # An older step that could not be read does not change which step is the newest valid one.
    assert unknown_reason(report(verdict(10, Problem.STORAGE_ERROR), verdict(20))) is None
    why = unknown_reason(report(verdict(10), verdict(20, Problem.STORAGE_ERROR)))
    assert why is not None and why.startswith("step 20: storage_error")
    outage = CheckpointReport("/run", "/run", None, error="503 Service Unavailable", unreadable=True)
    assert unknown_reason(outage) == "503 Service Unavailable"
    # Looked, and found nothing: an answer (no committed step), not an unknown.
    assert unknown_reason(report(error="no checkpoint steps found: /run/checkpoints")) is None
