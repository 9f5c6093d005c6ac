"""The chaos harness: seeded schedules are reproducible, and a short matrix keeps the run's promises
(never two JobSets at once, no committed step lost beyond a period, no success without a committed final step)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.chaos import REPO, markdown
from benchmarks.chaos_schedule import FREEZE_TRAINER, KILL_TASK, SLICE_FAULTS, Fault, Schedule, schedule, schedules


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
@pytest.mark.timeout(1800)  # two full runs and their Airflow start-ups on a loaded box
def test_short_matrix_keeps_the_promises(tmp_path: Path) -> None:
    """Two seeded runs through Airflow on the local cluster: run 1 of seed 1 (a slice SIGKILLed, later
    force-deleted) and run 12 (a slice deleted, the task SIGKILLed mid-watch and run again, a 500 burst)."""
    out = tmp_path / "chaos"
    finished = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.chaos",
            "--seed",
            "1",
            "--only",
            "1,12",
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
    assert [r["index"] for r in records] == [1, 12], finished.stdout[-3000:] + finished.stderr[-3000:]
    for record in records:
        assert record["outcome"] != "not run", record
        assert record["max_coexisting_jobsets"] == 1, record
        assert record["steps_lost_beyond_period"] == 0, record
        assert not record["false_success"], record
        assert record["unwarranted_escalations"] == 0, record
    assert "| runs |" in markdown(records, "test", 1)
