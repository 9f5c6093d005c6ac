"""The named problems a checkpoint step can have, and a capped collector for them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from enum import StrEnum


class Problem(StrEnum):
    """Why a step is not valid. The values are stable: they appear in JSON and XCom."""

    STORAGE_ERROR = "storage_error"
    LISTING_TRUNCATED = "listing_truncated"
    UNREADABLE_ENTRY = "unreadable_entry"
    DIRECTORY_UNREADABLE = "directory_unreadable"
    COMMIT_MARKER_MISSING = "commit_marker_missing"
    CHECKPOINT_METADATA_MISSING = "checkpoint_metadata_missing"
    CHECKPOINT_METADATA_UNREADABLE = "checkpoint_metadata_unreadable"
    COMMIT_TIMESTAMP_MISSING = "commit_timestamp_missing"
    ITEM_MISSING = "item_missing"
    ITEM_COMMIT_MARKER_MISSING = "item_commit_marker_missing"
    ITEM_EMPTY = "item_empty"
    ITEM_METADATA_MISSING = "item_metadata_missing"
    ITEM_METADATA_UNREADABLE = "item_metadata_unreadable"
    TREE_METADATA_EMPTY = "tree_metadata_empty"
    OCDBT_MANIFEST_MISSING = "ocdbt_manifest_missing"
    OCDBT_PROCESS_MANIFEST_MISSING = "ocdbt_process_manifest_missing"
    OCDBT_DATA_MISSING = "ocdbt_data_missing"
    OCDBT_ARRAY_MISSING = "ocdbt_array_missing"
    OCDBT_INDEX_UNREADABLE = "ocdbt_index_unreadable"
    OCDBT_INDEX_NOT_READ = "ocdbt_index_not_read"  # timed out or storage unavailable: unknown, not damaged
    OCDBT_INDEX_NOT_CHECKED = "ocdbt_index_not_checked"  # tensorstore is not installed: unknown, not valid
    ARRAY_METADATA_MISSING = "array_metadata_missing"
    ARRAY_METADATA_UNREADABLE = "array_metadata_unreadable"
    CHUNK_MISSING = "chunk_missing"
    DATA_FILE_EMPTY = "data_file_empty"
    STEP_BELOW_EXPECTED = "step_below_expected"
    TREE_MISMATCH = "tree_mismatch"
    SHAPE_MISMATCH = "shape_mismatch"
    DTYPE_MISMATCH = "dtype_mismatch"
    RESTORE_FAILED = "restore_failed"
    NON_FINITE_VALUES = "non_finite_values"


# Findings about the step as a whole, not about something inside a directory.
_NEVER_SHADOWED = frozenset(
    {Problem.DIRECTORY_UNREADABLE, Problem.STEP_BELOW_EXPECTED, Problem.LISTING_TRUNCATED, Problem.STORAGE_ERROR}
)


@dataclass(frozen=True)
class Finding:
    """One problem, where it is (relative to the step directory), and a human-readable detail."""

    code: Problem
    path: str
    detail: str

    def to_json(self) -> dict[str, str]:
        """Plain JSON form."""
        return {"code": str(self.code), "path": self.path, "detail": self.detail}

    def __str__(self) -> str:
        where = f" ({self.path})" if self.path else ""
        return f"{self.code}{where}: {self.detail}"


class Findings:
    """Collects findings, keeping at most `per_code` of each code plus one 'and N more' line.

    Findings at or under a directory in `shadowed` (one that could not be read) are dropped:
    what is unknown there is not missing, and its own finding says why.
    """

    def __init__(self, per_code: int = 20, shadowed: tuple[str, ...] = ()) -> None:
        self.per_code = per_code
        self.shadowed = shadowed
        self._items: list[Finding] = []
        self._counts: Counter[Problem] = Counter()

    def is_shadowed(self, path: str) -> bool:
        """Whether `path` is at or under a directory that could not be read."""
        return any(d == "" or path == d or path.startswith(f"{d}/") for d in self.shadowed)

    def add(self, code: Problem, path: str, detail: str) -> None:
        """Record a finding (unless it lies in a directory that could not be read)."""
        if code not in _NEVER_SHADOWED and self.is_shadowed(path):
            return
        self._counts[code] += 1
        if self._counts[code] <= self.per_code:
            self._items.append(Finding(code, path, detail))

    def extend(self, findings: list[Finding] | tuple[Finding, ...]) -> None:
        """Record several findings."""
        for f in findings:
            self.add(f.code, f.path, f.detail)

    def __bool__(self) -> bool:
        return bool(self._counts)

    def total(self) -> int:
        """How many findings were recorded (including those beyond the cap)."""
        return sum(self._counts.values())

    def result(self) -> tuple[Finding, ...]:
        """The findings, with an overflow line for each code that was capped."""
        out = list(self._items)
        for code, count in self._counts.items():
            if count > self.per_code:
                out.append(Finding(code, "", f"and {count - self.per_code} more of this kind"))
        return tuple(out)
