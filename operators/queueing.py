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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from elastic_training.operators.constants import LABEL_KUEUE_QUEUE_NAME
from elastic_training.operators.slice_failures import parse_time

Obj = Mapping[str, Any]

__all__ = [
    "CheckState",
    "QueueState",
    "WorkloadStatus",
    "admission_checks",
    "is_queued_jobset",
    "jobset_suspension",
    "workload_status",
]

# Workload condition types and the reasons read here (apis/kueue/v1beta2/workload_types.go).
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
PREEMPTED = "Preempted"
REQUEUED = "Requeued"
FINISHED = "Finished"
EVICTED_BY_PREEMPTION = "Preempted"


class QueueState(StrEnum):
    """Where the JobSet's Workload stands."""

    NONE = "none"  # the JobSet carries no queue label: Kueue does not manage it
    PENDING = "pending"  # in its queue, no quota reserved
    ADMITTED = "admitted"  # quota reserved and every admission check passed
    EVICTED = "evicted"  # admitted, then evicted (a preemption, ...): its job is being stopped
    PROVISIONING = "provisioning"  # quota reserved, its admission checks (a ProvisioningRequest, ...) not all Ready
    NOT_QUEUED = "not_queued"  # no Workload, or one neither pending nor admitted (kueue #14811)


@dataclass(frozen=True)
class CheckState:
    """One entry of a Workload's ``status.admissionChecks``: a check's name, state and message."""

    name: str
    state: str  # Pending, Ready, Retry or Rejected (apis/kueue/v1beta2/admissioncheck_types.go CheckState)
    message: str = ""

    def said(self) -> str:
        return f"admission check {self.name} {self.state}" + (f": {self.message}" if self.message else "")


def admission_checks(workload: Obj | None) -> tuple[CheckState, ...]:
    """The Workload's admission checks, as Kueue's workload controller and the checks' controllers write them."""
    status = (workload or {}).get("status")
    found = status.get("admissionChecks") if isinstance(status, Mapping) else None
    if not isinstance(found, list):
        return ()
    return tuple(
        CheckState(str(c.get("name") or ""), str(c.get("state") or ""), str(c.get("message") or "")[:500])
        for c in found[:16]
        if isinstance(c, Mapping)
    )


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
    }
    if _true(conditions.get(FINISHED)):
        return WorkloadStatus(QueueState.NOT_QUEUED, f"its Workload finished ({_said(conditions.get(FINISHED))})")
    if isinstance(spec, Mapping) and spec.get("active") is False:
        return WorkloadStatus(QueueState.NOT_QUEUED, "its Workload was deactivated (spec.active: false)")
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
    return WorkloadStatus(QueueState.PENDING, _said(reserved) or "waiting for quota", **evicted_fields)
