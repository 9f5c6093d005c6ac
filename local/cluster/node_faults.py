"""Faults at GKE's grain: a lost TPU host, a node pool under repair, a pod eviction.

What each does, and whose behaviour it follows:

- **lose-host** (a TPU host fails). GKE cannot live-migrate TPU VMs: a host event terminates the node
  and its pods, and on a multi-host slice the other hosts lose their interconnect partner, so the
  whole slice is interrupted and GKE recreates the slice's node pool ("Manage GKE node disruption for
  GPUs and TPUs", https://cloud.google.com/kubernetes-engine/docs/concepts/handle-disruption-gpu-tpu;
  "About TPUs in GKE", https://cloud.google.com/kubernetes-engine/docs/concepts/tpus). Here: every
  node of the host's node pool turns ``Ready=Unknown`` (``NodeStatusUnknown``, "Kubelet stopped
  posting node status.") with the ``node.kubernetes.io/unreachable`` ``NoSchedule`` and ``NoExecute``
  taints (kubernetes ``pkg/controller/nodelifecycle``), and every pod bound to those nodes is handled
  as PodGC handles a pod whose node no longer exists (``pkg/controller/podgc/gc_controller.go``
  ``markFailedAndDeletePodWithCondition``): its processes are killed, it gets phase ``Failed`` and the
  ``DisruptionTarget`` condition (reason ``DeletionByPodGC``, "PodGC: node no longer exists"), and it is
  deleted. Its container statuses are left as the lost kubelet last wrote them. After
  ``repairSeconds`` (default: the pool's ``repairSeconds`` in the cluster description, else 0) the
  pool's nodes are ``Ready`` and untainted again (recreated under the same names): a slow repair is a
  pool whose ``repairSeconds`` is long, or a fault asking for one. Upstream PodGC waits a 40 s
  quarantine first; here it is at once.
- **repair-node-pool** (GKE node auto-repair, which starts after about 10 minutes ``NotReady`` and
  drains and re-creates the node under its name,
  https://cloud.google.com/kubernetes-engine/docs/how-to/node-auto-repair). Here: the pool's nodes
  are cordoned (``spec.unschedulable``) and ``Ready=Unknown``; every pod on them is evicted as the
  drain's Eviction API does (``DisruptionTarget`` ``EvictionByEvictionAPI`` "Eviction API: evicting",
  then a graceful delete with the pod's grace period); after ``seconds`` the nodes are ``Ready`` and
  uncordoned.
- **evict-pod** with a reason, as upstream writes it before terminating the pod:
  ``EvictionByEvictionAPI`` ("Eviction API: evicting", ``pkg/registry/core/pod/storage/eviction.go``)
  and ``PreemptionByScheduler`` ("default-scheduler: preempting to accommodate a higher priority pod",
  ``pkg/scheduler/framework/preemption``) then delete the pod gracefully; ``TerminationByKubelet``
  ("Pod was terminated in response to imminent node shutdown.", the kubelet's graceful node shutdown
  ``pkg/kubelet/nodeshutdown``) stops it within its grace period and leaves it ``Failed`` with
  ``status.reason`` ``Terminated``, not deleted.

How the Job controller counts such a pod is upstream's (``pkg/controller/job``): without a
``podFailurePolicy`` (which needs ``restartPolicy: Never``; Pathways workers use ``OnFailure``) a pod
that fails or is deleted before finishing counts once in ``status.failed`` toward ``backoffLimit``,
whatever its ``DisruptionTarget`` says, and is replaced at once.
"""

from __future__ import annotations

import asyncio
from enum import StrEnum

from elastic_training.local.cluster.kubelet import Kubelet
from elastic_training.local.cluster.resources import NODES, PODS, ApiError, bad_request, not_found
from elastic_training.local.cluster.store import Obj, Store, now_rfc3339
from elastic_training.local.descriptions.cluster_description import LABEL_NODEPOOL, ClusterDescription, ready_condition

UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
DISRUPTION_TARGET = "DisruptionTarget"


class DisruptionReason(StrEnum):
    """The ``DisruptionTarget`` reasons upstream sets (``k8s.io/api/core/v1`` ``PodReason*``)."""

    EVICTION_API = "EvictionByEvictionAPI"
    PREEMPTION = "PreemptionByScheduler"
    KUBELET = "TerminationByKubelet"
    POD_GC = "DeletionByPodGC"


MESSAGES = {
    DisruptionReason.EVICTION_API: "Eviction API: evicting",
    DisruptionReason.PREEMPTION: "default-scheduler: preempting to accommodate a higher priority pod",
    DisruptionReason.KUBELET: "Pod was terminated in response to imminent node shutdown.",
    DisruptionReason.POD_GC: "PodGC: node no longer exists",
}


def disruption_condition(reason: DisruptionReason) -> Obj:
    return {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": str(reason),
        "message": MESSAGES[reason],
        "lastProbeTime": None,
        "lastTransitionTime": now_rfc3339(),
    }


def set_pod_condition(pod: Obj, condition: Obj) -> None:
    conditions = pod.setdefault("status", {}).setdefault("conditions", [])
    conditions[:] = [c for c in conditions if c.get("type") != condition["type"]] + [condition]


class NodeFaults:
    """Node- and pod-level faults, on the cluster's event loop."""

    def __init__(self, store: Store, kubelet: Kubelet, description: ClusterDescription | None = None) -> None:
        self._store = store
        self._kubelet = kubelet
        self._description = description
        self._repairs: dict[str, asyncio.TimerHandle] = {}

    # -- the faults ------------------------------------------------------------------------------

    async def lose_host(self, node: str, repair_seconds: float | None = None) -> Obj:
        """A TPU host is lost: its whole node pool (the slice) is interrupted and repaired after
        ``repair_seconds`` (default: the pool's ``repairSeconds`` in the cluster description, else 0)."""
        pool, nodes = self._pool_of(node)
        if repair_seconds is None:
            described = self._description.pool(pool) if self._description is not None else None
            repair_seconds = described.repair_seconds if described is not None else 0.0
        _check_seconds(repair_seconds, "repairSeconds")
        for name in nodes:
            self._set_node(name, ready=False, taints=True)
        failed = []
        for pod in self._pods_on(nodes):
            meta = pod["metadata"]
            await self._kubelet.fail_pod(meta["namespace"], meta["name"], disruption_condition(DisruptionReason.POD_GC))
            failed.append(f"{meta['namespace']}/{meta['name']}")
        self._restore_later(pool, nodes, repair_seconds)
        return {"node": node, "nodePool": pool, "nodes": nodes, "failedPods": failed, "repairSeconds": repair_seconds}

    async def repair_node_pool(self, pool: str, seconds: float) -> Obj:
        """GKE auto-repair of a node pool: drain (evict every pod), NotReady for ``seconds``, back."""
        nodes = self._nodes_of_pool(pool)
        _check_seconds(seconds, "seconds")
        for name in nodes:
            self._set_node(name, ready=False, cordon=True)
        evicted = []
        for pod in self._pods_on(nodes):
            meta = pod["metadata"]
            await self.evict_pod(meta["namespace"], meta["name"], DisruptionReason.EVICTION_API)
            evicted.append(f"{meta['namespace']}/{meta['name']}")
        self._restore_later(pool, nodes, seconds)
        return {"nodePool": pool, "nodes": nodes, "evictedPods": evicted, "seconds": seconds}

    async def evict_pod(self, namespace: str, name: str, reason: DisruptionReason) -> Obj:
        """Mark the pod ``DisruptionTarget`` with ``reason``, then terminate it as that component does."""
        pod = self._store.get(PODS, namespace, name)
        if reason == DisruptionReason.POD_GC:
            await self._kubelet.fail_pod(namespace, name, disruption_condition(reason))
            return {"evicted": name, "reason": str(reason), "deleted": True}
        condition = disruption_condition(reason)
        self._store.mutate(PODS, namespace, name, lambda o: set_pod_condition(o, condition), subresource="status")
        if reason == DisruptionReason.KUBELET:
            if not self._kubelet.shut_down_pod(namespace, name, MESSAGES[reason]):
                raise bad_request(f"pod {name} is not running on a node: the kubelet has nothing to terminate")
            return {"evicted": name, "reason": str(reason), "deleted": False}
        grace = pod.get("spec", {}).get("terminationGracePeriodSeconds")
        self._store.delete(PODS, namespace, name, grace_period_seconds=None if grace is None else int(grace))
        return {"evicted": name, "reason": str(reason), "deleted": True}

    async def remove_nodes(self, nodes: list[str]) -> list[str]:
        """The VMs behind ``nodes`` are gone (capacity revoked): each pod on them is handled as PodGC handles a
        pod whose node no longer exists, then the Node objects are deleted; the pods, ``ns/name``."""
        failed = []
        for pod in self._pods_on(nodes):
            meta = pod["metadata"]
            await self._kubelet.fail_pod(meta["namespace"], meta["name"], disruption_condition(DisruptionReason.POD_GC))
            failed.append(f"{meta['namespace']}/{meta['name']}")
        for name in nodes:
            if self._store.find(NODES, "", name) is not None:
                self._store.delete(NODES, "", name)
        return failed

    # -- helpers ---------------------------------------------------------------------------------

    def _pool_of(self, node: str) -> tuple[str, list[str]]:
        found = self._store.find(NODES, "", node)
        if found is None:
            raise not_found(NODES, node)
        pool = (found["metadata"].get("labels") or {}).get(LABEL_NODEPOOL)
        return (str(pool), self._nodes_of_pool(str(pool))) if pool else (node, [node])

    def _nodes_of_pool(self, pool: str) -> list[str]:
        nodes, _ = self._store.view(
            NODES, None, lambda n: (n["metadata"].get("labels") or {}).get(LABEL_NODEPOOL) == pool
        )
        if not nodes:
            raise ApiError(404, "NotFound", f'node pool "{pool}" not found')
        return [n["metadata"]["name"] for n in nodes]

    def _pods_on(self, nodes: list[str]) -> list[Obj]:
        pods, _ = self._store.list(
            PODS,
            None,
            lambda p: (
                p.get("spec", {}).get("nodeName") in nodes
                and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
            ),
        )
        return pods

    def _set_node(self, name: str, *, ready: bool, taints: bool = False, cordon: bool = False) -> None:
        def change(node: Obj) -> None:
            spec = node.setdefault("spec", {})
            kept = [t for t in spec.get("taints") or [] if t.get("key") != UNREACHABLE_TAINT]
            if taints:
                stamp = now_rfc3339()
                kept += [
                    {"key": UNREACHABLE_TAINT, "effect": "NoSchedule", "timeAdded": stamp},
                    {"key": UNREACHABLE_TAINT, "effect": "NoExecute", "timeAdded": stamp},
                ]
            if kept:
                spec["taints"] = kept
            else:
                spec.pop("taints", None)
            if cordon:
                spec["unschedulable"] = True
            elif ready:
                spec.pop("unschedulable", None)

        def readiness(node: Obj) -> None:
            conditions = node.setdefault("status", {}).setdefault("conditions", [])
            conditions[:] = [c for c in conditions if c.get("type") != "Ready"] + [ready_condition(ready)]

        self._store.mutate(NODES, "", name, change)
        self._store.mutate(NODES, "", name, readiness, subresource="status")

    def _restore_later(self, pool: str, nodes: list[str], seconds: float) -> None:
        previous = self._repairs.pop(pool, None)
        if previous is not None:
            previous.cancel()

        def restore() -> None:
            self._repairs.pop(pool, None)
            for name in nodes:
                if self._store.find(NODES, "", name) is not None:
                    self._set_node(name, ready=True)

        if seconds <= 0:
            restore()
        else:
            self._repairs[pool] = asyncio.get_running_loop().call_later(seconds, restore)

    def cancel(self) -> None:
        """Forget pending repairs (cluster shutdown)."""
        for handle in self._repairs.values():
            handle.cancel()
        self._repairs.clear()


def _check_seconds(value: float, name: str) -> None:
    if not 0 <= value <= 86_400:
        raise bad_request(f"{name} must be between 0 and 86400 seconds, got {value}")
