"""A run report with every part, for the tests that read one back (the report's JSON, the history entry)."""

from __future__ import annotations

import dataclasses

from elastic_training.operators.advice import auto_period
from elastic_training.operators.failure_history import FailureKind, SliceFailure
from elastic_training.operators.pool_avoidance import disabled
from elastic_training.operators.recovery import CostModel, Incarnation, LogDigest, run_report
from elastic_training.operators.run_report import BudgetAllowances, RunReport, escalations_of
from tests.support.recovery_logs import one_recovery_log, queued_then_preempted


def full_report() -> RunReport:
    """A report with every part: a recovery, a preemption, an escalation, budgets, pools, the auto period."""
    first = LogDigest().feed_all(one_recovery_log()[:40])
    second = queued_then_preempted()
    report = run_report(
        incarnations=[Incarnation("run-a", 4, 0, first), Incarnation("run-a-r1", 0, 1, second)],
        escalations=escalations_of(
            [
                {
                    "reason": "stalled",
                    "message": "no progress",
                    "at": 100.0,
                    "jobset_name": "run-a",
                    "latest_step": 25,
                    "resumed_from_step": 20,
                    "steps_lost": 5,
                    "quarantined": ["/r/checkpoints/quarantine/25"],
                    "seconds_to_recreate": 12.5,
                }
            ]
        ),
        namespace="default",
        run_directory="/r",
        target_step=59,
        final_step=59,
        wall_seconds=420.0,
        costs=CostModel(chips=8, price_per_chip_hour=1.5),
        full_restart_seconds_lost=12.5,
        budgets=BudgetAllowances(max_slice_restarts=3, slice_restart_window_seconds=3600.0, elastic_max_retries=4),
        checkpoint_period=10,
        checkpoint_save_seconds=0.5,
        ended_at=420.0,
    )
    choice = auto_period([], steps=60, fallback=10)
    return dataclasses.replace(
        report,
        num_slices=2,
        slice_failures=(SliceFailure(at=90.0, kind=FailureKind.LOST_HOST, pool="a", hosts=("n1",), slice=1),),
        node_pools=("a", "b"),
        node_pool_avoidance=disabled(),
        checkpoint_period_choice=choice,
        history_key="elastic_training_failure_history.nightly.pretrain",
        history_notes=("the failure history elastic_training_failure_history.nightly.pretrain: 1 entry left out",),
    )
