"""Fixtures for the operator tests: the local cluster (the upstream control plane) and its real clients."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client, config

from elastic_training.local.upstream_cluster import UpstreamCluster
from tests.support.lifecycle_runs import custom
from tests.support.local_cluster import cluster, k8s

__all__ = ["admin", "cluster", "custom", "k8s"]


@pytest.fixture
def admin(cluster_connection: UpstreamCluster) -> Iterator[client.ApiClient]:
    """An API client of the cluster's admin, straight to kube-apiserver (the operators' own account is
    ``kubernetes_default``'s)."""
    api = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    try:
        yield api
    finally:
        api.close()
