"""Test driver: run one `Trainer` on several CPU slices and take a slice away mid-run.

`python -m tests.support.elastic_driver <down_after_step> <slice> <up> key=value ...` where `<up>` is
`never`, a number of seconds the slice stays down, or `step:N` (once step N has completed again).
The trainer, pathwaysutils' retry loop and Orbax are the real ones; the slice health is a `StaticSliceHealth`
flipped from inside the health calls themselves, so every flip lands at the same point of the run however
loaded the machine is (no watcher thread racing the training loop):

* down: on the trainer's health check right after step `down_after_step` completed, so the step after it
  fails and `step_at_failure == down_after_step`;
* up after seconds: on a poll of pathwaysutils' `wait_for_slices` (which runs in the trainer's thread) once
  the wait has seen the slice down at least once and the seconds have passed, so the wait really paused;
* up at `step:N`: on the trainer's health check after step N of a later attempt, which then blocks until
  pathwaysutils' monitor thread has noticed the slice, so the next checkpoint save requests the scale-up.

The last line printed is `DRIVER_RESULT <json>` (also `down_at` and `up_at`, Unix seconds or null, and
`batches`: per step run, the global batch rows, the devices the batch and the parameters are on, and the
rows of each batch shard, read from the arrays the jitted step receives).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from elastic_training.local.workloads.config import TrainConfig, parse_args
from elastic_training.local.workloads.logs import configure_logging
from elastic_training.local.workloads.train import ensure_host_devices

_MONITOR_TIMEOUT_SECONDS = 60.0


def main() -> int:
    down_after, slice_index, up_after = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    config = parse_args(TrainConfig, sys.argv[4:])
    configure_logging()
    ensure_host_devices(config.device_count)
    import jax

    from elastic_training.local.workloads.slices import Generation, StaticSliceHealth
    from elastic_training.local.workloads.trainer import Trainer

    up_step = int(up_after.removeprefix("step:")) if up_after.startswith("step:") else None
    up_seconds = None if up_after == "never" or up_step is not None else float(up_after)
    trainer: Trainer | None = None
    times: dict[str, float | None] = {"down_at": None, "up_at": None}

    def in_trainer_thread() -> bool:
        return threading.current_thread() is threading.main_thread()

    class ScriptedSliceHealth(StaticSliceHealth):
        """Flips `slice_index` down and up at fixed points of the run (see the module docstring)."""

        def __init__(self, num_slices: int) -> None:
            super().__init__(num_slices)
            self.wait_saw_down = False

        def _bring_up(self) -> None:
            self.set_up(slice_index)
            times["up_at"] = time.time()

        def generations(self) -> Mapping[int, Generation]:
            if trainer is not None and in_trainer_thread():
                last = trainer.last_completed_step if trainer.last_completed_step is not None else -1
                down = times["down_at"] is not None
                back_due = up_step is not None and trainer.attempts >= 2 and last >= up_step
                if not down and last >= down_after:
                    self.set_down(slice_index)
                    times["down_at"] = time.time()
                elif down and back_due and times["up_at"] is None:
                    self._bring_up()
                    self._wait_for_the_monitor()
            return super().generations()

        def refresh(self) -> frozenset[int]:
            down_at = times["down_at"]
            waiting = in_trainer_thread() and down_at is not None and times["up_at"] is None
            if waiting and up_seconds is not None and self.wait_saw_down and time.time() - (down_at or 0) >= up_seconds:
                self._bring_up()
            healthy = super().refresh()
            if waiting and slice_index not in healthy:
                self.wait_saw_down = True
            return healthy

        def _wait_for_the_monitor(self) -> None:
            assert trainer is not None and trainer.manager is not None
            deadline = time.monotonic() + _MONITOR_TIMEOUT_SECONDS
            while slice_index not in trainer.manager.available_inactive_slices:
                if time.monotonic() > deadline:
                    raise TimeoutError("pathwaysutils' monitor never noticed the slice come back")
                time.sleep(0.005)

    health = ScriptedSliceHealth(config.num_slices)
    trainer = Trainer(config, health)
    # What each step really ran on, read from the arrays handed to the jitted step (not from the log).
    batches: list[dict[str, object]] = []
    step_fn = trainer.step_fn

    def recording_step(state: Any, tokens: Any) -> Any:
        param_devices = {d.id for leaf in jax.tree.leaves(state["params"]) for d in leaf.sharding.device_set}
        batches.append(
            {
                "attempt": trainer.attempts if trainer is not None else 0,
                "rows": tokens.shape[0],
                "devices": sorted(d.id for d in tokens.sharding.device_set),
                "shard_rows": sorted(shard.data.shape[0] for shard in tokens.addressable_shards),
                "param_devices": sorted(param_devices),
            }
        )
        return step_fn(state, tokens)

    trainer.step_fn = recording_step
    code = trainer.run()
    result = {
        "code": code,
        "attempts": trainer.attempts,
        "last_step": trainer.last_completed_step,
        "records": trainer.recovery_log.read(),
        "batches": batches,
        **times,
    }
    print("DRIVER_RESULT " + json.dumps(result), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
