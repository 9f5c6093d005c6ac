"""What the MaxText image's `python3 -m maxtext.trainers.pre_train.train <config.yml> key=value ...` runs locally.

The image catalogue (local/nodeagent/images.py) maps that command here with its arguments unchanged. The
command line is read as MaxText reads it (local/workloads/maxtext_config.py: every MaxText key accepted,
unknown keys refused with MaxText's message, a traceback and exit code 1); the slice count and hosts per slice come from
Pathways' view of the allocation, read from the JobSet the trainer runs in (local/workloads/
pathways_session.py), never from a local key. Then the local trainer (local/workloads/train.py) runs.

The manifest sets `JAX_PLATFORMS=proxy` (Pathways' client backend); the local stand-in of the proxy is the
host's CPU devices, so JAX runs on `cpu` here.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from elastic_training.local.workloads.config import TrainConfig
from elastic_training.local.workloads.logs import configure_logging
from elastic_training.local.workloads.maxtext_config import (
    MaxTextConfigError,
    parse_command_line,
    train_config,
)
from elastic_training.local.workloads.train import run

if TYPE_CHECKING:
    from elastic_training.local.workloads.slices import SliceHealth

_logger = logging.getLogger("maxtext.trainers.pre_train.train")


def _config_error(error: MaxTextConfigError) -> NoReturn:
    """MaxText's `_handle_config_exception`: the message between two rules of `=`, then the error re-raised (a
    traceback and exit `MAXTEXT_EXIT_CONFIG_ERROR`, 1: the trainer's imports load `unittest`, which turns
    MaxText's `sys.exit(2)` off). Not written to /dev/termination-log, as MaxText tries: that is this machine's."""
    if error.unknown_key is not None:
        _logger.warning("Ignoring invalid/unsupported field from YAML/CLI: %r", error.unknown_key)
    _logger.error("=" * 80)
    _logger.error("MAXTEXT CONFIG ERROR: %s", error)
    _logger.error("=" * 80)
    raise ValueError(str(error)) from None


def _why_the_stand_in(argv: Sequence[str]) -> str:
    elastic = any(re.fullmatch(r"elastic_enabled=(?i:true|1|yes)", arg) for arg in argv)
    if elastic:
        return "an elastic run needs the Pathways proxy, which only GKE has"
    return "no real MaxText on this machine (make maxtext builds .venv-maxtext; local/nodeagent/images.py)"


def main(argv: Sequence[str]) -> int:
    """Read MaxText's command line, learn the allocation from the cluster, train."""
    configure_logging()
    _logger.info("Local stand-in of MaxText's trainer (local/workloads/maxtext_train.py): %s", _why_the_stand_in(argv))
    try:
        command = parse_command_line(argv)
    except MaxTextConfigError as error:
        _config_error(error)

    from elastic_training.local.workloads.pathways_session import PathwaysSession, exit_backend_lost

    session = PathwaysSession.from_environment()
    num_slices, hosts = command.num_slices, 1
    if session is not None:
        allocation = session.allocation()
        hosts = allocation.hosts_per_slice
        if num_slices == -1:
            num_slices = allocation.num_slices
        _logger.info(
            "Pathways allocation: %d slices of %d hosts (JobSet %s)", num_slices, hosts, allocation.jobset_name
        )
    elif num_slices == -1:
        num_slices = 1
    try:
        config = train_config(command, os.environ, num_slices)
    except MaxTextConfigError as error:
        _config_error(error)
    for key, value in command.ignored().items():
        _logger.info("MaxText key %s=%s accepted; the local trainer does not model it", key, value)
    os.environ["JAX_PLATFORMS"] = "cpu"

    def health(config: TrainConfig) -> SliceHealth | None:
        from kubernetes import client

        from elastic_training.local.workloads.slices import KubernetesSliceHealth

        if session is None:
            return None
        return KubernetesSliceHealth(
            client.CoreV1Api(session.api_client),
            allocation.namespace,
            allocation.jobset_name,
            config.num_slices,
            hosts_per_slice=hosts,
        )

    if session is not None:
        session.watch_sidecars(exit_backend_lost)
    try:
        return run(config, health)
    finally:
        if session is not None:
            session.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
