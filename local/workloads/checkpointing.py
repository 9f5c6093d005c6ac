"""Orbax checkpoints in MaxText's layout, with MaxText's log lines.

`<base_output_directory>/<run_name>/checkpoints/<step>/items` with `commit_success.txt` at the step and the
item level. Commit-file atomicity is forced on every backend, so a step directory on local disk counts only
once its marker exists, exactly as on GCS; a save killed part-way leaves a step that is never restored.

Local-only fault injection: with `LOCAL_FAULT_KILL_DURING_SAVE_STEP=N` in the environment the trainer SIGKILLs
itself in the middle of the save of step N, once everything but the step's commit marker is on disk. With
`LOCAL_FAULT_KILL_DURING_SAVE_ONCE=1` as well it does so once per run directory (a marker file next to
`checkpoints/` remembers it), so a full restart that saves step N again survives, as after a real crash. With
`LOCAL_FAULT_KILL_DURING_SAVE_OR_LATER=1` it is the first save of step N *or later*: a run whose checkpoint period
is chosen at launch (`checkpoint_period="auto"`) may never save step N itself.
"""

from __future__ import annotations

import logging
import os
import re
import signal
from typing import Any

import jax
import orbax.checkpoint as ocp
from etils import epath
from orbax.checkpoint import options as ocp_options
from orbax.checkpoint.path import atomicity

from elastic_training.operators.constants import COMMIT_SUCCESS_FILE

_logger = logging.getLogger(__name__)

ITEM_NAME = "items"
_STEP_DIR_RE = re.compile(r"^\d+$")

# Fault injection for tests, never set in a real job: the step whose save kills the process before its marker.
KILL_DURING_SAVE_ENV = "LOCAL_FAULT_KILL_DURING_SAVE_STEP"
KILL_DURING_SAVE_ONCE_ENV = "LOCAL_FAULT_KILL_DURING_SAVE_ONCE"
KILL_DURING_SAVE_OR_LATER_ENV = "LOCAL_FAULT_KILL_DURING_SAVE_OR_LATER"


def kill_during_save_step() -> int | None:
    """The step `LOCAL_FAULT_KILL_DURING_SAVE_STEP` asks to be killed in the middle of saving, if any."""
    value = os.environ.get(KILL_DURING_SAVE_ENV, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{KILL_DURING_SAVE_ENV} must be a step number, not {value!r}") from None


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def kill_during_save_once() -> bool:
    """Whether `LOCAL_FAULT_KILL_DURING_SAVE_ONCE` limits the kill to once per run directory."""
    return _env_flag(KILL_DURING_SAVE_ONCE_ENV)


def kill_during_save_or_later() -> bool:
    """Whether `LOCAL_FAULT_KILL_DURING_SAVE_OR_LATER` widens the kill to the first save of that step or a later one."""
    return _env_flag(KILL_DURING_SAVE_OR_LATER_ENV)


def kill_marker(checkpoint_directory: str, step: int) -> epath.Path:
    """The file that records a once-only kill during the save of `step` (in the run directory)."""
    return epath.Path(checkpoint_directory).parent / f"local-fault-killed-during-save-{step}"


def _kill_before_commit(
    step_directory: epath.Path, once_marker: epath.Path | None = None, *, or_later: bool = False
) -> type[Any]:
    """Orbax's commit-file temporary path, except that committing `step_directory` (with `or_later`: that step's
    or a later step's directory) SIGKILLs the process.

    The seam (Orbax 0.12.8): an async save's background thread first waits for the item handlers' write futures
    (the array data), then finalizes the `items` item (its own `commit_success.txt`), writes `_CHECKPOINT_METADATA`,
    and last calls `finalize()` on the step's temporary path, which under `AtomicityMode.COMMIT_FILE` is the commit
    itself: the commit timestamp into `_CHECKPOINT_METADATA`, then `<step>/commit_success.txt`. Killing on entry
    leaves the step complete but uncommitted: the worst case for a reader, and what a crash just before the commit
    leaves. A synchronous save goes through the same `finalize()`. Orbax also builds the item's temporary path from
    this class, hence the match on the step directory itself.
    """

    class KillBeforeCommitTemporaryPath(atomicity.CommitFileTemporaryPath):  # type: ignore[misc]
        async def finalize(self) -> None:
            final = self.get_final()
            if _armed_for(final, step_directory, or_later) and not (once_marker is not None and once_marker.exists()):
                if once_marker is not None:
                    once_marker.write_text("killed\n")
                _logger.warning(
                    "Fault injection (%s): killing the process before the commit marker of %s",
                    KILL_DURING_SAVE_ENV,
                    final,
                )
                for handler in logging.getLogger().handlers:
                    handler.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            await super().finalize()

    return KillBeforeCommitTemporaryPath


def _armed_for(final: epath.Path, step_directory: epath.Path, or_later: bool) -> bool:
    """Whether committing `final` is the kill: the step's own directory, or with `or_later` a later step's (a
    sibling named by a larger step number; an item's directory inside a step is never one)."""
    if final == step_directory:
        return True
    return (
        or_later
        and final.parent == step_directory.parent
        and _STEP_DIR_RE.match(final.name) is not None
        and int(final.name) > int(step_directory.name)
    )


def create_manager(
    directory: str,
    *,
    period: int = 1,
    async_checkpointing: bool = True,
    max_to_keep: int | None = None,
    read_only: bool = False,
    use_ocdbt: bool = True,
    use_zarr3: bool = True,
    kill_during_save_step: int | None = None,
    kill_during_save_once: bool = False,
    kill_during_save_or_later: bool = False,
) -> ocp.CheckpointManager:
    """An Orbax CheckpointManager over `directory` (the run's `checkpoints/`), as MaxText configures it.

    `kill_during_save_step` arms the fault injection: the save of that step kills the process before its
    commit marker is written (only the first time in this run directory with `kill_during_save_once`; the first
    save of that step or a later one with `kill_during_save_or_later`).
    """
    # `temporary_path_class` is deprecated in favour of `atomicity_options`, but it is the only way to hand
    # Orbax a class; it is set only while the fault injection is armed.
    kill_path_class = (
        None
        if kill_during_save_step is None
        else _kill_before_commit(
            epath.Path(directory) / str(kill_during_save_step),
            kill_marker(directory, kill_during_save_step) if kill_during_save_once else None,
            or_later=kill_during_save_or_later,
        )
    )
    options = ocp.CheckpointManagerOptions(
        save_interval_steps=period,
        max_to_keep=max_to_keep,
        enable_async_checkpointing=async_checkpointing,
        create=not read_only,
        read_only=read_only,
        atomicity_options=ocp_options.AtomicityOptions(mode=ocp_options.AtomicityMode.COMMIT_FILE),
        temporary_path_class=kill_path_class,
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


def refuse_completed_run(manager: ocp.CheckpointManager, steps: int) -> None:
    """MaxText's refusal to train a run whose newest checkpoint already covers `steps`: RuntimeError, exit 1.

    MaxText 0.2.5 (``maxtext/utils/train_utils.py`` ``validate_completed_steps``, called with the newest step
    + 1 before anything is restored) raises it uncaught; tests/local/workloads/test_maxtext_contract.py holds
    the text and the exit code to real MaxText's.
    """
    latest = manager.latest_step()
    if latest is None or latest + 1 < steps:
        return
    completed = latest + 1
    raise RuntimeError(
        f"Requested training up to step {steps}, but a checkpoint already exists at step {completed - 1} "
        f"(which means {completed} steps have been completed). Did you mean to continue training past step "
        f"{completed} (you should set steps > {completed}) or to not load the checkpoint (use "
        "enable_checkpointing=False?)"
    )
