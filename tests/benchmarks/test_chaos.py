"""The chaos harness: seeded schedules are reproducible, and a short matrix keeps the run's promises
(never two JobSets at once, no committed step lost beyond a period, no success without a committed final step)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks.chaos import REPO, Fired, RunFiles, RunWatch, is_false_failure, judge, markdown
from benchmarks.chaos_schedule import (
    FREEZE_TRAINER,
    GCS_BURST_DELAY_SEEN_SECONDS,
    GCS_BURST_MAX,
    GCS_ERRORS,
    GCS_OUTAGE_SECONDS,
    KILL_TASK,
    SLICE_FAULTS,
    Fault,
    Schedule,
    schedule,
    schedules,
)


def test_one_seed_gives_one_schedule() -> None:
    assert schedules(7, 30) == schedules(7, 30)
    assert [s.to_json() for s in schedules(7, 30)] == [s.to_json() for s in schedules(7, 30)]
    assert schedules(7, 30) != schedules(8, 30)
    assert schedule(7, 3) == schedules(7, 5)[3]  # a run's schedule does not depend on how many runs there are


def test_schedules_stay_inside_the_run() -> None:
    for plan in schedules(1, 200):
        assert plan.checkpoint_period == 10 and 40 <= plan.steps <= 60 and plan.num_slices in (2, 3)
        for fault in plan.faults:
            assert 0 < fault.step < plan.target_step
            assert all(0 <= s < plan.num_slices for s in fault.slices)
        if plan.kill_during_save_step is not None:
            assert plan.kill_during_save_step % plan.checkpoint_period == 0
            assert plan.kill_during_save_step < plan.target_step


def test_expected_full_restarts_follow_the_budgets() -> None:
    def plan(*faults: Fault, kill_in_save: int | None = None, full: int = 1) -> Schedule:
        return Schedule(1, 0, 60, 3, 2, full, kill_in_save, tuple(faults))

    kill = [Fault(s, SLICE_FAULTS[0], (0,)) for s in (10, 12, 14, 16)]
    assert plan(*kill[:2]).expected().escalations == ()
    assert plan(*kill[:3]).expected().escalations == ("slice_restart_budget_spent",)
    # A full restart starts the next incarnation with its whole slice budget.
    assert plan(Fault(5, FREEZE_TRAINER), *kill[:2]).expected().escalations == ("stalled",)
    assert plan(*kill[:2], Fault(15, SLICE_FAULTS[1], (1, 2))).expected().escalations == ("slice_restart_budget_spent",)
    twice = plan(Fault(5, FREEZE_TRAINER), Fault(40, KILL_TASK), kill_in_save=20)
    assert twice.expected().escalations == ("stalled", "jobset_failed") and not twice.expected().survivable


def _shape(plan: Schedule) -> tuple[object, ...]:
    return (plan.steps, plan.num_slices, plan.max_slice_restarts, plan.max_full_restarts, plan.kill_during_save_step)


def test_gcs_faults_come_on_top_of_the_same_schedules() -> None:
    """`--gcs` draws its faults last: every other fault of a run stays, so seed 1's published table stands."""
    drawn = 0
    for local, on_gcs in zip(schedules(1, 200), schedules(1, 200, gcs=True), strict=True):
        assert _shape(local) == _shape(on_gcs) and on_gcs.gcs and not local.gcs
        assert [f for f in on_gcs.faults if f.kind != GCS_ERRORS] == list(local.faults)
        assert on_gcs.run_name == local.run_name.replace("chaos-", "chaos-gcs-")
        for fault in (f for f in on_gcs.faults if f.kind == GCS_ERRORS):
            drawn += 1
            assert 0 < fault.step < on_gcs.target_step
            if fault.count:
                assert 1 <= fault.count <= GCS_BURST_MAX and fault.seconds == 0
            else:
                assert GCS_OUTAGE_SECONDS[0] <= fault.seconds <= GCS_OUTAGE_SECONDS[1]
    assert 100 < drawn < 200


def test_a_gcs_outage_may_cost_one_full_restart_a_burst_one_only_under_a_short_stall_timeout() -> None:
    def plan(*faults: Fault, full: int = 1, stall: int = 60) -> Schedule:
        return Schedule(1, 0, 60, 3, 2, full, None, tuple(faults), gcs=True, stall_timeout_seconds=stall)

    # The save a burst meets waits out the clients' backoff: 65 s was seen, past the schedule's 60 s stall timeout.
    burst = plan(Fault(20, GCS_ERRORS, count=GCS_BURST_MAX)).expected()
    assert burst.escalations == () and burst.possible == ("stalled",) and burst.survivable
    assert not plan(Fault(20, GCS_ERRORS, count=2), full=0).expected().survivable
    # Under a stall timeout longer than any delay seen, a burst costs nothing.
    assert GCS_BURST_DELAY_SEEN_SECONDS < 180
    calm = plan(Fault(20, GCS_ERRORS, count=GCS_BURST_MAX), full=0, stall=180).expected()
    assert calm.possible == () and calm.survivable
    outage = plan(Fault(20, GCS_ERRORS, seconds=40.0)).expected()
    assert outage.escalations == () and outage.possible == ("jobset_failed",) and outage.survivable
    # The budget must cover the worst case for a failure to count as false.
    assert not plan(Fault(5, FREEZE_TRAINER), Fault(20, GCS_ERRORS, seconds=40.0)).expected().survivable
    assert plan(Fault(20, GCS_ERRORS, seconds=40.0)).describe() == "@20 GCS 503 for 40s"
    assert plan(Fault(20, GCS_ERRORS, count=3)).describe() == "@20 3x GCS 503"


def test_a_full_restart_is_warranted_by_an_outage_that_hit_its_jobset(tmp_path: Path) -> None:
    plan = Schedule(1, 0, 60, 3, 2, 1, None, (Fault(20, GCS_ERRORS, seconds=40.0),), gcs=True)
    watch = RunWatch(None, plan, RunFiles(str(tmp_path)), lambda: None)
    watch.fired = [Fired(plan.faults[0], at=0.0, at_step=20, jobset="js-0")]
    failed = judge(plan, watch, {"jobset_name": "js-0", "reason": "jobset_failed", "at": 1.0})
    assert failed["warranted"] and failed["outage"] and "GCS down for 40 s" in failed["because"]
    # A stall needs the gap the harness saw, outage or not.
    watch.progress = {"js-0": [(0.0, 19), (10.0, 20)]}
    stalled = judge(plan, watch, {"jobset_name": "js-0", "reason": "stalled", "at": 75.0})
    assert stalled["warranted"] and stalled["outage"] and "no step for 65 s" in stalled["because"]
    just = judge(plan, watch, {"jobset_name": "js-0", "reason": "stalled", "at": 69.5})  # a 59.5 s gap
    assert just["warranted"]
    early = judge(plan, watch, {"jobset_name": "js-0", "reason": "stalled", "at": 40.0})
    assert not early["warranted"]
    assert not judge(plan, watch, {"jobset_name": "js-r1", "reason": "jobset_failed", "at": 1.0})["warranted"]
    # A kill in a save explains only the failure of the JobSet it happened in.
    killed = Schedule(1, 0, 60, 3, 2, 2, 30, (), gcs=True)
    watch = RunWatch(None, killed, RunFiles(str(tmp_path)), lambda: None)
    watch.killed_in_save_of = "js-r1"
    assert judge(killed, watch, {"jobset_name": "js-r1", "reason": "jobset_failed", "at": 1.0})["warranted"]
    assert not judge(killed, watch, {"jobset_name": "js-0", "reason": "jobset_failed", "at": 1.0})["warranted"]
    # The trainer's own log says which JobSet it was killed in, whatever the harness saw of the marker file
    # (a whole full restart can take 0.1 s, quicker than its look).
    logs = tmp_path / "logs"
    (logs / "uid-head-0" / "jax-tpu").mkdir(parents=True)
    (logs / "uid-head-0" / "jax-tpu" / "0.log").write_text(
        "W1201 checkpointing.py:78] Fault injection (LOCAL_FAULT_KILL_DURING_SAVE_STEP): killing the process "
        "before the commit marker of .../checkpoints/30\n"
    )
    watch = RunWatch(
        SimpleNamespace(agent=SimpleNamespace(log_store=SimpleNamespace(root=logs))),
        killed,
        RunFiles(str(tmp_path)),
        lambda: None,
    )
    watch.head_pods = {"uid-head-0": "js-0", "uid-head-1": "js-r1"}
    watch.killed_in_save_of = "js-r1"
    assert judge(killed, watch, {"jobset_name": "js-0", "reason": "jobset_failed", "at": 1.0})["warranted"]
    assert not judge(killed, watch, {"jobset_name": "js-r1", "reason": "jobset_failed", "at": 1.0})["warranted"]
    burst = Schedule(1, 0, 60, 3, 2, 1, None, (Fault(20, GCS_ERRORS, count=5),), gcs=True)
    watch.fired = [Fired(burst.faults[0], at=0.0, at_step=20, jobset="js-0")]
    assert not judge(burst, watch, {"jobset_name": "js-0", "reason": "jobset_failed", "at": 1.0})["warranted"]
    # A burst fails no save, but it can delay one into a stall: a stall the harness saw too.
    watch.progress = {"js-0": [(0.0, 19), (10.0, 20)]}
    delayed = judge(burst, watch, {"jobset_name": "js-0", "reason": "stalled", "at": 75.0})
    assert delayed["warranted"] and delayed["outage"] and "5 GCS 503s in a row delayed a save" in delayed["because"]
    assert not judge(burst, watch, {"jobset_name": "js-0", "reason": "stalled", "at": 40.0})["warranted"]
    # A frozen trainer explains its own stall: the burst beside it is not named.
    frozen = Schedule(1, 0, 60, 3, 2, 1, None, (Fault(19, FREEZE_TRAINER), Fault(20, GCS_ERRORS, count=5)), gcs=True)
    watch.fired = [Fired(f, at=0.0, at_step=f.step, jobset="js-0") for f in frozen.faults]
    stopped = judge(frozen, watch, {"jobset_name": "js-0", "reason": "stalled", "at": 75.0})
    assert stopped["because"] == "trainer frozen (SIGSTOP)" and not stopped["outage"]


def test_dry_run_prints_the_same_schedules_twice() -> None:
    def dry() -> str:
        return subprocess.run(
            [sys.executable, "-m", "benchmarks.chaos", "--runs", "4", "--seed", "3", "--dry-run"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout

    first = dry()
    assert first == dry()
    plans = [json.loads(line) for line in first.splitlines() if line.startswith("{")]
    assert [p["index"] for p in plans] == [0, 1, 2, 3] and all(p["seed"] == 3 for p in plans)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a full run and its Airflow start-up on a loaded box
def test_short_matrix_keeps_the_promises(tmp_path: Path) -> None:
    """One seeded run of seed 1 through Airflow on the local cluster, writing to gs:// (the GCS emulator): run 38
    (throttled API calls, a slice's workers SIGKILLed, a burst of GCS 503s, then slow API calls: each of the
    harness's kinds of fault but the outage) keeps each of the matrix's promises once, recovered in process.

    Run 7 (a GCS outage past gcsfs's retries, so a save fails and a full restart follows) was this test's until
    stop 50, the suite's longest at 128 s (the outage's 40 s, then the restart). Its parts are tested apart: the
    operator reading checkpoints through an outage (tests/operators/test_storage_outage.py), a full restart
    resuming from the newest committed step (test_elastic_operator.py), the judge's reading of an outage
    (test_a_failure_an_outage_explains_is_not_false below); the whole of it, a trainer's save failing on the
    outage, in `make chaos GCS=1`. The task SIGKILLed mid-watch and run again (run 12's fault) is
    test_elastic_operator_rideouts.py's adoption test."""
    out = tmp_path / "chaos"
    finished = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.chaos",
            "--seed",
            "1",
            "--gcs",
            "--only",
            "38",
            "--out",
            str(out),
            "--run-timeout",
            "600",
            "--budget",
            "1200",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    records = [json.loads(line) for line in (out / "chaos.jsonl").read_text().splitlines()]
    assert [r["index"] for r in records] == [38], finished.stdout[-3000:] + finished.stderr[-3000:]
    for record in records:
        assert record["outcome"] != "not run", record
        assert record["max_coexisting_jobsets"] == 1, record
        assert record["steps_lost_beyond_period"] == 0, record
        assert not record["false_success"], record
        assert record["unwarranted_escalations"] == 0, record
        assert record["outcome"] == "success", record
    [run] = records
    assert [f["describe"] for f in run["fired"]] == [
        "@7 5x HTTP 429",
        "@15 SIGKILL slice 2",
        "@22 2x GCS 503",
        "@25 +0.20s latency",
    ], run
    assert run["final_valid_step"] == 39 and run["escalations"] == [], run
    assert (run["slice_restarts"], run["in_process_recoveries"], run["full_restarts"]) == (1, 1, 0), run
    assert "| runs |" in markdown(records, "test", 1)


def test_a_failure_an_outage_explains_is_not_false() -> None:
    """Found on the --gcs matrix (run 27): the outage's restart was the one the spent budget refused."""
    plan = Schedule(1, 27, 40, 2, 2, 1, 10, (Fault(20, GCS_ERRORS, seconds=44.0),), gcs=True)
    spent = "full-restart budget spent: max_full_restarts=1 and 1 used; the run needed another because ..."
    outage = [{"kind": GCS_ERRORS, "describe": "@20 GCS 503 for 44s", "jobset": "js-r1"}]
    killed = [{"reason": "jobset_failed", "outage": False}]
    assert not is_false_failure(plan, "failed", spent, killed, outage, ["js", "js-r1"])
    # The same failure without the outage on that JobSet: one restart was due, one was allowed.
    assert is_false_failure(plan, "failed", spent, killed, [], ["js", "js-r1"])
    assert not is_false_failure(plan, "success", "final step 39", killed, outage, ["js", "js-r1"])


def test_a_stall_a_gcs_burst_explains_is_not_a_false_failure() -> None:
    """Found on the --gcs matrix (run 14): a 5-request burst met the save of step 30 after the kill in a save had
    spent the one full restart; the trainer waited 65 s for that save, a stall, and the budget refused it."""
    plan = Schedule(1, 14, 40, 2, 2, 1, 20, (Fault(35, GCS_ERRORS, count=5),), gcs=True)
    assert plan.expected().possible == ("stalled",) and not plan.expected().survivable
    spent = (
        "full-restart budget spent: max_full_restarts=1 and 1 used; the run needed another because no training "
        "progress for 60 s (stall_timeout=60 s; last completed step 39)"
    )
    burst = [{"kind": GCS_ERRORS, "describe": "@35 5x GCS 503", "jobset": "js-r1"}]
    killed = [{"reason": "jobset_failed", "outage": False}]
    assert not is_false_failure(plan, "failed", spent, killed, burst, ["js", "js-r1"])
    # A burst explains no failed JobSet: a refused jobset_failed restart with that burst is still a false failure.
    failed = spent.split(" because ")[0] + " because the JobSet failed: ReachedMaxRestarts"
    assert is_false_failure(plan, "failed", failed, killed, burst, ["js", "js-r1"])
    # Nor a burst that hit another JobSet.
    assert is_false_failure(plan, "failed", spent, killed, [{**burst[0], "jobset": "js"}], ["js", "js-r1"])


def test_kueue_dimensions_keep_the_seeds_shape_and_carry_one_kueue_fault() -> None:
    from benchmarks.chaos_schedule import PREEMPT, QUEUE_CHIPS, QUEUE_WAIT, SLICE_CHIPS

    plain = schedules(1, 40)
    for kueue, kind in (("preempt", PREEMPT), ("queue-wait", QUEUE_WAIT)):
        plans = schedules(1, 40, kueue=kueue)
        assert plans == schedules(1, 40, kueue=kueue)  # one seed, one schedule
        for local, plan in zip(plain, plans, strict=True):
            assert _shape(plan)[:4] == _shape(local)[:4] and plan.kill_during_save_step is None
            assert [f.kind for f in plan.faults] == [kind] and plan.kueue_fault == plan.faults[0]
            assert plan.expected().escalations == () and plan.expected().survivable
            assert plan.run_name.startswith("chaos-preempt-" if kueue == "preempt" else "chaos-queue-")
            fault = plan.faults[0]
            if kind == PREEMPT:
                # The blocker never fits beside the run: Kueue must preempt it.
                assert (len(fault.slices) + plan.num_slices) * SLICE_CHIPS > QUEUE_CHIPS
                assert len(fault.slices) * SLICE_CHIPS <= QUEUE_CHIPS
                assert 3 <= fault.step <= plan.steps - 4 and 5 <= fault.seconds <= 90
            else:
                assert len(fault.slices) * SLICE_CHIPS == QUEUE_CHIPS and 10 <= fault.seconds <= 40
    with pytest.raises(ValueError, match="kueue must be one of"):
        schedule(1, 0, kueue="preemption")


def test_kueue_promises_are_judged_from_the_report_and_what_the_harness_saw() -> None:
    from benchmarks.chaos_kueue import broken_promises

    preempt = schedule(1, 0, kueue="preempt")
    notes = {"evicted": "True/Preempted", "preempted": "True/InClusterQueue"}
    kept = {
        "full_restarts": 0,
        "slice_restarts": 0,
        "in_process_recoveries": 0,
        "escalations": [],
        "preemptions": [{"restored_step": 10, "steps_lost": 2}],
        "preemption_recreations": 0,
    }
    assert broken_promises(preempt, notes, kept, "success", [{}]) == []
    assert broken_promises(preempt, notes, {**kept, "full_restarts": 1}, "success", [{}]) == ["full_restarts=1"]
    recreated = {
        **kept,
        "preemption_recreations": 1,
        "escalations": [{"reason": "jobset_completed", "preemption": True}],
    }
    assert broken_promises(preempt, notes, recreated, "success", [{}, {}]) == []
    lost = {**kept, "preemptions": [{"restored_step": 15, "steps_lost": 12}]}
    assert broken_promises(preempt, notes, lost, "success", [{}]) == [
        "restored step 15, not a checkpoint",
        "steps lost 12",
    ]
    # Preempted after the final step's commit: the run resumes at that step, which is no multiple of the period.
    final = preempt.steps - 1
    assert final % preempt.checkpoint_period != 0
    at_target = {**kept, "preemptions": [{"step": final, "restored_step": final, "steps_lost": 0}]}
    assert broken_promises(preempt, notes, at_target, "success", [{}]) == []
    unknown = {**kept, "preemptions": [{"step": final, "restored_step": None, "steps_lost": None}]}
    assert broken_promises(preempt, notes, unknown, "success", [{}]) == ["steps lost None"]

    queued = schedule(1, 0, kueue="queue-wait")
    jobset = {
        "metadata": {"creationTimestamp": "2026-12-01T10:00:00Z"},
        "status": {
            "conditions": [{"type": "Suspended", "status": "False", "lastTransitionTime": "2026-12-01T10:01:40Z"}]
        },
    }
    waited = {**kept, "preemptions": [], "queued_seconds": 100.0}
    assert broken_promises(queued, {}, waited, "success", [jobset]) == []
    assert broken_promises(queued, {}, {**waited, "queued_seconds": 90.0}, "success", [jobset]) == [
        "queued_seconds 90.0 but the JobSet waited 100 s"
    ]
    assert "admitted while the blocker held the quota" in broken_promises(
        queued, {"admitted_before_release": True}, waited, "success", [jobset]
    )


def test_the_provisioning_dimension_is_seeded_and_keeps_the_seeds_shape() -> None:
    from benchmarks.chaos_schedule import PROVISION, PROVISION_OUTCOMES, PROVISION_REVOKE

    plain, plans = schedules(1, 40), schedules(1, 40, kueue="provisioning")
    assert plans == schedules(1, 40, kueue="provisioning")
    assert {p.faults[0].outcome for p in plans} == set(PROVISION_OUTCOMES)  # 40 runs meet all three
    for local, plan in zip(plain, plans, strict=True):
        assert _shape(plan)[:4] == _shape(local)[:4] and plan.run_name.startswith("chaos-prov-")
        [fault] = plan.faults
        assert fault.kind == PROVISION and plan.kueue_fault == fault and 5 <= fault.seconds <= 90
        revoked = fault.outcome == PROVISION_REVOKE
        assert (3 <= fault.step <= plan.steps - 4) if revoked else fault.step == 0
        # A revocation is never survived (Kueue deactivates the Workload) and spends nothing.
        assert plan.expected().escalations == () and plan.expected().survivable is not revoked


def test_dry_run_lists_the_provisioning_dimension() -> None:
    finished = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.chaos",
            "--runs",
            "3",
            "--seed",
            "5",
            "--dry-run",
            "--kueue",
            "provisioning",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    plans = [json.loads(line) for line in finished.stdout.splitlines() if line.startswith("{")]
    assert [p["run_name"] for p in plans] == [f"chaos-prov-s5-r{i}" for i in range(3)]
    assert [p["faults"][0]["outcome"] for p in plans] == [
        p.faults[0].outcome for p in schedules(5, 3, kueue="provisioning")
    ]


def test_provisioning_promises_are_judged_from_the_report_and_what_the_harness_saw() -> None:
    from benchmarks.chaos_kueue import REVOKED_MESSAGE, broken_promises
    from benchmarks.chaos_schedule import PROVISION, PROVISION_DELAY, PROVISION_FAIL, PROVISION_REVOKE

    def plan(outcome: str, step: int = 0, seconds: float = 30.0) -> Schedule:
        return Schedule(
            1, 0, 40, 2, 3, 1, None, (Fault(step, PROVISION, seconds=seconds, outcome=outcome),), kueue="provisioning"
        )

    ready = [1.0, "admission check dws-prov Ready: Capacity is found in the cluster"]
    clean = {"full_restarts": 0, "slice_restarts": 0, "in_process_recoveries": 0, "escalations": []}
    delayed = {**clean, "provisioning_seconds": 31.0, "provisioning_notes": [ready]}
    assert broken_promises(plan(PROVISION_DELAY), {}, delayed, "success", [{}]) == []
    assert broken_promises(plan(PROVISION_DELAY), {}, {**delayed, "provisioning_seconds": 2.0}, "success", [{}]) == [
        "provisioning_seconds 2.0, the request took 30 s"
    ]
    retry = [0.5, "admission check dws-prov Retry: Retrying after failure: chaos: out"]
    assert (
        broken_promises(plan(PROVISION_FAIL), {}, {**delayed, "provisioning_notes": [retry, ready]}, "success", [{}])
        == []
    )
    assert broken_promises(plan(PROVISION_FAIL), {}, delayed, "success", [{}]) == [
        "the failed request's retry is not in the report"
    ]
    rejected = [9.0, f"admission check dws-prov Rejected: {REVOKED_MESSAGE}"]
    failure = (
        "Kueue will not admit the JobSet again: it was deactivated (its Workload's spec.active was set false), "
        f"...: {REVOKED_MESSAGE}"
    )
    revoked = {**clean, "provisioning_notes": [ready, rejected], "failure": failure}
    seen = {"evicted": "True/DeactivatedDueToAdmissionCheck"}
    assert broken_promises(plan(PROVISION_REVOKE, 20), seen, revoked, "failed", [{}]) == []
    # The operator ended the run on Kueue's DeactivationTarget, before Kueue wrote the eviction: the same promise kept.
    target = {"evicted": None, "deactivation_target": "True/AdmissionCheck"}
    assert broken_promises(plan(PROVISION_REVOKE, 20), target, revoked, "failed", [{}]) == []
    assert broken_promises(plan(PROVISION_REVOKE, 20), {}, revoked, "failed", [{}]) == [
        "eviction None, deactivation target None"
    ]
    # Ended by queue_timeout instead of its deactivation: the Deactivated rule missed it.
    timed_out = {**revoked, "failure": f"not admitted by Kueue within queue_timeout ...: {REVOKED_MESSAGE}"}
    assert broken_promises(plan(PROVISION_REVOKE, 20), seen, timed_out, "failed", [{}]) == [
        "the run did not end on its Workload's deactivation (queue_timeout ended it?)"
    ]
    assert broken_promises(plan(PROVISION_REVOKE, 20), seen, {**revoked, "slice_restarts": 2}, "failed", [{}, {}]) == [
        "slice_restarts=2",
        "2 JobSets",
    ]
    # A revocation fails the run by design: never a false failure (Kueue's promises above judge it), while a failed
    # delayed request with the budget unspent still is one.
    assert not is_false_failure(plan(PROVISION_REVOKE, 20), "failed", failure, [], [], ["js"])
    assert is_false_failure(plan(PROVISION_DELAY), "failed", "no report (see the log)", [], [], ["js"])


def test_the_pods_ready_dimension_repairs_one_of_the_runs_slices_past_kueues_recovery_timeout() -> None:
    from benchmarks.chaos import dag_source
    from benchmarks.chaos_kueue import pods_ready_configuration
    from benchmarks.chaos_schedule import (
        PODS_READY,
        PODS_READY_RECOVERY_TIMEOUT_SECONDS,
        PODS_READY_REPAIR_SECONDS,
        STALL_TIMEOUT_SECONDS,
    )

    plain = schedules(1, 40)
    plans = schedules(1, 40, kueue="pods-ready")
    assert plans == schedules(1, 40, kueue="pods-ready")  # one seed, one schedule
    for local, plan in zip(plain, plans, strict=True):
        assert _shape(plan)[:4] == _shape(local)[:4] and plan.kill_during_save_step is None
        [fault] = plan.faults
        assert fault.kind == PODS_READY and plan.kueue_fault == fault and plan.run_name.startswith("chaos-ready-")
        assert plan.expected().escalations == () and plan.expected().survivable
        assert 3 <= fault.step <= plan.steps - 4 and len(fault.slices) == 1 and 0 <= fault.slices[0] < plan.num_slices
        # The repair outlasts Kueue's recoveryTimeout, which is under MaxText's wait for slices (half the stall
        # timeout): Kueue evicts while the trainer still waits in process.
        assert PODS_READY_REPAIR_SECONDS[0] <= fault.seconds <= PODS_READY_REPAIR_SECONDS[1]
        assert fault.seconds > PODS_READY_RECOVERY_TIMEOUT_SECONDS
        assert PODS_READY_RECOVERY_TIMEOUT_SECONDS < STALL_TIMEOUT_SECONDS // 2
    source = dag_source(plans[0], "/tmp/runs")
    assert "queue_name='multislice-queue'" in source and "kueue_recovery_timeout=12.0" in source
    wait = pods_ready_configuration()["waitForPodsReady"]
    assert wait["recoveryTimeout"] == f"{PODS_READY_RECOVERY_TIMEOUT_SECONDS}s"


def test_pods_ready_promises_are_judged_from_the_report_and_what_the_harness_saw() -> None:
    from benchmarks.chaos_kueue import broken_promises

    plan = schedule(1, 0, kueue="pods-ready")
    notes = {"evicted": "True/PodsReadyTimeout", "eviction_causes": ["WaitForRecovery"], "repair_evicted": 4}
    kept = {
        "full_restarts": 0,
        "slice_restarts": 0,
        "in_process_recoveries": 1,  # the slice loss began one; Kueue's eviction cut it short
        "escalations": [],
        "preemptions": [{"eviction": "pods_ready_timeout", "restored_step": 10, "steps_lost": 6}],
        "preemption_count": 0,
        "pods_ready_evictions": 1,
        "preemption_recreations": 0,
    }
    assert broken_promises(plan, notes, kept, "success", [{}]) == []
    as_preemption = {**kept, "preemptions": [{"eviction": "preempted", "restored_step": 10, "steps_lost": 6}]}
    assert broken_promises(plan, notes, {**as_preemption, "preemption_count": 1}, "success", [{}]) == [
        "evictions in the report ['preempted'], pods_ready_evictions=1",
        "preemption_count=1: a PodsReady timeout is no preemption",
    ]
    spent = {**kept, "full_restarts": 1, "in_process_recoveries": 2}
    assert broken_promises(plan, notes, spent, "failed", [{}, {}]) == [
        "outcome failed",
        "full_restarts=1",
        "in_process_recoveries=2",
        "2 JobSets, 0 recreated for the eviction",
    ]
    started = {**notes, "eviction_causes": ["WaitForStart"]}
    assert broken_promises(plan, started, kept, "success", [{}]) == [
        "eviction 'True/PodsReadyTimeout', causes ['WaitForStart']"
    ]


def test_the_history_dimension_keeps_the_matrixs_faults_and_turns_both_options_on() -> None:
    from benchmarks.chaos import HISTORY_KEY, dag_source

    plain = schedules(1, 50)
    plans = schedules(1, 50, history=True)
    for local, plan in zip(plain, plans, strict=True):
        assert plan.history and not local.history
        assert (plan.faults, plan.kill_during_save_step, _shape(plan)) == (
            local.faults,
            local.kill_during_save_step,
            _shape(local),
        )
        assert plan.run_name == local.run_name.replace("chaos-", "chaos-hist-")
    source = dag_source(plans[6], "/runs")
    assert "checkpoint_period='auto'" in source
    assert f"history=History(avoid_failing_node_pools=True, failure_history_key={HISTORY_KEY!r})" in source
    assert "checkpoint_period=10" in dag_source(plain[6], "/runs") and "History(" not in dag_source(plain[6], "/runs")
    # Run 6 kills a save at step 10: under auto's period, the first save from step 10 on (it may never save 10).
    assert plans[6].kill_during_save_step == 10 and "'LOCAL_FAULT_KILL_DURING_SAVE_OR_LATER': '1'" in source
    assert "OR_LATER" not in dag_source(plain[6], "/runs") and "@10 kill in save or later" in plans[6].describe()
    with pytest.raises(ValueError, match="without Kueue"):
        schedule(1, 0, kueue="preempt", history=True)


def test_history_promises_are_judged_from_the_report_and_where_the_workers_ran() -> None:
    from benchmarks.chaos import history_broken

    plan = schedule(1, 0, history=True)  # 40 steps: a period of 1 to 20
    seen = {
        "enabled": True,
        "avoided": ["tpu-v5e-16-2"],
        "failing": ["tpu-v5e-16-2"],
        "candidates": [f"tpu-v5e-16-{i}" for i in range(4)],
        "probation": [],
        "relaxed": "",
        "reason": "avoiding tpu-v5e-16-2",
        "period": 7,
        "period_reason": "the model's optimum",
        "period_runs": 3,
        "notes": [],
        "worker_pools": {"js-0": ["tpu-v5e-16-0", "tpu-v5e-16-1"]},
    }
    assert history_broken(plan, seen, "success") == []
    on_avoided = {**seen, "worker_pools": {"js-0": ["tpu-v5e-16-0", "tpu-v5e-16-2"]}}
    assert history_broken(plan, on_avoided, "success") == ["js-0's workers ran on avoided pools ['tpu-v5e-16-2']"]
    assert history_broken(plan, {**on_avoided, "relaxed": "unschedulable for 60 s"}, "success") == []
    assert history_broken(plan, {**seen, "avoided": ["tpu-v5e-16-9"]}, "failed") == [
        "avoided pools the cluster does not list: ['tpu-v5e-16-9']"
    ]
    assert history_broken(plan, {**seen, "period": 21, "period_reason": ""}, "success") == [
        "checkpoint period 21 outside 1..20",
        "the report does not say why the period was chosen",
    ]
    assert history_broken(plan, {**seen, "enabled": False}, "success") == ["the report has no node-pool avoidance"]
    # The lane's account not let to list nodes (the real RBAC, before the lane bound the ClusterRole): no avoidance
    # was tried, which the dimension cannot count as kept.
    refused = "no node pool had a failure weight over 1 ...; RBAC forbids listing nodes, so no pool is avoided: ..."
    assert history_broken(plan, {**seen, "reason": refused}, "success") == [
        "the operators' account may not list nodes, so no avoidance was tried"
    ]
    assert history_broken(plan, {**seen, "enabled": False}, "hung") == []  # nothing reported to judge


def test_a_kill_in_a_save_auto_never_made_is_not_expected(tmp_path: Path) -> None:
    """With checkpoint_period="auto" the scheduled kill's step may not be saved: its full restart is not expected."""
    from benchmarks.chaos import evaluate

    def failed(plan: Schedule) -> dict[str, object]:
        watch = RunWatch(
            SimpleNamespace(agent=SimpleNamespace(log_store=None)), plan, RunFiles(str(tmp_path / "run")), lambda: None
        )
        report = {"checkpoint_period": 7, "failure": "full-restart budget spent", "escalations": []}
        return evaluate(
            plan,
            watch,
            {"state": "failed", "xcom": {"return_value": report}},
            hung=False,
            wall=1.0,
            run_timeout=10.0,
            run_directory=str(tmp_path / "run"),
        )

    # Seed 1's run 11: a SIGSTOP and a kill in the save of step 20, with max_full_restarts=1: over budget as
    # scheduled, within it when the kill never fired.
    plain, auto = schedule(1, 11), schedule(1, 11, history=True)
    assert plain.kill_during_save_step == 20 and not plain.expected().survivable
    record = failed(auto)
    assert record["checkpoint_period"] == 7 and record["kill_in_save_counted"] is False
    assert record["false_failure"] is True
    record = failed(plain)
    assert record["checkpoint_period"] == 10 and record["kill_in_save_counted"] is True
    assert record["false_failure"] is False
