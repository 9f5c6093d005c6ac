"""GKE's queued provisioning answering ProvisioningRequests (class ``queued-provisioning.gke.io``) on the local cluster.

What the cluster autoscaler reports on a ProvisioningRequest (kubernetes/autoscaler ``cluster-autoscaler/apis/
provisioningrequest/autoscaling.x-k8s.io/v1/types.go`` for the condition types, ``provisioningrequest/conditions/
conditions.go`` for the reasons and messages; GKE's flex-start with queued provisioning,
https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest, for the class and the
``ResizeRequestName`` detail that xpk's ProvisioningRequestConfig turns into the node selector
``autoscaling.gke.io/provisioning-request``):

- a request of the class is ``Accepted=True`` (``Accepted``, "ProvisioningRequest is accepted by
  ClusterAutoscaler") and ``Provisioned=False`` while it waits; it takes idle queued-provisioning node pools
  (``provisioning: {queued: true}`` in the cluster description) whose node template fits its PodTemplates until
  their nodes hold its pods (one pod per node, as TPU and GPU hosts are used), or keeps waiting (``Provisioned=False``
  reason ``CapacityIsNotFound``) until a pool is free again;
- the pools' ``delaySeconds`` later, all their nodes register at once (atomically, as DWS provisions), labelled
  ``autoscaling.gke.io/provisioning-request: <ResizeRequestName>``; the request is ``Provisioned=True``
  (``CapacityIsProvisioned``, "Capacity is found in the cluster") with ``provisioningClassDetails.ResizeRequestName``;
- faults (``/_local/faults/provisioning``, :meth:`QueuedProvisioning.add_rule` / :meth:`act`): ``fail`` (``Failed=True``
  with the fault's reason and message instead of capacity: the stockout a flex-start request can meet), ``delay``
  (this many seconds instead of the pools'), ``expire`` (``BookingExpired=True``, ``CapacityReservationTimeExpired``,
  "Capacity reservation time is expired", its nodes kept), ``revoke`` (``CapacityRevoked=True`` with the fault's
  message, then the VMs go: each pod on them is failed as PodGC does and the Node objects are deleted, the pools
  waiting for a request again);
- a request that is deleted gives its pools back once no pod runs on them (their nodes removed).

How Kueue reads each condition is ``kueue_provisioning.py``'s (upstream's ``syncCheckStates``).
Not modelled: the booking time after which an unconsumed provisioned request expires by itself (GKE's 10
minutes), ``maxRunDurationSeconds``, partial capacity, other classes (``check-capacity.autoscaling.x-k8s.io``,
``best-effort-atomic-scale-up.autoscaling.x-k8s.io``: their requests stay unanswered, as on a cluster without them).
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from typing import Any

from elastic_training.local.cluster import kueue_workload as kw
from elastic_training.local.cluster.node_faults import NodeFaults
from elastic_training.local.cluster.provisioning import NodeProvisioner
from elastic_training.local.cluster.resources import (
    NODES,
    POD_TEMPLATES,
    PODS,
    PROVISIONING_REQUESTS,
    ApiError,
    bad_request,
)
from elastic_training.local.cluster.scheduler import occupies_node
from elastic_training.local.cluster.store import Obj, Store, WatchEvent
from elastic_training.local.cluster.workqueue import WorkQueue
from elastic_training.local.descriptions.cluster_description import NodePool

QUEUED_PROVISIONING_CLASS = "queued-provisioning.gke.io"
LABEL_PROVISIONING_REQUEST = "autoscaling.gke.io/provisioning-request"
DETAIL_RESIZE_REQUEST = "ResizeRequestName"
ACCEPTED = ("Accepted", "ProvisioningRequest is accepted by ClusterAutoscaler")
PROVISIONED = ("CapacityIsProvisioned", "Capacity is found in the cluster")
BOOKING_EXPIRED = ("CapacityReservationTimeExpired", "Capacity reservation time is expired")
FAILED_DEFAULT = ("FailedToBookCapacity", "Flex-start capacity could not be obtained in the zone (local fault)")
REVOKED_DEFAULT = ("CapacityRevoked", "The VMs of this request were reclaimed (local fault)")
OUTCOMES = ("fail", "delay", "expire", "revoke")
Key = tuple[str, str]


@dataclass
class Rule:
    """A fault waiting for the next ``count`` requests (``act`` applies one to a named request at once)."""

    outcome: str
    count: int = 1
    seconds: float = 0.0  # delay: instead of the pools'; expire/revoke: after Provisioned
    reason: str = ""
    message: str = ""

    def describe(self) -> Obj:
        return {k: v for k, v in vars(self).items() if v not in ("", None)}


@dataclass
class _Booking:
    pools: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    rule: Rule | None = None
    timers: list[asyncio.TimerHandle] = field(default_factory=list)
    provisioned: bool = False


def resize_request_name(namespace: str, name: str) -> str:
    """A stand-in for GKE's resize request name: short enough for a label value."""
    return "resize-" + hashlib.sha1(f"{namespace}/{name}".encode()).hexdigest()[:12]


class QueuedProvisioning:
    """The cluster autoscaler's answer to ``queued-provisioning.gke.io`` requests, over the node provisioner."""

    def __init__(self, store: Store, provisioner: NodeProvisioner, node_faults: NodeFaults) -> None:
        self._store = store
        self._provisioner = provisioner
        self._node_faults = node_faults
        self._bookings: dict[Key, _Booking] = {}
        self._rules: list[Rule] = []
        self.queue: WorkQueue[Key] = WorkQueue("queued-provisioning", self.reconcile)

    def start(self) -> None:
        self._store.add_listener(self._on_event)
        for request in self._store.list(PROVISIONING_REQUESTS)[0]:
            self.queue.enqueue((request["metadata"]["namespace"], request["metadata"]["name"]))

    def _on_event(self, event: WatchEvent) -> None:
        if event.rtype == PROVISIONING_REQUESTS:
            self.queue.enqueue((event.object["metadata"]["namespace"], event.object["metadata"]["name"]))
        elif (
            event.rtype == PODS and event.type == "DELETED" and any(not b.provisioned for b in self._bookings.values())
        ):
            self._retry_waiting()

    # -- faults --------------------------------------------------------------------------------

    def add_rule(self, rule: Rule) -> Obj:
        if rule.outcome not in OUTCOMES:
            raise bad_request(f"outcome must be one of {', '.join(OUTCOMES)}, got {rule.outcome!r}")
        if rule.count < 1 or not 0 <= rule.seconds <= 86_400:
            raise bad_request("count must be at least 1 and seconds between 0 and 86400")
        self._rules.append(rule)
        return rule.describe()

    def rules(self) -> list[Obj]:
        return [r.describe() for r in self._rules]

    def clear_rules(self) -> list[Obj]:
        """Drop the rules no request has taken yet (what they were)."""
        dropped = self.rules()
        self._rules.clear()
        return dropped

    async def act(self, namespace: str, name: str, rule: Rule) -> Obj:
        """Apply ``rule`` to one request now: ``revoke``/``expire`` a provisioned one, ``fail`` a waiting one."""
        request = self._store.get(PROVISIONING_REQUESTS, namespace, name)
        booking = self._bookings.setdefault((namespace, name), _Booking())
        if rule.outcome in ("revoke", "expire"):
            if not kw.is_true(request, "Provisioned"):
                raise bad_request(
                    f"ProvisioningRequest {namespace}/{name} is not provisioned: nothing to {rule.outcome}"
                )
            if rule.outcome == "revoke":
                return await self._revoke((namespace, name), rule)
            return self._expire((namespace, name))
        if rule.outcome == "fail":
            if kw.is_true(request, "Provisioned"):
                raise bad_request(f"ProvisioningRequest {namespace}/{name} is provisioned: revoke it instead")
            return self._fail((namespace, name), rule)
        booking.rule = rule
        return {"request": f"{namespace}/{name}", "outcome": rule.outcome}

    # -- the autoscaler ------------------------------------------------------------------------

    def reconcile(self, key: Key) -> None:
        request = self._store.find(PROVISIONING_REQUESTS, *key)
        if request is None or request["metadata"].get("deletionTimestamp"):
            self._forget(key)
            return
        if (request.get("spec") or {}).get("provisioningClassName") != QUEUED_PROVISIONING_CLASS:
            return
        if any(kw.is_true(request, kind) for kind in ("Failed", "CapacityRevoked")) or kw.is_true(
            request, "Provisioned"
        ):
            return
        booking = self._bookings.setdefault(key, _Booking())
        if not kw.find(request, "Accepted"):
            self._write(key, _accept)
        if booking.pools:
            return
        pools, why = self._pools_for(request)
        if not pools:
            self._write(key, lambda o: kw.set_status_condition(o, "Provisioned", False, "CapacityIsNotFound", why))
            return
        if booking.rule is None and self._rules:
            booking.rule = self._take_rule()
        booking.pools = [p.name for p in pools]
        for pool in pools:
            self._provisioner.reserve(pool.name)
        rule = booking.rule
        if rule is not None and rule.outcome in ("fail", "delay"):
            seconds = rule.seconds
        else:
            seconds = max(self._provisioner.delay_of(p.name) for p in pools)
        loop = asyncio.get_running_loop()
        booking.timers.append(loop.call_later(seconds, self._provision, key))

    def _take_rule(self) -> Rule:
        rule = self._rules[0]
        rule.count -= 1
        if rule.count <= 0:
            self._rules.pop(0)
        return Rule(rule.outcome, 1, rule.seconds, rule.reason, rule.message)

    def _pools_for(self, request: Obj) -> tuple[list[NodePool], str]:
        """Idle queued pools that fit the request's templates, enough nodes for each pod set's pods."""
        namespace = request["metadata"]["namespace"]
        idle = list(self._provisioner.idle_pools(queued=True))
        chosen: list[NodePool] = []
        for pod_set in (request.get("spec") or {}).get("podSets") or []:
            ref = str((pod_set.get("podTemplateRef") or {}).get("name") or "")
            template = self._store.find(POD_TEMPLATES, namespace, ref)
            if template is None:
                return [], f"PodTemplate {namespace}/{ref} not found"
            pod = {
                "metadata": dict((template.get("template") or {}).get("metadata") or {}),
                **{"spec": (template.get("template") or {}).get("spec") or {}},
            }
            pod["metadata"].setdefault("name", ref)
            pod["metadata"].setdefault("namespace", namespace)
            pod["spec"] = {k: v for k, v in pod["spec"].items() if k != "nodeSelector"} | {
                "nodeSelector": {
                    k: v for k, v in (pod["spec"].get("nodeSelector") or {}).items() if k != LABEL_PROVISIONING_REQUEST
                }
            }
            wanted, found = int(pod_set.get("count") or 0), 0
            for pool in list(idle):
                if found >= wanted:
                    break
                if self._provisioner.fits(pod, pool):
                    chosen.append(pool)
                    idle.remove(pool)
                    found += pool.node_count
            if found < wanted:
                return [], (
                    f"no idle queued-provisioning node pool can host pod set {ref} ({wanted} pod(s), "
                    f"{found} node(s) found): waiting for capacity"
                )
        return chosen, ""

    def _provision(self, key: Key) -> None:
        booking = self._bookings.get(key)
        if booking is None or self._store.find(PROVISIONING_REQUESTS, *key) is None:
            self._forget(key)
            return
        rule = booking.rule
        if rule is not None and rule.outcome == "fail":
            self._fail(key, rule)
            return
        resize = resize_request_name(*key)
        for pool in booking.pools:
            booking.nodes += self._provisioner.provision_now(pool, {LABEL_PROVISIONING_REQUEST: resize})
        booking.provisioned = True

        def provisioned(o: Obj) -> None:
            kw.set_status_condition(o, "Provisioned", True, *PROVISIONED)
            o.setdefault("status", {}).setdefault("provisioningClassDetails", {})[DETAIL_RESIZE_REQUEST] = resize

        self._write(key, provisioned)
        if rule is not None and rule.outcome in ("expire", "revoke"):
            loop = asyncio.get_running_loop()
            if rule.outcome == "expire":
                booking.timers.append(loop.call_later(rule.seconds, self._expire, key))
            else:
                booking.timers.append(
                    loop.call_later(rule.seconds, lambda: asyncio.ensure_future(self._revoke(key, rule)))
                )

    def _fail(self, key: Key, rule: Rule) -> Obj:
        reason, message = rule.reason or FAILED_DEFAULT[0], rule.message or FAILED_DEFAULT[1]
        self._write(key, lambda o: kw.set_status_condition(o, "Failed", True, reason, message))
        self._give_back(key)
        return {"request": f"{key[0]}/{key[1]}", "outcome": "fail", "reason": reason, "message": message}

    def _expire(self, key: Key) -> Obj:
        self._write(key, lambda o: kw.set_status_condition(o, "BookingExpired", True, *BOOKING_EXPIRED))
        return {"request": f"{key[0]}/{key[1]}", "outcome": "expire"}

    async def _revoke(self, key: Key, rule: Rule) -> Obj:
        reason, message = rule.reason or REVOKED_DEFAULT[0], rule.message or REVOKED_DEFAULT[1]
        self._write(key, lambda o: kw.set_status_condition(o, "CapacityRevoked", True, reason, message))
        booking = self._bookings.get(key) or _Booking()
        failed = await self._node_faults.remove_nodes(list(booking.nodes))
        self._give_back(key)
        return {"request": f"{key[0]}/{key[1]}", "outcome": "revoke", "nodes": booking.nodes, "failedPods": failed}

    def _give_back(self, key: Key) -> None:
        booking = self._bookings.pop(key, None)
        if booking is None:
            return
        for timer in booking.timers:
            timer.cancel()
        for pool in booking.pools:
            self._provisioner.release(pool)
        self._retry_waiting()

    def _forget(self, key: Key) -> None:
        """A deleted request: its nodes go once idle (now, or when its last pod is deleted)."""
        booking = self._bookings.get(key)
        if booking is None:
            return
        busy = self._store.view(PODS, None, lambda p: occupies_node(p) and p["spec"].get("nodeName") in booking.nodes)[
            0
        ]
        if busy:
            return  # tried again on the next pod deletion
        for node in booking.nodes:
            if self._store.find(NODES, "", node) is not None:
                self._store.delete(NODES, "", node)
        self._give_back(key)

    def _retry_waiting(self) -> None:
        for key, booking in list(self._bookings.items()):
            if not booking.pools or self._store.find(PROVISIONING_REQUESTS, *key) is None:
                self.queue.enqueue(key)
        for request in self._store.view(PROVISIONING_REQUESTS)[0]:
            key = (request["metadata"]["namespace"], request["metadata"]["name"])
            if key not in self._bookings:
                self.queue.enqueue(key)

    def _write(self, key: Key, change: Any) -> None:
        try:
            self._store.mutate(PROVISIONING_REQUESTS, *key, change, subresource="status")
        except ApiError as err:
            if err.code != 404:
                raise

    def cancel(self) -> None:
        for booking in self._bookings.values():
            for timer in booking.timers:
                timer.cancel()
        self._bookings.clear()


def _accept(request: Obj) -> None:
    kw.set_status_condition(request, "Accepted", True, *ACCEPTED)
    kw.set_status_condition(request, "Provisioned", False, "Pending", "Waiting for the capacity to be provisioned")
