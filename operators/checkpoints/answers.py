"""Three answers about a checkpoint step: valid, invalid, or unknown (storage could not be read). Pure.

A finding that says "could not look" (a storage error, a directory that cannot be listed, a listing cut
at its cap, an OCDBT index whose read timed out or met an unavailable backend, or that was not read for want
of tensorstore) is not evidence against the step, nor for it: Orbax's own restore (google/orbax
``checkpoint/orbax/checkpoint/checkpoint_manager.py`` reads ``commit_success.txt`` and step metadata through
the same storage) would fail the same way and succeed once storage is back. Only an "invalid" step may be
moved aside; an "unknown" one is read again later.
"""

from __future__ import annotations

from enum import StrEnum

from elastic_training.operators.checkpoints.problems import Problem
from elastic_training.operators.checkpoints.report import CheckpointReport
from elastic_training.operators.checkpoints.validation import StepVerdict

# The findings that mean "could not look", not "looked and found it broken".
COULD_NOT_LOOK = frozenset(
    {
        Problem.STORAGE_ERROR,
        Problem.DIRECTORY_UNREADABLE,
        Problem.LISTING_TRUNCATED,
        Problem.OCDBT_INDEX_NOT_READ,
        Problem.OCDBT_INDEX_NOT_CHECKED,
    }
)


class Answer(StrEnum):
    """What validation can say about a step."""

    VALID = "valid"
    INVALID = "invalid"
    UNKNOWN = "unknown"


def answer(verdict: StepVerdict) -> Answer:
    """Unknown when any finding is a could-not-look one (what was found may be its consequence)."""
    if not verdict.problems:
        return Answer.VALID
    if any(p.code in COULD_NOT_LOOK for p in verdict.problems):
        return Answer.UNKNOWN
    return Answer.INVALID


def unknown_reason(report: CheckpointReport) -> str | None:
    """Why the report cannot say which step is the newest valid one, or ``None`` when it can.

    The root could not be listed, or a step newer than the newest valid one could not be checked. A root that
    was read and holds no step ("no checkpoint steps found", "no such directory") is an answer: none.
    """
    if report.error:
        return report.error if report.unreadable else None
    latest = report.latest_valid_step
    for verdict in sorted(report.steps, key=lambda v: v.step, reverse=True):
        if latest is not None and verdict.step <= latest:
            return None
        if answer(verdict) is Answer.UNKNOWN:
            found = next(p for p in verdict.problems if p.code in COULD_NOT_LOOK)
            return f"step {verdict.step}: {found}"
    return None
