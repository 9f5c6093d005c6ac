"""Load the parameters of one committed checkpoint, for evaluation and synthesis."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import jax
from etils import epath

from elastic_training.local.workloads import checkpointing, model
from elastic_training.local.workloads.compilation_cache import use_compilation_cache
from elastic_training.local.workloads.config import CheckpointReaderConfig, join_path, parse_args
from elastic_training.local.workloads.logs import configure_logging
from elastic_training.operators.constants import COMMIT_SUCCESS_FILE

_logger = logging.getLogger(__name__)
_R = TypeVar("_R", bound=CheckpointReaderConfig)


class CheckpointNotFoundError(RuntimeError):
    """The requested step (or any committed step) is not in the run's checkpoint directory."""


@dataclasses.dataclass(frozen=True)
class LoadedParams:
    """Parameters restored from `path` (a committed step of the run)."""

    params: model.Params
    step: int
    path: str
    dims: model.Dims


def load_committed_params(config: CheckpointReaderConfig) -> LoadedParams:
    """Restore the parameters of `checkpoint_step` (-1: the newest committed step) on one device."""
    dims = model.Dims.from_config(config)
    manager = checkpointing.create_manager(config.checkpoint_directory, read_only=True)
    try:
        committed = manager.all_steps()
        step = max(committed, default=None) if config.checkpoint_step == -1 else config.checkpoint_step
        if step is None or step not in committed:
            raise CheckpointNotFoundError(_not_found_message(config.checkpoint_directory, step, committed))
        device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        abstract = jax.tree.map(
            lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=device),  # type: ignore[no-untyped-call]
            jax.eval_shape(lambda: model.init_state(dims, config.seed, 1e-3)),
        )
        state: Any = checkpointing.restore_checkpoint(manager, step, abstract)
    finally:
        manager.close()
    return LoadedParams(state["params"], step, join_path(config.checkpoint_directory, str(step)), dims)


def _not_found_message(directory: str, step: int | None, committed: Sequence[int]) -> str:
    available = f"committed steps: {sorted(committed)}"
    if step is None:
        return f"{directory} has no committed checkpoint ({available})"
    if epath.Path(join_path(directory, str(step))).exists():
        return f"step {step} of {directory} is not committed (no {COMMIT_SUCCESS_FILE}; {available})"
    return f"{directory} has no step {step} ({available})"


def reader_main(config_class: type[_R], work: Callable[[_R], object], argv: Sequence[str]) -> int:
    """Entry point body of a checkpoint reader: parse, run `work`; 1 when the checkpoint is missing."""
    return reader_main_with(parse_args(config_class, argv), work)


def reader_main_with(config: _R, work: Callable[[_R], object]) -> int:
    """Run `work` on a parsed reader configuration; 1 (logged) when the checkpoint is missing."""
    configure_logging()
    use_compilation_cache(config.jax_cache_dir)
    try:
        work(config)
    except CheckpointNotFoundError as error:
        _logger.error("%s", error)
        return 1
    return 0
