"""`ElasticJobSetOperator` end to end: real Airflow (``dag.test()``, deferrable, triggers inline), the local
cluster over HTTPS, the real JAX trainer and Orbax checkpoints, faults injected at training steps."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from elastic_training.local.cluster import LocalCluster
from elastic_training.operators.constants import (
    HEAD_REPLICATED_JOB,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    LABEL_RUN_NAME,
)
from tests.support.airflow_dags import dag_from_source, states, xcom
from tests.support.step_faults import StepFaults, kill_worker

pytestmark = pytest.mark.slow

HEADER = """\
from datetime import timedelta
from airflow.sdk import DAG
from elastic_training.operators import ElasticJobSetOperator
"""


def elastic_dag(dag_id: str, base: Path, **overrides: Any) -> Any:
    """A one-task DAG running a short elastic local run; ``overrides`` replace operator arguments."""
    arguments: dict[str, Any] = {
        "run_name": dag_id.replace("_", "-"),
        "base_output_directory": str(base),
        "steps": 60,
        "checkpoint_period": 10,
        "num_slices": 2,
        "runtime": "local",
        "maxtext_args": {},
        "max_slice_restarts": 3,
        "max_full_restarts": 1,
        "deferrable": True,
        "poll_interval": 1.0,
    }
    arguments.update(overrides)
    rendered = ",\n        ".join(f"{k}={v}" if k in _CODE else f"{k}={v!r}" for k, v in arguments.items())
    body = f"""
    with DAG({dag_id!r}, schedule=None) as dag:
        ElasticJobSetOperator(
            task_id="pretrain",
            {rendered},
        )
    """
    return dag_from_source(dag_id, body, HEADER)


# Arguments written as code in the DAG file rather than as literals.
_CODE = {"stall_timeout", "startup_timeout", "slice_restart_window"}


def jobsets_of(cluster: LocalCluster, run_name: str) -> list[dict[str, Any]]:
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, label_selector=f"{LABEL_RUN_NAME}={run_name}"
        )
        return list(listed["items"])
    finally:
        api.close()


# A slice killed mid-run and recovered in process: tests/plugin/test_real_run.py's
# test_slice_killed_mid_run_recovers_in_process, on the run that module's view tests read (one run, not two).


# One host of a 4-host slice lost (3 slices of v5e 4x4, the operator's GKE JobSet as is: its shape and the
# trainer's Pathways allocation) is one slice restart, recovered in process: tests/operators/test_seed_scenarios.py's
# test_one_lost_host_is_one_slice_restart_recovered_in_process, on the seed's run (one run, not two).


def head_log(cluster: LocalCluster, jobset: str) -> str:
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        core = client.CoreV1Api(api)
        [head] = core.list_namespaced_pod(
            "default",
            label_selector=f"jobset.sigs.k8s.io/jobset-name={jobset},jobset.sigs.k8s.io/replicatedjob-name=pathways-head",
        ).items
        response = core.read_namespaced_pod_log(
            head.metadata.name, "default", container="jax-tpu", _preload_content=False
        )
        return str(response.data.decode(errors="replace"))
    finally:
        api.close()


# Slices dying past max_slice_restarts get exactly one full restart, which restores the step the report names:
# tests/operators/test_seed_scenarios.py's test_slice_budget_spent_in_slices_gets_exactly_one_full_restart (the
# seed's 3 slices of 4 hosts, one run, not two); that a force-deleted worker pod is a slice restart, as the seed's
# lost hosts are, is test_api_errors_and_expiring_watches_never_fail_the_task's kill below.


def committed_steps(checkpoints: Path) -> list[int]:
    return sorted(
        int(p.name) for p in checkpoints.iterdir() if p.name.isdigit() and (p / "commit_success.txt").exists()
    )


def test_frozen_trainer_is_a_stall_and_a_full_restart_mends_it(
    airflow_db: None, cluster_connection: LocalCluster, tmp_path: Path
) -> None:
    # The stall clock runs from the first step (the start-up, JAX's start, the compilation and after the full
    # restart the restore, has startup_timeout, generous): 40 s is only the freeze's, against steps of ~0.1 s (a few
    # seconds on a 7x-loaded 2-core box) and saves that log their start and end. elastic_timeout_seconds under it,
    # as the lint requires; 30 s is what the first attempt's wait for the workers needs on a loaded box.
    dag = elastic_dag(
        "elastic_stall",
        tmp_path,
        stall_timeout="timedelta(seconds=40)",
        startup_timeout="timedelta(minutes=10)",
        elastic_timeout_seconds=30,
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


def test_full_restart_budget_spent_fails_naming_it(
    airflow_db: None, cluster_connection: LocalCluster, tmp_path: Path
) -> None:
    dag = elastic_dag(
        "elastic_spent", tmp_path, max_slice_restarts=0, max_full_restarts=0, stall_timeout="timedelta(minutes=6)"
    )
    with StepFaults(cluster_connection, "elastic-spent").at(15, kill_worker(1)):
        dag_run = dag.test()
    assert states(dag_run) == {"pretrain": "failed"}
    report = xcom(dag_run, "pretrain", "report")
    assert "full-restart budget spent: max_full_restarts=0" in report["failure"]
    # Whichever layer noticed first: our slice budget, or the worker Job's backoffLimit (0) failing the JobSet.
    assert "exceed max_slice_restarts=0" in report["failure"] or "ReachedMaxRestarts" in report["failure"]
    assert report["full_restarts"] == 0 and report["slice_restarts"] == 1
    # Nothing left burning TPUs: the JobSet ended (its worker Job's backoffLimit) or was deleted with the task.
    for jobset in jobsets_of(cluster_connection, "elastic-spent"):
        assert jobset["metadata"].get("deletionTimestamp") or jobset["status"].get("terminalState") == "Failed"


def test_a_preemption_exit_short_of_the_target_is_a_full_restart_through_api_throttling(
    airflow_db: None, cluster_connection: LocalCluster, tmp_path: Path
) -> None:
    """MaxText exits 0 on SIGTERM (a preemption): the JobSet completes short of its target, and budget is left.

    The full restart's delete is throttled past the hook's retries (found by the chaos harness: a 429 burst longer
    than them used to fail the task mid-restart); the task rides it out and leaves one JobSet."""
    # Blocking mode (no deferral) on purpose: the same trigger and policy run inside the worker.
    dag = elastic_dag("elastic_short", tmp_path, stall_timeout="timedelta(minutes=6)", deferrable=False)
    # Only the escalation deletes JobSets: 15 throttled DELETEs outlast the provider's 5 attempts three times.
    cluster_connection.faults.fail_requests(429, count=15, path="jobsets", method="DELETE")
    try:
        with StepFaults(cluster_connection, "elastic-short").at(
            15, lambda f: f.signal_trainer(signal.SIGTERM)
        ) as faults:
            dag_run = dag.test()
    finally:
        cluster_connection.faults.clear()
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


def test_api_errors_and_expiring_watches_never_fail_the_task(
    airflow_db: None, cluster_connection: LocalCluster, tmp_path: Path
) -> None:
    dag = elastic_dag("elastic_flaky", tmp_path, stall_timeout="timedelta(minutes=6)")
    faults_api = cluster_connection.faults
    faults_api.fail_requests(500, probability=0.3, path="jobsets")
    faults_api.add_latency(0.05, path="jobsets")
    try:
        with StepFaults(cluster_connection, "elastic-flaky") as faults:
            faults.at(10, lambda f: f.cluster.faults.expire_watches(compact=True))
            faults.at(20, kill_worker(0))
            faults.at(30, lambda f: f.cluster.faults.expire_watches(compact=True))
            faults.at(35, lambda f: f.cluster.faults.fail_requests(500, count=20))
            dag_run = dag.test()
    finally:
        faults_api.clear()
    assert faults.fired == [10, 20, 30, 35]
    assert states(dag_run) == {"pretrain": "success"}
    report = xcom(dag_run, "pretrain")
    assert report["slice_restarts"] == 1 and report["full_restarts"] == 0 and report["final_step"] == 59


def test_task_killed_mid_watch_and_run_again_adopts_its_jobset(
    airflow_db: None, cluster_connection: LocalCluster, tmp_path: Path
) -> None:
    """A worker dies while the task waits (SIGKILL, no cleanup); the rerun finds its JobSet and never makes a second."""
    import os
    import subprocess
    import sys
    import time
    from datetime import UTC, datetime

    from airflow.configuration import conf

    dag = elastic_dag("elastic_adopt", tmp_path, steps=150, stall_timeout="timedelta(minutes=6)")
    logical_date = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
    dag_file = Path(conf.get("core", "dags_folder")) / "elastic_adopt.py"
    script = (
        "import importlib.util, sys\n"
        "from datetime import datetime, UTC\n"
        f"spec = importlib.util.spec_from_file_location('adopt_dag', {str(dag_file)!r})\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        f"when = datetime.fromisoformat({logical_date.isoformat()!r})\n"
        "module.dag.test(logical_date=when, run_after=when)\n"
    )
    first = subprocess.Popen(
        [sys.executable, "-c", script], env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        with StepFaults(cluster_connection, "elastic-adopt") as probe:
            deadline = time.monotonic() + 240
            while (probe.latest_step() or -1) < 15:
                assert first.poll() is None, "the first attempt ended on its own"
                assert time.monotonic() < deadline, "training did not reach step 15"
                time.sleep(0.5)
    finally:
        first.kill()  # the worker dies mid-watch: no on_kill, no cleanup
        first.wait()
    [before] = jobsets_of(cluster_connection, "elastic-adopt")

    dag_run = dag.test(logical_date=logical_date, run_after=logical_date)  # the same DAG run, so the same task

    assert states(dag_run) == {"pretrain": "success"}
    report = xcom(dag_run, "pretrain")
    assert report["final_step"] == 149 and report["full_restarts"] == 0
    [after] = jobsets_of(cluster_connection, "elastic-adopt")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert report["jobset_name"] == before["metadata"]["name"]


# API throttling through a full restart: test_a_preemption_exit_short_of_the_target_is_a_full_restart_through_
# api_throttling's escalation above (its delete is the one throttled; one run, not two).


def test_a_scale_up_after_a_replica_resize_is_a_recovery_in_the_report(
    airflow_db: None, cluster_connection: LocalCluster, tmp_path: Path
) -> None:
    """elastic_min_slice_count=1: a lost slice lets the run go on with one; its worker comes back, and at the next
    checkpoint pathwaysutils' `Scale up requested.` then MaxText's restore grow it again: a recovery of its own."""
    # The worker must be back before the run ends: on an idle machine the tiny model trains its 60 steps in about a
    # second, before the replaced worker starts (a fresh clone's idle run, 2026-12-02). 0.3 s a step, as an
    # accelerator's, leaves the 45 steps after the kill over 13 s for it, and load slows the steps with the worker.
    dag = elastic_dag(
        "elastic_scale_up",
        tmp_path,
        elastic_min_slice_count=1,
        stall_timeout="timedelta(minutes=6)",
        local_env={"LOCAL_STEP_SECONDS": "0.3"},
    )
    with StepFaults(cluster_connection, "elastic-scale-up").at(15, kill_worker(1)) as faults:
        dag_run = dag.test()
    assert faults.fired == [15]
    assert states(dag_run) == {"pretrain": "success"}
    report = xcom(dag_run, "pretrain")
    assert report["final_step"] == 59 and report["full_restarts"] == 0
    kinds = [r["kind"] for r in report["recoveries"]]
    assert kinds[0] == "slice_down" and "scale_up" in kinds
    assert report["scale_up_recoveries"] == kinds.count("scale_up") >= 1
    assert report["in_process_recoveries"] == len(kinds)
    up = report["recoveries"][kinds.index("scale_up")]
    # Requested right after a checkpoint, so it restores that very step: nothing is run again.
    assert up["steps_lost"] == 0 and up["slices"] == 2 and up["complete"]
    assert up["detected_at"] <= up["slices_ready_at"] <= up["restored_at"] <= up["first_step_at"]
    # The proxy may lose the one slice the run may continue without (xpk's --elastic-slices).
    [jobset] = jobsets_of(cluster_connection, "elastic-scale-up")
    head = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    proxy = next(c for c in head["initContainers"] if c["name"] == "pathways-proxy")
    assert "--num_elastic_slices=1" in proxy["args"]
