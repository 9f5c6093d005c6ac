"""Fixtures for the local cluster tests: one cluster per test module, and configured real clients."""

from __future__ import annotations

from tests.support.local_cluster import cluster, k8s

__all__ = ["cluster", "k8s"]
