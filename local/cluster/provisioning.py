"""Node pools provisioned on demand: no nodes until a pending pod asks for them, then the whole pool later.

What GKE does with a node pool created for queued provisioning or node auto-provisioning (flex-start,
https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest and the cluster autoscaler,
kubernetes/autoscaler ``cluster-autoscaler/core/scaleup``): a pod the scheduler left ``Unschedulable`` that
a node of the pool could take triggers a scale-up, recorded on the pod as the Event ``TriggeredScaleUp``
"pod triggered scale-up: [{<pool> 0->N (max: N)}]" (``cluster-autoscaler/processors/status
/eventing_scale_up_processor.go``); a multi-host TPU slice's pool is created atomically, all its nodes at
once, so here all the pool's nodes register together, ``delaySeconds`` after the first pod asked (the
time GKE takes to obtain and boot the VMs). The scheduler binds the waiting pods when the nodes appear.

A pool declared ``queued: true`` is GKE's queued provisioning (``--enable-queued-provisioning``): a pending pod
never scales it up; only a ProvisioningRequest does (``local/cluster/provisioning_requests.py`` reserves the pool,
registers its nodes with the request's labels and, when capacity is revoked, gives the pool back to wait again).

Declared in the cluster description (``provisioning: {onDemand: true, delaySeconds: N}`` on a node pool)
or at run time with ``elastic-training cluster fault provision-on-demand <pool> --seconds N`` (the pool's
nodes, which must run no pod, are removed and come back on demand; ``queued: true`` over HTTP makes it a
queued-provisioning pool). Simplified: nodes are never scaled
down again; a pod whose affinity fits no pool triggers nothing (it stays unschedulable, as upstream).
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass

from elastic_training.local.cluster.events import NORMAL, record_event
from elastic_training.local.cluster.nodes import create_nodes
from elastic_training.local.cluster.resources import NODES, PODS, ApiError, bad_request
from elastic_training.local.cluster.scheduler import needs_scheduling, occupies_node
from elastic_training.local.cluster.scheduler_filters import filter_node
from elastic_training.local.cluster.store import Obj, Store, WatchEvent
from elastic_training.local.descriptions.cluster_description import ClusterDescription, NodePool, node_object

COMPONENT = "cluster-autoscaler"


@dataclass
class _Pending:
    """A pool waiting for demand (``handle`` None) or being provisioned."""

    pool: NodePool
    seconds: float
    handle: asyncio.TimerHandle | None = None
    reserved: bool = False  # taken by a ProvisioningRequest


def _unschedulable(pod: Obj) -> bool:
    """The scheduler found no node for it (``PodScheduled=False``, ``Unschedulable``): what the autoscaler acts on."""
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


class NodeProvisioner:
    """Provisions the on-demand pools of a description when pending pods need them."""

    def __init__(self, store: Store, description: ClusterDescription) -> None:
        self._store = store
        self._description = description
        self._waiting: dict[str, _Pending] = {
            p.name: _Pending(p, p.provisioning_seconds) for p in description.pools if p.on_demand
        }
        # pools the provision-on-demand fault made queued-provisioning ones, and their delay
        self._made_queued: dict[str, float] = {}

    def start(self) -> None:
        """Watch pods (call on the loop, after the nodes are registered); pods already pending count."""
        self._store.add_listener(self._on_event)
        for pod in self._store.list(PODS)[0]:
            self._consider(pod)

    def _on_event(self, event: WatchEvent) -> None:
        if event.rtype == PODS and event.type != "DELETED":
            self._consider(event.object)

    def _consider(self, pod: Obj) -> None:
        if not self._waiting or not needs_scheduling(pod) or not _unschedulable(pod):
            return
        for pending in list(self._waiting.values()):
            if pending.handle is not None or pending.reserved or pending.pool.queued:
                continue  # a queued-provisioning pool scales up only for a ProvisioningRequest
            if self.fits(pod, pending.pool):
                self._trigger(pod, pending)
                return

    def fits(self, pod: Obj, pool: NodePool) -> bool:
        """Whether a node of ``pool`` could take ``pod`` (a pod, or a PodTemplate's ``template``)."""
        template = node_object(self._description, pool, self._description.node_names(pool)[0])
        template["metadata"]["name"] = "template"
        return filter_node(pod, template, [], []) is None

    def _trigger(self, pod: Obj, pending: _Pending) -> None:
        pool, count = pending.pool, pending.pool.node_count
        record_event(
            self._store,
            pod,
            NORMAL,
            "TriggeredScaleUp",
            f"pod triggered scale-up: [{{{pool.name} 0->{count} (max: {count})}}]",
            COMPONENT,
        )
        pending.handle = asyncio.get_running_loop().call_later(pending.seconds, self._provision, pool.name)

    def _provision(self, name: str, labels: dict[str, str] | None = None) -> None:
        pending = self._waiting.pop(name, None)
        if pending is None:
            return
        nodes = [node_object(self._description, pending.pool, n) for n in self._description.node_names(pending.pool)]
        for node in nodes:
            node["metadata"]["labels"].update(labels or {})
        create_nodes(self._store, nodes)

    # -- for a ProvisioningRequest (local/cluster/provisioning_requests.py) -------------------------

    def idle_pools(self, *, queued: bool) -> list[NodePool]:
        """The pools waiting for demand, nothing yet asked of them (queued-provisioning ones, or the others)."""
        return [
            p.pool for p in self._waiting.values() if p.handle is None and not p.reserved and p.pool.queued == queued
        ]

    def delay_of(self, pool_name: str) -> float:
        """How long the waiting pool takes to register its nodes (its description's, or the fault's)."""
        pending = self._waiting.get(pool_name)
        return pending.seconds if pending is not None else 0.0

    def reserve(self, pool_name: str) -> None:
        """Take a waiting pool for a ProvisioningRequest: no pending pod triggers it any more."""
        pending = self._waiting.get(pool_name)
        if pending is not None and pending.handle is None:
            pending.reserved = True

    def provision_now(self, pool_name: str, labels: dict[str, str]) -> list[str]:
        """Register a reserved pool's nodes now, with ``labels`` added (the request's); their names."""
        pending = self._waiting.get(pool_name)
        if pending is None:
            return []
        self._provision(pool_name, labels)
        return self._description.node_names(pending.pool)

    def release(self, pool_name: str) -> None:
        """A pool whose nodes went (capacity revoked) or that was never provisioned waits for demand again."""
        pool = self._pool(pool_name)
        previous = self._waiting.pop(pool_name, None)
        if previous is not None and previous.handle is not None:
            previous.handle.cancel()
        if pool is not None:
            self._waiting[pool_name] = _Pending(pool, pool.provisioning_seconds)

    def _pool(self, name: str) -> NodePool | None:
        pool = self._description.pool(name)
        if pool is None or name not in self._made_queued:
            return pool
        return dataclasses.replace(pool, queued=True, provisioning_seconds=self._made_queued[name])

    def provision_on_demand(self, pool_name: str, seconds: float, *, queued: bool = False) -> Obj:
        """Take a pool's nodes away; they come back ``seconds`` after a pending pod asks for them (a fault), or,
        ``queued``, only for a ProvisioningRequest (the pool is then a queued-provisioning one)."""
        if queued:
            self._made_queued[pool_name] = seconds
        pool = self._pool(pool_name)
        if pool is None:
            raise ApiError(404, "NotFound", f'node pool "{pool_name}" not found')
        if not 0 <= seconds <= 86_400:
            raise bad_request(f"seconds must be between 0 and 86400 seconds, got {seconds}")
        names = self._description.node_names(pool)
        busy = self._store.view(PODS, None, lambda p: occupies_node(p) and p["spec"]["nodeName"] in names)[0]
        if busy:
            shown = ", ".join(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in busy[:3])
            raise bad_request(
                f"node pool {pool_name} runs {len(busy)} pod(s) ({shown}): only an idle pool can be deprovisioned"
            )
        previous = self._waiting.pop(pool_name, None)
        if previous is not None and previous.handle is not None:
            previous.handle.cancel()
        for name in names:
            if self._store.find(NODES, "", name) is not None:
                self._store.delete(NODES, "", name)
        self._waiting[pool_name] = _Pending(pool, seconds)
        for pod in self._store.list(PODS)[0]:
            self._consider(pod)
        return {"nodePool": pool_name, "nodes": names, "seconds": seconds, "queued": pool.queued}

    def cancel(self) -> None:
        """Forget pending provisioning (cluster shutdown)."""
        for pending in self._waiting.values():
            if pending.handle is not None:
                pending.handle.cancel()
        self._waiting.clear()
