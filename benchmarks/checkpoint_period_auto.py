"""``checkpoint_period="auto"`` against fixed periods over a seeded schedule of nightly failures (a model simulation).

    .venv/bin/python -m benchmarks.checkpoint_period_auto --seed 1

A cluster run is too slow for the question (the loop needs tens of nights, each hours of training), so this
simulates the nights with the quantities the operator measures and the very code that chooses the period:
``operators.advice.auto_period`` over the history the operator would have kept (``RunRecord``s of the last
``--history-runs`` nights), and ``operators.advice.best_period`` for the oracle that knows each night's true rate.

Each night trains ``--steps`` steps of ``--step-seconds``; a checkpoint every ``period`` steps blocks for
``--save-seconds`` (the last step is saved too, as MaxText does); failures arrive as a Poisson process in wall time
whose mean time between failures follows the schedule (calm nights, a stormy week, a bad pool, calm again). A
failure loses the work since the last committed checkpoint (a save it interrupts is lost too) and costs
``--recovery-seconds`` of downtime. Every policy meets the same failure times each night (common random numbers:
one seeded arrival sequence per night), so the difference between columns is the period alone.

Goodput is as the run report defines it: the steps' compute time over the wall time the run held its slices.
Printed: one row per night (period and goodput of each policy, auto's predicted goodput), then the totals.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from elastic_training.operators.advice import AdviceInputs, auto_period, best_period
from elastic_training.operators.failure_history import RunRecord

# (nights, mean time between failures in seconds; inf: none)
DEFAULT_SCHEDULE: tuple[tuple[int, float], ...] = ((5, math.inf), (7, 1800.0), (5, 600.0), (3, 7200.0), (5, math.inf))


@dataclass(frozen=True)
class Night:
    """One simulated night: what it cost, and what the history keeps of it."""

    period: int
    wall_seconds: float
    failures: int
    goodput: float


def arrivals(rng: random.Random, mtbf: float, horizon: float) -> list[float]:
    """Failure times in [0, horizon) of a Poisson process with mean gap ``mtbf``."""
    if math.isinf(mtbf):
        return []
    found, t = [], 0.0
    while True:
        t += rng.expovariate(1.0 / mtbf)
        if t >= horizon:
            return found
        found.append(t)


def simulate_night(
    period: int, failures_at: Sequence[float], *, steps: int, step: float, save: float, recovery: float
) -> Night:
    """Train ``steps`` steps with a checkpoint every ``period``, failing at ``failures_at`` (wall seconds)."""
    t, committed, failures = 0.0, 0, 0
    pending = iter(failures_at)
    next_failure = next(pending, math.inf)
    while committed < steps:
        segment = min(period, steps - committed)
        done_at = t + segment * step + save  # the segment's steps, then its blocking save
        if next_failure < done_at:
            failures += 1
            t = max(t, next_failure) + recovery  # the work since `committed` is lost; downtime to recover
            next_failure = next(pending, math.inf)
            while next_failure < t:  # failures during the recovery itself merge with it
                next_failure = next(pending, math.inf)
            continue
        t, committed = done_at, committed + segment
    return Night(period=period, wall_seconds=t, failures=failures, goodput=steps * step / t)


def record(night: Night, n: int, *, step: float, save: float, recovery: float) -> RunRecord:
    """What the operator's history keeps of a night (its report's measurements)."""
    return RunRecord(
        run_id=f"night-{n}",
        ended_at=float(n),
        wall_seconds=night.wall_seconds,
        failures_total=night.failures,
        mean_step_seconds=step,
        checkpoint_save_seconds=save,
        recovery_seconds=recovery if night.failures else None,
        checkpoint_period=night.period,
        goodput=night.goodput,
    )


def run(args: argparse.Namespace) -> dict[str, list[Night]]:
    schedule = [mtbf for count, mtbf in DEFAULT_SCHEDULE for _ in range(count)]
    rng = random.Random(args.seed)
    horizon = 50 * args.steps * (args.step_seconds + args.save_seconds)  # far past any night's end
    nights_failures = [arrivals(rng, mtbf, horizon) for mtbf in schedule]
    measured = {"step": args.step_seconds, "save": args.save_seconds, "recovery": args.recovery_seconds}

    def oracle(n: int, _history: Sequence[RunRecord]) -> int:
        mtbf = schedule[n]
        inputs = AdviceInputs(
            failures=0 if math.isinf(mtbf) else 1,
            wall_seconds=1.0 if math.isinf(mtbf) else mtbf,
            step_seconds=args.step_seconds,
            checkpoint_save_seconds=args.save_seconds,
            checkpoint_period=1,
            steps=args.steps,
            recovery_seconds=args.recovery_seconds,
        )
        return min(best_period(inputs)[0], args.steps // 2)

    def auto(_n: int, history: Sequence[RunRecord]) -> int:
        return auto_period(history[-args.history_runs :], steps=args.steps, fallback=args.default_period).period

    policies: dict[str, Callable[[int, Sequence[RunRecord]], int]] = {
        f"fixed {args.default_period} (default)": lambda _n, _h: args.default_period,
        f"fixed {args.hand_period}": lambda _n, _h: args.hand_period,
        "auto": auto,
        "oracle (true rate)": oracle,
    }
    results: dict[str, list[Night]] = {}
    predicted: list[float | None] = []
    for name, choose in policies.items():
        history: list[RunRecord] = []
        nights: list[Night] = []
        for n, failures_at in enumerate(nights_failures):
            if name == "auto":
                choice = auto_period(history[-args.history_runs :], steps=args.steps, fallback=args.default_period)
                predicted.append(choice.predicted_goodput)
            period = choose(n, history)
            night = simulate_night(
                period,
                failures_at,
                steps=args.steps,
                step=measured["step"],
                save=measured["save"],
                recovery=measured["recovery"],
            )
            nights.append(night)
            history.append(record(night, n, **measured))
        results[name] = nights
    print_table(results, predicted, schedule, args)
    return results


def print_table(
    results: dict[str, list[Night]],
    predicted: Sequence[float | None],
    schedule: Sequence[float],
    args: argparse.Namespace,
) -> None:
    names = list(results)
    print(
        f"seed {args.seed}: {len(schedule)} nights of {args.steps} steps x {args.step_seconds:g} s, a save "
        f"{args.save_seconds:g} s, a recovery {args.recovery_seconds:g} s; auto looks at the last "
        f"{args.history_runs} nights\n"
    )
    header = ["night", "true MTBF s", "failures (auto)"] + [f"{n}: period / goodput" for n in names]
    header.append("auto predicted")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for n, mtbf in enumerate(schedule):
        cells = [str(n + 1), "none" if math.isinf(mtbf) else f"{mtbf:.0f}", str(results["auto"][n].failures)]
        cells += [f"{results[k][n].period} / {results[k][n].goodput:.1%}" for k in names]
        guess = predicted[n]
        cells.append("—" if guess is None else f"{guess:.1%}")
        print("| " + " | ".join(cells) + " |")
    print()
    print("| policy | mean goodput | total wall hours | failures |")
    print("|---|---|---|---|")
    for name in names:
        nights = results[name]
        mean = sum(x.goodput for x in nights) / len(nights)
        wall = sum(x.wall_seconds for x in nights) / 3600
        print(f"| {name} | {mean:.1%} | {wall:.2f} | {sum(x.failures for x in nights)} |")


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--step-seconds", type=float, default=2.0)
    parser.add_argument("--save-seconds", type=float, default=15.0)
    parser.add_argument("--recovery-seconds", type=float, default=120.0)
    parser.add_argument("--default-period", type=int, default=10, help="the nightly form's default period")
    parser.add_argument("--hand-period", type=int, default=500, help="a period tuned by hand for calm nights")
    parser.add_argument("--history-runs", type=int, default=3)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    run(parse(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
