"""`python -m elastic_training.local.workloads.train [config.yml] key=value ...`: the MaxText pre-training stand-in.

Exit codes: 0 when training reached `steps` (or stopped on SIGTERM, as MaxText does), 1 when elastic
recovery ran out of attempts or timed out waiting for slices, 2 for an invalid configuration.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from elastic_training.local.workloads.compilation_cache import use_compilation_cache
from elastic_training.local.workloads.config import TrainConfig, parse_args, run_main
from elastic_training.local.workloads.logs import configure_logging

if TYPE_CHECKING:  # slices imports the kubernetes client; the trainer imports JAX only after the device count
    from elastic_training.local.workloads.slices import SliceHealth

_logger = logging.getLogger("elastic_training.local.workloads.train")

_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def ensure_host_devices(count: int) -> None:
    """Ask XLA for `count` host CPU devices unless XLA_FLAGS already sets a count (must precede JAX)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if not re.search(rf"{_DEVICE_COUNT_FLAG}=\d+", flags):
        os.environ["XLA_FLAGS"] = f"{flags} {_DEVICE_COUNT_FLAG}={count}".strip()


def main(argv: Sequence[str]) -> int:
    """Parse, log the config, train."""
    config = parse_args(TrainConfig, argv)
    configure_logging()
    return run(config)


def run(config: TrainConfig, health_factory: Callable[[TrainConfig], SliceHealth | None] | None = None) -> int:
    """Log the config and train; slice health from `health_factory`, else from `JOBSET_NAME`'s workers."""
    ensure_host_devices(config.device_count)
    for field in dataclasses.fields(config):
        _logger.info("Config param %s: %s", field.name, getattr(config, field.name))
    _logger.info("Config param checkpoint_dir: %s/", config.checkpoint_directory)

    # JAX (and everything that imports it) only now, after the device count is settled.
    use_compilation_cache(config.jax_cache_dir)
    from elastic_training.local.workloads.slices import KubernetesSliceHealth, StaticSliceHealth
    from elastic_training.local.workloads.trainer import Trainer

    health: SliceHealth | None = None
    if config.elastic_enabled:
        if health_factory is not None:
            health = health_factory(config)
        else:
            health = KubernetesSliceHealth.from_environment(config.num_slices)
            if health is not None:
                _logger.info("Slice health from the worker pods of JobSet %s", os.environ.get("JOBSET_NAME"))
    if health is None:
        health = StaticSliceHealth(config.num_slices)
    try:
        trainer = Trainer(config, health)
        signal.signal(signal.SIGTERM, trainer.request_stop)
        return trainer.run()
    finally:
        health.close()


if __name__ == "__main__":
    sys.exit(run_main(main))
