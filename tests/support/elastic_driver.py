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
from dataclasses import dataclass, field
from typing import Any

from elastic_training.local.workloads.config import TrainConfig, parse_args
from elastic_training.local.workloads.logs import configure_logging
from elastic_training.local.workloads.train import ensure_host_devices

_MONITOR_TIMEOUT_SECONDS = 60.0


@dataclass
class _Script:
    """When the driver takes its slice down and brings it back (the module docstring), and when it did."""

    down_after: int
    slice_index: int
    up_step: int | None  # back once this step has completed again
    up_seconds: float | None  # back this long after it went down
    trainer: Any = None
    times: dict[str, float | None] = field(default_factory=lambda: {"down_at": None, "up_at": None})

    @classmethod
    def from_argv(cls, down_after: str, slice_index: str, up_after: str) -> _Script:
        up_step = int(up_after.removeprefix("step:")) if up_after.startswith("step:") else None
        up_seconds = None if up_after == "never" or up_step is not None else float(up_after)
        return cls(int(down_after), int(slice_index), up_step, up_seconds)


def _in_trainer_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _scripted_health(script: _Script, num_slices: int) -> Any:
    """A ``StaticSliceHealth`` that flips the script's slice down and up from inside its own health calls."""
    from elastic_training.local.workloads.slices import Generation, StaticSliceHealth

    class ScriptedSliceHealth(StaticSliceHealth):
        def __init__(self, num_slices: int) -> None:
            super().__init__(num_slices)
            self.wait_saw_down = False

        def _bring_up(self) -> None:
            self.set_up(script.slice_index)
            script.times["up_at"] = time.time()

        def generations(self) -> Mapping[int, Generation]:
            trainer, times = script.trainer, script.times
            if trainer is not None and _in_trainer_thread():
                last = trainer.last_completed_step if trainer.last_completed_step is not None else -1
                down = times["down_at"] is not None
                back_due = script.up_step is not None and trainer.attempts >= 2 and last >= script.up_step
                if not down and last >= script.down_after:
                    self.set_down(script.slice_index)
                    times["down_at"] = time.time()
                elif down and back_due and times["up_at"] is None:
                    self._bring_up()
                    self._wait_for_the_monitor()
            return super().generations()

        def refresh(self) -> frozenset[int]:
            down_at, up_seconds = script.times["down_at"], script.up_seconds
            waiting = _in_trainer_thread() and down_at is not None and script.times["up_at"] is None
            if waiting and up_seconds is not None and self.wait_saw_down and time.time() - (down_at or 0) >= up_seconds:
                self._bring_up()
            healthy = super().refresh()
            if waiting and script.slice_index not in healthy:
                self.wait_saw_down = True
            return healthy

        def _wait_for_the_monitor(self) -> None:
            assert script.trainer is not None and script.trainer.manager is not None
            deadline = time.monotonic() + _MONITOR_TIMEOUT_SECONDS
            while script.slice_index not in script.trainer.manager.available_inactive_slices:
                if time.monotonic() > deadline:
                    raise TimeoutError("pathwaysutils' monitor never noticed the slice come back")
                time.sleep(0.005)

    return ScriptedSliceHealth(num_slices)


def _record_batches(trainer: Any) -> list[dict[str, object]]:
    """What each step really ran on, read from the arrays handed to the jitted step (not from the log)."""
    import jax

    batches: list[dict[str, object]] = []
    step_fn = trainer.step_fn

    def recording_step(state: Any, tokens: Any) -> Any:
        param_devices = {d.id for leaf in jax.tree.leaves(state["params"]) for d in leaf.sharding.device_set}
        batches.append(
            {
                "attempt": trainer.attempts,
                "rows": tokens.shape[0],
                "devices": sorted(d.id for d in tokens.sharding.device_set),
                "shard_rows": sorted(shard.data.shape[0] for shard in tokens.addressable_shards),
                "param_devices": sorted(param_devices),
            }
        )
        return step_fn(state, tokens)

    trainer.step_fn = recording_step
    return batches


def main() -> int:
    script = _Script.from_argv(*sys.argv[1:4])
    config = parse_args(TrainConfig, sys.argv[4:])
    configure_logging()
    ensure_host_devices(config.device_count)
    from elastic_training.local.workloads.trainer import Trainer

    trainer = script.trainer = Trainer(config, _scripted_health(script, config.num_slices))
    batches = _record_batches(trainer)
    code = trainer.run()
    result = {
        "code": code,
        "attempts": trainer.attempts,
        "last_step": trainer.last_completed_step,
        "records": trainer.recovery_log.read(),
        "batches": batches,
        **script.times,
    }
    print("DRIVER_RESULT " + json.dumps(result), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
