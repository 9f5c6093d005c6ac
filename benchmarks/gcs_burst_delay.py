"""How long a burst of GCS 503s delays an Orbax save that rides it out, against a clean save in the same run.

    .venv/bin/python -m benchmarks.gcs_burst_delay --counts 2,5 --repeat 1

The stand-in trainer's checkpoint manager (`local/workloads/checkpointing.py`, as MaxText configures Orbax on
Pathways: async, zarr3, no OCDBT, commit-file atomicity) saves a small state to the GCS emulator through the
tests' 503 proxy (`tests/support/gcs_emulator.py`): gcsfs writes the metadata and commit marker, tensorstore the
arrays. Each save of a burst arms ``fail_next(n)`` at an offset into the save (0-0.8 s: early requests, the arrays,
the commit), so the burst meets whichever request comes then; the clean saves arm nothing. Every save must
commit: a burst of at most 5 fails no save (gcsfs tries a request 6 times, tensorstore 32). What it costs is the
backoff of the request it hit: 1+2+4+8+16 s and jitter for five in a row.

The chaos matrix's schedule (`benchmarks/chaos_schedule.py`, ``GCS_BURST_DELAY_SEEN_SECONDS``) uses this to say
when a burst may delay a save past the stall timeout. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

os.environ.setdefault("JAX_PLATFORMS", "cpu")

OFFSETS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.6, 0.8)


@dataclass(frozen=True)
class Save:
    """One timed save: the burst armed (0 for none), when into the save, how long until it committed."""

    count: int
    offset: float
    seconds: float
    failed: int  # the 503s the proxy answered during this save


class BurstProxy(Protocol):
    """The part of the tests' `FlakyProxy` a burst needs."""

    failed: int

    def fail_next(self, n: int) -> None: ...

    def clear(self) -> None: ...


@contextmanager
def _proxied_bucket() -> Iterator[tuple[str, BurstProxy]]:
    """A bucket on a new emulator, the client libraries pointed at it through a new 503 proxy."""
    from tests.support.gcs_emulator import FlakyProxy, start_emulator

    emulator = start_emulator()
    proxy = FlakyProxy(emulator.endpoint)
    saved = dict(os.environ)
    try:
        bucket = emulator.create_bucket(f"burst-{os.getpid()}")
        os.environ.update(emulator.env)
        os.environ["STORAGE_EMULATOR_HOST"] = proxy.endpoint
        os.environ["TENSORSTORE_GCS_HTTP_URL"] = proxy.endpoint
        yield bucket, proxy
    finally:
        os.environ.clear()
        os.environ.update(saved)
        proxy.close()
        emulator.stop()


def measure(bucket: str, proxy: BurstProxy, counts: Sequence[int], offsets: Sequence[float], repeat: int) -> list[Save]:
    """Time ``repeat`` saves per (count, offset), clean saves (count 0) as many, interleaved, under ``bucket``, the
    clients already pointed at ``proxy``."""
    import numpy as np

    from elastic_training.local.workloads.checkpointing import create_manager, latest_committed_step, save_checkpoint

    state = {"w": np.ones((256, 256), np.float32), "b": np.zeros((256,), np.float32)}
    state["layers"] = [np.ones((64, 64), np.float32) for _ in range(6)]
    saves: list[Save] = []
    directory = f"{bucket}/checkpoints"
    manager = create_manager(directory, use_ocdbt=False, use_zarr3=True)
    step = 0
    try:
        for _ in range(repeat):
            for count in counts:
                for offset in offsets:
                    step += 1
                    before = proxy.failed
                    timer = threading.Timer(offset, proxy.fail_next, (count,))
                    start = time.monotonic()
                    if count:
                        timer.start()
                    save_checkpoint(manager, step, state, async_checkpointing=True, force=True)
                    manager.wait_until_finished()
                    seconds = time.monotonic() - start
                    timer.cancel()
                    proxy.clear()
                    saves.append(Save(count, offset, seconds, proxy.failed - before))
                    print(f"[burst] {count} x 503 at +{offset:.2f} s: {seconds:.1f} s", flush=True)
    finally:
        manager.close()
    committed = latest_committed_step(directory)
    if committed != step:
        raise RuntimeError(f"the last save did not commit: newest committed step {committed}, saved {step}")
    return saves


def table(saves: Sequence[Save]) -> str:
    """Median and worst per burst size, each as a ratio to the clean saves' median of the same run."""
    clean = statistics.median(s.seconds for s in saves if s.count == 0)
    rows = [
        "| 503s in a row | saves | median s | worst s | worst / clean median | 503s answered |",
        "|---|---|---|---|---|---|",
    ]
    for count in sorted({s.count for s in saves}):
        these = [s for s in saves if s.count == count]
        worst = max(s.seconds for s in these)
        rows.append(
            f"| {count or 'none (baseline)'} | {len(these)} | {statistics.median(s.seconds for s in these):.1f} | "
            f"{worst:.1f} | {worst / clean:.0f}x | {sum(s.failed for s in these)} |"
        )
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="2,5", help="burst sizes (comma-separated); 0, the clean save, is added")
    parser.add_argument("--repeat", type=int, default=1, help="saves per burst size and offset")
    args = parser.parse_args(argv)
    counts = [0, *sorted({int(c) for c in args.counts.split(",") if int(c) > 0})]
    with _proxied_bucket() as (bucket, proxy):
        print(table(measure(bucket, proxy, counts, OFFSETS, args.repeat)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
