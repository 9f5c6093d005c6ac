"""The escalation policy, case by case: every budget, window, stall and terminal case."""

from __future__ import annotations

from dataclasses import replace

import pytest

from elastic_training.operators.policy import (
    Action,
    Budgets,
    JobSetPhase,
    Observation,
    QueueWait,
    Reason,
    decide,
    slice_restarts_in_window,
)

BUDGETS = Budgets(
    max_slice_restarts=2, slice_restart_window_seconds=600, stall_timeout_seconds=300, max_full_restarts=1
)
NOW = 10_000.0


def obs(**overrides: object) -> Observation:
    values: dict[str, object] = {
        "now": NOW,
        "phase": JobSetPhase.ACTIVE,
        "target_step": 99,
        "full_restarts_used": 0,
        "progress_at": NOW - 10,
    }
    values.update(overrides)
    return Observation(**values)  # type: ignore[arg-type]


CASES = [
    # (id, observation, action, reason)
    ("healthy", obs(), Action.CONTINUE, Reason.RUNNING),
    ("restarts within budget", obs(slice_restart_times=(NOW - 5, NOW - 1)), Action.CONTINUE, Reason.RUNNING),
    (
        "restarts over budget in window",
        obs(slice_restart_times=(NOW - 50, NOW - 5, NOW - 1)),
        Action.ESCALATE,
        Reason.SLICE_RESTART_BUDGET,
    ),
    (
        "old restarts slid out of the window",
        obs(slice_restart_times=(NOW - 900, NOW - 700, NOW - 1)),
        Action.CONTINUE,
        Reason.RUNNING,
    ),
    (
        "restarts stamped by a clock ahead of now count",
        obs(slice_restart_times=(NOW - 5, NOW + 1, NOW + 2)),
        Action.ESCALATE,
        Reason.SLICE_RESTART_BUDGET,
    ),
    (
        "restart exactly at window edge is out",
        obs(slice_restart_times=(NOW - 600, NOW - 2, NOW - 1)),
        Action.CONTINUE,
        Reason.RUNNING,
    ),
    ("stalled", obs(progress_at=NOW - 300), Action.ESCALATE, Reason.STALLED),
    ("just short of stall", obs(progress_at=NOW - 299), Action.CONTINUE, Reason.RUNNING),
    (
        "over budget and full restarts spent",
        obs(slice_restart_times=(NOW - 3, NOW - 2, NOW - 1), full_restarts_used=1),
        Action.FAIL,
        Reason.FULL_RESTART_BUDGET,
    ),
    (
        "stalled and full restarts spent",
        obs(progress_at=0, full_restarts_used=1),
        Action.FAIL,
        Reason.FULL_RESTART_BUDGET,
    ),
    (
        "failed restartable",
        obs(phase=JobSetPhase.FAILED, failure_detail="FailedJobs: job failed"),
        Action.ESCALATE,
        Reason.JOBSET_FAILED,
    ),
    (
        "failed restartable, budget spent",
        obs(phase=JobSetPhase.FAILED, full_restarts_used=1),
        Action.FAIL,
        Reason.FULL_RESTART_BUDGET,
    ),
    ("failed permanently", obs(phase=JobSetPhase.FAILED, permanent=True), Action.FAIL, Reason.PERMANENT_FAILURE),
    (
        "failed by slices past their budget",
        obs(phase=JobSetPhase.FAILED, slice_restart_times=(NOW - 3, NOW - 2, NOW - 1), failure_detail="FailedJobs"),
        Action.ESCALATE,
        Reason.SLICE_RESTART_BUDGET,
    ),
    (
        "permanent failure beats the slice budget",
        obs(phase=JobSetPhase.FAILED, permanent=True, slice_restart_times=(NOW - 3, NOW - 2, NOW - 1)),
        Action.FAIL,
        Reason.PERMANENT_FAILURE,
    ),
    ("completed at target", obs(phase=JobSetPhase.COMPLETED, committed_step=99), Action.SUCCEED, Reason.COMPLETED),
    ("completed past target", obs(phase=JobSetPhase.COMPLETED, committed_step=120), Action.SUCCEED, Reason.COMPLETED),
    # A drain's SIGTERM: MaxText exits 0 short of its target; a full restart resumes it.
    ("completed short", obs(phase=JobSetPhase.COMPLETED, committed_step=60), Action.ESCALATE, Reason.COMPLETED_SHORT),
    (
        "completed, no checkpoint",
        obs(phase=JobSetPhase.COMPLETED, committed_step=-1),
        Action.ESCALATE,
        Reason.COMPLETED_SHORT,
    ),
    (
        "completed short, full restarts spent",
        obs(phase=JobSetPhase.COMPLETED, committed_step=60, full_restarts_used=1),
        Action.FAIL,
        Reason.FULL_RESTART_BUDGET,
    ),
    # Completed while preempted: never the suspension's doing (the Job controller counts none of the pods it deletes
    # for it); the head pod ended otherwise, and that is the completion short of target it is without a preemption.
    (
        "completed short while preempted: a full restart",
        obs(phase=JobSetPhase.COMPLETED, committed_step=60, preempted=True),
        Action.ESCALATE,
        Reason.COMPLETED_SHORT,
    ),
    (
        "completed short while preempted, full restarts spent: fails",
        obs(phase=JobSetPhase.COMPLETED, committed_step=60, preempted=True, full_restarts_used=1),
        Action.FAIL,
        Reason.FULL_RESTART_BUDGET,
    ),
    (
        "completed at target while preempted: success",
        obs(phase=JobSetPhase.COMPLETED, committed_step=99, preempted=True),
        Action.SUCCEED,
        Reason.COMPLETED,
    ),
    ("completed, unread", obs(phase=JobSetPhase.COMPLETED), Action.FAIL, Reason.COMPLETED_UNCHECKED),
    ("missing", obs(phase=JobSetPhase.MISSING), Action.FAIL, Reason.JOBSET_MISSING),
    (
        "completed beats a stall",
        obs(phase=JobSetPhase.COMPLETED, committed_step=99, progress_at=0),
        Action.SUCCEED,
        Reason.COMPLETED,
    ),
    # MaxText's "checkpoint already exists" refusal (exit 1): done when storage agrees, a failure as usual when not.
    (
        "refused as already at target, committed at target",
        obs(phase=JobSetPhase.FAILED, already_at_target=True, committed_step=99, full_restarts_used=1),
        Action.SUCCEED,
        Reason.ALREADY_AT_TARGET,
    ),
    (
        "refused as already at target, slices past their budget",
        obs(
            phase=JobSetPhase.FAILED,
            already_at_target=True,
            committed_step=120,
            slice_restart_times=(NOW - 3, NOW - 2, NOW - 1),
        ),
        Action.SUCCEED,
        Reason.ALREADY_AT_TARGET,
    ),
    (
        "refused as already at target, storage not read",
        obs(phase=JobSetPhase.FAILED, already_at_target=True),
        Action.FAIL,
        Reason.COMPLETED_UNCHECKED,
    ),
    (
        "refused as already at target, the committed step short of it",
        obs(phase=JobSetPhase.FAILED, already_at_target=True, committed_step=60),
        Action.ESCALATE,
        Reason.JOBSET_FAILED,
    ),
    (
        "refused as already at target while the JobSet still runs",
        obs(already_at_target=True, committed_step=99),
        Action.CONTINUE,
        Reason.RUNNING,
    ),
]


@pytest.mark.parametrize(("observation", "action", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decide(observation: Observation, action: Action, reason: Reason) -> None:
    decision = decide(observation, BUDGETS)
    assert (decision.action, decision.reason) == (action, reason)
    assert decision.message


QUEUED = Budgets(
    max_slice_restarts=2,
    slice_restart_window_seconds=600,
    stall_timeout_seconds=300,
    max_full_restarts=1,
    queue_timeout_seconds=1800,
)
SUSPENDED = JobSetPhase.SUSPENDED
STARTUP = replace(BUDGETS, startup_timeout_seconds=1800.0)

WAITING_CASES = [
    # (id, observation, budgets, action, reason): waiting is not stalling, and spends no budget.
    (
        "queued past the stall timeout, no queue_timeout",
        obs(phase=SUSPENDED, progress_at=None, waiting=QueueWait(since=NOW - 7200)),
        BUDGETS,
        Action.CONTINUE,
        Reason.QUEUED,
    ),
    (
        "queued, the full-restart budget spent: still waits",
        obs(phase=SUSPENDED, progress_at=None, waiting=QueueWait(since=NOW - 7200), full_restarts_used=1),
        BUDGETS,
        Action.CONTINUE,
        Reason.QUEUED,
    ),
    (
        "queued within queue_timeout",
        obs(phase=SUSPENDED, progress_at=None, waiting=QueueWait(since=NOW - 1799)),
        QUEUED,
        Action.CONTINUE,
        Reason.QUEUED,
    ),
    (
        "queued to queue_timeout",
        obs(phase=SUSPENDED, progress_at=None, waiting=QueueWait(since=NOW - 1800, reason="Pending: no quota")),
        QUEUED,
        Action.FAIL,
        Reason.QUEUE_TIMEOUT,
    ),
    (
        "preempted, slice restarts over budget before it: waits, no escalation",
        obs(
            phase=SUSPENDED,
            progress_at=None,
            waiting=QueueWait(since=NOW - 60, preempted=True),
            slice_restart_times=(NOW - 50, NOW - 5, NOW - 1),
        ),
        QUEUED,
        Action.CONTINUE,
        Reason.PREEMPTED,
    ),
    (
        "preempted past queue_timeout",
        obs(phase=SUSPENDED, progress_at=None, waiting=QueueWait(since=NOW - 3600, preempted=True)),
        QUEUED,
        Action.FAIL,
        Reason.QUEUE_TIMEOUT,
    ),
    (
        "suspended in no queue (kueue #14811)",
        obs(phase=SUSPENDED, progress_at=None, waiting=QueueWait(since=NOW - 60, not_queued=True)),
        QUEUED,
        Action.CONTINUE,
        Reason.NOT_QUEUED,
    ),
    (
        "suspended in no queue, bounded by queue_timeout",
        obs(phase=SUSPENDED, progress_at=None, waiting=QueueWait(since=NOW - 1800, not_queued=True)),
        QUEUED,
        Action.FAIL,
        Reason.QUEUE_TIMEOUT,
    ),
    (
        "admitted, trainer not up (pods scheduling, images pulling): no stall clock",
        obs(progress_at=None),
        BUDGETS,
        Action.CONTINUE,
        Reason.STARTING,
    ),
    (
        "admitted, trainer not up, slices over budget: the budget still holds",
        obs(progress_at=None, slice_restart_times=(NOW - 3, NOW - 2, NOW - 1)),
        BUDGETS,
        Action.ESCALATE,
        Reason.SLICE_RESTART_BUDGET,
    ),
    (
        "trained since its start, past the stall timeout: a stall",
        obs(progress_at=NOW - 301),
        BUDGETS,
        Action.ESCALATE,
        Reason.STALLED,
    ),
    (
        "starting up longer than the stall timeout, within startup_timeout: no stall",
        obs(progress_at=None, starting_since=NOW - 1000),
        STARTUP,
        Action.CONTINUE,
        Reason.STARTING,
    ),
    (
        "starting up past startup_timeout",
        obs(progress_at=None, starting_since=NOW - 1800),
        STARTUP,
        Action.ESCALATE,
        Reason.STARTUP_TIMED_OUT,
    ),
    (
        "starting up past startup_timeout, full restarts spent",
        obs(progress_at=None, starting_since=NOW - 1800, full_restarts_used=1),
        STARTUP,
        Action.FAIL,
        Reason.FULL_RESTART_BUDGET,
    ),
    (
        "starting up, slices over budget: the slice budget still holds",
        obs(progress_at=None, starting_since=NOW - 10, slice_restart_times=(NOW - 3, NOW - 2, NOW - 1)),
        STARTUP,
        Action.ESCALATE,
        Reason.SLICE_RESTART_BUDGET,
    ),
    (
        "starting up, the JobSet failed: a failure, not a start-up",
        obs(phase=JobSetPhase.FAILED, progress_at=None, starting_since=NOW - 10, failure_detail="FailedJobs"),
        STARTUP,
        Action.ESCALATE,
        Reason.JOBSET_FAILED,
    ),
    (
        "starting up with budgets from before startup_timeout: bounded by stall_timeout, as they were",
        obs(progress_at=None, starting_since=NOW - 300),
        BUDGETS,
        Action.ESCALATE,
        Reason.STARTUP_TIMED_OUT,
    ),
]


@pytest.mark.parametrize(
    ("observation", "budgets", "action", "reason"), [c[1:] for c in WAITING_CASES], ids=[c[0] for c in WAITING_CASES]
)
def test_decide_while_waiting(observation: Observation, budgets: Budgets, action: Action, reason: Reason) -> None:
    decision = decide(observation, budgets)
    assert (decision.action, decision.reason) == (action, reason)


def test_queue_timeout_says_how_long_and_why() -> None:
    waiting = QueueWait(since=NOW - 1900, reason="Pending: insufficient unused quota for google.com/tpu")
    message = decide(obs(phase=SUSPENDED, progress_at=None, waiting=waiting), QUEUED).message
    assert "not admitted after waiting 31.7 min (queue_timeout=30.0 min)" in message
    assert "Kueue: Pending: insufficient unused quota for google.com/tpu" in message


def test_a_wait_rechecks_at_its_queue_timeout() -> None:
    waiting = QueueWait(since=NOW - 100)
    assert decide(obs(phase=SUSPENDED, progress_at=None, waiting=waiting), QUEUED).recheck_at == NOW + 1700
    assert decide(obs(phase=SUSPENDED, progress_at=None, waiting=waiting), BUDGETS).recheck_at is None


def test_full_restart_failure_names_the_budget_and_the_cause() -> None:
    decision = decide(obs(slice_restart_times=(NOW - 3, NOW - 2, NOW - 1), full_restarts_used=1), BUDGETS)
    assert "max_full_restarts=1" in decision.message
    assert "3 slice restarts within 10.0 min exceed max_slice_restarts=2" in decision.message


def test_completed_short_says_what_was_reached() -> None:
    message = decide(obs(phase=JobSetPhase.COMPLETED, committed_step=60), BUDGETS).message
    assert "newest committed step 60" in message and "target step 99" in message


def test_continue_says_when_a_stall_would_fire() -> None:
    assert decide(obs(progress_at=NOW - 100), BUDGETS).recheck_at == NOW + 200


def test_a_start_up_says_its_clock_and_what_the_trainer_does() -> None:
    starting = obs(progress_at=None, starting_since=NOW - 100, startup_detail="restoring step 40")
    decision = decide(starting, STARTUP)
    assert decision.recheck_at == NOW + 1700
    assert decision.message == (
        "the trainer is starting up (restoring step 40): the start-up clock runs (startup_timeout=30.0 min), "
        "the stall clock from its first step"
    )
    late = decide(replace(starting, now=NOW + 1700), STARTUP).message
    assert late == (
        "full restart 1 of 1: the trainer has not trained since its container started 30.0 min ago "
        "(startup_timeout=30.0 min; restoring step 40)"
    )
    unbounded = replace(starting, now=NOW + 200, startup_detail="")
    assert "(stall_timeout=5.0 min; nothing logged of its start-up)" in decide(unbounded, BUDGETS).message
    # Not up yet: no clock at all, and nothing to recheck.
    waiting = decide(obs(progress_at=None), STARTUP)
    assert waiting.recheck_at is None and "no clock runs" in waiting.message


def test_zero_budgets() -> None:
    strict = Budgets(
        max_slice_restarts=0, slice_restart_window_seconds=60, stall_timeout_seconds=60, max_full_restarts=0
    )
    assert decide(obs(slice_restart_times=(NOW - 1,)), strict).reason is Reason.FULL_RESTART_BUDGET


def test_window_count() -> None:
    # 11.0 is stamped by Kubernetes after the caller's now (clock skew): it is in the window, not lost.
    assert slice_restarts_in_window([1.0, 5.0, 6.0, 9.0, 11.0], now=10.0, window_seconds=5.0) == 3


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_slice_restarts": -1},
        {"max_full_restarts": -1},
        {"slice_restart_window_seconds": 0},
        {"stall_timeout_seconds": -5},
        {"queue_timeout_seconds": 0},
        {"elastic_timeout_seconds": -1},
        {"startup_timeout_seconds": 0},
    ],
)
def test_budgets_reject_nonsense(kwargs: dict[str, float]) -> None:
    values = {
        "max_slice_restarts": 1,
        "slice_restart_window_seconds": 60.0,
        "stall_timeout_seconds": 60.0,
        "max_full_restarts": 1,
        **kwargs,
    }
    with pytest.raises(ValueError):
        Budgets(**values)  # type: ignore[arg-type]


def test_policy_imports_no_airflow() -> None:
    import subprocess
    import sys

    code = (
        "import sys, elastic_training.operators.policy, elastic_training.operators.recovery,"
        " elastic_training.operators.observations;"
        "assert not any(m == 'airflow' or m.startswith('airflow.') for m in sys.modules), 'airflow imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_budgets_round_trip_through_json() -> None:
    unset = Budgets(
        max_slice_restarts=2, slice_restart_window_seconds=60.0, stall_timeout_seconds=90.0, max_full_restarts=1
    )
    assert unset.to_json() == {
        "max_slice_restarts": 2,
        "slice_restart_window_seconds": 60.0,
        "stall_timeout_seconds": 90.0,
        "max_full_restarts": 1,
    }
    full = replace(unset, queue_timeout_seconds=600.0, elastic_timeout_seconds=300.0, startup_timeout_seconds=1800.0)
    assert Budgets.from_json(full.to_json()) == full
    assert Budgets.from_json({**unset.to_json(), "queue_timeout_seconds": None}) == unset


def test_a_completion_while_preempted_says_the_preemption_did_not_cause_it() -> None:
    decision = decide(obs(phase=JobSetPhase.COMPLETED, committed_step=60, preempted=True), BUDGETS)
    assert "while preempted by Kueue (its suspension completes no Job: the head pod ended otherwise)" in (
        decision.message
    )
    assert "newest committed step 60, target step 99" in decision.message


GRACE_CASES = [
    # (id, observation, the old pods' grace: 1 s when the trainer is past saving, None for their own)
    ("stalled: hung, nothing to save", obs(progress_at=NOW - 400), 1),
    ("start-up timed out: never trained", obs(starting_since=NOW - 400, progress_at=None), 1),
    ("slice budget spent while waiting for slices", obs(slice_restart_times=(NOW - 5,) * 3, recovering=True), 1),
    ("slice budget spent while training: a save may be in flight", obs(slice_restart_times=(NOW - 5,) * 3), None),
    ("the JobSet failed: its pods ended", obs(phase=JobSetPhase.FAILED, failure_detail="BackoffLimitExceeded"), None),
    ("completed short of the target: its pods ended", obs(phase=JobSetPhase.COMPLETED, committed_step=40), None),
]


@pytest.mark.parametrize(("observation", "grace"), [c[1:] for c in GRACE_CASES], ids=[c[0] for c in GRACE_CASES])
def test_an_escalation_shortens_the_old_pods_grace_only_when_the_trainer_is_past_saving(
    observation: Observation, grace: int | None
) -> None:
    decision = decide(observation, BUDGETS)
    assert decision.action is Action.ESCALATE
    assert decision.pod_grace_seconds == grace


def test_no_grace_is_chosen_for_anything_but_an_escalation() -> None:
    spent = decide(obs(progress_at=NOW - 400, full_restarts_used=1), BUDGETS)
    assert spent.reason is Reason.FULL_RESTART_BUDGET and spent.pod_grace_seconds is None
    assert decide(obs(), BUDGETS).pod_grace_seconds is None


# -- every eviction reason, judged on its own ----------------------------------------------------------------

LIMITED = replace(QUEUED, max_pods_ready_evictions=2)


def evicted(kind: str, *, count: int = 0, since: float = NOW - 60, **wait: object) -> Observation:
    waiting = QueueWait(since=since, preempted=True, eviction=kind, pods_ready_evictions=count, **wait)  # type: ignore[arg-type]
    return obs(phase=SUSPENDED, progress_at=None, waiting=waiting, full_restarts_used=1)


EVICTION_CASES = [
    # (id, observation, budgets, action, reason): which evictions are free, which count, which end the run
    ("preempted: free", evicted("preempted"), LIMITED, Action.CONTINUE, Reason.PREEMPTED),
    ("no kind known: a preemption, as before", evicted(""), LIMITED, Action.CONTINUE, Reason.PREEMPTED),
    ("a stopped queue: waited out", evicted("queue_stopped"), LIMITED, Action.CONTINUE, Reason.QUEUE_STOPPED),
    ("an admission check's retry: free", evicted("admission_check"), LIMITED, Action.CONTINUE, Reason.EVICTED),
    ("node failures: free", evicted("node_failures"), LIMITED, Action.CONTINUE, Reason.EVICTED),
    ("an unknown kind: waited out", evicted("bogus"), LIMITED, Action.CONTINUE, Reason.EVICTED),
    (
        "pods-ready timeouts within the limit: waits, no budget spent",
        evicted("pods_ready_timeout", count=2),
        LIMITED,
        Action.CONTINUE,
        Reason.PODS_READY_TIMEOUT,
    ),
    (
        "one pods-ready timeout more than the limit: fails",
        evicted("pods_ready_timeout", count=3),
        LIMITED,
        Action.FAIL,
        Reason.PODS_READY_EVICTIONS,
    ),
    (
        "pods-ready timeouts with no limit set (budgets from before it): waited out",
        evicted("pods_ready_timeout", count=30),
        QUEUED,
        Action.CONTINUE,
        Reason.PODS_READY_TIMEOUT,
    ),
    (
        "a limit of 0: the first pods-ready eviction fails",
        evicted("pods_ready_timeout", count=1),
        replace(QUEUED, max_pods_ready_evictions=0),
        Action.FAIL,
        Reason.PODS_READY_EVICTIONS,
    ),
    (
        "pods-ready timeout past queue_timeout",
        evicted("pods_ready_timeout", count=1, since=NOW - 1800),
        LIMITED,
        Action.FAIL,
        Reason.QUEUE_TIMEOUT,
    ),
    (
        "queue stopped past queue_timeout",
        evicted("queue_stopped", since=NOW - 1800),
        LIMITED,
        Action.FAIL,
        Reason.QUEUE_TIMEOUT,
    ),
    ("deactivated: ends the run at once", evicted("deactivated", since=NOW), LIMITED, Action.FAIL, Reason.DEACTIVATED),
    (
        "deactivated by Kueue at its requeuing limit: ends the run at once",
        evicted("requeuing_limit_exceeded", count=1, since=NOW),
        BUDGETS,
        Action.FAIL,
        Reason.REQUEUING_LIMIT_EXCEEDED,
    ),
    (
        "deactivated while still queued (never admitted): ends the run",
        obs(phase=SUSPENDED, progress_at=None, waiting=QueueWait(since=NOW - 5, eviction="deactivated")),
        BUDGETS,
        Action.FAIL,
        Reason.DEACTIVATED,
    ),
]


@pytest.mark.parametrize(
    ("observation", "budgets", "action", "reason"),
    [c[1:] for c in EVICTION_CASES],
    ids=[c[0] for c in EVICTION_CASES],
)
def test_each_eviction_is_judged_by_its_kind(
    observation: Observation, budgets: Budgets, action: Action, reason: Reason
) -> None:
    decision = decide(observation, budgets)
    assert (decision.action, decision.reason) == (action, reason)
    assert decision.action is not Action.ESCALATE  # no eviction ever spends a full restart


def test_a_pods_ready_eviction_says_its_count_its_limit_and_the_backoff() -> None:
    waiting = evicted("pods_ready_timeout", count=2, requeue_at=1_796_155_260.0, reason="PodsReadyTimeout: Exceeded")
    message = decide(waiting, LIMITED).message
    assert "pods were not all ready within Kueue's waitForPodsReady timeout" in message
    assert "pods-ready eviction 2 of at most 2" in message
    assert "Kueue requeues it after its backoff, at 20:01:00 UTC" in message
    assert "(no budget spent)" in message
    over = decide(evicted("pods_ready_timeout", count=3), LIMITED).message
    assert "evicted the JobSet 3 times" in over and "more than max_pods_ready_evictions=2" in over


def test_a_deactivation_says_nothing_will_admit_it_and_how_to_resume() -> None:
    said = "DeactivatedDueToRequeuingLimitExceeded: The workload is deactivated due to exceeding the maximum"
    message = decide(evicted("requeuing_limit_exceeded", reason=said), LIMITED).message
    assert "Kueue will not admit the JobSet again" in message
    assert "backoffLimitCount" in message and "spec.active back to true" in message
    assert f"Kueue: {said}" in message


def test_budgets_refuse_a_negative_pods_ready_limit_and_carry_it_through_json() -> None:
    with pytest.raises(ValueError, match="max_pods_ready_evictions"):
        replace(BUDGETS, max_pods_ready_evictions=-1)
    assert Budgets.from_json(LIMITED.to_json()) == LIMITED
    assert "max_pods_ready_evictions" not in BUDGETS.to_json()  # unset: as budgets written before it
