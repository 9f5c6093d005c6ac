"""``checkpoint_period="auto"`` on the local cluster: ``ElasticJobSetOperator`` through ``dag.test()`` reads its
failure history (an Airflow Variable), picks the period before launch, runs MaxText with it, and reports the period,
the goodput the model predicted and the goodput the run got; the run joins the history.

The histories are written as the operator writes them (``FailureHistory.render``): three runs of this DAG's shape
(its fingerprint) with a failure every second of training against three runs with none, with the step and save times
such tiny runs measure; the choice is the one ``auto_period`` makes of that history for this run's shape and slices.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.advice import auto_period, shape_fingerprint
from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION
from elastic_training.operators.failure_history import FailureHistory, RunRecord
from elastic_training.operators.spec import ElasticRunSpec
from tests.support.airflow_dags import dag_from_source, states, xcom
from tests.support.history_variables import stored_history
from tests.support.step_faults import StepFaults, kill_worker

pytestmark = pytest.mark.slow

STEPS = 24
# The shape of auto_dag's run: the local runtime, no TPU type or topology, MaxText's default config, no extra keys.
SHAPE = shape_fingerprint(ElasticRunSpec("x", "/x", steps=STEPS, checkpoint_period=1, num_slices=2, runtime="local"))
HEADER = """\
from datetime import timedelta
from airflow.sdk import DAG
from elastic_training.operators import ElasticJobSetOperator
"""


def auto_dag(dag_id: str, base: Path, key: str) -> Any:
    body = f"""
    with DAG({dag_id!r}, schedule=None) as dag:
        ElasticJobSetOperator(
            task_id="pretrain",
            run_name={dag_id.replace("_", "-")!r},
            base_output_directory={str(base)!r},
            steps={STEPS},
            checkpoint_period="auto",
            num_slices=2,
            runtime="local",
            maxtext_args={{}},
            max_full_restarts=1,
            stall_timeout=timedelta(minutes=6),
            deferrable=True,
            poll_interval=1.0,
            local_env={{"LOCAL_STEP_SECONDS": "0.1"}},
            failure_history_key={key!r},
        )
    """
    return dag_from_source(dag_id, body, HEADER)


def seeded(key: str, *, failures: int) -> FailureHistory:
    from airflow.models import Variable

    history = FailureHistory()
    for n in range(3):
        history = history.with_run(
            RunRecord(
                run_id=f"seed-{n}",
                ended_at=1_796_000_000.0 + n,
                slices=2,
                wall_seconds=90.0,  # queued and retried too: not the exposure
                training_seconds=60.0,
                failures_total=failures,
                mean_step_seconds=0.1,
                checkpoint_save_seconds=0.2,
                recovery_seconds=2.0,
                checkpoint_period=10,
                fingerprint=SHAPE,
            )
        )
    Variable.set(key, history.render())
    return history


def trainer_args(cluster: UpstreamCluster, name: str) -> list[str]:
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        jobset = client.CustomObjectsApi(api).get_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, name
        )
    finally:
        api.close()
    head = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "pathways-head")
    container = next(c for c in head["template"]["spec"]["template"]["spec"]["containers"] if c["name"] == "jax-tpu")
    return [*container.get("command", []), *container.get("args", [])]


def test_auto_picks_a_shorter_period_after_frequent_failures(
    airflow_db: None, cluster_connection: UpstreamCluster, tmp_path: Path
) -> None:
    chosen: dict[str, dict[str, Any]] = {}
    for label, failures in (("stormy", 60), ("calm", 0)):
        key = f"elastic_training_failure_history.auto-{label}"
        expected = auto_period(
            seeded(key, failures=failures).runs, steps=STEPS, fallback=10, fingerprint=SHAPE, slices=2
        )
        dag_run = auto_dag(f"auto_{label}", tmp_path, key).test()
        assert states(dag_run) == {"pretrain": "success"}
        report = xcom(dag_run, "pretrain")
        # A run with no fault reports none (tests/dags/test_pipelines.py's nightly is a drilled one).
        assert report["slice_restarts"] == 0 and report["recoveries"] == [] and report["full_restarts"] == 0
        choice = report["checkpoint_period_choice"]
        lower, upper = choice["bounds"]
        assert lower <= choice["period"] <= upper == STEPS // 2
        assert report["checkpoint_period"] == choice["period"]  # the run trained with it
        assert f"checkpoint_period={choice['period']}" in trainer_args(cluster_connection, report["jobset_name"])
        assert choice["runs"] == 3 and choice["predicted_goodput"] is not None and choice["fingerprint"] == SHAPE
        assert choice == {**expected.to_json(), "achieved_goodput": report["goodput"]}  # this shape, 2 slices
        assert choice["achieved_goodput"] == report["goodput"] is not None
        # The run joined the history, with the period it trained with.
        history = stored_history(key)  # the seeded single value moved to per-run Variables, the run's beside
        assert len(history.runs) == 4 and history.runs[-1].checkpoint_period == choice["period"]
        assert history.runs[-1].fingerprint == SHAPE and history.runs[-1].training_seconds  # what auto reads next
        chosen[label] = choice
    assert chosen["stormy"]["period"] < chosen["calm"]["period"] == STEPS // 2
    assert (
        chosen["calm"]["clamped"] == "run_length"
        and chosen["stormy"]["mtbf_seconds"] < chosen["calm"]["mtbf_seconds"] / 10
    )


REPLAN_STEPS = 40
REPLAN_SHAPE = shape_fingerprint(
    ElasticRunSpec("x", "/x", steps=REPLAN_STEPS, checkpoint_period=1, num_slices=2, runtime="local")
)


def test_a_run_failing_sooner_than_planned_restarts_once_with_a_shorter_period_spending_no_full_restart(
    airflow_db: None, cluster_connection: UpstreamCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 55's replan through the real trigger: the history plans a failure every ~90 s of training (one in each
    of three runs' two minutes, period 12); the run's first slice failure, seconds into training, makes its rate
    higher than planned (a shorter period is called for up to ~45 s in, so a loaded machine's slow start still
    replans). With ``auto_replan_factor`` at 1.01 and the restart's downtime at 0 (so one failure is enough here; a
    night takes a storm at the default 3), the trigger wakes the operator, which recreates the JobSet with the
    shorter period: no full restart spent, the report and the history say why and from which period."""
    from airflow.models import Variable

    monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__AUTO_REPLAN_FACTOR", "1.01")
    monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__AUTO_REPLAN_RESTART_SECONDS", "0")
    key = "elastic_training_failure_history.auto-replan"
    history = FailureHistory()
    for n in range(3):
        history = history.with_run(
            RunRecord(
                run_id=f"seed-{n}", ended_at=1_796_000_000.0 + n, slices=2, wall_seconds=90.0,
                training_seconds=120.0, failures_total=1, mean_step_seconds=0.5, checkpoint_save_seconds=0.2,
                recovery_seconds=2.0, checkpoint_period=10, fingerprint=REPLAN_SHAPE,
            )
        )  # fmt: skip
    Variable.set(key, history.render())
    planned = auto_period(history.runs, steps=REPLAN_STEPS, fallback=10, fingerprint=REPLAN_SHAPE, slices=2)
    body = f"""
    with DAG("auto_replan", schedule=None) as dag:
        ElasticJobSetOperator(
            task_id="pretrain", run_name="auto-replan", base_output_directory={str(tmp_path)!r},
            steps={REPLAN_STEPS}, checkpoint_period="auto", num_slices=2, runtime="local", maxtext_args={{}},
            max_full_restarts=1, stall_timeout=timedelta(minutes=6), deferrable=True, poll_interval=1.0,
            local_env={{"LOCAL_STEP_SECONDS": "0.5"}}, failure_history_key={key!r},
        )
    """  # fmt: skip
    with StepFaults(cluster_connection, "auto-replan") as faults:
        faults.at(4, kill_worker(1))
        dag_run = dag_from_source("auto_replan", body, HEADER).test()
    assert faults.fired == [4], faults
    assert states(dag_run) == {"pretrain": "success"}
    report = xcom(dag_run, "pretrain")
    replan = report["checkpoint_period_replan"]
    assert report["checkpoint_period_choice"]["period"] == planned.period == replan["from_period"]
    assert 1 <= replan["period"] < planned.period == replan["from_period"]
    assert report["checkpoint_period"] == replan["period"]  # the second JobSet trained with it
    assert f"checkpoint_period={replan['period']}" in trainer_args(cluster_connection, report["jobset_name"])
    assert "1 slice failure in" in replan["reason"] and "no full restart spent" in replan["reason"]
    [escalation] = report["escalations"]
    assert escalation["reason"] == "checkpoint_period_replan" and escalation["replan"] is True
    assert report["full_restarts"] == 0 and len(report["jobsets"]) == 2
    assert report["final_step"] == REPLAN_STEPS - 1
    # The history keeps the run with auto's own period and the one failure (the replan's restart is none).
    newest = stored_history(key).runs[-1]
    assert newest.checkpoint_period == planned.period and newest.failures_total == 1
