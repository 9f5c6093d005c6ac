"""`JobSetOperator` end to end: a one-job JobSet on the local cluster that must complete, through ``dag.test()``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from elastic_training.local.upstream_cluster import UpstreamCluster
from tests.support.airflow_dags import states, xcom
from tests.support.alert_notifier import FileNotifier, told
from tests.support.jobset_dags import one_job_dag
from tests.support.lifecycle_runs import _StateStore, _TaskInstance


@pytest.mark.slow
def test_a_job_that_completes_succeeds(airflow_db: None, cluster_connection: UpstreamCluster) -> None:
    dag = one_job_dag(
        "plain_ok", ["python", "-c", "import os; print('evaluated', os.environ['EXTRA'])"], env={"EXTRA": "1"}
    )
    dag_run = dag.test()
    assert states(dag_run) == {"job": "success"}
    result = xcom(dag_run, "job")
    assert result["stage"] == "evaluate" and result["jobset_name"].startswith("plain-ok-")
    assert xcom(dag_run, "job", "jobset_name") == result["jobset_name"]
    # Timed to the Completed condition the real JobSet controller stamped (whole seconds, so before the task's
    # return; never before the task's start, which a JobSet done in under a second may be stamped before): the
    # time Airflow took to resume the task after it is told apart. Not folded, it would read 0.0.
    assert result["seconds"] >= 0 and result["resume_seconds"] > 0, result


@pytest.mark.slow
def test_a_job_that_fails_fails_with_its_reason_and_log(airflow_db: None, cluster_connection: UpstreamCluster) -> None:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    dag = one_job_dag("plain_bad", ["python", "-c", "import sys; print('loss is nan'); sys.exit(3)"])
    dag_run = dag.test()
    assert states(dag_run) == {"job": "failed"}
    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id="plain_bad", run_id=dag_run.run_id).one()
        assert ti.try_number == 1  # a failed job is a failure, not something to retry blindly


def test_a_shell_string_is_refused_at_parse_time() -> None:
    from elastic_training.operators import JobSetOperator

    with pytest.raises(ValueError, match="not a shell string"):
        JobSetOperator(task_id="x", name="x", image="local", command="python -c 'rm -rf /'", runtime="local")


def test_bad_runtime_is_refused() -> None:
    from elastic_training.operators import JobSetOperator

    with pytest.raises(ValueError, match="runtime"):
        JobSetOperator(task_id="x", name="x", image="local", command=["true"], runtime="k8s")


def _true_job(task_id: str, **extra: Any) -> Any:
    """A `JobSetOperator` of the local runtime running ``true``, built as a DAG file would."""
    from elastic_training.operators import JobSetOperator

    return JobSetOperator(task_id=task_id, name=task_id, image="local", command=["true"], runtime="local", **extra)


def test_container_limits_go_in_container_resources_and_render_on_the_container() -> None:

    operator = _true_job("x", container_resources={"google.com/tpu": "4", "memory": "16Gi"})
    assert operator.build_job().resources == {"google.com/tpu": "4", "memory": "16Gi"}


def test_kubernetes_limits_passed_as_airflow_resources_are_refused_with_the_right_name() -> None:
    from elastic_training.operators import JobSetOperator

    with pytest.raises(ValueError, match=r"got google.com/tpu; pass the container's limits as container_resources"):
        JobSetOperator(task_id="x", name="x", image="local", command=["true"], resources={"google.com/tpu": "4"})
    airflow_own = JobSetOperator(task_id="y", name="y", image="local", command=["true"], resources={"cpus": 2})
    assert airflow_own.resources is not None and airflow_own.resources.cpus.qty == 2


def _stage_event(state: Any, status: str, reason: str = "", message: str = "") -> dict[str, Any]:
    return {
        "status": status,
        "reason": reason,
        "message": message,
        "name": "eval-1",
        "namespace": "default",
        "state": state.to_json(),
    }


def test_a_notice_is_told_once_and_the_stage_waits_again(tmp_path: Path) -> None:
    """The trigger's ``notice`` (a preemption seen while the stage waited) is told to the notifiers and the stage
    defers again, its trigger knowing what was told; the same news again (a resumed try) is not told twice; a
    stage without notifiers is never asked to wait for news. Driven as Airflow's task runner resumes a deferred
    task (the event to ``execute_complete``, ``TaskDeferred`` for a new deferral)."""
    from airflow.sdk.exceptions import TaskDeferred

    from elastic_training.operators.alerts import Alerts, Seen
    from elastic_training.operators.jobset_operator import ALERTED_KEY
    from elastic_training.operators.observations import MonitorState
    from elastic_training.operators.policy import JobSetPhase
    from elastic_training.operators.triggers import EventStatus, JobSetTrigger

    inbox = tmp_path / "inbox.jsonl"
    now = time.time()
    state = MonitorState(jobset_uid="u-1", started_at=now - 60)
    state.digest.admitted(now - 50)
    state.phase = JobSetPhase.SUSPENDED
    state.digest.queued(now - 5, preempted=True, reason="Preempted to accommodate a higher priority Workload")
    operator = _true_job("evaluate", alerts=Alerts((FileNotifier(path=str(inbox)),), queued_after=600))
    store = _StateStore()
    context = {"ti": _TaskInstance("evaluate", "manual__1"), "task_state_store": store}
    for _ in range(2):
        with pytest.raises(TaskDeferred) as deferred:
            operator.execute_complete(context, _stage_event(state, EventStatus.NOTICE.value, "preempted"))  # type: ignore[arg-type]
        trigger = deferred.value.trigger
        assert isinstance(trigger, JobSetTrigger) and trigger.uid == "u-1"
        assert trigger.alerts is not None and Seen.from_json(trigger.alerts["seen"], jobset_uid="u-1").preemptions == 1
        assert trigger.alerts["queued_after"] == 600
        assert MonitorState.from_json(trigger.state).digest.preempted_spans == 1  # the watch goes on where it was
    [record] = told(inbox)  # told once, though the news came twice
    assert record["alert"]["event"] == "preempted" and record["alert"]["task_id"] == "evaluate"
    assert store[ALERTED_KEY]["preemptions"] == 1

    quiet = _true_job("evaluate")
    with pytest.raises(TaskDeferred) as deferred:
        quiet.execute_complete(context, _stage_event(state, EventStatus.NOTICE.value, "preempted"))  # type: ignore[arg-type]
    assert isinstance(deferred.value.trigger, JobSetTrigger) and deferred.value.trigger.alerts is None
