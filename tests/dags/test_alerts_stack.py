"""Alerts through Airflow's own machinery: the shipped nightly DAG on ``elastic-training airflow`` (the real
scheduler, triggerer, dag-processor and workers; tests/support/airflow_stack.py), its notifier named in the
``[elastic_training]`` config as a deployment names it, and a short ``nightly_deadline``.

One run, triggered over REST with the form's slice-failure drill and no slice restart allowed: the drill's lost
slice is an escalation to a full restart, which the trigger (in the triggerer) hands to the operator (on a worker),
which tells the notifier; the run is still training when its deadline passes, which the scheduler finds and the
triggerer tells the same notifier (Airflow 3.3's DeadlineAlert and AsyncCallback). Then the run is stopped."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

import pytest

from tests.support.airflow_stack import ALERTS, NIGHTLY_DEADLINE, STARTUP_SECONDS, Stack, logged_in
from tests.support.alert_notifier import told

RUN_SECONDS = 900.0
NIGHTLY = "elastic_training_nightly"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(STARTUP_SECONDS + 2 * RUN_SECONDS)]


@pytest.fixture(scope="module")
def stack(airflow_stack: Stack) -> Stack:
    return logged_in(airflow_stack, (NIGHTLY,))


def _wait_state(stack: Stack, path: str, states: set[str]) -> str:
    deadline = time.monotonic() + RUN_SECONDS
    while (state := str(stack.call("GET", path)[1]["state"])) not in states:
        assert time.monotonic() < deadline, f"the run is still {state} after {RUN_SECONDS:.0f} s"
        time.sleep(2)  # polls the REST API with the deadline above
    return state


def test_a_full_restart_and_a_missed_deadline_reach_the_notifier_through_the_scheduler_and_triggerer(
    stack: Stack,
) -> None:
    status, answer = stack.call("PATCH", f"/api/v2/dags/{NIGHTLY}", {"is_paused": False})
    assert status == 200, answer
    conf = {"inject_slice_failure": True, "failure_at_step": 20, "max_slice_restarts": 0, "max_full_restarts": 1}
    status, run = stack.call("POST", f"/api/v2/dags/{NIGHTLY}/dagRuns", {"logical_date": None, "conf": conf})
    assert status == 200, run
    run_id = str(run["dag_run_id"])
    path = f"/api/v2/dags/{NIGHTLY}/dagRuns/{quote(run_id, safe='')}"
    inbox = stack.home / ALERTS

    def mine() -> dict[str, list[dict[str, Any]]]:
        found: dict[str, list[dict[str, Any]]] = {}
        for record in told(inbox):
            if record["alert"]["run_id"] == run_id:
                found.setdefault(record["alert"]["event"], []).append(record)
        return found

    deadline = time.monotonic() + RUN_SECONDS
    wanted = {"full_restart", "deadline_missed"}
    try:
        while not wanted <= set(mine()):
            state = stack.call("GET", path)[1]["state"]
            if state not in ("queued", "running"):  # both come before the run ends: read them once more
                assert wanted <= set(mine()), f"the run ended ({state}) before both alerts: {mine()}"
                break
            assert time.monotonic() < deadline, f"not both alerts after {RUN_SECONDS:.0f} s: {mine()}"
            time.sleep(2)  # polls the notifier's file with the deadline above
    finally:
        # Its training would go on for minutes, and the next nightly run waits behind it (max_active_runs=1).
        if stack.call("GET", path)[1]["state"] in ("queued", "running"):
            stack.call("PATCH", path, {"state": "failed"})
        _wait_state(stack, path, {"failed", "success"})
    found = mine()
    [restart] = found["full_restart"]
    assert restart["how"] == "sync" and restart["line"] == "full_restart: elastic run escalated to full restart 1 of 1"
    alert = restart["alert"]
    assert alert["task_id"] == "pretrain" and alert["dag_id"] == NIGHTLY
    assert alert["details"]["reason"] in ("slice_restart_budget_spent", "jobset_failed"), alert
    assert alert["details"]["full_restarts_left"] == 0 and alert["details"]["max_full_restarts"] == 1
    [missed] = found["deadline_missed"]
    assert missed["how"] == "async" and missed["line"] == f"deadline_missed: {NIGHTLY} missed its deadline"
    assert missed["alert"]["details"]["finished_by"] == NIGHTLY_DEADLINE
    assert missed["alert"]["details"]["state"] in ("queued", "running")  # still going when its deadline passed
    assert f"DAG run {run_id} of {NIGHTLY} was not finished by " in missed["alert"]["message"]
