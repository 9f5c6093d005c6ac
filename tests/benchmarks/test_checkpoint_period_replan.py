"""benchmarks/checkpoint_period_replan.py: a replan shortens the period from the failure it follows, at the restart's
downtime; the rule is operators/period_replan.py's over the night's times; the command prints its table."""

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


def test_the_nights_rule_is_the_operators_with_the_nights_times() -> None:
    planned = night()
    rule = replanner(planned, 36_000.0, factor=3.0, restart_seconds=300.0)
    assert rule(849, 10, 1800.0, 14_400) == int(math.sqrt(2 * 10.0 * 37_800.0 / 11))
    assert rule(849, 1, 7200.0, 14_400) is None
    assert replanner(planned, None, factor=3.0, restart_seconds=300.0)(849, 10, 1800.0, 14_400) is None


def test_the_command_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--seeds", "2", "--nights", "6", "--grid", "8", "--schedules", "calm,bursts", "--restart", "200"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "seeds 1-2, 6 nights, a restart 200 s, replanned when 2x shorter" in out
    assert "| bursts |" in out and "| calm |" in out
    # One of auto's settings tried from the command line (the tuning of session 65), of the field's own type.
    assert main([*argv[:-2], "--auto", "prior_failures=0.5", "--auto", "runs=20"]) == 0
    assert "| calm |" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no such setting"):
        main([*argv, "--auto", "prior=1"])
