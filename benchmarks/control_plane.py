"""The upstream control plane's start, memory and stop.

    python -m benchmarks.control_plane --repeat 3 [--description v5e-small] [--out control-plane.json]

Each repeat starts :class:`UpstreamCluster` (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, JobSet,
Kueue, the node agent with the description's nodes, the fault proxy) with its binaries already built, reads the
resident memory of every process it runs, and stops it. Prints one JSON document: per-run seconds and MiB, medians,
and the machine's load average before and after. The build itself is timed by ``make control-plane``
(docs/local-cluster.md). The Python imitation this was once compared with is gone; its figures stay in
benchmarks/RESULTS.md as history.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from elastic_training.local.controlplane import binaries
from elastic_training.local.upstream_cluster import UpstreamCluster

MIB = 1024 * 1024


def _rss(pids: list[int]) -> dict[str, float]:
    """Resident MiB by process name (a process's children counted with it)."""
    found: dict[str, float] = {}
    for pid in pids:
        try:
            process = psutil.Process(pid)
            family = [process, *process.children(recursive=True)]
            found[process.name()] = sum(p.memory_info().rss for p in family) / MIB
        except psutil.NoSuchProcess:
            continue
    return found


def upstream_once(root: Path, description: str) -> dict[str, Any]:
    started = time.monotonic()
    cluster = UpstreamCluster(root, description=description)
    cluster.start()
    start_seconds = time.monotonic() - started
    pids = [c.pid for c in cluster.control_plane.components.values() if c.pid]
    memory = _rss(pids)
    memory["python (node agent, fault proxy)"] = psutil.Process().memory_info().rss / MIB
    stopping = time.monotonic()
    cluster.stop()
    left = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    return {
        "start_s": start_seconds,
        "steps_s": cluster.timings,
        "stop_s": time.monotonic() - stopping,
        "rss_mib": memory,
        "rss_total_mib": sum(memory.values()),
        "processes_left": len(left),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--description", default="v5e-small")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    built = binaries.installed()
    if built is None:
        print("error: the control plane is not built: run `make control-plane` first", file=sys.stderr)
        return 2
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-control-plane-") as tmp:
        upstream = [upstream_once(Path(tmp) / f"u{i}", args.description) for i in range(args.repeat)]
    median = {
        "upstream_start_s": statistics.median(r["start_s"] for r in upstream),
        "upstream_stop_s": statistics.median(r["stop_s"] for r in upstream),
        "upstream_rss_total_mib": statistics.median(r["rss_total_mib"] for r in upstream),
    }
    report = {
        "description": args.description,
        "repeat": args.repeat,
        "versions": built.versions,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "median": median,
        "upstream": upstream,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
