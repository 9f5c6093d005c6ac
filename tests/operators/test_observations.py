"""Folding JobSet and pod objects into what the policy needs: slice restarts counted in slices, on
Kubernetes' clock, evictions apart, and counting that survives a rebuild and an upgrade."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from elastic_training.operators.constants import LABEL_JOB_INDEX, LABEL_REPLICATED_JOB_NAME
from elastic_training.operators.observations import (
    MAX_FAILURES_KEPT,
    MAX_RESTART_TIMES_KEPT,
    STATE_VERSION,
    MonitorState,
    jobset_ended_at,
    jobset_phase,
    normalize_timestamp,
)
from elastic_training.operators.policy import Action, Budgets, JobSetPhase, decide
from tests.support.observed_objects import T0, job, pod, stamp

DAY = 86_400.0


def slice_pods(slice_index: int, **kwargs: Any) -> list[dict[str, Any]]:
    return [pod(f"s{slice_index}p{i}", slice_index, **kwargs) for i in range(4)]


def running(slices: int = 3) -> MonitorState:
    """A v5e-16-like run: ``slices`` worker Jobs of 4 pods, all running since T0."""
    state = MonitorState(started_at=T0)
    for index in range(slices):
        state.on_job(job(f"j{index}", index), deleted=False, now=T0)
        for p in slice_pods(index):
            state.on_pod(p, deleted=False, now=T0)
    return state


def host_lost(state: MonitorState, index: int, at: float, *, reason: str | None = None, created: float = T0) -> None:
    """Every pod of the slice deleted at ``at`` (a host event), then the Job counting them."""
    disruption = (reason, at) if reason else None
    for p in slice_pods(index, created=created, deleting=at, disruption=disruption):
        state.on_pod(p, deleted=False, now=at + 1000)
        state.on_pod(p, deleted=True, now=at + 1000)


def replaced(state: MonitorState, index: int, at: float, failed: int) -> None:
    """The Job controller's replacements, running from ``at``, and its failed counter."""
    state.on_job(job(f"j{index}", index, failed=failed), deleted=False, now=at + 1000)
    for i in range(4):
        state.on_pod(pod(f"s{index}p{i}-{at:.0f}", index, created=at, started=at), deleted=False, now=at + 1000)


def restart_in_place(
    state: MonitorState, index: int, at: float, restarts: int = 1, started: float | None = None
) -> None:
    for p in slice_pods(index, restarts=restarts, finished=at, started=started if started is not None else at + 1):
        state.on_pod(p, deleted=False, now=at + 1000)


def scenario_one_host_event(state: MonitorState) -> None:
    host_lost(state, 0, T0 + 100)
    replaced(state, 0, T0 + 105, failed=4)


def scenario_in_place(state: MonitorState) -> None:
    restart_in_place(state, 1, T0 + 100)


def scenario_two_slices(state: MonitorState) -> None:
    host_lost(state, 0, T0 + 100)
    replaced(state, 0, T0 + 105, failed=4)
    restart_in_place(state, 2, T0 + 101)


def scenario_same_slice_minutes_apart(state: MonitorState) -> None:
    host_lost(state, 0, T0 + 100)
    replaced(state, 0, T0 + 105, failed=4)
    for p in slice_pods(0, created=T0 + 105, started=T0 + 105, deleting=T0 + 300):
        p["metadata"]["uid"] += "-105"
        state.on_pod(p, deleted=True, now=T0 + 1000)
    replaced(state, 0, T0 + 305, failed=8)


def scenario_same_slice_whole_between(state: MonitorState) -> None:
    """Back (all 4 running) at T0 + 102 and failing again at T0 + 104, as on the local cluster: two failures."""
    restart_in_place(state, 0, T0 + 100, restarts=1, started=T0 + 102)
    restart_in_place(state, 0, T0 + 104, restarts=2, started=T0 + 105)


def scenario_cascade(state: MonitorState) -> None:
    """One pod is back at once; the slice's other three fail in that same second: one failure."""
    state.on_pod(pod("s0p0", 0, restarts=1, finished=T0 + 100, started=T0 + 101), deleted=False, now=T0 + 101)
    for i in (1, 2, 3):
        state.on_pod(pod(f"s0p{i}", 0, restarts=1, finished=T0 + 101, started=T0 + 102), deleted=False, now=T0 + 102)


def scenario_eviction(state: MonitorState) -> None:
    host_lost(state, 0, T0 + 100, reason="EvictionByEvictionAPI")
    replaced(state, 0, T0 + 105, failed=4)


def scenario_eviction_then_crashes(state: MonitorState) -> None:
    """A maintenance drain evicts one pod; the slice's other pods crash because of it: no restart."""
    evicted = pod("s1p0", 1, deleting=T0 + 100, disruption=("EvictionByEvictionAPI", T0 + 100))
    state.on_pod(evicted, deleted=True, now=T0 + 200)
    for i in (1, 2, 3):
        state.on_pod(pod(f"s1p{i}", 1, restarts=1, finished=T0 + 103), deleted=False, now=T0 + 200)


def scenario_preemption(state: MonitorState) -> None:
    host_lost(state, 2, T0 + 100, reason="PreemptionByScheduler")


def scenario_node_gone(state: MonitorState) -> None:
    host_lost(state, 0, T0 + 100, reason="DeletionByPodGC")  # a lost host: counted


def scenario_unseen_job_failures(state: MonitorState) -> None:
    """Pods that went while no trigger watched: the Job's counter and their replacements date them."""
    replaced(state, 1, T0 + 300, failed=4)


def scenario_teardown(state: MonitorState) -> None:
    """A JobSet restart deletes the Job in the foreground, then its pods: no slice failure."""
    state.on_job(job("j0", 0, deleting=T0 + 100), deleted=False, now=T0 + 200)
    host_lost(state, 0, T0 + 101)
    state.on_job(job("j0", 0, failed=4, deleting=T0 + 100), deleted=True, now=T0 + 200)


def scenario_failure_fails_the_jobset(state: MonitorState) -> None:
    """The pod whose loss spent the Job's backoffLimit, and the JobSet's teardown, in the same second."""
    state.on_pod(pod("s0p0", 0, deleting=T0 + 100), deleted=True, now=T0 + 200)
    state.on_job(job("j0", 0, failed=1, deleting=T0 + 100), deleted=False, now=T0 + 200)
    state.on_job(job("j1", 1, deleting=T0 + 100), deleted=False, now=T0 + 200)
    host_lost(state, 1, T0 + 100)  # slice 1's pods torn down in that second: its Job counted none
    host_lost(state, 2, T0 + 100)  # slice 2's Job not yet seen deleting: counted, until it is
    state.on_job(job("j2", 2, deleting=T0 + 100), deleted=False, now=T0 + 200)
    for p in slice_pods(0)[1:]:
        state.on_pod(p, deleted=True, now=T0 + 200)  # no deletionTimestamp (hand-built): the caller's clock


def scenario_local_cluster_speed(state: MonitorState) -> None:
    """Force deletions (no time on the object: dated on arrival) with the replacement running in the same
    whole second, three times 2-3 s apart, as the local cluster does: three slice failures."""
    state.on_job(job("j3", 3, size=1), deleted=False, now=T0)
    previous = pod("s3", 3, job_uid="j3")
    state.on_pod(previous, deleted=False, now=T0)
    for n, at in enumerate((T0 + 100.4, T0 + 103.2, T0 + 105.9)):
        state.on_pod(previous, deleted=True, now=at)
        previous = pod(f"s3-{n}", 3, job_uid="j3", created=int(at), started=int(at))
        state.on_pod(previous, deleted=False, now=at + 0.3)


@pytest.mark.parametrize(
    ("scenario", "restarts", "by_slice", "times", "evictions"),
    [
        (scenario_one_host_event, 1, {"0": 1}, [T0 + 100], 0),
        (scenario_in_place, 1, {"1": 1}, [T0 + 100], 0),
        (scenario_two_slices, 2, {"0": 1, "2": 1}, [T0 + 100, T0 + 101], 0),
        (scenario_same_slice_minutes_apart, 2, {"0": 2}, [T0 + 100, T0 + 300], 0),
        (scenario_same_slice_whole_between, 2, {"0": 2}, [T0 + 100, T0 + 104], 0),
        (scenario_cascade, 1, {"0": 1}, [T0 + 100], 0),
        (scenario_eviction, 0, {}, [], 1),
        (scenario_eviction_then_crashes, 0, {}, [], 1),
        (scenario_preemption, 0, {}, [], 1),
        (scenario_node_gone, 1, {"0": 1}, [T0 + 100], 0),
        (scenario_unseen_job_failures, 1, {"1": 1}, [T0 + 300], 0),
        (scenario_teardown, 0, {}, [], 0),
        (scenario_failure_fails_the_jobset, 1, {"0": 1}, [T0 + 100], 0),
        (scenario_local_cluster_speed, 3, {"3": 3}, [T0 + 100.4, T0 + 103.2, T0 + 105.9], 0),
    ],
    ids=lambda v: v.__name__.removeprefix("scenario_") if callable(v) else None,
)
def test_slice_restarts_are_counted_in_slices_on_kubernetes_time(
    scenario: Any, restarts: int, by_slice: dict[str, int], times: list[float], evictions: int
) -> None:
    state = running()
    scenario(state)
    assert state.slice_restarts == restarts
    assert state.slice_restarts_by_slice == by_slice
    assert state.slice_restart_times == times
    assert state.slice_evictions == evictions
    rebuilt = MonitorState.from_json(json.loads(json.dumps(state.to_json())))
    assert (rebuilt.slice_restarts, rebuilt.slice_restart_times, rebuilt.slice_evictions) == (
        restarts,
        times,
        evictions,
    )


def test_the_order_the_watches_deliver_in_does_not_matter() -> None:
    """The Job's counter seen before the pods that explain it: counted once, at the pods' time."""
    state = running()
    state.on_job(job("j0", 0, failed=4), deleted=False, now=T0 + 500)
    host_lost(state, 0, T0 + 100)
    assert (state.slice_restarts, state.slice_restart_times) == (1, [T0 + 100])


def test_a_job_failed_before_the_pod_watch_brings_its_last_failure() -> None:
    """The watches race: the Job's last failure (and its Failed condition) arrive before the pod's deletion.
    Dated by the condition, it is a new slice failure, not part of the one the pod it replaced was made for."""
    state = running(1)
    host_lost(state, 0, T0 + 100)
    replaced(state, 0, T0 + 101, failed=4)  # whole again from T0 + 101
    failed = job("j0", 0, failed=5)
    failed["status"]["conditions"] = [
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "lastTransitionTime": stamp(T0 + 104)}
    ]
    state.on_job(failed, deleted=False, now=T0 + 200)
    assert (state.slice_restarts, state.slice_restart_times) == (2, [T0 + 100, T0 + 104])
    state.on_pod(pod("s0p0-101", 0, created=T0 + 101, deleting=T0 + 104), deleted=True, now=T0 + 200)
    assert (state.slice_restarts, state.slice_restart_times) == (2, [T0 + 100, T0 + 104])


def test_returns_the_slices_newly_counted() -> None:
    state = running()
    first = pod("s0p0", 0, deleting=T0 + 100)
    assert state.on_pod(first, deleted=True, now=T0 + 200) == [0]
    assert state.on_pod(pod("s0p1", 0, deleting=T0 + 101), deleted=True, now=T0 + 200) == []  # same failure
    assert state.on_pod(first, deleted=True, now=T0 + 300) == []  # the same event again


def test_head_and_unknown_objects_are_not_slices() -> None:
    state = MonitorState()
    assert (
        state.on_job(
            {"metadata": {"uid": "h", "labels": {LABEL_REPLICATED_JOB_NAME: "pathways-head"}}}, deleted=False, now=1
        )
        == []
    )
    assert state.on_pod({"metadata": {"uid": "x", "labels": {}}}, deleted=False, now=1) == []
    assert (
        state.on_pod(
            pod("y", 0)
            | {"metadata": {"uid": "y", "labels": {LABEL_REPLICATED_JOB_NAME: "worker", LABEL_JOB_INDEX: "zz"}}},
            deleted=False,
            now=1,
        )
        == []
    )
    assert state.slice_restarts == 0


def test_a_rebuilt_trigger_does_not_re_date_old_restarts() -> None:
    """Issue 17 point 1: restarts over two days, a triggerer restart two days on: none of them is "now"."""
    deferred = running().to_json()  # the trigger's kwargs, saved when the task deferred
    now = T0 + 2 * DAY
    rebuilt = MonitorState.from_json(json.loads(json.dumps(deferred)))
    # What a fresh look at the cluster shows: slice 0 lost a host on day 1 (pods replaced then), slice 1's
    # pods restarted in place twice (the last time on day 1), slice 2 is untouched.
    rebuilt.forget_missing(alive_jobs={"j0", "j1", "j2"}, alive_pods=set())
    rebuilt.on_job(job("j0", 0, failed=4), deleted=False, now=now)
    rebuilt.on_job(job("j1", 1), deleted=False, now=now)
    rebuilt.on_job(job("j2", 2), deleted=False, now=now)
    for p in slice_pods(0, created=T0 + DAY, started=T0 + DAY):
        rebuilt.on_pod(p, deleted=False, now=now)
    for p in slice_pods(1, restarts=2, finished=T0 + DAY + 50, started=T0 + DAY + 51):
        rebuilt.on_pod(p, deleted=False, now=now)
    for p in slice_pods(2):
        rebuilt.on_pod(p, deleted=False, now=now)
    assert rebuilt.slice_restarts == 2  # they did happen, one per slice
    assert rebuilt.slice_restart_times == [T0 + DAY, T0 + DAY + 50]
    budgets = Budgets(
        max_slice_restarts=1, slice_restart_window_seconds=3600, stall_timeout_seconds=3600, max_full_restarts=1
    )
    observation = rebuilt.observation(now=now, target_step=99, full_restarts_used=0)
    assert decide(replace(observation, progress_at=now - 1), budgets).action is Action.CONTINUE


def test_rebuilt_from_json_neither_loses_nor_double_counts() -> None:
    state = running(2)
    host_lost(state, 0, T0 + 100)
    replaced(state, 0, T0 + 105, failed=4)  # seen before the trigger is torn down
    saved = json.loads(json.dumps(state.to_json()))
    # Torn down here; meanwhile slice 1 lost a host. A trigger rebuilt from the same kwargs relists:
    for _ in range(2):  # twice, as a second failover would
        rebuilt = MonitorState.from_json(saved)
        rebuilt.forget_missing(alive_jobs={"j0", "j1"}, alive_pods=set())
        rebuilt.on_job(job("j0", 0, failed=4), deleted=False, now=T0 + 900)
        replaced(rebuilt, 1, T0 + 500, failed=4)
        for p in slice_pods(0, created=T0 + 105, started=T0 + 105):
            p["metadata"]["uid"] = f"{p['metadata']['uid']}-105"
            rebuilt.on_pod(p, deleted=False, now=T0 + 900)
        assert rebuilt.slice_restarts == 2
        assert rebuilt.slice_restarts_by_slice == {"0": 1, "1": 1}
        assert rebuilt.slice_restart_times == [T0 + 100, T0 + 500]


def test_a_state_written_by_the_first_format_keeps_its_counts() -> None:
    """A trigger serialized before the state had a version, read after an upgrade."""
    old = {
        "jobset_uid": "u",
        "started_at": T0,
        "phase": "active",
        "worker_jobs": {"j0": [0, 4], "j1": [1, 0]},
        "worker_pods": {"s1p0": [1, 2]},
        "slice_restart_times": [T0 + 10.5, T0 + 10.5, T0 + 10.5, T0 + 10.5, T0 + 20.0, T0 + 20.0],
        "slice_restarts": 6,
        "slice_restarts_by_slice": {"0": 4, "1": 2},
        "head_pod": None,
        "digest": {},
    }
    state = MonitorState.from_json(old)
    assert state.version == STATE_VERSION
    assert (state.slice_restarts, state.slice_restarts_by_slice) == (6, {"0": 4, "1": 2})
    assert state.slice_restart_times == old["slice_restart_times"]
    state.on_job(job("j0", 0, failed=4), deleted=False, now=T0 + 900)  # nothing new
    state.on_pod(pod("s1p0", 1, restarts=2, job_uid="j1", finished=T0 + 19), deleted=False, now=T0 + 900)
    assert state.slice_restarts == 6
    state.on_pod(pod("s1p0", 1, restarts=3, job_uid="j1", finished=T0 + 800), deleted=False, now=T0 + 900)
    assert (state.slice_restarts, state.slice_restart_times[-1]) == (7, T0 + 800)
    assert MonitorState.from_json(json.loads(json.dumps(state.to_json()))) == state


def test_a_state_from_newer_code_is_refused() -> None:
    with pytest.raises(ValueError, match="version 3 is newer"):
        MonitorState.from_json({"version": 3})


def test_records_stay_bounded() -> None:
    state = MonitorState()
    state.on_job(job("j0", 0, size=1), deleted=False, now=T0)
    for n in range(1, MAX_FAILURES_KEPT + 2):
        at = T0 + n * 1000
        state.on_pod(pod("p", 0, restarts=n, finished=at, started=at + 1), deleted=False, now=at)
    assert len(state.failures) <= MAX_FAILURES_KEPT
    assert state.slice_restarts == MAX_FAILURES_KEPT + 1
    assert len(state.slice_restart_times) <= MAX_RESTART_TIMES_KEPT


def test_head_pod_and_permanent_exit() -> None:
    state = MonitorState()
    terminated = {"name": "jax-tpu", "restartCount": 0, "state": {"terminated": {"exitCode": 2}}}
    head = pod("h", 0, rjob="pathways-head")
    state.on_pod(head, deleted=False, now=1.0)
    assert (state.head_pod, state.head_pod_uid) == ("p-h", "h")
    head["status"]["containerStatuses"] = [terminated]
    state.on_pod(head, deleted=False, now=2.0)
    state.on_jobset({"metadata": {"uid": "j"}, "status": {"terminalState": "Failed"}})
    observation = state.observation(now=3.0, target_step=9, full_restarts_used=0)
    assert observation.permanent and "exited 2" in observation.failure_detail


@pytest.mark.parametrize(
    ("jobset", "phase", "detail"),
    [
        (None, JobSetPhase.MISSING, ""),
        ({"status": {}}, JobSetPhase.ACTIVE, ""),
        ({"status": {"terminalState": "Completed"}}, JobSetPhase.COMPLETED, ""),
        (
            {
                "status": {
                    "conditions": [{"type": "Failed", "status": "True", "reason": "ReachedMaxRestarts", "message": "m"}]
                }
            },
            JobSetPhase.FAILED,
            "ReachedMaxRestarts: m",
        ),
        ({"status": {"conditions": [{"type": "Failed", "status": "False"}]}}, JobSetPhase.ACTIVE, ""),
    ],
)
def test_jobset_phase(jobset: dict[str, Any] | None, phase: JobSetPhase, detail: str) -> None:
    assert jobset_phase(jobset) == (phase, detail)


def _ended(kind: str, at: str, status: str = "True") -> dict[str, Any]:
    condition = {"type": kind, "status": status, "reason": "AllJobsCompleted", "lastTransitionTime": at}
    return {
        "metadata": {"uid": "j"},
        "status": {"terminalState": kind if status == "True" else "", "conditions": [condition]},
    }


def test_the_jobset_end_is_kubernetes_stamp_of_its_terminal_condition_and_survives_its_deletion() -> None:
    state = MonitorState(jobset_uid="j", started_at=5.0)
    state.on_jobset(_ended("Completed", "2026-12-08T01:01:24Z", status="False"))
    assert state.ended_at is None
    state.on_jobset(_ended("Completed", "2026-12-08T01:01:24Z"))
    stamped = datetime(2026, 12, 8, 1, 1, 24, tzinfo=UTC).timestamp()
    assert state.ended_at == stamped and jobset_ended_at(_ended("Failed", "2026-12-08T01:01:24Z")) == stamped
    state.on_jobset(None)  # deleted after it ended: its end stays known
    assert state.phase is JobSetPhase.MISSING and state.ended_at == stamped
    assert MonitorState.from_json(json.loads(json.dumps(state.to_json()))).ended_at == stamped


@pytest.mark.parametrize("stored", ["yesterday", True, -1.0, 0, float("nan"), [1.0], 10**400])
def test_a_stored_jobset_end_that_is_no_time_is_dropped_not_fatal(stored: object) -> None:
    data = MonitorState(jobset_uid="j").to_json() | {"ended_at": stored}
    assert MonitorState.from_json(data).ended_at is None


def test_log_cursor_orders_kubelet_timestamps_and_skips_replayed_lines() -> None:
    state = MonitorState()
    line = "completed step: 3, seconds: 0.5, loss: 1"
    assert state.on_log_line("2026-11-30T12:00:05.123Z", line, "h")
    assert not state.on_log_line("2026-11-30T12:00:05.1Z", line, "h")  # earlier, though it sorts later as text
    assert not state.on_log_line("2026-11-30T12:00:05.123Z", line, "h")  # replayed by an overlapping read
    assert state.on_log_line("2026-11-30T12:00:05.2Z", line, "h")
    assert state.on_log_line("2026-11-30T12:00:01Z", line, "new-head")  # another pod: its own history
    assert state.digest.steps_executed == 3
    assert not state.on_log_line("garbage", line, "h")
    assert normalize_timestamp("2026-11-30T12:00:05Z") == "2026-11-30T12:00:05.000000000Z"


def test_state_round_trip() -> None:
    state = MonitorState(jobset_uid="u", started_at=5.0)
    state.on_pod(pod("a", 0, restarts=1), deleted=False, now=1.0)
    state.on_job(job("j", 0, failed=1), deleted=False, now=1.0)
    state.on_log_line("2026-11-30T12:00:05.123456789Z", "Elastic event detected", "h")
    assert MonitorState.from_json(json.loads(json.dumps(state.to_json()))) == state


# -- Kueue: queued, admitted, preempted; waiting is not stalling ------------------------------------------------

QUEUE_LABELS = {"kueue.x-k8s.io/queue-name": "multislice-queue"}
PENDING = {
    "spec": {"active": True},
    "status": {
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "False",
                "reason": "Pending",
                "message": "couldn't assign flavors to pod set worker: insufficient unused quota for google.com/tpu",
            }
        ]
    },
}
ADMITTED = {
    "spec": {"active": True},
    "status": {
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
            {"type": "Admitted", "status": "True", "reason": "Admitted"},
        ]
    },
}
EVICTED = {
    "spec": {"active": True},
    "status": {
        "conditions": [
            *ADMITTED["status"]["conditions"],
            {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "Preempted to accommodate w2"},
            {"type": "Preempted", "status": "True", "reason": "InClusterQueue", "message": "Preempted to accommodate"},
        ]
    },
}


def queued_jobset(*, suspended: bool, at: float) -> dict[str, Any]:
    """A JobSet with a queue label, suspended (Kueue holds it) or resumed, as of ``at``."""
    condition = {
        "type": "Suspended",
        "status": "True" if suspended else "False",
        "reason": "SuspendedJobs" if suspended else "ResumeJobs",
        "lastTransitionTime": stamp(at),
    }
    return {
        "metadata": {"uid": "js", "creationTimestamp": stamp(T0), "labels": dict(QUEUE_LABELS)},
        "spec": {"suspend": suspended},
        "status": {"conditions": [condition]},
    }


def head(uid: str, *, started: float | None, deleting: float | None = None) -> dict[str, Any]:
    found = pod(uid, 0, rjob="pathways-head", created=started or T0, deleting=deleting)
    container = {"name": "jax-tpu", "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}
    if started is not None:
        container["state"] = {"running": {"startedAt": stamp(started)}}
    found["status"]["containerStatuses"] = [container]
    return found


def test_jobset_phase_reads_the_suspension() -> None:
    assert jobset_phase({"spec": {"suspend": True}, "status": {}}) == (JobSetPhase.SUSPENDED, "")
    suspended = {"type": "Suspended", "status": "True", "reason": "SuspendedJobs"}
    assert jobset_phase({"spec": {}, "status": {"conditions": [suspended]}}) == (JobSetPhase.SUSPENDED, "")
    # Ended beats suspended: a finished JobSet is finished.
    ended = {"spec": {"suspend": True}, "status": {"terminalState": "Completed"}}
    assert jobset_phase(ended)[0] is JobSetPhase.COMPLETED


def test_a_queued_run_waits_then_starts_then_trains_on_a_clock_that_begins_with_its_trainer() -> None:
    budgets = Budgets(
        max_slice_restarts=1,
        slice_restart_window_seconds=600,
        stall_timeout_seconds=300,
        max_full_restarts=0,
        startup_timeout_seconds=900,
    )
    state = MonitorState(started_at=T0)
    state.on_jobset(queued_jobset(suspended=True, at=T0), now=T0 + 1)
    state.on_workload(PENDING, now=T0 + 1)
    now = T0 + 3600  # an hour in the queue: ten stall timeouts
    observation = state.observation(now=now, target_step=99, full_restarts_used=0)
    assert state.run_phase(now).value == "queued" and observation.progress_at is None
    assert observation.waiting is not None and observation.waiting.since == T0 and not observation.waiting.preempted
    assert "insufficient unused quota" in observation.waiting.reason
    assert decide(observation, budgets).action is Action.CONTINUE  # the full-restart budget is 0: nothing is spent
    # Admitted; its pods scheduling and images pulling for longer than the stall timeout: still no stall clock.
    state.on_jobset(queued_jobset(suspended=False, at=T0 + 3600), now=T0 + 3601)
    state.on_workload(ADMITTED, now=T0 + 3601)
    state.on_pod(head("h", started=None), deleted=False, now=T0 + 3601)
    assert state.run_phase(T0 + 4500).value == "starting"
    assert decide(state.observation(now=T0 + 4500, target_step=99, full_restarts_used=0), budgets).reason.value == (
        "starting"
    )
    # The trainer is up at T0 + 4600: the start-up clock starts there; its wait for slices, restore and compilation
    # take longer than the stall timeout, and are no stall.
    state.on_pod(head("h", started=T0 + 4600), deleted=False, now=T0 + 4601)
    state.on_log_line(stamp(T0 + 4610), "Waiting for 2 slices. Poll interval: 10, Timeout: 300", "h")
    state.on_log_line(stamp(T0 + 4640), "Sufficient slices active: 2 >= 2. Active indices: {0, 1}", "h")
    state.on_log_line(stamp(T0 + 4650), "restoring from this run's directory step 40", "h")
    starting = state.observation(now=T0 + 5100, target_step=99, full_restarts_used=0)
    assert (starting.starting_since, starting.progress_at) == (T0 + 4600, None)
    assert starting.startup_detail == "restoring step 40, then compiling its first step"
    assert state.run_phase(T0 + 5100).value == "starting"
    decision = decide(starting, budgets)
    assert (decision.action, decision.reason.value, decision.recheck_at) == (Action.CONTINUE, "starting", T0 + 5500)
    assert "the start-up clock runs (startup_timeout=15.0 min)" in decision.message
    # Its first step ends the start-up: the stall clock runs from it, and a trainer that steps no more stalls.
    state.on_log_line(stamp(T0 + 5200), "completed step: 41, seconds: 400.0", "h")
    trained = state.observation(now=T0 + 5499, target_step=99, full_restarts_used=0)
    assert (trained.starting_since, trained.progress_at) == (None, T0 + 5200)
    assert state.run_phase(T0 + 5499).value == "training"
    stalled = decide(state.observation(now=T0 + 5500, target_step=99, full_restarts_used=0), budgets)
    assert "needed another because no training progress for 5.0 min" in stalled.message  # budget 0: it fails
    assert state.digest.queued_seconds(T0 + 5500) == 3600


def test_a_start_up_that_never_trains_times_out_and_each_new_trainer_starts_up_again() -> None:
    budgets = Budgets(
        max_slice_restarts=1,
        slice_restart_window_seconds=600,
        stall_timeout_seconds=300,
        max_full_restarts=1,
        startup_timeout_seconds=900,
    )
    state = running()
    state.on_pod(head("h", started=T0 + 5), deleted=False, now=T0 + 5)
    state.on_log_line(stamp(T0 + 20), "restoring from this run's directory step 40", "h")
    timed_out = decide(state.observation(now=T0 + 905, target_step=99, full_restarts_used=0), budgets)
    assert (timed_out.action, timed_out.reason.value) == (Action.ESCALATE, "startup_timed_out")
    assert "not trained since its container started 15.0 min ago (startup_timeout=15.0 min" in timed_out.message
    assert "restoring step 40" in timed_out.message
    # It trained; then a JobSet restart's new head pod starts up again, restoring what the old one saved.
    state.on_log_line(stamp(T0 + 100), "completed step: 41, seconds: 60.0", "h")
    assert state.observation(now=T0 + 905, target_step=99, full_restarts_used=0).starting_since is None
    state.on_pod(head("h", started=T0 + 5), deleted=True, now=T0 + 200)
    state.on_pod(head("h2", started=T0 + 300), deleted=False, now=T0 + 301)
    again = state.observation(now=T0 + 1000, target_step=99, full_restarts_used=0)
    assert (again.starting_since, again.progress_at) == (T0 + 300, None)
    assert again.startup_detail.startswith("nothing logged yet")
    assert state.run_phase(T0 + 1000).value == "starting"
    # An in-process recovery is the trainer's, in training: the stall clock runs, as it did.
    state.on_log_line(stamp(T0 + 1100), "completed step: 42, seconds: 70.0", "h2")
    state.on_log_line(stamp(T0 + 1200), "Elastic event detected", "h2")
    recovering = state.observation(now=T0 + 1300, target_step=99, full_restarts_used=0)
    assert (recovering.starting_since, recovering.progress_at) == (None, T0 + 1200)
    assert recovering.recovering  # no step since it detected the event: past saving (a full restart's short grace)
    state.on_log_line(stamp(T0 + 1240), "restoring from this run's directory step 42", "h2")
    state.on_log_line(stamp(T0 + 1250), "completed step: 43, seconds: 70.0", "h2")
    assert not state.observation(now=T0 + 1300, target_step=99, full_restarts_used=0).recovering


def test_a_preemption_deletes_pods_that_are_no_slice_failures() -> None:
    state = running()
    state.on_jobset(queued_jobset(suspended=False, at=T0), now=T0)
    state.on_pod(head("h", started=T0 + 5), deleted=False, now=T0 + 5)
    state.on_log_line(stamp(T0 + 50), "completed step: 27, seconds: 0.1", "h")
    state.on_workload(EVICTED, now=T0 + 100)
    state.on_jobset(queued_jobset(suspended=True, at=T0 + 100), now=T0 + 100)
    # The JobSet controller suspends the worker Jobs; the Job controller deletes their pods, which terminate
    # normally (whatever order the watches bring that in), and a Job's counter may count them.
    for index in range(3):
        suspended_job = job(f"j{index}", index, failed=4)
        suspended_job["spec"]["suspend"] = True
        state.on_job(suspended_job, deleted=False, now=T0 + 103)
        for p in slice_pods(index, deleting=T0 + 101):
            state.on_pod(p, deleted=True, now=T0 + 104)
    state.on_pod(head("h", started=T0 + 5, deleting=T0 + 101), deleted=True, now=T0 + 104)
    assert state.slice_restarts == 0 and state.slice_evictions == 0
    now = T0 + 2000
    observation = state.observation(now=now, target_step=99, full_restarts_used=0)
    assert state.run_phase(now).value == "preempted"
    assert observation.waiting is not None and observation.waiting.preempted
    assert observation.waiting.since == T0 + 100
    [preemption] = state.digest.all_recoveries
    assert (preemption.kind, preemption.failed_step) == ("preemption", 27)
    assert preemption.reason.startswith("Preempted: Preempted to accommodate")
    # Admitted again: the same JobSet resumes from its checkpoint (the trainer logs the restore, then steps).
    state.on_jobset(queued_jobset(suspended=False, at=T0 + 2000), now=T0 + 2000)
    state.on_pod(head("h2", started=T0 + 2010), deleted=False, now=T0 + 2010)
    state.on_log_line(stamp(T0 + 2020), "restoring from this run's directory step 20", "h2")
    state.on_log_line(stamp(T0 + 2025), "completed step: 21, seconds: 0.1", "h2")
    assert (preemption.slices_ready_at, preemption.restored_step, preemption.steps_lost) == (T0 + 2000, 20, 7)
    assert preemption.complete and state.run_phase(T0 + 2026).value == "training"
    assert state.digest.queued_seconds(T0 + 2026) == 1900


def test_the_same_deletions_unsuspended_are_slice_failures() -> None:
    state = running()
    state.on_jobset(queued_jobset(suspended=False, at=T0), now=T0)
    host_lost(state, 1, T0 + 101)
    assert state.slice_restarts == 1


def test_suspended_in_no_queue_is_told_after_a_grace() -> None:
    state = MonitorState(started_at=T0)
    state.on_jobset(queued_jobset(suspended=True, at=T0), now=T0)
    state.on_workload(None, now=T0 + 1)
    assert state.run_phase(T0 + 10).value == "queued"  # Kueue makes the Workload within moments
    observation = state.observation(now=T0 + 40, target_step=9, full_restarts_used=0)
    assert state.run_phase(T0 + 40).value == "not_queued"
    assert observation.waiting is not None and observation.waiting.not_queued
    unlabelled = MonitorState(started_at=T0)
    jobset = queued_jobset(suspended=True, at=T0)
    jobset["metadata"]["labels"] = {}
    unlabelled.on_jobset(jobset, now=T0)
    waiting = unlabelled.observation(now=T0 + 1, target_step=9, full_restarts_used=0).waiting
    assert waiting is not None and waiting.not_queued and "no kueue.x-k8s.io/queue-name label" in waiting.reason


@pytest.mark.parametrize(
    ("lines", "now", "progress"),
    [
        # pathwaysutils' wait for slices is progress...
        ([(10, "Waiting for 3 slices. Poll interval: 10"), (70, "2 slices active. Wanting at least 3.")], 80, 70),
        # ... only as long as MaxText waits (elastic_timeout_seconds=120 here), then the clock runs on.
        (
            [
                (10, "Waiting for 3 slices."),
                *((10 + 20 * i, "2 slices active. Wanting at least 3.") for i in range(12)),
            ],
            250,
            130,
        ),
        # The wait ends: the last line of it is the progress.
        ([(10, "Waiting for 3 slices."), (40, "Sufficient slices active: 3 >= 3. Active indices: [0, 1, 2]")], 50, 40),
    ],
)
def test_the_wait_for_slices_is_progress_bounded_by_elastic_timeout(
    lines: list[tuple[float, str]], now: float, progress: float
) -> None:
    state = running()
    state.on_jobset({"metadata": {"uid": "js", "creationTimestamp": stamp(T0)}, "spec": {}, "status": {}}, now=T0)
    state.on_pod(head("h", started=T0 + 1), deleted=False, now=T0 + 1)
    # Before the first step, a wait for slices (pathwaysutils' first attempt waits too) is start-up: no stall clock.
    for at, text in lines:
        state.on_log_line(stamp(T0 + at), text, "h")
    early = state.observation(now=T0 + now, target_step=9, full_restarts_used=0, elastic_timeout_seconds=120)
    assert (early.starting_since, early.progress_at) == (T0 + 1, None)
    # In training, a slice lost: the in-process recovery's wait is progress, under the stall clock.
    state = running()
    state.on_jobset({"metadata": {"uid": "js", "creationTimestamp": stamp(T0)}, "spec": {}, "status": {}}, now=T0)
    state.on_pod(head("h", started=T0 + 1), deleted=False, now=T0 + 1)
    state.on_log_line(stamp(T0 + 2), "completed step: 3, seconds: 0.1", "h")
    state.on_log_line(stamp(T0 + 5), "Elastic event detected", "h")
    for at, text in lines:
        state.on_log_line(stamp(T0 + at), text, "h")
    observation = state.observation(now=T0 + now, target_step=9, full_restarts_used=0, elastic_timeout_seconds=120)
    assert observation.starting_since is None and observation.progress_at == T0 + progress


def test_queue_fields_round_trip() -> None:
    state = MonitorState(started_at=T0)
    state.on_jobset(queued_jobset(suspended=True, at=T0), now=T0)
    state.on_workload(PENDING, now=T0)
    rebuilt = MonitorState.from_json(json.loads(json.dumps(state.to_json())))
    assert rebuilt.to_json() == state.to_json()
    assert rebuilt.digest.suspended and rebuilt.queue_managed and "Pending" in rebuilt.queue_reason


def test_maxtexts_config_error_line_is_permanent_whatever_its_exit_code() -> None:
    """Real MaxText refuses its configuration with exit 1 (tests/local/workloads/test_maxtext_contract.py): the line
    says it, and the JobSet's failure is then permanent, with the refusal as its detail."""
    state = MonitorState()
    head = pod("h", 0, rjob="pathways-head")
    state.on_pod(head, deleted=False, now=1.0)
    refusal = "E1201 12:00:00.000 1 pyconfig.py:393] MAXTEXT CONFIG ERROR: 'stepz' not in 'run_name', 'model_name'."
    assert state.on_log_line("2026-12-01T12:00:00.5Z", refusal, "h")
    head["status"]["containerStatuses"] = [
        {"name": "jax-tpu", "restartCount": 0, "state": {"terminated": {"exitCode": 1}}}
    ]
    state.on_pod(head, deleted=False, now=2.0)
    running = state.observation(now=3.0, target_step=9, full_restarts_used=0)
    assert not running.permanent, "acted on once the JobSet failed, as an exit code is"
    state.on_jobset({"metadata": {"uid": "j"}, "status": {"terminalState": "Failed"}})
    failed = state.observation(now=3.0, target_step=9, full_restarts_used=0)
    assert failed.permanent
    said = "the trainer refused its configuration: MAXTEXT CONFIG ERROR: 'stepz' not in"
    assert failed.failure_detail.startswith(said)
    again = MonitorState.from_json(state.to_json()).observation(now=4.0, target_step=9, full_restarts_used=0)
    assert again.permanent and again.failure_detail == failed.failure_detail


def pods_ready_evicted(*, released: bool, count: int) -> dict[str, Any]:
    """A Workload Kueue evicted for a PodsReady timeout: its job being stopped, or released and backing off."""
    message = "Exceeded the PodsReady timeout default/jobset-run-1a2b3"
    quota = {"type": "QuotaReserved", "status": "False" if released else "True", "reason": "Pending"}
    return {
        "spec": {"active": True},
        "status": {
            "conditions": [
                quota,
                {"type": "Evicted", "status": "True", "reason": "PodsReadyTimeout", "message": message},
                *([{"type": "Requeued", "status": "False", "reason": "PodsReadyTimeout"}] if released else []),
            ],
            "requeueState": {"count": count, "requeueAt": stamp(T0 + 500)},
        },
    }


def test_a_pods_ready_eviction_is_a_wait_of_its_own_kind_counted_over_the_run() -> None:
    state = running()
    state.earlier_pods_ready_evictions = 1  # an earlier incarnation's
    state.on_jobset(queued_jobset(suspended=False, at=T0), now=T0)
    state.on_workload(ADMITTED, now=T0)
    state.on_pod(head("h", started=T0 + 5), deleted=False, now=T0 + 5)
    state.on_log_line(stamp(T0 + 50), "completed step: 27, seconds: 0.1", "h")
    # The JobSet suspended first, the Workload's eviction seen after: the recovery learns its kind then.
    state.on_jobset(queued_jobset(suspended=True, at=T0 + 100), now=T0 + 100)
    state.on_workload(pods_ready_evicted(released=True, count=1), now=T0 + 101)
    [eviction] = state.digest.all_recoveries
    assert (eviction.kind, eviction.eviction) == ("preemption", "pods_ready_timeout")
    assert eviction.reason.startswith("PodsReadyTimeout: Exceeded the PodsReady timeout")
    assert state.run_phase(T0 + 200).value == "evicted"
    assert state.pods_ready_evictions() == 2
    waiting = state.observation(now=T0 + 200, target_step=99, full_restarts_used=0).waiting
    assert waiting is not None and waiting.preempted
    assert (waiting.eviction, waiting.pods_ready_evictions, waiting.requeue_at) == ("pods_ready_timeout", 2, T0 + 500)
    limited = Budgets(
        max_slice_restarts=1, slice_restart_window_seconds=600, stall_timeout_seconds=300, max_full_restarts=0
    )
    assert decide(state.observation(now=T0 + 200, target_step=99, full_restarts_used=0), limited).reason.value == (
        "pods_ready_timeout"
    )
    over = replace(limited, max_pods_ready_evictions=1)
    failed = decide(state.observation(now=T0 + 200, target_step=99, full_restarts_used=0), over)
    assert (failed.action, failed.reason.value) == (Action.FAIL, "pods_ready_evictions_exceeded")
    # Kept through the trigger's kwargs and the state store.
    rebuilt = MonitorState.from_json(json.loads(json.dumps(state.to_json())))
    assert rebuilt.pods_ready_evictions() == 2 and rebuilt.run_phase(T0 + 200).value == "evicted"
    # Admitted again: resumed from its checkpoint in the same JobSet, a wait like a preemption's.
    state.on_jobset(queued_jobset(suspended=False, at=T0 + 600), now=T0 + 600)
    state.on_workload(ADMITTED, now=T0 + 600)
    state.on_pod(head("h2", started=T0 + 610), deleted=False, now=T0 + 610)
    state.on_log_line(stamp(T0 + 620), "restoring from this run's directory step 20", "h2")
    state.on_log_line(stamp(T0 + 625), "completed step: 21, seconds: 0.1", "h2")
    assert (eviction.slices_ready_at, eviction.restored_step, eviction.steps_lost) == (T0 + 600, 20, 7)
    assert state.run_phase(T0 + 626).value == "training" and state.slice_restarts == 0


def test_a_preemption_is_still_a_preemption() -> None:
    state = running()
    state.on_jobset(queued_jobset(suspended=False, at=T0), now=T0)
    state.on_workload(EVICTED, now=T0 + 100)
    state.on_jobset(queued_jobset(suspended=True, at=T0 + 100), now=T0 + 100)
    assert [r.eviction for r in state.digest.all_recoveries] == ["preempted"]
    assert state.run_phase(T0 + 200).value == "preempted" and state.pods_ready_evictions() == 0


def test_a_deactivated_workload_fails_the_run_whether_it_ran_or_not() -> None:
    deactivated = {
        "spec": {"active": False},
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "False", "reason": "Pending"},
                {
                    "type": "Evicted",
                    "status": "True",
                    "reason": "Deactivated",
                    "message": "The workload is deactivated",
                },
            ]
        },
    }
    budgets = Budgets(
        max_slice_restarts=1, slice_restart_window_seconds=600, stall_timeout_seconds=300, max_full_restarts=1
    )
    queued = MonitorState(started_at=T0)
    queued.on_jobset(queued_jobset(suspended=True, at=T0), now=T0)
    queued.on_workload(deactivated, now=T0 + 1)
    assert queued.run_phase(T0 + 2).value == "deactivated"
    decision = decide(queued.observation(now=T0 + 2, target_step=9, full_restarts_used=0), budgets)
    assert (decision.action, decision.reason.value) == (Action.FAIL, "deactivated")
    assert "Kueue: its Workload was deactivated (Deactivated: The workload is deactivated)" in decision.message
    ran = running()
    ran.on_jobset(queued_jobset(suspended=False, at=T0), now=T0)
    ran.on_jobset(queued_jobset(suspended=True, at=T0 + 100), now=T0 + 100)
    ran.on_workload(deactivated, now=T0 + 101)
    decision = decide(ran.observation(now=T0 + 102, target_step=9, full_restarts_used=0), budgets)
    assert (decision.action, decision.reason.value) == (Action.FAIL, "deactivated")


def test_a_slice_whose_host_came_back_without_its_containers_is_a_lost_host() -> None:
    """A TPU host down and back within the node lifecycle controller's grace period (no taint, no
    ``DisruptionTarget``): the kubelet reports its pods ``Failed``, their containers ``ContainerStatusUnknown``
    (exit 137, "could not be located"), as the upstream cluster's node agent does. That is the host, not the
    trainer: a ``lost_host`` slice failure, which the pool's health is judged on. A container that exits 137 by
    itself (an OOM kill) stays a trainer error."""
    state = MonitorState(started_at=T0)
    state.on_job(job("j0", 0), deleted=False, now=T0)
    state.on_job(job("j1", 1), deleted=False, now=T0)
    lost = {
        "terminated": {
            "exitCode": 137,
            "reason": "ContainerStatusUnknown",
            "message": "The container could not be located when the pod was terminated",
            "finishedAt": stamp(T0 + 40),
        }
    }
    killed = {"terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": stamp(T0 + 45)}}
    for uid, index, state_now in (("a", 0, lost), ("b", 0, lost), ("c", 1, killed)):
        failed = pod(uid, index, phase="Failed")
        failed["status"]["containerStatuses"][0]["state"] = state_now
        state.on_pod(failed, deleted=False, now=T0 + 50)
    kinds = {f.slice: f.kind.value for f in state.slice_failures("js-1")}
    assert kinds == {0: "lost_host", 1: "trainer_error"}
