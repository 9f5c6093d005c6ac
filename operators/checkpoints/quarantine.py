"""Move an invalid step aside so a resume picks the last valid one. Nothing is ever deleted."""

from __future__ import annotations

import time

from operators.checkpoints.discovery import QUARANTINE_DIR
from operators.checkpoints.storage import Storage, storage_for


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
    discovery reports it as ignored. Returns the new location.
    """
    store = storage or storage_for(root)
    if "/" in step_name or step_name in ("", ".", "..") or step_name == quarantine_dir:
        raise ValueError(f"not a step directory name: {step_name!r}")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    src = store.join(root, step_name)
    if not store.exists_dir(src):
        raise FileNotFoundError(src)
    base = store.join(root, quarantine_dir, f"{step_name}.{stamp}")
    dst, n = base, 1
    while store.exists_dir(dst):
        n += 1
        dst = f"{base}-{n}"
    store.move(src, dst)
    return dst
