"""Deep validation: restore arrays with Orbax on CPU and check that every value is finite.

Within a byte budget every array is restored; beyond it a deterministic sample of arrays is,
so the cost stays bounded however large the checkpoint. Orbax and JAX are imported lazily; they come
with the ``[deep]`` extra, and without them `deep_check` raises `MissingLibraryError` naming it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from elastic_training.operators.checkpoints.libraries import require_restore_libraries
from elastic_training.operators.checkpoints.problems import Finding, Problem

DEFAULT_BUDGET_BYTES = 1 << 30


@dataclass(frozen=True)
class DeepResult:
    """What a deep check read and found."""

    problems: tuple[Finding, ...]
    arrays_total: int
    arrays_checked: int
    bytes_total: int
    bytes_checked: int

    @property
    def sampled(self) -> bool:
        """Whether only some arrays were restored."""
        return self.arrays_checked < self.arrays_total

    def to_json(self) -> dict[str, Any]:
        """Plain JSON form."""
        return {
            "arrays_total": self.arrays_total,
            "arrays_checked": self.arrays_checked,
            "bytes_total": self.bytes_total,
            "bytes_checked": self.bytes_checked,
            "sampled": self.sampled,
        }


def _key_parts(path: Iterable[Any]) -> tuple[str, ...]:
    """A JAX key path as plain names: dict keys, sequence indices, attribute names."""
    parts = []
    for entry in path:
        for attribute in ("key", "idx", "name"):
            if hasattr(entry, attribute):
                parts.append(str(getattr(entry, attribute)))
                break
        else:
            parts.append(str(entry))
    return tuple(parts)


def _nbytes(meta: Any) -> int:
    import numpy as np

    shape = getattr(meta, "shape", None) or ()
    dtype = getattr(meta, "dtype", None)
    try:
        itemsize = np.dtype(dtype).itemsize if dtype is not None else 8
    except TypeError:
        itemsize = 8
    return int(math.prod(shape)) * itemsize


def choose_sample(sizes: dict[tuple[str, ...], int], budget: int, seed: int) -> list[tuple[str, ...]]:
    """All keys when they fit in `budget`; else a seeded random subset that fits (at least one)."""
    if sum(sizes.values()) <= budget:
        return sorted(sizes)
    keys = sorted(sizes)
    random.Random(seed).shuffle(keys)
    chosen: list[tuple[str, ...]] = []
    used = 0
    for key in keys:
        if used + sizes[key] <= budget:
            chosen.append(key)
            used += sizes[key]
    if not chosen:
        chosen.append(min(keys, key=lambda k: sizes[k]))
    return sorted(chosen)


def deep_check(item_path: str, *, budget_bytes: int = DEFAULT_BUDGET_BYTES, seed: int = 0) -> DeepResult:
    """Restore the arrays of one PyTree item (``<step>/items``) and check they are finite.

    `MissingLibraryError` when Orbax or JAX is not installed (the ``[deep]`` extra).
    """
    require_restore_libraries("deep validation (restoring arrays)")
    import jax
    import numpy as np
    import orbax.checkpoint as ocp
    from etils import epath

    handler = ocp.PyTreeCheckpointHandler()
    path = epath.Path(item_path)
    try:
        tree = handler.metadata(path).tree
    except Exception as exc:  # Orbax raises many types for damaged data.
        return DeepResult((_restore_failed(exc, "metadata"),), 0, 0, 0, 0)
    # The restore target is the checkpoint's own metadata tree, containers and all (MaxText's `opt_state` is a
    # list holding None), with Orbax's PLACEHOLDER on every leaf left out of the sample: no assumed shape.
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    leaves = {_key_parts(k): v for k, v in flat if hasattr(v, "shape")}
    sizes = {k: _nbytes(v) for k, v in leaves.items()}
    chosen = set(choose_sample(sizes, budget_bytes, seed) if sizes else [])
    item = jax.tree_util.tree_map_with_path(lambda k, _: 0 if _key_parts(k) in chosen else ocp.PLACEHOLDER, tree)
    restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
    problems: list[Finding] = []
    try:
        restored = handler.restore(path, args=ocp.args.PyTreeRestore(item=item, restore_args=restore_args))
    except Exception as exc:  # Orbax/tensorstore raise many types for damaged data.
        return DeepResult((_restore_failed(exc, "restore"),), len(leaves), 0, sum(sizes.values()), 0)
    for key_path, value in jax.tree_util.tree_flatten_with_path(restored)[0]:
        key = _key_parts(key_path)
        if key not in chosen:
            continue
        arr = np.asarray(value)
        if arr.dtype.kind in "fc" or arr.dtype.name == "bfloat16":
            bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
            if bad:
                problems.append(
                    Finding(
                        Problem.NON_FINITE_VALUES,
                        ".".join(key),
                        f"{bad} of {arr.size} values are NaN or infinite",
                    )
                )
    return DeepResult(
        tuple(problems),
        arrays_total=len(leaves),
        arrays_checked=len(chosen),
        bytes_total=sum(sizes.values()),
        bytes_checked=sum(sizes[k] for k in chosen),
    )


def _restore_failed(exc: BaseException, stage: str) -> Finding:
    text = str(exc).strip().splitlines()
    first = text[0][:300] if text else ""
    return Finding(Problem.RESTORE_FAILED, "", f"{stage}: {type(exc).__name__}: {first}")
