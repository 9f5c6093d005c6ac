"""``checkpoint_period="auto"``'s mid-run replan (issue 55): after a failure, whether a run should restart in full
with a shorter checkpoint period, from its own failures so far and the rate ``auto`` planned it for.

MaxText cannot change ``checkpoint_period`` in process, so a run that turns stormy keeps, all night, the period
chosen before it from calmer nights. The run's failures so far, with ``auto``'s planned rate as a Gamma prior worth
one failure, give Young/Daly's period; a restart with it pays when it is at least :data:`REPLAN_FACTOR` times shorter
and the rest of the run, at the posterior's rate, saves more than the restart's downtime. Pure (no Airflow, no
Kubernetes client): the operator hands the trigger a :class:`ReplanBasis` from its plan, the trigger calls
:func:`replan_run` at each slice failure, and ``benchmarks/checkpoint_period_replan.py`` measures what the rule buys
on the ``auto`` benchmark's nights.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from elastic_training.operators.advice import AdviceError, optimal_interval_seconds

REPLAN_FACTOR = 2.0  # tuned on the auto benchmark's tuning seeds against 1.5 and 3 (RESULTS.md, session 66)
RESTART_SECONDS = 300.0  # the simulation's full-restart downtime past the failure's own recovery (assumed)
REPLAN_REASON = "checkpoint_period_replan"  # the escalation record of the recreation with the shorter period
REPLAN_KEY = "checkpoint_period_replan"  # the run's plan and report: the replan, its evidence and why


@dataclass(frozen=True)
class RunSoFar:
    """What a run knows at one of its failures: its period, its failures and training seconds so far (this failure
    included), the steps it has left from its last committed checkpoint, and its step, save and recovery times."""

    period: int
    failures: int
    training_seconds: float
    steps_left: int
    step_seconds: float
    save_seconds: float
    recovery_seconds: float

    def __post_init__(self) -> None:
        numbers = (self.training_seconds, self.step_seconds, self.save_seconds, self.recovery_seconds)
        if not all(math.isfinite(v) and v >= 0 for v in numbers) or self.step_seconds <= 0:
            raise AdviceError(f"unsound run for a replan: {self!r}")
        if self.period < 1 or self.failures < 0 or self.steps_left < 0:
            raise AdviceError(f"unsound run for a replan: {self!r}")


@dataclass(frozen=True)
class Replan:
    """A restart with ``period``: the posterior's MTBF, and the seconds it saves over the rest of the run net of the
    restart."""

    period: int
    mtbf_seconds: float
    net_gain_seconds: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def overhead(period: int, run: RunSoFar, mtbf_seconds: float) -> float:
    """The model's share of time not spent on kept steps (saves, lost work, recoveries), unclamped."""
    interval = period * run.step_seconds
    return run.save_seconds / interval + (interval / 2 + run.recovery_seconds) / mtbf_seconds


def replan(
    run: RunSoFar,
    planned_mtbf_seconds: float | None,
    *,
    factor: float = REPLAN_FACTOR,
    restart_seconds: float = RESTART_SECONDS,
) -> Replan | None:
    """The shorter period to restart ``run`` with, or ``None`` (no plan to weigh the failures against: ``None``)."""
    if planned_mtbf_seconds is None or not planned_mtbf_seconds > 0 or run.save_seconds <= 0:
        return None
    mtbf = (run.training_seconds + planned_mtbf_seconds) / (run.failures + 1)
    best = max(1, int(optimal_interval_seconds(save_seconds=run.save_seconds, mtbf_seconds=mtbf) / run.step_seconds))
    saved = run.steps_left * run.step_seconds * (overhead(run.period, run, mtbf) - overhead(best, run, mtbf))
    if best * factor <= run.period and saved > restart_seconds:
        return Replan(period=best, mtbf_seconds=mtbf, net_gain_seconds=saved - restart_seconds)
    return None


@dataclass(frozen=True)
class ReplanBasis:
    """What a run was planned with, handed to its trigger: the period, the MTBF ``auto`` planned it for, the step,
    save and recovery seconds of the plan, and the rule's factor. ``restart_seconds``: a full restart's downtime;
    ``None`` (the operator's): what this incarnation took from its creation to its first step, measured by the
    trigger, since a restart pays that again (the pods, the trainer's start, its compilation and restore)."""

    period: int
    planned_mtbf_seconds: float
    step_seconds: float
    save_seconds: float
    recovery_seconds: float
    factor: float = REPLAN_FACTOR
    restart_seconds: float | None = None

    def __post_init__(self) -> None:
        numbers = (self.planned_mtbf_seconds, self.step_seconds, self.save_seconds, self.factor)
        if not all(isinstance(v, int | float) and math.isfinite(v) and v > 0 for v in numbers):
            raise AdviceError(f"unsound basis for a replan: {self!r}")
        others = (self.recovery_seconds, 0.0 if self.restart_seconds is None else self.restart_seconds)
        if not all(isinstance(v, int | float) and math.isfinite(v) and v >= 0 for v in others):
            raise AdviceError(f"unsound basis for a replan: {self!r}")
        if isinstance(self.period, bool) or not isinstance(self.period, int) or self.period < 1 or self.factor < 1:
            raise AdviceError(f"unsound basis for a replan: {self!r}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def restart_cost(self, measured_seconds: float) -> float:
        """A restart's downtime: this basis's own, or else ``measured_seconds`` (the run's start)."""
        return self.restart_seconds if self.restart_seconds is not None else max(0.0, measured_seconds)

    @classmethod
    def from_json(cls, data: Any) -> ReplanBasis | None:
        """The basis a trigger was serialized with; ``None`` for anything else (it only ever turns the rule off)."""
        if not isinstance(data, Mapping):
            return None
        try:
            return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name in data})
        except (AdviceError, TypeError):
            return None

    @classmethod
    def from_choice(
        cls, period: int, choice: Any, *, factor: float = REPLAN_FACTOR, restart_seconds: float | None = None
    ) -> ReplanBasis | None:
        """The basis of a run ``auto`` planned with ``choice`` (its JSON) and launched with ``period``; ``None``
        when the choice measured nothing to weigh failures against (the fallback) or lacks a figure."""
        if not isinstance(choice, Mapping) or choice.get("source") not in ("runs", "prior"):
            return None
        figures = {
            "period": period,
            "planned_mtbf_seconds": choice.get("mtbf_seconds"),
            "step_seconds": choice.get("step_seconds"),
            "save_seconds": choice.get("checkpoint_save_seconds"),
            "recovery_seconds": choice.get("recovery_seconds"),
            "factor": factor,
            "restart_seconds": restart_seconds,
        }
        return cls.from_json(figures)


def replan_run(
    basis: ReplanBasis, *, failures: int, training_seconds: float, steps_left: int, restart_seconds: float
) -> Replan | None:
    """:func:`replan` for a run planned on ``basis`` with ``failures`` slice failures in ``training_seconds``; a
    restart costs ``basis.restart_seconds``, or, where that is ``None``, ``restart_seconds`` (measured)."""
    run = RunSoFar(
        period=basis.period,
        failures=failures,
        training_seconds=max(0.0, training_seconds),
        steps_left=max(0, steps_left),
        step_seconds=basis.step_seconds,
        save_seconds=basis.save_seconds,
        recovery_seconds=basis.recovery_seconds,
    )
    restart = basis.restart_cost(restart_seconds)
    return replan(run, basis.planned_mtbf_seconds, factor=basis.factor, restart_seconds=restart)
