"""Fixtures for the operator tests: the local cluster and its real clients, as the cluster tests use them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client, config

from elastic_training.local.cluster import LocalCluster
from tests.support.lifecycle_runs import custom
from tests.support.local_cluster import cluster, k8s

__all__ = ["admin", "cluster", "custom", "k8s"]


@pytest.fixture
def admin(cluster_connection: LocalCluster) -> Iterator[client.ApiClient]:
    """An API client of the local cluster's admin (the operators' own account is ``kubernetes_default``'s)."""
    api = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    try:
        yield api
    finally:
        api.close()
