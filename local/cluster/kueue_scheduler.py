"""Kueue's scheduler on the local cluster: queue order, flavor assignment, quota reservation, preemption.

Checked against kubernetes-sigs/kueue v0.17.1 (the release xpk installs):
- ``pkg/scheduler/scheduler.go``: a pass takes each ClusterQueue's pending Workloads in queue order
  (priority, then creation time: ``pkg/workload/ordering``); one that fits reserves quota
  (``SetQuotaReservation``; Events ``QuotaReserved`` "Quota reserved in ClusterQueue X, wait time since
  queued was Ns" and ``Admitted``); one that does not gets ``QuotaReserved=False`` reason ``Pending`` with
  the flavor assigner's message and a Warning Event ``Pending`` (``requeueAndUpdate``). ``BestEffortFIFO``:
  an inadmissible head goes aside and the Workloads behind it are tried; ``StrictFIFO``: it blocks them.
  A Workload waiting for its preemptions stays at the head (``RequeueReasonPendingPreemption``), its
  message ending ". Pending the preemption of N workload(s)".
- ``pkg/scheduler/flavorassigner/flavorassigner.go``: per pod set, per resource group, the flavors in
  order; a flavor whose ``nodeLabels`` contradict the pod's ``nodeSelector`` is skipped ("flavor F doesn't
  match node affinity"), an untolerated ``nodeTaint`` too; a request above the nominal quota is
  "insufficient quota for R in flavor F, previously considered podsets requests (A) + current podset request
  (B) > maximum capacity (C)", one above what is unused "insufficient unused quota for R in flavor F, N more
  needed" (preemption may help); a resource no group covers is "resource R unavailable in ClusterQueue".
  Reasons are sorted and joined with ", "; pod sets as "couldn't assign flavors to pod set P: ..." joined
  with "; ".
- ``pkg/scheduler/preemption/preemption.go`` with ``common/ordering.go`` and ``common/preemption_policy.go``:
  candidates are the ClusterQueue's Workloads holding quota in a flavor-resource that needs preemption and
  allowed by ``withinClusterQueue`` (``LowerPriority``: strictly lower priority; ``LowerOrNewerEqualPriority``:
  or equal priority and queued later), ordered already-evicted first, lower priority first, most recently
  reserved first; they are taken until the preemptor fits, then those not needed are given back (last taken
  kept); each target gets ``Evicted`` (reason ``Preempted``) and ``Preempted`` (reason ``InClusterQueue``)
  with "Preempted to accommodate a workload (UID: U, JobUID: J) due to prioritization in the ClusterQueue;
  preemptor path: /cq; preemptee path: /cq", and Events ``Preempted``/``PreemptedWorkload``.
- ClusterQueue and LocalQueue status (``pkg/cache/scheduler/cache.go``, ``pkg/controller/core/
  {clusterqueue,localqueue}_controller.go``): ``pendingWorkloads``, ``reservingWorkloads``,
  ``admittedWorkloads``, ``flavorsReservation``, ``flavorsUsage``, condition ``Active`` (``Ready``, "Can admit
  new workloads" / "Can submit new workloads to localQueue").

- ``stopPolicy`` (``pkg/cache/scheduler/clusterqueue.go`` ``inactiveReason``, ``pkg/controller/core/
  localqueue_controller.go``): a stopped ClusterQueue (``Hold`` or ``HoldAndDrain``) admits nothing and says
  ``Active=False`` reason ``Stopped`` "Can't admit new workloads: is stopped."; a stopped LocalQueue ``Stopped``
  "LocalQueue is stopped", one whose ClusterQueue is stopped ``ClusterQueueIsInactive``; their pending Workloads are
  ``Inadmissible`` "LocalQueue Q is inactive" / "ClusterQueue C is inactive" (the Workload controller's messages).
  Draining the admitted ones is the Workload controller's (:mod:`local.cluster.kueue_workload_controller`).
- Requeuing backoff: a pending Workload whose ``requeueState.requeueAt`` is in the future is not tried
  (``pkg/cache/queue/cluster_queue.go`` ``backoffWaitingTimeExpired``); with ``waitForPodsReady``'s requeuing
  ``timestamp: Eviction`` one evicted by a PodsReady timeout queues from that eviction (``pkg/workload/
  workload.go`` ``GetQueueOrderTimestamp``).

Admission checks: quota reservation lists the checks the admission needs and leaves ``Admitted`` to them
(``kueue_admission_checks.reserve_quota``, the scheduler's ``prepareWorkload``).

Simplified: no cohorts, borrowing or lending, no fair sharing, no topology-aware scheduling, no partial admission,
no ``blockAdmission``. A LocalQueue or ClusterQueue that does not exist leaves the Workload ``QuotaReserved=False``
reason ``Inadmissible`` ("LocalQueue Q doesn't exist", "ClusterQueue C doesn't exist",
``pkg/controller/core/workload_controller.go``).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from elastic_training.local.cluster import kueue_workload as kw
from elastic_training.local.cluster.events import NORMAL, WARNING, record_event
from elastic_training.local.cluster.kueue_admission_checks import reserve_quota
from elastic_training.local.cluster.resources import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    NAMESPACES,
    RESOURCE_FLAVORS,
    WORKLOADS,
)
from elastic_training.local.cluster.scheduler_filters import tolerates
from elastic_training.local.cluster.store import Obj, Store
from elastic_training.local.descriptions.kueue_config import EVICTION_TIMESTAMP, OFF, KueueConfiguration
from elastic_training.local.descriptions.quantity import parse_quantity
from elastic_training.operators.constants import LABEL_KUEUE_JOB_UID

COMPONENT = "kueue-admission"
FlavorResource = tuple[str, str]
Usage = dict[FlavorResource, Fraction]

FIT, PREEMPT, NO_FIT = 2, 1, 0
_HUMAN_REASON = {kw.REASON_IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue"}


@dataclass
class PodSetAssignment:
    name: str
    count: int
    mode: int = FIT
    flavors: dict[str, str] = field(default_factory=dict)
    usage: dict[str, Fraction] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    needs_preemption: set[FlavorResource] = field(default_factory=set)

    def message(self) -> str:
        return ", ".join(sorted(self.reasons))


@dataclass
class Assignment:
    pod_sets: list[PodSetAssignment]

    @property
    def mode(self) -> int:
        return min((p.mode for p in self.pod_sets), default=FIT)

    def message(self) -> str:
        parts = [f"couldn't assign flavors to pod set {p.name}: {p.message()}" for p in self.pod_sets if p.mode != FIT]
        return "; ".join(parts)

    def usage(self) -> Usage:
        total: Usage = {}
        for pod_set in self.pod_sets:
            for resource, value in pod_set.usage.items():
                key = (pod_set.flavors[resource], resource)
                total[key] = total.get(key, Fraction(0)) + value
        return total

    def admission(self, cluster_queue: str) -> Obj:
        return {
            "clusterQueue": cluster_queue,
            "podSetAssignments": [
                {
                    "name": p.name,
                    "flavors": dict(p.flavors),
                    "resourceUsage": {r: kw.quantity_string(v) for r, v in p.usage.items()},
                    "count": p.count,
                }
                for p in self.pod_sets
            ],
        }


def quotas(cq: Obj) -> tuple[dict[str, int], dict[FlavorResource, Fraction], list[list[str]]]:
    """(resource → its group's index, nominal quota per flavor-resource, each group's flavors in order)."""
    group_of: dict[str, int] = {}
    nominal: dict[FlavorResource, Fraction] = {}
    flavors: list[list[str]] = []
    for index, group in enumerate((cq.get("spec") or {}).get("resourceGroups") or []):
        for resource in group.get("coveredResources") or []:
            group_of[str(resource)] = index
        names = []
        for flavor in group.get("flavors") or []:
            names.append(str(flavor["name"]))
            for quota in flavor.get("resources") or []:
                nominal[(str(flavor["name"]), str(quota["name"]))] = parse_quantity(quota.get("nominalQuota", 0))
        flavors.append(names)
    return group_of, nominal, flavors


def _flavor_blocker(flavor_name: str, flavor: Obj | None, pod_spec: Obj) -> str:
    """Why a flavor cannot take a pod set regardless of quota ("" when it can)."""
    if flavor is None:
        return f"flavor {flavor_name} not found"
    spec = flavor.get("spec") or {}
    selector = pod_spec.get("nodeSelector") or {}
    labels = spec.get("nodeLabels") or {}
    if any(key in labels and labels[key] != value for key, value in selector.items()):
        return f"flavor {flavor_name} doesn't match node affinity"
    for taint in spec.get("nodeTaints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(pod_spec.get("tolerations"), taint):
            shown = f"{taint.get('key')}={taint.get('value', '')}:{taint.get('effect')}"
            return f"untolerated taint {shown} in flavor {flavor_name}"
    return ""


def assign_flavors(wl: Obj, cq: Obj, flavors: Mapping[str, Obj], usage: Usage) -> Assignment:
    """The flavor assigner for one Workload against the ClusterQueue's quota and current usage."""
    group_of, nominal, group_flavors = quotas(cq)
    assumed: Usage = {}  # this Workload's earlier pod sets
    out: list[PodSetAssignment] = []
    for pod_set in (wl.get("spec") or {}).get("podSets") or []:
        count = int(pod_set.get("count", 0))
        pod_spec = (pod_set.get("template") or {}).get("spec") or {}
        requests = {r: v * count for r, v in kw.pod_requests(pod_spec).items()}
        psa = PodSetAssignment(str(pod_set.get("name", "main")), count)
        by_group: dict[int, dict[str, Fraction]] = {}
        for resource, value in requests.items():
            if resource not in group_of:
                psa.mode = NO_FIT
                psa.reasons.append(f"resource {resource} unavailable in ClusterQueue")
                continue
            by_group.setdefault(group_of[resource], {})[resource] = value
        if psa.mode == NO_FIT:
            out.append(psa)
            continue
        for index, group_requests in sorted(by_group.items()):
            best: tuple[int, str, set[FlavorResource]] | None = None
            reasons: list[str] = []
            for flavor_name in group_flavors[index]:
                blocker = _flavor_blocker(flavor_name, flavors.get(flavor_name), pod_spec)
                if blocker:
                    reasons.append(blocker)
                    continue
                mode, needs = FIT, set()
                for resource, value in group_requests.items():
                    key = (flavor_name, resource)
                    capacity = nominal.get(key, Fraction(0))
                    before = assumed.get(key, Fraction(0))
                    wanted = before + value
                    available = capacity - usage.get(key, Fraction(0))
                    if wanted > capacity:
                        reasons.append(
                            f"insufficient quota for {resource} in flavor {flavor_name}, previously considered "
                            f"podsets requests ({kw.quantity_string(before)}) + current podset request "
                            f"({kw.quantity_string(value)}) > maximum capacity ({kw.quantity_string(capacity)})"
                        )
                        mode = NO_FIT
                        break
                    if wanted > available:
                        reasons.append(
                            f"insufficient unused quota for {resource} in flavor {flavor_name}, "
                            f"{kw.quantity_string(wanted - available)} more needed"
                        )
                        mode = min(mode, PREEMPT)
                        needs.add(key)
                if best is None or mode > best[0]:
                    best = (mode, flavor_name, needs)
                if mode == FIT:
                    break
            if best is None or best[0] == NO_FIT:
                psa.mode = NO_FIT
                psa.reasons.extend(reasons)
                continue
            mode, flavor_name, needs = best
            if mode == PREEMPT:
                psa.reasons.extend(reasons)
                psa.needs_preemption |= needs
            psa.mode = min(psa.mode, mode)
            for resource, value in group_requests.items():
                psa.flavors[resource] = flavor_name
                psa.usage[resource] = value
                key = (flavor_name, resource)
                assumed[key] = assumed.get(key, Fraction(0)) + value
        out.append(psa)
    return Assignment(out)


def label_selector_matches(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """A ``metav1.LabelSelector``: null matches nothing, ``{}`` everything (ClusterQueue ``namespaceSelector``)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = set(expression.get("values") or [])
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _stamp(condition: Obj | None, fallback: str) -> str:
    return str((condition or {}).get("lastTransitionTime") or fallback)


class KueueScheduler:
    """One scheduling pass over every ClusterQueue (level-triggered: run whenever anything Kueue reads changes)."""

    def __init__(self, store: Store, configuration: KueueConfiguration = OFF) -> None:
        self._store = store
        self.configuration = configuration
        self._order = itertools.count()
        self._seen: dict[str, int] = {}  # Workload uid → arrival order (creation times have 1 s resolution)
        # Workload uid → what its last inadmissible try saw. Upstream parks an inadmissible Workload
        # (``inadmissibleWorkloads``) until something it depends on changes; here it is tried again only when the
        # Workload itself, its ClusterQueue, the flavors or the queue's reservations changed since: with the
        # same inputs the flavor assigner gives the same answer, and a thousand queued Workloads cost nothing.
        self._parked: dict[str, tuple[Any, ...]] = {}

    def _arrival(self, wl: Obj) -> int:
        uid = str(wl["metadata"]["uid"])
        if uid not in self._seen:
            self._seen[uid] = next(self._order)
        return self._seen[uid]

    def _queue_key(self, wl: Obj) -> tuple[int, str, int]:
        return (-kw.priority(wl), self._queue_stamp(wl), self._arrival(wl))

    def _queue_stamp(self, wl: Obj) -> str:
        """``GetQueueOrderTimestamp``: with ``waitForPodsReady``'s ``timestamp: Eviction``, a Workload evicted by a
        PodsReady timeout queues from that eviction, behind those that waited meanwhile; else from its creation."""
        pods_ready = self.configuration.wait_for_pods_ready
        evicted = kw.find(wl, kw.EVICTED)
        if (
            pods_ready is not None
            and pods_ready.requeuing.timestamp == EVICTION_TIMESTAMP
            and evicted is not None
            and evicted.get("status") == "True"
            and evicted.get("reason") == kw.REASON_PODS_READY_TIMEOUT
        ):
            return str(evicted.get("lastTransitionTime") or "")
        return str(wl["metadata"].get("creationTimestamp", ""))

    def schedule(self) -> None:
        flavors = {f["metadata"]["name"]: f for f in self._store.list(RESOURCE_FLAVORS)[0]}
        queues = {q["metadata"]["name"]: q for q in self._store.list(CLUSTER_QUEUES)[0]}
        local_queues = {
            (q["metadata"]["namespace"], q["metadata"]["name"]): q for q in self._store.list(LOCAL_QUEUES)[0]
        }
        namespaces = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in self._store.list(NAMESPACES)[0]}
        by_queue: dict[str, list[Obj]] = {name: [] for name in queues}
        for wl in self._store.view(WORKLOADS)[0]:  # the stored objects: read here, never changed in place
            self._arrival(wl)
            if kw.is_true(wl, kw.FINISHED) or wl["metadata"].get("deletionTimestamp"):
                continue
            namespace = wl["metadata"]["namespace"]
            queue_name = str((wl.get("spec") or {}).get("queueName") or "")
            reserved = kw.is_true(wl, kw.QUOTA_RESERVED)
            admission_queue = str(((wl.get("status") or {}).get("admission") or {}).get("clusterQueue") or "")
            if reserved and admission_queue in by_queue:
                by_queue[admission_queue].append(wl)
                continue
            local = local_queues.get((namespace, queue_name))
            if local is None:
                self._pending(wl, kw.REASON_INADMISSIBLE, f"LocalQueue {queue_name} doesn't exist", event=False)
                continue
            if stopped(local):
                self._pending(wl, kw.REASON_INADMISSIBLE, f"LocalQueue {queue_name} is inactive", event=False)
                continue
            cq_name = str((local.get("spec") or {}).get("clusterQueue") or "")
            if cq_name not in by_queue:
                self._pending(wl, kw.REASON_INADMISSIBLE, f"ClusterQueue {cq_name} doesn't exist", event=False)
                continue
            if stopped(queues[cq_name]):
                self._pending(wl, kw.REASON_INADMISSIBLE, f"ClusterQueue {cq_name} is inactive", event=False)
                continue
            by_queue[cq_name].append(wl)
        live = {str(wl["metadata"]["uid"]) for waiting in by_queue.values() for wl in waiting}
        self._parked = {uid: seen for uid, seen in self._parked.items() if uid in live}
        for name in sorted(queues):
            self._schedule_queue(queues[name], by_queue[name], flavors, namespaces)
        self._write_queue_statuses(queues, local_queues)

    def _schedule_queue(
        self, cq: Obj, workloads: list[Obj], flavors: Mapping[str, Obj], namespaces: Mapping[str, Mapping[str, str]]
    ) -> None:
        name = cq["metadata"]["name"]
        spec = cq.get("spec") or {}
        strict = spec.get("queueingStrategy") == "StrictFIFO"
        policy = str((spec.get("preemption") or {}).get("withinClusterQueue") or "Never")
        reserving = [wl for wl in workloads if kw.is_true(wl, kw.QUOTA_RESERVED)]
        pending = sorted((wl for wl in workloads if not kw.is_true(wl, kw.QUOTA_RESERVED)), key=self._queue_key)
        usage = _usage_of(reserving)
        inputs = _inputs(cq, flavors, reserving)
        blocked = False
        now = datetime.now(UTC)
        for wl in pending:
            if (wl.get("spec") or {}).get("active") is False:
                continue
            at = kw.requeue_at(wl)
            if at is not None and at > now:
                continue  # backing off (backoffWaitingTimeExpired): the Workload controller requeues it
            if blocked:
                continue
            namespace = wl["metadata"]["namespace"]
            if not label_selector_matches(spec.get("namespaceSelector"), namespaces.get(namespace, {})):
                self._pending(wl, kw.REASON_PENDING, "Workload namespace doesn't match ClusterQueue selector")
                blocked = strict
                continue
            uid = str(wl["metadata"]["uid"])
            if self._parked.get(uid) == (wl["metadata"].get("resourceVersion"), inputs):
                blocked = strict  # it did not fit last time, and nothing it depends on has changed
                continue
            assignment = assign_flavors(wl, cq, flavors, usage)
            if assignment.mode == FIT:
                self._parked.pop(uid, None)
                admitted = self._admit(wl, name, assignment)
                for key, value in assignment.usage().items():
                    usage[key] = usage.get(key, Fraction(0)) + value
                if admitted is not None:
                    reserving.append(admitted)
                    inputs = _inputs(cq, flavors, reserving)
                continue
            message = assignment.message()
            if assignment.mode == PREEMPT and policy != "Never":
                targets = self._targets(wl, cq, policy, assignment, reserving, flavors, usage)
                if targets:
                    for target in targets:
                        if not kw.is_true(target, kw.EVICTED):
                            self._preempt(target, wl, name)
                    message += f". Pending the preemption of {len(targets)} workload(s)"
                    self._pending(wl, kw.REASON_PENDING, message)
                    self._parked.pop(uid, None)
                    blocked = True  # it stays at the head until its targets release their quota
                    continue
            self._parked[uid] = (self._pending(wl, kw.REASON_PENDING, message), inputs)
            blocked = strict

    # -- preemption --------------------------------------------------------------------------

    def _targets(
        self,
        wl: Obj,
        cq: Obj,
        policy: str,
        assignment: Assignment,
        reserving: list[Obj],
        flavors: Mapping[str, Obj],
        usage: Usage,
    ) -> list[Obj]:
        needed: set[FlavorResource] = set()
        for pod_set in assignment.pod_sets:
            needed |= pod_set.needs_preemption
        preemptor_priority = kw.priority(wl)
        preemptor_key = self._queue_key(wl)[1:]

        def allowed(candidate: Obj) -> bool:
            if kw.priority(candidate) < preemptor_priority:
                return True
            return (
                policy == "LowerOrNewerEqualPriority"
                and kw.priority(candidate) == preemptor_priority
                and preemptor_key < self._queue_key(candidate)[1:]
            )

        candidates = [c for c in reserving if allowed(c) and needed & set(_usage_of([c]))]
        candidates.sort(
            key=lambda c: (
                not kw.is_true(c, kw.EVICTED),
                kw.priority(c),
                _reversed_stamp(_stamp(kw.find(c, kw.QUOTA_RESERVED), "")),
                str(c["metadata"]["uid"]),
            )
        )
        remaining = dict(usage)
        targets: list[Obj] = []

        def fits(current: Usage) -> bool:
            return assign_flavors(wl, cq, flavors, current).mode == FIT

        for candidate in candidates:
            _subtract(remaining, _usage_of([candidate]))
            targets.append(candidate)
            if fits(remaining):
                break
        else:
            return []
        # fillBackWorkloads: give back, most recently taken first (but the last), those it fits without.
        for candidate in reversed(targets[:-1]):
            trial = dict(remaining)
            _add(trial, _usage_of([candidate]))
            if fits(trial):
                remaining = trial
                targets.remove(candidate)
        return targets

    def _preempt(self, target: Obj, preemptor: Obj, cq_name: str) -> None:
        job_uid = (preemptor["metadata"].get("labels") or {}).get(LABEL_KUEUE_JOB_UID) or "UNKNOWN"
        path = f"/{cq_name}"
        message = (
            f"Preempted to accommodate a workload (UID: {preemptor['metadata']['uid']}, JobUID: {job_uid}) due to "
            f"{_HUMAN_REASON[kw.REASON_IN_CLUSTER_QUEUE]}; preemptor path: {path}; preemptee path: {path}"
        )

        def change(wl: Obj) -> None:
            kw.set_status_condition(wl, kw.PREEMPTED, True, kw.REASON_IN_CLUSTER_QUEUE, message)
            kw.set_status_condition(wl, kw.EVICTED, True, kw.REASON_EVICTED_BY_PREEMPTION, message)

        meta = target["metadata"]
        updated = self._store.mutate(WORKLOADS, meta["namespace"], meta["name"], change, subresource="status")
        own, theirs = kw.priority(preemptor), kw.priority(target)
        record_event(
            self._store,
            updated,
            NORMAL,
            "Preempted",
            f"{message}; preemptor effective priority: {own} (base: {own}, boost: 0); preemptee effective priority: "
            f"{theirs} (base: {theirs}, boost: 0)",
            COMPONENT,
        )
        record_event(
            self._store,
            preemptor,
            NORMAL,
            "PreemptedWorkload",
            f"Preempted workload {meta['namespace']}/{meta['name']} (UID: {meta['uid']}) in ClusterQueue {cq_name}; "
            f"preemptor effective priority: {own} (base: {own}, boost: 0); preemptee effective priority: {theirs} "
            f"(base: {theirs}, boost: 0)",
            COMPONENT,
        )

    # -- writing Workloads -------------------------------------------------------------------

    def _admit(self, wl: Obj, cq_name: str, assignment: Assignment) -> Obj | None:
        """Reserve the quota; the Workload as written (None when it is gone)."""
        waited = (datetime.now(UTC) - kw.queued_since(wl)).total_seconds()
        admission = assignment.admission(cq_name)
        updated = self._write(wl, lambda o: reserve_quota(self._store, o, admission))
        if updated is None:
            return None
        record_event(
            self._store,
            updated,
            NORMAL,
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {cq_name}, wait time since queued was {waited:.0f}s",
            COMPONENT,
        )
        if kw.is_true(updated, kw.ADMITTED):  # else once its admission checks are Ready (kueue_admission_checks)
            record_event(
                self._store,
                updated,
                NORMAL,
                "Admitted",
                f"Admitted by ClusterQueue {cq_name}, wait time since reservation was 0s",
                COMPONENT,
            )
        return updated

    def _pending(self, wl: Obj, reason: str, message: str, *, event: bool = True) -> Any:
        """Say why ``wl`` waits (written only when that changed); its resourceVersion after."""
        before = kw.find(wl, kw.QUOTA_RESERVED)
        if before is not None and (before.get("status"), before.get("reason"), before.get("message")) == (
            "False",
            reason,
            message,
        ):
            return wl["metadata"].get("resourceVersion")
        updated = self._write(wl, lambda o: kw.unset_quota_reservation(o, reason, message))
        if updated is not None and event:
            record_event(self._store, updated, WARNING, reason, message, COMPONENT)
        return (updated or wl)["metadata"].get("resourceVersion")

    def _write(self, wl: Obj, change: Callable[[Obj], Any]) -> Obj | None:
        return kw.write_status(self._store, wl, change)

    # -- queue status ------------------------------------------------------------------------

    def _write_queue_statuses(self, queues: Mapping[str, Obj], local_queues: Mapping[tuple[str, str], Obj]) -> None:
        workloads = [
            wl
            for wl in self._store.view(WORKLOADS)[0]
            if not kw.is_true(wl, kw.FINISHED) and not wl["metadata"].get("deletionTimestamp")
        ]
        lq_target = {key: str((lq.get("spec") or {}).get("clusterQueue") or "") for key, lq in local_queues.items()}
        for name, cq in queues.items():
            mine = [
                wl
                for wl in workloads
                if (
                    ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue") == name
                    and kw.is_true(wl, kw.QUOTA_RESERVED)
                )
                or (
                    not kw.is_true(wl, kw.QUOTA_RESERVED)
                    and lq_target.get((wl["metadata"]["namespace"], str((wl.get("spec") or {}).get("queueName"))))
                    == name
                )
            ]
            status = _queue_status(cq, mine, "Can admit new workloads", cq)
            if stopped(cq):  # clusterQueue.inactiveReason
                _set_inactive(status, cq, "Stopped", "Can't admit new workloads: is stopped.")
            self._write_status(CLUSTER_QUEUES, "", name, status)
        for (namespace, lq_name), lq in local_queues.items():
            mine = [
                wl
                for wl in workloads
                if wl["metadata"]["namespace"] == namespace and (wl.get("spec") or {}).get("queueName") == lq_name
            ]
            backing = queues.get(lq_target[(namespace, lq_name)])
            status = _queue_status(backing or {}, mine, "Can submit new workloads to localQueue", lq)
            # The LocalQueue controller's order: stopped, then its ClusterQueue missing, then inactive.
            if stopped(lq):
                _set_inactive(status, lq, "Stopped", "LocalQueue is stopped")
            elif backing is None:
                _set_inactive(status, lq, "ClusterQueueDoesNotExist", "Can't submit new workloads to clusterQueue")
            elif stopped(backing):
                _set_inactive(status, lq, "ClusterQueueIsInactive", "Can't submit new workloads to clusterQueue")
            self._write_status(LOCAL_QUEUES, namespace, lq_name, status)

    def _write_status(self, rtype: Any, namespace: str, name: str, status: Obj) -> None:
        current = self._store.find(rtype, namespace, name)
        if current is None:
            return
        old = current.get("status") or {}
        merged = copy.deepcopy(status)
        # Keep the Active condition's transition time when nothing flipped.
        for condition in merged.get("conditions") or []:
            previous = next((c for c in old.get("conditions") or [] if c.get("type") == condition["type"]), None)
            if previous is not None and previous.get("status") == condition["status"]:
                condition["lastTransitionTime"] = previous.get("lastTransitionTime", condition["lastTransitionTime"])
        if merged == old:
            return
        self._store.mutate(rtype, namespace, name, lambda o: o.__setitem__("status", merged), subresource="status")


def stopped(queue: Obj) -> bool:
    """A ClusterQueue's or LocalQueue's ``stopPolicy`` is ``Hold`` or ``HoldAndDrain``: it admits nothing new."""
    return str((queue.get("spec") or {}).get("stopPolicy") or "None") != "None"


def _set_inactive(status: Obj, queue: Obj, reason: str, message: str) -> None:
    holder: Obj = {"status": status, "metadata": queue["metadata"]}
    kw.set_status_condition(holder, "Active", False, reason, message)


def _queue_status(cq: Obj, workloads: list[Obj], ready_message: str, queue: Obj) -> Obj:
    """A ClusterQueue's (``queue`` is ``cq``) or a LocalQueue's (``queue``, backed by ``cq``) status."""
    reserving = [wl for wl in workloads if kw.is_true(wl, kw.QUOTA_RESERVED)]
    admitted = [wl for wl in reserving if kw.is_true(wl, kw.ADMITTED)]
    pending = [wl for wl in workloads if not kw.is_true(wl, kw.QUOTA_RESERVED)]
    _, nominal, group_flavors = quotas(cq) if cq else ({}, {}, [])
    holder: Obj = {"metadata": {"generation": (queue.get("metadata") or {}).get("generation", 1)}, "status": {}}
    borrowed = queue.get("kind") == "ClusterQueue"  # a LocalQueue's usage has no `borrowed` (LocalQueueResourceUsage)
    kw.set_status_condition(holder, "Active", True, "Ready", ready_message)
    status: Obj = holder["status"]
    status.update(
        pendingWorkloads=len(pending),
        reservingWorkloads=len(reserving),
        admittedWorkloads=len(admitted),
        flavorsReservation=_flavors_usage(_usage_of(reserving), nominal, group_flavors, borrowed),
        flavorsUsage=_flavors_usage(_usage_of(admitted), nominal, group_flavors, borrowed),
    )
    return status


def _flavors_usage(
    usage: Usage, nominal: Mapping[FlavorResource, Fraction], group_flavors: list[list[str]], borrowed: bool
) -> list[Obj]:
    out = []
    for names in group_flavors:
        for flavor in names:
            resources = []
            for f, resource in nominal:
                if f != flavor:
                    continue
                entry = {"name": resource, "total": kw.quantity_string(usage.get((flavor, resource), Fraction(0)))}
                if borrowed:
                    entry["borrowed"] = "0"  # no cohorts here: nothing is ever borrowed
                resources.append(entry)
            out.append({"name": flavor, "resources": resources})
    return out


def _inputs(cq: Obj, flavors: Mapping[str, Obj], reserving: list[Obj]) -> tuple[Any, ...]:
    """What a pending Workload's assignment and preemption targets depend on besides the Workload itself."""
    return (
        cq["metadata"].get("uid"),
        cq["metadata"].get("generation"),
        tuple(sorted((n, f["metadata"].get("resourceVersion")) for n, f in flavors.items())),
        tuple(sorted((str(w["metadata"]["uid"]), w["metadata"].get("resourceVersion")) for w in reserving)),
    )


def _usage_of(workloads: list[Obj]) -> Usage:
    total: Usage = {}
    for wl in workloads:
        admission = (wl.get("status") or {}).get("admission") or {}
        for psa in admission.get("podSetAssignments") or []:
            for resource, value in (psa.get("resourceUsage") or {}).items():
                flavor = (psa.get("flavors") or {}).get(resource)
                if flavor is None:
                    continue
                key = (str(flavor), str(resource))
                total[key] = total.get(key, Fraction(0)) + parse_quantity(value)
    return total


def _subtract(into: Usage, other: Usage) -> None:
    for key, value in other.items():
        into[key] = into.get(key, Fraction(0)) - value


def _add(into: Usage, other: Usage) -> None:
    for key, value in other.items():
        into[key] = into.get(key, Fraction(0)) + value


def _reversed_stamp(stamp: str) -> tuple[int, ...]:
    """Sort key putting later RFC 3339 stamps first."""
    return tuple(-ord(ch) for ch in stamp)
