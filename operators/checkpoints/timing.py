"""How long each checkpoint save took, from Orbax's own ``_CHECKPOINT_METADATA``. No Airflow import.

Orbax (``orbax/checkpoint/_src/metadata/checkpoint.py``) writes ``init_timestamp_nsecs`` when a step's
temporary directory is created and ``commit_timestamp_nsecs`` when it is committed; the difference is
the save's wall time (for asynchronous saves an upper bound of what training waited for). Reads are
bounded: at most ``limit`` steps, each metadata file at most ``MAX_METADATA_BYTES``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from elastic_training.operators.checkpoints.storage import FileTooLargeError, Storage, StorageError, storage_for
from elastic_training.operators.constants import CHECKPOINT_METADATA_FILE

MAX_METADATA_BYTES = 1 << 20
DEFAULT_LIMIT = 20


def save_seconds(
    step_paths: Iterable[str], *, storage: Storage | None = None, limit: int = DEFAULT_LIMIT
) -> list[float]:
    """Init-to-commit seconds of the given step directories (newest first is up to the caller).

    Steps whose metadata is missing, unreadable or lacks either timestamp are skipped.
    """
    found: list[float] = []
    for index, path in enumerate(step_paths):
        if index >= limit:
            break
        store = storage or storage_for(path)
        try:
            raw = store.read(store.join(path, CHECKPOINT_METADATA_FILE), MAX_METADATA_BYTES)
            meta = json.loads(raw.decode("utf-8"))
        except (FileNotFoundError, FileTooLargeError, StorageError, UnicodeDecodeError, ValueError, RecursionError):
            continue
        if not isinstance(meta, dict):
            continue
        start, end = _nsecs(meta.get("init_timestamp_nsecs")), _nsecs(meta.get("commit_timestamp_nsecs"))
        if start is not None and end is not None and end >= start:
            found.append(round((end - start) / 1e9, 6))
    return found


def _nsecs(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def mean_save_seconds(step_paths: Iterable[str], *, storage: Storage | None = None) -> float | None:
    """The mean save time over the (up to ``DEFAULT_LIMIT``) given steps, ``None`` when none was measured."""
    seconds = save_seconds(step_paths, storage=storage)
    return round(sum(seconds) / len(seconds), 6) if seconds else None
