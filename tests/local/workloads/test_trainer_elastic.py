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

from operators.constants import COMMIT_SUCCESS_FILE, COMPLETED_STEP_RE, ELASTIC_ATTEMPT_RE, RECOVERY_RECORDS_FILE
from tests.local.workloads.conftest import run_module

_LIVE = re.compile(r"completed step: (\d+), .*live slice count: (\d+)")


def _drive(tmp_path: Path, down_after: int, up_after: str, *keys: str) -> tuple[dict[str, Any], str]:
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
    result = run_module("tests.local.workloads.elastic_driver", args)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    line = result.stdout.strip().splitlines()[-1]
    assert line.startswith("DRIVER_RESULT ")
    return json.loads(line.removeprefix("DRIVER_RESULT ")), result.stdout


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


def test_replica_resize_finishes_on_fewer_slices(tmp_path: Path) -> None:
    result, out = _drive(tmp_path, 12, "never", "elastic_min_slice_count=1")
    assert (result["attempts"], result["last_step"]) == (2, 29)
    [record] = result["records"]
    assert record["active_slices"] == [0] and record["slices_before"] == [0, 1]
    live = [(int(step), int(count)) for step, count in _LIVE.findall(out)]
    assert live[12] == (12, 2) and live[-1] == (29, 1)


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
