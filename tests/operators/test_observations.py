"""Folding JobSet and pod objects into what the policy needs; counting that survives a rebuild."""

from __future__ import annotations

import json
from typing import Any

import pytest

from operators.constants import LABEL_JOB_INDEX, LABEL_REPLICATED_JOB_NAME
from operators.observations import MonitorState, jobset_phase, normalize_timestamp, parse_time
from operators.policy import JobSetPhase


def pod(uid: str, slice_index: int, restarts: int = 0, rjob: str = "worker", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "uid": uid,
            "name": f"p-{uid}",
            "creationTimestamp": "2026-11-30T12:00:00Z",
            "labels": {LABEL_REPLICATED_JOB_NAME: rjob, LABEL_JOB_INDEX: str(slice_index)},
        },
        "status": {"containerStatuses": [{"name": "pathways-worker", "restartCount": restarts}], **status},
    }


def test_first_pods_are_not_restarts_replacements_and_restarts_are() -> None:
    state = MonitorState()
    assert state.on_pod(pod("a", 0), deleted=False, now=1.0) == []
    assert state.on_pod(pod("b", 1), deleted=False, now=1.0) == []
    assert state.on_pod(pod("a", 0), deleted=True, now=2.0) == []  # deletion alone: the replacement counts
    assert state.on_pod(pod("c", 0), deleted=False, now=3.0) == [0]
    assert state.on_pod(pod("b", 1, restarts=2), deleted=False, now=4.0) == [1, 1]
    assert state.on_pod(pod("b", 1, restarts=2), deleted=False, now=5.0) == []  # same status again
    assert state.slice_restarts == 3
    assert state.slice_restarts_by_slice == {"0": 1, "1": 2}
    assert state.slice_restart_times[1:] == [4.0, 4.0]
    assert state.slice_restart_times[0] == parse_time("2026-11-30T12:00:00Z")  # a replacement: its creation time


def test_rebuilt_from_json_neither_loses_nor_double_counts() -> None:
    state = MonitorState()
    for p in (pod("a", 0), pod("b", 1)):
        state.on_pod(p, deleted=False, now=1.0)
    state.on_pod(pod("c", 0), deleted=False, now=2.0)  # a restart seen before the trigger is torn down
    saved = json.loads(json.dumps(state.to_json()))
    # Torn down here: meanwhile slice 1's pod was replaced. The rebuilt state sees it once, from the list.
    rebuilt = MonitorState.from_json(saved)
    for p in (pod("c", 0), pod("d", 1)):
        rebuilt.on_pod(p, deleted=False, now=9.0)
    assert rebuilt.slice_restarts == 2
    # And a second rebuild from the same kwargs sees the same.
    again = MonitorState.from_json(saved)
    for p in (pod("c", 0), pod("d", 1)):
        again.on_pod(p, deleted=False, now=9.0)
    assert again.slice_restarts == 2


def test_head_pod_and_permanent_exit() -> None:
    state = MonitorState()
    terminated = {"name": "jax-tpu", "restartCount": 0, "state": {"terminated": {"exitCode": 2}}}
    head = pod("h", 0, rjob="pathways-head")
    state.on_pod(head, deleted=False, now=1.0)
    assert (state.head_pod, state.head_pod_uid) == ("p-h", "h")
    head["status"]["containerStatuses"] = [terminated]
    state.on_pod(head, deleted=False, now=2.0)
    state.on_jobset({"metadata": {"uid": "j"}, "status": {"terminalState": "Failed"}})
    observation = state.observation(now=3.0, target_step=9, full_restarts_used=0)
    assert observation.permanent and "exited 2" in observation.failure_detail


@pytest.mark.parametrize(
    ("jobset", "phase", "detail"),
    [
        (None, JobSetPhase.MISSING, ""),
        ({"status": {}}, JobSetPhase.ACTIVE, ""),
        ({"status": {"terminalState": "Completed"}}, JobSetPhase.COMPLETED, ""),
        (
            {
                "status": {
                    "conditions": [{"type": "Failed", "status": "True", "reason": "ReachedMaxRestarts", "message": "m"}]
                }
            },
            JobSetPhase.FAILED,
            "ReachedMaxRestarts: m",
        ),
        ({"status": {"conditions": [{"type": "Failed", "status": "False"}]}}, JobSetPhase.ACTIVE, ""),
    ],
)
def test_jobset_phase(jobset: dict[str, Any] | None, phase: JobSetPhase, detail: str) -> None:
    assert jobset_phase(jobset) == (phase, detail)


def test_log_cursor_orders_kubelet_timestamps_and_skips_replayed_lines() -> None:
    state = MonitorState()
    line = "completed step: 3, seconds: 0.5, loss: 1"
    assert state.on_log_line("2026-11-30T12:00:05.123Z", line, "h")
    assert not state.on_log_line("2026-11-30T12:00:05.1Z", line, "h")  # earlier, though it sorts later as text
    assert not state.on_log_line("2026-11-30T12:00:05.123Z", line, "h")  # replayed by an overlapping read
    assert state.on_log_line("2026-11-30T12:00:05.2Z", line, "h")
    assert state.on_log_line("2026-11-30T12:00:01Z", line, "new-head")  # another pod: its own history
    assert state.digest.steps_executed == 3
    assert not state.on_log_line("garbage", line, "h")
    assert normalize_timestamp("2026-11-30T12:00:05Z") == "2026-11-30T12:00:05.000000000Z"


def test_state_round_trip() -> None:
    state = MonitorState(jobset_uid="u", started_at=5.0)
    state.on_pod(pod("a", 0), deleted=False, now=1.0)
    state.on_log_line("2026-11-30T12:00:05.123456789Z", "Elastic event detected", "h")
    assert MonitorState.from_json(json.loads(json.dumps(state.to_json()))) == state
