"""The Airflow half of `elastic-training demo`: run ``elastic_training_nightly`` with ``dag.test()`` and report.

Started by cli/demo.py with a private Airflow environment (``AIRFLOW_HOME``, SQLite, the repository's
``dags/`` as the DAG folder, the local cluster as ``kubernetes_default``). It creates the metadata DB,
runs the DAG once with the given trigger-form values, prints a progress line whenever a task changes
state or training passes a few steps, then a report built from what the tasks left in XCom and the task
instances' times. Airflow's own log goes to ``--log``; this process writes only the demo's lines.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from elastic_training.operators.pipeline_config import PipelineConfig
from elastic_training.operators.pipeline_report import counted, recovery_summary, share, stage_lines, time_summary
from elastic_training.operators.run_report import RunReport

DAG_ID = "elastic_training_nightly"
STAGES = (
    "validate_params",
    "arm_slice_failure",
    "pretrain",
    "slice_failure_result",
    "validate_checkpoint",
    "evaluate",
    "gate_on_eval",
    "synthesize",
    "publish_synthetic_dataset",
)


class Console:
    """The demo's own output, on the terminal's stdout even after fd 1 is pointed at Airflow's log."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def say(self, message: str) -> None:
        with self.lock:
            self.stream.write(f"[demo {time.strftime('%H:%M:%S')}] {message}\n")
            self.stream.flush()

    def print(self, text: str) -> None:
        with self.lock:
            self.stream.write(text + "\n")
            self.stream.flush()


def _pod_log(core: Any, name: str, **bounds: Any) -> str:
    """A pod's log as text: kubernetes 36's preloaded log is the repr of its bytes (kubernetes-client/python #2596)."""
    response = core.read_namespaced_pod_log(name, "default", _preload_content=False, **bounds)
    return str(response.data.decode("utf-8", errors="replace"))


def _redirect_output(log_path: str) -> Console:
    console = Console(os.fdopen(os.dup(1), "w", buffering=1))
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    return console


class Progress(threading.Thread):
    """Polls the task instances of the running DAG run and the trainer's log; says what changed."""

    def __init__(self, console: Console, kubeconfig: str) -> None:
        super().__init__(name="demo-progress", daemon=True)
        self.console = console
        self.kubeconfig = kubeconfig
        self.stop = threading.Event()
        self.states: dict[str, str] = {}
        self.shown_step = -1
        self.drill_shown = False

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                self._tasks()
                # Not gated on "running"/"deferred": dag.test() runs the trigger inline and the progress
                # thread may never see those states committed; the head pod exists only while it trains.
                if self.states.get("pretrain") not in _FINISHED:
                    self._training()
            except Exception:  # progress is a courtesy: never let it stop the demo
                continue

    def _tasks(self) -> None:
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session

        with create_session() as session:
            rows = session.query(TaskInstance.task_id, TaskInstance.state).filter_by(dag_id=DAG_ID).all()
        for task_id, raw in rows:
            state = str(getattr(raw, "value", raw))
            if state in ("None", "scheduled", "queued", "up_for_reschedule") or self.states.get(task_id) == state:
                continue
            if not (task_id in self.states and state == "deferred" and self.states[task_id] == "running"):
                self.console.say(f"{task_id}: {_STATE_WORDS.get(state, state)}")
            self.states[task_id] = state

    def _training(self) -> None:
        from kubernetes import client, config

        from elastic_training.operators.constants import (
            COMPLETED_STEP_RE,
            HEAD_MAIN_CONTAINER,
            LABEL_REPLICATED_JOB_NAME,
            LABEL_STAGE,
        )
        from elastic_training.operators.slice_drill import parse_result

        api = config.new_client_from_config(config_file=self.kubeconfig)
        try:
            core = client.CoreV1Api(api)
            if not self.drill_shown:
                for pod in core.list_namespaced_pod("default", label_selector=f"{LABEL_STAGE}=drill").items:
                    if pod.status and pod.status.phase in ("Succeeded", "Failed"):
                        result = parse_result(_pod_log(core, pod.metadata.name)) or {}
                        self.drill_shown = True
                        if result.get("fired"):
                            self.console.say(
                                f"drill: force-deleted worker pod {result.get('pod')} after step "
                                f"{result.get('step_seen')}; the trainer recovers in-process"
                            )
            pods = core.list_namespaced_pod("default", label_selector=f"{LABEL_REPLICATED_JOB_NAME}=pathways-head")
            running = [p for p in pods.items if p.status and p.status.phase == "Running"]
            if not running:
                return
            text = _pod_log(core, running[-1].metadata.name, container=HEAD_MAIN_CONTAINER, tail_lines=20)
        finally:
            api.close()
        steps = [int(m[1]) for m in COMPLETED_STEP_RE.finditer(text)]
        if steps and max(steps) >= self.shown_step + 10:
            self.shown_step = max(steps)
            self.console.say(f"pretrain: completed step {self.shown_step}")


_FINISHED = frozenset({"success", "failed", "upstream_failed", "skipped"})
_STATE_WORDS = {
    "running": "running",
    "deferred": "waiting in its trigger",
    "success": "done",
    "failed": "FAILED",
    "upstream_failed": "skipped (an upstream task failed)",
    "skipped": "skipped",
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m elastic_training.cli.demo_pipeline")
    parser.add_argument("--conf", required=True, help="the run's trigger-form values (JSON)")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--log", required=True, help="where Airflow's own output goes")
    args = parser.parse_args(argv)
    console = _redirect_output(args.log)
    try:
        return _main(console, json.loads(args.conf), args)
    except KeyboardInterrupt:
        console.say("interrupted")
        # Airflow's in-process API and trigger threads would hold the exit; the parent stops the cluster.
        os._exit(130)


def _main(console: Console, conf: dict[str, Any], args: argparse.Namespace) -> int:
    from airflow.configuration import conf as airflow_conf

    url = airflow_conf.get("database", "sql_alchemy_conn")
    backend = "PostgreSQL" if url.startswith("postgresql") else "SQLite"
    console.say(f"creating Airflow's metadata database ({backend}) and loading the DAGs")
    from airflow.dag_processing.dagbag import DagBag
    from airflow.utils import db

    db.resetdb()
    # dag.test() runs each task in this process, where the task runner's main(), which initialises Airflow's stats
    # from [metrics], never runs: do what it does, so the operators' metrics reach the demo's StatsD.
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    legacy = airflow_conf.getboolean("metrics", "legacy_names_on")
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=legacy)
    bag = DagBag(dag_folder=airflow_conf.get("core", "dags_folder"))
    if DAG_ID not in bag.dags:
        console.say(f"the DAG {DAG_ID} did not load: {bag.import_errors}")
        return 1
    console.say(
        f"running {DAG_ID} with dag.test(): {conf['steps']} steps on {conf['num_slices']} slices, "
        f"worker pod of slice {conf['failure_slice']} force-deleted after step {conf['failure_at_step']}"
    )
    progress = Progress(console, args.kubeconfig)
    progress.start()
    try:
        dag_run = bag.dags[DAG_ID].test(run_conf=conf)
    finally:
        progress.stop.set()
        progress.join(timeout=5)
    report, ok = build_report(dag_run)
    console.print(report)
    return 0 if ok else 1


def _xcom(dag_run: Any, task_id: str, key: str = "return_value") -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel)
            .filter_by(dag_id=dag_run.dag_id, run_id=dag_run.run_id, task_id=task_id, key=key)
            .one_or_none()
        )
        return None if row is None else XComModel.deserialize_value(row)


def _instances(dag_run: Any) -> dict[str, tuple[str, float | None]]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(TaskInstance).filter_by(dag_id=dag_run.dag_id, run_id=dag_run.run_id).all()
        return {
            ti.task_id: (str(getattr(ti.state, "value", ti.state)), ti.duration if ti.duration is not None else None)
            for ti in rows
        }


@dataclass(frozen=True)
class _Outputs:
    """What the stages left in XCom, read once for the report."""

    values: dict[str, Any]
    config: PipelineConfig | None
    pretrain: RunReport | None
    drill: dict[str, Any]
    checkpoint: dict[str, Any]
    metrics: dict[str, Any]
    dataset: dict[str, Any]
    refused: Any


def _outputs(dag_run: Any) -> _Outputs:
    values = {task_id: _xcom(dag_run, task_id) for task_id in STAGES}
    pretrain_json = values["pretrain"] or _xcom(dag_run, "pretrain", "report")
    return _Outputs(
        values=values,
        config=PipelineConfig.from_json(values["validate_params"]) if values["validate_params"] else None,
        pretrain=RunReport.from_json(pretrain_json) if isinstance(pretrain_json, Mapping) else None,
        drill=values["slice_failure_result"] or {},
        checkpoint=values["validate_checkpoint"] or {},
        metrics=values["gate_on_eval"] or _xcom(dag_run, "gate_on_eval", "metrics") or {},
        dataset=values["publish_synthetic_dataset"] or {},
        refused=_xcom(dag_run, "validate_params", "refused"),
    )


def _stage_results(out: _Outputs) -> dict[str, str]:
    """Each stage's one-line result, by task id."""
    config, pretrain, drill, checkpoint, metrics = out.config, out.pretrain, out.drill, out.checkpoint, out.metrics
    armed = out.values["arm_slice_failure"] or {}
    return {
        "validate_params": (
            f"run {config.run_name}: {config.steps} steps, {config.num_slices} slices, {config.runtime} runtime"
            if config
            else f"refused: {out.refused}"
        ),
        "arm_slice_failure": (
            f"drill pod {armed.get('jobset_name')} armed for step {armed.get('at_step')}"
            if armed.get("armed")
            else "no drill"
        ),
        "pretrain": (
            f"JobSet {pretrain.jobset_name}: final step {pretrain.final_step} of "
            f"{pretrain.target_step}, goodput {share(pretrain.goodput)}"
            if pretrain
            else ""
        ),
        "slice_failure_result": (
            f"deleted {drill.get('pod')} after step {drill.get('step_seen')}"
            if drill.get("fired")
            else str(drill.get("reason") or "no drill")
        ),
        "validate_checkpoint": (
            f"step {checkpoint.get('step')} valid: {checkpoint.get('files')} files, {checkpoint.get('bytes')} bytes"
            if checkpoint
            else ""
        ),
        "evaluate": f"JobSet {(out.values['evaluate'] or {}).get('jobset_name', '')}",
        "gate_on_eval": (
            f"loss {metrics.get('loss', float('nan')):.4f} (max {metrics.get('max_eval_loss')}), "
            f"perplexity {metrics.get('perplexity', float('nan')):.3f}"
            if metrics
            else ""
        ),
        "synthesize": f"JobSet {(out.values['synthesize'] or {}).get('jobset_name', '')}",
        "publish_synthetic_dataset": (f"Asset event {out.dataset.get('uri')}" if out.dataset else ""),
    }


def _pretraining_lines(out: _Outputs) -> list[str]:
    """The recovery timeline, then pretraining's time and goodput."""
    lines = ["", "Recovery timeline:"]
    if out.pretrain is None:
        return [*lines, "  pretraining left no report"]
    summary = recovery_summary(out.pretrain, out.drill)
    lines += [f"  {line}" for line in summary["lines"]]
    escalations = summary["escalations"]
    lines.append(f"  escalations: {len(escalations)}" + ("" if escalations else " (no full restart was needed)"))
    lines += ["", "Pretraining's time and goodput:"]
    queue = out.config.queue_name if out.config else None
    return lines + [f"  {line}" for line in time_summary(out.pretrain, queue)]


def _closing_lines(out: _Outputs, ok: bool) -> list[str]:
    """The outputs the later stages made, and the one-line result."""
    checkpoint, metrics, dataset, pretrain = out.checkpoint, out.metrics, out.dataset, out.pretrain
    recoveries = pretrain.in_process_recoveries if pretrain else 0
    return [
        "",
        f"Validated checkpoint : step {checkpoint.get('step')} at {checkpoint.get('path')}",
        f"Evaluation metrics   : {metrics.get('task')} loss {metrics.get('loss')}, perplexity "
        f"{metrics.get('perplexity')}, accuracy {metrics.get('accuracy')}% ({metrics.get('path')})",
        f"Synthetic samples    : {dataset.get('samples')} in {dataset.get('samples_file')}",
        "",
        f"Result: {'OK' if ok else 'FAILED'}: "
        + (
            f"every stage succeeded; {counted(recoveries, 'in-process recovery', 'in-process recoveries')}, "
            f"{counted(pretrain.steps_lost if pretrain else 0, 'step')} lost"
            if ok
            else "not every stage succeeded (Airflow's log has the details)"
        ),
    ]


def build_report(dag_run: Any) -> tuple[str, bool]:
    """The demo's report and whether every stage succeeded."""
    instances = _instances(dag_run)
    out = _outputs(dag_run)
    results = _stage_results(out)
    stages = [
        (task_id, instances.get(task_id, ("not run", None))[0], instances.get(task_id, ("", None))[1], results[task_id])
        for task_id in STAGES
    ]
    ok = all(state == "success" for _, state, _, _ in stages)
    lines = ["", "=" * 78, f"Pipeline report: {DAG_ID}, run {dag_run.run_id}", "=" * 78, "Stages:"]
    lines += stage_lines(stages)
    return "\n".join([*lines, *_pretraining_lines(out), *_closing_lines(out, ok)]), ok


if __name__ == "__main__":
    sys.exit(main())
