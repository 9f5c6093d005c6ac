"""Reading Kueue's answer off the objects: the JobSet's suspension and its Workload's admission, in upstream's words
(kubernetes-sigs/kueue apis/kueue/v1beta2/workload_types.go; kubernetes-sigs/jobset pkg/constants)."""

from __future__ import annotations

from typing import Any

import pytest

from elastic_training.operators.queueing import (
    EVICTION_COSTS,
    EvictionCost,
    EvictionKind,
    QueueState,
    eviction_kind,
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
        "deactivated",
        workload(cond("QuotaReserved", "False", "Pending"), active=False),
        QueueState.DEACTIVATED,
        "deactivated (spec.active: false)",
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


# -- every eviction reason, told apart -----------------------------------------------------------------------

TIMEOUT_MESSAGE = "Exceeded the PodsReady timeout default/jobset-run-1a2b3"
REQUEUE_AT = "2026-12-01T20:01:00Z"


def requeue_state(wl: dict[str, Any], count: int, at: str | None = REQUEUE_AT) -> dict[str, Any]:
    wl["status"]["requeueState"] = {"count": count, **({"requeueAt": at} if at else {})}
    return wl


EVICTIONS = [
    (
        "a PodsReady timeout, its job being stopped",
        requeue_state(
            workload(
                cond("QuotaReserved", "True", "QuotaReserved"),
                cond("Admitted", "True", "Admitted"),
                cond("PodsReady", "False", "WaitForRecovery", "At least one pod has failed, waiting for recovery"),
                cond("Evicted", "True", "PodsReadyTimeout", TIMEOUT_MESSAGE),
            ),
            1,
        ),
        QueueState.EVICTED,
        EvictionKind.PODS_READY_TIMEOUT,
        (1, 1_796_155_260.0),
    ),
    (
        "a PodsReady timeout, released and backing off (Requeued=False until BackoffFinished)",
        requeue_state(
            workload(
                cond("QuotaReserved", "False", "Pending", TIMEOUT_MESSAGE),
                cond("Evicted", "True", "PodsReadyTimeout", TIMEOUT_MESSAGE),
                cond("Requeued", "False", "PodsReadyTimeout", TIMEOUT_MESSAGE),
            ),
            2,
        ),
        QueueState.PENDING,
        EvictionKind.PODS_READY_TIMEOUT,
        (2, 1_796_155_260.0),
    ),
    (
        "a drained ClusterQueue",
        workload(
            cond("QuotaReserved", "False", "Inadmissible", "ClusterQueue cq is inactive"),
            cond("Evicted", "True", "ClusterQueueStopped", "The ClusterQueue is stopped"),
            cond("Requeued", "False", "ClusterQueueStopped", "The ClusterQueue is stopped"),
        ),
        QueueState.PENDING,
        EvictionKind.QUEUE_STOPPED,
        (None, None),
    ),
    (
        "deactivated by Kueue at the requeuing limit",
        workload(
            cond("QuotaReserved", "False", "Pending"),
            cond(
                "Evicted",
                "True",
                "DeactivatedDueToRequeuingLimitExceeded",
                "The workload is deactivated due to exceeding the maximum number of re-queuing retries",
            ),
            active=False,
        ),
        QueueState.DEACTIVATED,
        EvictionKind.REQUEUING_LIMIT_EXCEEDED,
        (None, None),
    ),
    (
        "deactivated by Kueue, before it wrote the eviction (DeactivationTarget)",
        requeue_state(
            workload(
                cond("QuotaReserved", "True", "QuotaReserved"),
                cond("DeactivationTarget", "True", "RequeuingLimitExceeded", "exceeding the maximum number"),
                active=False,
            ),
            3,
            None,
        ),
        QueueState.DEACTIVATED,
        EvictionKind.REQUEUING_LIMIT_EXCEEDED,
        (3, None),
    ),
    (
        "deactivated by a person",
        workload(cond("Evicted", "True", "Deactivated", "The workload is deactivated"), active=False),
        QueueState.DEACTIVATED,
        EvictionKind.DEACTIVATED,
        (None, None),
    ),
]


@pytest.mark.parametrize(
    ("found", "state", "kind", "requeue"), [c[1:] for c in EVICTIONS], ids=[c[0] for c in EVICTIONS]
)
def test_each_eviction_is_read_with_its_kind_and_requeue_state(
    found: dict[str, Any], state: QueueState, kind: EvictionKind, requeue: tuple[int | None, float | None]
) -> None:
    status = workload_status(found)
    assert (status.state, status.eviction) == (state, kind.value)
    assert (status.requeue_count, status.requeue_at) == requeue


@pytest.mark.parametrize(
    ("reason", "kind", "cost"),
    [
        ("Preempted", EvictionKind.PREEMPTED, EvictionCost.FREE),
        ("PodsReadyTimeout", EvictionKind.PODS_READY_TIMEOUT, EvictionCost.LIMITED),
        ("ClusterQueueStopped", EvictionKind.QUEUE_STOPPED, EvictionCost.FREE),
        ("LocalQueueStopped", EvictionKind.QUEUE_STOPPED, EvictionCost.FREE),
        ("AdmissionCheck", EvictionKind.ADMISSION_CHECK, EvictionCost.FREE),
        ("NodeFailures", EvictionKind.NODE_FAILURES, EvictionCost.FREE),
        ("Deactivated", EvictionKind.DEACTIVATED, EvictionCost.ENDS_RUN),
        ("DeactivatedDueToRequeuingLimitExceeded", EvictionKind.REQUEUING_LIMIT_EXCEEDED, EvictionCost.ENDS_RUN),
        ("DeactivatedDueToAdmissionCheck", EvictionKind.DEACTIVATED, EvictionCost.ENDS_RUN),
        ("DeactivatedDueToMaximumExecutionTimeExceeded", EvictionKind.DEACTIVATED, EvictionCost.ENDS_RUN),
        ("EvictedOnManagerCluster", EvictionKind.OTHER, EvictionCost.FREE),
        ("", EvictionKind.OTHER, EvictionCost.FREE),
    ],
)
def test_every_eviction_reason_has_a_kind_and_a_cost(reason: str, kind: EvictionKind, cost: EvictionCost) -> None:
    assert eviction_kind(reason) is kind
    assert EVICTION_COSTS[kind] is cost


def test_every_kind_has_a_cost() -> None:
    assert set(EVICTION_COSTS) == set(EvictionKind)


def test_an_unreadable_requeue_state_is_left_out() -> None:
    wl = workload(cond("Evicted", "True", "PodsReadyTimeout"))
    wl["status"]["requeueState"] = {"count": "many", "requeueAt": "soon"}
    status = workload_status(wl)
    assert (status.requeue_count, status.requeue_at, status.eviction) == (None, None, "pods_ready_timeout")
