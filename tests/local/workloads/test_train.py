"""The trainer as a process: loss goes down, MaxText's layout and log lines, resume after kill -9."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from local.workloads.trainer import KILL_AFTER_SAVE_ENV
from operators.constants import (
    ASYNC_SAVE_STARTED_RE,
    COMMIT_SUCCESS_FILE,
    COMPLETED_STEP_RE,
    NO_CHECKPOINT_RE,
    RESTORING_STEP_RE,
    TRAINING_STOPPED_RE,
)
from tests.local.workloads.conftest import run_module, start_module


def _committed(checkpoints: Path) -> list[int]:
    return sorted(int(p.name) for p in checkpoints.iterdir() if (p / COMMIT_SUCCESS_FILE).exists())


def _steps(text: str) -> list[int]:
    return [int(m[1]) for m in COMPLETED_STEP_RE.finditer(text)]


def _losses(text: str) -> list[float]:
    return [float(line.rsplit("loss: ", 1)[1]) for line in text.splitlines() if COMPLETED_STEP_RE.search(line)]


def _read_until(process: subprocess.Popen[str], step: int) -> str:
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        seen.append(line)
        match = COMPLETED_STEP_RE.search(line)
        if match and int(match[1]) >= step:
            return "".join(seen)
    output = "".join(seen)
    raise AssertionError(f"trainer ended before step {step}:\n{output}")


def test_trains_on_two_slices_saves_like_maxtext_and_resumes(tmp_path: Path) -> None:
    args = [f"base_output_directory={tmp_path}", "run_name=demo", "steps=40", "checkpoint_period=10", "num_slices=2"]
    first = run_module("local.workloads.train", args)
    assert first.returncode == 0, first.stdout + first.stderr
    assert _steps(first.stdout) == list(range(40))
    losses = _losses(first.stdout)
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 1.0
    assert NO_CHECKPOINT_RE.search(first.stdout)
    assert [int(m[1]) for m in ASYNC_SAVE_STARTED_RE.finditer(first.stdout)] == [0, 10, 20, 30, 39]
    checkpoints = tmp_path / "demo" / "checkpoints"
    assert _committed(checkpoints) == [0, 10, 20, 30, 39]
    assert (checkpoints / "39" / "items" / COMMIT_SUCCESS_FILE).exists()

    again = run_module("local.workloads.train", [*args, "steps=45"])
    assert again.returncode == 0, again.stdout + again.stderr
    assert RESTORING_STEP_RE.search(again.stdout)[1] == "39"  # type: ignore[index]
    assert _steps(again.stdout) == [40, 41, 42, 43, 44]


def test_resume_after_kill_9_uses_only_committed_steps(tmp_path: Path, small_model: list[str]) -> None:
    args = [f"base_output_directory={tmp_path}", "run_name=k", "checkpoint_period=10", *small_model]
    process = start_module("local.workloads.train", [*args, "steps=100000"])
    try:
        _read_until(process, 45)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        process.kill()
    checkpoints = tmp_path / "k" / "checkpoints"
    committed = _committed(checkpoints)
    assert committed and max(committed) >= 45 - 2 * 10  # at most one period plus the save in flight lost

    resumed = run_module("local.workloads.train", [*args, "steps=60"])
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    restored = int(RESTORING_STEP_RE.search(resumed.stdout)[1])  # type: ignore[index]
    assert restored == max(committed)
    assert _steps(resumed.stdout)[0] == restored + 1
    assert 59 in _committed(checkpoints)


def test_crash_during_async_save_leaves_that_step_unused(tmp_path: Path, small_model: list[str]) -> None:
    args = [f"base_output_directory={tmp_path}", "run_name=c", "steps=30", "checkpoint_period=10", *small_model]
    crashed = run_module("local.workloads.train", args, **{KILL_AFTER_SAVE_ENV: "20"})
    assert crashed.returncode == -signal.SIGKILL
    checkpoints = tmp_path / "c" / "checkpoints"
    assert _committed(checkpoints) == [0, 10]
    assert ASYNC_SAVE_STARTED_RE.findall(crashed.stdout) == ["0", "10", "20"]

    resumed = run_module("local.workloads.train", args)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert RESTORING_STEP_RE.search(resumed.stdout)[1] == "10"  # type: ignore[index]
    assert _committed(checkpoints) == [0, 10, 20, 29]


def test_sigterm_stops_training_and_exits_0(tmp_path: Path, small_model: list[str]) -> None:
    args = [f"base_output_directory={tmp_path}", "run_name=t", "steps=100000", *small_model]
    process = start_module("local.workloads.train", args)
    try:
        _read_until(process, 5)
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0
    assert TRAINING_STOPPED_RE.search(rest)[1] == "Job received termination signal (SIGTERM)."  # type: ignore[index]


@pytest.mark.parametrize("keys", [["enable_checkpointing=false"]])
def test_runs_without_checkpointing(keys: list[str], small_model: list[str]) -> None:
    result = run_module("local.workloads.train", ["run_name=n", "steps=3", *keys, *small_model])
    assert result.returncode == 0, result.stdout + result.stderr
    assert _steps(result.stdout) == [0, 1, 2]
