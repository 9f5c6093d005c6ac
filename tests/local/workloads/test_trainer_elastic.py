"""The trainer's in-process recovery on several CPU slices, with slice loss injected without a cluster.

Each test runs `elastic_driver` (a real `Trainer`, real pathwaysutils retry loop, real Orbax) in its own
process, because the slices need more than the test process' single CPU device.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from elastic_training.operators.constants import (
    COMMIT_SUCCESS_FILE,
    COMPLETED_STEP_RE,
    ELASTIC_ATTEMPT_RE,
    ELASTIC_ATTEMPTS_SPENT_RE,
    ELASTIC_EVENT_RE,
    LIVE_SLICE_COUNT_RE,
    RECOVERY_RECORD_RE,
    RECOVERY_RECORDS_FILE,
    RESTORING_STEP_RE,
    SUFFICIENT_SLICES_RE,
)
from tests.support.workload_processes import run_module

# Each test runs the elastic driver as a process (JAX start, compile, training): make test, not test-fast.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]  # several runs each, on a loaded box

_LIVE = re.compile(r"completed step: (\d+), .*live slice count: (\d+)")
_ABSL_PREFIX = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ [\w.]+:\d+\] ")


def _drive(
    tmp_path: Path, down_after: int, up_after: str, *keys: str, expect_code: int = 0
) -> tuple[dict[str, Any], str]:
    args = [
        str(down_after),
        "1",
        up_after,
        f"base_output_directory={tmp_path}",
        "run_name=el",
        "steps=30",
        "checkpoint_period=5",
        "num_slices=2",
        "elastic_enabled=true",
        "enable_single_controller=true",
        "elastic_poll_interval_seconds=0.1",
        *keys,
    ]
    result = run_module("tests.support.elastic_driver", args)
    assert result.returncode == expect_code, result.stdout[-4000:] + result.stderr[-4000:]
    line = result.stdout.strip().splitlines()[-1]
    assert line.startswith("DRIVER_RESULT ")
    return json.loads(line.removeprefix("DRIVER_RESULT ")), result.stdout


def _absl_lines(out: str, pattern: re.Pattern[str]) -> list[re.Match[str]]:
    """Matches of a shared regex in stdout, each on an absl-format line (`I0101 12:00:00.000000 pid f.py:1] `)."""
    matches = []
    for line in out.splitlines():
        match = pattern.search(line)
        if match:
            assert _ABSL_PREFIX.match(line), line
            matches.append(match)
    return matches


def test_pause_resume_recovers_in_the_same_process(tmp_path: Path) -> None:
    result, out = _drive(tmp_path, 12, "0.5")
    assert (result["attempts"], result["last_step"]) == (2, 29)
    assert [m[1] for m in ELASTIC_ATTEMPT_RE.finditer(out)] == ["1", "2"]
    [record] = result["records"]
    assert record["kind"] == "slice_down" and record["outcome"] == "recovered"
    assert "DATA_LOSS" in record["error"] and record["lost_slices"] == [1]
    assert (record["step_at_failure"], record["step_restored"], record["steps_lost"]) == (12, 10, 2)
    assert record["first_step_after_recovery"] == 11 and record["active_slices"] == [0, 1]
    times = [
        record[k]
        for k in (
            "failure_detected_at",
            "slices_ready_at",
            "restore_started_at",
            "restore_finished_at",
            "first_step_completed_at",
        )
    ]
    assert times == sorted(times)
    # The retry loop really paused: its wait saw one slice, and returned only once the slice was back.
    assert "1 slices active. Wanting at least 2." in out
    assert result["up_at"] - result["down_at"] >= 0.5
    assert record["slices_ready_at"] >= result["up_at"]
    # The rewind is visible in the log: step 11 completed twice.
    steps = [int(m[1]) for m in COMPLETED_STEP_RE.finditer(out)]
    assert steps.count(11) == 2 and steps[-1] == 29
    assert (tmp_path / "el" / RECOVERY_RECORDS_FILE).read_text().count("\n") == 1
    assert (tmp_path / "el" / "checkpoints" / "29" / COMMIT_SUCCESS_FILE).exists()
    # The record is consistent with itself and with what was logged.
    assert record["failed_attempt"] == 1 and record["slices_before"] == [0, 1]
    assert record["steps_lost"] == record["step_at_failure"] - record["step_restored"]
    assert record["first_step_after_recovery"] == record["step_restored"] + 1
    phases = record["phase_seconds"]
    assert phases["total"] == pytest.approx(record["first_step_completed_at"] - record["failure_detected_at"], abs=1e-5)
    assert phases["wait_for_slices"] == pytest.approx(
        record["slices_ready_at"] - record["failure_detected_at"], abs=1e-5
    )
    assert all(value is not None and value >= 0 for value in phases.values())
    assert [json.loads(m[1]) for m in _absl_lines(out, RECOVERY_RECORD_RE)] == [record]
    # Every elastic line of the run, on stdout in absl format, as the operators' shared regexes parse them.
    assert [m[1] for m in _absl_lines(out, ELASTIC_ATTEMPT_RE)] == ["1", "2"]
    assert len(_absl_lines(out, ELASTIC_EVENT_RE)) == 1
    assert [(m[1], m[2]) for m in _absl_lines(out, SUFFICIENT_SLICES_RE)] == [("2", "2"), ("2", "2")]
    assert [m[1] for m in _absl_lines(out, RESTORING_STEP_RE)] == ["10"]
    assert {m[1] for m in _absl_lines(out, LIVE_SLICE_COUNT_RE)} == {"2"}
    assert len(_absl_lines(out, LIVE_SLICE_COUNT_RE)) == len(_absl_lines(out, COMPLETED_STEP_RE)) == len(steps)
    assert "DATA_LOSS" in out[out.index("Elastic event detected") :]
    # Data parallel on both slices throughout: 8 rows per device, one shard per device.
    assert {(b["rows"], tuple(b["devices"]), tuple(b["shard_rows"])) for b in result["batches"]} == {
        (16, (0, 1), (8, 8))
    }


def test_replica_resize_finishes_on_fewer_slices(tmp_path: Path) -> None:
    result, out = _drive(tmp_path, 12, "never", "elastic_min_slice_count=1")
    assert (result["attempts"], result["last_step"]) == (2, 29)
    [record] = result["records"]
    assert record["active_slices"] == [0] and record["slices_before"] == [0, 1]
    live = [(int(step), int(count)) for step, count in _LIVE.findall(out)]
    assert live[12] == (12, 2) and live[-1] == (29, 1)
    # Really fewer devices and a smaller global batch after the resize, read from the arrays the step got:
    # the batch is sharded one shard per device of the active slices, the parameters live on the same devices.
    by_attempt = {(b["attempt"], b["rows"], tuple(b["devices"]), tuple(b["shard_rows"])) for b in result["batches"]}
    assert by_attempt == {(1, 16, (0, 1), (8, 8)), (2, 8, (0,), (8,))}
    assert all(b["param_devices"] == b["devices"] for b in result["batches"])
    second = [b for b in result["batches"] if b["attempt"] == 2]
    assert len(second) == 29 - record["step_restored"]  # every step after the restore ran on slice 0 alone


def test_an_exhausted_attempt_budget_ends_the_run_non_zero(tmp_path: Path) -> None:
    # elastic_max_retries counts attempts (first run included): with 1 there is no recovery at all.
    result, out = _drive(tmp_path, 12, "never", "elastic_max_retries=1", expect_code=1)
    assert (result["attempts"], result["last_step"]) == (1, 12)
    assert "ElasticRuntimeError: Elastic attempt 1 failed." in out
    assert "Retry policy rejected retry" in out
    # One attempt was made; the budget error is told apart from the attempt line.
    assert [m[1] for m in ELASTIC_ATTEMPT_RE.finditer(out)] == ["1"]
    assert [m[1] for m in ELASTIC_ATTEMPTS_SPENT_RE.finditer(out)] == ["1"]
    assert sum(line.endswith("] Elastic attempt 1") for line in out.splitlines()) == 1
    [record] = result["records"]
    assert record["outcome"] == "failed" and "DATA_LOSS" in record["error"]
    assert record["slices_ready_at"] is None and record["step_restored"] is None


def test_waiting_longer_than_elastic_timeout_seconds_ends_the_run_non_zero(tmp_path: Path) -> None:
    result, out = _drive(tmp_path, 12, "never", "elastic_timeout_seconds=1", expect_code=1)
    assert (result["attempts"], result["last_step"]) == (1, 12)
    assert "TimeoutError: Timed out waiting for 2 slices" in out
    assert [m[1] for m in ELASTIC_ATTEMPT_RE.finditer(out)] == ["1", "2"]  # attempt 2 never got its slices
    [record] = result["records"]
    assert record["outcome"] == "failed" and record["slices_ready_at"] is None
    assert (tmp_path / "el" / RECOVERY_RECORDS_FILE).read_text().count("\n") == 1


@pytest.mark.slow
def test_replica_resize_scales_back_up_after_a_checkpoint(tmp_path: Path) -> None:
    result, out = _drive(tmp_path, 12, "step:16", "elastic_min_slice_count=1")
    assert result["attempts"] == 3 and result["last_step"] == 29
    down, up = result["records"]
    assert down["kind"] == "slice_down" and down["active_slices"] == [0]
    assert up["kind"] == "scale_up" and up["active_slices"] == [0, 1] and up["steps_lost"] == 0
    assert up["step_restored"] == 20  # the first checkpoint after the slice came back (after step 16)
    assert "Scale up requested." in out
    assert _LIVE.findall(out)[-1][1] == "2"
