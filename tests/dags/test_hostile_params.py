"""Hostile trigger-form values through real Airflow (``dag.test(run_conf=...)``).

Each is refused naming the param, by Airflow's schema check when the run is created or by the first
task, and no JobSet is ever created. Every case of the validation itself is in
tests/operators/test_pipeline_params.py; these show that both layers hold in a real run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from elastic_training.local.upstream_cluster import UpstreamCluster
from tests.support.airflow_dags import states, xcom
from tests.support.local_cluster import jobset_names
from tests.support.repo_dags import repo_dag

CASES: list[tuple[str, dict[str, Any]]] = [
    ("run_name", {"run_name": "x;rm -rf /"}),
    ("base_output_directory", {"base_output_directory": "/etc"}),
    ("base_output_directory", {"base_output_directory": "ROOT/../../etc"}),
    ("base_output_directory", {"base_output_directory": "ROOT/$(id)"}),
    ("steps", {"steps": 1}),
    ("inject_slice_failure", {"inject_slice_failure": True, "runtime": "gke"}),
]


@pytest.mark.parametrize(("param", "conf"), CASES, ids=[f"{p}-{i}" for i, (p, _) in enumerate(CASES)])
def test_hostile_value_is_refused_naming_the_param_and_nothing_is_created(
    airflow_db: None, cluster_connection: UpstreamCluster, allowed_root: Path, param: str, conf: dict[str, Any]
) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    conf = {k: v.replace("ROOT", str(allowed_root)) if isinstance(v, str) else v for k, v in conf.items()}
    conf.setdefault("base_output_directory", str(allowed_root))
    before = jobset_names(cluster_connection)
    dag = repo_dag("elastic_training_nightly")
    try:
        dag_run = dag.test(run_conf=conf)
    except ParamValidationError as error:  # the form's schema: the run is never created
        assert f"param {param}" in str(error)
    else:  # past the schema: the first task refuses it
        refused = xcom(dag_run, "validate_params", "refused")
        assert refused is not None and refused["param"] == param, refused
        task_states = states(dag_run)
        assert task_states["validate_params"] == "failed"
        assert task_states["pretrain"] == "upstream_failed"
        assert task_states["arm_slice_failure"] == "upstream_failed"
    assert jobset_names(cluster_connection) == before
