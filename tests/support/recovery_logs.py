"""MaxText logs written line by line (absl's prefix, completed steps, an elastic recovery, a queued run preempted)
and a run report built from one, for the tests of the recovery timeline, the run report and the advice."""

from __future__ import annotations

from typing import Any

from elastic_training.operators.recovery import CostModel, Incarnation, LogDigest, run_report
from elastic_training.operators.run_report import BudgetAllowances


def report_with(recoveries: int) -> dict[str, Any]:
    digest = LogDigest()
    t = 1000.0
    step = 0
    for _ in range(recoveries):
        for _ in range(10):
            digest.feed(t, f"completed step: {step}, seconds: 1.0")
            t += 1.0
            step += 1
        digest.feed(t, "Elastic event detected")
        digest.feed(t + 2, "Sufficient slices active: 2 >= 2")
        digest.feed(t + 3, f"restoring from this run's directory step {step - 5}")
        t += 5.0
        step -= 4
        digest.feed(t, f"completed step: {step}, seconds: 1.0")
        t += 1.0
        step += 1
    return run_report(
        incarnations=[Incarnation("js", recoveries, 0, digest)],
        escalations=[],
        namespace="default",
        run_directory="/r",
        target_step=99,
        final_step=99,
        wall_seconds=200.0,
        costs=CostModel(chips=4),
        budgets=BudgetAllowances(max_slice_restarts=3),
        checkpoint_period=5,
        checkpoint_save_seconds=0.5,
    ).to_json()


def absl(text: str) -> str:
    return f"I1130 12:00:00.000000 4242 train.py:101] {text}"


def steps(start: int, stop: int, t0: float, seconds: float = 1.0) -> list[tuple[float, str]]:
    return [
        (t0 + i * seconds, absl(f"completed step: {s}, seconds: {seconds:.3f}, Tokens/s/device: 10.0, loss: 2.0"))
        for i, s in enumerate(range(start, stop))
    ]


def recovery_lines(t: float, restored: int) -> list[tuple[float, str]]:
    return [
        (t, absl("Elastic event detected. Traceback (most recent call last):")),
        (t + 0.5, absl("Elastic attempt 2 out of 10")),
        (t + 2.0, absl("Sufficient slices active: 3 >= 3. Active indices: [0, 1, 2]")),
        (t + 3.0, absl(f"restoring from this run's directory step {restored}")),
    ]


def one_recovery_log() -> list[tuple[float, str]]:
    return [
        (0.0, absl("No existing checkpoints found, not restoring checkpoint.")),
        *steps(0, 30, 1.0),  # steps 0..29 at t=1..30
        *recovery_lines(40.0, restored=20),
        *steps(21, 100, 45.0),
    ]


def trained_then_preempted() -> LogDigest:
    """Queued 100 s, trained steps 0..29, preempted at 140 for 200 s: admitted again at 340, nothing logged since."""
    digest = LogDigest()
    digest.queued(0.0, preempted=False)
    digest.admitted(100.0)
    digest.feed_all([(105.0, absl("No existing checkpoints found, not restoring checkpoint.")), *steps(0, 30, 110.0)])
    digest.queued(140.0, preempted=True, reason="Preempted: Preempted to accommodate a workload")
    digest.admitted(340.0)
    return digest


def queued_then_preempted() -> LogDigest:
    """Queued 100 s, trained steps 0..29, preempted at 140 for 200 s, restored step 20, trained to 59."""
    digest = trained_then_preempted()
    digest.feed_all([(350.0, absl("restoring from this run's directory step 20")), *steps(21, 60, 360.0)])
    return digest
