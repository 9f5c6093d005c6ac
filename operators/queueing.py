"""What Kueue says about a JobSet: its suspension and its Workload's admission, read from the objects. Pure.

Kueue's JobSet integration (kubernetes-sigs/kueue ``pkg/controller/jobs/jobset``; KEP-83 for preemption) creates one
``kueue.x-k8s.io/v1beta2`` Workload per JobSet that carries the ``kueue.x-k8s.io/queue-name`` label, labelled
``kueue.x-k8s.io/job-uid=<the JobSet's uid>`` and owned by it. The JobSet stays ``spec.suspend: true`` until the
Workload is admitted; to preempt it, Kueue sets the Workload's ``Evicted`` condition (reason ``Preempted``) and its
``Preempted`` condition (reason ``InClusterQueue``, ``InCohortReclamation``, ...), suspends the JobSet again, then
clears the quota reservation (``QuotaReserved=False``, reason ``Pending``, the eviction's message) and requeues it
(``Requeued``). Condition types and reasons are those of ``apis/kueue/v1beta2/workload_types.go``; the JobSet's own
``Suspended`` condition (reason ``SuspendedJobs``, ``ResumeJobs`` when resumed) is kubernetes-sigs/jobset's
``pkg/constants``.

With admission checks (xpk's ``--flex``: the ``dws-prov`` check and its ProvisioningRequest), quota is reserved first
(``QuotaReserved=True``) and the Workload is admitted only once every entry of ``status.admissionChecks`` is
``Ready``; until then it has no ``Admitted`` condition (or ``Admitted=False``, ``UnsatisfiedChecks``): the JobSet waits
for capacity being provisioned, not for quota. A ``Retry`` check evicts it (reason ``AdmissionCheck``), a ``Rejected``
one deactivates it (``spec.active: false``, evicted ``DeactivatedDueToAdmissionCheck``); kubernetes-sigs/kueue
``pkg/controller/core/workload_controller.go`` and ``pkg/controller/admissionchecks/provisioning/controller.go``.

Every eviction reason is told apart (:class:`EvictionKind`, :func:`eviction_kind`), because each costs the run
something different (:data:`EVICTION_COSTS`): Kueue v0.17.1 evicts for ``Preempted``, ``PodsReadyTimeout`` (with
``waitForPodsReady``: its pods not all ready within ``timeout`` of the admission, or not back within
``recoveryTimeout`` of one failing; ``status.requeueState`` counts the requeues and ``requeueAt`` ends the backoff),
``ClusterQueueStopped`` / ``LocalQueueStopped`` (a ``stopPolicy`` of ``HoldAndDrain``), ``AdmissionCheck`` (a check
asked for a retry), ``NodeFailures`` (topology-aware scheduling found no replacement node) and ``Deactivated``
(``spec.active: false``; ``DeactivatedDueTo<cause>`` when Kueue deactivated it itself, e.g.
``DeactivatedDueToRequeuingLimitExceeded`` once ``backoffLimitCount`` requeues were spent). Upstream:
``pkg/controller/core/workload_controller.go``, ``pkg/workload/workload.go`` (``ReasonWithCause``),
``pkg/controller/jobframework/reconciler.go`` (``Requeued`` is True at once only for ``Preempted`` and
``NodeFailures``).

A Workload pending with words no wait can change (:func:`never_fits`: a pod set asks for more than its ClusterQueue's
maximum capacity, a resource no resource group covers, or only flavors it cannot use) is told apart from one waiting
for quota others hold: the run can fail at once instead of waiting out ``queue_timeout``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from elastic_training.operators.constants import LABEL_KUEUE_QUEUE_NAME
from elastic_training.operators.slice_failures import parse_time

Obj = Mapping[str, Any]

__all__ = [
    "EVICTION_COSTS",
    "CheckState",
    "EvictionCost",
    "EvictionKind",
    "QueueState",
    "WorkloadStatus",
    "admission_checks",
    "eviction_kind",
    "is_queued_jobset",
    "jobset_suspension",
    "never_fits",
    "workload_status",
]

# Workload condition types and the reasons read here (apis/kueue/v1beta2/workload_types.go).
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
PREEMPTED = "Preempted"
REQUEUED = "Requeued"
FINISHED = "Finished"
DEACTIVATION_TARGET = "DeactivationTarget"
EVICTED_BY_PREEMPTION = "Preempted"
DEACTIVATED_REASON = "Deactivated"
REQUEUING_LIMIT_EXCEEDED = "RequeuingLimitExceeded"
# QuotaReserved=False reasons while the scheduler finds no flavors (pkg/scheduler/scheduler.go): "Pending", or with
# the UnadmittedWorkloadsObservability gate (alpha, off by default in v0.19) the most severe of the flavors' granular
# reasons (flavorassigner.go mostSevereReason); the message is the flavor assigner's either way.
SCHEDULER_PENDING_REASONS = frozenset({"Pending", "WaitingForQuota", "ExceedsMaxQuota", "NoMatchingFlavor"})

# The flavor assigner's clauses that no wait can change while the ClusterQueue and its ResourceFlavors stay as they
# are (kubernetes-sigs/kueue pkg/scheduler/flavorassigner/flavorassigner.go, the same words v0.15 to v0.19:
# fitsResourceQuota's "> maximum capacity", which counts what the cohort could lend (PotentialAvailable); a resource
# no resource group covers; a flavor whose nodeLabels contradict the pod set's nodeSelector, or whose taint it does
# not tolerate). "insufficient unused quota" (others hold it: preemption or a wait helps) and "flavor F not found"
# (being created) are not among them.
_NEVER_CLAUSES = (
    r"insufficient quota for [^,;]+ in flavor [^,;]+, previously considered podsets requests \([^)]*\)"
    r" \+ current podset request \([^)]*\) > maximum capacity \([^)]*\)",
    r"resource [^,;]+ unavailable in ClusterQueue",
    r"flavor [^,;]+ doesn't match node affinity",
    r"untolerated taint [^,;]+ in flavor [^,;]+",
)
_NEVER_CLAUSE = "(?:" + "|".join(_NEVER_CLAUSES) + ")"
_NEVER_POD_SET = re.compile(rf"{_NEVER_CLAUSE}(?:, {_NEVER_CLAUSE})*")
# Assignment.Message(): "couldn't assign flavors to pod set P: <clauses>", pod sets joined with "; ".
_POD_SET_MESSAGE = re.compile(r"couldn't assign flavors to pod set ([^:;]+): ([^;]*)")


class EvictionKind(StrEnum):
    """Why Kueue took an admitted JobSet's quota back, as the run is judged for it."""

    PREEMPTED = "preempted"  # Preempted: a higher-priority workload took the quota
    PODS_READY_TIMEOUT = "pods_ready_timeout"  # PodsReadyTimeout: pods not ready within waitForPodsReady's timeout
    QUEUE_STOPPED = "queue_stopped"  # ClusterQueueStopped / LocalQueueStopped: an admin drained the queue
    ADMISSION_CHECK = "admission_check"  # AdmissionCheck: a check (provisioning) asked for a retry
    NODE_FAILURES = "node_failures"  # NodeFailures: no replacement for a failed node
    DEACTIVATED = "deactivated"  # Deactivated: spec.active set false (by a person, or Kueue for another cause)
    REQUEUING_LIMIT_EXCEEDED = "requeuing_limit_exceeded"  # DeactivatedDueToRequeuingLimitExceeded
    OTHER = "other"  # a reason this release does not know: waited out, as a preemption is


class EvictionCost(StrEnum):
    """What an eviction costs the run."""

    FREE = "free"  # spends no budget: waited out, the same JobSet resumed from its checkpoint on re-admission
    LIMITED = "limited"  # spends no restart budget, but counts toward its own limit (max_pods_ready_evictions)
    ENDS_RUN = "ends_run"  # nothing will admit it again: the run fails, saying why


EVICTION_COSTS: Mapping[EvictionKind, EvictionCost] = {
    EvictionKind.PREEMPTED: EvictionCost.FREE,
    EvictionKind.QUEUE_STOPPED: EvictionCost.FREE,
    EvictionKind.ADMISSION_CHECK: EvictionCost.FREE,
    EvictionKind.NODE_FAILURES: EvictionCost.FREE,
    EvictionKind.OTHER: EvictionCost.FREE,
    EvictionKind.PODS_READY_TIMEOUT: EvictionCost.LIMITED,
    EvictionKind.DEACTIVATED: EvictionCost.ENDS_RUN,
    EvictionKind.REQUEUING_LIMIT_EXCEEDED: EvictionCost.ENDS_RUN,
}
# How the log, the report's readers and the view say what each eviction was.
EVICTION_WORDS: Mapping[EvictionKind, str] = {
    EvictionKind.PREEMPTED: "preempted by a higher-priority workload",
    EvictionKind.PODS_READY_TIMEOUT: "evicted because its pods were not all ready within Kueue's waitForPodsReady "
    "timeout (after the admission, or after a pod failed: recoveryTimeout)",
    EvictionKind.QUEUE_STOPPED: "evicted because its Kueue queue was stopped (stopPolicy: HoldAndDrain)",
    EvictionKind.ADMISSION_CHECK: "evicted by an admission check (its capacity is being provisioned again)",
    EvictionKind.NODE_FAILURES: "evicted after node failures Kueue could not replace",
    EvictionKind.DEACTIVATED: "deactivated (its Workload's spec.active was set false)",
    EvictionKind.REQUEUING_LIMIT_EXCEEDED: "deactivated by Kueue after its requeuing limit "
    "(waitForPodsReady.requeuingStrategy.backoffLimitCount) was reached",
    EvictionKind.OTHER: "evicted by Kueue",
}
_EVICTION_REASONS: Mapping[str, EvictionKind] = {
    "Preempted": EvictionKind.PREEMPTED,
    "PodsReadyTimeout": EvictionKind.PODS_READY_TIMEOUT,
    "ClusterQueueStopped": EvictionKind.QUEUE_STOPPED,
    "LocalQueueStopped": EvictionKind.QUEUE_STOPPED,
    "AdmissionCheck": EvictionKind.ADMISSION_CHECK,
    "NodeFailures": EvictionKind.NODE_FAILURES,
    DEACTIVATED_REASON: EvictionKind.DEACTIVATED,
}


def eviction_kind(reason: str) -> EvictionKind:
    """The kind of an ``Evicted`` condition's reason (``DeactivatedDueTo<cause>`` is a deactivation, with its own
    kind when the cause is the requeuing limit)."""
    if reason == f"{DEACTIVATED_REASON}DueTo{REQUEUING_LIMIT_EXCEEDED}":
        return EvictionKind.REQUEUING_LIMIT_EXCEEDED
    if reason.startswith(f"{DEACTIVATED_REASON}DueTo"):
        return EvictionKind.DEACTIVATED
    return _EVICTION_REASONS.get(reason, EvictionKind.OTHER)


class QueueState(StrEnum):
    """Where the JobSet's Workload stands."""

    NONE = "none"  # the JobSet carries no queue label: Kueue does not manage it
    PENDING = "pending"  # in its queue, no quota reserved
    ADMITTED = "admitted"  # quota reserved and every admission check passed
    EVICTED = "evicted"  # admitted, then evicted (a preemption, ...): its job is being stopped
    PROVISIONING = "provisioning"  # quota reserved, its admission checks (a ProvisioningRequest, ...) not all Ready
    NOT_QUEUED = "not_queued"  # no Workload, or one neither pending nor admitted (kueue #14811)
    DEACTIVATED = "deactivated"  # spec.active: false: nothing admits it until someone sets it true again


@dataclass(frozen=True)
class CheckState:
    """One entry of a Workload's ``status.admissionChecks``: a check's name, state and message."""

    name: str
    state: str  # Pending, Ready, Retry or Rejected (apis/kueue/v1beta2/admissioncheck_types.go CheckState)
    message: str = ""
    # retryCount: the check's retries so far. Kueue shows ``Retry`` only until its workload controller evicts the
    # Workload and resets the check to Pending (pkg/workload/admissionchecks.go), so a reader may never see it;
    # the count stays.
    retry_count: int = 0

    def said(self) -> str:
        return f"admission check {self.name} {self.state}" + (f": {self.message}" if self.message else "")


def admission_checks(workload: Obj | None) -> tuple[CheckState, ...]:
    """The Workload's admission checks, as Kueue's workload controller and the checks' controllers write them."""
    status = (workload or {}).get("status")
    found = status.get("admissionChecks") if isinstance(status, Mapping) else None
    if not isinstance(found, list):
        return ()
    return tuple(
        CheckState(str(c.get("name") or ""), str(c.get("state") or ""), str(c.get("message") or "")[:500], _count(c))
        for c in found[:16]
        if isinstance(c, Mapping)
    )


def _count(check: Mapping[str, Any]) -> int:
    found = check.get("retryCount")
    return found if isinstance(found, int) and not isinstance(found, bool) and 0 <= found < 1_000_000 else 0


@dataclass(frozen=True)
class WorkloadStatus:
    """A Workload's admission as it bears on the run: its state and what Kueue said why."""

    state: QueueState
    reason: str = ""  # e.g. "Pending: couldn't assign flavors to pod set worker: insufficient quota ..."
    evicted_reason: str = ""  # the Evicted condition's reason while it is true ("Preempted", ...)
    evicted_message: str = ""
    preempted_reason: str = ""  # the Preempted condition's reason while it is true ("InClusterQueue", ...)
    cluster_queue: str = ""
    checks: tuple[CheckState, ...] = ()  # status.admissionChecks
    # The kind of the eviction in force (the Evicted condition's reason; a deactivation's, from DeactivationTarget
    # until Kueue writes it), "" when none.
    eviction: str = ""
    requeue_count: int | None = None  # status.requeueState.count: requeues after PodsReady timeouts so far
    requeue_at: float | None = None  # status.requeueState.requeueAt: the end of the requeuing backoff
    # Pending with words no wait can change (never_fits): the pod set and Kueue's clauses, "" otherwise.
    never_fits: str = ""


def _conditions(obj: Obj) -> dict[str, Obj]:
    status = obj.get("status")
    found = status.get("conditions") if isinstance(status, Mapping) else None
    return {str(c.get("type")): c for c in found or [] if isinstance(c, Mapping)}


def _true(condition: Obj | None) -> bool:
    return condition is not None and str(condition.get("status")) == "True"


def _said(condition: Obj | None) -> str:
    if condition is None:
        return ""
    return ": ".join(str(p) for p in (condition.get("reason"), condition.get("message")) if p)[:1000]


def is_queued_jobset(jobset: Obj | None) -> bool:
    """Whether Kueue manages ``jobset``: it carries the ``kueue.x-k8s.io/queue-name`` label."""
    if jobset is None:
        return False
    meta = jobset.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return isinstance(labels, Mapping) and bool(labels.get(LABEL_KUEUE_QUEUE_NAME))


def jobset_suspension(jobset: Obj) -> tuple[bool, float | None]:
    """Whether the JobSet is suspended (``spec.suspend``, or its ``Suspended`` condition), and since when.

    The time is the ``Suspended`` condition's ``lastTransitionTime`` when it agrees, else ``None`` (the controller
    has yet to write it).
    """
    spec = jobset.get("spec")
    suspend = bool(spec.get("suspend")) if isinstance(spec, Mapping) else False
    condition = _conditions(jobset).get("Suspended")
    suspended = suspend or _true(condition)
    if condition is None or _true(condition) != suspended:
        return suspended, None
    return suspended, parse_time(condition.get("lastTransitionTime"))


def workload_status(workload: Obj | None) -> WorkloadStatus:
    """The admission of ``workload`` (``None``: no Workload exists for the JobSet)."""
    if workload is None:
        return WorkloadStatus(QueueState.NOT_QUEUED, "no Kueue Workload exists for the JobSet")
    conditions = _conditions(workload)
    spec = workload.get("spec")
    status = workload.get("status")
    admission = status.get("admission") if isinstance(status, Mapping) else None
    queue = str(admission.get("clusterQueue") or "") if isinstance(admission, Mapping) else ""
    evicted, preempted = conditions.get(EVICTED), conditions.get(PREEMPTED)
    evicted_fields: dict[str, Any] = {
        "evicted_reason": str(evicted.get("reason") or "") if _true(evicted) and evicted else "",
        "evicted_message": str(evicted.get("message") or "")[:1000] if _true(evicted) and evicted else "",
        "preempted_reason": str(preempted.get("reason") or "") if _true(preempted) and preempted else "",
        "cluster_queue": queue,
        "checks": admission_checks(workload),
        **_requeue_state(status),
    }
    if evicted_fields["evicted_reason"]:
        evicted_fields["eviction"] = eviction_kind(evicted_fields["evicted_reason"]).value
    if _true(conditions.get(FINISHED)):
        return WorkloadStatus(QueueState.NOT_QUEUED, f"its Workload finished ({_said(conditions.get(FINISHED))})")
    if isinstance(spec, Mapping) and spec.get("active") is False:
        return _deactivated(conditions, evicted_fields)
    reserved = conditions.get(QUOTA_RESERVED)
    if _true(evicted) and _true(reserved):
        return WorkloadStatus(QueueState.EVICTED, _said(evicted), **evicted_fields)
    if _true(reserved):
        admitted = conditions.get(ADMITTED)
        if _true(admitted):
            return WorkloadStatus(QueueState.ADMITTED, _said(admitted), **evicted_fields)
        # Quota reserved and not admitted: an admission check is not Ready. Before its first admission the Workload
        # has no Admitted condition at all (SyncAdmittedCondition, kueue pkg/workload/admissionchecks.go).
        waiting = [c.said() for c in admission_checks(workload) if c.state != "Ready"]
        said = "; ".join(waiting) or _said(admitted) or "quota reserved; Kueue has not admitted it yet"
        return WorkloadStatus(QueueState.PROVISIONING, said[:1000], **evicted_fields)
    requeued = conditions.get(REQUEUED)
    if requeued is not None and not _true(requeued):
        # Evicted, and back in its queue only after a backoff (Requeued=False until BackoffFinished).
        return WorkloadStatus(QueueState.PENDING, _said(requeued), **evicted_fields)
    pending = reserved is not None and str(reserved.get("reason") or "") in SCHEDULER_PENDING_REASONS
    never = never_fits(str(reserved.get("message") or "")) if reserved is not None and pending else ""
    return WorkloadStatus(
        QueueState.PENDING, _said(reserved) or "waiting for quota", **evicted_fields, never_fits=never[:1000]
    )


def never_fits(message: str) -> str:
    """The first pod set Kueue can never admit as the ClusterQueue stands, with Kueue's clauses ("pod set workers:
    insufficient quota for google.com/tpu in flavor F, ... > maximum capacity (32)"), from the scheduler's Pending
    message; "" when every pod set could still be admitted by waiting (for quota others hold, or preemption).

    A pod set counts only when each of its clauses is one no wait changes: one clause of any other kind (a flavor
    not found yet, unused quota) and it may still fit."""
    for found in _POD_SET_MESSAGE.finditer(message):
        pod_set, clauses = found.group(1).strip(), found.group(2).strip()
        if _NEVER_POD_SET.fullmatch(clauses):
            return f"pod set {pod_set}: {clauses}"
    return ""


def _requeue_state(status: Any) -> dict[str, Any]:
    """``status.requeueState`` (``count``, ``requeueAt``), unreadable parts left out."""
    state = status.get("requeueState") if isinstance(status, Mapping) else None
    if not isinstance(state, Mapping):
        return {}
    found: dict[str, Any] = {}
    count = state.get("count")
    if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        found["requeue_count"] = count
    at = parse_time(state.get("requeueAt"))
    if at is not None:
        found["requeue_at"] = at
    return found


def _deactivated(conditions: Mapping[str, Obj], fields: Mapping[str, Any]) -> WorkloadStatus:
    """A Workload with ``spec.active: false``: deactivated by someone, or by Kueue itself (its cause in the
    ``Evicted`` reason once written, in ``DeactivationTarget`` before)."""
    evicted, target = conditions.get(EVICTED), conditions.get(DEACTIVATION_TARGET)
    if _true(evicted) and evicted is not None and str(evicted.get("reason") or "").startswith(DEACTIVATED_REASON):
        kind, said = eviction_kind(str(evicted.get("reason"))), _said(evicted)
    elif _true(target) and target is not None:
        cause = str(target.get("reason") or "")
        kind = eviction_kind(f"{DEACTIVATED_REASON}DueTo{cause}" if cause else DEACTIVATED_REASON)
        said = _said(target)
    else:
        kind, said = EvictionKind.DEACTIVATED, "spec.active: false"
    reason = f"its Workload was deactivated ({said})"
    return WorkloadStatus(QueueState.DEACTIVATED, reason, **{**fields, "eviction": kind.value})
