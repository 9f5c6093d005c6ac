"""``checkpoint_period="auto"`` against the default, the best fixed period and the per-night hindsight optimum.

    .venv/bin/python -m benchmarks.checkpoint_period_auto                 # the report: seeds 1-30
    .venv/bin/python -m benchmarks.checkpoint_period_auto --tune          # the tuning: seeds 1001-1030

A model-level simulation, not a cluster run: the loop needs tens of nights of hours of training each. The nights
are simulated with the quantities the operator measures and the very code that chooses the period
(``operators.advice.auto_period`` over the ``RunRecord``s the operator would have kept), on failure generators
chosen to break the model ``auto`` assumes (Young/Daly's: failures a Poisson process of a known, steady rate,
saves and steps of known cost). Every schedule is run for ``--seeds`` seeds of ``--nights`` nights:

- ``calm``, ``poisson``, ``stormy``: the model's own world (the controls): failures a Poisson process of a steady
  rate, one every 28 h, 2 h and 15 min of a run: no single period suits all three;
- ``weibull``: gaps between failures Weibull with shape ``k = 0.5`` (a failure is soon followed by another:
  infant mortality after a repair), the same mean gap;
- ``bursts``: calm stretches (a failure every 14 h of a run) broken by bursts of one to a few stormy nights
  (every 15 min), the lengths drawn per seed;
- ``bad_pool``: the slices land on 4 of 8 node pools each night; one pool fails every 20 min per slice, the others
  every 22 h: a night is calm or stormy by where it landed;
- ``growing``: a rate that grows through the night (ten times higher at the end of a night's nominal length than
  at its start);
- ``save_failures``: a steady rate, and besides, 2 % of saves fail the run while they write (losing the segment);
- ``shifting_weibull``, ``shifting_clusters``, ``shifting_growing``: a rate that holds for a stretch of 2 to 8
  nights (uniform), then another (log-uniform from one failure every 20 min to every 14 h of a run), crossed with
  the within-night shapes: Weibull gaps, clusters (a geometric number, mean 3, about 5 min apart), a rising rate.

Every night also has its own step time (2 s, 5 % noise), save time (16 s, 30 %) and recovery downtime (110 s,
30 %), a queue wait before it (up to an hour) and, one night in seven, a failed try and a retry an hour or two
later: the history keeps the wall time with them and the training time without, as the operator does. A failure
loses the work since the last committed checkpoint (a save it interrupts is lost too) and costs the recovery;
failures during a recovery merge with it. Every policy meets the same nights (the failure times are drawn in
training time before any policy runs; a save failure is drawn per save, by its index), so columns differ by the
period alone. Goodput is the run report's: the steps' compute time over the time the run held its slices.

The columns: the nightly form's default period (10), ``auto`` as shipped before issue 55 (its first night on the
fallback 10; :data:`BEFORE_ISSUE_55`), the **best fixed period** (one period for every night and
seed of the schedule, found by sweeping ``--grid`` periods on the very seeds reported: a hindsight the user does
not have), the **per-night hindsight optimum** (each night's best period of the grid for that night's failures: an
upper bound no policy reaches) and ``auto``. Each figure is the mean over the seeds of a seed's mean nightly
goodput, with its 95 % confidence interval (Student's t over the seeds); ``auto - best`` is the paired difference.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

from elastic_training.operators.advice import AUTO_SETTINGS, AutoSettings, auto_period
from elastic_training.operators.failure_history import RunRecord
from elastic_training.operators.shape_prior import ShapeEstimate, estimate_shape

DEFAULT_PERIOD = 10
# Save and recovery at the seed's size (benchmarks/RESULTS.md, "TPU v5e"): a save committed in 13.4 s for 6.1 GB
# on one v5e host's disk, 16 s scaled to Qwen3-0.6B's 7.2 GB (on 3 x v5e-16 each of a slice's 4 hosts writes a
# quarter; GCS adds per-object latency and the VM's network bound). The recovery is the demo's kill-to-next-step,
# 1 min 50 s, of which the restore to HBM and the recompilation measured there are 20 s on one host.
STEP_SECONDS, SAVE_SECONDS, RECOVERY_SECONDS = 2.0, 16.0, 110.0
SLICES = 4
FINGERPRINT = "v1:benchmark"
REPORT_SEEDS = range(1, 31)
TUNE_SEEDS = range(1001, 1031)
# The shipped settings of before issue 55: no prior (the first run of a shape runs the fallback), one assumed
# failure counted without exposure (pinned: the default became half a failure in session 66).
BEFORE_ISSUE_55 = AutoSettings(prior_failures=1.0, prior_failures_per_slice_hour=0.0, prior_exposure=False)


@dataclass(frozen=True)
class BenchmarkShape:
    """The shape the nights train, as a spec gives it to :func:`estimate_shape`: Qwen3-0.6B on v5e-16 slices."""

    maxtext_args: Mapping[str, str]
    vms_per_slice: int = 4


SHAPE_ESTIMATE = estimate_shape(BenchmarkShape({"model_name": "qwen3-0.6b"}), "v5e")
T_95 = {n: t for n, t in ((2, 12.71), (3, 4.30), (4, 3.18), (5, 2.78), (10, 2.26), (20, 2.09), (30, 2.05))}


@dataclass(frozen=True)
class Night:
    """What one night holds, whatever the period (drawn before any policy runs, replayed for each).

    ``failures``: a fresh iterator over the training-time seconds (from the night's first step, recoveries
    included) at which the run fails, increasing; ``failing_saves``: one over (save index from the night's first,
    fraction into the save) of the saves that fail. Both are seeded per night, so every policy meets the same.
    """

    failures: Callable[[], Iterator[float]]
    failing_saves: Callable[[], Iterator[tuple[int, float]]] = lambda: iter(())
    step_seconds: float = STEP_SECONDS
    save_seconds: float = SAVE_SECONDS
    recovery_seconds: float = RECOVERY_SECONDS
    waited_seconds: float = 0.0  # queued, and a failed try's retry delay: wall time, not training


@dataclass(frozen=True)
class Outcome:
    """One night under one period (the night's first, when a replan changed it)."""

    period: int
    seconds: float  # from the first step to the last save: what the run held its slices for, queue excluded
    failures: int
    goodput: float
    replans: int = 0  # full restarts with a shorter period (a ``Replanner``'s)
    failures_in_saves: int = 0  # of ``failures``, those that came while a save was written (the save is lost)


# After a failure, the period to go on with (None: the same) from (the period, the night's failures so far, the
# training seconds at this failure, the steps left): a mid-night replan, bought with a full restart.
Replanner = Callable[[int, int, float, int], int | None]


def simulate_night(
    period: int, night: Night, *, steps: int, replan: Replanner | None = None, restart_seconds: float = 0.0
) -> Outcome:
    """Train ``steps`` steps with a save every ``period`` (and at the end), failing as ``night`` says; after each
    failure, ``replan`` may change the period, at ``restart_seconds`` more downtime.

    From a start at committed step ``c``, save ``k`` ends at ``k`` times (``period`` steps + a save): jumping from
    failure to failure keeps a night's cost to its failures, not its saves.
    """
    step, save, recovery = night.step_seconds, night.save_seconds, night.recovery_seconds
    first, t, committed, saves, failures, replans, in_saves = period, 0.0, 0, 0, 0, 0, 0
    timed = night.failures()
    at = next(timed, math.inf)
    bad_saves = night.failing_saves()
    bad = next(bad_saves, None)
    while True:
        segment = period * step + save
        left = steps - committed
        count = math.ceil(left / period)  # saves to the end; the last segment may be short
        last = left - (count - 1) * period
        end = t + left * step + count * save
        while at < t:  # a failure during the recovery merges with it
            at = next(timed, math.inf)
        while bad is not None and bad[0] < saves:
            bad = next(bad_saves, None)
        save_fails_at = math.inf
        if bad is not None and bad[0] < saves + count:
            k = bad[0] - saves
            save_fails_at = t + k * segment + (period if k < count - 1 else last) * step + bad[1] * save
        failed_at = min(at, save_fails_at)
        if failed_at >= end:
            return Outcome(first, end, failures, steps * step / end, replans=replans, failures_in_saves=in_saves)
        done = min(int((failed_at - t) // segment), count - 1)
        saving = failed_at > t + done * segment + (period if done < count - 1 else last) * step
        saves, committed, failures = saves + done + saving, committed + done * period, failures + 1
        in_saves += saving
        t = failed_at + recovery
        if failed_at == save_fails_at:
            bad = next(bad_saves, None)
        shorter = replan(period, failures, failed_at, steps - committed) if replan is not None else None
        if shorter is not None and shorter != period:
            period, t, replans = shorter, t + restart_seconds, replans + 1


def record(night: Night, outcome: Outcome, n: int, *, in_saves: bool = True) -> RunRecord:
    """What the operator's history keeps of a night (its report's measurements); ``in_saves=False``: as a record of
    before ``failures_in_saves`` was kept."""
    return RunRecord(
        run_id=f"night-{n}",
        ended_at=float(n),
        slices=SLICES,
        wall_seconds=outcome.seconds + night.waited_seconds,
        training_seconds=outcome.seconds,
        failures_total=outcome.failures,
        mean_step_seconds=night.step_seconds,
        checkpoint_save_seconds=night.save_seconds,
        recovery_seconds=night.recovery_seconds if outcome.failures else None,
        checkpoint_period=outcome.period,
        goodput=min(1.0, outcome.goodput),
        fingerprint=FINGERPRINT,
        failures_in_saves=outcome.failures_in_saves if in_saves else None,
    )


# -- the failure generators --------------------------------------------------------------------------------


def _poisson(seed: int, mtbf: float) -> Iterator[float]:
    rng, t = random.Random(seed), 0.0
    while not math.isinf(mtbf):
        t += rng.expovariate(1.0 / mtbf)
        yield t


def _weibull(seed: int, mtbf: float, shape: float) -> Iterator[float]:
    rng, t = random.Random(seed), 0.0
    scale = mtbf / math.gamma(1 + 1 / shape)  # the same mean gap as a Poisson process of this MTBF
    while True:
        t += rng.weibullvariate(scale, shape)
        yield t


def _growing(seed: int, mtbf: float, growth: float, nominal: float) -> Iterator[float]:
    """A Poisson process of rate ``(1 + growth * t / nominal) / mtbf`` up to ``nominal``, steady after it (a night
    that runs long meets the late rate, not one growing without end), by inverting its integrated rate."""
    rng, total = random.Random(seed), 0.0
    a, b = growth / (2 * nominal * mtbf), 1 / mtbf
    at_nominal = b * nominal + a * nominal * nominal
    while True:
        total += rng.expovariate(1.0)
        if total <= at_nominal:
            yield (-b + math.sqrt(b * b + 4 * a * total)) / (2 * a)
        else:
            yield nominal + (total - at_nominal) / (b * (1 + growth))


def _failing_saves(seed: int, probability: float) -> Iterator[tuple[int, float]]:
    """Each save fails with ``probability`` (the gaps between failing saves are geometric), at a uniform point."""
    rng, index = random.Random(seed), -1
    while probability > 0:
        index += 1 + int(math.log(1 - rng.random()) / math.log(1 - probability))
        yield index, rng.random()


def _clustered(seed: int, mtbf: float, size: float, gap: float) -> Iterator[float]:
    """Failures in clusters within a night: clusters a Poisson process, each of a geometric number of failures
    (mean ``size``) ``gap`` seconds apart on average; the same mean rate as a Poisson process of this MTBF."""
    rng, t = random.Random(seed), 0.0
    while True:
        t += rng.expovariate(1.0 / (mtbf * size))
        at = t
        yield at
        while rng.random() > 1 / size:
            at += rng.expovariate(1.0 / gap)
            yield at
        t = at


def _stretches(rng: random.Random, nights: int) -> list[float]:
    """Each night's MTBF: a level held for 2 to 8 nights (uniform), then another, log-uniform from 20 min to 14 h."""
    found: list[float] = []
    while len(found) < nights:
        found += [math.exp(rng.uniform(math.log(1_200.0), math.log(50_000.0)))] * rng.randint(2, 8)
    return found[:nights]


def _bursts(rng: random.Random, nights: int) -> list[float]:
    """Each night's MTBF: calm stretches (mean 6 nights) broken by bursts (mean 1.5 nights)."""
    found: list[float] = []
    stormy = False
    while len(found) < nights:
        length = 1 + int(rng.expovariate(1 / (0.5 if stormy else 5.0)))
        found += [900.0 if stormy else 50_000.0] * length
        stormy = not stormy
    return found[:nights]


def schedule_nights(name: str, seed: int, *, nights: int, steps: int) -> list[Night]:
    """The nights of schedule ``name`` for ``seed`` (deterministic)."""
    rng = random.Random(f"{name}:{seed}")
    run_mtbf = {
        "poisson": 7_200.0,
        "calm": 100_000.0,
        "stormy": 900.0,
        "weibull": 3_600.0,
        "growing": 20_000.0,
        "save_failures": 14_400.0,
    }
    if name.startswith("shifting_"):
        mtbfs = _stretches(rng, nights)
    else:
        mtbfs = _bursts(rng, nights) if name == "bursts" else [run_mtbf.get(name, 0.0)] * nights
    found = []
    for n in range(nights):
        own = rng.getrandbits(64)
        saves: Callable[[], Iterator[tuple[int, float]]] = partial(_failing_saves, own + 1, 0.0)
        if name in ("poisson", "calm", "stormy", "bursts", "save_failures"):
            failures = partial(_poisson, own, mtbfs[n])
        elif name in ("weibull", "shifting_weibull"):
            failures = partial(_weibull, own, mtbfs[n], 0.5)
        elif name in ("growing", "shifting_growing"):
            start = mtbfs[n] * (5.5 if name == "shifting_growing" else 1.0)  # shifting: the level is the night's mean
            failures = partial(_growing, own, start, 9.0, steps * STEP_SECONDS)
        elif name == "shifting_clusters":
            failures = partial(_clustered, own, mtbfs[n], 3.0, 300.0)
        elif name == "bad_pool":
            pools = rng.sample(range(8), SLICES)
            failures = partial(_poisson, own, 1 / sum(1 / 1_200.0 if p == 0 else 1 / 80_000.0 for p in pools))
        else:
            raise ValueError(f"unknown schedule {name!r}")
        if name == "save_failures":
            saves = partial(_failing_saves, own + 1, 0.02)
        retry = rng.uniform(3_600.0, 7_200.0) if rng.random() < 1 / 7 else 0.0
        found.append(
            Night(
                failures=failures,
                failing_saves=saves,
                step_seconds=STEP_SECONDS * rng.lognormvariate(0.0, 0.05),
                save_seconds=SAVE_SECONDS * rng.lognormvariate(0.0, 0.3),
                recovery_seconds=RECOVERY_SECONDS * rng.lognormvariate(0.0, 0.3),
                waited_seconds=rng.uniform(0.0, 3_600.0) + retry,
            )
        )
    return found


SCHEDULES = (
    "calm",
    "poisson",
    "stormy",
    "weibull",
    "bursts",
    "bad_pool",
    "growing",
    "save_failures",
    "shifting_weibull",
    "shifting_clusters",
    "shifting_growing",
)


# -- the policies ------------------------------------------------------------------------------------------

Chooser = Callable[[Sequence[RunRecord]], int]


def auto_chooser(
    steps: int,
    settings: AutoSettings = AUTO_SETTINGS,
    fallback: int = DEFAULT_PERIOD,
    estimate: ShapeEstimate | None = SHAPE_ESTIMATE,
) -> Chooser:
    """``checkpoint_period="auto"`` as the operator runs it: the history so far, the spec's estimate before any run,
    ``fallback`` as the fallback."""

    def choose(history: Sequence[RunRecord]) -> int:
        return auto_period(
            history,
            steps=steps,
            fallback=fallback,
            fingerprint=FINGERPRINT,
            slices=SLICES,
            settings=settings,
            estimate=estimate if settings.prior_failures_per_slice_hour > 0 else None,
        ).period

    return choose


def run_policy(choose: Chooser, nights: Sequence[Night], *, steps: int, in_saves: bool = True) -> list[Outcome]:
    """The nights in order, each with the period ``choose`` picks from the history of the nights before
    (``in_saves``: whether the records say which failures interrupted a save, as since issue 55)."""
    history: list[RunRecord] = []
    outcomes = []
    for n, night in enumerate(nights):
        outcome = simulate_night(choose(history), night, steps=steps)
        outcomes.append(outcome)
        history.append(record(night, outcome, n, in_saves=in_saves))
    return outcomes


def grid(steps: int, count: int) -> list[int]:
    """``count`` periods spread evenly in log scale from 5 to half the run, the default among them."""
    upper = steps // 2
    found = {round(5 * (upper / 5) ** (i / (count - 1))) for i in range(count)} | {DEFAULT_PERIOD}
    return sorted(p for p in found if 1 <= p <= upper)


# -- the statistics ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """A mean over seeds and its 95 % confidence half-width (Student's t)."""

    mean: float
    half: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Interval:
        mean = statistics.fmean(values)
        if len(values) < 2:
            return cls(mean, math.inf)
        t = T_95[max(n for n in T_95 if n <= len(values))]
        return cls(mean, t * statistics.stdev(values) / math.sqrt(len(values)))

    def shown(self) -> str:
        return f"{self.mean:.1%} ± {self.half:.1%}"

    def signed(self) -> str:
        """In points (a difference of two goodputs)."""
        return f"{self.mean * 100:+.2f} ± {self.half * 100:.2f}"


@dataclass
class ScheduleResult:
    """One schedule over its seeds: per seed, per night goodput of each policy; the best fixed period; auto's periods.

    ``nightly[policy][seed index][night]``, the policies being ``default``, ``best fixed``, ``hindsight``, ``auto``
    and ``auto before`` (the settings of before issue 55).
    """

    name: str
    seeds: tuple[int, ...]
    best_period: int
    nightly: dict[str, list[list[float]]]
    auto_periods: list[int]
    sweep: dict[int, list[list[float]]]  # period -> per seed, per night goodput

    def with_auto_as(self, period: int) -> ScheduleResult:
        """This result with ``auto`` replaced by the constant ``period`` of the sweep (the same nights)."""
        return replace(self, nightly={**self.nightly, "auto": self.sweep[period]}, auto_periods=[period])

    def per_seed(self, policy: str, first_night: int = 0) -> list[float]:
        """Each seed's mean nightly goodput of ``policy``, from ``first_night`` (0: the first) on."""
        return [statistics.fmean(nights[first_night:]) for nights in self.nightly[policy]]

    def interval(self, policy: str, first_night: int = 0) -> Interval:
        return Interval.of(self.per_seed(policy, first_night))

    def against_best(self, first_night: int = 0, policy: str = "auto") -> Interval:
        """``policy`` minus the best fixed period, paired by seed (the same nights)."""
        pairs = zip(self.per_seed(policy, first_night), self.per_seed("best fixed", first_night), strict=True)
        return Interval.of([a - b for a, b in pairs])

    def worst_night(self, first_night: int = 0) -> tuple[float, float, int, int]:
        """The night ``auto`` did worst against the best fixed period: its goodput, that period's, seed, night."""
        found = (0.0, 0.0, 0, 0)
        for i, (mine, best) in enumerate(zip(self.nightly["auto"], self.nightly["best fixed"], strict=True)):
            for n, (a, b) in enumerate(zip(mine, best, strict=True)):
                if n >= first_night and b - a > found[1] - found[0]:
                    found = (a, b, self.seeds[i], n + 1)
        return found


def evaluate(
    name: str,
    seeds: Sequence[int],
    *,
    nights: int,
    steps: int,
    periods: Sequence[int],
    chooser: Callable[[int], Chooser] = auto_chooser,
    before: Callable[[int], Chooser] | None = None,
    in_saves: bool = True,
) -> ScheduleResult:
    """One schedule: the sweep (best fixed, hindsight), ``chooser(steps)`` (``auto``; ``in_saves``: its records say
    which failures interrupted a save) and ``before(steps)`` (``auto before``, :data:`BEFORE_ISSUE_55` unless given,
    on records without it) on the same nights."""
    before = before or partial(auto_chooser, settings=BEFORE_ISSUE_55)
    sweep: dict[int, list[list[float]]] = {p: [] for p in periods}  # period -> per seed, per night goodput
    auto: list[list[Outcome]] = []
    former: list[list[float]] = []
    for seed in seeds:
        drawn = schedule_nights(name, seed, nights=nights, steps=steps)
        for p in periods:
            sweep[p].append([simulate_night(p, night, steps=steps).goodput for night in drawn])
        auto.append(run_policy(chooser(steps), drawn, steps=steps, in_saves=in_saves))
        former.append([o.goodput for o in run_policy(before(steps), drawn, steps=steps, in_saves=False)])
    best = max(periods, key=lambda p: sum(map(sum, sweep[p])))
    hindsight = [[max(sweep[p][i][n] for p in periods) for n in range(nights)] for i in range(len(seeds))]
    return ScheduleResult(
        name=name,
        seeds=tuple(seeds),
        best_period=best,
        nightly={
            "default": sweep[DEFAULT_PERIOD],
            "best fixed": sweep[best],
            "hindsight": hindsight,
            "auto": [[o.goodput for o in outcomes] for outcomes in auto],
            "auto before": former,
        },
        auto_periods=[o.period for outcomes in auto for o in outcomes],
        sweep=sweep,
    )


# -- the command -------------------------------------------------------------------------------------------


def print_results(results: Sequence[ScheduleResult], args: argparse.Namespace, seconds: float) -> None:
    seeds = results[0].seeds
    print(
        f"seeds {seeds[0]}-{seeds[-1]} ({len(seeds)} per schedule), {args.nights} nights of {args.steps} steps each; "
        f"best fixed and hindsight over {len(grid(args.steps, args.grid))} periods; {seconds:.0f} s of CPU\n"
    )
    print(
        "| schedule | default (10) | best fixed (its period) | hindsight, per night | auto before issue 55 | auto | "
        "before - best fixed | auto - best fixed | auto - best fixed, from night 2 | "
        "auto's periods: median (quartiles) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        quartiles = statistics.quantiles(r.auto_periods, n=4)
        print(
            f"| {r.name} | {r.interval('default').shown()} | {r.interval('best fixed').shown()} ({r.best_period}) | "
            f"{r.interval('hindsight').shown()} | {r.interval('auto before').shown()} | {r.interval('auto').shown()} | "
            f"{r.against_best(policy='auto before').signed()} | {r.against_best().signed()} | "
            f"{r.against_best(1).signed()} | {statistics.median(r.auto_periods):.0f} "
            f"({quartiles[0]:.0f}-{quartiles[2]:.0f}) |"
        )
    worst = min(results, key=lambda r: r.against_best().mean)
    print(f"\nworst schedule for auto against the best fixed period: {worst.name}, {worst.against_best().signed()}")
    for first, what in ((0, "worst night"), (1, "worst night from night 2")):
        night = max(results, key=lambda r: r.worst_night(first)[1] - r.worst_night(first)[0])
        g_auto, g_best, seed, n = night.worst_night(first)
        print(f"{what}: {night.name}, seed {seed}, night {n}: auto {g_auto:.1%}, the best fixed period {g_best:.1%}")


def print_fallback_effect(args: argparse.Namespace, fallbacks: Sequence[int]) -> None:
    """``auto`` without the spec's estimate (a model the table does not list: the first night runs the fallback),
    from night 2 on, against the best fixed period, for each fallback: the fallback's effect on later choices."""
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    periods = grid(args.steps, args.grid)
    print(f"\nwithout an estimate, from night 2 on (auto - best fixed, points), fallbacks {list(fallbacks)}:\n")
    print("| schedule | " + " | ".join(f"fallback {f}" for f in fallbacks) + " | largest difference |")
    print("|---|" + "---|" * (len(fallbacks) + 1))
    for name in args.schedules.split(","):
        gaps = [
            evaluate(
                name, seeds, nights=args.nights, steps=args.steps, periods=periods,
                chooser=partial(auto_chooser, fallback=f, estimate=None), before=lambda steps: lambda history: 1,
            ).against_best(1)
            for f in fallbacks
        ]  # fmt: skip
        spread = max(g.mean for g in gaps) - min(g.mean for g in gaps)
        print(f"| {name} | " + " | ".join(g.signed() for g in gaps) + f" | {spread * 100:.2f} |")


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=len(REPORT_SEEDS), help="how many seeds per schedule")
    parser.add_argument("--first-seed", type=int, default=REPORT_SEEDS[0])
    parser.add_argument("--tune", action="store_true", help=f"the tuning seeds ({TUNE_SEEDS[0]}-{TUNE_SEEDS[-1]})")
    parser.add_argument("--nights", type=int, default=90)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--grid", type=int, default=40, help="periods swept for the best fixed and hindsight")
    parser.add_argument("--schedules", default=",".join(SCHEDULES))
    parser.add_argument("--fallbacks", default="", help="e.g. 10,200: auto without the estimate, per fallback")
    parser.add_argument(
        "--no-save-split", action="store_true", help="auto's records without failures_in_saves (as before it was kept)"
    )
    args = parser.parse_args(argv)
    if args.tune:
        args.first_seed = TUNE_SEEDS[0]
    return args


def run(args: argparse.Namespace, settings: AutoSettings = AUTO_SETTINGS) -> list[ScheduleResult]:
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    periods = grid(args.steps, args.grid)
    return [
        evaluate(
            name,
            seeds,
            nights=args.nights,
            steps=args.steps,
            periods=periods,
            chooser=lambda steps: auto_chooser(steps, settings),
            in_saves=not args.no_save_split,
        )
        for name in args.schedules.split(",")
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    started = time.process_time()
    results = run(args)
    print_results(results, args, time.process_time() - started)
    if args.fallbacks:
        print_fallback_effect(args, [int(f) for f in args.fallbacks.split(",")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
