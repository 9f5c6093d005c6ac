"""The training loop: data parallel over the active slices, Orbax checkpoints, in-process elastic recovery.

One `Trainer` lives for the whole process. Each elastic attempt (`train_attempt`) builds a mesh over the
devices of the slices that are up, restores the newest committed checkpoint and trains on. When a slice it
runs on goes down during a step, the step raises a `DATA_LOSS` `JaxRuntimeError`, its result is dropped,
and pathwaysutils' retry loop starts the next attempt in the same process.
"""

from __future__ import annotations

import logging
import os
import signal
import time
import types
from collections.abc import Set
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from elastic_training.local.workloads import checkpointing, model
from elastic_training.local.workloads.config import TrainConfig
from elastic_training.local.workloads.elastic import (
    ElasticRetryLimit,
    ElasticRuntimeError,
    LocalElasticManager,
    ScaleUpSignalError,
    group_devices,
    slice_down_error,
    use_slice_health,
)
from elastic_training.local.workloads.logs import log_completed_step
from elastic_training.local.workloads.recovery_log import RecoveryKind, RecoveryLog, RecoveryRecord
from elastic_training.local.workloads.slices import Generation, SliceHealth, lost_slices
from elastic_training.operators.constants import LOCAL_STEP_SECONDS_ENV

_logger = logging.getLogger(__name__)


def step_seconds() -> float:
    """The extra seconds per step `LOCAL_STEP_SECONDS` asks for (0 when unset)."""
    value = os.environ.get(LOCAL_STEP_SECONDS_ENV, "").strip()
    try:
        seconds = float(value) if value else 0.0
    except ValueError:
        raise ValueError(f"{LOCAL_STEP_SECONDS_ENV} must be a number of seconds, not {value!r}") from None
    if not 0.0 <= seconds <= 60.0:
        raise ValueError(f"{LOCAL_STEP_SECONDS_ENV} must be between 0 and 60, not {value!r}")
    return seconds


class Trainer:
    """Trains `config` on the slices of `health`, one attempt at a time."""

    def __init__(self, config: TrainConfig, health: SliceHealth) -> None:
        self.config = config
        self.health = health
        self.dims = model.Dims.from_config(config)
        self.slice_to_devices = group_devices(jax.devices(), config.num_slices, config.devices_per_slice)
        self.manager = LocalElasticManager(self.slice_to_devices, health) if config.elastic_enabled else None
        # One jitted step for the process: JAX keeps an executable per device set, reused across attempts.
        self.step_fn = model.make_train_step(self.dims.heads, config.learning_rate)
        self.recovery_log = RecoveryLog(config.run_directory if config.base_output_directory else None)
        self.attempts = 0
        self.last_completed_step: int | None = None
        self.last_loss: float | None = None
        self.losses: list[float] = []
        self.stop_reason: str | None = None
        self._active: frozenset[int] = frozenset()
        self._generations: dict[int, Generation] = {}
        self._pending: RecoveryRecord | None = None
        self._kill_during_save = checkpointing.kill_during_save_step()
        self._step_seconds = step_seconds()
        self._kill_during_save_once = checkpointing.kill_during_save_once()
        self._kill_during_save_or_later = checkpointing.kill_during_save_or_later()

    def run(self) -> int:
        """Train to `steps` (elastic or not); the process exit code."""
        if self.manager is None:
            self._active = frozenset(self.slice_to_devices)
            self.train_attempt()
            return 0
        _logger.info("Elastic utils: Elastic training enabled.")
        _logger.info("Elastic Retry Enabled")
        retry = self.manager.elastic_retry(
            minimum_slice_count=self.config.minimum_slice_count,
            poll_interval=self.config.elastic_poll_interval_seconds,
            timeout=self.config.elastic_timeout_seconds,
            pre_callback=self._on_slices_ready,
            on_elastic_event_callback=self._on_elastic_event,
            retry_policy=ElasticRetryLimit(self.config.elastic_max_retries),
        )
        try:
            with use_slice_health(self.health):
                retry(self.train_attempt)()
        except (ElasticRuntimeError, TimeoutError):
            _logger.exception("Elastic training cannot continue")
            self._finish_pending("failed")
            return 1
        return 0

    def train_attempt(self) -> int:
        """One attempt: mesh over the active slices, restore, train to the end. Returns the last step."""
        self.attempts += 1
        if self.manager is not None:
            self._active = frozenset(self.manager.active_slice_indices)
        now = self.health.generations()
        self._generations = {i: now[i] for i in self._active if i in now}
        devices = [d for i in sorted(self._active) for d in self.slice_to_devices[i]]
        mesh = Mesh(np.array(devices), ("data",))
        replicated = NamedSharding(mesh, P())  # type: ignore[no-untyped-call]
        batch_sharding = NamedSharding(mesh, P("data"))  # type: ignore[no-untyped-call]
        abstract = jax.tree.map(
            lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=replicated),  # type: ignore[no-untyped-call]
            jax.eval_shape(lambda: model.init_state(self.dims, self.config.seed, self.config.learning_rate)),
        )
        manager = self._open_checkpoints()
        try:
            state = self._restore_or_init(manager, abstract, replicated)
            return self._loop(manager, state, batch_sharding, len(devices))
        except jax.errors.JaxRuntimeError as error:
            self._note_failure(error)
            raise
        finally:
            if manager is not None:
                manager.close()  # waits for a save in flight: it holds a state from before the failure

    def _open_checkpoints(self) -> ocp.CheckpointManager | None:
        if not self.config.enable_checkpointing:
            return None
        return checkpointing.create_manager(
            self.config.checkpoint_directory,
            period=self.config.checkpoint_period,
            async_checkpointing=self.config.async_checkpointing,
            max_to_keep=self.config.max_num_checkpoints_to_keep,
            use_ocdbt=self.config.storage_format[0],
            use_zarr3=self.config.storage_format[1],
            kill_during_save_step=self._kill_during_save,
            kill_during_save_once=self._kill_during_save_once,
            kill_during_save_or_later=self._kill_during_save_or_later,
        )

    def _restore_or_init(self, manager: ocp.CheckpointManager | None, abstract: Any, replicated: NamedSharding) -> Any:
        if self._pending is not None:
            self._pending.restore_started_at = time.time()
        if manager is not None:
            checkpointing.refuse_completed_run(manager, self.config.steps)
        loaded = checkpointing.load_state_if_possible(manager, abstract) if manager is not None else None
        if loaded is not None:
            state, restored_step = loaded
        else:
            # One compiled initialisation instead of dozens of eagerly compiled ops.
            init = jax.jit(
                lambda: model.init_state(self.dims, self.config.seed, self.config.learning_rate),
                out_shardings=replicated,
            )
            state = init()
            restored_step = None
        jax.block_until_ready(state)  # type: ignore[no-untyped-call]
        if self._pending is not None:
            self._pending.restore_finished_at = time.time()
            self._pending.step_restored = restored_step
        return state

    def _loop(
        self, manager: ocp.CheckpointManager | None, state: Any, batch_sharding: NamedSharding, n_devices: int
    ) -> int:
        config = self.config
        global_batch = config.per_device_batch_size * n_devices
        last = config.steps - 1
        for step in range(int(state["step"]), config.steps):
            if self.stop_reason is not None:
                _logger.info("Training stopped: %s", self.stop_reason)
                break
            started = time.time()
            tokens = jax.device_put(model.corpus_batch("train", step, global_batch, self.dims), batch_sharding)
            new_state, loss = self.step_fn(state, tokens)
            loss_value = float(loss)
            if self._step_seconds:
                time.sleep(self._step_seconds)  # inside the step: a slice lost meanwhile fails it
            lost = lost_slices(self._generations, self.health.generations()) | (self._active - set(self._generations))
            if lost:
                raise slice_down_error(lost, f"Step {step} was not completed.")
            state = new_state
            seconds = time.time() - started
            self._completed(step, seconds, loss_value, global_batch, n_devices)
            if manager is not None:
                saved = checkpointing.save_checkpoint(
                    manager,
                    step,
                    state,
                    async_checkpointing=config.async_checkpointing,
                    force=step == last and config.save_checkpoint_on_completion,
                )
                if saved:
                    self._maybe_scale_up(manager, step)
        if manager is not None:
            manager.wait_until_finished()
        return self.last_completed_step if self.last_completed_step is not None else -1

    def _completed(self, step: int, seconds: float, loss: float, global_batch: int, n_devices: int) -> None:
        self.last_completed_step, self.last_loss = step, loss
        self.losses.append(loss)
        tokens_per_device = global_batch * self.dims.length / max(seconds, 1e-9) / n_devices
        log_completed_step(
            step, seconds, tokens_per_device, loss, live_slices=len(self._active) if self.manager is not None else None
        )
        pending = self._pending
        if pending is not None and pending.first_step_after_recovery is None:
            pending.first_step_after_recovery = step
            pending.first_step_completed_at = time.time()
            self._finish_pending("recovered")

    def _maybe_scale_up(self, manager: ocp.CheckpointManager, step: int) -> None:
        """Grow onto slices that came back, right after a checkpoint so no step is lost (replica-resize)."""
        if self.manager is None or not self.manager.available_inactive_slices or step == self.config.steps - 1:
            return
        manager.wait_until_finished()
        self._start_record("scale_up", "Scale up requested.", frozenset(), step)
        raise ScaleUpSignalError(f"slices {sorted(self.manager.available_inactive_slices)} are available")

    def _note_failure(self, error: jax.errors.JaxRuntimeError) -> None:
        lost = lost_slices(self._generations, self.health.generations())
        self._start_record("slice_down", str(error).splitlines()[0], lost, self.last_completed_step)

    def _start_record(self, kind: RecoveryKind, error: str, lost: Set[int], step: int | None) -> None:
        self._finish_pending("failed")
        self._pending = RecoveryRecord(
            run_name=self.config.run_name,
            kind=kind,
            failed_attempt=self.attempts,
            failure_detected_at=time.time(),
            error=error,
            lost_slices=sorted(lost),
            step_at_failure=step,
            slices_before=sorted(self._active),
        )

    def _finish_pending(self, outcome: str) -> None:
        if self._pending is None:
            return
        self._pending.outcome = "recovered" if outcome == "recovered" else "failed"
        self.recovery_log.write(self._pending)
        self._pending = None

    def _on_slices_ready(self) -> None:
        if self._pending is not None and self.manager is not None:
            self._pending.slices_ready_at = time.time()
            self._pending.active_slices = sorted(self.manager.active_slice_indices)

    def _on_elastic_event(self) -> None:
        if self.config.enable_checkpointing:
            checkpointing.clean_up_incomplete_checkpoint(self.config.checkpoint_directory)

    def request_stop(self, signum: int, frame: types.FrameType | None) -> None:
        """SIGTERM handler: stop at the next step boundary and exit 0, as MaxText does."""
        del frame
        self.stop_reason = f"Job received termination signal ({signal.Signals(signum).name})."
