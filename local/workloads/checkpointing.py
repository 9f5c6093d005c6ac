"""Orbax checkpoints in MaxText's layout, with MaxText's log lines.

`<base_output_directory>/<run_name>/checkpoints/<step>/items` with `commit_success.txt` at the step and the
item level. Commit-file atomicity is forced on every backend, so a step directory on local disk counts only
once its marker exists, exactly as on GCS; a save killed part-way leaves a step that is never restored.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import jax
import orbax.checkpoint as ocp
from etils import epath
from orbax.checkpoint import options as ocp_options

from operators.constants import COMMIT_SUCCESS_FILE

_logger = logging.getLogger(__name__)

ITEM_NAME = "items"
_STEP_DIR_RE = re.compile(r"^\d+$")


def create_manager(
    directory: str,
    *,
    period: int = 1,
    async_checkpointing: bool = True,
    max_to_keep: int | None = None,
    read_only: bool = False,
    use_ocdbt: bool = True,
    use_zarr3: bool = True,
) -> ocp.CheckpointManager:
    """An Orbax CheckpointManager over `directory` (the run's `checkpoints/`), as MaxText configures it."""
    options = ocp.CheckpointManagerOptions(
        save_interval_steps=period,
        max_to_keep=max_to_keep,
        enable_async_checkpointing=async_checkpointing,
        create=not read_only,
        read_only=read_only,
        atomicity_options=ocp_options.AtomicityOptions(mode=ocp_options.AtomicityMode.COMMIT_FILE),
    )
    return ocp.CheckpointManager(
        directory,
        item_names=(ITEM_NAME,),
        item_handlers={ITEM_NAME: ocp.PyTreeCheckpointHandler(use_ocdbt=use_ocdbt, use_zarr3=use_zarr3)},
        options=options,
    )


def latest_committed_step(directory: str) -> int | None:
    """The newest step of `directory` with its commit marker, or None."""
    if not epath.Path(directory).exists():
        return None
    manager = create_manager(directory, read_only=True)
    try:
        step: int | None = manager.latest_step()
    finally:
        manager.close()
    return step


def save_checkpoint(
    manager: ocp.CheckpointManager, step: int, state: Any, *, async_checkpointing: bool, force: bool = False
) -> bool:
    """Save `state` as `step` if the period (or `force`) says so; log MaxText's message when it does."""
    saved = manager.save(step, args=ocp.args.Composite(items=ocp.args.PyTreeSave(state)), force=force)
    if saved:
        if async_checkpointing:
            _logger.info("Started an asynchronous checkpoint save for step %d", step)
        else:
            _logger.info("Saved a checkpoint at step %d.", step)
    return bool(saved)


def restore_checkpoint(manager: ocp.CheckpointManager, step: int, abstract_state: Any) -> Any:
    """Restore `step` into the shapes, dtypes and shardings of `abstract_state`."""
    restore_args = ocp.checkpoint_utils.construct_restore_args(abstract_state)
    restored = manager.restore(
        step,
        args=ocp.args.Composite(items=ocp.args.PyTreeRestore(item=abstract_state, restore_args=restore_args)),
    )
    return restored[ITEM_NAME]


def load_state_if_possible(manager: ocp.CheckpointManager, abstract_state: Any) -> tuple[Any, int] | None:
    """Restore the newest committed step, logging MaxText's lines; None when the run has no checkpoint."""
    manager.reload()
    step = manager.latest_step()
    if step is None:
        _logger.info("No existing checkpoints found, not restoring checkpoint.")
        return None
    _logger.info("restoring from this run's directory step %d", step)
    return restore_checkpoint(manager, step, abstract_state), step


def clean_up_incomplete_checkpoint(directory: str) -> str | None:
    """Delete the newest step directory when it has no commit marker, as MaxText does after an elastic event.

    Only the newest step is considered (older unmarked steps are never restored anyway). Returns the deleted
    path, if any. Call it only when no save is in flight.
    """
    _logger.info("Elastic utils: Checking for incomplete checkpoint after an elastic event...")
    root = epath.Path(directory)
    if not root.exists():
        return None
    steps = [p for p in root.iterdir() if _STEP_DIR_RE.match(p.name) and p.is_dir()]
    if not steps:
        return None
    newest = max(steps, key=lambda p: int(p.name))
    _logger.info("Checking latest checkpoint: %s", newest)
    if (newest / COMMIT_SUCCESS_FILE).exists():
        _logger.info("Found commit_success file. Keeping %s.", newest)
        return None
    _logger.info("No commit_success file found. Deleting %s...", newest)
    newest.rmtree()
    return str(newest)


def abstract_like(state: Any) -> Any:
    """`jax.ShapeDtypeStruct`s (with shardings) for a concrete or abstract state."""
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
