"""`ElasticJobSetOperator` end to end: real Airflow (``dag.test()``, deferrable, triggers inline), the local
cluster over HTTPS, the real JAX trainer and Orbax checkpoints, faults injected at training steps.

Ride-outs: faults a task rides out without a full restart (API errors and expiring watches, its own process
killed, a slice lost and back); the full restarts are tests/operators/test_elastic_operator.py's."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow.utils.session import create_session

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.plugin.runs import rendered_of
from tests.support.airflow_dags import states, xcom
from tests.support.elastic_runs import elastic_dag, jobsets_of
from tests.support.step_faults import StepFaults, kill_worker

pytestmark = pytest.mark.slow

# A slice killed mid-run and recovered in process: tests/plugin/test_real_run.py's
# test_slice_killed_mid_run_recovers_in_process, on the run that module's view tests read (one run, not two).


# One host of a 4-host slice lost (3 slices of v5e 4x4, the operator's GKE JobSet as is: its shape and the
# trainer's Pathways allocation) is one slice restart, recovered in process: tests/operators/test_seed_scenarios.py's
# test_one_lost_host_is_one_slice_restart_recovered_in_process, on the seed's run (one run, not two).


def test_api_errors_and_expiring_watches_never_fail_the_task(
    airflow_db: None, cluster_connection: UpstreamCluster, tmp_path: Path
) -> None:
    # Its run name and steps are Jinja in the frozen Training group: rendered when the task runs (the run
    # directory, the JobSet's run-name label the faults find it by, and the final step say so).
    dag = elastic_dag(
        "elastic_flaky",
        tmp_path,
        run_name="{{ dag.dag_id | replace('_', '-') }}",
        steps="{{ 30 * 2 }}",
        stall_timeout="timedelta(minutes=6)",
        # Four faults at steps 10 to 35, each fired on a look at the log through a flaky API: 0.2 s a step leaves
        # the last one (at 35) about 5 s of training to be seen in on a loaded machine.
        local_env={"LOCAL_STEP_SECONDS": "0.2"},
    )
    faults_api = cluster_connection.faults
    faults_api.fail_requests(500, probability=0.3, path="jobsets")
    faults_api.latency(0.05, path="jobsets")
    try:
        with StepFaults(cluster_connection, "elastic-flaky") as faults:
            faults.at(10, lambda f: f.cluster.faults.expire_watches(compact=True))
            faults.at(20, kill_worker(0))
            faults.at(30, lambda f: f.cluster.faults.expire_watches(compact=True))
            # Every request fails for 5 s, whoever makes it: bounded in time, as an API server's bad minute is (20
            # failures bounded by count took 8 s to over two minutes: the client taking most spaced them by backoff).
            faults.at(35, lambda f: f.cluster.faults.fail_requests(500, seconds=5.0))
            dag_run = dag.test()
    finally:
        faults_api.clear_api_faults()
    assert faults.fired == [10, 20, 30, 35]
    assert states(dag_run) == {"pretrain": "success"}
    report = xcom(dag_run, "pretrain")
    assert report["slice_restarts"] == 1 and report["full_restarts"] == 0 and report["final_step"] == 59
    assert report["run_directory"] == f"{tmp_path}/elastic-flaky" and report["target_step"] == 59
    # The rendered fields Airflow keeps (the Rendered Template view; the plugin's view before a report exists).
    ti = SimpleNamespace(dag_id=dag_run.dag_id, run_id=dag_run.run_id, task_id="pretrain", map_index=-1)
    with create_session() as session:
        rendered = rendered_of(session, ti)
    assert (rendered["training.run_name"], rendered["steps"], rendered["num_slices"]) == ("elastic-flaky", "60", 2)


def test_task_killed_mid_watch_and_run_again_adopts_its_jobset(
    airflow_db: None, cluster_connection: UpstreamCluster, tmp_path: Path
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


def test_a_scale_up_after_a_replica_resize_is_a_recovery_in_the_report(
    airflow_db: None, cluster_connection: UpstreamCluster, tmp_path: Path
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
    # The killed slice's loss, then its scale-up. Under load the run may also start on the one slice its minimum
    # allows and grow at its first checkpoint (ci27: a scale-up at step 0 first): that one is a recovery too.
    lost = kinds.index("slice_down")
    assert kinds.count("slice_down") == 1 and "scale_up" in kinds[lost:], kinds
    assert report["scale_up_recoveries"] == kinds.count("scale_up") <= 2
    assert report["in_process_recoveries"] == len(kinds)
    assert all(r["complete"] for r in report["recoveries"]), report["recoveries"]  # none opened by a record line
    up = report["recoveries"][lost + kinds[lost:].index("scale_up")]
    # Requested right after a checkpoint, so it restores that very step: nothing is run again.
    assert up["steps_lost"] == 0 and up["slices"] == 2 and up["complete"]
    assert up["detected_at"] <= up["slices_ready_at"] <= up["restored_at"] <= up["first_step_at"]
    # The proxy may lose the one slice the run may continue without (xpk's --elastic-slices).
    [jobset] = jobsets_of(cluster_connection, "elastic-scale-up")
    head = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    proxy = next(c for c in head["initContainers"] if c["name"] == "pathways-proxy")
    assert "--num_elastic_slices=1" in proxy["args"]
