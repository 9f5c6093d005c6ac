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
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
NAMESPACE = "default"


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
        self.output = workdir / "output"
        self.run_name = "demo-pretrain"
        self.deadline = time.monotonic() + args.timeout

    def run(self) -> int:
        from kubernetes import client, config

        from local.cluster import LocalCluster

        say(f"work directory: {self.workdir}")
        with LocalCluster(workdir=self.workdir / "cluster") as cluster:
            say(f"local cluster serving at {cluster.url} (kubeconfig {cluster.kubeconfig_path})")
            api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
            with api_client:
                core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
                outcome = self._train(cluster, core, custom)
        return self._report(outcome)

    def _train(self, cluster: Any, core: Any, custom: Any) -> dict[str, Any]:
        from local.workloads.jobset import elastic_jobset
        from operators.constants import (
            COMPLETED_STEP_RE,
            HEAD_REPLICATED_JOB,
            JOBSET_GROUP,
            JOBSET_PLURAL,
            JOBSET_VERSION,
            LABEL_JOB_INDEX,
            LABEL_JOBSET_NAME,
            LABEL_REPLICATED_JOB_NAME,
            WORKER_REPLICATED_JOB,
        )

        args = self.args
        keys = [
            f"base_output_directory={self.output}",
            f"run_name={self.run_name}",
            f"steps={args.steps}",
            f"checkpoint_period={args.checkpoint_period}",
            f"num_slices={args.slices}",
            "enable_checkpointing=true",
            "enable_single_controller=true",
            "elastic_enabled=true",
            "elastic_timeout_seconds=120",
            "elastic_max_retries=10",
            "elastic_poll_interval_seconds=0.2",
        ]
        manifest = elastic_jobset(self.run_name, keys, slices=args.slices)
        custom.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, manifest)
        say(f"created JobSet {self.run_name}: 1 pathways-head (trainer) + {args.slices} worker slices")

        def pods_of(replicated_job: str) -> list[Any]:
            selector = f"{LABEL_JOBSET_NAME}={self.run_name},{LABEL_REPLICATED_JOB_NAME}={replicated_job}"
            items: list[Any] = core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
            return items

        head = self._wait("the trainer pod", lambda: (pods_of(HEAD_REPLICATED_JOB) or [None])[0])
        head_name = head.metadata.name

        def head_log() -> str:
            response = core.read_namespaced_pod_log(head_name, NAMESPACE, container="jax-tpu", _preload_content=False)
            return str(response.data.decode("utf-8", errors="replace"))

        def last_step() -> int | None:
            steps = [int(m[1]) for m in COMPLETED_STEP_RE.finditer(head_log())]
            return max(steps) if steps else None

        progress = _Progress()
        self._wait(
            f"step {args.kill_at_step}",
            lambda: progress.show(last_step()) is not None and (last_step() or 0) >= args.kill_at_step,
        )
        seen_workers: dict[str, set[str]] = {}

        def note_workers() -> None:
            for pod in pods_of(WORKER_REPLICATED_JOB):
                seen_workers.setdefault(pod.metadata.labels[LABEL_JOB_INDEX], set()).add(pod.metadata.name)

        note_workers()  # before the fault, so the replacement shows as a second pod
        victim = next(p for p in pods_of(WORKER_REPLICATED_JOB) if p.status.phase == "Running")
        slice_index = victim.metadata.labels[LABEL_JOB_INDEX]
        killed_at = time.time()
        cluster.faults.delete_pod(NAMESPACE, victim.metadata.name)
        say(f"fault: force-deleted worker pod {victim.metadata.name} (slice {slice_index}) at step {last_step()}")

        def finished() -> str | None:
            progress.show(last_step())
            note_workers()
            status = custom.get_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, self.run_name
            ).get("status", {})
            terminal = status.get("terminalState")
            return str(terminal) if terminal else None

        terminal = self._wait("the JobSet to finish", finished)
        jobset = custom.get_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, self.run_name
        )
        head_after = pods_of(HEAD_REPLICATED_JOB)
        return {
            "terminal": terminal,
            "status": jobset.get("status", {}),
            "head_name": head_name,
            "head_same_pod": [p.metadata.uid for p in head_after] == [head.metadata.uid],
            "log": head_log(),
            "killed_at": killed_at,
            "victim": victim.metadata.name,
            "worker_pods": {index: sorted(names) for index, names in sorted(seen_workers.items())},
        }

    def _report(self, outcome: dict[str, Any]) -> int:
        from operators.checkpoints import validate_checkpoints
        from operators.constants import ELASTIC_ATTEMPT_RE, RECOVERY_RECORDS_FILE

        run_dir = self.output / self.run_name
        records_path = run_dir / RECOVERY_RECORDS_FILE
        records = [json.loads(line) for line in records_path.read_text().splitlines()] if records_path.exists() else []
        report = validate_checkpoints(str(run_dir))
        attempts = [int(m[1]) for m in ELASTIC_ATTEMPT_RE.finditer(outcome["log"])]
        status = outcome["status"]

        print()
        print("=" * 72)
        print(f"Recovery report: JobSet {self.run_name}")
        print("=" * 72)
        print(f"JobSet terminal state      : {outcome['terminal']}")
        print(
            f"JobSet restarts            : {status.get('restarts', 0)} (counting toward max: "
            f"{status.get('restartsCountTowardsMax', 0)})"
        )
        print(f"Trainer pod kept           : {'yes, the same pod and process' if outcome['head_same_pod'] else 'no'}")
        print(
            f"Elastic attempts           : {max(attempts) if attempts else 0} "
            f"(in-process recoveries: {max(attempts) - 1 if attempts else 0})"
        )
        for index, names in outcome["worker_pods"].items():
            print(f"Worker pods of slice {index}   : {len(names)} ({len(names) - 1} replaced): {', '.join(names)}")
        for number, record in enumerate(records, 1):
            phases = record.get("phase_seconds", {})
            detected = record["failure_detected_at"] - outcome["killed_at"]
            print(
                f"\nRecovery {number}: {record.get('kind')} of slice(s) {record.get('lost_slices')}, "
                f"outcome {record.get('outcome')}"
            )
            print(f"  kill -> detection        : {detected:8.3f} s")
            print(f"  waiting for slices       : {_seconds(phases.get('wait_for_slices'))}")
            print(f"  preparing the restore    : {_seconds(phases.get('prepare_restore'))}")
            print(f"  restoring step {record.get('step_restored')!s:<9} : {_seconds(phases.get('restore'))}")
            print(
                f"  first step after restore : {_seconds(phases.get('first_step'))} "
                f"(step {record.get('first_step_after_recovery')})"
            )
            total = phases.get("total")
            print(f"  kill -> next step        : {_seconds(None if total is None else total + detected)}")
            print(
                f"  steps lost               : {record.get('steps_lost')} "
                f"(failed at step {record.get('step_at_failure')}, resumed from {record.get('step_restored')})"
            )
        if not records:
            print("\nNo recovery was recorded.")
        target = report.target
        print(
            f"\nCheckpoint validation      : {'valid' if report.valid else 'INVALID'} "
            f"(newest step {report.target_step}, newest valid {report.latest_valid_step}, "
            f"{len(report.steps)} steps checked)"
        )
        if target is not None and not target.valid:
            for finding in target.problems:
                print(f"  problem: {finding}")
        print(f"Run directory              : {run_dir}")
        ok = outcome["terminal"] == "Completed" and report.valid and bool(records)
        final = self.args.steps - 1
        ok = ok and report.latest_valid_step == final
        print(
            f"\nResult: {'OK' if ok else 'FAILED'}: training "
            f"{'reached' if report.latest_valid_step == final else 'did not reach'} step {final} "
            f"with {len(records)} in-process recover{'y' if len(records) == 1 else 'ies'} and "
            f"{status.get('restarts', 0)} JobSet restarts"
        )
        return 0 if ok else 1

    def _wait(self, what: str, probe: Callable[[], T | None]) -> T:
        while time.monotonic() < self.deadline:
            value = probe()
            if value:
                return value
            time.sleep(0.2)
        raise SystemExit(f"elastic-training demo: timed out waiting for {what} (see {self.workdir})")


class _Progress:
    """Prints the training step when it changes, at most every few steps."""

    def __init__(self) -> None:
        self.shown = -1

    def show(self, step: int | None) -> int | None:
        if step is not None and step >= self.shown + 10:
            say(f"training: completed step {step}")
            self.shown = step
        return step


def _seconds(value: float | None) -> str:
    return "     n/a" if value is None else f"{value:8.3f} s"


def say(message: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {message}", flush=True)
