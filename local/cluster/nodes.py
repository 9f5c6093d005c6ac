"""The cluster's nodes: registered from a cluster description at start, as each node's kubelet does.

Follows kubernetes/kubernetes ``pkg/kubelet/kubelet_node_status.go`` (``registerWithAPIServer``: the
kubelet creates its Node with labels, capacity, allocatable and a ``Ready`` condition) and GKE's node
pools (:mod:`local.cluster.cluster_description`). A node the kubelet runs pods on must exist and be
``Ready``; :func:`node_is_ready` is that test.
"""

from __future__ import annotations

from elastic_training.local.cluster.resources import NODES, ApiError
from elastic_training.local.cluster.store import Obj, Store
from elastic_training.local.descriptions.cluster_description import ClusterDescription


def node_is_ready(node: Obj | None) -> bool:
    """Whether ``node`` exists and its ``Ready`` condition is True."""
    if node is None:
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def register_nodes(store: Store, description: ClusterDescription) -> list[str]:
    """Create every node of ``description`` that does not exist yet, but those of pools provisioned on demand;
    returns the names created."""
    return create_nodes(store, description.nodes(on_demand=False))


def create_nodes(store: Store, nodes: list[Obj]) -> list[str]:
    """Create each of ``nodes`` that does not exist yet; returns the names created."""
    created = []
    for node in nodes:
        try:
            store.create(NODES, node)
        except ApiError as err:
            if err.code != 409:
                raise
            continue
        created.append(node["metadata"]["name"])
    return created
