"""The elastic end-to-end tests' helpers: a one-task DAG of `ElasticJobSetOperator` on a short local run, and what
the tests read back from the local cluster (a run's JobSets, the head's log) and from a run's checkpoints."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes import client, config

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION, LABEL_RUN_NAME
from elastic_training.operators.options import GROUPS, flat_names
from tests.support.airflow_dags import dag_from_source

HEADER = """\
from datetime import timedelta
from airflow.sdk import DAG
from elastic_training.operators import Budgets, Capacity, ElasticJobSetOperator, History, Scale, Training
"""


def elastic_dag(dag_id: str, base: Path, **overrides: Any) -> Any:
    """A one-task DAG running a short elastic local run; ``overrides`` replace operator arguments, a group's field
    by its name (``max_slice_restarts=0``), written in its group in the DAG file (``budgets=Budgets(...)``)."""
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
    fields, top = split_into_groups(arguments)
    made = [
        f"{group}={GROUPS[group].__name__}({', '.join(_written(k, v) for k, v in values.items())})"
        for group, values in fields.items()
    ]
    rendered = ",\n            ".join([*made, *(_written(k, v) for k, v in top.items())])
    body = f"""
    with DAG({dag_id!r}, schedule=None) as dag:
        ElasticJobSetOperator(
            task_id="pretrain",
            {rendered},
        )
    """
    alerting = (
        "from elastic_training.operators.alerts import Alerts\nfrom tests.support.alert_notifier import FileNotifier\n"
    )
    header = HEADER + (alerting if "alerts" in arguments else "")
    return dag_from_source(dag_id, body, header)


# Arguments written as code in the DAG file rather than as literals (``alerts``: e.g. "[FileNotifier(path=...)]",
# "Alerts((FileNotifier(path=...),), queued_after=10)").
_CODE = {"stall_timeout", "startup_timeout", "slice_restart_window", "alerts"}


def _written(key: str, value: Any) -> str:
    return f"{key}={value}" if key in _CODE else f"{key}={value!r}"


def split_into_groups(arguments: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Operator arguments spelled flat (``max_slice_restarts=0``) as ``({group: {field: value}}, the others)``."""
    names = flat_names()
    fields: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for key, value in arguments.items():
        if key in names:
            group, field = names[key]
            fields.setdefault(group, {})[field] = value
        else:
            top[key] = value
    return fields, top


def in_groups(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``ElasticJobSetOperator`` keyword arguments with the flat ones made into their option groups."""
    fields, top = split_into_groups(arguments)
    return {**top, **{group: GROUPS[group](**values) for group, values in fields.items()}}


def jobsets_of(cluster: UpstreamCluster, run_name: str) -> list[dict[str, Any]]:
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, label_selector=f"{LABEL_RUN_NAME}={run_name}"
        )
        return list(listed["items"])
    finally:
        api.close()


def head_log(cluster: UpstreamCluster, jobset: str) -> str:
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


def committed_steps(checkpoints: Path) -> list[int]:
    return sorted(
        int(p.name) for p in checkpoints.iterdir() if p.name.isdigit() and (p / "commit_success.txt").exists()
    )
