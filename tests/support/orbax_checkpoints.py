"""Real Orbax checkpoints written once per session, in the layouts MaxText produces.

Fixtures (registered from tests/conftest.py):

- ``orbax_runs`` (session): ``{"ocdbt": run_dir, "zarr": run_dir}``; each run dir is a MaxText
  ``<run>/checkpoints/<step>/items`` tree with steps 0, 10, 20 written by orbax with commit-file
  atomicity (as MaxText does on GCS). ``zarr`` is ``use_ocdbt=False, use_zarr3=False`` (MaxText
  on Pathways) and also has a non-PyTree ``iter`` item.
- ``run_copy``: a function that copies one of them into a fresh temp dir for damaging.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

STEPS = (0, 10, 20)


def make_tree(step: int, scale: float = 1.0) -> dict[str, Any]:
    """A small training-state-like tree with several dtypes and a scalar."""
    import jax.numpy as jnp
    import numpy as np

    return {
        "params": {
            "dense": {"kernel": np.full((8, 4), scale, np.float32), "bias": np.zeros((4,), np.float32)},
            "embed": jnp.ones((16, 8), jnp.bfloat16) * scale,
        },
        "opt": {"mu": jnp.arange(64, dtype=jnp.float32).reshape(8, 8) * scale},
        "step": np.int32(step),
    }


def write_run(
    run_dir: Path,
    *,
    ocdbt: bool,
    steps: tuple[int, ...] = STEPS,
    with_iter: bool = False,
    tree_fn: Callable[[int], dict[str, Any]] = make_tree,
) -> Path:
    """Write a MaxText-layout run; returns its ``checkpoints/`` root."""
    import orbax.checkpoint as ocp
    from orbax.checkpoint import options as ocp_options

    root = run_dir / "checkpoints"
    names = ("items", "iter") if with_iter else ("items",)
    handlers: dict[str, Any] = {"items": ocp.PyTreeCheckpointHandler(use_ocdbt=ocdbt, use_zarr3=False)}
    if with_iter:
        handlers["iter"] = ocp.JsonCheckpointHandler()
    options = ocp.CheckpointManagerOptions(
        atomicity_options=ocp_options.AtomicityOptions(mode=ocp_options.AtomicityMode.COMMIT_FILE),
    )
    mgr = ocp.CheckpointManager(root, item_names=names, item_handlers=handlers, options=options)
    for step in steps:
        tree = tree_fn(step)
        items: dict[str, Any] = {"items": ocp.args.PyTreeSave(tree)}
        if with_iter:
            items["iter"] = ocp.args.JsonSave({"step": step, "shard": 0})
        mgr.save(step, args=ocp.args.Composite(**items))
    mgr.wait_until_finished()
    mgr.close()
    return root


@pytest.fixture(scope="session")
def orbax_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Pristine MaxText-layout runs (never modify them: use ``run_copy``)."""
    base = tmp_path_factory.mktemp("orbax-runs")
    write_run(base / "ocdbt", ocdbt=True)
    write_run(base / "zarr", ocdbt=False, with_iter=True)
    return {"ocdbt": base / "ocdbt", "zarr": base / "zarr"}


@pytest.fixture
def run_copy(orbax_runs: dict[str, Path], tmp_path: Path) -> Callable[[str], Path]:
    """``run_copy(layout)`` -> a private copy of that run directory."""
    counter = iter(range(1_000_000))

    def copy(layout: str) -> Path:
        dst = tmp_path / f"{layout}-{next(counter)}"
        shutil.copytree(orbax_runs[layout], dst, symlinks=True)
        return dst

    return copy
