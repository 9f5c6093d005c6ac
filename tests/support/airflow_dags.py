"""Real Airflow for tests: a fresh metadata DB, DAGs written to the dags folder and run with ``dag.test()``,
XCom and task states read back, and the local cluster wired in as the ``kubernetes_default`` connection."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, utils

from elastic_training.local.kubeconfig import write_kubeconfig
from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.rbac import ROLE_NAME, node_pool_reader_manifests, rbac_manifests
from tests.support.shared_cluster import shared_cluster

NAMESPACE = "default"
TOKEN_SECONDS = 6 * 3600  # outlives a module of end-to-end tests


@pytest.fixture(scope="module")
def airflow_db() -> None:
    """An empty Airflow metadata DB (SQLite under the session's AIRFLOW_HOME)."""
    from airflow.utils import db

    db.resetdb()


@pytest.fixture(scope="module")
def cluster_connection(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamCluster]:
    """A running local cluster, reachable as Airflow's ``kubernetes_default`` connection.

    The connection holds the operators' ServiceAccount, bound to the shipped Role, not the admin token:
    every call the operators make must be one the Role grants (least privilege proven, a missing verb
    is a 403). The cluster's own kubeconfig (admin) stays with the trainer pods and the tests' checks.
    """
    # GKE-like node pools (four v5e-16 pools, tpu-v5e-4 for the stages, cpu-np): the operators render the GKE
    # JobSets, and they must schedule.
    cluster = shared_cluster("v5e-small", tmp_path_factory.getbasetemp())
    kubeconfig = write_operators_kubeconfig(cluster)
    previous = os.environ.get("AIRFLOW_CONN_KUBERNETES_DEFAULT")
    os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps(
        {
            "conn_type": "kubernetes",
            "extra": {"kube_config_path": str(kubeconfig), "namespace": NAMESPACE},
        }
    )
    try:
        yield cluster
    finally:
        if previous is None:
            os.environ.pop("AIRFLOW_CONN_KUBERNETES_DEFAULT", None)
        else:
            os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = previous


def operators_kubeconfig(cluster: UpstreamCluster) -> Path:
    """Where :func:`write_operators_kubeconfig` puts the operators' kubeconfig for ``cluster``."""
    return cluster.workdir / "operators-kubeconfig"


def write_operators_kubeconfig(cluster: UpstreamCluster) -> Path:
    """The operators' kubeconfig for ``cluster``, written; returns its path.

    ``rbac_manifests(NAMESPACE)`` is created with the admin client, a token for its ServiceAccount is
    minted through the TokenRequest API, and the kubeconfig has that token and the cluster's server and CA.
    """
    admin = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        manifests = rbac_manifests(NAMESPACE)
        _create_or_replace(admin, manifests)
        (account,) = [m["metadata"]["name"] for m in manifests if m["kind"] == "ServiceAccount"]
        issued = client.CoreV1Api(admin).create_namespaced_service_account_token(
            account, NAMESPACE, {"spec": {"expirationSeconds": TOKEN_SECONDS}}
        )
    finally:
        admin.close()
    # Through the cluster's API fault proxy, so the operators meet the faults a test sets (`cluster.faults`).
    return write_kubeconfig(
        operators_kubeconfig(cluster), cluster.faults_url, issued.status.token, ca_pem=cluster.ca_pem
    )


def grant_node_reading(cluster: UpstreamCluster) -> None:
    """Bind the node-reading ClusterRole (deploy/rbac-node-pools.yaml) to the operators' account, as docs/rbac.md asks
    of a deployment that turns ``avoid_failing_node_pools`` on: without it the real RBAC refuses the node list, and the
    avoidance avoids nothing."""
    admin = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        _create_or_replace(admin, node_pool_reader_manifests(NAMESPACE))
    finally:
        admin.close()


def _create_or_replace(admin: client.ApiClient, manifests: list[dict[str, Any]]) -> None:
    """Create ``manifests``; one the shared cluster keeps from an earlier module is put back as shipped."""
    for manifest in manifests:
        try:
            utils.create_from_dict(admin, manifest, namespace=NAMESPACE)
        except utils.FailToCreateError as error:
            if any(e.status != 409 for e in error.api_exceptions):
                raise
            _replace(admin, manifest)


def _replace(admin: client.ApiClient, manifest: dict[str, Any]) -> None:
    """Put the shipped ``manifest`` in place of the one an earlier module left (a test may have narrowed a Role);
    a ServiceAccount or the node-reading ClusterRole and its binding are kept as they are."""
    name, kind = manifest["metadata"]["name"], manifest["kind"]
    rbac = client.RbacAuthorizationV1Api(admin)
    if kind == "Role":
        rbac.replace_namespaced_role(name, NAMESPACE, manifest)
    elif kind == "RoleBinding":
        rbac.replace_namespaced_role_binding(name, NAMESPACE, manifest)


def dag_from_source(dag_id: str, body: str, header: str) -> Any:
    """``dag.test()`` needs the DAG in a bundle: write it to the dags folder and load it from there."""
    from airflow.configuration import conf

    folder = Path(conf.get("core", "dags_folder"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dag_id}.py"
    path.write_text(header + "\n\n" + textwrap.dedent(body))
    spec = importlib.util.spec_from_file_location(f"test_dag_{dag_id}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def xcom(dag_run: Any, task_id: str, key: str = "return_value") -> Any:
    """The XCom value a task pushed in ``dag_run`` (``None`` when it pushed none)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel)
            .filter_by(dag_id=dag_run.dag_id, run_id=dag_run.run_id, task_id=task_id, key=key)
            .one_or_none()
        )
        return None if row is None else XComModel.deserialize_value(row)


def states(dag_run: Any) -> dict[str, str]:
    """Each task's final state in ``dag_run``."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = session.query(TaskInstance).filter_by(dag_id=dag_run.dag_id, run_id=dag_run.run_id).all()
        return {ti.task_id: str(ti.state) for ti in tis}


@contextlib.contextmanager
def operators_role_without(admin: client.ApiClient, resource: str, verb: str | None = None) -> Iterator[None]:
    """The operators' Role without ``verb`` on ``resource`` (every verb: its whole rule), as a Role bound from an
    older deploy/rbac.yaml; the shipped rules again after."""
    (role,) = [m for m in rbac_manifests(NAMESPACE) if m["kind"] == "Role"]
    rules: list[dict[str, Any]] = role["rules"]
    older = []
    for rule in rules:
        if rule["resources"] != [resource]:
            older.append(rule)
        elif verb is not None:
            older.append({**rule, "verbs": [v for v in rule["verbs"] if v != verb]})
    rbac = client.RbacAuthorizationV1Api(admin)
    rbac.patch_namespaced_role(ROLE_NAME, NAMESPACE, {"rules": older})
    try:
        yield
    finally:
        rbac.patch_namespaced_role(ROLE_NAME, NAMESPACE, {"rules": rules})
