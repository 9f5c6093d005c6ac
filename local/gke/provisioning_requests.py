"""GKE's queued provisioning answering ProvisioningRequests of class ``queued-provisioning.gke.io``.

What the cluster autoscaler reports on such a request (GKE flex-start with queued provisioning,
https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest; the conditions in :mod:`.conditions`):

- ``Accepted=True`` and ``Provisioned=False`` (``Pending``) as soon as it sees the request; it takes idle
  queued-provisioning pools whose nodes fit the request's PodTemplates (:mod:`.matching`) until they have a node for
  each pod, or keeps it waiting (``Provisioned=False``, ``CapacityIsNotFound``) until a pool is free again;
- the pools' ``delaySeconds`` later their nodes register, all at once, labelled
  ``autoscaling.gke.io/provisioning-request: <ResizeRequestName>``, and the request is ``Provisioned=True``
  (``CapacityIsProvisioned``) with ``status.provisioningClassDetails.ResizeRequestName``: Kueue's
  ProvisioningRequestConfig turns that into the pods' node selector;
- a deleted request's nodes go once no pod runs on them, and its pools wait for a request again.

Faults (:class:`Rule`, the fault endpoint's ``provisioning`` body), for the next ``count`` requests or one named
request now: ``fail`` (``Failed=True`` with the rule's reason and message, instead of capacity: a stockout),
``delay`` (``seconds`` instead of the pools' delay), ``expire`` (``BookingExpired=True`` ``seconds`` after
Provisioned; the nodes stay), ``revoke`` (``CapacityRevoked=True`` ``seconds`` after Provisioned, then the VMs go:
the Node objects are deleted and their processes killed; pod GC deletes the orphaned pods).

What Kueue does with each condition is the real Kueue's. Not done: the booking time after which an unused provisioned
request expires by itself (GKE's 10 minutes), ``maxRunDurationSeconds``, partial capacity, other classes
(``check-capacity.autoscaling.x-k8s.io``, ``best-effort-atomic-scale-up...``: left unanswered, as on a cluster without
them).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from kubernetes import client

from elastic_training.local.gke import conditions as cond
from elastic_training.local.gke.informer import Informer
from elastic_training.local.gke.matching import Obj
from elastic_training.local.gke.node_pools import MAX_SECONDS, NodePools, ProvisioningError

GROUP, VERSION, PLURAL = "autoscaling.x-k8s.io", "v1", "provisioningrequests"
QUEUED_PROVISIONING_CLASS = "queued-provisioning.gke.io"
LABEL_PROVISIONING_REQUEST = "autoscaling.gke.io/provisioning-request"
DETAIL_RESIZE_REQUEST = "ResizeRequestName"
OUTCOMES = ("fail", "delay", "expire", "revoke")
BUSY_RECHECK_SECONDS = 2.0
Key = tuple[str, str]

log = logging.getLogger(__name__)


@dataclass
class Rule:
    """A fault waiting for the next ``count`` requests (or applied to one named request at once)."""

    outcome: str
    count: int = 1
    seconds: float = 0.0  # delay: instead of the pools'; expire/revoke: after Provisioned
    reason: str = ""
    message: str = ""

    def describe(self) -> Obj:
        """The rule as the fault endpoint shows it (empty fields left out)."""
        return {k: v for k, v in vars(self).items() if v not in ("", None)}

    def validate(self) -> None:
        """Refuse an unknown outcome, a count below 1, seconds outside [0, 86400]."""
        if self.outcome not in OUTCOMES:
            raise ProvisioningError(f"outcome must be one of {', '.join(OUTCOMES)}, got {self.outcome!r}")
        if self.count < 1 or not 0 <= self.seconds <= MAX_SECONDS:
            raise ProvisioningError(f"count must be at least 1 and seconds between 0 and {MAX_SECONDS}")


@dataclass
class _Booking:
    pools: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    rule: Rule | None = None
    timers: list[asyncio.TimerHandle] = field(default_factory=list)
    provisioned: bool = False


def resize_request_name(namespace: str, name: str) -> str:
    """A stand-in for GKE's resize request name: stable, and short enough for a label value."""
    return "resize-" + hashlib.sha1(f"{namespace}/{name}".encode()).hexdigest()[:12]


def _template_pod_spec(template: Obj) -> Obj:
    """A PodTemplate's pod spec, without the provisioning-request selector Kueue adds only once provisioned."""
    spec = dict(((template.get("template") or {}).get("spec")) or {})
    selector = {k: v for k, v in (spec.get("nodeSelector") or {}).items() if k != LABEL_PROVISIONING_REQUEST}
    return {**spec, "nodeSelector": selector}


class QueuedProvisioning:
    """The cluster autoscaler's answer to ``queued-provisioning.gke.io`` requests (on the stand-in's loop)."""

    def __init__(self, pools: NodePools, api: client.ApiClient, loop: asyncio.AbstractEventLoop) -> None:
        self._pools = pools
        self._api = api
        self._custom = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)
        self._loop = loop
        self._bookings: dict[Key, _Booking] = {}
        self._rules: list[Rule] = []
        listing = functools.partial(self._custom.list_cluster_custom_object, GROUP, VERSION, PLURAL)
        self._informer = Informer("provisioningrequests", listing, loop, self._on_request)

    def start(self) -> None:
        """Watch the requests (those already made are answered)."""
        self._informer.start()

    def stop(self) -> None:
        """Stop watching; cancel what is under way."""
        self._informer.stop()
        for booking in self._bookings.values():
            for timer in booking.timers:
                timer.cancel()
        self._bookings.clear()

    # -- faults --------------------------------------------------------------------------------

    def add_rule(self, rule: Rule) -> Obj:
        """A fault for the next ``rule.count`` requests."""
        rule.validate()
        self._rules.append(rule)
        return rule.describe()

    def clear_rules(self) -> list[Obj]:
        """Drop the rules no request has taken yet (what they were)."""
        dropped = [r.describe() for r in self._rules]
        self._rules.clear()
        return dropped

    def act(self, namespace: str, name: str, rule: Rule) -> Obj:
        """Apply ``rule`` to one request now: revoke or expire a provisioned one, fail or delay a waiting one."""
        rule.validate()
        key = (namespace, name)
        request = self._get(key)
        if request is None:
            raise ProvisioningError(f"no ProvisioningRequest {namespace}/{name}")
        provisioned = cond.is_true(request, cond.PROVISIONED)
        if rule.outcome in ("revoke", "expire"):
            if not provisioned:
                raise ProvisioningError(
                    f"ProvisioningRequest {namespace}/{name} is not provisioned: nothing to {rule.outcome}"
                )
            return self._revoke(key, rule) if rule.outcome == "revoke" else self._expire(key)
        if provisioned:
            raise ProvisioningError(f"ProvisioningRequest {namespace}/{name} is provisioned: revoke it instead")
        if rule.outcome == "fail":
            return self._fail(key, rule)
        self._bookings.setdefault(key, _Booking()).rule = rule
        return {"request": f"{namespace}/{name}", "outcome": rule.outcome}

    # -- the autoscaler ------------------------------------------------------------------------

    def _on_request(self, kind: str, request: Obj) -> None:
        key = (request["metadata"]["namespace"], request["metadata"]["name"])
        if kind == "DELETED" or request["metadata"].get("deletionTimestamp"):
            self._forget(key)
            return
        if (request.get("spec") or {}).get("provisioningClassName") != QUEUED_PROVISIONING_CLASS:
            return
        if key not in self._bookings:  # afresh: the event (or the cache) may predate our last write, e.g. its Failed
            request = self._get(key) or {}
        if not request or any(cond.is_true(request, k) for k in (cond.FAILED, cond.CAPACITY_REVOKED, cond.PROVISIONED)):
            return
        booking = self._bookings.setdefault(key, _Booking())
        if cond.find(request, cond.ACCEPTED) is None:
            self._write(key, _accept)
        if booking.pools:
            return
        self._book(key, request, booking)

    def _book(self, key: Key, request: Obj, booking: _Booking) -> None:
        """Take pools for the request and start their provisioning, or say it waits for capacity."""
        pools, why = self._pools_for(request)
        if not pools:
            self._write(key, lambda o: cond.set_condition(o, cond.PROVISIONED, False, cond.NOT_FOUND_REASON, why))
            if "not found" in why:  # Kueue creates the templates first; look again shortly
                booking.timers.append(self._loop.call_later(1.0, self._retry, key))
            return
        if booking.rule is None and self._rules:
            booking.rule = self._take_rule()
        booking.pools = pools
        for pool in pools:
            self._pools.reserve(pool)
        rule = booking.rule
        if rule is not None and rule.outcome in ("fail", "delay"):
            seconds = rule.seconds
        else:
            seconds = max(self._pools.delay_of(p) for p in pools)
        booking.timers.append(self._loop.call_later(seconds, self._provision, key))

    def _take_rule(self) -> Rule:
        rule = self._rules[0]
        rule.count -= 1
        if rule.count <= 0:
            self._rules.pop(0)
        return Rule(rule.outcome, 1, rule.seconds, rule.reason, rule.message)

    def _pools_for(self, request: Obj) -> tuple[list[str], str]:
        """Idle queued pools that fit the request's templates, enough nodes for each pod set's pods."""
        namespace = request["metadata"]["namespace"]
        idle = self._pools.idle(queued=True)
        chosen: list[str] = []
        for pod_set in (request.get("spec") or {}).get("podSets") or []:
            ref = str((pod_set.get("podTemplateRef") or {}).get("name") or "")
            template = self._template(namespace, ref)
            if template is None:
                return [], f"PodTemplate {namespace}/{ref} not found"
            wanted, found = int(pod_set.get("count") or 0), 0
            for pool in list(idle):
                if found >= wanted:
                    break
                if self._pools.fits(_template_pod_spec(template), pool):
                    chosen.append(pool.name)
                    idle.remove(pool)
                    found += len(self._pools.node_names(pool))
            if found < wanted:
                return [], (
                    f"no idle queued-provisioning node pool can host pod set {ref} ({wanted} pod(s), "
                    f"{found} node(s) found): waiting for capacity"
                )
        return chosen, ""

    def _provision(self, key: Key) -> None:
        booking = self._bookings.get(key)
        if booking is None or self._get(key) is None:
            self._forget(key)
            return
        rule = booking.rule
        if rule is not None and rule.outcome == "fail":
            self._fail(key, rule)
            return
        resize = resize_request_name(*key)
        for pool in booking.pools:
            booking.nodes += self._pools.provision_now(pool, {LABEL_PROVISIONING_REQUEST: resize})
        booking.provisioned = True

        def provisioned(request: Obj) -> None:
            cond.set_condition(request, cond.PROVISIONED, True, *cond.PROVISIONED_REASON)
            request["status"].setdefault("provisioningClassDetails", {})[DETAIL_RESIZE_REQUEST] = resize

        self._write(key, provisioned)
        if rule is not None and rule.outcome == "expire":
            booking.timers.append(self._loop.call_later(rule.seconds, self._expire, key))
        elif rule is not None and rule.outcome == "revoke":
            booking.timers.append(self._loop.call_later(rule.seconds, self._revoke, key, rule))

    def _fail(self, key: Key, rule: Rule) -> Obj:
        reason, message = rule.reason or cond.FAILED_DEFAULT[0], rule.message or cond.FAILED_DEFAULT[1]
        self._write(key, lambda o: cond.set_condition(o, cond.FAILED, True, reason, message))
        self._give_back(key)
        return {"request": f"{key[0]}/{key[1]}", "outcome": "fail", "reason": reason, "message": message}

    def _expire(self, key: Key) -> Obj:
        self._write(key, lambda o: cond.set_condition(o, cond.BOOKING_EXPIRED, True, *cond.BOOKING_EXPIRED_REASON))
        return {"request": f"{key[0]}/{key[1]}", "outcome": "expire"}

    def _revoke(self, key: Key, rule: Rule) -> Obj:
        reason, message = rule.reason or cond.REVOKED_DEFAULT[0], rule.message or cond.REVOKED_DEFAULT[1]
        self._write(key, lambda o: cond.set_condition(o, cond.CAPACITY_REVOKED, True, reason, message))
        booking = self._bookings.get(key) or _Booking()
        pods = self._pools.busy_pods(booking.nodes)
        self._give_back(key, remove_nodes=True)
        return {"request": f"{key[0]}/{key[1]}", "outcome": "revoke", "nodes": booking.nodes, "pods": pods}

    def _give_back(self, key: Key, *, remove_nodes: bool = False) -> None:
        """The request holds its pools no more (they wait again, their VMs deleted when ``remove_nodes``)."""
        booking = self._bookings.pop(key, None)
        if booking is None:
            return
        for timer in booking.timers:
            timer.cancel()
        for pool in booking.pools:
            self._pools.release(pool, remove_nodes=remove_nodes)
        self._retry_waiting()

    def _forget(self, key: Key) -> None:
        """A deleted request: its nodes go once no pod runs on them (looked at again until then)."""
        booking = self._bookings.get(key)
        if booking is None:
            return
        if booking.provisioned and self._pools.busy_pods(booking.nodes):
            booking.timers.append(self._loop.call_later(BUSY_RECHECK_SECONDS, self._forget, key))
            return
        self._give_back(key, remove_nodes=booking.provisioned)

    def _retry(self, key: Key) -> None:
        request = self._informer.objects.get(key)
        if request is not None:
            self._on_request("MODIFIED", request)

    def _retry_waiting(self) -> None:
        """Pools came free: the requests still waiting for capacity look again."""
        for key in list(self._informer.objects):
            booking = self._bookings.get(key)
            if booking is None or not booking.pools:
                self._retry(key)

    # -- the API -------------------------------------------------------------------------------

    def _template(self, namespace: str, name: str) -> Obj | None:
        try:
            template = self._core.read_namespaced_pod_template(name, namespace)
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        serialized: Obj = self._api.sanitize_for_serialization(template)
        return serialized

    def _get(self, key: Key) -> Obj | None:
        try:
            found: Obj = self._custom.get_namespaced_custom_object(GROUP, VERSION, key[0], PLURAL, key[1])
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        return found

    def _write(self, key: Key, change: Callable[[Obj], object]) -> None:
        """Read the request, change its status, write it through ``/status`` (again on a conflict); a request gone
        meanwhile is left alone, and so is an unchanged status."""
        for _ in range(5):
            request = self._get(key)
            if request is None:
                return
            before = repr(request.get("status"))
            change(request)
            if repr(request.get("status")) == before:
                return
            try:
                self._custom.replace_namespaced_custom_object_status(GROUP, VERSION, key[0], PLURAL, key[1], request)
                return
            except client.ApiException as err:
                if err.status == 404:
                    return
                if err.status != 409:
                    raise
        log.warning("ProvisioningRequest %s/%s: status write kept conflicting", *key)


def _accept(request: Obj) -> None:
    cond.set_condition(request, cond.ACCEPTED, True, *cond.ACCEPTED_REASON)
    cond.set_condition(request, cond.PROVISIONED, False, *cond.PENDING_REASON)
