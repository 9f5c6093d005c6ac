"""The TPU v5e runner: it refuses without a TPU, and what it recorded on one reads as RESULTS.md says.

The measurements themselves need the chip (benchmarks/RESULTS.md, "TPU v5e"); here, the refusal, the records
committed from the device, and the operator's reading of the log lines the stand-in trainer wrote there
(``data/tpu_v5e_trainer.log``, run 1 of 2026-12-06, unedited).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from benchmarks.tpu_v5e import markdown, spread, summarize
from elastic_training.operators.recovery import LogDigest

REPO = Path(__file__).resolve().parents[2]
TPU_LOG = Path(__file__).parent / "data" / "tpu_v5e_trainer.log"
RUNS = [REPO / "benchmarks" / f"tpu-v5e-2026-12-06-run{n}.json" for n in (1, 2)]


def test_refuses_clearly_without_a_tpu(tmp_path: Path) -> None:
    out = tmp_path / "records"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.tpu_v5e", "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "JAX sees no TPU, only cpu" in done.stderr
    assert "run it on a TPU host" in done.stderr
    assert not out.exists()  # nothing written before the refusal


def _timed(path: Path) -> list[tuple[float, str]]:
    """The log's lines with their absl time (``I1206 08:04:28.208000 ...``) as seconds of 2026."""
    lines = []
    for line in path.read_text().splitlines():
        stamp = datetime.strptime("2026" + line[1:21], "%Y%m%d %H:%M:%S.%f")
        lines.append((stamp.timestamp(), line))
    return lines


def test_the_operator_reads_the_tpu_lines() -> None:
    digest = LogDigest().feed_all(_timed(TPU_LOG))
    assert digest.latest_step == 22
    assert digest.steps_executed == 38
    assert digest.restores == 9
    assert [r.restored_step for r in digest.recoveries] == [11, 13, 15, 15, 15, 15, 17, 19, 21]
    assert all(r.complete for r in digest.recoveries)
    # ~52 ms steps: the mean the goodput uses leaves each first step after a restore out
    assert 0.050 < digest.step_seconds_total / digest.steps_executed < 0.060


def test_the_restore_read_lands_in_the_operators_first_step_phase() -> None:
    """MaxText (and the stand-in) log ``restoring from this run's directory step N`` before reading; nothing marks
    the end of the read. So at 6 GB the operator's ``restore`` phase is ~10 ms and its ``first_step`` holds the
    13-15 s read (docs/operations.md says so)."""
    for recovery in LogDigest().feed_all(_timed(TPU_LOG)).recoveries:
        phases = recovery.phases()
        assert phases["restore"] is not None and phases["restore"] < 0.1
        assert phases["first_step"] is not None and 12.0 < phases["first_step"] < 20.0


@pytest.mark.parametrize("path", RUNS, ids=["run1", "run2"])
def test_records_hold_what_results_md_shows(path: Path) -> None:
    results = json.loads(path.read_text())
    assert results["environment"]["device_kind"] == "TPU v5 lite"
    assert results["model"]["parameters"] == 508_486_656
    summary = summarize(results)
    pathways = summary["formats"]["pathways"]
    assert pathways["save_committed"]["n"] == 3 and pathways["restore"]["n"] == 6
    assert 12.0 < pathways["restore"]["median"] < 15.0
    assert pathways["restore_over_validate_default"] > 100
    assert "| restore to HBM |" in markdown({**results, "summary": summary})


def test_spread() -> None:
    assert spread([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert spread([]) == {"n": 0}
