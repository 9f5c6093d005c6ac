"""RBAC manifests: the shipped deploy/rbac.yaml is the rendered default, and the grants are least privilege."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from operators.rbac import main, rbac_manifests, render_yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"


def test_deploy_yaml_is_the_rendered_default() -> None:
    assert list(yaml.safe_load_all(DEPLOY.read_text())) == rbac_manifests("default")


def test_exact_grants() -> None:
    (role,) = [m for m in rbac_manifests("ml") if m["kind"] == "Role"]
    grants = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert grants == {
        ("jobset.x-k8s.io", "jobsets", "create"),
        ("jobset.x-k8s.io", "jobsets", "get"),
        ("jobset.x-k8s.io", "jobsets", "list"),
        ("jobset.x-k8s.io", "jobsets", "watch"),
        ("jobset.x-k8s.io", "jobsets", "delete"),
        ("batch", "jobs", "list"),
        ("batch", "jobs", "watch"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "pods/log", "get"),
    }
    assert not any("*" in str(rule) for rule in role["rules"])


def test_namespaced_and_bound_to_the_service_account() -> None:
    account, role, binding = rbac_manifests("ml", "airflow-worker")
    assert [m["kind"] for m in (account, role, binding)] == ["ServiceAccount", "Role", "RoleBinding"]
    assert {m["metadata"]["namespace"] for m in (account, role, binding)} == {"ml"}
    assert account["metadata"]["name"] == "airflow-worker"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "airflow-worker", "namespace": "ml"}]


def test_cli_prints_the_same_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["default"]) == 0
    out = capsys.readouterr().out
    assert out == DEPLOY.read_text()
    assert render_yaml(rbac_manifests("default")) in out
