"""The local kube-scheduler: binds pending pods to nodes, or says why none fits.

Follows kubernetes/kubernetes ``pkg/scheduler`` (v1.32): pods whose ``schedulerName`` is
``default-scheduler``, without ``nodeName``, not being deleted, are taken highest ``priority`` first,
then oldest (``PrioritySort``). Each runs the default profile's filters
(:mod:`local.cluster.scheduler_filters`); among the nodes that pass, the one with the most free cpu
and memory (``NodeResourcesFit`` ``LeastAllocated`` scoring) wins, ties broken at random as
``selectHost`` does. Binding sets ``spec.nodeName`` and ``PodScheduled=True`` (what the binding
subresource's ``assignPod`` writes) and records a ``Scheduled`` event.

A pod no node takes stays ``Pending`` with ``PodScheduled=False``, reason ``Unschedulable`` and the
message of ``FitError.Error()`` (``pkg/scheduler/framework/types.go``), also sent as a
``FailedScheduling`` Warning event::

    0/18 nodes are available: 16 node(s) had untolerated taint {google.com/tpu: present},
    2 Insufficient memory. preemption: 0/18 nodes are available: 16 Preemption is not helpful for
    scheduling, 2 No preemption victims found for incoming pod.

(one line; reasons counted per node and sorted as strings). There is no preemption here, so the
postfilter part always reports what upstream's ``DefaultPreemption`` reports when it finds no
victims. As ``handleSchedulingFailure`` and ``updatePod`` (``pkg/scheduler/schedule_one.go``) write them: the
event's ``action`` is ``Scheduling`` (``Binding`` for ``Scheduled``), its message cut at the events API's
``NoteLengthLimit`` (``truncateMessage``), the condition's message whole, and the condition written only when it
changes (``podutil.UpdatePodCondition``), so its ``lastTransitionTime`` is when the pod first failed to schedule
(what :mod:`operators.scheduling` reads). The event is recorded when the message changes, not on every retry:
upstream records one per attempt, which its event broadcaster folds into one event with a ``series`` count.
Unschedulable pods are retried whenever a node changes or a pod is deleted, ends or is bound elsewhere (upstream's
queueing hints), never by polling.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from fractions import Fraction

from elastic_training.local.cluster.events import NORMAL, WARNING, record_event
from elastic_training.local.cluster.resources import NODES, PODS, ApiError
from elastic_training.local.cluster.scheduler_filters import BoundPod, Rejection, allocatable, filter_node, pod_requests
from elastic_training.local.cluster.store import Obj, Store, WatchEvent, now_rfc3339

log = logging.getLogger(__name__)

SCHEDULER_NAME = "default-scheduler"
PREEMPTION_NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
NO_NODES = "no nodes available to schedule pods"


def needs_scheduling(pod: Obj) -> bool:
    """A pod this scheduler must place: its own, unbound, not deleting, not finished, no gates."""
    spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
    return (
        not spec.get("nodeName")
        and (spec.get("schedulerName") or SCHEDULER_NAME) == SCHEDULER_NAME
        and not meta.get("deletionTimestamp")
        and not spec.get("schedulingGates")
        and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
    )


def occupies_node(pod: Obj) -> bool:
    """A bound pod that still holds its node's resources (every pod not Succeeded/Failed)."""
    return bool((pod.get("spec") or {}).get("nodeName")) and (pod.get("status") or {}).get("phase") not in (
        "Succeeded",
        "Failed",
    )


def fit_error_message(total: int, rejections: list[Rejection]) -> str:
    """``FitError.Error()``: the filter reasons, then DefaultPreemption's verdict, each histogram sorted
    (with no node at all, ``ErrNoNodesAvailable``)."""
    if total == 0:
        return NO_NODES
    reasons = Counter(reason for r in rejections for reason in r.reasons)
    message = f"0/{total} nodes are available:"
    if reasons:
        message += " " + ", ".join(sorted(f"{count} {reason}" for reason, count in reasons.items())) + "."
    verdicts = Counter(NO_VICTIMS if r.resolvable else PREEMPTION_NOT_HELPFUL for r in rejections)
    if verdicts:
        parts = ", ".join(sorted(f"{count} {verdict}" for verdict, count in verdicts.items()))
        message += f" preemption: 0/{total} nodes are available: {parts}."
    return message


def pod_scheduled_condition(pod: Obj, status: str, reason: str = "", message: str = "") -> None:
    """Set the pod's ``PodScheduled`` condition in place (a flip moves ``lastTransitionTime``)."""
    conditions = pod.setdefault("status", {}).setdefault("conditions", [])
    current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
    stamp = now_rfc3339()
    new: Obj = {"type": "PodScheduled", "status": status, "lastProbeTime": None, "lastTransitionTime": stamp}
    if reason:
        new["reason"] = reason
    if message:
        new["message"] = message
    if current is None:
        conditions.append(new)
        return
    if current.get("status") == status:
        new["lastTransitionTime"] = current.get("lastTransitionTime", stamp)
    current.clear()
    current.update(new)


class Scheduler:
    """Places pods on nodes; runs on the store's event loop, woken by pod and node events."""

    def __init__(self, store: Store, rng: random.Random | None = None) -> None:
        self._store = store
        self._rng = rng or random.Random()
        self._scheduled = False  # a pass is queued on the loop
        self._waiting = False  # the last pass left pods unschedulable

    def start(self) -> None:
        """Subscribe to pod and node events and place the pods already pending (call on the loop)."""
        self._store.add_listener(self._on_event)
        self._soon()

    def _on_event(self, event: WatchEvent) -> None:
        if event.rtype == NODES or (event.rtype == PODS and self._wakes(event)):
            self._soon()

    def _wakes(self, event: WatchEvent) -> bool:
        """A pod to place, or (while pods wait) one that frees or moves what a node has."""
        pod = event.object
        if event.type != "DELETED" and needs_scheduling(pod):
            return True
        if not self._waiting:
            return False
        if event.type == "DELETED" or not occupies_node(pod):
            return True
        old = event.old_object
        return old is not None and (old.get("spec") or {}).get("nodeName") != (pod.get("spec") or {}).get("nodeName")

    def _soon(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._pass)

    def _pass(self) -> None:
        self._scheduled = False
        try:
            self.schedule_pending()
        except Exception:  # a bug must not stop scheduling for good: log it; the next event retries
            log.exception("scheduler pass failed")

    def schedule_pending(self) -> None:
        """One scheduling pass over every pending pod, in queue order."""
        nodes, _ = self._store.view(NODES)
        nodes = list(nodes)
        pods, _ = self._store.view(PODS)
        by_name = {n["metadata"]["name"]: n for n in nodes}
        on_node: dict[str, list[Obj]] = {name: [] for name in by_name}
        bound: list[BoundPod] = []
        pending: list[Obj] = []
        for pod in pods:
            if occupies_node(pod):
                node_name = pod["spec"]["nodeName"]
                if node_name in by_name:
                    on_node[node_name].append(pod)
                    bound.append(BoundPod(pod, by_name[node_name]))
            elif needs_scheduling(pod):
                pending.append(pod)
        pending.sort(
            key=lambda p: (
                -int((p.get("spec") or {}).get("priority") or 0),
                str(p["metadata"].get("creationTimestamp", "")),
                p["metadata"].get("namespace", ""),
                p["metadata"]["name"],
            )
        )
        waiting = False
        for pod in pending:
            meta = pod["metadata"]
            feasible: list[Obj] = []
            rejections: list[Rejection] = []
            for node in nodes:
                rejection = filter_node(pod, node, on_node[node["metadata"]["name"]], bound)
                if rejection is None:
                    feasible.append(node)
                else:
                    rejections.append(rejection)
            if not feasible:
                waiting = True
                self._mark_unschedulable(meta["namespace"], meta["name"], fit_error_message(len(nodes), rejections))
                continue
            node = self._pick(pod, feasible, on_node)
            placed = self._bind(meta["namespace"], meta["name"], node["metadata"]["name"])
            if placed is not None:
                on_node[node["metadata"]["name"]].append(placed)
                bound.append(BoundPod(placed, node))
        self._waiting = waiting

    def _pick(self, pod: Obj, feasible: list[Obj], on_node: dict[str, list[Obj]]) -> Obj:
        """``LeastAllocated`` over cpu and memory (the default weights), ties at random."""
        wanted = pod_requests(pod)

        def score(node: Obj) -> Fraction:
            free = allocatable(node)
            total = Fraction(0)
            for resource in ("cpu", "memory"):
                capacity = free.get(resource, Fraction(0))
                if capacity <= 0:
                    continue
                used = sum(
                    (pod_requests(p).get(resource, Fraction(0)) for p in on_node[node["metadata"]["name"]]), Fraction(0)
                )
                used += wanted.get(resource, Fraction(0))
                total += max(capacity - used, Fraction(0)) / capacity
            return total

        scored = [(score(node), node) for node in feasible]
        best = max(s for s, _ in scored)
        return self._rng.choice([node for s, node in scored if s == best])

    def _bind(self, namespace: str, name: str, node_name: str) -> Obj | None:
        """Set ``spec.nodeName`` and ``PodScheduled=True``; None when the pod went away meanwhile."""
        try:
            self._store.mutate(PODS, namespace, name, lambda o: o["spec"].__setitem__("nodeName", node_name))
            pod = self._store.mutate(
                PODS,
                namespace,
                name,
                lambda o: pod_scheduled_condition(o, "True"),
                subresource="status",
            )
        except ApiError as err:
            log.debug("binding %s/%s to %s failed: %s", namespace, name, node_name, err.message)
            return None
        record_event(
            self._store,
            pod,
            NORMAL,
            "Scheduled",
            f"Successfully assigned {namespace}/{name} to {node_name}",
            SCHEDULER_NAME,
            action="Binding",
        )
        return pod

    def _mark_unschedulable(self, namespace: str, name: str, message: str) -> None:
        pod = self._store.find(PODS, namespace, name)
        if pod is None:
            return
        current = next(
            (c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"), None
        )
        if current is not None and current.get("status") == "False" and current.get("message") == message:
            return
        try:
            pod = self._store.mutate(
                PODS,
                namespace,
                name,
                lambda o: pod_scheduled_condition(o, "False", "Unschedulable", message),
                subresource="status",
            )
        except ApiError:
            return
        record_event(self._store, pod, WARNING, "FailedScheduling", message, SCHEDULER_NAME, action="Scheduling")
