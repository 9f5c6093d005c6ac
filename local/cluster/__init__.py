"""The one-machine stand-in for GKE: a Kubernetes API with JobSet semantics, pods run as processes."""

from __future__ import annotations

from local.cluster.cluster import ClusterStartError, Faults, LocalCluster

__all__ = ["ClusterStartError", "Faults", "LocalCluster"]
