"""What a mid-night replan buys ``checkpoint_period="auto"`` (issue 55's "a loop that follows a rising failure
rate"): a simulation of the operator's policy (``operators.period_replan.replan``) on the ``auto`` benchmark's nights.

    .venv/bin/python -m benchmarks.checkpoint_period_replan --tune --nights 21     # the tuning seeds
    .venv/bin/python -m benchmarks.checkpoint_period_replan --nights 21            # the report seeds

``auto`` chooses a night's period before it starts, from the nights before: a night that turns stormy runs all night
with the calm nights' period, and MaxText cannot change its ``checkpoint_period`` in process. The replan is a full
restart with a shorter period, decided after each failure from the night's own failures, with ``auto``'s rate as a
prior worth one failure: the Gamma posterior's rate gives Young/Daly's period, and the run restarts with it when it
is at least ``--factor`` times shorter and the rest of the night, at the posterior's rate, repays ``--restart``
seconds of downtime (on top of the failure's own recovery). The night's history record keeps the period it started
with. Everything else is ``benchmarks/checkpoint_period_auto.py``'s: its nights, seeds, sweep and
``auto`` (``operators.advice.auto_period``); each night's history record is what the operator would keep.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from benchmarks.checkpoint_period_auto import (
    DEFAULT_PERIOD,
    FINGERPRINT,
    SCHEDULES,
    SHAPE_ESTIMATE,
    SLICES,
    TUNE_SEEDS,
    Night,
    Outcome,
    Replanner,
    ScheduleResult,
    auto_chooser,
    evaluate,
    grid,
    parse,
    record,
    schedule_nights,
    simulate_night,
)
from elastic_training.operators.advice import AUTO_SETTINGS, AutoSettings, auto_period
from elastic_training.operators.failure_history import RunRecord
from elastic_training.operators.period_replan import REPLAN_FACTOR, RESTART_SECONDS, RunSoFar, replan


def replanner(night: Night, prior_mtbf: float | None, *, factor: float, restart_seconds: float) -> Replanner:
    """The replan rule (``operators.period_replan.replan``) for one night, ``prior_mtbf`` the seconds between
    failures ``auto`` planned for (None: no estimate, no replan)."""

    def shorter(period: int, failures: int, seconds: float, steps_left: int) -> int | None:
        run = RunSoFar(
            period=period, failures=failures, training_seconds=seconds, steps_left=steps_left,
            step_seconds=night.step_seconds, save_seconds=night.save_seconds, recovery_seconds=night.recovery_seconds,
        )  # fmt: skip
        found = replan(run, prior_mtbf, factor=factor, restart_seconds=restart_seconds)
        return found.period if found is not None else None

    return shorter


def run_replanning(
    nights: Sequence[Night], *, steps: int, factor: float, restart_seconds: float, settings: AutoSettings
) -> list[Outcome]:
    """``auto`` night after night, each night replanned as :func:`replanner` says."""
    history: list[RunRecord] = []
    outcomes = []
    for n, night in enumerate(nights):
        choice = auto_period(
            history, steps=steps, fallback=DEFAULT_PERIOD, fingerprint=FINGERPRINT, slices=SLICES,
            settings=settings, estimate=SHAPE_ESTIMATE,
        )  # fmt: skip
        rule = replanner(night, choice.mtbf_seconds, factor=factor, restart_seconds=restart_seconds)
        outcome = simulate_night(choice.period, night, steps=steps, replan=rule, restart_seconds=restart_seconds)
        outcomes.append(outcome)
        history.append(record(night, outcome, n))
    return outcomes


def with_replan(result: ScheduleResult, args: argparse.Namespace) -> tuple[ScheduleResult, float]:
    """``result`` with an ``auto replan`` policy on the same nights, and its replans per night."""
    runs = [
        run_replanning(
            schedule_nights(result.name, seed, nights=args.nights, steps=args.steps), steps=args.steps,
            factor=args.factor, restart_seconds=args.restart, settings=args.settings,
        )
        for seed in result.seeds
    ]  # fmt: skip
    replans = sum(o.replans for outcomes in runs for o in outcomes) / (len(runs) * args.nights)
    nightly = {**result.nightly, "auto replan": [[o.goodput for o in outcomes] for outcomes in runs]}
    return replace(result, nightly=nightly), replans


def _setting(given: str) -> tuple[str, float | int | bool]:
    """``NAME=NUMBER`` as one of ``AutoSettings``' fields, of that field's type."""
    name, _, number = given.partition("=")
    if not hasattr(AUTO_SETTINGS, name):
        raise SystemExit(f"--auto {given!r}: no such setting of auto (operators.advice.AutoSettings)")
    kind = type(getattr(AUTO_SETTINGS, name))
    return name, kind(float(number))


def main(argv: Sequence[str] | None = None) -> int:
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--restart", type=float, default=RESTART_SECONDS, help="a full restart's downtime, s")
    extra.add_argument("--factor", type=float, default=REPLAN_FACTOR, help="replan when this many times shorter")
    extra.add_argument(
        "--auto", action="append", default=[], metavar="NAME=NUMBER", help="one of auto's settings, to tune"
    )
    known, rest = extra.parse_known_args(argv)
    args = parse(rest)
    args.restart, args.factor = known.restart, known.factor
    chosen: dict[str, Any] = dict(_setting(a) for a in known.auto)
    args.settings = replace(AUTO_SETTINGS, **chosen)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    started = time.process_time()
    print(
        f"seeds {seeds[0]}-{seeds[-1]}{' (tuning)' if seeds[0] == TUNE_SEEDS[0] else ''}, {args.nights} nights, "
        f"a restart {args.restart:.0f} s, replanned when {args.factor:g}x shorter; points against the best fixed "
        f"period, from night 1\n"
    )
    print("| schedule | auto | auto with a mid-night replan | replans per night |")
    print("|---|---|---|---|")
    for name in args.schedules.split(","):
        result = evaluate(
            name, seeds, nights=args.nights, steps=args.steps, periods=grid(args.steps, args.grid),
            before=lambda steps: lambda history: DEFAULT_PERIOD,
            chooser=lambda steps: auto_chooser(steps, args.settings),
        )  # fmt: skip
        result, replans = with_replan(result, args)
        print(f"| {name} | {result.against_best().signed()} | {result.against_best(policy='auto replan').signed()} "
              f"| {replans:.2f} |")  # fmt: skip
    print(f"\n{time.process_time() - started:.0f} s of CPU; schedules: {', '.join(SCHEDULES)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
