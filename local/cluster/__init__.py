"""The one-machine stand-in for GKE: a Kubernetes API with JobSet semantics, pods run as processes."""

from __future__ import annotations

from elastic_training.local.cluster.cluster import ClusterStartError, Faults, LocalCluster
from elastic_training.local.descriptions.cluster_description import (
    ClusterDescription,
    DescriptionError,
    load_description,
)

__all__ = ["ClusterDescription", "ClusterStartError", "DescriptionError", "Faults", "LocalCluster", "load_description"]
