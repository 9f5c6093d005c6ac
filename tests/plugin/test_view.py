"""The view's pure parts: the step timeline, budgets while a run is still going, missing data."""

from __future__ import annotations

from operators.recovery import LogDigest
from plugin.view import budgets, run_view, timeline

RECOVERY = {"detected_at": 110.0, "failed_step": 24, "restored_at": 118.0, "restored_step": 20, "first_step_at": 120.0}


def test_timeline_has_the_failure_the_rewind_and_checkpoints_in_time_order() -> None:
    line = timeline(
        started_at=100.0,
        ended_at=200.0,
        final_step=59,
        recoveries=[RECOVERY],
        escalations=[
            {"at": 150.0, "latest_step": 40, "resumed_from_step": 30, "seconds_to_recreate": 5.0, "reason": "stalled"}
        ],
        checkpoints=[
            {"step": 10, "committed_at": 105.0},
            {"step": 20, "committed_at": 108.0},
            {"step": 0, "committed_at": 50.0},
        ],  # left over from an earlier run of the directory
    )
    assert line["points"] == [
        [100.0, -1],
        [105.0, 10],
        [108.0, 20],
        [110.0, 24],
        [118.0, 24],
        [118.0, 20],
        [120.0, 21],
        [150.0, 40],
        [155.0, 30],
        [200.0, 59],
    ]
    assert line["rewinds"] == [
        {"t": 118.0, "from_step": 24, "to_step": 20},
        {"t": 155.0, "from_step": 40, "to_step": 30},
    ]
    assert [f["kind"] for f in line["failures"]] == ["slice failure", "full restart (stalled)"]


def test_budgets_of_a_running_task_come_from_the_state_store() -> None:
    digest = LogDigest()
    digest.feed(1.0, "completed step: 0, seconds: 1.0")
    digest.feed(2.0, "Elastic event detected")
    state = {
        "jobset_name": "js",
        "full_restarts": 1,
        "monitor": {"slice_restart_times": [10.0, 20.0, 4000.0], "jobset_restarts": 2, "digest": digest.to_json()},
    }
    found = {b["name"]: (b["used"], b["allowed"]) for b in budgets(None, state)}
    assert found["slice restarts in window"] == (3, None)  # no window known without the report
    assert found["full restarts"] == (1, None) and found["JobSet restarts"] == (2, None)
    assert found["in-process retries"] == (1, None)
    windowed = budgets({"budgets": {"slice_restart_window_seconds": 3600.0, "max_slice_restarts": 2}}, state)
    assert windowed[0]["used"] == 2 and windowed[0]["allowed"] == 2  # 10 and 20 within an hour, 4000 alone


def test_a_task_with_nothing_persisted_yet_still_has_a_view() -> None:
    view = run_view(
        task={"dag_id": "d", "run_id": "r", "task_id": "t"},
        report=None,
        state=None,
        checkpoints=None,
        rendered={"steps": "100", "num_slices": "4", "base_output_directory": "/b/", "run_name": "n"},
    )
    assert view["progress"] == {"current_step": None, "target_step": 99, "final_step": None}
    assert view["slices"]["configured"] == 4 and view["run_directory"] == "/b/n"
    assert view["recoveries"] == [] and view["advice"] is None and view["timeline"]["points"] == []
