"""The local cluster for the tests: the ``cluster`` fixture (one per test module, nodes from the module's
``CLUSTER_DESCRIPTION``), the ``k8s`` fixture (the official client's APIs over HTTP, `K8s`), and a read of the
JobSets in ``default``. The conftests of tests/local/cluster, tests/local/workloads and tests/operators register
the fixtures; a module that needs another cluster defines its own ``cluster``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client, config

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION
from tests.support.shared_cluster import shared_cluster


@dataclass(frozen=True)
class K8s:
    """The official client's APIs, configured from the cluster's kubeconfig."""

    api_client: client.ApiClient
    core: client.CoreV1Api
    batch: client.BatchV1Api
    custom: client.CustomObjectsApi
    kubeconfig: Path


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamCluster]:
    """A running local cluster (API, controllers, kubelet), shared by the tests of one module.

    A module sets its nodes with ``CLUSTER_DESCRIPTION = ...`` (a ``ClusterDescription``, a YAML path or a built-in
    name); without it ``v5e-small``, as most modules': a worker process then starts its cluster once, not at each
    change of description.
    """
    description = getattr(request.module, "CLUSTER_DESCRIPTION", None)
    yield shared_cluster(description, tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module")
def k8s(cluster: UpstreamCluster) -> Iterator[K8s]:
    """CoreV1Api, BatchV1Api and CustomObjectsApi talking to ``cluster`` over HTTP."""
    api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        yield K8s(
            api_client,
            client.CoreV1Api(api_client),
            client.BatchV1Api(api_client),
            client.CustomObjectsApi(api_client),
            cluster.kubeconfig_path,
        )
    finally:
        api_client.close()


def jobset_names(cluster: UpstreamCluster) -> set[str]:
    """Every JobSet in the ``default`` namespace, through the official client."""
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL
        )
        return {item["metadata"]["name"] for item in listed["items"]}
    finally:
        api.close()
