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

``checkpoint_period="auto"`` (:func:`auto_period`) is the same model over the failure history's runs of the same
shape (:func:`shape_fingerprint`): the failure rate per slice-second of training, Bayesian with a Gamma posterior
(the failures seen, weighted by age, plus :attr:`AutoSettings.prior_failures`, over the weighted exposure): the
period for its mean maximises the expected goodput of the model (linear in the rate), and its
quantiles, by Wilson and Hilferty's (1931) cube-root approximation of the chi-square, are the interval reported.
The optimum under failures that saves bring is Young's with each save's cost raised by those failures' cost,
``tau* = sqrt(2 (C + q (C/2 + R)) M)`` for ``q`` failures per save. The settings were tuned by
``benchmarks/checkpoint_period_auto.py`` on failure generators that break the model (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any, Protocol

from elastic_training.operators.failure_history import RunRecord
from elastic_training.operators.shape_prior import ShapeEstimate


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


# -- checkpoint_period="auto": the same model over the history of runs like this one ----------------------------

AUTO_PERIOD = "auto"


@dataclass(frozen=True)
class AutoSettings:
    """How ``checkpoint_period="auto"`` reads the history; :data:`AUTO_SETTINGS` is what ships.

    Tuned by ``benchmarks/checkpoint_period_auto.py --tune`` on its tuning seeds (never the seeds it reports on);
    benchmarks/RESULTS.md, "checkpoint_period=auto", says which and what each value bought.

    - ``runs``: the newest runs of the same shape looked at;
    - ``half_life_runs``: a run's weight halves every this many runs back, so the rate follows a fleet that
      changes without forgetting last week's storm after three calm nights;
    - ``prior_failures``: failures counted on top of those seen (weighted evidence plus this): calm nights are no
      proof failures never come. Half a failure is Jeffreys' prior for a Poisson rate; tuned with the replan's
      factor (session 66) against 1 (calm nights ran periods 2-4 times too short for a week), 0.6 and 0.75;
    - ``min_training_runs``: the fallback is kept until the runs looked at trained, together, at least this many
      runs of this length (``steps`` times the step time): a run that died in its first minutes says little;
    - ``max_increase``, ``max_decrease``: the period moves at most by these factors from the last such run's;
    - ``confidence``: the two-sided level of the reported interval on the failure rate;
    - ``save_failures``: fit the failures as a rate per second plus a rate per save (:func:`_fit_save_failures`),
      so failures that saves bring make saves dearer rather than the period shorter (which brings more of them);
    - ``prior_failures_per_slice_hour``: the stated prior failure rate; with ``prior_failures`` it is a Gamma prior
      (``prior_failures`` failures over ``prior_failures / rate`` slice-hours). With an estimate of the shape's step
      and save times (:mod:`operators.shape_prior`) it chooses the first run's period; ``prior_exposure``: its
      slice-hours count beside the runs' afterwards too (else only its failures do, as before issue 55). 0.2 is
      the mean of a rate spread evenly in log scale from 0.018 to 0.75 failures per slice-hour (one every 2.3
      slice-days to one every 80 slice-minutes: the calm to the stormy nights of the benchmark); tuned on its
      tuning seeds against 0.05 and 0.1 (worse on stormy nights) and 0.3 (no better), when ``prior_failures`` was
      1 (not tuned again at 0.5: the first night's mean rate is the same, only its interval wider).
    """

    runs: int = 50
    half_life_runs: float = 10.0
    prior_failures: float = 0.5
    min_training_runs: float = 0.5
    max_increase: float = 4.0
    max_decrease: float = 8.0
    confidence: float = 0.9
    save_failures: bool = True
    prior_failures_per_slice_hour: float = 0.2
    prior_exposure: bool = False

    def __post_init__(self) -> None:
        numbers = (
            self.half_life_runs,
            self.prior_failures,
            self.min_training_runs,
            self.max_increase,
            self.prior_failures_per_slice_hour,
        )
        if not (1 <= self.runs <= 1000 and all(math.isfinite(v) and v >= 0 for v in numbers)):
            raise AdviceError(f"unsound auto settings: {self!r}")
        if not (self.max_increase >= 1 and self.max_decrease >= 1 and 0 < self.confidence < 1):
            raise AdviceError(f"unsound auto settings: {self!r}")


AUTO_SETTINGS = AutoSettings()
PRIOR_FAILURES = AUTO_SETTINGS.prior_failures
STEP_SECONDS_BOUNDS = (1e-6, 1e6)  # a step time read back is clamped to these (a stored history is anyone's edit)


class RunShape(Protocol):
    """What of a run decides its step and save times (an ``ElasticRunSpec`` is one)."""

    @property
    def runtime(self) -> str: ...
    @property
    def tpu_type(self) -> str | None: ...
    @property
    def tpu_topology(self) -> str | None: ...
    @property
    def config_file(self) -> str: ...
    @property
    def maxtext_args(self) -> Mapping[str, str]: ...


# MaxText keys that name where a run reads or writes, or how long it is, rather than what a step computes.
_NOT_SHAPE_KEYS = frozenset({"run_name", "steps", "checkpoint_period", "base_output_directory"})
_NOT_SHAPE_SUFFIXES = ("_path", "_dir", "_directory", "_file", "_bucket")


def shape_fingerprint(shape: RunShape) -> str:
    """The fingerprint of what decides a run's step and save times: runtime, accelerator, topology, config, args.

    Left out: the slice count (``auto`` counts failures per slice and scales them), the run's length (rates are per
    second), the image (a nightly tag would make every run new) and the keys naming paths or the run. Two specs
    with the same fingerprint train the same model on the same hardware.
    """
    args = {
        str(k): str(v)
        for k, v in shape.maxtext_args.items()
        if k not in _NOT_SHAPE_KEYS and not str(k).endswith(_NOT_SHAPE_SUFFIXES)
    }
    text = json.dumps(
        [shape.runtime, shape.tpu_type or "", shape.tpu_topology or "", shape.config_file, sorted(args.items())],
        separators=(",", ":"),
    )
    return "v1:" + hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class PeriodChoice:
    """The period ``checkpoint_period="auto"`` chose, from what, and the goodput the model predicts for it.

    ``bounds``: the periods allowed (at least the steps one save takes, so saves never queue behind each other;
    at most half the run, the spec's lint). ``clamped``: ``"save_time"``, ``"run_length"`` or ``"change_bound"``
    (the period may move only so far from the last run's: :class:`AutoSettings`) when the model's optimum was
    outside them, else ``None``. ``runs``: how many past runs the rates came from (0: the period is ``fallback``);
    ``runs_other_shape``: runs left out for another fingerprint. ``failures`` and ``training_seconds``: the
    evidence, weighted by age; ``mtbf_seconds`` is per run of ``slices`` slices. ``*_low`` / ``*_high``: the
    interval at ``confidence`` on the failure rate, and the periods and goodputs it spans. ``source``: what the
    rates came from: ``"runs"`` (this shape's), ``"prior"`` (no run of this shape measured yet: the shape's estimated
    step and save times and the stated prior failure rate) or ``"fallback"`` (neither: ``period`` is the fallback).
    """

    period: int
    predicted_goodput: float | None
    bounds: tuple[int, int]
    runs: int
    failures: float
    wall_seconds: float
    mtbf_seconds: float | None
    step_seconds: float | None
    checkpoint_save_seconds: float | None
    recovery_seconds: float | None
    optimal_period: int | None
    clamped: str | None
    reason: str
    mode: str = AUTO_PERIOD
    training_seconds: float = 0.0
    slices: int = 1
    fingerprint: str = ""
    runs_other_shape: int = 0
    previous_period: int | None = None
    confidence: float | None = None
    mtbf_low_seconds: float | None = None
    mtbf_high_seconds: float | None = None
    period_low: int | None = None
    period_high: int | None = None
    goodput_low: float | None = None
    goodput_high: float | None = None
    source: str = "fallback"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["bounds"] = list(self.bounds)
        return data


def period_bounds(*, steps: int, step_seconds: float | None, save_seconds: float | None) -> tuple[int, int]:
    """The periods ``auto`` may choose: from the steps one save takes (at least 1) to half the run."""
    upper = max(1, steps // 2)
    lower = 1
    if step_seconds and save_seconds and step_seconds > 0:
        lower = max(1, math.ceil(min(save_seconds / step_seconds, upper)))  # min first: a tiny step is no overflow
    return min(lower, upper), upper


def _model_period(measured: Sequence[RunRecord], *, slices: int, steps: int, settings: AutoSettings) -> int | None:
    """The newest run's period when the model chose it, the change bound's centre; else ``None``."""
    # The change bound is between the model's choices: the run before may have run the fallback, which is no
    # evidence-based period to stay near.
    earlier = _Evidence.of(measured[:-1], slices=slices, settings=settings) if len(measured) > 1 else None
    return measured[-1].checkpoint_period if earlier is not None and earlier.enough(steps, settings) else None


def _bounded(
    optimum: int, previous: int | None, bounds: tuple[int, int], settings: AutoSettings
) -> tuple[int, str | None]:
    """``optimum`` within the change bound around ``previous``, then within ``bounds``; which bound clamped it."""
    period, clamped = optimum, None
    if previous is not None:
        low, high = math.ceil(previous / settings.max_decrease), math.floor(previous * settings.max_increase)
        if not low <= period <= high:
            period, clamped = min(max(period, low), max(low, high)), "change_bound"
    lower, upper = bounds
    if not lower <= period <= upper:
        period, clamped = min(max(period, lower), upper), "save_time" if period < lower else "run_length"
    return period, clamped


def auto_period(
    runs: Sequence[RunRecord],
    *,
    steps: int,
    fallback: int,
    fingerprint: str = "",
    slices: int = 1,
    settings: AutoSettings = AUTO_SETTINGS,
    estimate: ShapeEstimate | None = None,
) -> PeriodChoice:
    """The checkpoint period for a run of ``steps`` steps on ``slices`` slices, from the history ``runs``.

    Only runs of the same ``fingerprint`` (:func:`shape_fingerprint`; ``""``: every run) that measured their
    training, step and save times count, the newest ``settings.runs`` of them, each weighted by its age. The
    failure rate is per slice and per second of training (queue waits, retry delays and the gaps between tries
    are not exposure), with ``settings.prior_failures`` more than seen, scaled to ``slices``; step, save and
    recovery times are weighted means. Young/Daly (:func:`best_period`) gives the period, which moves at most
    ``settings.max_increase`` / ``max_decrease`` from the last such run's and stays within :func:`period_bounds`.
    Without enough evidence (``settings.min_training_runs``): the same model over ``estimate`` (the shape's step and
    save times before any run, :mod:`operators.shape_prior`) and the stated prior failure rate
    (``settings.prior_failures_per_slice_hour``), or, without an estimate, ``fallback``. ``source`` says which.
    """
    slices = max(1, slices)
    alike = [r for r in runs if not fingerprint or r.fingerprint == fingerprint]
    measured = [r for r in alike if _measured(r)][-settings.runs :]
    evidence = _Evidence.of(measured, slices=slices, settings=settings) if measured else None
    source = "runs"
    if evidence is None or not evidence.enough(steps, settings):
        if estimate is None or settings.prior_failures_per_slice_hour <= 0:
            return _fallback_choice(
                runs=runs, alike=len(alike), evidence=evidence, steps=steps, fallback=fallback, slices=slices,
                fingerprint=fingerprint, settings=settings,
            )  # fmt: skip
        evidence, measured, source = _Evidence.before_any_run(estimate, slices=slices, settings=settings), [], "prior"
    lower, upper = period_bounds(steps=steps, step_seconds=evidence.step_seconds, save_seconds=evidence.save_seconds)
    mtbf = evidence.mtbf_seconds(settings.prior_failures)
    optimum = _unbounded_best(evidence, mtbf, steps=steps)
    previous = _model_period(measured, slices=slices, steps=steps, settings=settings) if measured else None
    period, clamped = _bounded(optimum, previous, (lower, upper), settings)
    inputs = evidence.inputs(mtbf, steps=steps, period=period)
    return PeriodChoice(
        period=period,
        predicted_goodput=predicted_goodput(inputs, period),
        bounds=(lower, upper),
        runs=len(measured),
        failures=round(evidence.failures, 6),
        wall_seconds=round(sum(float(r.wall_seconds or 0.0) for r in measured), 3),
        mtbf_seconds=_finite(mtbf),
        step_seconds=round(evidence.step_seconds, 6),
        checkpoint_save_seconds=round(evidence.save_seconds, 6),
        recovery_seconds=round(evidence.recovery_seconds, 6),
        optimal_period=optimum,
        clamped=clamped,
        reason=evidence.reason(
            mtbf, optimum, period, clamped, previous, settings, estimate if measured == [] else None
        ),
        source=source,
        training_seconds=round(evidence.training_seconds, 3),
        slices=slices,
        fingerprint=fingerprint,
        runs_other_shape=len(runs) - len(alike),
        previous_period=previous,
        **_interval(evidence, settings, steps=steps, period=period, bounds=(lower, upper)),
    )


def _interval(
    evidence: _Evidence, settings: AutoSettings, *, steps: int, period: int, bounds: tuple[int, int]
) -> dict[str, Any]:
    """The interval at ``settings.confidence`` on the MTBF, and the periods and goodputs at its two ends."""
    ends = evidence.mtbf_interval(settings.prior_failures, settings.confidence)
    goodputs = [predicted_goodput(evidence.inputs(m, steps=steps, period=period), period) for m in ends]
    periods = [_best(evidence, m, steps=steps, bounds=bounds) for m in ends]
    return {
        "confidence": settings.confidence,
        "mtbf_low_seconds": _finite(ends[0]),
        "mtbf_high_seconds": _finite(ends[1]),
        "period_low": min(periods),
        "period_high": max(periods),
        "goodput_low": min(goodputs),
        "goodput_high": max(goodputs),
    }


def _finite(value: float) -> float | None:
    return None if math.isinf(value) else round(value, 6)


def _measured(run: RunRecord) -> bool:
    """Whether a run measured what ``auto`` needs: its training time, step time and save time."""
    return bool(run.training_seconds and run.mean_step_seconds and run.checkpoint_save_seconds is not None)


def _best(evidence: _Evidence, mtbf: float, *, steps: int, bounds: tuple[int, int]) -> int:
    """The model's best period for ``mtbf``, within ``bounds``."""
    return min(max(_unbounded_best(evidence, mtbf, steps=steps), bounds[0]), bounds[1])


def _unbounded_best(evidence: _Evidence, mtbf: float, *, steps: int) -> int:
    return best_period(evidence.inputs(mtbf, steps=steps, period=1))[0]


def _fallback_choice(
    *,
    runs: Sequence[RunRecord],
    alike: int,
    evidence: _Evidence | None,
    steps: int,
    fallback: int,
    slices: int,
    fingerprint: str,
    settings: AutoSettings,
) -> PeriodChoice:
    """``fallback`` within the bounds, when no earlier run of this shape measured enough of what the model needs."""
    lower, upper = period_bounds(steps=steps, step_seconds=None, save_seconds=None)
    period = min(max(fallback, lower), upper)
    if evidence is not None:
        need = settings.min_training_runs * steps * evidence.step_seconds
        why = (
            f"too little evidence: the {evidence.runs} earlier run(s) of this shape trained "
            f"{evidence.training_seconds:.0f} s, less than {settings.min_training_runs:g} run(s) of {steps} steps "
            f"({need:.0f} s)"
        )
    elif alike:
        why = "no earlier run of this shape measured its training, step and save times"
    elif runs:
        why = f"no earlier run of this shape ({len(runs)} of another, or of an unknown one, left out)"
    else:
        why = "no earlier run in the history"
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
        slices=slices,
        fingerprint=fingerprint,
        runs_other_shape=len(runs) - alike,
    )


@dataclass(frozen=True)
class _Evidence:
    """What ``auto`` reads from the runs that measured it, each weighted by its age (the newest weighs 1).

    ``failures`` and ``slice_seconds`` (training seconds times slices) are weighted sums; ``training_seconds`` is
    the plain sum (the minimum-evidence rule); step, save and recovery times are weighted means.
    """

    runs: int
    slices: int
    failures: float
    slice_seconds: float
    training_seconds: float
    step_seconds: float
    save_seconds: float
    recovery_seconds: float
    save_failures: float = 0.0  # of ``failures``, those the fit puts on saves
    saves: float = 0.0  # weighted saves attempted
    prior_slice_seconds: float = 0.0  # the Gamma prior's exposure (its failures are ``prior_failures``)

    @property
    def per_save(self) -> float:
        return self.save_failures / self.saves if self.saves > 0 else 0.0

    @classmethod
    def of(cls, measured: Sequence[RunRecord], *, slices: int, settings: AutoSettings) -> _Evidence:
        newest_first = list(reversed(measured))
        half = settings.half_life_runs
        weights = [0.5 ** (age / half) if half > 0 else float(age == 0) for age in range(len(newest_first))]
        total = sum(weights)

        def mean(values: Sequence[tuple[float, float]]) -> float:
            weight = sum(w for w, _ in values)
            return sum(w * v for w, v in values) / weight if weight > 0 else 0.0

        pairs = list(zip(weights, newest_first, strict=True))
        low, high = STEP_SECONDS_BOUNDS
        failures = sum(w * r.failures_total for w, r in pairs)
        slice_seconds = sum(w * float(r.training_seconds or 0.0) * max(1, r.slices) for w, r in pairs)
        on_saves, saves = _fit_save_failures(pairs, settings.prior_failures) if settings.save_failures else (0, 0)
        return cls(
            prior_slice_seconds=_prior_slice_seconds(settings) if settings.prior_exposure else 0.0,
            runs=len(measured),
            slices=slices,
            failures=failures - on_saves,
            save_failures=on_saves,
            saves=saves,
            slice_seconds=slice_seconds,
            training_seconds=sum(float(r.training_seconds or 0.0) for r in measured),
            # clamped: a near-zero step read back would make save / step overflow (AdviceInputs refuses it)
            step_seconds=min(max(sum(w * float(r.mean_step_seconds or 0.0) for w, r in pairs) / total, low), high),
            save_seconds=sum(w * float(r.checkpoint_save_seconds or 0.0) for w, r in pairs) / total,
            recovery_seconds=mean([(w, float(r.recovery_seconds)) for w, r in pairs if r.recovery_seconds is not None]),
        )

    @classmethod
    def before_any_run(cls, estimate: ShapeEstimate, *, slices: int, settings: AutoSettings) -> _Evidence:
        """No run yet: the estimate's times and the prior's rate alone."""
        low, high = STEP_SECONDS_BOUNDS
        return cls(
            runs=0,
            slices=slices,
            failures=0.0,
            slice_seconds=0.0,
            training_seconds=0.0,
            step_seconds=min(max(estimate.step_seconds, low), high),
            save_seconds=estimate.save_seconds,
            recovery_seconds=estimate.recovery_seconds,
            prior_slice_seconds=_prior_slice_seconds(settings),
        )

    def save_cost(self) -> float:
        """A save's expected cost: its time, and the failures it brings (each about half a save and a recovery)."""
        return self.save_seconds + self.per_save * (self.save_seconds / 2 + self.recovery_seconds)

    def enough(self, steps: int, settings: AutoSettings) -> bool:
        """Whether the runs trained long enough to leave the fallback (``settings.min_training_runs``)."""
        return self.training_seconds >= settings.min_training_runs * steps * self.step_seconds

    def mtbf_seconds(self, prior_failures: float) -> float:
        """Seconds between failures of a run on ``slices`` slices: the weighted rate per slice-second, scaled."""
        failures = self.failures + prior_failures
        return math.inf if failures <= 0 else self.exposure / (failures * self.slices)

    @property
    def exposure(self) -> float:
        """Slice-seconds of training, the prior's included."""
        return self.slice_seconds + self.prior_slice_seconds

    def mtbf_interval(self, prior_failures: float, confidence: float) -> tuple[float, float]:
        """The interval at ``confidence`` on that MTBF: the rate's Gamma posterior (shape: the failures plus the
        prior's, rate: the slice-seconds), its quantiles by Wilson and Hilferty's chi-square approximation."""
        shape = self.failures + prior_failures
        if shape <= 0 or self.exposure <= 0:
            return 0.0, math.inf
        z = NormalDist().inv_cdf(0.5 + confidence / 2)
        k = 2 * shape  # chi-square degrees of freedom
        wh = 2 / (9 * k)
        high_rate = k * max(0.0, 1 - wh + z * math.sqrt(wh)) ** 3 / (2 * self.exposure)
        low_rate = k * max(0.0, 1 - wh - z * math.sqrt(wh)) ** 3 / (2 * self.exposure)
        shortest = 1 / (high_rate * self.slices) if high_rate > 0 else math.inf
        longest = 1 / (low_rate * self.slices) if low_rate > 0 else math.inf
        return shortest, longest

    def inputs(self, mtbf: float, *, steps: int, period: int) -> AdviceInputs:
        """The model's inputs for a run of ``steps`` steps failing every ``mtbf`` seconds (one failure per MTBF)."""
        return AdviceInputs(
            failures=0 if math.isinf(mtbf) else 1,
            wall_seconds=1.0 if math.isinf(mtbf) else max(mtbf, 1e-9),
            step_seconds=self.step_seconds,
            checkpoint_save_seconds=self.save_cost(),
            checkpoint_period=period,
            steps=steps,
            recovery_seconds=self.recovery_seconds,
        )

    def reason(
        self,
        mtbf: float,
        optimum: int,
        period: int,
        clamped: str | None,
        previous: int | None,
        settings: AutoSettings,
        estimate: ShapeEstimate | None = None,
    ) -> str:
        """Why ``auto`` chose its period, in one line: the evidence, its source, the bound that moved it."""
        prior = f"+{settings.prior_failures:g} assumed"
        if self.prior_slice_seconds > 0:
            prior += (
                f" over {self.prior_slice_seconds:.0f} more, the prior of {settings.prior_failures_per_slice_hour:g}"
            )
            prior += " per slice-hour"
        rate = (
            f"{self.failures:.3g} failure(s) ({prior}) over {self.slice_seconds:.0f} slice-seconds of training: one "
            f"every {mtbf:.0f} s on {self.slices} slice(s)"
        )
        bound = {
            "save_time": f", raised to {period} (a save takes {self.save_seconds:.3g} s)",
            "run_length": f", cut to {period} (half the run)",
            "change_bound": f", moved only to {period} from the last run's {previous} (at most x"
            f"{settings.max_increase:g} up, /{settings.max_decrease:g} down per run)",
        }
        source = f"the last {self.runs} run(s) of this shape"
        if estimate is not None:
            source = f"no run of this shape measured yet, so the prior: {estimate.source}"
        return (
            f"{source}: {rate}, a save {self.save_seconds:.3g} s, a step {self.step_seconds:.3g} s: the model's best "
            f"period is {optimum}{bound.get(clamped or '', '')}"
        )


def _prior_slice_seconds(settings: AutoSettings) -> float:
    """The stated prior's exposure: ``prior_failures`` failures at ``prior_failures_per_slice_hour``."""
    rate = settings.prior_failures_per_slice_hour
    return settings.prior_failures / rate * 3600.0 if rate > 0 else 0.0


def _fit_save_failures(pairs: Sequence[tuple[float, RunRecord]], prior: float) -> tuple[float, float]:
    """Of the weighted failures, how many saves brought, and the weighted saves: ``(on saves, saves)``.

    The fit (maximum likelihood by expectation-maximisation, 100 rounds) is of each run's failures as Poisson with
    mean ``rate * slice-seconds + per_save * saves``, a run's saves being its training time over one period and
    its save. Where a run's record says which failures interrupted a save (``failures_in_saves``), only those can
    be the saves', against the steady rate's share of them (the time spent saving): the two are told apart at any
    period. Where it does not (a record from before it was kept), they are told apart only where the runs' saves
    per second differ (the fallback's short period, a change of period); else the fit stays near its starting
    guess, a tenth on saves, close to the rate-only model.
    """
    rows = [row for w, r in pairs if (row := _save_row(w, r)) is not None]
    saves = sum(row.weight * row.saves for row in rows)
    exposure = sum(row.weight * row.exposure for row in rows)
    seen = sum(row.weight * row.failures for row in rows)
    if saves <= 0 or exposure <= 0 or seen <= 0:
        return 0.0, saves
    rate, per_save, on_saves = (0.9 * seen + prior) / exposure, 0.1 * seen / saves, 0.0
    for _ in range(100):
        on_saves = sum(row.on_saves(rate, per_save) for row in rows)
        rate, per_save = (seen - on_saves + prior) / exposure, on_saves / saves
    return on_saves, saves


@dataclass(frozen=True)
class _SaveRow:
    """One run as the save-failure fit reads it: its weight, failures, slice-seconds and saves; of its failures,
    those that interrupted a save, and the share of its training spent saving (``None``: not recorded)."""

    weight: float
    failures: float
    exposure: float
    saves: float
    in_saves: float | None
    saving_share: float

    def on_saves(self, rate: float, per_save: float) -> float:
        """The weighted failures the saves brought, expected under ``rate`` and ``per_save``."""
        brought = per_save * self.saves
        if self.in_saves is None:
            chance, candidates = rate * self.exposure, self.failures
        else:
            chance, candidates = rate * self.exposure * self.saving_share, self.in_saves
        if candidates <= 0 or chance + brought <= 0:
            return 0.0
        return self.weight * candidates * brought / (chance + brought)


def _save_row(weight: float, run: RunRecord) -> _SaveRow | None:
    """``run`` as a row of the fit, or ``None`` where its period, step time or training time is unknown."""
    if run.checkpoint_period is None or not run.mean_step_seconds or not run.training_seconds:
        return None
    save = run.checkpoint_save_seconds or 0.0
    segment = run.checkpoint_period * run.mean_step_seconds + save  # a period's steps and its save
    return _SaveRow(
        weight=weight,
        failures=float(run.failures_total),
        exposure=run.training_seconds * max(1, run.slices),
        saves=run.training_seconds / segment,
        # without a save time the steady rate's share of them is unknown: fitted as a run that does not say
        in_saves=None
        if run.failures_in_saves is None or save <= 0
        else float(min(run.failures_in_saves, run.failures_total)),
        saving_share=save / segment,
    )
