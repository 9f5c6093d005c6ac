"""benchmarks/checkpoint_period_replan.py: a replan shortens the period from the failure it follows, at the restart's
downtime; the rule replans a night that turns stormy and leaves a calm one alone; the command prints its table."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from benchmarks.checkpoint_period_auto import Night, simulate_night
from benchmarks.checkpoint_period_replan import main, replanner


def night(failures: Sequence[float] = ()) -> Night:
    return Night(failures=lambda: iter(failures), step_seconds=1.0, save_seconds=10.0, recovery_seconds=60.0)


def test_a_replan_shortens_the_period_after_the_failure_at_the_restarts_cost() -> None:
    plain = simulate_night(100, night([150.0]), steps=1000)
    never = simulate_night(100, night([150.0]), steps=1000, replan=lambda *_: None, restart_seconds=30.0)
    assert never == plain and plain.replans == 0
    # The failure at 150 s loses 40 s of steps (the second segment starts at 110 s); the 900 steps left then go in
    # segments of 50 (18 saves, not 9), and the restart adds its 30 s.
    seen: list[tuple[int, int, float, int]] = []

    def halve(period: int, failures: int, seconds: float, left: int) -> int:
        seen.append((period, failures, seconds, left))
        return period // 2

    replanned = simulate_night(100, night([150.0]), steps=1000, replan=halve, restart_seconds=30.0)
    assert seen == [(100, 1, 150.0, 900)]
    assert (replanned.period, replanned.failures, replanned.replans) == (100, 1, 1)
    assert math.isclose(replanned.seconds, 150 + 60 + 30 + 900 + 18 * 10.0)


def test_the_rule_replans_a_stormy_night_and_leaves_a_calm_one_alone() -> None:
    planned = night()
    rule = replanner(planned, 36_000.0, factor=3.0, restart_seconds=300.0)  # planned: a failure every 10 h
    planned_period = round(math.sqrt(2 * 10.0 * 36_000.0))  # Young/Daly's for that plan: 849 steps of 1 s
    # Ten failures in the first half hour, 4 hours of steps left: the posterior's period is under a third of the
    # planned one, and the rest of the night repays the restart.
    shorter = rule(planned_period, 10, 1800.0, 14_400)
    assert shorter is not None and shorter * 3 <= planned_period
    assert rule(planned_period, 1, 7200.0, 14_400) is None  # one failure in 2 hours: not far from the plan
    assert rule(planned_period, 10, 1800.0, 100) is None  # too little left to repay a restart
    assert replanner(planned, None, factor=3.0, restart_seconds=300.0)(1000, 5, 600.0, 14_400) is None  # no plan


def test_the_command_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--seeds", "2", "--nights", "6", "--grid", "8", "--schedules", "calm,bursts", "--restart", "200"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "seeds 1-2, 6 nights, a restart 200 s, replanned when 3x shorter" in out
    assert "| bursts |" in out and "| calm |" in out
