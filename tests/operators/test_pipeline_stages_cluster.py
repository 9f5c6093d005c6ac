"""The nightly pipeline's evaluation and synthesis stages on the local cluster, on a run trained beforehand:
the stages' JobSets (the GKE ones: the MaxText image, MaxText's commands, one v5e 2x2 host) run the stand-ins,
the gate reads MaxText's result file and the dataset is published (real Airflow ``dag.test()``, deferrable
operators, the cluster over HTTP)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes import config as kube_config

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.constants import LABEL_STAGE
from elastic_training.operators.pipeline_config import PipelineConfig
from elastic_training.operators.pipeline_params import (
    LOCAL_EVAL_COMMAND,
    LOCAL_SYNTH_COMMAND,
    DagRunIdentity,
    validate_params,
)
from elastic_training.operators.spec import LOCAL_MAXTEXT_IMAGE
from tests.support.airflow_dags import NAMESPACE, dag_from_source, states, xcom

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

HEADER = """\
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG
from elastic_training.operators.pipeline import (
    StageJobSetOperator, gate_on_eval, publish_synthetic_dataset, synthetic_alias,
)
"""
STEP = 19
RUN = DagRunIdentity(
    dag_id="elastic_training_nightly",
    run_id="scheduled__2026-12-01T00:00:00+00:00",
    run_type="scheduled",
    logical_date=datetime(2026, 12, 1, tzinfo=UTC),
)
TASKS = (
    "validate_params",
    "validate_checkpoint",
    "evaluate",
    "gate_on_eval",
    "synthesize",
    "publish_synthetic_dataset",
)


def stages_dag(dag_id: str, config: PipelineConfig) -> Any:
    checkpoint = {"step": STEP, "path": f"{config.run_directory}/checkpoints/{STEP}", "valid": True}
    body = f"""
    with DAG({dag_id!r}, schedule=None) as dag:
        config = PythonOperator(task_id="validate_params", python_callable=lambda: {config.to_json()!r})
        checkpoint = PythonOperator(task_id="validate_checkpoint", python_callable=lambda: {checkpoint!r})
        evaluate = StageJobSetOperator(task_id="evaluate", stage="evaluate", poll_interval=1.0)
        gate = PythonOperator(task_id="gate_on_eval", python_callable=gate_on_eval)
        synthesize = StageJobSetOperator(task_id="synthesize", stage="synthesize", poll_interval=1.0)
        publish = PythonOperator(
            task_id="publish_synthetic_dataset",
            python_callable=publish_synthetic_dataset,
            outlets=[synthetic_alias({dag_id!r})],
        )
        config >> checkpoint >> evaluate >> gate >> synthesize >> publish
    """
    return dag_from_source(dag_id, body, HEADER)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> PipelineConfig:
    """The nightly configuration of a local run, and that run trained (default model, steps 0..19)."""
    from elastic_training.local.workloads.config import TrainConfig, parse_args
    from elastic_training.local.workloads.slices import StaticSliceHealth
    from elastic_training.local.workloads.trainer import Trainer

    root = tmp_path_factory.mktemp("stages")
    config = validate_params(
        {"base_output_directory": str(root), "run_name": "stages", "max_eval_loss": 4.8, "num_samples": 6},
        run=RUN,
        environ={"ELASTIC_TRAINING_DATA_DIR": str(root)},
    )
    keys = [f"base_output_directory={root}", f"run_name={config.run_name}", "steps=20", "checkpoint_period=10"]
    assert Trainer(parse_args(TrainConfig, keys), StaticSliceHealth(1)).run() == 0
    return config


def test_evaluation_gate_and_synthesis_run_on_the_local_cluster(
    airflow_db: None, cluster_connection: UpstreamCluster, trained: PipelineConfig
) -> None:
    dag_run = stages_dag("nightly_stages", trained).test()
    assert states(dag_run) == dict.fromkeys(
        [
            "validate_params",
            "validate_checkpoint",
            "evaluate",
            "gate_on_eval",
            "synthesize",
            "publish_synthetic_dataset",
        ],
        "success",
    )
    run = Path(trained.run_directory)
    [result] = (run / "eval_results").iterdir()
    assert result.name.startswith("lambada_openai_default_")
    gate = xcom(dag_run, "gate_on_eval")
    assert gate["passed"] and gate["step"] == STEP and gate["path"] == str(result)
    assert gate["checkpoint_path"] == f"{run}/checkpoints/{STEP}/items" and 0 < gate["loss"] <= 4.8
    dataset = xcom(dag_run, "publish_synthetic_dataset")
    assert dataset["samples"] == 6 and dataset["source_step"] == STEP
    assert dataset["path"] == f"{run}/synthetic/step_{STEP}"
    assert len(Path(dataset["samples_file"]).read_text().splitlines()) == 6
    # The stages ran as their GKE JobSets: the MaxText image and MaxText's commands, on the single-host v5e pool.
    core = client.CoreV1Api(kube_config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path)))
    for stage, command in (("evaluate", LOCAL_EVAL_COMMAND), ("synthesize", LOCAL_SYNTH_COMMAND)):
        [pod] = core.list_namespaced_pod(NAMESPACE, label_selector=f"{LABEL_STAGE}={stage}").items
        [container] = pod.spec.containers
        assert (container.image, container.command) == (LOCAL_MAXTEXT_IMAGE, list(command))
        assert container.resources.limits == {"google.com/tpu": "4"}
        assert (pod.spec.node_name, pod.status.phase) == ("gke-local-tpu-v5e-4-0", "Succeeded")
