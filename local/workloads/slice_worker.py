"""`python -m elastic_training.local.workloads.slice_worker`: what a `worker` pod runs in place of a Pathways TPU
worker.

It holds its slice up: it stays alive (and so its pod Running) until SIGTERM or SIGINT, then exits 0.
`--hold-file PATH` is a fault-injection knob: while PATH exists the worker exits 3 at once, so a replaced
pod cannot bring its slice back (a slice that stays lost, as in replica-resize drills).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Sequence

EXIT_HELD = 3
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def main(argv: Sequence[str] | None = None) -> int:
    """Run until stopped."""
    parser = argparse.ArgumentParser(
        prog="python -m elastic_training.local.workloads.slice_worker", description=__doc__
    )
    parser.add_argument("--hold-file", default="", help="exit 3 at start while this file exists")
    args = parser.parse_args(argv)
    pod = os.environ.get("POD_NAME", "?")
    if args.hold_file and os.path.exists(args.hold_file):
        print(f"Slice worker {pod}: held down by {args.hold_file}, exiting {EXIT_HELD}", flush=True)
        return EXIT_HELD
    # Blocked before the slice is said to be up, and taken by sigwait: a handler setting an Event could deadlock on
    # the Event's lock, which the main thread holds for a moment each time it enters its wait.
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        print(f"Slice worker {pod}: slice up at {time.strftime('%Y-%m-%dT%H:%M:%S')}", flush=True)
        signum = signal.sigwait(STOP_SIGNALS)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)  # a caller in-process keeps its own mask
    print(f"Slice worker {pod}: received {signal.Signals(signum).name}, exiting", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
