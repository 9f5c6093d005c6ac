"""`ElasticJobSetOperator` end to end: real Airflow (``dag.test()``, deferrable, triggers inline), the local
cluster over HTTP, the real JAX trainer and Orbax checkpoints, faults injected at training steps."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from local.cluster import LocalCluster
from operators.constants import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION, LABEL_RUN_NAME
from tests.support.airflow_dags import dag_from_source, states, xcom
from tests.support.step_faults import StepFaults, kill_worker

pytestmark = pytest.mark.slow

HEADER = """\
from datetime import timedelta
from airflow.sdk import DAG
from operators import ElasticJobSetOperator
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
_CODE = {"stall_timeout", "slice_restart_window"}


def jobsets_of(cluster: LocalCluster, run_name: str) -> list[dict[str, Any]]:
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, label_selector=f"{LABEL_RUN_NAME}={run_name}"
        )
        return list(listed["items"])
    finally:
        api.close()


def test_slice_killed_mid_run_recovers_in_process(
    airflow_db: None, cluster_connection: LocalCluster, tmp_path: Path
) -> None:
    dag = elastic_dag("elastic_inproc", tmp_path, stall_timeout="timedelta(minutes=5)")
    with StepFaults(cluster_connection, "elastic-inproc").at(25, kill_worker(1)) as faults:
        dag_run = dag.test()
    assert faults.fired == [25]
    assert states(dag_run) == {"pretrain": "success"}
    report = xcom(dag_run, "pretrain")
    print("REPORT", report)
    assert report["final_step"] == 59 and report["target_step"] == 59
    assert report["slice_restarts"] == 1
    assert report["in_process_recoveries"] == 1
    assert report["full_restarts"] == 0 and report["escalations"] == []
    [recovery] = report["recoveries"]
    assert recovery["failed_step"] >= 25 and recovery["restored_step"] in (20, 30)
    assert 0 <= recovery["steps_lost"] <= 10
    for phase in ("detected_at", "slices_ready_at", "restored_at", "first_step_at"):
        assert recovery[phase] is not None
    assert (
        recovery["detected_at"] <= recovery["slices_ready_at"] <= recovery["restored_at"] <= recovery["first_step_at"]
    )
    assert 0 < report["goodput"] <= 1
    assert xcom(dag_run, "pretrain", "jobset_name") == report["jobset_name"]
    assert len(jobsets_of(cluster_connection, "elastic-inproc")) == 1
