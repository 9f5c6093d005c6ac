"""Check an OCDBT database's keys against the arrays the tree metadata lists, without array data.

The file checks only see a missing or empty ``manifest.ocdbt`` or data file; an array can still
be absent from the database itself. The keys are read by walking the database's B+tree with
tensorstore's own ``tensorstore.ocdbt.dump`` (the manifest, then one node at a time, in key
order; OCDBT's format: a child's keys are relative to its parent entry's
``subtree_common_prefix``), so the walk stops as soon as it has seen more than ``max_keys``
keys; ``KvStore.list`` would load every key first. No value is read beyond what the nodes hold
inline. Every array must have its zarr metadata key and at least one chunk key. Which chunks an
array needs is not checked: that takes reading each array's zarr metadata value, and on the GCS
emulator (no object generations) tensorstore refuses to re-read a manifest it has read once.
Tensorstore is imported here, on first use, so importing the package stays light. Without it (a core
dependency, so only an install that skipped it) the check answers ``ocdbt_index_not_checked``: unknown,
never valid.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from elastic_training.operators.checkpoints.problems import Finding, Problem
from elastic_training.operators.checkpoints.storage import is_gcs, split_gcs

ZARRAY_KEY = ".zarray"
ZARR3_KEY = "zarr.json"
_META_KEYS = frozenset({ZARRAY_KEY, ZARR3_KEY, ".zattrs", ".zgroup"})
TENSORSTORE_MISSING = (
    "tensorstore is not installed, so the OCDBT database was not checked: "
    "pip install elastic-training (tensorstore is a core dependency)"
)


@dataclass(frozen=True)
class IndexLimits:
    """Bounds on the work spent on one item's database."""

    max_keys: int = 1_000_000
    timeout: float = 120.0


def base_spec(item_path: str) -> dict[str, Any]:
    """The kvstore spec of the directory holding ``manifest.ocdbt`` (local or ``gs://``)."""
    if is_gcs(item_path):
        bucket, key = split_gcs(item_path)
        return {"driver": "gcs", "bucket": bucket, "path": f"{key}/" if key else ""}
    return {"driver": "file", "path": os.path.abspath(item_path).rstrip("/") + "/"}


def _use_emulator_endpoint() -> None:
    """Point tensorstore at the emulator google-cloud-storage uses (``STORAGE_EMULATOR_HOST``).

    Tensorstore reads its own variable, ``TENSORSTORE_GCS_HTTP_URL``; an explicit one wins.
    """
    host = os.environ.get("STORAGE_EMULATOR_HOST")
    if host and not os.environ.get("TENSORSTORE_GCS_HTTP_URL"):
        os.environ["TENSORSTORE_GCS_HTTP_URL"] = host if "://" in host else f"http://{host}"


def check_ocdbt_index(
    item_path: str,
    name: str,
    arrays: Iterable[str],
    limits: IndexLimits | None = None,
) -> list[Finding]:
    """Findings for arrays absent from the item's OCDBT database (or present without any chunk).

    Never raises for anything found in storage: a timeout, an error, or more keys than
    ``limits.max_keys`` give one ``ocdbt_index_unreadable`` finding; no tensorstore, one
    ``ocdbt_index_not_checked``.
    """
    lim = limits or IndexLimits()
    arrays = tuple(arrays)
    if not arrays:
        return []
    try:
        import tensorstore  # noqa: F401
    except ImportError as exc:  # a core dependency, but an image may have been built without it
        return [Finding(Problem.OCDBT_INDEX_NOT_CHECKED, name, f"{TENSORSTORE_MISSING} ({exc})"[:300])]
    try:
        keys = list_ocdbt_keys(item_path, lim).keys
    except OcdbtIndexNotRead as exc:
        return [Finding(Problem.OCDBT_INDEX_NOT_READ, name, str(exc))]
    except OcdbtIndexUnreadable as exc:
        return [Finding(Problem.OCDBT_INDEX_UNREADABLE, name, str(exc))]
    except Exception as exc:  # a spec tensorstore rejects up front (e.g. a bucket name it refuses)
        return [Finding(Problem.OCDBT_INDEX_UNREADABLE, name, f"{type(exc).__name__}: {str(exc)[:300]}")]

    by_array: dict[str, set[str]] = {}
    for key in keys:
        array, sep, rest = key.partition("/")
        if sep:
            by_array.setdefault(array, set()).add(rest)
    out: list[Finding] = []
    for array in arrays:
        have = by_array.get(array, set())
        if not have & {ZARRAY_KEY, ZARR3_KEY}:
            out.append(
                Finding(
                    Problem.OCDBT_ARRAY_MISSING,
                    f"{name}/{array}",
                    f"no {ZARRAY_KEY} or {ZARR3_KEY} key for this array in the OCDBT database",
                )
            )
        elif not have - _META_KEYS:
            out.append(Finding(Problem.CHUNK_MISSING, f"{name}/{array}", "no chunk key in the OCDBT database"))
    return out


class OcdbtIndexUnreadable(Exception):
    """The database could not be listed or read within the limits."""


class OcdbtIndexNotRead(OcdbtIndexUnreadable):
    """The read timed out or its storage was unavailable: nothing is known about the database."""


# tensorstore's status codes (absl) for a backend that could not answer, as they appear in its errors.
_NOT_READ_MARKERS = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "UNAUTHENTICATED", "PERMISSION_DENIED")


@dataclass(frozen=True)
class KeyListing:
    """The keys of an OCDBT database, and how many B+tree nodes were read to get them."""

    keys: tuple[str, ...]
    nodes_read: int


def list_ocdbt_keys(item_path: str, limits: IndexLimits | None = None) -> KeyListing:
    """Every key of the database in `item_path`, in key order, reading no more than needed.

    `OcdbtIndexUnreadable` when it cannot be read, takes longer than ``limits.timeout``, or
    holds more than ``limits.max_keys`` keys (the walk stops at the first key beyond).
    """
    import tensorstore as ts

    lim = limits or IndexLimits()
    if is_gcs(item_path):
        _use_emulator_endpoint()
    deadline = _Deadline(lim.timeout)
    # No cache: nothing read here is needed again.
    context = ts.Context({"cache_pool": {"total_bytes_limit": 0}})
    base = deadline.wait(ts.KvStore.open(base_spec(item_path), context=context), "opening")
    manifest = deadline.wait(ts.ocdbt.dump(base, context=context), "reading the manifest of")
    versions = manifest.get("versions") if isinstance(manifest, dict) else None
    if not isinstance(versions, list) or not versions:
        raise OcdbtIndexUnreadable("the OCDBT manifest lists no version")
    try:
        latest = max(versions, key=lambda v: int(v["generation_number"]))
        root = latest["root"]
        height = int(latest["root_height"])
    except (KeyError, TypeError, ValueError) as exc:
        raise OcdbtIndexUnreadable(f"the OCDBT manifest is malformed: {exc!r}"[:300]) from exc
    if "location" not in root:
        return KeyListing((), 0)  # an empty database
    keys: list[str] = []
    nodes = 0
    # Depth first, children pushed in reverse, so keys come out in order. Each child must be
    # exactly one level below its parent: a damaged tree cannot make the walk loop.
    stack: list[tuple[str, bytes, int]] = [(str(root["location"]), b"", height)]
    while stack:
        location, prefix, expect = stack.pop()
        node = deadline.wait(ts.ocdbt.dump(base, location, context=context), "reading a B+tree node of")
        nodes += 1
        try:
            if int(node["height"]) != expect:
                raise OcdbtIndexUnreadable(f"a B+tree node at height {node['height']} where {expect} was expected")
            entries = node["entries"]
            if expect == 0:
                for entry in entries:
                    if len(keys) >= lim.max_keys:
                        raise OcdbtIndexUnreadable(
                            f"more than {lim.max_keys} keys in the OCDBT database; listing stopped there, not checked"
                        )
                    keys.append((prefix + bytes(entry["key"])).decode("utf-8", "replace"))
            else:
                for entry in reversed(entries):
                    child_prefix = prefix + bytes(entry.get("subtree_common_prefix", b""))
                    stack.append((str(entry["location"]), child_prefix, expect - 1))
        except (KeyError, TypeError, ValueError) as exc:
            raise OcdbtIndexUnreadable(f"a B+tree node is malformed: {exc!r}"[:300]) from exc
    return KeyListing(tuple(keys), nodes)


class _Deadline:
    """One time budget for every tensorstore call on an item."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def wait(self, future: Any, what: str) -> Any:
        try:
            return future.result(timeout=max(0.0, self.end - time.monotonic()))
        except TimeoutError as exc:
            future.cancel()
            raise OcdbtIndexNotRead(f"{what} the OCDBT database took longer than {self.seconds:g} s") from exc
        except Exception as exc:  # tensorstore raises ValueError/OSError/... for damaged databases.
            if any(marker in str(exc) for marker in _NOT_READ_MARKERS):
                raise OcdbtIndexNotRead(f"{what} the OCDBT database: storage did not answer: {str(exc)[:300]}") from exc
            raise OcdbtIndexUnreadable(
                f"{what} the OCDBT database failed: {type(exc).__name__}: {str(exc)[:300]}"
            ) from exc
