"""Through real Airflow (`dag.test()`) on the local cluster: a refused spec or image creates nothing, and a
connection's secrets (its kube_config with the bearer token, its password, its extras) reach no XCom value, no
rendered template field, no task log and no printed output of a whole elastic run."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from elastic_training.local.kubeconfig import read_endpoint, render_kubeconfig
from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION, LABEL_DAG_ID
from elastic_training.operators.images import ALLOWED_IMAGES_VARIABLE
from tests.support.airflow_dags import dag_from_source, operators_kubeconfig, states, xcom

HEADER = "from airflow.sdk import DAG\nfrom operators import ElasticJobSetOperator, JobSetOperator"


def jobsets_of_dag(cluster: UpstreamCluster, dag_id: str) -> list[str]:
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, label_selector=f"{LABEL_DAG_ID}={dag_id}"
        )
        return [item["metadata"]["name"] for item in listed["items"]]
    finally:
        api.close()


def _dag(dag_id: str, operator: str) -> Any:
    body = f"""
    with DAG({dag_id!r}, schedule=None) as dag:
        {operator}
    """
    return dag_from_source(dag_id, body, HEADER)


@pytest.mark.parametrize(
    ("dag_id", "operator", "says"),
    [
        (
            "refused_spec",
            'ElasticJobSetOperator(task_id="pretrain", run_name="{{ \'Not_A_Label\' }}",'
            ' base_output_directory="/tmp/x", steps=10, checkpoint_period=5, num_slices=1, runtime="local",'
            " deferrable=False)",
            "invalid run spec: run_name: 'Not_A_Label' is not a DNS-1123 label",
        ),
        (
            "refused_image",
            'JobSetOperator(task_id="job", name="job", image="docker.io/evil/miner:1", command=["true"],'
            " deferrable=False)",
            "refused before creating anything: image: 'docker.io/evil/miner:1' (main/main) is not allowed",
        ),
    ],
)
def test_a_refused_task_creates_nothing(
    airflow_db: None,
    cluster_connection: UpstreamCluster,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    dag_id: str,
    operator: str,
    says: str,
) -> None:
    monkeypatch.setenv(f"AIRFLOW_VAR_{ALLOWED_IMAGES_VARIABLE.upper()}", json.dumps(["local", "gcr.io/trusted/"]))
    dag_run = _dag(dag_id, operator).test()
    assert set(states(dag_run).values()) == {"failed"}
    assert jobsets_of_dag(cluster_connection, dag_id) == []
    assert xcom(dag_run, "pretrain" if dag_id == "refused_spec" else "job", "jobset_name") is None
    printed = capfd.readouterr()
    assert says in printed.out + printed.err


# ---- secrets ---------------------------------------------------------------------------------------------------

SECRET_PASSWORD = "FAKE-PASSWORD-7d1f0c"
SECRET_EXTRA = "FAKE-EXTRA-SECRET-93ab"


def _all_xcom_values(dag_id: str) -> str:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(XComModel).filter_by(dag_id=dag_id).all()
        return json.dumps([XComModel.deserialize_value(row) for row in rows], default=str)


def _rendered_fields(dag_id: str) -> str:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(RenderedTaskInstanceFields).filter_by(dag_id=dag_id).all()
        return json.dumps([row.rendered_fields for row in rows], default=str)


def _task_logs() -> str:
    """Task log files, when the executor writes them (`dag.test()` logs to the console: see `capfd`)."""
    logs = Path(os.environ["AIRFLOW_HOME"]) / "logs"
    return "\n".join(p.read_text(errors="replace") for p in logs.rglob("*") if p.is_file())


@pytest.mark.slow
def test_connection_secrets_reach_no_xcom_log_or_output(
    airflow_db: None,
    cluster_connection: UpstreamCluster,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    # The operators' ServiceAccount token (TokenRequest API), straight to kube-apiserver: a real bearer token.
    token = read_endpoint(operators_kubeconfig(cluster_connection)).token
    assert token
    kube_config = render_kubeconfig(cluster_connection.url, token, ca_pem=cluster_connection.ca_pem)
    monkeypatch.setenv(
        "AIRFLOW_CONN_K8S_SECRET",
        json.dumps(
            {
                "conn_type": "kubernetes",
                "password": SECRET_PASSWORD,
                "extra": {"kube_config": kube_config, "namespace": "default", "x_note": SECRET_EXTRA},
            }
        ),
    )
    dag = _dag(
        "secrets_run",
        f'ElasticJobSetOperator(task_id="pretrain", run_name="secrets-run", base_output_directory={str(tmp_path)!r},'
        ' steps=6, checkpoint_period=2, num_slices=1, runtime="local", kubernetes_conn_id="k8s_secret",'
        " deferrable=True, poll_interval=1.0)",
    )
    dag_run = dag.test()
    assert states(dag_run) == {"pretrain": "success"}
    report = xcom(dag_run, "pretrain")
    assert report["final_step"] == 5
    printed = capfd.readouterr()
    places = {
        "xcom": _all_xcom_values("secrets_run"),
        "rendered fields": _rendered_fields("secrets_run"),
        "task logs": _task_logs(),
        "output": printed.out + printed.err,
    }
    # The search looks where the run's data and its task log are.
    assert "secrets-run" in places["xcom"]
    assert "created JobSet secrets-run-" in places["task logs"] + places["output"]
    for secret in (token, SECRET_PASSWORD, SECRET_EXTRA, "kube_config", "Bearer"):
        for where, text in places.items():
            assert secret not in text, f"{secret[:12]}... found in {where}"
