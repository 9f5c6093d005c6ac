"""Fixtures for the operator tests: the local cluster and its real clients, as the cluster tests use them."""

from __future__ import annotations

from tests.local.cluster.conftest import K8s, cluster, k8s

__all__ = ["K8s", "cluster", "k8s"]
