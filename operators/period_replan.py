"""``checkpoint_period="auto"``'s mid-run replan (issue 55): after a failure, whether a run should restart in full
with a shorter checkpoint period, from its own failures so far and the rate ``auto`` planned it for.

MaxText cannot change ``checkpoint_period`` in process, so a run that turns stormy keeps, all night, the period
chosen before it from calmer nights. The run's failures so far, with ``auto``'s planned rate as a Gamma prior worth
one failure, give Young/Daly's period; a restart with it pays when it is at least :data:`REPLAN_FACTOR` times shorter
and the rest of the run, at the posterior's rate, saves more than the restart's downtime. Pure (no Airflow, no
Kubernetes client), and not wired into the operator yet: ``benchmarks/checkpoint_period_replan.py`` measures what it
would buy on the ``auto`` benchmark's nights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from elastic_training.operators.advice import AdviceError, optimal_interval_seconds

REPLAN_FACTOR = 3.0  # tuned on the auto benchmark's tuning seeds (2 replanned clustered failures, to their cost)
RESTART_SECONDS = 300.0  # a full restart's downtime past the failure's own recovery: assumed, not yet measured


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
