"""`JobSetOperator` end to end: a one-job JobSet on the local cluster that must complete, through ``dag.test()``."""

from __future__ import annotations

import pytest

from elastic_training.local.cluster import LocalCluster
from tests.support.airflow_dags import states, xcom
from tests.support.jobset_dags import one_job_dag


@pytest.mark.slow
def test_a_job_that_completes_succeeds(airflow_db: None, cluster_connection: LocalCluster) -> None:
    dag = one_job_dag(
        "plain_ok", ["python", "-c", "import os; print('evaluated', os.environ['EXTRA'])"], env={"EXTRA": "1"}
    )
    dag_run = dag.test()
    assert states(dag_run) == {"job": "success"}
    result = xcom(dag_run, "job")
    assert result["stage"] == "evaluate" and result["jobset_name"].startswith("plain-ok-")
    assert xcom(dag_run, "job", "jobset_name") == result["jobset_name"]


@pytest.mark.slow
def test_a_job_that_fails_fails_with_its_reason_and_log(airflow_db: None, cluster_connection: LocalCluster) -> None:
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


def test_container_limits_go_in_container_resources_and_render_on_the_container() -> None:
    from elastic_training.operators import JobSetOperator

    operator = JobSetOperator(
        task_id="x",
        name="x",
        image="local",
        command=["true"],
        runtime="local",
        container_resources={"google.com/tpu": "4", "memory": "16Gi"},
    )
    assert operator.build_job().resources == {"google.com/tpu": "4", "memory": "16Gi"}


def test_kubernetes_limits_passed_as_airflow_resources_are_refused_with_the_right_name() -> None:
    from elastic_training.operators import JobSetOperator

    with pytest.raises(ValueError, match=r"got google.com/tpu; pass the container's limits as container_resources"):
        JobSetOperator(task_id="x", name="x", image="local", command=["true"], resources={"google.com/tpu": "4"})
    airflow_own = JobSetOperator(task_id="y", name="y", image="local", command=["true"], resources={"cpus": 2})
    assert airflow_own.resources is not None and airflow_own.resources.cpus.qty == 2
