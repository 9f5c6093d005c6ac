"""Move an invalid step aside so a resume picks the last valid one. Nothing is ever lost.

The move itself is `Storage.move` (`operators.checkpoints.moving`): a no-replace rename locally,
a checked copy then delete on GCS that leaves the source whole on any error.
"""

from __future__ import annotations

import time

from elastic_training.operators.checkpoints.discovery import QUARANTINE_DIR
from elastic_training.operators.checkpoints.storage import Storage, storage_for

# Names tried when the destination is taken (same step quarantined in the same second).
_MAX_NAMES = 100


def quarantine_step(
    root: str,
    step_name: str,
    *,
    storage: Storage | None = None,
    quarantine_dir: str = QUARANTINE_DIR,
    now: float | None = None,
) -> str:
    """Move ``<root>/<step_name>`` to ``<root>/<quarantine_dir>/<step_name>.<UTC timestamp>``.

    The quarantine directory is not numeric, so Orbax and MaxText never take it for a step, and
    discovery reports it as ignored. Returns the new location. A name already taken (found
    before or refused by the move itself) gets a ``-2``, ``-3``, ... suffix; an existing
    destination is never written into. Raises `FileNotFoundError` when the step is absent and
    `MoveError` (a `StorageError`) when the move stopped part-way, saying which objects are where.
    """
    store = storage or storage_for(root)
    if "/" in step_name or step_name in ("", ".", "..") or step_name == quarantine_dir:
        raise ValueError(f"not a step directory name: {step_name!r}")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    src = store.join(root, step_name)
    if not store.exists_dir(src):
        raise FileNotFoundError(src)
    base = store.join(root, quarantine_dir, f"{step_name}.{stamp}")
    for n in range(1, _MAX_NAMES + 1):
        dst = base if n == 1 else f"{base}-{n}"
        if store.exists_dir(dst):
            continue
        try:
            store.move(src, dst)
        except FileExistsError:
            continue  # taken between the check and the move; nothing was moved
        return dst
    raise FileExistsError(f"{base} and {_MAX_NAMES - 1} suffixed names are all taken; nothing was moved")
