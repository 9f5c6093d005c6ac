"""The shared JobSet lifecycle against the local cluster: deadlines, Airflow's own trigger failure, kills, clears.

Operators are driven the way the task runner drives them (``execute`` until it defers, the trigger run to its
event, ``execute_complete`` or ``resume_execution``), with a task instance that has what they read of one.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.bases.operator import TriggerFailureReason
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred
from kubernetes import client

from elastic_training.operators import JobSetOperator, kube_names
from elastic_training.operators.constants import (
    HEAD_REPLICATED_JOB,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
)
from elastic_training.operators.elastic_operator import LABEL_FULL_RESTART
from elastic_training.operators.lifecycle import DEFER_TIMEOUT_PADDING_SECONDS, first_event
from elastic_training.operators.observations import MonitorState
from elastic_training.operators.policy import JobSetPhase
from elastic_training.operators.run_state import STATE_KEY
from tests.support.lifecycle_runs import DAG_ID, _delete_mine, _elastic, _get, _one_pod_jobset, _stored, _TaskInstance


@pytest.fixture(autouse=True)
def _no_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__DEFER_SETTLE_SECONDS", "0")


def _gone_or_going(custom: client.CustomObjectsApi, name: str) -> bool:
    found = _get(custom, name)
    return found is None or bool(found["metadata"].get("deletionTimestamp"))


def _sleeper(task_id: str, run_id: str, **kwargs: Any) -> JobSetOperator:
    return JobSetOperator(
        task_id=task_id, name="sleeper", image="local", command=["sleep", "3600"], runtime="local", **kwargs
    )


def test_execution_timeout_deletes_the_jobset_and_says_so(custom: client.CustomObjectsApi) -> None:
    """Airflow 3.3 does not time a deferred task out: the trigger's deadline does, and the JobSet goes with it."""
    ti = _TaskInstance("evaluate", "manual__timeout")
    operator = _sleeper("evaluate", ti.run_id, execution_timeout=timedelta(seconds=3), poll_interval=0.5)
    identity = kube_names.identity_labels(dag_id=DAG_ID, task_id="evaluate", run_id=ti.run_id, map_index=-1)
    try:
        with pytest.raises(TaskDeferred) as deferred:
            operator.execute({"ti": ti})  # type: ignore[arg-type]
        trigger = deferred.value.trigger
        assert trigger.deadline == pytest.approx(ti.start_date.timestamp() + 3)
        # Airflow's own backstop is padded past the deadline, as the provider pads it, so the trigger fires first.
        assert deferred.value.timeout is not None
        assert deferred.value.timeout.total_seconds() >= DEFER_TIMEOUT_PADDING_SECONDS
        event = asyncio.run(asyncio.wait_for(first_event(trigger), timeout=60))
        assert event["status"] == "deadline"
        resumed = _sleeper("evaluate", ti.run_id, execution_timeout=timedelta(seconds=3))
        with pytest.raises(AirflowException, match=r"execution_timeout \(3 s\) reached: JobSet \S+ deleted") as failed:
            resumed.execute_complete({"ti": ti}, event)  # type: ignore[arg-type]
        assert not isinstance(failed.value, AirflowFailException)  # Airflow's retries apply, as to any timeout
        assert _gone_or_going(custom, ti.xcom["jobset_name"])
    finally:
        _delete_mine(custom, identity)


def test_airflow_failing_the_deferral_deletes_the_jobset(custom: client.CustomObjectsApi) -> None:
    """A trigger timeout (``__fail__``) skips ``execute_complete`` and ``on_kill``: the JobSet must not be orphaned."""
    ti = _TaskInstance("evaluate", "manual__fail")
    operator = _sleeper("evaluate", ti.run_id, execution_timeout=timedelta(minutes=5))
    identity = kube_names.identity_labels(dag_id=DAG_ID, task_id="evaluate", run_id=ti.run_id, map_index=-1)
    try:
        with pytest.raises(TaskDeferred):
            operator.execute({"ti": ti})  # type: ignore[arg-type]
        name = ti.xcom["jobset_name"]
        resumed = _sleeper("evaluate", ti.run_id, execution_timeout=timedelta(minutes=5))  # a new worker process
        with pytest.raises(AirflowException, match=rf"execution_timeout \(300 s\) reached: JobSet {name} deleted"):
            resumed.resume_execution(
                "__fail__",
                {"error": TriggerFailureReason.TRIGGER_TIMEOUT},
                {"ti": ti},  # type: ignore[arg-type]
            )
        assert _gone_or_going(custom, name)
    finally:
        _delete_mine(custom, identity)


def test_an_error_event_keeps_the_jobset_for_a_retry_and_deletes_it_on_the_last_try(
    custom: client.CustomObjectsApi,
) -> None:
    ti = _TaskInstance("evaluate", "manual__error", try_number=1, max_tries=1)
    identity = kube_names.identity_labels(dag_id=DAG_ID, task_id="evaluate", run_id=ti.run_id, map_index=-1)
    try:
        with pytest.raises(TaskDeferred) as deferred:
            _sleeper("evaluate", ti.run_id).execute({"ti": ti})  # type: ignore[arg-type]
        trigger = deferred.value.trigger
        name = ti.xcom["jobset_name"]
        event = {"status": "error", "name": name, "message": "Forbidden", "state": trigger.state}
        with pytest.raises(AirflowException, match=f"JobSet {name} left running: the next try adopts it"):
            _sleeper("evaluate", ti.run_id).execute_complete({"ti": ti}, event)  # type: ignore[arg-type]
        assert not _gone_or_going(custom, name)
        ti.try_number = 2
        with pytest.raises(AirflowException, match=f"JobSet {name} deleted: no retry is left to watch it"):
            _sleeper("evaluate", ti.run_id).execute_complete({"ti": ti}, event)  # type: ignore[arg-type]
        assert _gone_or_going(custom, name)
    finally:
        _delete_mine(custom, identity)


def test_a_kill_during_the_completion_scan_deletes_the_jobset(
    custom: client.CustomObjectsApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`execute_complete` knows its JobSet before it reads storage: a kill then must not leave it running."""
    ti = _TaskInstance("pretrain", "manual__kill-scan")
    identity = kube_names.identity_labels(dag_id=DAG_ID, task_id="pretrain", run_id=ti.run_id, map_index=-1)
    name = "kill-scan"
    created = custom.create_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, _one_pod_jobset(name, identity, ["sleep", "3600"])
    )
    try:
        uid = created["metadata"]["uid"]
        store = _stored(name, uid)
        operator = _elastic(tmp_path, "kill-scan")

        def killed_while_scanning(spec: Any) -> int:
            operator.on_kill()  # what the task runner calls on SIGTERM or a worker timeout, mid-scan
            raise AirflowException("killed")

        monkeypatch.setattr(operator, "_committed_step", killed_while_scanning)
        state = MonitorState(jobset_uid=uid, started_at=time.time(), phase=JobSetPhase.COMPLETED).to_json()
        event = {"status": "decision", "name": name, "state": state}
        with pytest.raises(AirflowException, match="killed"):
            operator.execute_complete({"ti": ti, "task_state_store": store}, event)  # type: ignore[arg-type]
        assert _gone_or_going(custom, name)
    finally:
        _delete_mine(custom, identity)


def _wait_failed(custom: client.CustomObjectsApi, name: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = _get(custom, name)
        if found and (found.get("status") or {}).get("terminalState") == "Failed":
            return
        time.sleep(0.3)
    raise AssertionError(f"JobSet {name} never failed")


def test_a_cleared_task_after_a_failed_jobset_runs_a_new_incarnation_with_its_new_spec(
    custom: client.CustomObjectsApi, tmp_path: Path
) -> None:
    """The trainer refused its config (exit 2) once the full-restart budget was spent; the user fixed it, cleared."""
    ti = _TaskInstance("pretrain", "manual__cleared")
    identity = kube_names.identity_labels(dag_id=DAG_ID, task_id="pretrain", run_id=ti.run_id, map_index=-1)
    old_name = kube_names.jobset_name(
        dag_id=DAG_ID, task_id="pretrain", run_id=ti.run_id, map_index=-1, attempt=1, prefix="cleared"
    )
    failed = custom.create_namespaced_custom_object(
        JOBSET_GROUP,
        JOBSET_VERSION,
        "default",
        JOBSET_PLURAL,
        _one_pod_jobset(old_name, {**identity, LABEL_FULL_RESTART: "1"}, ["sh", "-c", "echo Invalid config; exit 2"]),
    )
    try:
        _wait_failed(custom, old_name)
        escalation = {"reason": "stalled", "message": "m", "at": 1.0, "jobset_name": "cleared-old", "latest_step": 3}
        store = _stored(old_name, failed["metadata"]["uid"], full_restarts=1, escalations=[escalation])
        fixed = _elastic(tmp_path, "cleared", maxtext_args={"learning_rate": 0.001})
        with pytest.raises(TaskDeferred) as deferred:
            fixed.execute({"ti": ti, "task_state_store": store})  # type: ignore[arg-type]
        state = store[STATE_KEY]
        assert state["jobset_name"] != old_name and state["jobset_name"].endswith("-r2")
        assert _get(custom, old_name) is None, "the failed JobSet is deleted, never re-adopted"
        assert deferred.value.trigger.uid == state["jobset_uid"]
        assert deferred.value.trigger.full_restarts_used == 0, "a cleared task starts a fresh full-restart budget"
        new = _get(custom, state["jobset_name"])
        assert new is not None and new["metadata"]["uid"] == state["jobset_uid"]
        [head] = [r for r in new["spec"]["replicatedJobs"] if r["name"] == HEAD_REPLICATED_JOB]
        [trainer] = [c for c in head["template"]["spec"]["template"]["spec"]["containers"] if c["name"] == "jax-tpu"]
        assert "learning_rate=0.001" in " ".join(trainer.get("args") or trainer.get("command") or [])
    finally:
        _delete_mine(custom, identity)


def test_an_escalation_finished_after_a_crash_never_quarantines_the_new_incarnations_save(
    custom: client.CustomObjectsApi, tmp_path: Path
) -> None:
    """The worker died after creating the next JobSet and before saving that it had: that JobSet is saving now."""
    ti = _TaskInstance("pretrain", "manual__crash-create")
    identity = kube_names.identity_labels(dag_id=DAG_ID, task_id="pretrain", run_id=ti.run_id, map_index=-1)
    name = lambda attempt: kube_names.jobset_name(  # noqa: E731
        dag_id=DAG_ID, task_id="pretrain", run_id=ti.run_id, map_index=-1, attempt=attempt, prefix="crashed"
    )
    following = custom.create_namespaced_custom_object(
        JOBSET_GROUP,
        JOBSET_VERSION,
        "default",
        JOBSET_PLURAL,
        _one_pod_jobset(name(1), {**identity, LABEL_FULL_RESTART: "1"}, ["sleep", "3600"]),
    )
    saving = tmp_path / "crashed" / "checkpoints" / "20"
    (saving / "items").mkdir(parents=True)
    (saving / "items" / "_METADATA").write_text("{}")  # its commit marker is not written yet
    try:
        escalation = {"reason": "stalled", "message": "m", "at": time.time(), "jobset_name": name(0), "latest_step": 23}
        store = _stored(name(0), "uid-of-the-deleted-one", escalating=True, escalations=[escalation])
        with pytest.raises(TaskDeferred):
            _elastic(tmp_path, "crashed").execute({"ti": ti, "task_state_store": store})  # type: ignore[arg-type]
        assert saving.is_dir() and (saving / "items" / "_METADATA").exists(), "the save in progress was moved"
        assert not (tmp_path / "crashed" / "checkpoints" / "quarantine").exists()
        state = store[STATE_KEY]
        assert state["jobset_uid"] == following["metadata"]["uid"] and not state["escalating"]
        assert state["full_restarts"] == 1
        assert (
            len(
                custom.list_namespaced_custom_object(
                    JOBSET_GROUP,
                    JOBSET_VERSION,
                    "default",
                    JOBSET_PLURAL,
                    label_selector=kube_names.label_selector(identity),
                )["items"]
            )
            == 1
        )
    finally:
        _delete_mine(custom, identity)
