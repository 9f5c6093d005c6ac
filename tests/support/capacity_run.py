"""A flex-start run's Kueue story folded by the operator's own code: queued for quota, provisioning, admitted,
trained, then preempted, evicted for a PodsReady timeout and evicted by a stopped ClusterQueue (each followed by a
re-admission through provisioning and a restore), completed. For the browser journey's capacity view.

The objects are what kubernetes-sigs/kueue v0.17.1 writes and the local Kueue reproduces (the Workloads of
tests/operators/test_queueing.py and tests/operators/test_provisioning_wait.py: ``QuotaReserved`` with a pending
``dws-prov`` admission check and no ``Admitted`` while provisioning, ``Evicted`` with ``Preempted``,
``PodsReadyTimeout`` (with ``requeueState``) or ``ClusterQueueStopped``), the JobSet's ``spec.suspend`` and
``Suspended`` condition (kubernetes-sigs/jobset), and the head pod's MaxText log lines. They are folded in the
order the trigger folds them (``MonitorState.on_workload``, ``on_jobset``, ``on_log_line``), kept in the task state
store as ``RunState.save`` keeps them, and the report is ``operators.recovery.run_report`` of that state, as
``ElasticJobSetOperator._report`` makes it. Only the cluster is left out: the times are a story, not a run.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from elastic_training.operators.observations import MonitorState
from elastic_training.operators.recovery import CostModel, run_report
from elastic_training.operators.run_report import BudgetAllowances, RunReport
from elastic_training.operators.run_state import RunState

JOBSET = "capacity-run"
WORKLOAD = f"jobset-{JOBSET}-1a2b3"
TARGET_STEP = 79
SECONDS = 480.0  # the story's length, ending when the report is made
QUOTA = (
    "couldn't assign flavors to pod set worker: insufficient unused quota for google.com/tpu in flavor v5e, "
    "16 more needed"
)
PREEMPTED = "Preempted to accommodate a workload (UID: u1, JobUID: j1) due to prioritization in the ClusterQueue"
PODS_READY = f"Exceeded the PodsReady timeout default/{WORKLOAD}"
STOPPED = "The ClusterQueue is stopped"
PROVISIONING = "Waiting for the capacity to be provisioned"
PROVISIONED = "Capacity is found in the cluster"
Obj = dict[str, Any]


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cond(kind: str, status: str, reason: str, message: str = "") -> Obj:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def _workload(*conditions: Obj, check: tuple[str, str] | None = None, requeue: Obj | None = None) -> Obj:
    status: Obj = {"conditions": list(conditions), "admission": {"clusterQueue": "cq"}}
    if check is not None:
        status["admissionChecks"] = [{"name": "dws-prov", "state": check[0], "message": check[1]}]
    if requeue is not None:
        status["requeueState"] = requeue
    return {"metadata": {"name": WORKLOAD}, "spec": {"active": True, "queueName": "lq"}, "status": status}


def _jobset(t0: float, *, suspended: bool, since: float, completed: float | None = None) -> Obj:
    conditions = [{"type": "Suspended", "status": str(suspended), "lastTransitionTime": _stamp(since)}]
    if completed is not None:
        conditions.append({"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": ""})
    return {
        "metadata": {
            "name": JOBSET,
            "uid": "js-uid",
            "creationTimestamp": _stamp(t0),
            "labels": {"kueue.x-k8s.io/queue-name": "lq"},
        },
        "spec": {"suspend": suspended},
        "status": {"conditions": conditions, **({"terminalState": "Completed"} if completed is not None else {})},
    }


RESERVED = _cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq")
ADMITTED = _cond("Admitted", "True", "Admitted", "The workload is admitted")


def _log(state: MonitorState, pod: str, lines: list[tuple[float, str]]) -> None:
    for at, text in lines:
        stamp = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        state.on_log_line(stamp, f"I1204 03:00:00.000000 4242 train.py:101] {text}", pod)


def _steps(first: int, last: int, at: float) -> list[tuple[float, str]]:
    return [(at + i, f"completed step: {s}, seconds: 1.000") for i, s in enumerate(range(first, last + 1))]


def _admitted_through_provisioning(
    state: MonitorState, t0: float, queued: float, provisioning: float, at: float
) -> None:
    """Back in the queue for quota, then quota reserved with the check pending, then admitted and resumed."""
    state.on_workload(_workload(_cond("QuotaReserved", "False", "Pending", QUOTA)), now=queued)
    state.on_workload(_workload(RESERVED, check=("Pending", PROVISIONING)), now=provisioning)
    state.on_workload(_workload(RESERVED, ADMITTED, check=("Ready", PROVISIONED)), now=at)
    state.on_jobset(_jobset(t0, suspended=False, since=at), now=at)


def _evicted(state: MonitorState, t0: float, at: float, reason: str, message: str, **extra: Any) -> None:
    """Kueue's Evicted condition, then the JobSet suspended by it."""
    state.on_workload(_workload(RESERVED, ADMITTED, _cond("Evicted", "True", reason, message), **extra), now=at)
    state.on_jobset(_jobset(t0, suspended=True, since=at), now=at)


def capacity_run(end: float) -> tuple[RunState, RunReport]:
    """The run's state (``RunState``: what ``save`` keeps in the task state store) and its report, ending at ``end``.

    From ``t0 = end - SECONDS``: queued for quota 60 s, provisioning 60 s, admitted; steps 0..39; preempted at
    +180 (70 s, 20 of it provisioning); restored 30, steps 31..59; evicted for a PodsReady timeout at +290 (requeue
    backoff to +330, then provisioning to +350); restored 50, steps 51..69; evicted by a stopped ClusterQueue at +385
    (to +445, 15 s provisioning); restored 60, steps 61..79 to +469; completed at +475; the report at ``end``.
    """
    t0 = end - SECONDS
    state = MonitorState(started_at=t0)
    state.on_workload(_workload(_cond("QuotaReserved", "False", "Pending", QUOTA)), now=t0 + 1)
    state.on_jobset(_jobset(t0, suspended=True, since=t0), now=t0 + 1)
    state.on_workload(_workload(RESERVED, check=("Pending", PROVISIONING)), now=t0 + 60)
    state.on_workload(_workload(RESERVED, ADMITTED, check=("Ready", PROVISIONED)), now=t0 + 120)
    state.on_jobset(_jobset(t0, suspended=False, since=t0 + 120), now=t0 + 120)
    _log(state, "pod-1", [(t0 + 130, "No existing checkpoints found, not restoring checkpoint.")])
    _log(state, "pod-1", _steps(0, 39, t0 + 135))
    _evicted(state, t0, t0 + 180, "Preempted", PREEMPTED)
    _admitted_through_provisioning(state, t0, t0 + 181, t0 + 230, t0 + 250)
    _log(state, "pod-2", [(t0 + 255, "restoring from this run's directory step 30"), *_steps(31, 59, t0 + 260)])
    requeue = {"count": 1, "requeueAt": _stamp(t0 + 330)}
    _evicted(state, t0, t0 + 290, "PodsReadyTimeout", PODS_READY, requeue=requeue)
    _admitted_through_provisioning(state, t0, t0 + 330, t0 + 331, t0 + 350)
    _log(state, "pod-3", [(t0 + 355, "restoring from this run's directory step 50"), *_steps(51, 69, t0 + 360)])
    _evicted(state, t0, t0 + 385, "ClusterQueueStopped", STOPPED)
    _admitted_through_provisioning(state, t0, t0 + 386, t0 + 430, t0 + 445)
    _log(state, "pod-4", [(t0 + 448, "restoring from this run's directory step 60"), *_steps(61, 79, t0 + 451)])
    state.on_jobset(_jobset(t0, suspended=False, since=t0 + 445, completed=t0 + 475), now=t0 + 475)
    run = RunState({}, dag_id="", task_id="", run_id="", map_index=-1)
    run.jobset_name, run.jobset_uid, run.started_at, run.monitor = JOBSET, "js-uid", t0, state
    report = run_report(
        incarnations=[run.current_incarnation()],
        escalations=[],
        namespace="default",
        run_directory="",
        target_step=TARGET_STEP,
        final_step=TARGET_STEP,
        wall_seconds=SECONDS,
        costs=CostModel(chips=16, price_per_chip_hour=1.2),
        budgets=BudgetAllowances(
            max_slice_restarts=3,
            slice_restart_window_seconds=3600.0,
            max_full_restarts=2,
            max_pods_ready_evictions=3,
            pods_ready_timeout_seconds=300.0,
            pods_ready_recovery_timeout_seconds=300.0,
        ),
        checkpoint_period=10,
        ended_at=end,
    )
    return run, report
