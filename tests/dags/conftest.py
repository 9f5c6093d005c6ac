"""Shared by the DAG tests: the repository's DAG files loaded into the test Airflow, runs under a temp root."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from elastic_training.local.cluster import LocalCluster
from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION
from elastic_training.operators.pipeline_params import VARIABLE_ALLOWED_ROOTS
from tests.support.airflow_dags import dag_from_source

DAGS = Path(__file__).resolve().parents[2] / "dags"


def repo_dag(dag_id: str) -> Any:
    """The DAG of ``dags/<dag_id>.py``, written into the test dags folder (``dag.test()`` needs a bundle)."""
    return dag_from_source(dag_id, (DAGS / f"{dag_id}.py").read_text(), "")


@pytest.fixture(scope="module")
def allowed_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A temp directory that the ``elastic_training_allowed_roots`` Variable (from the environment) allows."""
    root = tmp_path_factory.mktemp("runs")
    key = f"AIRFLOW_VAR_{VARIABLE_ALLOWED_ROOTS.upper()}"
    previous = os.environ.get(key)
    os.environ[key] = json.dumps([str(root), "gs://"])
    try:
        yield root
    finally:
        if previous is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = previous


def jobset_names(cluster: LocalCluster) -> set[str]:
    """Every JobSet in the ``default`` namespace, through the official client."""
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL
        )
        return {item["metadata"]["name"] for item in listed["items"]}
    finally:
        api.close()
