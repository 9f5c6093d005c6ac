"""The agent's nodes: registration with kube-apiserver and the Node status the kubelet reports.

Stands for the kubelet's ``pkg/kubelet/kubelet_node_status.go``: ``registerWithAPIServer`` creates the Node with its
labels, taints and status (capacity = allocatable, conditions, addresses, ``daemonEndpoints``), or, when a Node of
that name exists, takes it over and writes its status; ``tryUpdateNodeStatus`` writes the conditions again with a
fresh ``lastHeartbeatTime`` every ``nodeStatusReportFrequency``. The Node objects themselves are GKE's, from the
cluster description (:func:`elastic_training.local.descriptions.cluster_description.node_object`).

kube-apiserver reaches a node's kubelet API at the node's preferred address (``InternalIP``, 127.0.0.1 for every
node here) and ``status.daemonEndpoints.kubeletEndpoint.Port``, so each node gets a port of its own.

It does not run the node's health checks: the pressure conditions are always False and Ready is True while the
agent reports; only the agent's silence (a lost host) makes the node lifecycle controller change them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from elastic_training.local.descriptions.cluster_description import ClusterDescription, node_object
from elastic_training.local.kube_objects import now_rfc3339
from elastic_training.local.nodeagent.api import STRATEGIC_MERGE, ApiClient, ApiStatusError, Obj

NODE_STATUS_REPORT_SECONDS = 300.0  # the kubelet's nodeStatusReportFrequency (5 min while leases carry the heartbeat)
_PRESSURE_CONDITIONS = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)


@dataclass
class AgentNode:
    """One node the agent plays the kubelet of: its Node manifest, kubelet API port and reporting state."""

    name: str
    manifest: Obj
    port: int
    uid: str = ""
    lost: bool = False
    ready_since: str = field(default_factory=now_rfc3339)  # the Ready condition's lastTransitionTime
    last_report: float = 0.0  # loop time of the last status write

    def status(self) -> Obj:
        """The status the kubelet reports: the description's capacity, conditions with a fresh heartbeat,
        addresses, node info and the kubelet endpoint."""
        status: Obj = dict(self.manifest["status"])
        status["conditions"] = self.conditions()
        status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": self.port}}
        return status

    def conditions(self) -> list[Obj]:
        heartbeat = now_rfc3339()
        conditions = [
            {
                "type": kind,
                "status": "False",
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": heartbeat,
                "lastTransitionTime": self.ready_since,
            }
            for kind, reason, message in _PRESSURE_CONDITIONS
        ]
        conditions.append(
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": heartbeat,
                "lastTransitionTime": self.ready_since,
            }
        )
        return conditions


def agent_nodes(description: ClusterDescription, ports: list[int]) -> list[AgentNode]:
    """The description's nodes (but those of pools provisioned on demand), each with one of ``ports``."""
    manifests = [
        node_object(description, pool, name)
        for pool in description.pools
        if not pool.on_demand
        for name in description.node_names(pool)
    ]
    if len(ports) < len(manifests):
        raise ValueError(f"{len(manifests)} nodes need as many kubelet ports, got {len(ports)}")
    return [AgentNode(m["metadata"]["name"], m, port) for m, port in zip(manifests, ports, strict=False)]


def node_manifest(description: ClusterDescription, name: str) -> Obj:
    """The Node manifest of the description's node ``name`` (of any pool, on demand or not)."""
    for pool in description.pools:
        if name in description.node_names(pool):
            return node_object(description, pool, name)
    raise ValueError(f"no node {name!r} in the cluster description")


def node_count(description: ClusterDescription) -> int:
    """How many nodes :func:`agent_nodes` makes (how many kubelet ports to open)."""
    return sum(len(description.node_names(pool)) for pool in description.pools if not pool.on_demand)


async def register(api: ApiClient, node: AgentNode) -> None:
    """Create the Node (or take over the existing one) and write its status, as the kubelet registers."""
    body = {"apiVersion": "v1", "kind": "Node", **node.manifest}
    body["status"] = node.status()
    try:
        created = await api.request("POST", "/api/v1/nodes", body=body)
    except ApiStatusError as err:
        if err.code != 409:
            raise
        created = await api.request("GET", f"/api/v1/nodes/{node.name}")
    node.uid = str(created["metadata"]["uid"])
    await report_status(api, node)  # status may be dropped on create, and an existing node has another port


async def report_status(api: ApiClient, node: AgentNode) -> None:
    """Write the node's status (conditions merged by type, a fresh heartbeat) through ``nodes/{name}/status``."""
    await api.request(
        "PATCH",
        f"/api/v1/nodes/{node.name}/status",
        body={"status": node.status()},
        content_type=STRATEGIC_MERGE,
    )
    node.last_report = asyncio.get_running_loop().time()


async def unregister(api: ApiClient, name: str) -> None:
    """Delete the Node (its VM is gone, as the cloud provider's node controller does); gone already is fine."""
    try:
        await api.request("DELETE", f"/api/v1/nodes/{name}")
    except ApiStatusError as err:
        if err.code != 404:
            raise
