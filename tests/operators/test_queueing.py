"""Reading Kueue's answer off the objects: the JobSet's suspension and its Workload's admission, in upstream's words
(kubernetes-sigs/kueue apis/kueue/v1beta2/workload_types.go; kubernetes-sigs/jobset pkg/constants)."""

from __future__ import annotations

from typing import Any

import pytest

from elastic_training.operators.queueing import (
    QueueState,
    is_queued_jobset,
    jobset_suspension,
    workload_status,
)

PENDING_MESSAGE = "couldn't assign flavors to pod set worker: " + (
    "insufficient unused quota for google.com/tpu in flavor v5e, 16 more needed"
)
PREEMPTED_MESSAGE = (
    "Preempted to accommodate a workload (UID: u1, JobUID: j1) due to prioritization in the ClusterQueue"
)


def cond(kind: str, status: str, reason: str = "", message: str = "", at: str = "2026-12-01T20:00:00Z") -> Any:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": at}


def workload(*conditions: Any, active: bool = True, cluster_queue: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": list(conditions)}
    if cluster_queue:
        status["admission"] = {"clusterQueue": cluster_queue, "podSetAssignments": []}
    return {"metadata": {"name": "jobset-run-1a2b3"}, "spec": {"active": active, "queueName": "q"}, "status": status}


CASES = [
    ("none exists", None, QueueState.NOT_QUEUED, "no Kueue Workload"),
    ("new, no conditions yet", workload(), QueueState.PENDING, "waiting for quota"),
    (
        "pending for quota",
        workload(cond("QuotaReserved", "False", "Pending", PENDING_MESSAGE)),
        QueueState.PENDING,
        "Pending: couldn't assign flavors",
    ),
    (
        "admitted",
        workload(
            cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue v5e-small"),
            cond("Admitted", "True", "Admitted", "The workload is admitted"),
            cluster_queue="v5e-small",
        ),
        QueueState.ADMITTED,
        "Admitted",
    ),
    (
        "quota reserved, admitted before, an admission check no longer ready",
        workload(
            cond("QuotaReserved", "True", "QuotaReserved"),
            cond("Admitted", "False", "UnsatisfiedChecks", "The workload has not all checks ready"),
        ),
        QueueState.PROVISIONING,
        "UnsatisfiedChecks: The workload has not all checks ready",
    ),
    (
        # Kueue v0.17.1 SyncAdmittedCondition: no Admitted condition until the first admission (not "admitted")
        "quota reserved, its admission check pending, no Admitted condition yet",
        {
            **workload(cond("QuotaReserved", "True", "QuotaReserved")),
            "status": {
                "conditions": [cond("QuotaReserved", "True", "QuotaReserved")],
                "admissionChecks": [
                    {"name": "dws-prov", "state": "Pending", "message": "Waiting for the capacity to be provisioned"}
                ],
            },
        },
        QueueState.PROVISIONING,
        "admission check dws-prov Pending: Waiting for the capacity to be provisioned",
    ),
    (
        "evicted by preemption, its job being stopped",
        workload(
            cond("QuotaReserved", "True", "QuotaReserved"),
            cond("Admitted", "True", "Admitted"),
            cond("Evicted", "True", "Preempted", PREEMPTED_MESSAGE),
            cond("Preempted", "True", "InClusterQueue", PREEMPTED_MESSAGE),
        ),
        QueueState.EVICTED,
        "Preempted: Preempted to accommodate",
    ),
    (
        "preempted and requeued: pending again",
        workload(
            cond("QuotaReserved", "False", "Pending", PREEMPTED_MESSAGE),
            cond("Admitted", "False", "NoReservation"),
            cond("Evicted", "True", "Preempted", PREEMPTED_MESSAGE),
            cond("Requeued", "True", "Preempted", PREEMPTED_MESSAGE),
        ),
        QueueState.PENDING,
        "Pending: Preempted to accommodate",
    ),
    (
        "deactivated: in no queue",
        workload(cond("QuotaReserved", "False", "Pending"), active=False),
        QueueState.NOT_QUEUED,
        "deactivated",
    ),
    ("finished", workload(cond("Finished", "True", "Succeeded", "done")), QueueState.NOT_QUEUED, "finished"),
]


@pytest.mark.parametrize(("found", "state", "said"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_workload_status(found: dict[str, Any] | None, state: QueueState, said: str) -> None:
    status = workload_status(found)
    assert status.state is state
    assert said in status.reason


def test_eviction_reasons_are_kept() -> None:
    status = workload_status(next(c[1] for c in CASES if c[0] == "evicted by preemption, its job being stopped"))
    assert (status.evicted_reason, status.preempted_reason) == ("Preempted", "InClusterQueue")
    assert status.evicted_message == PREEMPTED_MESSAGE


@pytest.mark.parametrize(
    ("jobset", "suspended", "since"),
    [
        ({"spec": {}}, False, None),
        ({"spec": {"suspend": True}}, True, None),  # the controller has yet to write the condition
        (
            {"spec": {"suspend": True}, "status": {"conditions": [cond("Suspended", "True", "SuspendedJobs")]}},
            True,
            1_796_155_200.0,
        ),
        (
            {"spec": {"suspend": False}, "status": {"conditions": [cond("Suspended", "False", "ResumeJobs")]}},
            False,
            1_796_155_200.0,
        ),
        (  # suspended again, the condition still saying resumed: no time of its own yet
            {"spec": {"suspend": True}, "status": {"conditions": [cond("Suspended", "False", "ResumeJobs")]}},
            True,
            None,
        ),
    ],
)
def test_jobset_suspension(jobset: dict[str, Any], suspended: bool, since: float | None) -> None:
    assert jobset_suspension(jobset) == (suspended, since)


def test_a_jobset_is_queued_by_its_label() -> None:
    assert is_queued_jobset({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "multislice-queue"}}})
    assert not is_queued_jobset({"metadata": {"labels": {}}})
    assert not is_queued_jobset(None)
