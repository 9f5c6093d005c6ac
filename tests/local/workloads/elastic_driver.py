"""Test driver: run one `Trainer` on several CPU slices and take a slice away mid-run.

`python -m tests.local.workloads.elastic_driver <down_after_step> <slice> <up> key=value ...` where `<up>` is
`never`, a number of seconds after the slice went down, or `step:N` (once step N has completed again).
The slice health is a `StaticSliceHealth` the driver flips from a watcher thread (no cluster involved);
the trainer, pathwaysutils' retry loop and Orbax are the real ones. The last line printed is
`DRIVER_RESULT <json>`.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from local.workloads.config import TrainConfig, parse_args
from local.workloads.logs import configure_logging
from local.workloads.train import ensure_host_devices


def main() -> int:
    down_after, slice_index, up_after = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    config = parse_args(TrainConfig, sys.argv[4:])
    configure_logging()
    ensure_host_devices(config.device_count)
    from local.workloads.slices import StaticSliceHealth
    from local.workloads.trainer import Trainer

    health = StaticSliceHealth(config.num_slices)
    trainer = Trainer(config, health)

    def inject() -> None:
        while (trainer.last_completed_step or -1) < down_after:
            time.sleep(0.005)
        health.set_down(slice_index)
        if up_after.startswith("step:"):
            up_step = int(up_after.removeprefix("step:"))
            while trainer.attempts < 2 or (trainer.last_completed_step or -1) < up_step:
                time.sleep(0.005)
            health.set_up(slice_index)
        elif up_after != "never":
            time.sleep(float(up_after))
            health.set_up(slice_index)

    threading.Thread(target=inject, daemon=True).start()
    code = trainer.run()
    result = {
        "code": code,
        "attempts": trainer.attempts,
        "last_step": trainer.last_completed_step,
        "records": trainer.recovery_log.read(),
    }
    print("DRIVER_RESULT " + json.dumps(result), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
