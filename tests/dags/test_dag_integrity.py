"""The repository's DAGs load without errors, have owners and tags, no cycles, and a complete trigger form."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from typing import Any

import pytest

from tests.support.repo_dags import DAGS

DAG_IDS = ("elastic_training_nightly", "elastic_training_fault_drill")


@pytest.fixture(scope="module")
def dagbag() -> Any:
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_every_dag_file_imports(dagbag: Any) -> None:
    assert dagbag.import_errors == {}
    assert set(DAG_IDS) <= set(dagbag.dag_ids)


@pytest.mark.parametrize("dag_id", DAG_IDS)
def test_owners_tags_no_cycles_and_it_serializes(dagbag: Any, dag_id: str) -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    dag = dagbag.dags[dag_id]
    assert "elastic-training" in dag.tags
    assert dag.max_active_runs == 1 and not dag.catchup
    for task in dag.tasks:
        assert task.owner == "ml-platform", task.task_id
    dag.check_cycle()
    assert DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag)).task_ids == dag.task_ids
    first = [t.task_id for t in dag.tasks if not t.upstream_list]
    assert first == ["validate_params"]  # nothing can be created before the params are checked


def test_nightly_runs_daily_and_stages_follow_the_pipeline(dagbag: Any) -> None:
    dag = dagbag.dags["elastic_training_nightly"]
    assert dag.schedule == "@daily"
    chain = ["validate_params", "arm_slice_failure", "pretrain", "validate_checkpoint", "evaluate"]
    chain += ["gate_on_eval", "synthesize", "publish_synthetic_dataset"]
    for upstream, downstream in itertools.pairwise(chain):
        assert downstream in dag.get_task(upstream).downstream_task_ids
    assert dag.get_task("slice_failure_result").trigger_rule == "all_done"


@pytest.mark.parametrize("dag_id", DAG_IDS)
def test_the_trigger_form_is_typed_titled_described_and_sectioned(dagbag: Any, dag_id: str) -> None:
    dag = dagbag.dags[dag_id]
    params = dag.params
    required = {"runtime", "run_name", "base_output_directory", "steps", "checkpoint_period", "num_slices"}
    required |= {"max_slice_restarts", "max_full_restarts", "stall_timeout_minutes", "inject_slice_failure"}
    required |= {"failure_at_step"}
    if dag_id == "elastic_training_nightly":
        required |= {"max_eval_loss", "num_samples"}
    assert required <= set(params.keys())
    sections = set()
    for name in params:
        schema = params.get_param(name).schema
        kinds = schema["type"] if isinstance(schema.get("type"), list) else [schema.get("type")]
        assert [k for k in kinds if k != "null"] in (["string"], ["integer"], ["number"], ["boolean"], ["array"]), name
        assert schema.get("title") and params.get_param(name).description, name
        sections.add(schema["section"])
        if set(kinds) & {"integer", "number"}:
            assert "maximum" in schema and ("minimum" in schema or "exclusiveMinimum" in schema), name
    assert {"Model and data", "Scale", "Resilience budgets", "Fault drill"} <= sections
    assert params.get_param("runtime").schema["enum"] == ["local", "gke"]
    params.validate()  # the defaults pass their own schema
    assert params["runtime"] == "local" and 60 <= params["steps"] <= 100 and params["num_slices"] == 2


@pytest.mark.parametrize("dag_id", DAG_IDS)
def test_a_dag_file_parses_without_the_kubernetes_clients(dag_id: str) -> None:
    """The Kubernetes clients are most of a DAG file's import cost, paid at each parse and by each task: they load
    only when a task calls a cluster (issue 26; `JobSetTaskOperator._hook`)."""
    script = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('dag_file', {str(DAGS / (dag_id + '.py'))!r})\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'kubernetes_asyncio'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
