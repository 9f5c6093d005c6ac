"""Node heartbeats: a Lease per node in ``kube-node-lease``, renewed every 10 s, and the periodic status report.

Stands for the kubelet's node lease controller (``k8s.io/component-helpers/apimachinery/lease``, driven by
``pkg/kubelet/nodelease``: duration 40 s, renewed every quarter of it, the Lease owned by its Node) and the
status loop that reports the node's conditions every ``nodeStatusReportFrequency``. The node lifecycle controller
in kube-controller-manager watches both: when neither moves for ``--node-monitor-grace-period`` it sets the node's
conditions to ``Unknown`` and taints it ``node.kubernetes.io/unreachable``.

A lost node (:meth:`Heartbeats.lose`) gets neither until :meth:`Heartbeats.restore`, which reports at once, as a
kubelet coming back does. It does not retry a failed renewal sooner than the next tick: a missed beat or two is what
the lease's duration is for.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from elastic_training.local.kube_objects import now_rfc3339
from elastic_training.local.nodeagent.api import TRANSPORT_ERRORS, ApiClient, ApiStatusError, Obj
from elastic_training.local.nodeagent.nodes import NODE_STATUS_REPORT_SECONDS, AgentNode, report_status

log = logging.getLogger(__name__)

NODE_LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
LEASE_RENEW_SECONDS = LEASE_DURATION_SECONDS / 4


def micro_time(moment: datetime | None = None) -> str:
    """A ``metav1.MicroTime``, as Lease times are written."""
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_body(node: AgentNode, previous: Obj | None = None) -> Obj:
    """The node's Lease renewed now: held by the node for 40 s, owned by the Node (``previous`` keeps its version)."""
    lease: Obj = (
        dict(previous)
        if previous is not None
        else {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": node.name,
                "namespace": NODE_LEASE_NAMESPACE,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid}],
            },
        }
    )
    lease["spec"] = {
        **(lease.get("spec") or {}),
        "holderIdentity": node.name,
        "leaseDurationSeconds": LEASE_DURATION_SECONDS,
        "renewTime": micro_time(),
    }
    return lease


class Heartbeats:
    """Renews every reporting node's Lease and reports its status on schedule, on the agent's loop."""

    def __init__(self, api: ApiClient, nodes: list[AgentNode]) -> None:
        self._api = api
        self._nodes = {node.name: node for node in nodes}
        self._leases: dict[str, Obj] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Renew every lease once (the nodes are live when this returns), then keep renewing."""
        await self._beat()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="node heartbeats")

    async def stop(self) -> None:
        """Stop renewing and reporting (the leases then run out, as a stopped kubelet's)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def add(self, nodes: list[AgentNode]) -> None:
        """Heartbeats for nodes registered after the start: each lease renewed at once, then on every tick."""
        for node in nodes:
            self._nodes[node.name] = node
            self._leases.pop(node.name, None)  # a node registered again owns a new Lease
        await asyncio.gather(*(self._beat_node(node, report=False) for node in nodes))

    def remove(self, names: list[str]) -> None:
        """No more heartbeats for ``names`` (their Node objects are deleted; the garbage collector takes the
        Leases they own)."""
        for name in names:
            self._nodes.pop(name, None)
            self._leases.pop(name, None)

    def lost(self, name: str) -> bool:
        """Whether the node's heartbeats are stopped."""
        return self._nodes[name].lost

    def lose(self, name: str) -> None:
        """Stop the node's heartbeats: no lease renewal, no status report."""
        self._nodes[name].lost = True

    async def restore(self, name: str) -> None:
        """Resume the node's heartbeats: Ready again from now, its lease renewed and its status reported at once."""
        node = self._nodes[name]
        if not node.lost:
            return
        node.lost = False
        node.ready_since = now_rfc3339()
        await self._beat_node(node, report=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(LEASE_RENEW_SECONDS)
            await self._beat()

    async def _beat(self) -> None:
        now = asyncio.get_running_loop().time()
        beats = [
            self._beat_node(node, report=now - node.last_report >= NODE_STATUS_REPORT_SECONDS)
            for node in self._nodes.values()
            if not node.lost
        ]
        await asyncio.gather(*beats)

    async def _beat_node(self, node: AgentNode, *, report: bool) -> None:
        try:
            await self._renew(node)
            if report:
                await report_status(self._api, node)
        except (ApiStatusError, *TRANSPORT_ERRORS) as err:
            log.warning("node %s: heartbeat failed: %s", node.name, err)

    async def _renew(self, node: AgentNode) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases/{node.name}"
        previous = self._leases.get(node.name)
        if previous is not None:
            try:
                self._leases[node.name] = await self._api.request("PUT", path, body=lease_body(node, previous))
                return
            except ApiStatusError as err:
                if err.code not in (404, 409):
                    raise
        try:
            current = await self._api.request("GET", path)
        except ApiStatusError as err:
            if err.code != 404:
                raise
            created = await self._api.request("POST", path.rsplit("/", 1)[0], body=lease_body(node))
            self._leases[node.name] = created
            return
        self._leases[node.name] = await self._api.request("PUT", path, body=lease_body(node, current))
