"""The nightly pipeline and the fault drill end to end: real Airflow (``dag.test()``, deferrable operators,
triggers inline), the local cluster over HTTP, the real JAX trainer, evaluation and synthesis workloads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.pipeline_report import PHASES
from tests.support.airflow_dags import states, xcom
from tests.support.repo_dags import repo_dag

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

NIGHTLY_TASKS = {
    "validate_params",
    "arm_slice_failure",
    "pretrain",
    "slice_failure_result",
    "validate_checkpoint",
    "evaluate",
    "gate_on_eval",
    "synthesize",
    "publish_synthetic_dataset",
}


def nightly(root: Path, **conf: Any) -> Any:
    return repo_dag("elastic_training_nightly").test(run_conf={"base_output_directory": str(root), **conf})


def asset_events(dag_run: Any) -> list[tuple[str, dict[str, Any]]]:
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(AssetEvent).filter_by(source_dag_id=dag_run.dag_id, source_run_id=dag_run.run_id).all()
        return [(row.uri, dict(row.extra or {})) for row in rows]


# One nightly run (with a slice failure) read by the tests below: it runs every stage and publishes both assets as
# a run without one does, and the run that continues it (the failed gate) takes the unarmed path. 60 steps and the
# failure after step 25, not the form's 80 and 30: the fault drill DAG's own shape, which leaves the drill as many
# steps to fire in; each stage reads the same final step.
STEPS, FAILURE_AT = 60, 25
FINAL = STEPS - 1


@pytest.fixture(scope="module")
def drilled_run(airflow_db: None, cluster_connection: UpstreamCluster, allowed_root: Path) -> Any:
    return nightly(
        allowed_root,
        run_name="drilled",
        steps=STEPS,
        inject_slice_failure=True,
        failure_at_step=FAILURE_AT,
        failure_slice=1,
    )


def test_nightly_runs_every_stage_and_publishes_both_assets(drilled_run: Any, allowed_root: Path) -> None:
    assert states(drilled_run) == dict.fromkeys(NIGHTLY_TASKS, "success")
    config = xcom(drilled_run, "validate_params")
    assert config["run_directory"].startswith(f"{allowed_root}/drilled-")
    report = xcom(drilled_run, "pretrain")
    assert report["final_step"] == FINAL
    checkpoint = xcom(drilled_run, "validate_checkpoint")
    assert checkpoint["step"] == FINAL and checkpoint["valid"]
    metrics = xcom(drilled_run, "gate_on_eval")
    assert metrics["step"] == FINAL and metrics["passed"] and 0 < metrics["loss"] <= 4.0
    dataset = xcom(drilled_run, "publish_synthetic_dataset")
    assert dataset["samples"] == 16 and dataset["source_step"] == FINAL and dataset["checkpoint"] == checkpoint["path"]
    lines = Path(dataset["samples_file"]).read_text().splitlines()
    assert len(lines) == 16
    events = dict(asset_events(drilled_run))
    assert events[f"file://{config['run_directory']}"]["step"] == FINAL
    synthetic = events[dataset["uri"]]
    assert synthetic["samples"] == 16 and synthetic["source_step"] == FINAL
    assert synthetic["checkpoint"] == checkpoint["path"] and synthetic["path"] == dataset["path"]


def test_nightly_with_a_slice_failure_recovers_in_process_and_reports_it(drilled_run: Any) -> None:
    assert states(drilled_run) == dict.fromkeys(NIGHTLY_TASKS, "success")
    fault = xcom(drilled_run, "slice_failure_result")
    assert fault["armed"] and fault["fired"] and fault["slice"] == 1 and fault["step_seen"] >= FAILURE_AT
    assert "-worker-1-" in fault["pod"]
    report = xcom(drilled_run, "pretrain")
    assert report["final_step"] == FINAL and report["full_restarts"] == 0
    assert report["slice_restarts"] == 1 and report["in_process_recoveries"] == 1
    [recovery] = report["recoveries"]
    assert recovery["complete"] and recovery["failed_step"] >= FAILURE_AT
    assert recovery["steps_lost"] == recovery["failed_step"] - recovery["restored_step"] >= 0
    assert all(recovery["phase_seconds"][phase] is not None for phase in PHASES)
    assert xcom(drilled_run, "validate_checkpoint")["step"] == FINAL
    assert xcom(drilled_run, "publish_synthetic_dataset")["samples"] == 16


def test_a_failed_gate_stops_the_pipeline_with_the_metrics(
    drilled_run: Any, allowed_root: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # Continuing the drilled run explicitly (a manual run otherwise gets its own directory), with its steps and no
    # failure injected: pretraining resumes the finished run (nothing to train) and the gate sees the same
    # checkpoint, now with a threshold it cannot meet.
    drilled = xcom(drilled_run, "validate_params")
    dag_run = nightly(allowed_root, continue_run_name=drilled["run_name"], steps=STEPS, max_eval_loss=0.01)
    assert xcom(dag_run, "validate_params")["run_directory"] == drilled["run_directory"]
    assert xcom(dag_run, "slice_failure_result") == {"armed": False}
    task_states = states(dag_run)
    assert task_states["pretrain"] == "success" and task_states["evaluate"] == "success"
    # MaxText refuses a run already at its target (exit 1): the operator sees it first and launches nothing.
    report = xcom(dag_run, "pretrain")
    assert report["already_at_target"] is True and report["final_step"] == FINAL and report["full_restarts"] == 0
    assert xcom(dag_run, "pretrain", "jobset_name") is None
    assert task_states["gate_on_eval"] == "failed"
    assert task_states["synthesize"] == task_states["publish_synthetic_dataset"] == "upstream_failed"
    metrics = xcom(dag_run, "gate_on_eval", "metrics")
    assert metrics["loss"] > 0.01 and metrics["step"] == FINAL
    assert f"evaluation gate failed: loss {metrics['loss']:.4f} > max_eval_loss 0.01" in capfd.readouterr().out


def test_fault_drill_reports_every_recovery_phase_and_the_steps_lost(
    airflow_db: None, cluster_connection: UpstreamCluster, allowed_root: Path
) -> None:
    dag_run = repo_dag("elastic_training_fault_drill").test(run_conf={"base_output_directory": str(allowed_root)})
    assert set(states(dag_run).values()) == {"success"}
    summary = xcom(dag_run, "recovery_report")
    assert summary["fault"]["fired"] and summary["fault"]["at_step"] == 25 and summary["fault"]["slice"] == 1
    [recovery] = summary["recoveries"]
    assert set(recovery["phases"]) == set(PHASES)
    assert all(isinstance(recovery["phases"][phase], float) for phase in PHASES)
    assert recovery["detection_seconds"] is not None and recovery["detection_seconds"] >= 0
    assert summary["steps_lost"] == recovery["steps_lost"] >= 0
    assert summary["final_step"] == 59 and summary["escalations"] == []
    text = "\n".join(summary["lines"])
    assert "fault: force-deleted worker pod" in text and "recovery 1: in-process" in text
    assert "detection -> slices back" in text and "restore from checkpoint" in text
