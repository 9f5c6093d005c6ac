"""Flex-start as the operator reads it: provisioning apart from queued for quota, each outcome named. Pure.

The Workloads below are what the local Kueue writes (``tests/local/cluster/test_kueue_admission_checks.py`` shows
it over HTTP) and what kubernetes-sigs/kueue v0.17.1 writes: quota reserved with no ``Admitted`` condition while the
``dws-prov`` check is Pending, ``Ready`` with the ProvisioningRequest's message once provisioned, ``Rejected`` then
deactivated (``DeactivatedDueToAdmissionCheck``) when the request fails for good or its capacity is revoked.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from elastic_training.operators.observations import KUEUE_UNSERVED, MonitorState
from elastic_training.operators.policy import Action, Budgets, decide
from elastic_training.operators.queueing import QueueState, workload_status
from elastic_training.operators.recovery import Incarnation, capacity
from elastic_training.operators.run_report import CapacityTimes

T0 = 1_796_000_000.0
BUDGETS = Budgets(
    max_slice_restarts=1, slice_restart_window_seconds=600, stall_timeout_seconds=300, max_full_restarts=0
)


def stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def jobset(*, suspended: bool) -> dict[str, Any]:
    return {
        "metadata": {"uid": "js", "creationTimestamp": stamp(T0), "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"suspend": suspended},
        "status": {},
    }


def cond(kind: str, status: str, reason: str, message: str = "") -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def workload(*conditions: dict[str, str], checks: list[dict[str, str]] | None = None, active: bool = True) -> Any:
    status: dict[str, Any] = {"conditions": list(conditions), "admission": {"clusterQueue": "cq"}}
    if checks is not None:
        status["admissionChecks"] = checks
    return {"metadata": {"name": "jobset-r-1a2b3"}, "spec": {"active": active}, "status": status}


RESERVED = cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq")
PENDING_CHECK = {"name": "dws-prov", "state": "Pending", "message": "Waiting for the capacity to be provisioned"}
PROVISIONING = workload(RESERVED, checks=[PENDING_CHECK])
READY = workload(
    RESERVED,
    cond("Admitted", "True", "Admitted", "The workload is admitted"),
    checks=[{"name": "dws-prov", "state": "Ready", "message": "Capacity is found in the cluster"}],
)
REVOKED = workload(
    RESERVED,
    cond("Admitted", "True", "Admitted", "The workload is admitted"),
    checks=[{"name": "dws-prov", "state": "Rejected", "message": "maxRunDuration reached"}],
)
DEACTIVATED = workload(
    cond("QuotaReserved", "False", "Pending", "The workload is deactivated due to Admission check(s): dws-prov"),
    cond("Evicted", "True", "DeactivatedDueToAdmissionCheck", "The workload is deactivated due to Admission check(s)"),
    checks=[
        {"name": "dws-prov", "state": "Pending", "message": "Reset to Pending after eviction. Previously: Rejected"}
    ],
    active=False,
)


def test_quota_reserved_without_admitted_is_provisioning_not_admitted() -> None:
    status = workload_status(PROVISIONING)
    assert status.state is QueueState.PROVISIONING
    assert status.reason == "admission check dws-prov Pending: Waiting for the capacity to be provisioned"
    assert workload_status(READY).state is QueueState.ADMITTED


def test_a_flex_run_is_provisioning_then_admitted_and_the_report_keeps_both() -> None:
    state = MonitorState(started_at=T0)
    state.on_jobset(jobset(suspended=True), now=T0 + 1)
    state.on_workload(workload(cond("QuotaReserved", "False", "Pending", "insufficient quota")), now=T0 + 1)
    assert state.run_phase(T0 + 2).value == "queued"
    state.on_workload(PROVISIONING, now=T0 + 10)
    assert state.run_phase(T0 + 20).value == "provisioning"
    observation = state.observation(now=T0 + 20, target_step=9, full_restarts_used=0)
    assert observation.waiting is not None and observation.waiting.provisioning
    decision = decide(observation, BUDGETS)
    assert (decision.action, decision.reason.value) == (Action.CONTINUE, "provisioning")
    assert decision.message.startswith("quota reserved by Kueue, waiting for its admission checks")
    assert "Kueue: admission check dws-prov Pending: Waiting for the capacity" in decision.message
    state.on_workload(READY, now=T0 + 70)
    state.on_jobset(jobset(suspended=False), now=T0 + 71)
    times = capacity([Incarnation("r", 0, 0, state.digest)], T0 + 100)
    assert times.provisioning_spans == ((T0 + 10, T0 + 70),) and times.provisioning_seconds == 60.0
    assert times.provisioning_notes == ((T0 + 70, "admission check dws-prov Ready: Capacity is found in the cluster"),)
    assert CapacityTimes.from_json(json.loads(json.dumps(times.to_json()))) == times
    assert MonitorState.from_json(json.loads(json.dumps(state.to_json()))) == state


def test_capacity_revoked_mid_run_is_named_when_the_workload_is_deactivated() -> None:
    state = MonitorState(started_at=T0)
    state.on_jobset(jobset(suspended=True), now=T0)
    state.on_workload(READY, now=T0 + 5)
    state.on_jobset(jobset(suspended=False), now=T0 + 6)
    state.on_workload(REVOKED, now=T0 + 100)
    state.on_workload(DEACTIVATED, now=T0 + 101)
    state.on_jobset(jobset(suspended=True), now=T0 + 102)
    observation = state.observation(now=T0 + 200, target_step=9, full_restarts_used=0)
    waiting = observation.waiting
    # Deactivated (DeactivatedDueToAdmissionCheck): nothing will admit it again, the run fails at once on it.
    assert waiting is not None and waiting.eviction == "deactivated" and not waiting.not_queued
    assert state.run_phase(T0 + 200).value == "deactivated"
    assert "admission check dws-prov Rejected: maxRunDuration reached" in waiting.reason
    decision = decide(observation, BUDGETS)
    assert (decision.action, decision.reason.value) == (Action.FAIL, "deactivated")
    assert "admission check dws-prov Rejected: maxRunDuration reached" in decision.message
    notes = [said for _, said in state.digest.provisioning_notes]
    assert notes[-1] == "admission check dws-prov Rejected: maxRunDuration reached"


def test_a_cluster_without_v1beta2_workloads_says_so_instead_of_a_reasonless_queued() -> None:
    state = MonitorState(started_at=T0)
    state.on_jobset(jobset(suspended=True), now=T0)
    state.on_workloads_unserved(T0 + 1)
    observation = state.observation(now=T0 + 60, target_step=9, full_restarts_used=0)
    assert state.run_phase(T0 + 60).value == "queued"
    assert observation.waiting is not None and observation.waiting.reason == KUEUE_UNSERVED
    assert "Kueue older than v0.15" in decide(observation, BUDGETS).message


def test_a_request_that_failed_for_good_is_named_once_the_workload_is_deactivated() -> None:
    failed = workload(RESERVED, checks=[{"name": "dws-prov", "state": "Rejected", "message": "GCE stockout"}])
    state = MonitorState(started_at=T0)
    state.on_jobset(jobset(suspended=True), now=T0)
    state.on_workload(PROVISIONING, now=T0 + 1)
    retried = workload(
        RESERVED, checks=[{"name": "dws-prov", "state": "Retry", "message": "Retrying after failure: x"}]
    )
    state.on_workload(retried, now=T0 + 2)
    state.on_workload(failed, now=T0 + 3)
    state.on_workload(DEACTIVATED, now=T0 + 4)
    observation = state.observation(now=T0 + 60, target_step=9, full_restarts_used=0)
    waiting = observation.waiting
    assert waiting is not None and waiting.eviction == "deactivated" and not waiting.provisioning
    assert "admission check dws-prov Rejected: GCE stockout" in waiting.reason
    # Never admitted, yet deactivated: the Deactivated rule ends it at once (not queue_timeout).
    decision = decide(observation, BUDGETS)
    assert (decision.action, decision.reason.value) == (Action.FAIL, "deactivated")
    assert "admission check dws-prov Rejected: GCE stockout" in decision.message
    assert [said for _, said in state.digest.provisioning_notes] == [
        "admission check dws-prov Retry: Retrying after failure: x",
        "admission check dws-prov Rejected: GCE stockout",
    ]
    assert state.digest.provisioning_spans == [[T0 + 1, T0 + 4]]


def test_a_retry_read_only_after_kueue_reset_the_check_is_noted_once_from_its_count() -> None:
    # Kueue shows Retry only until its workload controller evicts the Workload and resets the check to Pending with
    # retryCount 1 (pkg/workload/admissionchecks.go); a trigger reading the Workload later sees the count alone.
    reset = {"name": "dws-prov", "state": "Pending", "retryCount": 1}
    requeued = workload(
        cond("QuotaReserved", "False", "Pending", "AdmissionCheck: At least one admission check is false"),
        checks=[{**reset, "message": "Reset to Pending after eviction. Previously: Retry"}],
    )
    ready = workload(
        RESERVED,
        cond("Admitted", "True", "Admitted", "The workload is admitted"),
        checks=[{**reset, "state": "Ready", "message": "Capacity is found in the cluster"}],
    )
    state = MonitorState(started_at=T0)
    state.on_jobset(jobset(suspended=True), now=T0)
    state.on_workload(PROVISIONING, now=T0 + 1)
    state.on_workload(requeued, now=T0 + 5)
    state.on_workload(workload(RESERVED, checks=[{**PENDING_CHECK, "retryCount": 1}]), now=T0 + 7)
    state.on_workload(ready, now=T0 + 20)
    assert [said for _, said in state.digest.provisioning_notes] == [
        "admission check dws-prov Retry: retried 1 time(s), Kueue requeued it",
        "admission check dws-prov Ready: Capacity is found in the cluster",
    ]


def test_an_unreadable_retry_count_is_no_retry() -> None:
    for count in ("1", True, -1, 1.5, None):
        checks = [{**PENDING_CHECK, "retryCount": count}]
        (check,) = workload_status(workload(RESERVED, checks=checks)).checks  # type: ignore[dict-item]
        assert check.retry_count == 0
