"""Node pools whose nodes come and go: which pools wait for demand, and their VMs created or deleted.

Stands for GKE creating a node pool's VMs (all of a multi-host TPU slice's at once, as GKE creates one atomically)
and deleting them. A *waiting* pool has no nodes: one of the description's ``provisioning: {onDemand: true}`` pools
before anyone asked for it, or one the ``provision-on-demand`` fault emptied. A queued-provisioning pool
(``queued: true``) waits for a ProvisioningRequest only (:mod:`.provisioning_requests`); the others for an
unschedulable pod (:mod:`.on_demand`). Creating the VMs is the node agent registering the nodes (GKE's labels, plus
``cloud.google.com/gke-queued: "true"`` on a queued pool's and whatever the caller adds); deleting them is the agent
deleting the Node objects and killing what ran there.

Everything here runs on the stand-in's loop (:mod:`.stand_in`), one call at a time. It does not scale a pool down
by itself, resize it partly, or model quota: a pool is all there or all gone.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass

from kubernetes import client

from elastic_training.local.descriptions.cluster_description import (
    LABEL_GKE_QUEUED,
    ClusterDescription,
    NodePool,
    node_object,
)
from elastic_training.local.gke.matching import Obj, fits
from elastic_training.local.nodeagent import NodeAgent

MAX_SECONDS = 86_400


class ProvisioningError(ValueError):
    """A provisioning fault that cannot be done as asked; the message says why."""


@dataclass
class WaitingPool:
    """A pool with no nodes: waiting for demand (``handle`` None) or being provisioned."""

    pool: NodePool
    seconds: float
    handle: asyncio.TimerHandle | None = None  # the scale-up under way
    reserved: bool = False  # taken by a ProvisioningRequest


class NodePools:
    """The description's pools that wait for demand, over the node agent that registers their nodes."""

    def __init__(self, description: ClusterDescription, agent: NodeAgent, api: client.ApiClient) -> None:
        self._description = description
        self._agent = agent
        self._core = client.CoreV1Api(api)
        self.waiting: dict[str, WaitingPool] = {
            p.name: WaitingPool(p, p.provisioning_seconds) for p in description.pools if p.on_demand
        }
        self._made_queued: dict[str, float] = {}  # pools the fault made queued-provisioning ones: their delay

    def node_names(self, pool: NodePool) -> list[str]:
        """The names the pool's nodes have (or will have)."""
        return self._description.node_names(pool)

    def fits(self, pod_spec: Obj, pool: NodePool) -> bool:
        """Whether a node of ``pool`` could take a pod of ``pod_spec`` (:mod:`.matching`)."""
        template = node_object(self._description, pool, self.node_names(pool)[0])
        if pool.queued:
            template["metadata"]["labels"][LABEL_GKE_QUEUED] = "true"
        return fits(pod_spec, template)

    def idle(self, *, queued: bool) -> list[NodePool]:
        """The pools waiting for demand with nothing asked of them yet (queued-provisioning ones, or the others)."""
        return [
            w.pool for w in self.waiting.values() if w.handle is None and not w.reserved and w.pool.queued == queued
        ]

    def delay_of(self, name: str) -> float:
        """How long the waiting pool takes to get its nodes (the description's ``delaySeconds``, or the fault's)."""
        waiting = self.waiting.get(name)
        return waiting.seconds if waiting is not None else 0.0

    def reserve(self, name: str) -> None:
        """A ProvisioningRequest takes the waiting pool: no pending pod triggers it any more."""
        waiting = self.waiting.get(name)
        if waiting is not None and waiting.handle is None:
            waiting.reserved = True

    def provision_now(self, name: str, labels: dict[str, str] | None = None) -> list[str]:
        """Create the waiting pool's VMs now: its nodes registered, with ``labels`` added; their names."""
        waiting = self.waiting.pop(name, None)
        if waiting is None:
            return []
        names = self.node_names(waiting.pool)
        extra = dict(labels or {})
        if waiting.pool.queued:
            extra[LABEL_GKE_QUEUED] = "true"
        self._agent.register_nodes(names, extra)
        return names

    def release(self, name: str, *, remove_nodes: bool = False) -> list[str]:
        """The pool waits for demand again (``remove_nodes``: its VMs are deleted first); the nodes removed."""
        pool = self._pool(name)
        previous = self.waiting.pop(name, None)
        if previous is not None and previous.handle is not None:
            previous.handle.cancel()
        names = self.node_names(pool) if pool is not None and remove_nodes else []
        if names:
            self._agent.unregister_nodes(names)
        if pool is not None:
            self.waiting[name] = WaitingPool(pool, pool.provisioning_seconds)
        return names

    def busy_pods(self, nodes: list[str]) -> list[str]:
        """``namespace/name`` of the pods bound to ``nodes`` that have not ended."""
        busy = []
        for node in nodes:
            for pod in self._core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items:
                if pod.status is None or pod.status.phase not in ("Succeeded", "Failed"):
                    busy.append(f"{pod.metadata.namespace}/{pod.metadata.name}")
        return busy

    def make_on_demand(self, name: str, seconds: float, *, queued: bool) -> Obj:
        """The ``provision-on-demand`` fault: an idle pool's nodes go; they come back ``seconds`` after a pending pod
        asks (``queued``: only for a ProvisioningRequest, the pool then a queued-provisioning one)."""
        if self._description.pool(name) is None:
            raise ProvisioningError(f"no node pool {name!r} in the cluster description")
        if not 0 <= seconds <= MAX_SECONDS:
            raise ProvisioningError(f"seconds must be between 0 and {MAX_SECONDS}, got {seconds}")
        if queued:
            self._made_queued[name] = seconds
        else:
            self._made_queued.pop(name, None)
        pool = self._pool(name)
        if pool is None:
            raise ProvisioningError(f"no node pool {name!r} in the cluster description")
        names = self.node_names(pool)
        busy = self.busy_pods(names)
        if busy:
            raise ProvisioningError(
                f"node pool {name} runs {len(busy)} pod(s) ({', '.join(busy[:3])}): "
                "only an idle pool can be deprovisioned"
            )
        self.release(name, remove_nodes=True)
        self.waiting[name] = WaitingPool(pool, seconds)
        return {"nodePool": name, "nodes": names, "seconds": seconds, "queued": pool.queued}

    def _pool(self, name: str) -> NodePool | None:
        pool = self._description.pool(name)
        if pool is None or name not in self._made_queued:
            return pool
        return dataclasses.replace(pool, on_demand=True, queued=True, provisioning_seconds=self._made_queued[name])

    def cancel(self) -> None:
        """Forget the scale-ups under way (the cluster is stopping)."""
        for waiting in self.waiting.values():
            if waiting.handle is not None:
                waiting.handle.cancel()
                waiting.handle = None
