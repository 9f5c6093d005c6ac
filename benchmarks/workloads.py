"""Workloads benchmark: step time at the demo size, and kill-to-next-step time split into phases.

    .venv/bin/python -m benchmarks.workloads [--kills 3] [--steps 200]

1. Step time: `python -m elastic_training.local.workloads.train` at the default (demo) size on 1 and 2 slices (1 CPU
   device each); the first step (compilation) is reported apart from the median of the others.
2. Kill to next step: on the upstream local cluster (``v5e-small``; the real Job and JobSet controllers), a
   Pathways-shaped JobSet (trainer head + 2 worker slices, pause-resume); a worker pod is force-deleted mid-run
   (``--grace-period=0 --force``: the Job controller counts it failed and replaces it) and the phases come from the
   trainer's recovery record: kill -> failure detected -> slices ready -> restore started -> restore finished ->
   first step after recovery completed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from elastic_training.operators.constants import COMPLETED_STEP_RE

REPO = Path(__file__).resolve().parents[1]


def step_times(slices: int, steps: int, workdir: Path) -> dict[str, float]:
    """First-step and median later-step seconds of one trainer run."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    args = [f"base_output_directory={workdir}", f"run_name=steps-{slices}", f"steps={steps}", f"num_slices={slices}"]
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "elastic_training.local.workloads.train", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.monotonic() - started
    seconds = [float(m[2]) for m in COMPLETED_STEP_RE.finditer(result.stdout)]
    later = seconds[1:]
    return {
        "slices": slices,
        "first_step_s": seconds[0],
        "median_step_ms": 1000 * statistics.median(later),
        "p90_step_ms": 1000 * sorted(later)[int(0.9 * (len(later) - 1))],
        "process_wall_s": wall,
    }


def kill_to_next_step(runs: int, workdir: Path) -> list[dict[str, Any]]:
    """Recovery records of `runs` slice kills on the local cluster, each with the kill time added."""
    from elastic_training.local.upstream_cluster import UpstreamCluster
    from elastic_training.local.workloads.drill import DrillPlan, SliceKillDrill

    results = []
    with UpstreamCluster(workdir / "cluster", description="v5e-small") as cluster, SliceKillDrill(cluster) as drill:
        for run in range(runs):
            plan = DrillPlan(
                name=f"bench-{run}",
                base_output_directory=workdir,
                train_keys=[
                    "steps=100000",
                    "checkpoint_period=20",
                    "num_slices=2",
                    "elastic_enabled=true",
                    "enable_single_controller=true",
                    "elastic_poll_interval_seconds=0.1",
                ],
                kill_slice=1,
                kill_after_step=50,
                until="recovered",
                timeout=120,
            )
            seen = drill.run(plan)
            drill.delete(plan.name)
            results.append({**seen.records[0], "killed_at": seen.killed_at})
    return results


def phases(record: dict[str, Any]) -> dict[str, float]:
    """Seconds of each phase from the kill to the first completed step after recovery."""
    points = [
        ("detect", "killed_at", "failure_detected_at"),
        ("wait_for_slices", "failure_detected_at", "slices_ready_at"),
        ("prepare_restore", "slices_ready_at", "restore_started_at"),
        ("restore", "restore_started_at", "restore_finished_at"),
        ("first_step", "restore_finished_at", "first_step_completed_at"),
        ("total", "killed_at", "first_step_completed_at"),
    ]
    return {label: record[end] - record[start] for label, start, end in points}


def main() -> int:
    """Run both parts and print markdown tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-workloads-") as tmp:
        workdir = Path(tmp)
        print("| slices | first step (compile) s | median step ms | p90 step ms | process wall s |")
        print("|---|---|---|---|---|")
        for slices in (1, 2):
            row = step_times(slices, args.steps, workdir)
            print(
                f"| {slices} | {row['first_step_s']:.2f} | {row['median_step_ms']:.1f} | "
                f"{row['p90_step_ms']:.1f} | {row['process_wall_s']:.1f} |"
            )
        records = kill_to_next_step(args.kills, workdir)
    table = [phases(r) for r in records]
    print()
    print("| phase | " + " | ".join(f"run {i + 1} s" for i in range(len(table))) + " | median s |")
    print("|---|" + "---|" * (len(table) + 1))
    for label in table[0]:
        values = [row[label] for row in table]
        cells = " | ".join(f"{v:.3f}" for v in values)
        print(f"| {label} | {cells} | {statistics.median(values):.3f} |")
    print()
    for record in records:
        print(
            f"run {record['run_name']}: step at failure {record['step_at_failure']}, restored "
            f"{record['step_restored']}, steps lost {record['steps_lost']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
