"""A run asking for more than its ClusterQueue can ever hold fails once Kueue has said so for the grace, instead of
waiting out ``queue_timeout``: Kueue's words (kubernetes-sigs/kueue pkg/scheduler/flavorassigner/flavorassigner.go,
as the local Kueue writes them) read by :func:`queueing.never_fits`, the grace kept by the monitor state, the decision
by the policy. Through the local cluster: tests/operators/test_elastic_operator_kueue.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from elastic_training.operators.observations import NEVER_FITS_GRACE_SECONDS, MonitorState
from elastic_training.operators.policy import Action, Budgets, Reason, decide
from elastic_training.operators.queueing import QueueState, never_fits, workload_status

T0 = 1_796_000_000.0
BUDGETS = Budgets(
    max_slice_restarts=1,
    slice_restart_window_seconds=600,
    stall_timeout_seconds=300,
    max_full_restarts=0,
    queue_timeout_seconds=3600,
)
OVER = (
    "insufficient quota for google.com/tpu in flavor 4xv5litepod-16, previously considered podsets requests (0) + "
    "current podset request (80) > maximum capacity (64)"
)
OVER_SMALL = (
    "insufficient quota for google.com/tpu in flavor 1xv5litepod-4, previously considered podsets requests (0) + "
    "current podset request (80) > maximum capacity (4)"
)
HELD = "insufficient unused quota for google.com/tpu in flavor 4xv5litepod-16, 16 more needed"


def pod_set(name: str, *clauses: str) -> str:
    return f"couldn't assign flavors to pod set {name}: {', '.join(clauses)}"


@pytest.mark.parametrize(
    ("message", "found"),
    [
        (pod_set("worker", OVER), f"pod set worker: {OVER}"),
        (pod_set("worker", OVER_SMALL, OVER), f"pod set worker: {OVER_SMALL}, {OVER}"),
        (pod_set("worker", "flavor cpu-user doesn't match node affinity", OVER), "pod set worker: flavor cpu-user"),
        (pod_set("worker", "resource example.com/gpu unavailable in ClusterQueue"), "unavailable in ClusterQueue"),
        (pod_set("worker", "untolerated taint google.com/tpu=present:NoSchedule in flavor f", OVER), "untolerated"),
        # the second pod set never fits, whatever the first waits for
        (f"{pod_set('pathways-head', HELD)}; {pod_set('worker', OVER)}", f"pod set worker: {OVER}"),
        # a wait could still admit it: quota others hold, a flavor not created yet, a message cut short
        (pod_set("worker", HELD), ""),
        (pod_set("worker", OVER_SMALL, HELD), ""),
        (pod_set("worker", "flavor 4xv5litepod-16 not found", OVER_SMALL), ""),
        (pod_set("worker", OVER[:-5]), ""),
        (pod_set("worker", OVER) + ". Pending the preemption of 1 workload(s)", ""),
        ("", ""),
        ("The workload is deactivated", ""),
    ],
)
def test_kueue_words_no_wait_can_change(message: str, found: str) -> None:
    said = never_fits(message)
    assert found in said if found else said == ""


def stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def jobset() -> dict[str, Any]:
    return {
        "metadata": {"uid": "js", "creationTimestamp": stamp(T0), "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"suspend": True},
        "status": {},
    }


def pending(message: str, reason: str = "Pending") -> dict[str, Any]:
    condition = {"type": "QuotaReserved", "status": "False", "reason": reason, "message": message}
    return {"metadata": {"name": "jobset-r-1a2b3"}, "spec": {"active": True}, "status": {"conditions": [condition]}}


def test_only_the_schedulers_pending_answer_is_read() -> None:
    assert workload_status(pending(pod_set("worker", OVER))).never_fits == f"pod set worker: {OVER}"
    assert workload_status(pending(pod_set("worker", OVER), reason="Inadmissible")).never_fits == ""
    # Kueue v0.19's UnadmittedWorkloadsObservability gate: the most severe flavor's reason, the same message
    for reason in ("ExceedsMaxQuota", "WaitingForQuota", "NoMatchingFlavor"):
        assert workload_status(pending(pod_set("worker", OVER), reason=reason)).never_fits.startswith("pod set worker")
    assert workload_status(pending(pod_set("worker", HELD))).state is QueueState.PENDING


def decision_at(state: MonitorState, now: float) -> Any:
    return decide(state.observation(now=now, target_step=9, full_restarts_used=0), BUDGETS)


def test_a_run_kueue_can_never_admit_fails_after_the_grace_and_says_what_to_change() -> None:
    state = MonitorState(started_at=T0)
    state.on_jobset(jobset(), now=T0 + 1)
    state.on_workload(pending(pod_set("worker", OVER)), now=T0 + 2)
    waiting = decision_at(state, T0 + 2 + NEVER_FITS_GRACE_SECONDS - 1)
    assert (waiting.action, waiting.reason) == (Action.CONTINUE, Reason.QUEUED)
    assert MonitorState.from_json(json.loads(json.dumps(state.to_json()))) == state  # the grace survives a resume
    failed = decision_at(state, T0 + 2 + NEVER_FITS_GRACE_SECONDS)
    assert (failed.action, failed.reason) == (Action.FAIL, Reason.NEVER_FITS)
    assert failed.message.startswith("Kueue can never admit the JobSet as its ClusterQueue stands (pod set worker: ")
    assert "current podset request (80) > maximum capacity (64)" in failed.message
    assert (
        "ask for fewer or smaller slices" in failed.message and "instead of waiting out queue_timeout" in failed.message
    )


def test_the_grace_starts_again_when_kueue_says_anything_else() -> None:
    """An admin raising the quota, or another pass saying the quota is only held: the clock starts again."""
    state = MonitorState(started_at=T0)
    state.on_jobset(jobset(), now=T0 + 1)
    state.on_workload(pending(pod_set("worker", OVER)), now=T0 + 2)
    state.on_workload(pending(pod_set("worker", HELD)), now=T0 + 20)
    state.on_workload(pending(pod_set("worker", OVER)), now=T0 + 25)
    assert decision_at(state, T0 + 2 + NEVER_FITS_GRACE_SECONDS + 1).action is Action.CONTINUE
    assert decision_at(state, T0 + 25 + NEVER_FITS_GRACE_SECONDS).reason is Reason.NEVER_FITS
