"""benchmarks/checkpoint_period_auto.py: the simulation is deterministic for a seed, every policy meets the same
failures, and over the default schedule auto beats the fixed default period."""

from __future__ import annotations

import math

from benchmarks.checkpoint_period_auto import arrivals, parse, run, simulate_night


def test_a_night_without_failures_costs_its_saves_only() -> None:
    night = simulate_night(100, [], steps=1000, step=1.0, save=10.0, recovery=60.0)
    assert (night.failures, night.wall_seconds) == (0, 1000 + 10 * 10.0)
    # A failure in the second segment loses it (100 steps and the save it was in) and costs the recovery.
    failed = simulate_night(100, [150.0], steps=1000, step=1.0, save=10.0, recovery=60.0)
    assert failed.failures == 1 and math.isclose(failed.wall_seconds, 150 + 60 + 1000 + 10 * 10.0 - 110)


def test_auto_beats_the_fixed_default_on_the_seeded_schedule(capsys: object) -> None:
    args = parse(["--seed", "2", "--steps", "2000"])
    first, second = run(args), run(args)
    assert {k: [n.goodput for n in v] for k, v in first.items()} == {
        k: [n.goodput for n in v] for k, v in second.items()
    }
    mean = {k: sum(n.goodput for n in v) / len(v) for k, v in first.items()}
    assert mean["auto"] > mean["fixed 10 (default)"] and mean["auto"] > mean["fixed 500"]
    assert mean["oracle (true rate)"] >= mean["auto"] - 0.02
    assert arrivals(__import__("random").Random(1), math.inf, 1e6) == []
