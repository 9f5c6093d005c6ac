"""deploy/helm/rbac-existing-airflow.yaml on a running cluster, and the per-task pod_override docs/deploy.md shows.

The file is applied as the admin (kube-apiserver validates the RBAC objects); then, for
each of the chart's accounts, a SelfSubjectAccessReview impersonating it says what it may do in the JobSet
namespace: the tasks that ask for `elastic-training` and the triggerer get the operators' Role, the api-server
the live view's reads, and an account the file does not name (the chart's worker) nothing; only the tasks' account
may list nodes (the ClusterRole ``avoid_failing_node_pools`` needs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config, utils
from kubernetes.client import models as k8s

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.constants import JOBSET_GROUP

ROOT = Path(__file__).resolve().parents[2]
CHECKS = [
    (JOBSET_GROUP, "jobsets", "", "create"),
    (JOBSET_GROUP, "jobsets", "", "watch"),
    (JOBSET_GROUP, "jobsets", "", "delete"),
    ("batch", "jobs", "", "watch"),
    ("", "pods", "", "list"),
    ("", "pods", "", "watch"),
    ("", "pods", "log", "get"),
    ("", "pods", "", "delete"),
    ("", "secrets", "", "get"),
]
OPERATORS = set(CHECKS) - {("", "secrets", "", "get")}  # the Role of deploy/rbac.yaml
LIVE_VIEW = {("", "pods", "", "list"), ("", "pods", "log", "get")}


def allowed_for(cluster: UpstreamCluster, account: str, namespace: str) -> set[tuple[str, str, str, str]]:
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    api.set_default_header("Impersonate-User", account)
    try:
        reviews = client.AuthorizationV1Api(api)
        found = set()
        for group, resource, subresource, verb in CHECKS:
            attributes = {"namespace": namespace, "group": group, "resource": resource, "verb": verb}
            review = reviews.create_self_subject_access_review(
                {"spec": {"resourceAttributes": {**attributes, "subresource": subresource}}}
            )
            if review.status.allowed:
                found.add((group, resource, subresource, verb))
        return found
    finally:
        api.close()


def lists_nodes(cluster: UpstreamCluster, account: str) -> bool:
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    api.set_default_header("Impersonate-User", account)
    try:
        review = client.AuthorizationV1Api(api).create_self_subject_access_review(
            {"spec": {"resourceAttributes": {"group": "", "resource": "nodes", "verb": "list"}}}
        )
        return bool(review.status.allowed)
    finally:
        api.close()


def test_each_charts_account_gets_exactly_what_its_component_needs(cluster: UpstreamCluster) -> None:
    admin = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        for namespace in ("airflow", "tpu-jobs"):  # the shared cluster may have them from an earlier run
            try:
                client.CoreV1Api(admin).create_namespace({"metadata": {"name": namespace}})
            except client.ApiException as error:
                if error.status != 409:
                    raise
        text = (ROOT / "deploy" / "helm" / "rbac-existing-airflow.yaml").read_text()
        for manifest in (doc for doc in yaml.safe_load_all(text) if doc):
            try:
                utils.create_from_dict(admin, manifest)
            except utils.FailToCreateError as error:
                if any(e.status != 409 for e in error.api_exceptions):
                    raise
    finally:
        admin.close()

    def account(name: str) -> str:
        return f"system:serviceaccount:airflow:{name}"

    assert allowed_for(cluster, account("elastic-training"), "tpu-jobs") == OPERATORS
    assert allowed_for(cluster, account("airflow-triggerer"), "tpu-jobs") == OPERATORS
    assert allowed_for(cluster, account("airflow-api-server"), "tpu-jobs") == LIVE_VIEW
    assert allowed_for(cluster, account("airflow-worker"), "tpu-jobs") == set()  # the other DAGs' tasks
    assert allowed_for(cluster, account("elastic-training"), "airflow") == set()  # only the JobSet namespace
    # avoid_failing_node_pools: the tasks may list nodes (cluster-scoped), and no other account may.
    assert [
        name
        for name in ("elastic-training", "airflow-triggerer", "airflow-api-server", "airflow-worker")
        if lists_nodes(cluster, account(name))
    ] == ["elastic-training"]


def test_the_pod_override_runs_only_that_task_as_the_operators_account() -> None:
    """The executor_config of docs/deploy.md, merged into the chart's worker pod as KubernetesExecutor does."""
    from airflow.providers.cncf.kubernetes.pod_generator import PodGenerator

    executor_config: dict[str, Any] = {
        "pod_override": k8s.V1Pod(
            spec=k8s.V1PodSpec(service_account_name="elastic-training", containers=[k8s.V1Container(name="base")])
        )
    }
    chart_worker = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(labels={"component": "worker", "release": "airflow"}),
        spec=k8s.V1PodSpec(
            service_account_name="airflow-worker",
            containers=[k8s.V1Container(name="base", image="team/airflow:3.3.2", args=["airflow", "tasks", "run"])],
        ),
    )
    merged = PodGenerator.reconcile_pods(chart_worker, executor_config["pod_override"])
    assert merged is not None and merged.spec is not None
    assert merged.spec.service_account_name == "elastic-training"
    (container,) = merged.spec.containers
    assert (container.name, container.image, container.args) == (
        "base",
        "team/airflow:3.3.2",
        ["airflow", "tasks", "run"],
    )
    assert merged.metadata.labels == {"component": "worker", "release": "airflow"}
    assert chart_worker.spec.service_account_name == "airflow-worker"  # every other task keeps the chart's
