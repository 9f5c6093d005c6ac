"""benchmarks/checkpoint_period_auto.py: the simulated night costs what it should, every policy meets the same
nights, and, in a short form of the benchmark (a few report seeds, a 21-night season from its first night, a coarser
sweep), ``auto`` pays for itself on every schedule while no constant period can, nor ``auto`` with the shipped
settings of before issue 55: the check that ``auto`` passes fails for each constant of the sweep, the best fixed
period of any one schedule included, and for those settings."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence

import pytest

from benchmarks.checkpoint_period_auto import (
    DEFAULT_PERIOD,
    SCHEDULES,
    Night,
    ScheduleResult,
    evaluate,
    grid,
    main,
    schedule_nights,
    simulate_night,
)

STEPS, NIGHTS, SEEDS = 5000, 21, range(1, 9)
PERIODS = grid(STEPS, 20)


def night(failures: Sequence[float] = (), saves: Sequence[tuple[int, float]] = ()) -> Night:
    return Night(
        failures=lambda: iter(failures),
        failing_saves=lambda: iter(saves),
        step_seconds=1.0,
        save_seconds=10.0,
        recovery_seconds=60.0,
    )


def test_a_night_costs_its_saves_and_what_each_failure_loses() -> None:
    calm = simulate_night(100, night(), steps=1000)
    assert (calm.failures, calm.seconds) == (0, 1000 + 10 * 10.0)
    # A failure in the second segment (which starts at 110 s) loses its 40 s of steps and costs the recovery.
    failed = simulate_night(100, night([150.0]), steps=1000)
    assert failed.failures == 1 and math.isclose(failed.seconds, 1100 + 40 + 60)
    # A failure during the recovery merges with it; one during a save loses the segment and the save begun.
    merged = simulate_night(100, night([150.0, 180.0]), steps=1000)
    assert merged.seconds == failed.seconds and merged.failures == 1
    in_save = simulate_night(100, night([215.0]), steps=1000)
    assert math.isclose(in_save.seconds, 1100 + 105 + 60)
    # A failing save (the third, half written) is the same as a failure at that moment.
    bad_save = simulate_night(100, night(saves=[(1, 0.5)]), steps=1000)
    assert bad_save.failures == 1 and math.isclose(bad_save.seconds, 1100 + 105 + 60)
    # The history is told which failures came while a save was written (the restore goes to an older step).
    assert (in_save.failures_in_saves, bad_save.failures_in_saves, failed.failures_in_saves) == (1, 1, 0)
    # The last segment is short (1050 steps: ten of 100, one of 50) and saved too, as MaxText saves at the end.
    assert simulate_night(100, night(), steps=1050).seconds == 1050 + 11 * 10.0


def test_the_nights_are_the_same_for_every_policy_and_seed_bound() -> None:
    first = schedule_nights("bad_pool", 3, nights=5, steps=STEPS)
    again = schedule_nights("bad_pool", 3, nights=5, steps=STEPS)
    for a, b in zip(first, again, strict=True):
        assert list(itertools.islice(a.failures(), 20)) == list(itertools.islice(b.failures(), 20))
        assert (a.step_seconds, a.save_seconds, a.waited_seconds) == (b.step_seconds, b.save_seconds, b.waited_seconds)
        assert list(itertools.islice(a.failures(), 5)) == list(itertools.islice(a.failures(), 5))  # replayable
    other = schedule_nights("bad_pool", 4, nights=5, steps=STEPS)
    assert [n.save_seconds for n in other] != [n.save_seconds for n in first]
    saves = schedule_nights("save_failures", 3, nights=1, steps=STEPS)[0]
    indices = [i for i, _ in itertools.islice(saves.failing_saves(), 200)]
    assert indices == sorted(set(indices)) and 2_000 < indices[-1] < 50_000  # about one save in 50


def shortfalls(results: Sequence[ScheduleResult]) -> list[str]:
    """Where a policy fails to pay for itself over a 21-night season from its first night: under the best fixed
    period by more than a point (where ``auto`` would ship in shadow mode), or not 20 points over the default."""
    found = []
    for r in results:
        gap = r.against_best().mean
        if gap < -0.01:
            found.append(f"{r.name}: {gap:+.2%} against the best fixed period {r.best_period}")
        gain = r.interval("auto").mean - r.interval("default").mean
        if gain < 0.20:
            found.append(f"{r.name}: only {gain:+.1%} over the default period {DEFAULT_PERIOD}")
    return found


@pytest.fixture(scope="module")
def short_form() -> list[ScheduleResult]:
    return [evaluate(s, SEEDS, nights=NIGHTS, steps=STEPS, periods=PERIODS) for s in SCHEDULES]


def test_auto_pays_for_itself_on_every_schedule(short_form: list[ScheduleResult]) -> None:
    assert shortfalls(short_form) == []
    for r in short_form:
        assert r.interval("hindsight").mean >= r.interval("best fixed").mean >= r.interval("auto").mean - 0.005
    # It adapts: the calm schedule gets periods several times the stormy one's.
    periods = {r.name: sorted(r.auto_periods)[len(r.auto_periods) // 2] for r in short_form}
    assert periods["calm"] > 4 * periods["stormy"]


def test_the_check_fails_when_auto_is_replaced_by_any_constant(short_form: list[ScheduleResult]) -> None:
    # Every period of the sweep, each schedule's best fixed period among them, in auto's place on the same nights.
    assert {r.best_period for r in short_form} <= set(PERIODS)
    passing = [p for p in PERIODS if not shortfalls([r.with_auto_as(p) for r in short_form])]
    assert passing == []


def test_the_check_fails_for_the_settings_of_before_issue_55(short_form: list[ScheduleResult]) -> None:
    # The same nights, auto as shipped before this issue (its first night on the fallback 10) in auto's place.
    before = [dataclasses.replace(r, nightly={**r.nightly, "auto": r.nightly["auto before"]}) for r in short_form]
    assert shortfalls(before) != []


def test_the_command_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "2", "--nights", "6", "--grid", "8", "--schedules", "poisson,bursts"]) == 0
    out = capsys.readouterr().out
    assert "seeds 1-2 (2 per schedule), 6 nights" in out and "| bursts |" in out and "worst night" in out
    assert "auto before issue 55" in out
    assert main(["--tune", "--seeds", "2", "--nights", "4", "--grid", "6", "--schedules", "weibull"]) == 0
    assert "seeds 1001-1002" in capsys.readouterr().out
