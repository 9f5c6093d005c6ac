"""`ElasticJobSetOperator` end to end: real Airflow (``dag.test()``, deferrable, triggers inline), the local
cluster over HTTPS, the real JAX trainer and Orbax checkpoints, faults injected at training steps.

Full restarts: a stall, a spent budget, a preemption's exit; the runs a task rides out without one are
tests/operators/test_elastic_operator_rideouts.py's."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.constants import HEAD_REPLICATED_JOB
from tests.support.airflow_dags import states, xcom
from tests.support.alert_notifier import told
from tests.support.elastic_runs import committed_steps, elastic_dag, head_log, jobsets_of
from tests.support.step_faults import StepFaults, kill_worker

pytestmark = pytest.mark.slow

# Slices dying past max_slice_restarts get exactly one full restart, which restores the step the report names:
# tests/operators/test_seed_scenarios.py's test_slice_budget_spent_in_slices_gets_exactly_one_full_restart (the
# seed's 3 slices of 4 hosts, one run, not two); that a force-deleted worker pod is a slice restart, as the seed's
# lost hosts are, is test_elastic_operator_rideouts.py's
# test_api_errors_and_expiring_watches_never_fail_the_task's kill.


def test_frozen_trainer_is_a_stall_and_a_full_restart_mends_it(
    airflow_db: None, cluster_connection: UpstreamCluster, tmp_path: Path
) -> None:
    # The stall clock runs from the first step (the start-up, JAX's start, the compilation and after the full
    # restart the restore, has startup_timeout, generous): 32 s is only the freeze's, against steps of ~0.1 s (a few
    # seconds on a 7x-loaded 2-core box) and saves that log their start and end; just over elastic_timeout_seconds,
    # as the lint requires. 30 s is what the first attempt's wait for the workers needs on a loaded box.
    inbox = tmp_path / "inbox.jsonl"
    dag = elastic_dag(
        "elastic_stall",
        tmp_path,
        stall_timeout="timedelta(seconds=32)",
        startup_timeout="timedelta(minutes=10)",
        elastic_timeout_seconds=30,
        alerts=f"FileNotifier(path={str(inbox)!r})",
    )
    checkpoints = tmp_path / "elastic-stall" / "checkpoints"
    rotted: dict[str, int] = {}

    def freeze_and_rot(faults: StepFaults) -> None:
        faults.freeze_trainer()
        *_, before, newest = committed_steps(checkpoints)  # the fault may fire a few steps late: look, don't assume
        (checkpoints / str(newest) / "commit_success.txt").unlink()  # the newest step rots while it hangs
        rotted.update(newest=newest, before=before)

    since = cluster_connection.audit_position()
    with StepFaults(cluster_connection, "elastic-stall").at(25, freeze_and_rot) as faults:
        dag_run = dag.test()
    assert faults.fired == [25]
    assert states(dag_run) == {"pretrain": "success"}
    report = xcom(dag_run, "pretrain")
    [escalation] = report["escalations"]
    assert escalation["reason"] == "stalled" and "no training progress" in escalation["message"]
    assert report["full_restarts"] == 1 and report["final_step"] == 59 and report["slice_restarts"] == 0
    # The invalid newest step was moved aside, never deleted (with any save the freeze caught half-way), and
    # training resumed from the valid step before it.
    moved = [Path(m) for m in escalation["quarantined"]]
    # A save the freeze caught half-way may hold no items yet: only the rotted step is sure to have them.
    [rotted_moved] = [m for m in moved if m.name.startswith(f"{rotted['newest']}.")]
    assert (rotted_moved / "items").is_dir()
    assert all(m.parent.name == "quarantine" and m.is_dir() for m in moved)
    assert escalation["resumed_from_step"] == rotted["before"]
    # Told: the escalation and its reason, then each step moved aside and where it went.
    events = [r["alert"] for r in told(inbox)]
    assert events[0]["event"] == "full_restart" and events[0]["details"]["reason"] == "stalled"
    invalid = [e for e in events[1:] if e["event"] == "checkpoint_invalid"]
    assert len(invalid) == len(moved) == len(events) - 1
    assert {e["details"]["moved_to"] for e in invalid} == {str(m) for m in moved}
    [told_rot] = [e for e in invalid if e["details"]["step"] == rotted["newest"]]
    assert any(p.startswith("commit_marker_missing") for p in told_rot["details"]["problems"]), told_rot
    log = head_log(cluster_connection, report["jobsets"][1])
    assert f"restoring from this run's directory step {rotted['before']}" in log
    # A hung trainer has nothing to save: the old pods were stopped with a 1 s grace period, not their own 30 s
    # (a SIGSTOPped trainer cannot answer SIGTERM and would hold the restart for all of it).
    assert escalation["pod_grace_seconds"] == 1
    stopped = {
        str(e.name)
        for e in cluster_connection.audit_events(since)
        if e.verb == "delete" and e.resource == "pods" and e.query("gracePeriodSeconds") == "1"
    }
    old_pods = {p for p in stopped if p.startswith(f"{report['jobsets'][0]}-")}
    assert any(f"-{HEAD_REPLICATED_JOB}-" in p for p in old_pods) and len(old_pods) >= 2, stopped


def test_a_full_restart_and_then_a_spent_budget_are_told_to_the_notifiers_and_a_broken_one_changes_nothing(
    airflow_db: None, cluster_connection: UpstreamCluster, tmp_path: Path
) -> None:
    """The operator calls its notifiers (a real ``BaseNotifier`` subclass writing a file, and one that raises) at the
    escalation, with its reason and the budget left, and when the next slice loss finds the budget spent.

    The spent budget also fails the task naming it, and leaves nothing burning TPUs (one run for both: a budget of 1
    spent by the full restart before it, where a budget of 0 would be spent by the first loss)."""
    inbox = tmp_path / "inbox.jsonl"
    dag = elastic_dag(
        "elastic_alerts",
        tmp_path,
        max_slice_restarts=0,
        max_full_restarts=1,
        stall_timeout="timedelta(minutes=6)",
        alerts=f"[FileNotifier(path={str(inbox)!r}, fail=True), FileNotifier(path={str(inbox)!r})]",
        local_env={"LOCAL_STEP_SECONDS": "0.3"},
    )
    # The second loss comes in the second incarnation: it resumes from step 10 or later, and trains on to 30; at
    # 0.3 s a step the 29 steps after it outlast the fault's poll by over 8 s on a loaded machine (CI once missed a
    # fault at step 40, with 19 steps left, under a load of 10 on 2 cores).
    with StepFaults(cluster_connection, "elastic-alerts").at(15, kill_worker(1)).at(30, kill_worker(0)) as faults:
        dag_run = dag.test()
    assert faults.fired == [15, 30], faults
    assert states(dag_run) == {"pretrain": "failed"}  # the budget's failure, not the broken notifier's
    report = xcom(dag_run, "pretrain", "report")
    assert report["full_restarts"] == 1 and "full-restart budget spent: max_full_restarts=1" in report["failure"]
    # Whichever layer noticed first: our slice budget, or the worker Job's backoffLimit (0) failing the JobSet.
    assert "exceed max_slice_restarts=0" in report["failure"] or "ReachedMaxRestarts" in report["failure"]
    assert report["slice_restarts"] == 2  # a loss in each incarnation, each counted once
    # Nothing left burning TPUs: the JobSet ended (its worker Job's backoffLimit) or was deleted with the task.
    for jobset in jobsets_of(cluster_connection, "elastic-alerts"):
        assert jobset["metadata"].get("deletionTimestamp") or jobset["status"].get("terminalState") == "Failed"
    restart, spent = [r["alert"] for r in told(inbox)]
    assert [r["line"] for r in told(inbox)] == [
        "full_restart: elastic run escalated to full restart 1 of 1",
        "budget_spent: elastic run failed: max_full_restarts spent",
    ]
    assert restart["details"]["reason"] == report["escalations"][0]["reason"]
    assert restart["details"]["full_restarts_left"] == 0 and restart["details"]["max_full_restarts"] == 1
    assert restart["message"].startswith("full restart 1 of 1: ") and "(0 full restart(s) left)" in restart["message"]
    assert spent["details"] == {
        "budget": "max_full_restarts",
        "reason": "full_restart_budget_spent",
        "full_restarts_used": 1,
        "max_full_restarts": 1,
    }
    assert spent["message"] in report["failure"]
    assert (restart["dag_id"], restart["task_id"], restart["run_id"]) == ("elastic_alerts", "pretrain", dag_run.run_id)


def test_a_preemption_exit_short_of_the_target_is_a_full_restart_through_api_throttling(
    airflow_db: None, cluster_connection: UpstreamCluster, tmp_path: Path
) -> None:
    """MaxText exits 0 on SIGTERM (a preemption): the JobSet completes short of its target, and budget is left.

    The full restart's delete is throttled past the hook's retries (found by the chaos harness: a 429 burst longer
    than them used to fail the task mid-restart); the task rides it out and leaves one JobSet."""
    # Blocking mode (no deferral) on purpose: the same trigger and policy run inside the worker.
    dag = elastic_dag("elastic_short", tmp_path, stall_timeout="timedelta(minutes=6)", deferrable=False)
    # Only the escalation deletes JobSets: 6 throttled DELETEs outlast the provider's 5 attempts (each waits the
    # 429's Retry-After, 1 s), so the task's own ride-out must carry the delete through.
    injected = cluster_connection.faults.clear_api_faults()["injected"]
    cluster_connection.faults.fail_requests(429, count=6, path="jobsets", method="DELETE")
    try:
        with StepFaults(cluster_connection, "elastic-short").at(
            15, lambda f: f.signal_trainer(signal.SIGTERM)
        ) as faults:
            dag_run = dag.test()
    finally:
        throttled = cluster_connection.faults.clear_api_faults()["injected"] - injected
    assert throttled == 6, "the whole burst met the restart's delete"
    assert faults.fired == [15]
    assert states(dag_run) == {"pretrain": "success"}
    report = xcom(dag_run, "pretrain")
    [escalation] = report["escalations"]
    assert escalation["reason"] == "completed_short_of_target"
    assert "did not reach its final step" in escalation["message"] and "target step 59" in escalation["message"]
    assert report["full_restarts"] == 1 and report["final_step"] == 59
    resumed = escalation["resumed_from_step"]
    assert resumed is not None and 10 <= resumed < 59
    assert f"restoring from this run's directory step {resumed}" in head_log(cluster_connection, report["jobsets"][1])
    assert len(jobsets_of(cluster_connection, "elastic-short")) == 1


# API throttling through a full restart: test_a_preemption_exit_short_of_the_target_is_a_full_restart_through_
# api_throttling's escalation above (its delete is the one throttled; one run, not two).
