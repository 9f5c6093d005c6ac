"""RBAC manifests: the shipped deploy/rbac.yaml is the rendered default, the grants are least privilege, and
the local cluster, which enforces RBAC, grants the operators' kubeconfig exactly the Role and refuses the rest."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.rbac import main, rbac_manifests, render_yaml
from tests.support.airflow_dags import operators_kubeconfig

KUBECTL = shutil.which("kubectl")
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
        ("", "pods", "delete"),  # one by one, uid-conditional: a full restart shortens a hung trainer's grace
        ("", "pods/log", "get"),
        ("kueue.x-k8s.io", "workloads", "list"),  # read-only: the queue's reason, never an admission changed
        ("kueue.x-k8s.io", "workloads", "watch"),
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


# -- enforced by the local cluster, for the operators' own kubeconfig --------------------------------

_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
# (group, resource, subresource): what the operators touch, their neighbours, and what they must not read.
_RESOURCES = (
    ("jobset.x-k8s.io", "jobsets", ""),
    ("jobset.x-k8s.io", "jobsets", "status"),
    ("batch", "jobs", ""),
    ("", "pods", ""),
    ("", "pods", "log"),
    ("", "pods", "exec"),
    ("", "pods", "status"),
    ("", "events", ""),
    ("", "secrets", ""),
    ("", "configmaps", ""),
    ("", "serviceaccounts", ""),
    ("", "serviceaccounts", "token"),
    ("rbac.authorization.k8s.io", "roles", ""),
    ("rbac.authorization.k8s.io", "rolebindings", ""),
    ("kueue.x-k8s.io", "workloads", ""),
    ("kueue.x-k8s.io", "workloads", "status"),
    ("kueue.x-k8s.io", "localqueues", ""),
    ("kueue.x-k8s.io", "clusterqueues", ""),
)
_FORBIDDEN_DELETE = (
    'jobs.batch "any-job" is forbidden: User "system:serviceaccount:default:elastic-training" cannot delete '
    'resource "jobs" in API group "batch" in the namespace "default"'
)


def test_the_cluster_grants_the_operators_account_exactly_the_role(cluster_connection: UpstreamCluster) -> None:
    (role,) = [m for m in rbac_manifests("default") if m["kind"] == "Role"]
    granted = set()
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                name, _, subresource = resource.partition("/")
                granted |= {(group, name, subresource, verb) for verb in rule["verbs"]}
    api = config.new_client_from_config(config_file=str(operators_kubeconfig(cluster_connection)))
    reviews = client.AuthorizationV1Api(api)
    allowed = set()
    for group, resource, subresource in _RESOURCES:
        for verb in _VERBS:
            attributes = {"namespace": "default", "group": group, "resource": resource, "verb": verb}
            review = reviews.create_self_subject_access_review(
                {"spec": {"resourceAttributes": {**attributes, "subresource": subresource}}}
            )
            if review.status.allowed:
                allowed.add((group, resource, subresource, verb))
    assert allowed == granted
    api.close()


def test_a_request_outside_the_role_is_403_through_the_official_client(cluster_connection: UpstreamCluster) -> None:
    api = config.new_client_from_config(config_file=str(operators_kubeconfig(cluster_connection)))
    core = client.CoreV1Api(api)
    core.list_namespaced_pod("default")  # inside the Role
    with pytest.raises(client.ApiException) as caught:
        client.BatchV1Api(api).delete_namespaced_job("any-job", "default")  # the garbage collector's, not ours
    assert caught.value.status == 403
    assert json.loads(caught.value.body)["message"] == _FORBIDDEN_DELETE
    with pytest.raises(client.ApiException) as caught:
        core.list_namespaced_pod("kube-system")  # a Role grants nothing outside its namespace
    assert caught.value.status == 403
    with pytest.raises(client.ApiException) as caught:
        client.CustomObjectsApi(api).patch_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", "any-jobset", {"spec": {"suspend": True}}
        )
    assert caught.value.status == 403
    with pytest.raises(client.ApiException) as caught:  # Kueue's Workloads are read, never changed
        client.CustomObjectsApi(api).patch_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", "default", "workloads", "any-workload", {"spec": {"active": False}}
        )
    assert caught.value.status == 403
    api.close()


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (no `kubectl` on PATH)")
def test_kubectl_with_the_operators_kubeconfig_is_refused_outside_the_role(
    cluster_connection: UpstreamCluster,
) -> None:
    kubeconfig = operators_kubeconfig(cluster_connection)

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        assert KUBECTL is not None
        env = {"KUBECONFIG": str(kubeconfig), "KUBECACHEDIR": str(kubeconfig.parent / "kube-cache"), "HOME": "/tmp"}
        return subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True, timeout=120, check=False)

    def can_i(*args: str) -> str:
        return kubectl("auth", "can-i", *args).stdout.strip()

    assert can_i("create", "jobsets.jobset.x-k8s.io") == "yes"
    assert can_i("get", "pods", "--subresource=log") == "yes"
    assert can_i("watch", "jobs.batch") == "yes"
    assert can_i("delete", "pods") == "yes"
    assert can_i("deletecollection", "pods") == "no"
    assert can_i("delete", "jobs.batch") == "no"
    assert can_i("get", "secrets") == "no"
    assert can_i("patch", "jobsets.jobset.x-k8s.io") == "no"
    assert can_i("list", "pods", "--namespace=kube-system") == "no"
    refused = kubectl("delete", "job", "any-job")
    assert refused.returncode == 1
    assert refused.stderr.strip() == f"Error from server (Forbidden): {_FORBIDDEN_DELETE}"


def test_the_node_pools_cluster_role_is_one_read_verb_and_its_file_is_rendered() -> None:
    """avoid_failing_node_pools' grant: list nodes, nothing else, bound to the account (deploy/rbac-node-pools.yaml)."""
    from elastic_training.operators.rbac import node_pool_reader_manifests

    role, binding = node_pool_reader_manifests("ml", "airflow-worker")
    assert role["kind"] == "ClusterRole" and role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}
    ]
    assert binding["kind"] == "ClusterRoleBinding" and binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "airflow-worker", "namespace": "ml"}]
    shipped = DEPLOY.parent / "rbac-node-pools.yaml"
    assert list(yaml.safe_load_all(shipped.read_text())) == node_pool_reader_manifests("default")


def test_kueues_configuration_is_read_only_with_the_opt_in_role_and_its_file_is_rendered(
    cluster_connection: UpstreamCluster,
) -> None:
    """Kueue's ConfigMap (kueue-system/kueue-manager-config, published as Kueue's manifests install it, holding the
    Configuration the manager runs with) is outside the operators' Role: their read is a 403 and they fall back to
    their options; with the opt-in Role (deploy/rbac-kueue-config.yaml) the same read returns Kueue's
    waitForPodsReady."""
    from kubernetes import utils

    from elastic_training.operators import Capacity, ElasticJobSetOperator, Scale, Training
    from elastic_training.operators.kueue_config import from_config_map
    from elastic_training.operators.rbac import kueue_config_reader_manifests

    role, binding = kueue_config_reader_manifests("ml", "airflow-worker")
    assert role["rules"][0]["resourceNames"] == ["kueue-manager-config"] and role["rules"][0]["verbs"] == ["get"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "airflow-worker", "namespace": "ml"}]
    shipped = DEPLOY.parent / "rbac-kueue-config.yaml"
    assert list(yaml.safe_load_all(shipped.read_text())) == kueue_config_reader_manifests("default")

    operator = ElasticJobSetOperator(
        task_id="pretrain",
        training=Training(
            run_name="kueue-config-read", base_output_directory="/tmp/unused", steps=20, checkpoint_period=5
        ),
        scale=Scale(num_slices=2),
        capacity=Capacity(queue_name="multislice-queue", kueue_recovery_timeout=120.0),
        runtime="local",
    )
    refused = operator._pods_ready_timeouts()  # 403: the operators' options stand in
    assert refused is not None and refused.source.startswith("the task's kueue_pods_ready_timeout")
    assert refused.recovery_timeout_seconds == 120.0
    # Kueue restarted with this Configuration (the shared cluster's reset restarts it with its own for the next module)
    cluster_connection.configure_kueue({"waitForPodsReady": {"timeout": "7m", "recoveryTimeout": "4m"}})
    admin = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    try:
        for manifest in kueue_config_reader_manifests("default"):
            utils.create_from_dict(admin, manifest)
        found = operator._pods_ready_timeouts()
        assert found is not None and found.source == "the ConfigMap kueue-system/kueue-manager-config"
        assert (found.enabled, found.timeout_seconds, found.recovery_timeout_seconds) == (True, 420.0, 240.0)
        data = client.CoreV1Api(admin).read_namespaced_config_map("kueue-manager-config", "kueue-system").data
        assert from_config_map(data, "x") == dataclasses.replace(found, source="x")
    finally:
        rbac = client.RbacAuthorizationV1Api(admin)
        for manifest in reversed(kueue_config_reader_manifests("default")):
            delete = rbac.delete_namespaced_role if manifest["kind"] == "Role" else rbac.delete_namespaced_role_binding
            delete(manifest["metadata"]["name"], "kueue-system")
        admin.close()
