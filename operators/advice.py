"""Checkpoint-period advice from a run's own failure rate, checkpoint save time and step time. Pure.

The model is the first-order one of Young (1974) and Daly (2006), "A higher order estimate of the
optimum checkpoint interval for restart dumps": with failures arriving at rate ``1/M`` (``M`` the
mean time between failures), a checkpoint costing ``C`` seconds every ``tau`` seconds of compute,
and each failure costing ``R`` seconds of downtime plus, on average, half a period of work run again,
the fraction of wall time that is useful work is, to first order in ``tau/M`` and ``C/tau``::

    goodput(tau) = 1 - C / tau - (tau / 2 + R) / M          (clamped to [0, 1])

Its maximum is at ``d/dtau = 0``: ``tau* = sqrt(2 C M)`` (Young's interval, Daly's first-order
optimum); ``R`` shifts the goodput but not the optimum. The period in steps is ``tau / step_seconds``.

Edges the model has to say something sensible about:

- **no failure observed** (``M`` infinite): the failure term vanishes and the optimum is unbounded;
  the advice is to checkpoint as rarely as the run allows (its own length), goodput ``1 - C/tau``;
- **a period longer than the run**: MaxText saves once at the end, so the interval that matters is
  the run's own length, and so is the most the advice ever recommends;
- no save time measured (``C = 0``): every step could be saved for free; the advice is period 1.

Inputs come from the run report (:meth:`operators.run_report.RunReport.advice_inputs`): failures are the in-process
recoveries plus the full restarts, the mean recovery downtime is their detection-to-first-step and
delete-to-recreate times, the save time is measured from Orbax's ``_CHECKPOINT_METADATA`` (init to
commit timestamps; an upper bound of the blocking cost when saves are asynchronous).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from elastic_training.operators.failure_history import RunRecord


class AdviceError(ValueError):
    """The inputs cannot give advice (a missing or impossible value); ``str()`` says which."""


@dataclass(frozen=True)
class AdviceInputs:
    """What the model needs, all measured on the run itself (seconds unless said otherwise)."""

    failures: int
    wall_seconds: float
    step_seconds: float
    checkpoint_save_seconds: float
    checkpoint_period: int  # steps, as configured
    steps: int  # the run's length in steps
    recovery_seconds: float = 0.0  # mean downtime per failure

    def __post_init__(self) -> None:
        for name in ("wall_seconds", "step_seconds"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise AdviceError(f"{name} must be a positive number, got {value!r}")
        low, high = STEP_SECONDS_BOUNDS  # beyond them, save / step and tau / step overflow an int: not a measurement
        if not low <= self.step_seconds <= high:
            raise AdviceError(f"step_seconds must be from {low:g} to {high:g}, got {self.step_seconds!r}")
        for name in ("checkpoint_save_seconds", "recovery_seconds"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise AdviceError(f"{name} must be a number >= 0, got {value!r}")
        for name in ("failures", "checkpoint_period", "steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise AdviceError(f"{name} must be an integer, got {value!r}")
        if self.failures < 0:
            raise AdviceError(f"failures must be >= 0, got {self.failures}")
        if self.checkpoint_period < 1 or self.steps < 1:
            raise AdviceError("checkpoint_period and steps must be >= 1")

    @property
    def mtbf_seconds(self) -> float:
        """Mean time between failures over the run (infinite when none happened)."""
        return self.wall_seconds / self.failures if self.failures else math.inf


@dataclass(frozen=True)
class Advice:
    """The configured period and the one the model prefers, each with the goodput it predicts."""

    configured_period: int
    configured_goodput: float
    optimal_period: int
    optimal_goodput: float
    optimal_interval_seconds: float | None  # tau* = sqrt(2 C M); None when unbounded (no failures)
    mtbf_seconds: float | None  # None when no failure was observed
    failures: int
    step_seconds: float
    checkpoint_save_seconds: float
    recovery_seconds: float
    steps: int
    capped_at_run_length: bool  # tau* is longer than the run: checkpoint only at the end
    model: str = "goodput(tau) = 1 - C/tau - (tau/2 + R)/M; tau* = sqrt(2*C*M) (Young/Daly first order)"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """One line a person can act on."""
        if self.optimal_period == self.configured_period:
            return (
                f"checkpoint_period={self.configured_period} is already the best period for this run's failure rate "
                f"(expected goodput {self.configured_goodput:.1%})"
            )
        why = "no failure was observed" if self.mtbf_seconds is None else f"one failure every {self.mtbf_seconds:.0f} s"
        return (
            f"checkpoint_period={self.optimal_period} (expected goodput {self.optimal_goodput:.1%}) instead of "
            f"{self.configured_period} ({self.configured_goodput:.1%}): {why}, a save takes "
            f"{self.checkpoint_save_seconds:.3g} s, a step {self.step_seconds:.3g} s"
        )


def goodput(interval_seconds: float, *, save_seconds: float, mtbf_seconds: float, recovery_seconds: float) -> float:
    """The model's expected goodput for a checkpoint every ``interval_seconds`` of compute, in [0, 1]."""
    if interval_seconds <= 0:
        raise AdviceError(f"the checkpoint interval must be positive, got {interval_seconds!r}")
    failure_term = 0.0 if math.isinf(mtbf_seconds) else (interval_seconds / 2 + recovery_seconds) / mtbf_seconds
    return min(1.0, max(0.0, 1.0 - save_seconds / interval_seconds - failure_term))


def optimal_interval_seconds(*, save_seconds: float, mtbf_seconds: float) -> float:
    """Young/Daly's first-order optimum ``sqrt(2 C M)`` (infinite without failures)."""
    return math.inf if math.isinf(mtbf_seconds) else math.sqrt(2.0 * save_seconds * mtbf_seconds)


def predicted_goodput(inputs: AdviceInputs, period: int) -> float:
    """The model's goodput for a checkpoint every ``period`` steps of this run (a period past its end: its end)."""
    return round(
        goodput(
            min(period, inputs.steps) * inputs.step_seconds,
            save_seconds=inputs.checkpoint_save_seconds,
            mtbf_seconds=inputs.mtbf_seconds,
            recovery_seconds=inputs.recovery_seconds,
        ),
        6,
    )


def best_period(inputs: AdviceInputs) -> tuple[int, bool]:
    """The whole period (steps) with the model's highest goodput, and whether ``tau*`` is past the run's end."""
    s = inputs.step_seconds
    longest = inputs.steps  # a period past the run's end saves only at the end: same as the run's length
    tau = optimal_interval_seconds(save_seconds=inputs.checkpoint_save_seconds, mtbf_seconds=inputs.mtbf_seconds)
    if tau >= longest * s:
        return longest, True
    # The goodput is concave in tau: the best whole period is one of the two around tau*.
    low = max(1, math.floor(tau / s))
    best = max((low, low + 1), key=lambda p: (predicted_goodput(inputs, p), -p))
    return min(best, longest), False


def advise(inputs: AdviceInputs) -> Advice:
    """The period (in steps) that maximises the model's goodput, beside the configured one."""
    s = inputs.step_seconds
    mtbf = inputs.mtbf_seconds

    def predicted(period: int) -> float:
        return predicted_goodput(inputs, period)

    tau = optimal_interval_seconds(save_seconds=inputs.checkpoint_save_seconds, mtbf_seconds=mtbf)
    best, capped = best_period(inputs)
    longest = inputs.steps
    configured = inputs.checkpoint_period
    if predicted(min(configured, longest)) >= predicted(best):
        best = configured  # never advise a change the model does not prefer
    return Advice(
        configured_period=configured,
        configured_goodput=predicted(configured),
        optimal_period=best,
        optimal_goodput=predicted(best),
        optimal_interval_seconds=None if math.isinf(tau) else round(tau, 6),
        mtbf_seconds=None if math.isinf(mtbf) else round(mtbf, 6),
        failures=inputs.failures,
        step_seconds=s,
        checkpoint_save_seconds=inputs.checkpoint_save_seconds,
        recovery_seconds=inputs.recovery_seconds,
        steps=inputs.steps,
        capped_at_run_length=capped,
    )


# -- checkpoint_period="auto": the same model over the last runs' history -----------------------------------

AUTO_PERIOD = "auto"
# Failures counted on top of those seen, when estimating the rate from the last runs: calm nights are no proof that
# failures never come (with none seen in T seconds, 1/T is the rate's usual one-event bound). Without it a few calm
# runs push the period to half the run, and the first stormy night then loses up to half a run per failure
# (benchmarks/RESULTS.md, "checkpoint_period=auto").
PRIOR_FAILURES = 1
STEP_SECONDS_BOUNDS = (1e-6, 1e6)  # a step time read back is clamped to these (a stored history is anyone's edit)
MAX_SECONDS_READ = 1e9  # a wall, save or recovery time read back is clamped to this
MAX_FAILURES_READ = 1_000_000  # a run's failure count read back


@dataclass(frozen=True)
class PeriodChoice:
    """The period ``checkpoint_period="auto"`` chose, from what, and the goodput the model predicts for it.

    ``bounds``: the periods allowed (at least the steps one save takes, so saves never queue behind each other;
    at most half the run, the spec's lint). ``clamped``: ``"save_time"`` or ``"run_length"`` when the model's
    optimum was outside them, else ``None``. ``runs``: how many past runs the rates came from (0: none had the
    measurements; the period is then ``fallback``).
    """

    period: int
    predicted_goodput: float | None
    bounds: tuple[int, int]
    runs: int
    failures: int
    wall_seconds: float
    mtbf_seconds: float | None
    step_seconds: float | None
    checkpoint_save_seconds: float | None
    recovery_seconds: float | None
    optimal_period: int | None
    clamped: str | None
    reason: str
    mode: str = AUTO_PERIOD

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["bounds"] = list(self.bounds)
        return data


def period_bounds(*, steps: int, step_seconds: float | None, save_seconds: float | None) -> tuple[int, int]:
    """The periods ``auto`` may choose: from the steps one save takes (at least 1) to half the run."""
    upper = max(1, steps // 2)
    lower = 1
    if step_seconds and save_seconds and step_seconds > 0:
        lower = max(1, math.ceil(save_seconds / step_seconds))
    return min(lower, upper), upper


def auto_period(runs: Sequence[RunRecord], *, steps: int, fallback: int) -> PeriodChoice:
    """The checkpoint period for a run of ``steps`` steps from the failure rate and save time of ``runs``.

    Failures and wall time are summed over the runs that measured their step and save times (so the rate is
    failures per second of all of them, counting :data:`PRIOR_FAILURES` more than were seen), step, save and
    recovery times averaged; then the model of :func:`advise` gives the best period, clamped to
    :func:`period_bounds`. Without such runs: ``fallback``.
    """
    measured = [
        r
        for r in runs
        if _measured(r.wall_seconds)
        and _measured(r.mean_step_seconds)
        and _measured(r.checkpoint_save_seconds, zero_ok=True)
    ]
    if not measured:
        return _fallback_choice(had_runs=bool(runs), steps=steps, fallback=fallback)
    rates = _PastRates.of(measured)
    lower, upper = period_bounds(steps=steps, step_seconds=rates.step_seconds, save_seconds=rates.save_seconds)
    inputs = rates.inputs(steps=steps, period=upper)
    optimum, _ = best_period(inputs)
    period = min(max(optimum, lower), upper)
    clamped = "save_time" if optimum < lower else "run_length" if optimum > upper else None
    mtbf = inputs.mtbf_seconds
    return PeriodChoice(
        period=period,
        predicted_goodput=predicted_goodput(inputs, period),
        bounds=(lower, upper),
        runs=rates.runs,
        failures=rates.failures,
        wall_seconds=round(rates.wall_seconds, 3),
        mtbf_seconds=None if math.isinf(mtbf) else round(mtbf, 6),
        step_seconds=round(rates.step_seconds, 6),
        checkpoint_save_seconds=round(rates.save_seconds, 6),
        recovery_seconds=round(rates.recovery_seconds, 6),
        optimal_period=optimum,
        clamped=clamped,
        reason=rates.reason(mtbf, optimum, clamped, (lower, upper)),
    )


def _fallback_choice(*, had_runs: bool, steps: int, fallback: int) -> PeriodChoice:
    """``fallback`` within the bounds, when no earlier run measured what the model needs."""
    lower, upper = period_bounds(steps=steps, step_seconds=None, save_seconds=None)
    period = min(max(fallback, lower), upper)
    why = "no earlier run measured its step and save times" if had_runs else "no earlier run in the history"
    return PeriodChoice(
        period=period,
        predicted_goodput=None,
        bounds=(lower, upper),
        runs=0,
        failures=0,
        wall_seconds=0.0,
        mtbf_seconds=None,
        step_seconds=None,
        checkpoint_save_seconds=None,
        recovery_seconds=None,
        optimal_period=None,
        clamped=None,
        reason=f"{why}: checkpoint_period={period}, the default",
    )


@dataclass(frozen=True)
class _PastRates:
    """What ``auto`` reads from the runs that measured it: failures and wall time summed, times averaged."""

    runs: int
    failures: int
    wall_seconds: float
    step_seconds: float
    save_seconds: float
    recovery_seconds: float

    @classmethod
    def of(cls, measured: Sequence[RunRecord]) -> _PastRates:
        # Each number read back is bounded (a stored history is anyone's edit): a near-zero step time would
        # otherwise turn save / step into infinity, and math.ceil of it raises OverflowError.
        recoveries = [_clamp(r.recovery_seconds, 0.0) for r in measured if _measured(r.recovery_seconds, zero_ok=True)]
        return cls(
            runs=len(measured),
            failures=sum(min(r.failures_total, MAX_FAILURES_READ) for r in measured),
            wall_seconds=sum(_clamp(r.wall_seconds, STEP_SECONDS_BOUNDS[0]) for r in measured),
            step_seconds=sum(
                _clamp(r.mean_step_seconds, STEP_SECONDS_BOUNDS[0], STEP_SECONDS_BOUNDS[1]) for r in measured
            )
            / len(measured),
            save_seconds=sum(_clamp(r.checkpoint_save_seconds, 0.0) for r in measured) / len(measured),
            recovery_seconds=sum(recoveries) / len(recoveries) if recoveries else 0.0,
        )

    def inputs(self, *, steps: int, period: int) -> AdviceInputs:
        """The model's inputs for a run of ``steps`` steps, counting :data:`PRIOR_FAILURES` more failures."""
        return AdviceInputs(
            failures=self.failures + PRIOR_FAILURES,
            wall_seconds=self.wall_seconds,
            step_seconds=self.step_seconds,
            checkpoint_save_seconds=self.save_seconds,
            checkpoint_period=period,
            steps=steps,
            recovery_seconds=self.recovery_seconds,
        )

    def reason(self, mtbf: float, optimum: int, clamped: str | None, bounds: tuple[int, int]) -> str:
        """Why ``auto`` chose its period, in one line."""
        rate = f"{self.failures} failure(s) (+{PRIOR_FAILURES} assumed): one every {mtbf:.0f} s"
        bound = {
            "save_time": f", raised to {bounds[0]} (a save takes {self.save_seconds:.3g} s)",
            "run_length": f", cut to {bounds[1]} (half the run)",
        }
        return (
            f"the last {self.runs} run(s): {rate} over {self.wall_seconds:.0f} s, a save {self.save_seconds:.3g} s, "
            f"a step {self.step_seconds:.3g} s: the model's best period is {optimum}{bound.get(clamped or '', '')}"
        )


def _measured(value: float | None, *, zero_ok: bool = False) -> bool:
    """A measurement ``auto`` reads: present, finite, positive (a save or a recovery may take 0 s)."""
    if value is None or not math.isfinite(value):
        return False
    return value >= 0 if zero_ok else value > 0


def _clamp(value: float | None, low: float, high: float = MAX_SECONDS_READ) -> float:
    return min(high, max(low, float(value or 0.0)))
