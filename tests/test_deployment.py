"""docker-compose.yml and Dockerfile: no Docker engine here, so check what can be checked without one."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
AIRFLOW_SERVICES = {
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
}


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def _airflow_pin() -> str:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [pin] = [d.split("==")[1] for d in dependencies if d.startswith("apache-airflow==")]
    return str(pin)


def test_compose_runs_every_airflow_component_from_one_image() -> None:
    services = _compose()["services"]
    assert set(services) >= AIRFLOW_SERVICES
    commands = {name: services[name]["command"][0] for name in AIRFLOW_SERVICES}
    assert commands == {
        "airflow-init": "db",
        "airflow-apiserver": "api-server",
        "airflow-scheduler": "scheduler",
        "airflow-dag-processor": "dag-processor",
        "airflow-triggerer": "triggerer",
    }
    assert {services[name]["image"] for name in AIRFLOW_SERVICES} == {"elastic-training-airflow:0.1.0"}
    for name in AIRFLOW_SERVICES - {"airflow-init"}:
        assert services[name]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"


def test_compose_kubernetes_connection_is_valid_json_pointing_at_the_mounted_kubeconfig() -> None:
    env = _compose()["services"]["airflow-scheduler"]["environment"]
    connection = json.loads(env["AIRFLOW_CONN_KUBERNETES_DEFAULT"])
    assert connection["conn_type"] == "kubernetes"
    mounted = [v.rsplit(":", 2)[1] for v in _compose()["services"]["airflow-scheduler"]["volumes"]]
    assert str(Path(connection["extra"]["kube_config_path"]).parent) in mounted
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].startswith("http://airflow-apiserver:8080/")
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/elastic-training/dags"


def test_dockerfile_builds_on_the_pinned_airflow_and_copies_every_package() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG AIRFLOW_VERSION=(\S+)$", dockerfile, re.M)[1] == _airflow_pin()  # type: ignore[index]
    copied = set(re.findall(r"^COPY \S+ (\w+) ", dockerfile, re.M))
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert {p.rstrip("*") for p in packages["include"]} <= copied
    for directory in copied:
        assert (ROOT / directory).is_dir(), f"Dockerfile copies {directory}/, which does not exist"
