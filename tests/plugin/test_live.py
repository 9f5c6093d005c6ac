"""The view of a running task: the head pod's recent log folded on top of the state persisted at the deferral.

The log is a real one (a nightly run on the local cluster, as the Kubernetes API returns it with
``timestamps=true``); the read through the Kubernetes connection itself runs in
tests/plugin/test_browser_journey.py against the real stack, while the run is deferred.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic_training.operators.observations import MonitorState
from elastic_training.plugin.live import HeadLog, fold, live_state

DATA = Path(__file__).parent / "data"
POD_UID = "4e958d03-ffc2-4141-bb05-4b7aefd6638d"


def api_lines() -> list[str]:
    """The head pod's log as ``GET .../log?timestamps=true`` returns it: ``<RFC 3339> <line>``."""
    lines = []
    for raw in (DATA / "clean_run_head.log").read_text().splitlines():
        stamp, _, _, text = raw.split(" ", 3)  # the kubelet's CRI file: "<stamp> stdout F <line>"
        lines.append(f"{stamp} {text}")
    return lines


def persisted_at(lines: list[str], upto: int) -> dict[str, object]:
    """The state entry as the operator saved it, its trigger having folded the first ``upto`` lines."""
    monitor = MonitorState(head_pod="head-0", head_pod_uid=POD_UID)
    for line in lines[:upto]:
        stamp, _, text = line.partition(" ")
        monitor.on_log_line(stamp, text, POD_UID)
    return {"jobset_name": "probe-clean-2fc739", "monitor": monitor.to_json()}


def test_the_lines_after_the_cursor_are_folded_in_once() -> None:
    lines = api_lines()
    step_5 = next(i for i, line in enumerate(lines) if "completed step: 5," in line) + 1
    state = persisted_at(lines, step_5)
    tail = HeadLog("head-0", POD_UID, "\n".join(lines[step_5 - 10 :]) + "\n", read_at=1.0)
    folded, info = fold(state, tail)
    assert info["current_step"] == 29 and info["complete"] and info["error"] is None
    assert info["new_lines"] == len(lines) - step_5  # the 10 lines already folded are not folded again
    assert info["live_slices"] == 2 and info["recoveries_so_far"] == 0 and not info["recovering"]
    digest = MonitorState.from_json(folded["monitor"]).digest
    assert digest.steps_executed == 30 and digest.startup_steps == 1


def test_a_tail_that_does_not_reach_the_cursor_says_it_is_incomplete(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        "elastic_training.plugin.live.TAIL_LINES", 5
    )  # a log longer than the tail: the API returned the last 5
    lines = api_lines()
    state = persisted_at(lines, 30)
    _, info = fold(state, HeadLog("head-0", POD_UID, "\n".join(lines[-5:]), read_at=1.0))
    assert info["current_step"] == 29 and info["complete"] is False


def test_a_recovery_in_progress_shows_while_it_happens() -> None:
    lines = api_lines()[:60]
    lines += [
        "2026-12-01T10:52:49.100000000Z I1201 10:52:49.100000 1 elastic.py:1] Elastic event detected. Traceback",
        "2026-12-01T10:52:50.100000000Z I1201 10:52:50.100000 1 elastic.py:1] Elastic attempt 2 out of 4",
    ]
    _, info = fold(persisted_at(lines, 40), HeadLog("head-0", POD_UID, "\n".join(lines), read_at=1.0))
    assert info["recoveries_so_far"] == 1 and info["recovering"]


def test_a_failed_read_leaves_the_persisted_state_and_says_why() -> None:
    lines = api_lines()
    state = persisted_at(lines, 50)
    folded, info = fold(state, HeadLog(None, None, "", 1.0, "ApiException: HTTP 403: Forbidden"))
    assert folded["monitor"] == state["monitor"]
    assert info["error"] == "ApiException: HTTP 403: Forbidden" and not info["complete"]


def test_nothing_is_read_without_a_jobset() -> None:
    def never(namespace: str, jobset: str) -> HeadLog:
        raise AssertionError("read without a JobSet")

    assert live_state({"jobset_name": ""}, namespace="default", reader=never) is None
