"""Kueue Workload helpers: conditions, requests, priority and names, as kubernetes-sigs/kueue words them.

Upstream (v0.17.1, the release xpk installs): condition types and reasons from
``apis/kueue/v1beta2/workload_types.go``; ``pkg/workload/workload.go`` (``SetQuotaReservation``,
``UnsetQuotaReservationWithCondition``, ``SetEvictedCondition``, ``SetPreemptedCondition``,
``SetRequeuedCondition``, ``SetFinishedCondition``, ``QueuedWaitTime``); ``pkg/workload/admissionchecks.go``
(``SyncAdmittedCondition``: Admitted follows QuotaReserved and the admission checks' states); evictions as
``Evict`` and ``prepareForEviction`` write them (``Evicted=True`` with the reason, ``Deactivated`` joined to its
underlying cause as ``DeactivatedDueTo<cause>`` by ``ReasonWithCause``, ``schedulingStats.evictions`` counted by
reason and cause, the Event ``EvictedDueTo<reason>``), ``UpdateRequeueState``/``SetRequeueState`` (``requeueState``
``count`` and ``requeueAt``) and ``SetDeactivationTarget``; workload names from
``pkg/controller/jobframework/workload_names.go`` (``<kind>-<owner>-<first 5 hex of sha1(kind, group, name,
uid)>``); priority from ``pkg/controller/jobframework/reconciler.go`` ``ExtractPriority`` and
``pkg/util/priority/priority.go``: the ``kueue.x-k8s.io/priority-class`` label names a WorkloadPriorityClass;
else the first pod template's ``priorityClassName`` names a PriorityClass; else the globalDefault
PriorityClass (the lowest if several); else 0.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from elastic_training.local.cluster.resources import PRIORITY_CLASSES, WORKLOAD_PRIORITY_CLASSES, WORKLOADS, ApiError
from elastic_training.local.cluster.store import Obj, Store, now_rfc3339
from elastic_training.local.descriptions.quantity import QuantityError, parse_quantity
from elastic_training.local.nodeagent.logs import parse_rfc3339
from elastic_training.operators.constants import KUEUE_GROUP, LABEL_KUEUE_PRIORITY_CLASS

# Condition types (workload_types.go).
QUOTA_RESERVED, ADMITTED, FINISHED = "QuotaReserved", "Admitted", "Finished"
EVICTED, PREEMPTED, REQUEUED = "Evicted", "Preempted", "Requeued"
PODS_READY, DEACTIVATION_TARGET = "PodsReady", "DeactivationTarget"
# Reasons.
REASON_PENDING = "Pending"
REASON_INADMISSIBLE = "Inadmissible"
REASON_EVICTED_BY_PREEMPTION = "Preempted"
REASON_IN_CLUSTER_QUEUE = "InClusterQueue"
REASON_SUCCEEDED, REASON_FAILED = "Succeeded", "Failed"
# Evictions other than a preemption, and the requeues that end them (workload_types.go).
REASON_PODS_READY_TIMEOUT = "PodsReadyTimeout"
REASON_DEACTIVATED = "Deactivated"
REASON_CLUSTER_QUEUE_STOPPED, REASON_LOCAL_QUEUE_STOPPED = "ClusterQueueStopped", "LocalQueueStopped"
REASON_NODE_FAILURES, REASON_ADMISSION_CHECK = "NodeFailures", "AdmissionCheck"
REASON_REQUEUING_LIMIT_EXCEEDED = "RequeuingLimitExceeded"
REASON_BACKOFF_FINISHED, REASON_REACTIVATED = "BackoffFinished", "Reactivated"
REASON_CLUSTER_QUEUE_RESTARTED, REASON_LOCAL_QUEUE_RESTARTED = "ClusterQueueRestarted", "LocalQueueRestarted"
# PodsReady's reasons (workload_types.go; pkg/controller/jobframework/reconciler.go generatePodsReadyCondition).
WAIT_FOR_START, WAIT_FOR_RECOVERY, STARTED, RECOVERED = "WaitForStart", "WaitForRecovery", "Started", "Recovered"
NO_RESERVATION = ("NoReservation", "The workload has no reservation")
ADMITTED_REASON = ("Admitted", "The workload is admitted")
UNSATISFIED_CHECKS = ("UnsatisfiedChecks", "The workload has not all checks ready")
UNSATISFIED_CHECKS_NO_RESERVATION = (
    "NoReservationUnsatisfiedChecks",
    "The workload has no reservation and not all checks ready",
)

Resources = dict[str, Fraction]
MAX_CONDITION_MESSAGE = 32 * 1024  # api.TruncateConditionMessage


def conditions_of(wl: Obj) -> list[Obj]:
    conditions: list[Obj] = wl.setdefault("status", {}).setdefault("conditions", [])
    return conditions


def find(wl: Obj | None, kind: str) -> Obj | None:
    """The condition ``kind`` of an object's status (a Workload's, a JobSet's); None when either is missing."""
    return next((c for c in ((wl or {}).get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def is_true(wl: Obj | None, kind: str) -> bool:
    found = find(wl, kind)
    return found is not None and found.get("status") == "True"


def set_status_condition(wl: Obj, kind: str, status: bool, reason: str, message: str) -> bool:
    """``apimeta.SetStatusCondition``: add or update (False conditions too); the transition time moves only
    when the status flips. Returns whether anything changed."""
    conditions = conditions_of(wl)
    value = "True" if status else "False"
    message = message[:MAX_CONDITION_MESSAGE]
    generation = int(wl.get("metadata", {}).get("generation", 1))
    current = next((c for c in conditions if c.get("type") == kind), None)
    if current is None:
        conditions.append(
            {
                "type": kind,
                "status": value,
                "reason": reason,
                "message": message,
                "observedGeneration": generation,
                "lastTransitionTime": now_rfc3339(),
            }
        )
        return True
    changed = False
    if current.get("status") != value:
        current.update(status=value, lastTransitionTime=now_rfc3339())
        changed = True
    for key, new in (("reason", reason), ("message", message), ("observedGeneration", generation)):
        if current.get(key) != new:
            current[key] = new
            changed = True
    return changed


def sync_admitted(wl: Obj) -> bool:
    """``SyncAdmittedCondition``: Admitted is True exactly while quota is reserved and every admission check in
    ``status.admissionChecks`` is Ready (none: quota alone); a Workload never admitted gets no condition."""
    reserved = is_true(wl, QUOTA_RESERVED)
    checks_ready = all(c.get("state") == "Ready" for c in (wl.get("status") or {}).get("admissionChecks") or [])
    admitted = reserved and checks_ready
    if is_true(wl, ADMITTED) == admitted:
        return False
    if admitted:
        reason, message = ADMITTED_REASON
    elif not reserved and not checks_ready:
        reason, message = UNSATISFIED_CHECKS_NO_RESERVATION
    elif not reserved:
        reason, message = NO_RESERVATION
    else:
        reason, message = UNSATISFIED_CHECKS
    return set_status_condition(wl, ADMITTED, admitted, reason, message)


def set_quota_reservation(wl: Obj, admission: Obj) -> None:
    """``SetQuotaReservation`` then ``SyncAdmittedCondition``; an active Evicted/Preempted turns False."""
    wl.setdefault("status", {})["admission"] = admission
    queue = admission["clusterQueue"]
    set_status_condition(wl, QUOTA_RESERVED, True, "QuotaReserved", f"Quota reserved in ClusterQueue {queue}")
    for kind in (EVICTED, PREEMPTED):
        previous = find(wl, kind)
        if previous is not None and previous.get("status") == "True":
            set_status_condition(wl, kind, False, "QuotaReserved", f"Previously: {previous.get('message', '')}")
    sync_admitted(wl)


def unset_quota_reservation(wl: Obj, reason: str, message: str) -> bool:
    """``UnsetQuotaReservationWithCondition``: QuotaReserved False with ``reason``, no admission, Admitted synced."""
    changed = set_status_condition(wl, QUOTA_RESERVED, False, reason, message)
    status = wl.setdefault("status", {})
    if status.get("admission") is not None:
        status.pop("admission")
        changed = True
    return sync_admitted(wl) or changed


def write_status(store: Store, wl: Obj, change: Callable[[Obj], Any]) -> Obj | None:
    """``change`` the Workload's status as stored now; the Workload as written, None when it is gone."""
    meta = wl["metadata"]
    try:
        return store.mutate(WORKLOADS, meta["namespace"], meta["name"], change, subresource="status")
    except ApiError as err:
        if err.code == 404:
            return None
        raise


def remove_condition(wl: Obj, kind: str) -> bool:
    """``apimeta.RemoveStatusCondition``; whether there was one."""
    conditions = conditions_of(wl)
    kept = [c for c in conditions if c.get("type") != kind]
    if len(kept) == len(conditions):
        return False
    conditions[:] = kept
    return True


def reason_with_cause(reason: str, cause: str) -> str:
    """``ReasonWithCause``: ``<reason>DueTo<cause>``."""
    return f"{reason}DueTo{cause}"


def set_evicted(wl: Obj, reason: str, message: str, cause: str = "") -> str:
    """``Evict``'s patch (``prepareForEviction``): ``Evicted=True`` with ``reason`` (``Deactivated`` with a cause
    becomes ``DeactivatedDueTo<cause>``), and the eviction counted in ``schedulingStats.evictions`` by reason and
    underlying cause. Returns the Event reason ``reportEvictedWorkload`` records."""
    written = reason_with_cause(reason, cause) if reason == REASON_DEACTIVATED and cause else reason
    set_status_condition(wl, EVICTED, True, written, message)
    stats = wl.setdefault("status", {}).setdefault("schedulingStats", {}).setdefault("evictions", [])
    entry = next((e for e in stats if e.get("reason") == reason and e.get("underlyingCause", "") == cause), None)
    if entry is None:
        stats.append({"reason": reason, "underlyingCause": cause, "count": 1})
    else:
        entry["count"] = int(entry.get("count") or 0) + 1
    event = reason_with_cause(EVICTED, reason)
    return reason_with_cause(event, cause) if reason == REASON_DEACTIVATED and cause else event


def set_requeued(wl: Obj, reason: str, message: str, status: bool) -> bool:
    """``SetRequeuedCondition``."""
    return set_status_condition(wl, REQUEUED, status, reason, message)


def requeue_at(wl: Obj) -> datetime | None:
    """``status.requeueState.requeueAt`` (None when unset or unreadable)."""
    stamp = (((wl.get("status") or {}).get("requeueState")) or {}).get("requeueAt")
    try:
        return parse_rfc3339(str(stamp)) if stamp else None
    except ValueError:
        return None


def requeue_count(wl: Obj) -> int:
    return int((((wl.get("status") or {}).get("requeueState")) or {}).get("count") or 0)


def update_requeue_state(wl: Obj, wait_seconds: float) -> None:
    """``UpdateRequeueState``: one more requeue, ``requeueAt`` ``wait_seconds`` from now (never moved earlier)."""
    state = wl.setdefault("status", {}).setdefault("requeueState", {})
    wanted = now_rfc3339(wait_seconds)
    current = state.get("requeueAt")
    if current is None or parse_rfc3339(str(current)) < parse_rfc3339(wanted):
        state["requeueAt"] = wanted
    state["count"] = requeue_count(wl) + 1


def is_active(wl: Obj) -> bool:
    """``IsActive``: ``spec.active``, true unless set false."""
    return (wl.get("spec") or {}).get("active") is not False


def queued_since(wl: Obj) -> datetime:
    """``QueuedWaitTime``'s start: the Requeued condition's transition, else the creation time."""
    requeued = find(wl, REQUEUED)
    stamp = (requeued or {}).get("lastTransitionTime") or wl["metadata"].get("creationTimestamp")
    return parse_rfc3339(str(stamp)) if stamp else datetime.now(UTC)


def workload_name(jobset: Obj) -> str:
    """``GetWorkloadNameForOwnerWithGVK`` for a JobSet (``jobset-<name>-<hash5>``, at most 253 characters)."""
    meta = jobset["metadata"]
    digest = hashlib.sha1(f"JobSet\njobset.x-k8s.io\n{meta['name']}\n{meta['uid']}".encode()).hexdigest()
    return f"{('jobset-' + meta['name'])[: 253 - 6]}-{digest[:5]}"


def _container_requests(container: Obj) -> Resources:
    out: Resources = {}
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    for name, value in merged.items():
        try:
            out[str(name)] = parse_quantity(value)
        except QuantityError:
            continue
    return out


def pod_requests(pod_spec: Obj) -> Resources:
    """One pod's requests as the scheduler counts them (``resourcehelper.PodRequests``): the containers' sum,
    at least each init container's, plus the pod overhead; a limit without a request counts as the request."""
    total: Resources = {}
    for container in pod_spec.get("containers") or []:
        for name, value in _container_requests(container).items():
            total[name] = total.get(name, Fraction(0)) + value
    for container in pod_spec.get("initContainers") or []:
        for name, value in _container_requests(container).items():
            total[name] = max(total.get(name, Fraction(0)), value)
    for name, value in (pod_spec.get("overhead") or {}).items():
        try:
            total[str(name)] = total.get(str(name), Fraction(0)) + parse_quantity(value)
        except QuantityError:
            continue
    return {name: value for name, value in total.items() if value > 0}


def quantity_string(value: Fraction) -> str:
    """A quantity as ``resource.Quantity.String`` writes a decimal one (``16``, ``500m``, ``232G``)."""
    if value.denominator != 1:
        millis = value * 1000
        return f"{int(millis)}m" if millis.denominator == 1 else str(float(value))
    number = value.numerator
    if number == 0:
        return "0"
    for suffix in ("E", "P", "T", "G", "M", "k"):
        scale = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}[suffix]
        if number % scale == 0:
            return f"{number // scale}{suffix}"
    return str(number)


def priority_of(store: Store, jobset: Obj) -> tuple[Obj | None, int]:
    """``ExtractPriority``: (priorityClassRef or None, value); ``ApiError`` 404 when the named class is missing."""
    label = (jobset["metadata"].get("labels") or {}).get(LABEL_KUEUE_PRIORITY_CLASS)
    if label:
        wpc = store.get(WORKLOAD_PRIORITY_CLASSES, "", label)
        return {"group": KUEUE_GROUP, "kind": "WorkloadPriorityClass", "name": label}, int(wpc.get("value", 0))
    name = ""
    for rjob in jobset.get("spec", {}).get("replicatedJobs") or []:
        spec = ((rjob.get("template") or {}).get("spec") or {}).get("template", {}).get("spec") or {}
        if spec.get("priorityClassName"):
            name = str(spec["priorityClassName"])
            break
    if name:
        pc = store.get(PRIORITY_CLASSES, "", name)
        return {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": name}, int(pc.get("value", 0))
    defaults = [pc for pc in store.list(PRIORITY_CLASSES)[0] if pc.get("globalDefault")]
    if defaults:
        lowest = min(defaults, key=lambda pc: int(pc.get("value", 0)))
        return {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": lowest["metadata"]["name"]}, int(
            lowest.get("value", 0)
        )
    return None, 0


def priority(wl: Obj) -> int:
    return int((wl.get("spec") or {}).get("priority") or 0)


def missing_priority_class(err: ApiError) -> bool:
    return err.code == 404
