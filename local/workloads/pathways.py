"""`python -m elastic_training.local.workloads.pathways {server,proxy} --flag=value ...`: the Pathways server and
proxy stand-ins.

The image catalogue (local/nodeagent/images.py) runs this for Google's Pathways images with the flags the
manifest gives them. The flags are those xpk renders (AI-Hypercomputer/xpk
`src/xpk/templates/pathways_workload_create.yaml.j2` at 367c838) and google/pathways-job's controller adds
(`internal/controller/pathwaysjob_controller.go` at c0cc759, `--enable_metrics_collection`):

- server, `--node_type=resource_manager` (the head's `pathways-rm` sidecar): `--server_port`,
  `--gcs_scratch_location`, `--node_type`, `--instance_count` and `--instance_type` (both required),
  `--enable_metrics_collection`;
- server, worker (the default node type; a `worker` pod, one per TPU VM): `--server_port`,
  `--resource_manager_address` (required), `--gcs_scratch_location`, `--enable_metrics_collection`;
- proxy (the head's `pathways-proxy` sidecar): `--server_port`, `--resource_manager_address` (required),
  `--gcs_scratch_location`, `--num_elastic_slices`, `--enable_metrics_collection`.

The servers are C++ programs with absl flags: an unknown flag stops them at start with `ERROR: Unknown
command line flag '<name>'` and exit 1 (abseil-cpp `absl/flags/parse.cc`), and so does this stand-in. A
malformed value of a known flag exits 1 naming the flag.

What each role does here, and what killing it does (the effect it has on GKE):
- **worker**: holds its TPU VM (host) up until SIGTERM, and dies by it (exit 143, as a C++ server does: with
  no handler of its own SIGTERM's default action ends it, and absl's failure signal handler re-raises it). Exit 0
  would tell an Indexed Job that the index completed: an evicted worker's slice would never re-form. It imports
  nothing heavy: a v5e-16 run has 4 of these per slice. Killed, its pod's container exits non-zero and restarts
  (`restartPolicy: OnFailure`), so the slice's incarnation changes: for the trainer that slice is lost (a
  `DATA_LOSS` from the step, as when the resource manager loses a host), and the Job's `backoffLimit` spends one.
  `LOCAL_FAULT_HOLD_FILE` (env, local-only fault knob): while that file exists the worker exits 3 at start,
  so a slice stays down.
- **resource manager** and **proxy**: hold until SIGTERM, and die by it as the worker does. On Pathways the
  trainer's JAX client talks to the proxy, which holds the session with the resource manager; when either
  restarts, the client's backend and every array on it are gone and the program fails (Google documents that a
  Pathways head failure restarts the whole workload through the JobSet's policy, "Resilient training with
  Pathways"). The local trainer models that: it watches its own pod's sidecars and exits 1 with `UNAVAILABLE`
  when one of them restarted (local/workloads/pathways_session.py), so the head Job (backoffLimit 0) fails and
  the JobSet's failure policy decides (a JobSet restart, or the operator's full restart).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

EXIT_FLAGS = 1
EXIT_HELD = 3
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
HOLD_FILE_ENV: Final = "LOCAL_FAULT_HOLD_FILE"

ROLE_SERVER: Final = "server"
ROLE_PROXY: Final = "proxy"
NODE_RESOURCE_MANAGER: Final = "resource_manager"
NODE_WORKER: Final = "worker"


class FlagError(ValueError):
    """A flag is unknown, malformed or missing (the server exits 1 at start)."""


def _int(value: str) -> int:
    return int(value, 10)


def _bool(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("true", "t", "1", "yes", "y"):
        return True
    if lowered in ("false", "f", "0", "no", "n"):
        return False
    raise ValueError(value)


def _str(value: str) -> str:
    return value


_KNOWN: Final[Mapping[str, Mapping[str, Callable[[str], object]]]] = {
    ROLE_SERVER: {
        "server_port": _int,
        "resource_manager_address": _str,
        "gcs_scratch_location": _str,
        "node_type": _str,
        "instance_count": _int,
        "instance_type": _str,
        "enable_metrics_collection": _bool,
    },
    ROLE_PROXY: {
        "server_port": _int,
        "resource_manager_address": _str,
        "gcs_scratch_location": _str,
        "num_elastic_slices": _int,
        "enable_metrics_collection": _bool,
    },
}


@dataclass(frozen=True)
class Flags:
    """The parsed flags of one server or proxy."""

    role: str
    values: Mapping[str, object]

    @property
    def node_type(self) -> str:
        """`resource_manager` or `worker` (the server's default); `proxy` for the proxy."""
        if self.role == ROLE_PROXY:
            return ROLE_PROXY
        return str(self.values.get("node_type", NODE_WORKER))


def parse_flags(role: str, argv: Sequence[str]) -> Flags:
    """absl-style `--name=value` (or `--name value`, `--bool`/`--nobool`); `FlagError` as the server fails."""
    known = _KNOWN[role]
    values: dict[str, object] = {}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if not arg.startswith("-") or arg in ("-", "--"):
            raise FlagError(f"ERROR: positional argument {arg!r} is not accepted")
        name, sep, value = arg.lstrip("-").partition("=")
        convert = known.get(name)
        if convert is None and not sep and name.startswith("no") and known.get(name[2:]) is _bool:
            values[name[2:]] = False
            continue
        if convert is None:
            raise FlagError(f"ERROR: Unknown command line flag '{name}'")
        if not sep:
            if convert is _bool:
                values[name] = True
                continue
            if not args:
                raise FlagError(f"ERROR: Missing the value for the flag '{name}'")
            value = args.pop(0)
        try:
            values[name] = convert(value)
        except ValueError:
            raise FlagError(f"ERROR: Illegal value '{value}' specified for flag '{name}'") from None
    flags = Flags(role, values)
    _check_role(flags)
    return flags


def _check_role(flags: Flags) -> None:
    node = flags.node_type
    if flags.role == ROLE_SERVER and node not in (NODE_RESOURCE_MANAGER, NODE_WORKER):
        raise FlagError(f"ERROR: Illegal value '{node}' specified for flag 'node_type'")
    required = {
        NODE_RESOURCE_MANAGER: ("instance_count", "instance_type"),
        NODE_WORKER: ("resource_manager_address",),
        ROLE_PROXY: ("resource_manager_address",),
    }[node]
    for name in required:
        if name not in flags.values:
            raise FlagError(f"ERROR: --{name} is required for a {node}")
    count = flags.values.get("instance_count")
    if isinstance(count, int) and count < 1:
        raise FlagError(f"ERROR: Illegal value '{count}' specified for flag 'instance_count'")


def _say(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags, then hold the role until SIGTERM."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in _KNOWN:
        print(
            f"usage: python -m elastic_training.local.workloads.pathways {{{','.join(_KNOWN)}}} --flag=value ...",
            file=sys.stderr,
        )
        return EXIT_FLAGS
    role, rest = args[0], args[1:]
    try:
        flags = parse_flags(role, rest)
    except FlagError as error:
        print(str(error), file=sys.stderr, flush=True)
        return EXIT_FLAGS
    pod = os.environ.get("LOCAL_POD_NAME") or os.environ.get("HOSTNAME", "?")
    node = flags.node_type
    hold = os.environ.get(HOLD_FILE_ENV, "")
    if node == NODE_WORKER and hold and os.path.exists(hold):
        _say(f"Pathways worker {pod}: held down by {hold}, exiting {EXIT_HELD}")
        return EXIT_HELD
    # Blocked before the role is said to be up, and taken by sigwait: a handler setting an Event could deadlock on
    # the Event's lock, which the main thread holds for a moment each time it enters its wait.
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        shown = " ".join(f"--{k}={v}" for k, v in flags.values.items())
        _say(f"Pathways {node} {pod}: up ({shown})")
        signum = signal.sigwait(STOP_SIGNALS)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)  # a caller in-process keeps its own mask
    _say(f"Pathways {node} {pod}: received {signal.Signals(signum).name}, exiting")
    if signum == signal.SIGTERM:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        os.kill(os.getpid(), signal.SIGTERM)  # ends the process here: exit 143, as the server's own
    return 0


if __name__ == "__main__":
    sys.exit(main())
