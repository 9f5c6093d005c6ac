"""`elastic-training demo`: one elastic training run on the local cluster, a slice killed mid-run.

What it does, all for real: starts the local Kubernetes API, creates a Pathways-shaped JobSet (a
`pathways-head` trainer and N worker slices), waits for training to pass a checkpoint, force-deletes
one worker pod (as `kubectl delete pod --grace-period=0 --force` would), waits for the JobSet to
finish, validates the final checkpoint, and prints the recovery report read from the trainer's
recovery records, the JobSet status and the worker pods.

Until the Airflow pipeline exists this is the whole demo; it never prints anything it did not observe.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from local.workloads.drill import DrillObservation, DrillPlan


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workdir", type=Path, help="where the cluster and the run write (default: a temp dir)")
    parser.add_argument("--steps", type=int, default=200, help="training steps (default: 200)")
    parser.add_argument("--checkpoint-period", type=int, default=20, help="steps between checkpoints (default: 20)")
    parser.add_argument("--slices", type=int, default=2, help="worker slices (default: 2)")
    parser.add_argument(
        "--kill-at-step", type=int, default=50, help="delete a worker pod once this step completes (default: 50)"
    )
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for the run (default: 300)")


def run(args: argparse.Namespace) -> int:
    problem = _check_arguments(args)
    if problem:
        print(f"elastic-training demo: {problem}", file=sys.stderr)
        return 2
    workdir: Path = args.workdir or Path(tempfile.mkdtemp(prefix="elastic-training-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    return _Demo(args, workdir.resolve()).run()


def _check_arguments(args: argparse.Namespace) -> str | None:
    if args.slices < 2:
        return "--slices must be at least 2 (one slice is killed, the others keep training)"
    if args.checkpoint_period < 1 or args.steps <= args.checkpoint_period:
        return "--checkpoint-period must be at least 1 and smaller than --steps"
    if not args.checkpoint_period <= args.kill_at_step < args.steps - 1:
        return "--kill-at-step must be after the first checkpoint period and before the last step"
    return None


class _Demo:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.run_name = "demo-pretrain"

    def run(self) -> int:
        from local.cluster import LocalCluster
        from local.workloads.drill import DrillPlan, DrillTimeout, SliceKillDrill

        args = self.args
        plan = DrillPlan(
            name=self.run_name,
            base_output_directory=self.workdir / "output",
            train_keys=[
                f"steps={args.steps}",
                f"checkpoint_period={args.checkpoint_period}",
                f"num_slices={args.slices}",
                "enable_checkpointing=true",
                "enable_single_controller=true",
                "elastic_enabled=true",
                "elastic_timeout_seconds=120",
                "elastic_max_retries=10",
                "elastic_poll_interval_seconds=0.2",
            ],
            slices=args.slices,
            kill_slice=args.slices - 1,
            kill_after_step=args.kill_at_step,
            timeout=args.timeout,
        )
        say(f"work directory: {self.workdir}")
        with LocalCluster(workdir=self.workdir / "cluster") as cluster:
            say(f"local cluster serving at {cluster.url} (kubeconfig {cluster.kubeconfig_path})")
            say(f"creating JobSet {plan.name}: 1 pathways-head (trainer) + {plan.slices} worker slices")
            say(f"after step {plan.kill_after_step}, worker pod of slice {plan.kill_slice} is force-deleted")
            with SliceKillDrill(cluster, on_step=_Progress().show) as drill:
                try:
                    observation = drill.run(plan)
                except DrillTimeout as exc:
                    print(f"elastic-training demo: {exc} (see {self.workdir})", file=sys.stderr)
                    return 1
        return self._report(plan, observation)

    def _report(self, plan: DrillPlan, seen: DrillObservation) -> int:
        from operators.checkpoints import validate_checkpoints
        from operators.constants import ELASTIC_ATTEMPT_RE

        report = validate_checkpoints(str(plan.run_directory))
        attempts = [int(m[1]) for m in ELASTIC_ATTEMPT_RE.finditer(seen.head_log)]
        status = seen.jobset_status
        restarts = status.get("restarts", 0)
        lines = [
            "",
            "=" * 72,
            f"Recovery report: JobSet {plan.name}",
            "=" * 72,
            f"Fault                      : force-deleted {seen.killed_pod} (slice {seen.killed_slice}) "
            f"after step {seen.step_at_kill}",
            f"JobSet terminal state      : {seen.terminal_state}",
            f"JobSet restarts            : {restarts} "
            f"(counting toward max: {status.get('restartsCountTowardsMax', 0)})",
            "Trainer pod kept           : "
            + ("yes, the same pod and process" if seen.head_pod_kept and not seen.head_restarts else "no"),
            f"Elastic attempts           : {max(attempts, default=0)} "
            f"(in-process recoveries: {max(max(attempts, default=1) - 1, 0)})",
        ]
        for index, names in seen.worker_pods.items():
            lines.append(
                f"Worker pods of slice {index}   : {len(names)} ({len(names) - 1} replaced): {', '.join(names)}"
            )
        for number, record in enumerate(seen.records, 1):
            phases = record.get("phase_seconds", {})
            detected = record["failure_detected_at"] - seen.killed_at
            total = phases.get("total")
            lines += [
                "",
                f"Recovery {number}: {record.get('kind')} of slice(s) {record.get('lost_slices')}, "
                f"outcome {record.get('outcome')}",
                f"  kill -> detection        : {_seconds(detected)}",
                f"  waiting for slices       : {_seconds(phases.get('wait_for_slices'))}",
                f"  preparing the restore    : {_seconds(phases.get('prepare_restore'))}",
                f"  restoring step {record.get('step_restored')!s:<9} : {_seconds(phases.get('restore'))}",
                f"  first step after restore : {_seconds(phases.get('first_step'))} "
                f"(step {record.get('first_step_after_recovery')})",
                f"  kill -> next step        : {_seconds(None if total is None else total + detected)}",
                f"  steps lost               : {record.get('steps_lost')} "
                f"(failed at step {record.get('step_at_failure')}, resumed from {record.get('step_restored')})",
            ]
        if not seen.records:
            lines += ["", "No recovery was recorded."]
        lines.append(
            f"\nCheckpoint validation      : {'valid' if report.valid else 'INVALID'} "
            f"(newest step {report.target_step}, newest valid {report.latest_valid_step}, "
            f"{len(report.steps)} steps checked)"
        )
        target = report.target
        if report.error:
            lines.append(f"  error: {report.error}")
        if target is not None:
            lines += [f"  problem: {finding}" for finding in target.problems]
        lines.append(f"Run directory              : {plan.run_directory}")
        final = self.args.steps - 1
        reached = report.latest_valid_step == final
        ok = seen.terminal_state == "Completed" and report.valid and reached and bool(seen.records)
        recoveries = len(seen.records)
        lines.append(
            f"\nResult: {'OK' if ok else 'FAILED'}: training {'reached' if reached else 'did not reach'} step {final} "
            f"with {recoveries} in-process recover{'y' if recoveries == 1 else 'ies'} and {restarts} JobSet restarts"
        )
        print("\n".join(lines))
        return 0 if ok else 1


class _Progress:
    """Prints the training step when it changes, at most every few steps."""

    def __init__(self) -> None:
        self.shown = -1

    def show(self, step: int) -> None:
        if step >= self.shown + 20:
            say(f"training: completed step {step}")
            self.shown = step


def _seconds(value: float | None) -> str:
    return "     n/a" if value is None else f"{value:8.3f} s"


def say(message: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {message}", flush=True)
