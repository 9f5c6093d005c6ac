"""The URLs behind the operator's extra links."""

from __future__ import annotations

from urllib.parse import unquote

import pytest

from elastic_training.operators.links import console_logs_url, console_workload_url, view_url


def test_view_url_opens_the_dag_run_tab(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com/")
    assert view_url("nightly", "manual__2026-01-01T00:00:00+00:00") == (
        "https://airflow.example.com/dags/nightly/runs/manual__2026-01-01T00%3A00%3A00%2B00%3A00/plugin/elastic-training"
    )


def test_console_workload_url_is_the_one_xpk_prints() -> None:
    url = console_workload_url("pretrain-1a2b", "ml", project="proj", location="us-central2", cluster="tpu")
    assert (
        url
        == "https://console.cloud.google.com/kubernetes/service/us-central2/tpu/ml/pretrain-1a2b/details?project=proj"
    )
    assert console_workload_url("x", "ml", project="proj", location="", cluster="") == (
        "https://console.cloud.google.com/kubernetes/workload/overview?project=proj"
    )


def test_console_logs_url_selects_every_incarnation_of_the_jobset() -> None:
    url = console_logs_url("pretrain-1a2b", "ml", project="proj", location="us-central2", cluster="tpu")
    assert url.startswith("https://console.cloud.google.com/logs/query;query=") and url.endswith(
        ";duration=P7D?project=proj"
    )
    query = unquote(url.split(";query=")[1].split(";duration")[0]).splitlines()
    assert query == [
        'resource.type="k8s_container"',
        'resource.labels.namespace_name="ml"',
        'resource.labels.project_id="proj"',
        'resource.labels.location="us-central2"',
        'resource.labels.cluster_name="tpu"',
        'resource.labels.pod_name:"pretrain-1a2b-"',
    ]
