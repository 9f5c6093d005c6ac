"""Operators driven the way Airflow's task runner drives them, without a scheduler: a stand-in task instance and
state store, an `ElasticJobSetOperator` on a short local run, one-pod JobSets, and the ``custom`` fixture (a
`CustomObjectsApi` of the local cluster's admin; tests/operators/conftest.py registers it). Moved from
tests/operators/test_lifecycle.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators import ElasticJobSetOperator, kube_names
from elastic_training.operators.constants import (
    HEAD_MAIN_CONTAINER,
    HEAD_REPLICATED_JOB,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
)
from elastic_training.operators.run_state import STATE_KEY
from tests.support.elastic_runs import in_groups

DAG_ID = "lifecycle_dag"


class _TaskInstance:
    dag_id, map_index = DAG_ID, -1

    def __init__(self, task_id: str, run_id: str, *, try_number: int = 1, max_tries: int = 0) -> None:
        self.task_id, self.run_id = task_id, run_id
        self.try_number, self.max_tries = try_number, max_tries
        self.start_date = datetime.now(UTC)
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


class _StateStore(dict[str, Any]):
    def set(self, key: str, value: Any) -> None:
        self[key] = value


@pytest.fixture
def custom(cluster_connection: UpstreamCluster) -> Iterator[client.CustomObjectsApi]:
    api = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    try:
        yield client.CustomObjectsApi(api)
    finally:
        api.close()


def _get(custom: client.CustomObjectsApi, name: str) -> dict[str, Any] | None:
    found: list[dict[str, Any]] = custom.list_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, field_selector=f"metadata.name={name}"
    )["items"]
    return found[0] if found else None


def _delete_mine(custom: client.CustomObjectsApi, identity: dict[str, str]) -> None:
    for found in custom.list_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, label_selector=kube_names.label_selector(identity)
    )["items"]:
        with contextlib.suppress(ApiException):  # gone meanwhile
            custom.delete_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, found["metadata"]["name"]
            )


def _one_pod_jobset(
    name: str, labels: dict[str, str], command: list[str], *, image: str = "local", args: list[str] | None = None
) -> dict[str, Any]:
    """A JobSet of one head pod (``jax-tpu``) running `command`: a cheap stand-in for a trainer."""
    container: dict[str, Any] = {"name": HEAD_MAIN_CONTAINER, "image": image, "command": command}
    if args is not None:
        container["args"] = args
    pod = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [container]}
    job = {
        "completionMode": "Indexed",
        "completions": 1,
        "parallelism": 1,
        "backoffLimit": 0,
        "template": {"spec": pod},
    }
    return {
        "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [{"name": HEAD_REPLICATED_JOB, "replicas": 1, "template": {"spec": job}}],
        },
    }


def _elastic(tmp_path: Path | str, run_name: str, **kwargs: Any) -> ElasticJobSetOperator:
    arguments: dict[str, Any] = {
        "task_id": "pretrain",
        "run_name": run_name,
        "base_output_directory": str(tmp_path),
        "steps": 21,
        "checkpoint_period": 10,
        "num_slices": 1,
        "runtime": "local",
        "max_full_restarts": 1,
    }
    arguments.update(kwargs)
    return ElasticJobSetOperator(**in_groups(arguments))


def _stored(name: str, uid: str | None, **more: Any) -> _StateStore:
    return _StateStore({STATE_KEY: {"jobset_name": name, "jobset_uid": uid, **more}})
