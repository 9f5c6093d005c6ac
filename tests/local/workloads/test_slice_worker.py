"""`python -m elastic_training.local.workloads.slice_worker`: holds its slice up until stopped, exits 0 on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from elastic_training.local.workloads.slice_worker import EXIT_HELD
from tests.support.workload_processes import run_module, start_module


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stays_up_until_stopped_then_exits_0(signum: signal.Signals) -> None:
    process = start_module("elastic_training.local.workloads.slice_worker", [], POD_NAME="js-worker-1-0")
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert "Slice worker js-worker-1-0: slice up at" in first
        # Up and staying up: nothing is left to do but wait for a signal.
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=1.0)
        process.send_signal(signum)
        rest, _ = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0
    assert f"received {signum.name}, exiting" in rest


def test_a_hold_file_keeps_the_slice_down(tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    hold.touch()
    held = run_module("elastic_training.local.workloads.slice_worker", ["--hold-file", str(hold)])
    assert held.returncode == EXIT_HELD and "held down by" in held.stdout
    hold.unlink()
    process = start_module("elastic_training.local.workloads.slice_worker", ["--hold-file", str(hold)])
    try:
        assert process.stdout is not None
        assert "slice up at" in process.stdout.readline()
        process.terminate()
        process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0
