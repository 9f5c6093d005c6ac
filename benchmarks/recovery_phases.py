"""Recovery phases side by side: kill -> next step for an in-process recovery and for a full restart of the same run.

    .venv/bin/python -m benchmarks.recovery_phases --repeat 3

One upstream local cluster (:class:`UpstreamCluster`, ``v5e-small``: the real Job and JobSet controllers, the node
agent) and one Airflow database; each repetition runs the same elastic run twice through
``ElasticJobSetOperator`` (``dag.test()`` in a child process, deferrable, ``runtime="local"``), and kills the
worker pod of slice 1 (``kubectl delete pod --grace-period=0 --force``: the node agent kills its processes, the Job
controller counts the pod failed and replaces it) once the trainer has completed ``--kill-step``:

- **in process**: ``max_slice_restarts=3``: the trainer recovers in process (pause-resume) and the operator
  only counts the slice restart;
- **full restart**: ``max_slice_restarts=0``: the same kill spends the slice budget, and the operator deletes
  the JobSet and creates the next one on the same run directory, which resumes from the newest committed step.

Phases, each from the moment the previous one ended (Unix seconds; the kill time is the harness's):

- detection: in process, kill -> ``Elastic event detected`` (the trainer saw it); full restart, kill -> the
  escalation decided (the operator's record ``at``);
- replacement: in process, -> ``Sufficient slices active`` (the slice's pod replaced, scheduled, joined); full
  restart, -> the next incarnation's trainer logs its first line (JobSet deleted and recreated, pods
  scheduled, processes started);
- restore: -> ``restoring from this run's directory step N`` (in the next incarnation for a full restart: JAX
  start, slices joined, the checkpoint found);
- first step: -> the first ``completed step`` after it (the restore read and one step run).

The in-process phases come from the operator's report (``recoveries``, folded from the head pod's log by
:mod:`operators.recovery`); the full restart's from its escalation record and the new head pod's log read
with Kubernetes timestamps. The result is a Markdown table of medians (min-max) and the ratio full / in-process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from elastic_training.operators.constants import (
    COMPLETED_STEP_RE,
    HEAD_MAIN_CONTAINER,
    HEAD_REPLICATED_JOB,
    LABEL_JOBSET_NAME,
    LABEL_REPLICATED_JOB_NAME,
    RESTORING_STEP_RE,
)

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "default"
PHASES = ("detection", "replacement", "restore", "first_step", "total")
MODES = ("in_process", "full_restart")
SMALL_MODEL = {"base_emb_dim": 32, "base_num_decoder_layers": 1, "vocab_size": 32, "max_target_length": 16}
FIRST_LOGICAL_DATE = datetime(2026, 1, 1, tzinfo=UTC)

DAG_TEMPLATE = """\
from datetime import timedelta
from airflow.sdk import DAG
from elastic_training.operators import Budgets, ElasticJobSetOperator, Scale, Training

with DAG({dag_id!r}, schedule=None) as dag:
    ElasticJobSetOperator(
        task_id="pretrain",
        training=Training(
            run_name={run_name!r},
            base_output_directory={base!r},
            steps={steps},
            checkpoint_period={period},
            maxtext_args={maxtext_args!r},
            local_env={local_env!r},
        ),
        scale=Scale(num_slices={slices}),
        budgets=Budgets(
            max_slice_restarts={max_slice_restarts}, max_full_restarts=1, stall_timeout=timedelta(minutes=10)
        ),
        runtime="local",
        deferrable=True,
        poll_interval=1.0,
    )
"""


# -- phases (pure) ------------------------------------------------------------------------------------------------


def _spans(points: Sequence[float | None]) -> dict[str, float | None]:
    """Phase lengths from the kill and the four phase ends (``None`` where a point is missing)."""
    ends = list(points)
    spans: dict[str, float | None] = {}
    for name, start, end in zip(PHASES[:4], ends[:4], ends[1:], strict=True):
        spans[name] = None if start is None or end is None else round(end - start, 3)
    spans["total"] = None if ends[0] is None or ends[4] is None else round(ends[4] - ends[0], 3)
    return spans


def in_process_phases(report: Mapping[str, Any], killed_at: float) -> dict[str, float | None]:
    """The phases of the first in-process recovery in an operator report."""
    recoveries = report.get("recoveries") or []
    if not recoveries:
        raise ValueError("the report has no in-process recovery")
    first = recoveries[0]
    return _spans(
        [
            killed_at,
            first.get("detected_at"),
            first.get("slices_ready_at"),
            first.get("restored_at"),
            first.get("first_step_at"),
        ]
    )


def full_restart_phases(
    report: Mapping[str, Any], killed_at: float, next_head_log: Iterable[tuple[float, str]]
) -> dict[str, float | None]:
    """The phases of the first full restart: its escalation record and the next incarnation's head log."""
    escalations = report.get("escalations") or []
    if not escalations:
        raise ValueError("the report has no full restart")
    started = restoring = first_step = None
    for at, line in next_head_log:
        if started is None:
            started = at
        if restoring is None and RESTORING_STEP_RE.search(line):
            restoring = at
        elif restoring is not None and COMPLETED_STEP_RE.search(line):
            first_step = at
            break
    return _spans([killed_at, float(escalations[0]["at"]), started, restoring, first_step])


def parse_timestamped(text: str) -> list[tuple[float, str]]:
    """``<RFC 3339 time> <line>`` lines (a pod log read with ``timestamps=True``) as (Unix seconds, line)."""
    lines: list[tuple[float, str]] = []
    for raw in text.splitlines():
        stamp, _, line = raw.partition(" ")
        try:
            lines.append((_unix(stamp), line))
        except ValueError:
            continue
    return lines


def _unix(stamp: str) -> float:
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    base = datetime.fromisoformat(whole).replace(tzinfo=UTC).timestamp()
    return base + (float(f"0.{fraction}") if fraction else 0.0)


def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Median per mode and phase over the repetitions, and the ratio full restart / in process."""
    medians: dict[str, dict[str, float | None]] = {}
    for mode in MODES:
        medians[mode] = {}
        for phase in PHASES:
            values = [r["phases"][phase] for r in rows if r["mode"] == mode and r["phases"].get(phase) is not None]
            medians[mode][phase] = round(statistics.median(values), 3) if values else None
    ratio: dict[str, float | None] = {}
    for phase in PHASES:
        inside, full = medians["in_process"][phase], medians["full_restart"][phase]
        ratio[phase] = round(full / inside, 1) if inside and full is not None else None
    medians["ratio"] = ratio
    return medians


def markdown(rows: Sequence[Mapping[str, Any]], command: str) -> str:
    """The results table: median (min-max) seconds per phase, and the ratio."""

    def cell(mode: str, phase: str) -> str:
        values = [r["phases"][phase] for r in rows if r["mode"] == mode and r["phases"].get(phase) is not None]
        if not values:
            return "-"
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    ratios = summary(rows)["ratio"]
    out = [f"`{command}`", "", "| phase | in process s | full restart s | full / in process |", "|---|---|---|---|"]
    for phase in PHASES:
        ratio = ratios[phase]
        out.append(
            f"| {phase.replace('_', ' ')} | {cell('in_process', phase)} | {cell('full_restart', phase)} | "
            f"{'-' if ratio is None else f'{ratio:.1f}x'} |"
        )
    return "\n".join(out) + "\n"


# -- the runs -----------------------------------------------------------------------------------------------------


def dag_source(dag_id: str, run_name: str, base: Path, options: argparse.Namespace, mode: str) -> str:
    """The DAG of one run; the two modes differ only in the slice budget."""
    return DAG_TEMPLATE.format(
        dag_id=dag_id,
        run_name=run_name,
        base=str(base),
        steps=options.steps,
        period=options.period,
        slices=options.slices,
        maxtext_args=SMALL_MODEL,
        max_slice_restarts=3 if mode == "in_process" else 0,
        local_env={"LOCAL_STEP_SECONDS": str(options.step_seconds)},
    )


def head_log(kubeconfig: Path, jobset: str) -> str:
    """The head pod log of ``jobset`` with Kubernetes timestamps."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        core = client.CoreV1Api(api)
        selector = f"{LABEL_JOBSET_NAME}={jobset},{LABEL_REPLICATED_JOB_NAME}={HEAD_REPLICATED_JOB}"
        pods = sorted(
            core.list_namespaced_pod(NAMESPACE, label_selector=selector).items,
            key=lambda p: p.metadata.creation_timestamp,
        )
        if not pods:
            raise RuntimeError(f"no head pod of {jobset}")
        response = core.read_namespaced_pod_log(
            pods[0].metadata.name, NAMESPACE, container=HEAD_MAIN_CONTAINER, timestamps=True, _preload_content=False
        )
        return str(response.data.decode(errors="replace"))
    finally:
        api.close()


def run_once(
    cluster: Any, root: Path, env: dict[str, str], options: argparse.Namespace, mode: str, index: int
) -> dict[str, Any]:
    """One run of ``mode``: the kill, the operator's report, the phases."""
    from tests.support.step_faults import StepFaults, kill_worker

    run_name = f"phases-{'inproc' if mode == 'in_process' else 'full'}-{index}"
    dag_id = run_name.replace("-", "_")
    dag_file = root / "dags" / f"{dag_id}.py"
    dag_file.write_text(dag_source(dag_id, run_name, root / "runs", options, mode))
    result_path = root / f"{run_name}.result.json"
    logical_date = (FIRST_LOGICAL_DATE + timedelta(minutes=2 * index + MODES.index(mode))).isoformat()
    command = [sys.executable, "-m", "benchmarks.chaos", "_task", str(dag_file), logical_date, str(result_path)]
    faults = StepFaults(cluster, run_name).at(options.kill_step, kill_worker(1))
    with faults, (root / f"{run_name}.log").open("wb") as log:
        subprocess.run(
            command,
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=options.run_timeout,
            check=False,
        )
    killed_at = faults.faults[0].fired_at
    result = json.loads(result_path.read_text()) if result_path.exists() else {}
    report = (result.get("xcom") or {}).get("return_value") or {}
    row: dict[str, Any] = {"mode": mode, "run": index, "state": result.get("state"), "killed_at": killed_at}
    if killed_at is None or result.get("state") != "success":
        row["phases"] = {}
        row["error"] = (
            f"the run ended {result.get('state')!r} (kill fired: {killed_at is not None}); see {run_name}.log"
        )
        return row
    if mode == "in_process":
        row["phases"] = in_process_phases(report, killed_at)
    else:
        next_jobset = report["jobsets"][1]
        row["phases"] = full_restart_phases(
            report, killed_at, parse_timestamped(head_log(cluster.kubeconfig_path, next_jobset))
        )
    row["steps_lost"] = report.get("steps_lost")
    row["full_restarts"] = report.get("full_restarts")
    row["slice_restarts"] = report.get("slice_restarts")
    _delete_jobsets(cluster, report.get("jobsets") or [])
    return row


def _delete_jobsets(cluster: Any, names: Sequence[str]) -> None:
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        custom = client.CustomObjectsApi(api)
        for name in names:
            try:
                custom.delete_namespaced_custom_object(
                    "jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets", name, propagation_policy="Foreground"
                )
            except ApiException as error:
                if error.status != 404:
                    raise
        core = client.CoreV1Api(api)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pods = core.list_namespaced_pod(NAMESPACE).items
            if not any((p.metadata.labels or {}).get(LABEL_JOBSET_NAME) in names for p in pods):
                return
            time.sleep(0.2)
    finally:
        api.close()


def run_benchmark(options: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    """Every repetition of both modes on one cluster and one Airflow database."""
    from benchmarks.chaos import operators_connection
    from elastic_training.local.upstream_cluster import UpstreamCluster

    (root / "dags").mkdir(parents=True, exist_ok=True)
    (root / "runs").mkdir(exist_ok=True)
    rows: list[dict[str, Any]] = []
    with UpstreamCluster(root / "cluster", description="v5e-small") as cluster:
        env = {
            **os.environ,
            "AIRFLOW_HOME": str(root / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
            "AIRFLOW__ELASTIC_TRAINING__DEFER_SETTLE_SECONDS": "0",
            "JAX_PLATFORMS": "cpu",
            "AIRFLOW_CONN_KUBERNETES_DEFAULT": operators_connection(cluster),
        }
        subprocess.run(
            [sys.executable, "-m", "benchmarks.chaos", "_resetdb"],
            cwd=REPO,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        for index in range(options.repeat):
            for mode in MODES:
                row = run_once(cluster, root, env, options, mode, index)
                print(f"[phases] {mode} run {index}: {json.dumps(row)}", flush=True)
                rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Run the repetitions and print the table (``--out`` keeps the rows, logs and Airflow home)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="repetitions of each mode")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--period", type=int, default=10, help="checkpoint period")
    parser.add_argument("--slices", type=int, default=2)
    parser.add_argument("--kill-step", type=int, default=25)
    parser.add_argument("--step-seconds", type=float, default=0.2, help="LOCAL_STEP_SECONDS: each step also sleeps")
    parser.add_argument("--run-timeout", type=float, default=600.0)
    parser.add_argument("--out", type=Path, default=None)
    options = parser.parse_args(argv)
    root = (options.out or Path(tempfile.mkdtemp(prefix="recovery-phases-"))).resolve()
    rows = run_benchmark(options, root)
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    command = (
        f"python -m benchmarks.recovery_phases --repeat {options.repeat} --steps {options.steps} "
        f"--period {options.period} --slices {options.slices} --kill-step {options.kill_step} "
        f"--step-seconds {options.step_seconds}"
    )
    print(markdown(rows, command))
    print(json.dumps(summary(rows)))
    print(f"rows, logs: {root}")
    return 0 if all(r.get("phases") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
