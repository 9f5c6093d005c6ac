"""The trainer as a process: loss goes down, MaxText's layout and log lines, resume after kill -9."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from elastic_training.local.workloads.checkpointing import (
    KILL_DURING_SAVE_ENV,
    KILL_DURING_SAVE_ONCE_ENV,
    KILL_DURING_SAVE_OR_LATER_ENV,
)
from elastic_training.operators.checkpoints import Problem, validate_checkpoints
from elastic_training.operators.constants import (
    ASYNC_SAVE_STARTED_RE,
    COMMIT_SUCCESS_FILE,
    COMPLETED_STEP_RE,
    NO_CHECKPOINT_RE,
    RESTORING_STEP_RE,
    SAVED_CHECKPOINT_RE,
    TRAINING_STOPPED_RE,
)
from tests.support.workload_processes import run_module, start_module

# Each test runs the trainer's entry point as a process (JAX start, compile, training): make test, not test-fast.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]  # several runs each, on a loaded box


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
    first = run_module("elastic_training.local.workloads.train", args)
    assert first.returncode == 0, first.stdout + first.stderr
    assert _steps(first.stdout) == list(range(40))
    losses = _losses(first.stdout)
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 1.0
    assert NO_CHECKPOINT_RE.search(first.stdout)
    assert [int(m[1]) for m in ASYNC_SAVE_STARTED_RE.finditer(first.stdout)] == [0, 10, 20, 30, 39]
    checkpoints = tmp_path / "demo" / "checkpoints"
    assert _committed(checkpoints) == [0, 10, 20, 30, 39]
    assert (checkpoints / "39" / "items" / COMMIT_SUCCESS_FILE).exists()

    again = run_module("elastic_training.local.workloads.train", [*args, "steps=45"])
    assert again.returncode == 0, again.stdout + again.stderr
    assert RESTORING_STEP_RE.search(again.stdout)[1] == "39"  # type: ignore[index]
    assert _steps(again.stdout) == [40, 41, 42, 43, 44]


def _assert_all_valid(run: Path, steps: list[int]) -> None:
    report = validate_checkpoints(str(run))
    assert report.error is None and report.valid, report.to_json()
    assert [v.step for v in report.steps] == sorted(steps, reverse=True)
    assert all(v.valid for v in report.steps), report.to_json()


def test_resume_after_kill_9_loses_at_most_a_period_plus_the_save_in_flight(
    tmp_path: Path, small_model: list[str]
) -> None:
    period = 10
    args = [f"base_output_directory={tmp_path}", "run_name=k", f"checkpoint_period={period}", *small_model]
    process = start_module("elastic_training.local.workloads.train", [*args, "steps=100000"])
    try:
        head = _read_until(process, 45)
        process.send_signal(signal.SIGKILL)
        rest, _ = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == -signal.SIGKILL
    # Wherever the kill landed (the pipe holds every line): `started` is the newest save the trainer logged as
    # started. Saves run one at a time, and Orbax's `save` of a step first waits for the save before it, so the
    # trainer may have logged steps a period past `started` and be waiting (slow saves on a loaded machine: CI).
    # Only `started` can have been in flight: the newest committed step is it or the one a period before it; a
    # step directory past it is `started`'s, or the next save's once `started` committed.
    output = head + rest
    last = _steps(output)[-1]
    started = int(ASYNC_SAVE_STARTED_RE.findall(output)[-1])
    checkpoints = tmp_path / "k" / "checkpoints"
    committed = _committed(checkpoints)
    assert committed[-1] in (started, started - period), (last, started, committed)
    assert committed == list(range(0, committed[-1] + 1, period))
    assert last - committed[-1] < 3 * period, (last, committed)
    unmarked = sorted(int(p.name) for p in checkpoints.iterdir() if p.name.isdigit() and int(p.name) > committed[-1])
    assert unmarked in ([], [committed[-1] + period]), (started, committed, unmarked)

    resumed = run_module("elastic_training.local.workloads.train", [*args, "steps=60"])
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert RESTORING_STEP_RE.findall(resumed.stdout) == [str(committed[-1])]
    assert _steps(resumed.stdout) == list(range(committed[-1] + 1, 60))
    _assert_all_valid(tmp_path / "k", [*range(0, 60, period), 59])


def test_crash_during_async_save_leaves_that_step_unused_and_fires_once(tmp_path: Path, small_model: list[str]) -> None:
    args = [f"base_output_directory={tmp_path}", "run_name=c", "steps=30", "checkpoint_period=10", *small_model]
    env = {KILL_DURING_SAVE_ENV: "20", KILL_DURING_SAVE_ONCE_ENV: "1"}
    crashed = run_module("elastic_training.local.workloads.train", args, **env)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    assert ASYNC_SAVE_STARTED_RE.findall(crashed.stdout) == ["0", "10", "20"]
    assert f"Fault injection ({KILL_DURING_SAVE_ENV}): killing the process before the commit marker" in crashed.stdout

    # The kill landed mid-save: step 20 holds every array and its item marker, only the step's commit is missing.
    run, checkpoints = tmp_path / "c", tmp_path / "c" / "checkpoints"
    assert _committed(checkpoints) == [0, 10]
    assert (checkpoints / "20" / "items" / COMMIT_SUCCESS_FILE).is_file()
    assert not (checkpoints / "20" / COMMIT_SUCCESS_FILE).exists()
    report = validate_checkpoints(str(run))
    assert report.latest_valid_step == 10
    half, previous = report.verdict(20), report.verdict(10)
    assert half is not None and previous is not None
    assert {f.code for f in half.problems} == {Problem.COMMIT_MARKER_MISSING, Problem.COMMIT_TIMESTAMP_MISSING}
    assert half.items == previous.items  # the same arrays as a committed step
    assert (run / "local-fault-killed-during-save-20").is_file()  # the once marker: the next run saves step 20

    # A rerun with the same environment (a full restart keeps the JobSet's env) does not fire again.
    resumed = run_module("elastic_training.local.workloads.train", args, **env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert RESTORING_STEP_RE.findall(resumed.stdout) == ["10"]  # never the half-written 20
    assert _steps(resumed.stdout) == list(range(11, 30))
    # The same state after step 10 and the same batch: the first step after the restore repeats its loss.
    assert _losses(resumed.stdout)[0] == _losses(crashed.stdout)[11]
    assert ASYNC_SAVE_STARTED_RE.findall(resumed.stdout) == ["20", "29"]
    assert _committed(checkpoints) == [0, 10, 20, 29]
    _assert_all_valid(run, [0, 10, 20, 29])


def test_sigterm_stops_training_and_exits_0(tmp_path: Path, small_model: list[str]) -> None:
    args = [f"base_output_directory={tmp_path}", "run_name=t", "steps=100000", *small_model]
    process = start_module("elastic_training.local.workloads.train", args)
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
    result = run_module("elastic_training.local.workloads.train", ["run_name=n", "steps=3", *keys, *small_model])
    assert result.returncode == 0, result.stdout + result.stderr
    assert _steps(result.stdout) == [0, 1, 2]


def test_defaults_synchronous_saves_retention_and_no_final_save(tmp_path: Path) -> None:
    # The default (demo) model size, as `make demo` trains it.
    keys = ["checkpoint_period=5", "async_checkpointing=false", "save_checkpoint_on_completion=false"]
    args = [f"base_output_directory={tmp_path}", "run_name=s", "steps=13", "max_num_checkpoints_to_keep=2", *keys]
    result = run_module("elastic_training.local.workloads.train", args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _steps(result.stdout) == list(range(13))
    # A step at the default size takes well under a second idle (median of the steps after the compiling one); the
    # bound is loose, as a loaded CI machine runs them several times slower: it catches a hang, not a slowdown.
    seconds = sorted(float(m[2]) for m in COMPLETED_STEP_RE.finditer(result.stdout))[:-1]
    assert seconds[len(seconds) // 2] < 2.0, seconds
    # Synchronous saves log MaxText's other line; no save on completion: the last step (12) is not saved.
    assert [int(m[1]) for m in SAVED_CHECKPOINT_RE.finditer(result.stdout)] == [0, 5, 10]
    assert not ASYNC_SAVE_STARTED_RE.search(result.stdout)
    # max_num_checkpoints_to_keep=2: only the newest two committed steps remain.
    assert _committed(tmp_path / "s" / "checkpoints") == [5, 10]
    assert sorted(p.name for p in (tmp_path / "s" / "checkpoints").iterdir() if p.name.isdigit()) == ["10", "5"]


def test_kill_during_save_or_later_fires_in_the_first_save_at_or_after_its_step(
    tmp_path: Path, small_model: list[str]
) -> None:
    # A period of 8 never saves step 20: "or later" kills the save of 24, the first after it, once.
    args = [f"base_output_directory={tmp_path}", "run_name=l", "steps=30", "checkpoint_period=8", *small_model]
    env = {KILL_DURING_SAVE_ENV: "20", KILL_DURING_SAVE_ONCE_ENV: "1", KILL_DURING_SAVE_OR_LATER_ENV: "1"}
    crashed = run_module("elastic_training.local.workloads.train", args, **env)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    assert ASYNC_SAVE_STARTED_RE.findall(crashed.stdout) == ["0", "8", "16", "24"]
    assert "killing the process before the commit marker of " in crashed.stdout
    assert crashed.stdout.split("before the commit marker of ", 1)[1].split()[0].endswith("/checkpoints/24")
    assert _committed(tmp_path / "l" / "checkpoints") == [0, 8, 16]
    resumed = run_module("elastic_training.local.workloads.train", args, **env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert RESTORING_STEP_RE.findall(resumed.stdout) == ["16"]
    assert _committed(tmp_path / "l" / "checkpoints") == [0, 8, 16, 24, 29]


def test_local_step_seconds_stretches_every_step(tmp_path: Path, small_model: list[str]) -> None:
    args = [f"base_output_directory={tmp_path}", "run_name=slow", "steps=4", "checkpoint_period=2", *small_model]
    run = run_module("elastic_training.local.workloads.train", args, LOCAL_STEP_SECONDS="0.3")
    assert run.returncode == 0, run.stdout + run.stderr
    seconds = [float(m[2]) for m in COMPLETED_STEP_RE.finditer(run.stdout)]
    assert len(seconds) == 4 and min(seconds) >= 0.3  # a floor the sleep guarantees, not a speed claim
    refused = run_module("elastic_training.local.workloads.train", args, LOCAL_STEP_SECONDS="soon")
    assert refused.returncode != 0 and "LOCAL_STEP_SECONDS must be a number of seconds" in refused.stderr
