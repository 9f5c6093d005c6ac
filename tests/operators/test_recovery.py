"""Recovery accounting: log lines folded into phases, steps lost, chip time and cost, goodput."""

from __future__ import annotations

import json
from typing import Any

import pytest

from elastic_training.operators.recovery import CostModel, Incarnation, LogDigest, Recovery, recovery_report, run_report
from elastic_training.operators.run_report import escalations_of
from tests.support.recovery_logs import (
    absl,
    one_recovery_log,
    queued_then_preempted,
    recovery_lines,
    steps,
    trained_then_preempted,
)


def test_fold_one_recovery() -> None:
    digest = LogDigest().feed_all(one_recovery_log())
    assert digest.latest_step == 99
    assert digest.steps_executed == 30 + 79
    [recovery] = digest.recoveries
    assert recovery == Recovery(
        detected_at=40.0,
        failed_step=29,
        slices_ready_at=42.0,
        slices=3,
        restored_step=20,
        restored_at=43.0,
        first_step_at=45.0,
    )
    assert recovery.steps_lost == 9
    assert recovery.phases() == {"wait_for_slices": 2.0, "restore": 1.0, "first_step": 2.0, "total": 5.0}
    assert digest.open_recovery is None


def test_a_checkpoint_save_is_progress_a_silent_trainer_is_not() -> None:
    """Found by the chaos matrix on GCS: saves that wait 35 s for the one before used to look like a stall."""
    digest = LogDigest().feed_all(steps(0, 50, 1.0))  # step 49 at t=50
    assert digest.progress_at == 50.0
    digest.feed(85.0, absl("Started an asynchronous checkpoint save for step 49"))
    assert digest.progress_at == 85.0 and digest.latest_step_at == 50.0
    digest.feed(120.0, absl("Saved a checkpoint at step 49."))
    assert digest.progress_at == 120.0
    digest.feed(130.0, absl("Waiting for 2 slices. Poll interval: 0.5, Timeout: 300.0"))
    assert digest.progress_at == 120.0


def test_a_failure_that_interrupted_a_save_is_told_by_the_step_restored() -> None:
    """A save of step 30 started, then the failure: restored to 20, the save never committed (it interrupted it);
    restored to 30, the save had committed before the failure (it did not)."""

    def fold(restored: int) -> Recovery:
        lines = [
            *steps(0, 31, 1.0),
            (32.0, absl("Started an asynchronous checkpoint save for step 30")),
            *steps(31, 35, 33.0),
            *recovery_lines(40.0, restored=restored),
            *steps(restored + 1, restored + 5, 45.0),
        ]
        [recovery] = LogDigest().feed_all(lines).recoveries
        return recovery

    interrupted, committed = fold(20), fold(30)
    assert (interrupted.saving_step, interrupted.interrupted_save) == (30, True)
    assert (committed.saving_step, committed.interrupted_save) == (30, False)
    entry = recovery_report(interrupted, mean_step_seconds=1.0, costs=CostModel(chips=4)).to_json()
    assert entry["interrupted_save"] is True
    # No async save logged before the failure (synchronous saves log only their end): not known, not "no".
    [before_any] = LogDigest().feed_all(one_recovery_log()).recoveries
    assert before_any.saving_step is None and before_any.interrupted_save is None
    synchronous = [*steps(0, 31, 1.0), (32.0, absl("Saved a checkpoint at step 30.")), *recovery_lines(40.0, 20)]
    [recovery] = LogDigest().feed_all([*synchronous, *steps(21, 25, 45.0)]).recoveries
    assert recovery.interrupted_save is None


def test_a_save_lost_to_one_failure_is_not_lost_again_by_the_next() -> None:
    """Save 30 interrupted, restored to 20; a second failure at step 25, before any new save, interrupted nothing:
    the restore forgets the save begun before it (a storm of failures is not a storm of saves)."""
    lines = [
        *steps(0, 31, 1.0),
        (32.0, absl("Started an asynchronous checkpoint save for step 30")),
        *recovery_lines(40.0, restored=20),
        *steps(21, 26, 45.0),
        *recovery_lines(60.0, restored=20),
        *steps(21, 25, 65.0),
    ]
    first, second = LogDigest().feed_all(lines).recoveries
    assert (first.interrupted_save, second.interrupted_save) == (True, False)
    assert second.saving_step is None


def test_recovery_cost_hand_worked() -> None:
    recovery = LogDigest().feed_all(one_recovery_log()).recoveries[0]
    report = recovery_report(
        recovery, mean_step_seconds=1.0, costs=CostModel(chips=12, price_per_chip_hour=3.6)
    ).to_json()
    # 12 chips x (5 s down + 9 steps x 1 s) = 168 chip-seconds; 168 / 3600 h x 3.6 = 0.168
    assert report["chip_seconds_lost"] == 168.0
    assert report["cost"] == pytest.approx(0.168)
    assert report["steps_lost"] == 9 and report["failed_step"] == 29 and report["restored_step"] == 20


def test_recovery_without_a_checkpoint_loses_every_step() -> None:
    lines = [
        *steps(0, 5, 0.0),
        (6.0, absl("Elastic event detected")),
        (7.0, absl("No existing checkpoints found, not restoring checkpoint.")),
        *steps(0, 3, 8.0),
    ]
    [recovery] = LogDigest().feed_all(lines).recoveries
    assert recovery.restored_step is None and recovery.steps_lost == 5 and recovery.first_step_at == 8.0


def test_recovery_in_progress_is_reported_open() -> None:
    digest = LogDigest().feed_all([*steps(0, 10, 0.0), (20.0, absl("Elastic event detected"))])
    assert digest.recoveries == [] and digest.open_recovery is not None
    assert [r.first_step_at for r in digest.all_recoveries] == [None]
    report = recovery_report(digest.all_recoveries[0], mean_step_seconds=1.0, costs=CostModel(chips=4)).to_json()
    assert report["complete"] is False and report["chip_seconds_lost"] is None


def test_a_second_event_before_the_first_step_closes_the_first() -> None:
    lines = [*steps(0, 10, 0.0), (20.0, absl("Elastic event detected")), (25.0, absl("Elastic event detected"))]
    digest = LogDigest().feed_all(lines)
    assert len(digest.recoveries) == 1 and digest.open_recovery is not None


def test_spent_attempts_and_stop_are_noted() -> None:
    digest = LogDigest().feed_all(
        [
            (1.0, absl("ElasticRuntimeError: Elastic attempt 10 failed.")),
            (2.0, absl("Training stopped: Job received termination signal (SIGTERM).")),
        ]
    )
    assert digest.attempts_spent and digest.stopped == "Job received termination signal (SIGTERM)."
    assert digest.recoveries == []  # "Elastic attempt N failed." is not a new attempt


def test_unrelated_and_hostile_lines_are_ignored() -> None:
    digest = LogDigest().feed_all([(1.0, "completed step: x"), (2.0, "\x00" * 10000), (3.0, "restoring from nowhere")])
    assert digest == LogDigest()


def test_digest_round_trips_through_json() -> None:
    digest = LogDigest().feed_all([*one_recovery_log()[:40], (41.0, absl("Elastic event detected"))])
    again = LogDigest.from_json(json.loads(json.dumps(digest.to_json())))
    assert again == digest


def test_run_report_with_an_escalation() -> None:
    first = LogDigest().feed_all(one_recovery_log()[:40])  # steps 0..29, a recovery (9 lost), steps 21..25
    second = LogDigest().feed_all(steps(20, 100, 200.0))
    report = run_report(
        incarnations=[Incarnation("run-a", 4, 0, first), Incarnation("run-a-r1", 0, 0, second)],
        escalations=escalations_of([{"reason": "slice_restart_budget_spent", "at": 100.0, "steps_lost": 9}]),
        namespace="default",
        run_directory="/data/run-a",
        target_step=99,
        final_step=99,
        wall_seconds=300.0,
        costs=CostModel(chips=8, price_per_chip_hour=1.0),
        full_restart_seconds_lost=20.0,
    ).to_json()
    assert report["jobset_name"] == "run-a-r1" and report["jobsets"] == ["run-a", "run-a-r1"]
    assert report["slice_restarts"] == 4 and report["full_restarts"] == 1
    assert report["in_process_recoveries"] == 1
    assert report["final_step"] == 99 and report["target_step"] == 99
    # productive: (35 - 9 redone) + 80 steps x 1 s, minus 9 steps lost to the escalation = 97 s over 300 s
    assert report["goodput"] == pytest.approx(97 / 300, abs=1e-4)
    assert report["steps_lost"] == 9 + 9
    for key in ("escalations", "recoveries", "wall_seconds", "jobset_restarts", "namespace", "run_directory"):
        assert key in report
    json.dumps(report)


def test_a_recreation_that_dropped_the_node_pool_avoidance_is_no_full_restart() -> None:
    relaxed = {"reason": "node_pool_avoidance_relaxed", "at": 10.0, "steps_lost": 0, "relaxation": True}
    report = run_report(
        incarnations=[
            Incarnation("run-a", 0, 0, LogDigest()),
            Incarnation("run-a-r1", 0, 0, LogDigest().feed_all(steps(0, 100, 20.0))),
        ],
        escalations=escalations_of([relaxed]),
        namespace="default",
        run_directory="/data/run-a",
        target_step=99,
        final_step=99,
        wall_seconds=200.0,
        costs=CostModel(chips=8, price_per_chip_hour=1.0),
    ).to_json()
    assert report["full_restarts"] == 0 and report["escalations"][0]["relaxation"] is True
    assert report["jobsets"] == ["run-a", "run-a-r1"]


def test_a_scale_up_is_a_recovery_in_the_report() -> None:
    # elastic_min_slice_count let the run go on with 2 of 3 slices; the third came back after the save at step 40.
    log = [
        (0.0, absl("No existing checkpoints found, not restoring checkpoint.")),
        *steps(0, 41, 1.0),  # steps 0..40 at t=1..41
        (42.0, absl("Scale up requested.")),
        (42.5, absl("Elastic attempt 3")),
        (43.0, absl("Waiting for 3 slices. Poll interval: 10, Timeout: 300")),
        (44.0, absl("Sufficient slices active: 3 >= 3. Active indices: [0, 1, 2]")),
        (45.0, absl("restoring from this run's directory step 40")),
        *steps(41, 43, 47.0),
        # The local trainer's summary of the recovery, logged once its first step is done: its error repeats the
        # event's words, and is no second scale-up (ci27: a scale-up counted twice, the second never complete).
        (48.5, absl('Recovery record: {"error": "Scale up requested.", "kind": "scale_up", "step_at_failure": 40}')),
        *steps(43, 60, 49.0),
    ]
    digest = LogDigest().feed_all(log)
    [recovery] = digest.recoveries
    assert (recovery.kind, recovery.failed_step, recovery.restored_step, recovery.steps_lost) == ("scale_up", 40, 40, 0)
    assert (recovery.slices, recovery.slices_ready_at, recovery.first_step_at) == (3, 44.0, 47.0)
    report = run_report(
        incarnations=[Incarnation("run", 0, 0, digest)],
        escalations=[],
        namespace="default",
        run_directory="/r",
        target_step=59,
        final_step=59,
        wall_seconds=70.0,
        costs=CostModel(chips=8),
    ).to_json()
    assert report["in_process_recoveries"] == 1 and report["scale_up_recoveries"] == 1
    assert report["recoveries"][0]["kind"] == "scale_up" and report["recoveries"][0]["chip_seconds_lost"] == 40.0


def test_a_preemption_is_counted_apart_with_its_steps_lost_and_queue_time_apart_from_badput() -> None:
    digest = queued_then_preempted()
    report = run_report(
        incarnations=[Incarnation("run", 0, 0, digest)],
        escalations=[],
        namespace="default",
        run_directory="/r",
        target_step=59,
        final_step=59,
        wall_seconds=420.0,
        costs=CostModel(chips=8),
        ended_at=420.0,
    ).to_json()
    assert report["in_process_recoveries"] == 0 and report["full_restarts"] == 0
    [preemption] = report["preemptions"]
    assert report["preemption_count"] == 1
    assert preemption["at"] == 140.0 and preemption["readmitted_at"] == 340.0 and preemption["queued_seconds"] == 200
    assert (preemption["step"], preemption["restored_step"], preemption["steps_lost"]) == (29, 20, 9)
    assert preemption["reason"].startswith("Preempted:")
    assert report["steps_lost"] == 9
    assert report["queued_seconds"] == 300.0  # 100 s before the start, 200 s preempted
    assert report["admission_to_first_step_seconds"] == 10.0  # admitted at 100, first step at 110
    # Steps 110..139 and 360..398: the preemption's 200 s inside the span is not training time.
    assert report["training_seconds"] == pytest.approx(398.0 - 110.0 - 200.0)
    assert report["tail_seconds"] == pytest.approx(420.0 - 398.0)
    assert report["queue_spans"] == [[0.0, 100.0], [140.0, 340.0]]
    # 60 productive steps of 1 s (69 run, 9 lost): over the 120 s the run held its chips, apart from the queue.
    assert report["goodput"] == pytest.approx(60 / 120, abs=1e-4)
    assert report["goodput_with_queue"] == pytest.approx(60 / 420, abs=1e-4)


def _preempted_report(wall: float, ended_at: float, released_at: float | None) -> dict[str, Any]:
    return run_report(
        incarnations=[Incarnation("run", 0, 0, queued_then_preempted())],
        escalations=[],
        namespace="default",
        run_directory="/r",
        target_step=59,
        final_step=59,
        wall_seconds=wall,
        costs=CostModel(chips=8),
        ended_at=ended_at,
        released_at=released_at,
    ).to_json()


def test_airflow_resuming_the_task_after_the_jobset_ended_holds_no_capacity() -> None:
    """The JobSet completed at 402 (its last step at 398); the deferred task resumed and reported at 430. The
    28 s after 402 are the trigger, the scheduler and a worker: the run's wall time, tail and goodput end at 402
    and the resume is said apart (the nightly run on the real scheduler read a 15.4 s tail, 14 s of it this)."""
    report = _preempted_report(430.0, 430.0, 402.0)
    assert report["wall_seconds"] == 402.0 and report["resume_seconds"] == 28.0
    assert report["tail_seconds"] == pytest.approx(402.0 - 398.0)
    assert report["goodput"] == pytest.approx(60 / (402 - 300), abs=1e-4)
    assert report["goodput_with_queue"] == pytest.approx(60 / 402, abs=1e-4)
    # Kubernetes stamps whole seconds: a completion stamped before the last step seen ends there, not earlier.
    truncated = _preempted_report(430.0, 430.0, 397.0)
    assert truncated["tail_seconds"] == 0.0 and truncated["resume_seconds"] == 32.0
    # A stamp after the report (clock skew) leaves nothing to resume; an unknown end changes nothing.
    skewed = _preempted_report(430.0, 430.0, 435.0)
    assert skewed["resume_seconds"] == 0.0 and skewed["wall_seconds"] == 430.0
    # A run with no step seen: the JobSet's end, truncated, is never before the run's start (430 - 430 = 0 here).
    stepless = run_report(
        incarnations=[Incarnation("run", 0, 0, LogDigest())],
        escalations=[],
        namespace="default",
        run_directory="/r",
        target_step=59,
        final_step=None,
        wall_seconds=0.6,
        costs=CostModel(chips=8),
        ended_at=1000.5,
        released_at=999.0,
    ).to_json()
    assert stepless["wall_seconds"] == 0.0 and stepless["resume_seconds"] == 0.6
    unknown = _preempted_report(430.0, 430.0, None)
    assert unknown["resume_seconds"] is None and unknown["tail_seconds"] == pytest.approx(430.0 - 398.0)


def test_a_preemption_after_the_final_commit_resumes_there_with_no_step_lost() -> None:
    """Kueue preempts the run after its final step (29) was committed; admitted again, MaxText finds that
    checkpoint and refuses to train before any restore. Nothing is run again: the preemption's steps lost are 0,
    not unknown, and it resumed at step 29 (chaos preempt run 27 on Kubernetes 1.36.3 read ``None``)."""
    digest = trained_then_preempted()
    refusal = "RuntimeError: Requested training up to step 30, but a checkpoint already exists at step 29 (which …"
    digest.feed_all([(345.0, refusal)])
    [preemption] = [r for r in digest.all_recoveries if r.kind == "preemption"]
    assert (preemption.failed_step, preemption.restored_step, preemption.steps_lost) == (29, 29, 0)
    assert preemption.restored_at == 345.0 and not preemption.complete  # no first step follows a refusal
    assert digest.already_at_target == [30, 29] and digest.restores == 1  # the first start's: none after it
    # A refusal with no preemption open (a rerun of a finished run) touches no recovery.
    rerun = LogDigest().feed_all([(1.0, refusal)])
    assert rerun.already_at_target == [30, 29] and rerun.all_recoveries == []


def test_a_report_without_kueue_keeps_its_old_keys_and_meaning() -> None:
    digest = LogDigest().feed_all(one_recovery_log())
    report = run_report(
        incarnations=[Incarnation("run", 1, 0, digest)],
        escalations=[],
        namespace="default",
        run_directory="/r",
        target_step=99,
        final_step=99,
        wall_seconds=200.0,
        costs=CostModel(chips=8),
    ).to_json()
    assert report["queued_seconds"] == 0.0 and report["preemptions"] == []
    assert report["goodput"] == report["goodput_with_queue"]
    assert report["in_process_recoveries"] == 1 and report["recoveries"][0]["kind"] == "slice_down"


def test_queue_spans_round_trip() -> None:
    digest = queued_then_preempted()
    assert LogDigest.from_json(json.loads(json.dumps(digest.to_json()))) == digest


def test_maxtexts_two_refusals_to_train_are_kept() -> None:
    """MaxText 0.2.5's lines, word for word (tests/local/workloads/test_maxtext_contract.py holds them to it)."""
    done = LogDigest().feed_all(
        [
            (1.0, "Traceback (most recent call last):"),
            (
                2.0,
                "RuntimeError: Requested training up to step 30, but a checkpoint already exists at step 29 "
                "(which means 30 steps have been completed). Did you mean to continue training past step 30 …",
            ),
        ]
    )
    assert done.already_at_target == [30, 29] and done.config_error is None
    refused = LogDigest().feed_all(
        [(1.0, "E1201 10:00:00.1 7 pyconfig.py:393] MAXTEXT CONFIG ERROR: 'stepz' not in 'run_name', 'model_name'.")]
    )
    assert refused.config_error == "'stepz' not in 'run_name', 'model_name'." and refused.already_at_target is None
    assert LogDigest.from_json(done.to_json()).already_at_target == [30, 29]


@pytest.mark.parametrize("event_read_first", [False, True], ids=["suspension-seen-first", "event-read-first"])
def test_the_old_trainers_elastic_event_under_a_preemption_is_the_preemption_not_a_recovery(
    event_read_first: bool,
) -> None:
    """Kueue deletes the worker pods of a preempted run: its trainer, in its termination grace, may log an elastic
    event (at 141, after the suspension at 140), read before or after the JobSet is seen suspended, or even after the
    admission again (a loaded run folded it as an in-process recovery that took the preemption's restore)."""
    digest = LogDigest()
    digest.queued(0.0, preempted=False)
    digest.admitted(100.0)
    digest.feed_all([(105.0, absl("No existing checkpoints found, not restoring checkpoint.")), *steps(0, 30, 110.0)])
    event = (141.0, absl("Elastic event detected. Traceback (most recent call last):"))
    if event_read_first:
        digest.feed(*event)
    digest.queued(140.0, preempted=True, reason="Preempted: Preempted to accommodate a workload")
    digest.admitted(340.0)
    if not event_read_first:
        digest.feed(*event)  # read late: after the admission again, before the new trainer's restore
    digest.feed_all(
        [
            (345.0, absl("Sufficient slices active: 2 >= 2. Active indices: [0, 1]")),
            (350.0, absl("restoring from this run's directory step 20")),
            *steps(21, 60, 360.0),
        ]
    )
    assert [r.kind for r in digest.all_recoveries] == ["preemption"]
    [preemption] = digest.all_recoveries
    assert (preemption.detected_at, preemption.slices_ready_at, preemption.restored_at) == (140.0, 340.0, 350.0)
    assert (preemption.failed_step, preemption.restored_step, preemption.complete) == (29, 20, True)


def test_a_slice_lost_before_a_preemption_stays_a_recovery_of_its_own() -> None:
    digest = LogDigest()
    digest.feed_all([(0.0, absl("No existing checkpoints found, not restoring checkpoint.")), *steps(0, 30, 1.0)])
    digest.feed(35.0, absl("Elastic event detected. Traceback (most recent call last):"))
    digest.queued(40.0, preempted=True)
    assert [r.kind for r in digest.all_recoveries] == ["slice_down", "preemption"]


def test_what_kueue_said_of_each_wait_is_kept_once_per_wait() -> None:
    """The same QuotaReserved=False words in two waits are two notes; said again within one wait, one."""
    digest = LogDigest()
    quota = "Pending: couldn't assign flavors to pod set worker: insufficient unused quota"
    digest.note_queue(100.0, quota)  # read before the JobSet's suspension opened the wait
    digest.queued(99.0, preempted=False)
    digest.note_queue(101.0, quota)
    digest.note_queue(102.0, f"{quota}, 16 more needed")
    digest.admitted(150.0)
    digest.note_queue(160.0, f"{quota}, 16 more needed")  # the next wait's, though the same words
    digest.queued(159.0, preempted=True)
    digest.note_queue(161.0, f"{quota}, 16 more needed")
    digest.note_queue(162.0, "")
    assert digest.queue_notes == [
        [100.0, quota],
        [102.0, f"{quota}, 16 more needed"],
        [160.0, f"{quota}, 16 more needed"],
    ]
    assert LogDigest.from_json(digest.to_json()).queue_notes == digest.queue_notes


def test_each_provisioning_keeps_its_own_outcome() -> None:
    digest = LogDigest()
    ready = "admission check dws-prov Ready: Capacity is found in the cluster"
    digest.provisioning(10.0)
    digest.note_provisioning(20.0, ready)
    digest.note_provisioning(21.0, ready)
    digest.provisioned(22.0)
    digest.provisioning(50.0)
    digest.note_provisioning(60.0, ready)
    assert digest.provisioning_notes == [[20.0, ready], [60.0, ready]]
