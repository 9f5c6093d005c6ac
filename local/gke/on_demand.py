"""Node pools provisioned on demand: the cluster autoscaler's scale-up for a pod no node can take.

What GKE's cluster autoscaler does for a node pool with no nodes (node auto-provisioning, a flex-start pool;
kubernetes/autoscaler ``cluster-autoscaler/core/scaleup``): a pod that kube-scheduler left unschedulable
(``PodScheduled=False``, reason ``Unschedulable``) and that a node of the pool could take (:mod:`.matching`) triggers a
scale-up, recorded on the pod as the Event ``TriggeredScaleUp`` "pod triggered scale-up: [{<pool> 0->N (max: N)}]"
from ``cluster-autoscaler`` (``processors/status/eventing_scale_up_processor.go``). The pool's ``delaySeconds`` later
(the time GKE takes to get and boot the VMs) all its nodes register at once; kube-scheduler then binds the waiting
pods itself, as it retries unschedulable pods when nodes are added.

A queued-provisioning pool (``queued: true``) is never scaled up for a pod: only a ProvisioningRequest provisions
it (:mod:`.provisioning_requests`). Not done: scaling down, choosing between pools by an expander (the first waiting
pool that fits is taken), backoff after a failed scale-up, the ``NotTriggerScaleUp`` event for a pod no pool fits.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from kubernetes import client

from elastic_training.local.gke.informer import Informer
from elastic_training.local.gke.matching import Obj
from elastic_training.local.gke.node_pools import NodePools, WaitingPool

COMPONENT = "cluster-autoscaler"
REASON_SCALE_UP = "TriggeredScaleUp"


def unschedulable(pod: Obj) -> bool:
    """Not bound, not ended, and kube-scheduler found no node for it: what the autoscaler acts on."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
        return False
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or []
    )


def scale_up_event(pod: Obj, pool: str, count: int) -> client.CoreV1Event:
    """The Event the cluster autoscaler records on a pod that triggered a pool's scale-up."""
    meta = pod["metadata"]
    now = datetime.now(UTC)
    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name=f"{meta['name']}.", namespace=meta["namespace"]),
        involved_object=client.V1ObjectReference(
            api_version="v1",
            kind="Pod",
            name=meta["name"],
            namespace=meta["namespace"],
            uid=meta["uid"],
            resource_version=meta.get("resourceVersion"),
        ),
        reason=REASON_SCALE_UP,
        message=f"pod triggered scale-up: [{{{pool} 0->{count} (max: {count})}}]",
        type="Normal",
        source=client.V1EventSource(component=COMPONENT),
        reporting_component=COMPONENT,
        first_timestamp=now,
        last_timestamp=now,
        count=1,
    )


class OnDemandScaler:
    """Scales a waiting pool up for the unschedulable pods it could take (on the stand-in's loop)."""

    def __init__(self, pools: NodePools, api: client.ApiClient, loop: asyncio.AbstractEventLoop) -> None:
        self._pools = pools
        self._core = client.CoreV1Api(api)
        self._loop = loop
        self._informer = Informer("pods", self._core.list_pod_for_all_namespaces, loop, self._on_pod)

    def start(self) -> None:
        """Watch the pods (those already unschedulable count)."""
        self._informer.start()

    def stop(self) -> None:
        """Stop watching."""
        self._informer.stop()

    def reconsider(self) -> None:
        """Look at every unschedulable pod again (a pool started waiting for demand)."""
        for pod in list(self._informer.objects.values()):
            self._on_pod("MODIFIED", pod)

    def _on_pod(self, kind: str, pod: Obj) -> None:
        if kind == "DELETED" or not unschedulable(pod):
            return
        spec = pod.get("spec") or {}
        for waiting in list(self._pools.waiting.values()):
            idle = waiting.handle is None and not waiting.reserved and not waiting.pool.queued
            if idle and self._pools.fits(spec, waiting.pool):
                self._trigger(pod, waiting)
                return

    def _trigger(self, pod: Obj, waiting: WaitingPool) -> None:
        pool = waiting.pool
        count = len(self._pools.node_names(pool))
        waiting.handle = self._loop.call_later(waiting.seconds, self._pools.provision_now, pool.name)
        self._core.create_namespaced_event(pod["metadata"]["namespace"], scale_up_event(pod, pool.name, count))
