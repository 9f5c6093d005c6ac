"""Per-step verdicts from file metadata alone: markers, metadata files, and every array's storage.

The checks follow the Orbax 0.12 on-disk format (docs/architecture.md §8.4):
no array data is read here, so the cost grows with the number of files, not with bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from elastic_training.operators.checkpoints.ocdbt_index import IndexLimits, check_ocdbt_index
from elastic_training.operators.checkpoints.problems import Finding, Findings, Problem
from elastic_training.operators.checkpoints.storage import (
    Entry,
    EntryKind,
    FileTooLargeError,
    GCSStorage,
    Listing,
    LocalStorage,
    Storage,
    StorageError,
)
from elastic_training.operators.constants import CHECKPOINT_METADATA_FILE, COMMIT_SUCCESS_FILE

ITEM_METADATA_FILE = "_METADATA"
OCDBT_MANIFEST = "manifest.ocdbt"
OCDBT_PROCESS_PREFIX = "ocdbt.process_"
ZARRAY_FILE = ".zarray"
ZARR3_FILE = "zarr.json"
# Value types in an Orbax tree whose data lives in tensorstore (others, e.g. strings, do not).
ARRAY_VALUE_TYPES = frozenset({"np.ndarray", "jax.Array", "scalar"})
# Item names taken for PyTree items when the step metadata does not name their handler.
PYTREE_ITEM_NAMES = frozenset({"items", "default", "state"})
# Orbax's handler names as `_CHECKPOINT_METADATA` records them; MaxText 0.2.5 (Orbax 0.12.8) saves through the
# v1 API, which records `orbax.checkpoint.experimental.v1._src.handlers.pytree_handler.PyTreeHandler`.
_PYTREE_HANDLERS = ("PyTreeCheckpointHandler", "StandardCheckpointHandler", "PyTreeHandler")
# Files in an array directory that are not chunks.
_ZARR_NON_CHUNKS = frozenset({ZARRAY_FILE, ".zattrs", ".zgroup", ZARR3_FILE})
# Above this many expected chunks, compare counts instead of naming each missing chunk.
_MAX_CHUNKS_ENUMERATED = 100_000


@dataclass(frozen=True)
class ValidationOptions:
    """What a valid step must have, and the bounds on the work spent finding out."""

    require_commit_marker: bool = True
    required_items: tuple[str, ...] = ("items",)
    min_step: int | None = None
    max_metadata_bytes: int = 64 * 1024 * 1024
    max_array_metadata_bytes: int = 1024 * 1024
    max_files: int = 1_000_000
    max_workers: int = 16
    # OCDBT: list the database's keys with tensorstore (no array data) and check every array.
    check_ocdbt_index: bool = True
    max_ocdbt_keys: int = 1_000_000
    ocdbt_index_timeout: float = 120.0


@dataclass(frozen=True)
class ItemSummary:
    """What was found in one item directory."""

    name: str
    layout: str | None = None  # "ocdbt", "zarr2", "zarr3" for PyTree items
    arrays: tuple[str, ...] = ()


@dataclass(frozen=True)
class StepVerdict:
    """The verdict on one step directory."""

    step: int
    path: str
    problems: tuple[Finding, ...] = ()
    files: int = 0
    bytes: int = 0
    committed_at_nsecs: int | None = None
    items: tuple[ItemSummary, ...] = ()
    deep: dict[str, Any] | None = None

    @property
    def valid(self) -> bool:
        """True when no problem was found."""
        return not self.problems

    @property
    def layout(self) -> str | None:
        """The array layout of the PyTree items (``mixed`` if they differ)."""
        layouts = {i.layout for i in self.items if i.layout}
        return layouts.pop() if len(layouts) == 1 else ("mixed" if layouts else None)

    def with_problems(self, extra: Iterable[Finding], **changes: Any) -> StepVerdict:
        """A copy with more problems (and optional field changes)."""
        from dataclasses import replace

        return replace(self, problems=(*self.problems, *extra), **changes)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form (the ``steps[]`` entries of ``validate --json``)."""
        return {
            "step": self.step,
            "valid": self.valid,
            "path": self.path,
            "problems": [p.to_json() for p in self.problems],
            "files": self.files,
            "bytes": self.bytes,
            "layout": self.layout,
            "committed_at_nsecs": self.committed_at_nsecs,
            "items": [i.name for i in self.items],
            "arrays": sum(len(i.arrays) for i in self.items),
            **({"deep": self.deep} if self.deep is not None else {}),
        }


@dataclass
class _Tree:
    """A listing of a step as nested dicts, for cheap per-directory lookups."""

    files: dict[str, Entry] = field(default_factory=dict)
    dirs: dict[str, _Tree] = field(default_factory=dict)

    @classmethod
    def build(cls, entries: Iterable[Entry]) -> _Tree:
        root = cls()
        for entry in entries:
            *parents, leaf = entry.name.split("/")
            node = root
            for part in parents:
                node = node.dirs.setdefault(part, cls())
            node.files[leaf] = entry
        return root

    def walk_files(self, prefix: str = "") -> Iterable[tuple[str, Entry]]:
        for name, entry in self.files.items():
            yield prefix + name, entry
        for name, sub in self.dirs.items():
            yield from sub.walk_files(f"{prefix}{name}/")

    def regular(self, name: str) -> Entry | None:
        entry = self.files.get(name)
        return entry if entry is not None and entry.kind is EntryKind.FILE else None


def _read_json(storage: Storage, path: str, limit: int) -> tuple[Any, None] | tuple[None, str]:
    """(parsed, None) or (None, why it could not be read as JSON)."""
    try:
        raw = storage.read(path, limit)
    except FileNotFoundError:
        return None, "missing"
    except FileTooLargeError:
        return None, f"larger than {limit} bytes"
    except StorageError as exc:
        return None, str(exc)
    try:
        return json.loads(raw.decode("utf-8")), None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return None, f"not valid JSON: {type(exc).__name__}: {str(exc)[:200]}"


def validate_step(
    storage: Storage,
    step_path: str,
    step: int,
    options: ValidationOptions | None = None,
    *,
    pool: ThreadPoolExecutor | None = None,
) -> StepVerdict:
    """Check one step directory; never raises for anything found in storage."""
    opts = options or ValidationOptions()
    try:
        listing = storage.walk(step_path, limit=opts.max_files)
    except StorageError as exc:
        found = Findings()
        _check_min_step(step, opts, found)
        found.add(Problem.STORAGE_ERROR, "", str(exc))
        return StepVerdict(step, step_path, found.result())
    found, tree = _check_listing(listing, step, opts)
    meta = _check_step_metadata(storage, step_path, tree, opts, found)
    items = _check_items(storage, step_path, tree, meta.item_handlers, opts, found, pool)
    files = [e for e in listing.entries if e.kind is EntryKind.FILE]
    return StepVerdict(
        step=step,
        path=step_path,
        problems=found.result(),
        files=len(files),
        bytes=sum(e.size for e in files),
        committed_at_nsecs=meta.committed_at_nsecs,
        items=items,
    )


@dataclass(frozen=True)
class _StepMetadata:
    """What a step's ``_CHECKPOINT_METADATA`` told (nothing when it is missing or unreadable)."""

    committed_at_nsecs: int | None = None
    item_handlers: dict[str, Any] = field(default_factory=dict)


def _check_listing(listing: Listing, step: int, opts: ValidationOptions) -> tuple[Findings, _Tree]:
    """The findings of the listing itself (what could not be listed or read, the commit marker), and its tree."""
    unreadable = tuple(e.name for e in listing.entries if e.kind is EntryKind.UNREADABLE_DIR)
    found = Findings(shadowed=unreadable)
    _check_min_step(step, opts, found)
    for name in unreadable:
        found.add(
            Problem.DIRECTORY_UNREADABLE,
            name,
            "the directory cannot be listed (permissions or I/O error); what it holds was not checked",
        )
    if listing.truncated:
        found.add(Problem.LISTING_TRUNCATED, "", f"more than {opts.max_files} files; not all checked")
    tree = _Tree.build(e for e in listing.entries if e.kind is not EntryKind.UNREADABLE_DIR)
    for entry in listing.entries:
        if entry.kind is EntryKind.OTHER:
            found.add(Problem.UNREADABLE_ENTRY, entry.name, "not a regular file (broken or looping link, FIFO)")
    if opts.require_commit_marker and tree.regular(COMMIT_SUCCESS_FILE) is None:
        found.add(Problem.COMMIT_MARKER_MISSING, COMMIT_SUCCESS_FILE, "the step was never committed")
    return found, tree


def _check_step_metadata(
    storage: Storage, step_path: str, tree: _Tree, opts: ValidationOptions, found: Findings
) -> _StepMetadata:
    """Read ``_CHECKPOINT_METADATA``: the commit time and the item handlers, each a finding when absent."""
    if tree.regular(CHECKPOINT_METADATA_FILE) is None:
        found.add(Problem.CHECKPOINT_METADATA_MISSING, CHECKPOINT_METADATA_FILE, "missing")
        return _StepMetadata()
    meta, why = _read_json(storage, storage.join(step_path, CHECKPOINT_METADATA_FILE), opts.max_metadata_bytes)
    if why is not None or not isinstance(meta, dict):
        found.add(
            Problem.CHECKPOINT_METADATA_UNREADABLE,
            CHECKPOINT_METADATA_FILE,
            why or f"a JSON {type(meta).__name__}, not an object",
        )
        return _StepMetadata()
    committed_at: int | None = None
    ts = meta.get("commit_timestamp_nsecs")
    if isinstance(ts, int) and not isinstance(ts, bool) and ts > 0:
        committed_at = ts
    else:
        found.add(
            Problem.COMMIT_TIMESTAMP_MISSING,
            CHECKPOINT_METADATA_FILE,
            f"commit_timestamp_nsecs is {json.dumps(ts)[:40]}",
        )
    handlers = meta.get("item_handlers")
    return _StepMetadata(committed_at, handlers if isinstance(handlers, dict) else {})


def _check_items(
    storage: Storage,
    step_path: str,
    tree: _Tree,
    handlers: dict[str, Any],
    opts: ValidationOptions,
    found: Findings,
    pool: ThreadPoolExecutor | None,
) -> tuple[ItemSummary, ...]:
    """Check every item: those required, those the metadata names and every directory in the step."""
    item_names = sorted(set(opts.required_items) | {str(k) for k in handlers} | set(tree.dirs))
    items: list[ItemSummary] = []
    for name in item_names:
        sub = tree.dirs.get(name)
        if sub is None:
            found.add(Problem.ITEM_MISSING, name, "item directory is missing")
            continue
        is_pytree = ITEM_METADATA_FILE in sub.files or _is_pytree_handler(name, handlers)
        items.append(_check_item(storage, step_path, name, sub, is_pytree, opts, found, pool))
    return tuple(items)


def _check_min_step(step: int, opts: ValidationOptions, found: Findings) -> None:
    if opts.min_step is not None and step < opts.min_step:
        found.add(Problem.STEP_BELOW_EXPECTED, "", f"step {step} is below the expected {opts.min_step}")


def _holds_unreadable(found: Findings, path: str) -> bool:
    """Whether a directory at or under `path` could not be read."""
    return any(d == "" or d == path or d.startswith(f"{path}/") for d in found.shadowed)


def _is_pytree_handler(name: str, handlers: dict[str, Any]) -> bool:
    """Whether the item holds a PyTree (and so must have `_METADATA`).

    The step metadata names each item's handler; when it does not (damaged or absent metadata),
    only the conventional PyTree item name is assumed to be one. Being required (``--items
    items,iter``) says nothing about the kind: ``iter`` is a JSON or Grain item without `_METADATA`.
    """
    handler = handlers.get(name)
    if handler is None:
        return name in PYTREE_ITEM_NAMES
    return any(kind in str(handler) for kind in _PYTREE_HANDLERS)


def _check_item(
    storage: Storage,
    step_path: str,
    name: str,
    tree: _Tree,
    is_pytree: bool,
    opts: ValidationOptions,
    found: Findings,
    pool: ThreadPoolExecutor | None,
) -> ItemSummary:
    if opts.require_commit_marker and tree.regular(COMMIT_SUCCESS_FILE) is None:
        found.add(Problem.ITEM_COMMIT_MARKER_MISSING, f"{name}/{COMMIT_SUCCESS_FILE}", "item was never committed")
    if not is_pytree:
        if not any(
            e.kind is EntryKind.FILE and e.size > 0 and rel != COMMIT_SUCCESS_FILE for rel, e in tree.walk_files()
        ):
            found.add(Problem.ITEM_EMPTY, name, "item directory holds no data besides its marker")
        return ItemSummary(name)

    if tree.regular(ITEM_METADATA_FILE) is None:
        found.add(Problem.ITEM_METADATA_MISSING, f"{name}/{ITEM_METADATA_FILE}", "missing")
        return ItemSummary(name)
    meta, why = _read_json(storage, storage.join(step_path, name, ITEM_METADATA_FILE), opts.max_metadata_bytes)
    tree_meta = meta.get("tree_metadata") if isinstance(meta, dict) else None
    if why is not None or not isinstance(tree_meta, dict):
        found.add(
            Problem.ITEM_METADATA_UNREADABLE,
            f"{name}/{ITEM_METADATA_FILE}",
            why or "no tree_metadata object",
        )
        return ItemSummary(name)
    if not tree_meta:
        found.add(Problem.TREE_METADATA_EMPTY, f"{name}/{ITEM_METADATA_FILE}", "the tree lists no leaves")
    arrays = tuple(sorted(_array_names(tree_meta)))
    assert isinstance(meta, dict)
    use_ocdbt = meta.get("use_ocdbt")
    if not isinstance(use_ocdbt, bool):
        use_ocdbt = OCDBT_MANIFEST in tree.files
    if use_ocdbt:
        if _holds_unreadable(found, name):
            # Data files and the database may be in what could not be read: nothing to conclude.
            return ItemSummary(name, "ocdbt", arrays)
        before = found.total()
        _check_ocdbt(name, tree, arrays, found)
        # The database is only opened when its files look whole (else tensorstore's error is noise).
        if opts.check_ocdbt_index and found.total() == before and isinstance(storage, LocalStorage | GCSStorage):
            limits = IndexLimits(opts.max_ocdbt_keys, opts.ocdbt_index_timeout)
            found.extend(check_ocdbt_index(storage.join(step_path, name), name, arrays, limits))
        return ItemSummary(name, "ocdbt", arrays)
    zarr3 = meta.get("use_zarr3") is True
    _check_zarr(storage, step_path, name, tree, arrays, zarr3, opts, found, pool)
    return ItemSummary(name, "zarr3" if zarr3 else "zarr2", arrays)


def _array_names(tree_meta: dict[Any, Any]) -> Iterable[str]:
    """Orbax's tensorstore names for the array leaves: keys joined with '.'."""
    for key, leaf in tree_meta.items():
        if not isinstance(leaf, dict):
            continue
        value = leaf.get("value_metadata")
        keys = leaf.get("key_metadata")
        if not isinstance(value, dict) or value.get("value_type") not in ARRAY_VALUE_TYPES:
            continue
        if value.get("skip_deserialize") is True:
            continue
        if isinstance(keys, list) and all(isinstance(k, dict) and "key" in k for k in keys):
            yield ".".join(str(k["key"]) for k in keys)
        else:
            yield str(key)


def _check_ocdbt(name: str, tree: _Tree, arrays: tuple[str, ...], found: Findings) -> None:
    _check_manifest(tree, Problem.OCDBT_MANIFEST_MISSING, name, found)
    data_files = 0
    for sub_name, sub in tree.dirs.items():
        if sub_name.startswith(OCDBT_PROCESS_PREFIX):
            _check_manifest(sub, Problem.OCDBT_PROCESS_MANIFEST_MISSING, f"{name}/{sub_name}", found)
    for rel, entry in tree.walk_files():
        parts = rel.split("/")
        in_data_dir = parts[0] == "d" or (
            len(parts) > 2 and parts[0].startswith(OCDBT_PROCESS_PREFIX) and parts[1] == "d"
        )
        if in_data_dir and entry.kind is EntryKind.FILE:
            data_files += 1
            if entry.size == 0:
                found.add(Problem.DATA_FILE_EMPTY, f"{name}/{rel}", "data file is empty")
    if arrays and data_files == 0:
        found.add(Problem.OCDBT_DATA_MISSING, name, f"{len(arrays)} arrays listed but no data files")


def _check_manifest(tree: _Tree, code: Problem, where: str, found: Findings) -> None:
    """A finding `code` when the OCDBT manifest in `tree` (at `where`) is missing or empty."""
    manifest = tree.regular(OCDBT_MANIFEST)
    if manifest is None or manifest.size == 0:
        found.add(code, f"{where}/{OCDBT_MANIFEST}", "missing" if manifest is None else "empty")


def _check_zarr(
    storage: Storage,
    step_path: str,
    name: str,
    tree: _Tree,
    arrays: tuple[str, ...],
    zarr3: bool,
    opts: ValidationOptions,
    found: Findings,
    pool: ThreadPoolExecutor | None,
) -> None:
    meta_file = ZARR3_FILE if zarr3 else ZARRAY_FILE
    present: list[str] = []
    for array in arrays:
        if _holds_unreadable(found, f"{name}/{array}"):
            continue  # its own finding says why; a count of its chunks would be meaningless
        sub = tree.dirs.get(array)
        if sub is None or sub.regular(meta_file) is None:
            found.add(Problem.ARRAY_METADATA_MISSING, f"{name}/{array}/{meta_file}", "missing")
        else:
            present.append(array)

    def load(array: str) -> tuple[str, Any, str | None]:
        path = storage.join(step_path, name, array, meta_file)
        parsed, why = _read_json(storage, path, opts.max_array_metadata_bytes)
        return array, parsed, why

    mapper: Callable[..., Iterable[tuple[str, Any, str | None]]] = pool.map if pool and storage.parallel_reads else map
    for array, parsed, why in mapper(load, present):
        sub = tree.dirs[array]
        where = f"{name}/{array}"
        expected = _expected_chunks(parsed, zarr3) if why is None else None
        if expected is None:
            found.add(
                Problem.ARRAY_METADATA_UNREADABLE,
                f"{where}/{meta_file}",
                why or "no usable shape/chunks",
            )
            continue
        chunks = {rel: e for rel, e in sub.walk_files() if rel not in _ZARR_NON_CHUNKS and e.kind is EntryKind.FILE}
        for rel, entry in chunks.items():
            if entry.size == 0:
                found.add(Problem.DATA_FILE_EMPTY, f"{where}/{rel}", "chunk file is empty")
        count, keys = expected
        if keys is not None:
            for key in keys:
                if key not in chunks:
                    found.add(Problem.CHUNK_MISSING, f"{where}/{key}", "chunk file is missing")
        elif len(chunks) < count:
            found.add(Problem.CHUNK_MISSING, where, f"{len(chunks)} of {count} chunk files present")


def _expected_chunks(meta: Any, zarr3: bool) -> tuple[int, Iterable[str] | None] | None:
    """(expected chunk count, chunk keys or None when too many to name) from zarr metadata."""
    if not isinstance(meta, dict):
        return None
    shape = meta.get("shape")
    if zarr3:
        grid = meta.get("chunk_grid")
        conf = grid.get("configuration") if isinstance(grid, dict) else None
        chunks = conf.get("chunk_shape") if isinstance(conf, dict) else None
        enc = meta.get("chunk_key_encoding")
        enc_conf = enc.get("configuration", {}) if isinstance(enc, dict) else {}
        default = not isinstance(enc, dict) or enc.get("name", "default") == "default"
        sep = enc_conf.get("separator", "/" if default else ".") if isinstance(enc_conf, dict) else "/"
        prefix = "c" if default else ""
    else:
        chunks = meta.get("chunks")
        sep = meta.get("dimension_separator") or "."
        prefix = ""
    if not (isinstance(shape, list) and isinstance(chunks, list) and len(shape) == len(chunks)):
        return None
    if not all(isinstance(d, int) and d >= 0 for d in shape) or not all(isinstance(c, int) and c > 0 for c in chunks):
        return None
    if not isinstance(sep, str) or sep not in ("/", "."):
        return None
    grid_dims = [math.ceil(d / c) for d, c in zip(shape, chunks, strict=True)]
    count = math.prod(grid_dims)
    if count > _MAX_CHUNKS_ENUMERATED:
        return count, None
    if not shape:
        return 1, [prefix or "0"]

    def keys() -> Iterable[str]:
        import itertools

        for idx in itertools.product(*(range(n) for n in grid_dims)):
            key = sep.join(str(i) for i in idx)
            yield f"{prefix}{sep}{key}" if prefix else key

    return count, keys()
