"""The run directory is per DAG run, through real Airflow on the shipped nightly DAG.

Each case runs the DAG's first task, ``validate_params``, as Airflow runs it (the in-process supervisor
``dag.test()`` uses, the task context from the execution API) in a DAG run of the kind under test, and
reads the configuration it returned; the later tasks are not needed to name the directory (``dag.test``
marks them successful). Scheduled runs are created as the scheduler creates them (``create_dagrun`` with
``run_type=scheduled`` and a data interval); a retry is the next try of the same task instance, a clear is
``clear_task_instances`` then a new try, as the UI's Clear does.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from elastic_training.operators.pipeline_params import DagRunIdentity, run_directory_name
from tests.support.airflow_dags import states, xcom
from tests.support.repo_dags import repo_dag

ONLY_VALIDATE = r"(?!validate_params$).*"  # dag.test marks every other task successful without running it
NIGHT = datetime(2026, 11, 29, tzinfo=UTC)


@pytest.fixture(scope="module")
def nightly(airflow_db: None, allowed_root: Path) -> Any:
    dag = repo_dag("elastic_training_nightly")
    manual_run(dag, allowed_root)  # dag.test() writes the serialized DAG the scheduled runs are created from
    return dag


def manual_run(dag: Any, root: Path, **conf: Any) -> Any:
    return dag.test(run_conf={"base_output_directory": str(root), **conf}, mark_success_pattern=ONLY_VALIDATE)


def config_of(dag_run: Any) -> dict[str, Any]:
    config = xcom(dag_run, "validate_params")
    assert isinstance(config, dict), states(dag_run)
    return config


def scheduled_run(dag: Any, root: Path, logical_date: datetime) -> Any:
    """A scheduled DAG run, created as the scheduler does, its first task run once."""
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    scheduler_dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
    with create_session() as session:
        dag_run = scheduler_dag.create_dagrun(
            run_id=f"scheduled__{logical_date.isoformat()}",
            logical_date=logical_date,
            data_interval=(logical_date, logical_date + timedelta(days=1)),
            run_after=logical_date + timedelta(days=1),
            conf={"base_output_directory": str(root)},
            run_type=DagRunType.SCHEDULED,
            triggered_by=DagRunTriggeredByType.TEST,
            state=DagRunState.RUNNING,
            session=session,
        )
        session.expunge(dag_run)
    run_first_task(dag, dag_run)
    return dag_run


def run_first_task(dag: Any, dag_run: Any, *, clear: bool = False) -> int:
    """Run ``validate_params`` of ``dag_run`` once more (a retry, or after a clear); returns its try number."""
    from airflow.models.taskinstance import TaskInstance, clear_task_instances
    from airflow.sdk.definitions.dag import _run_task
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    def first_task(session: Any) -> Any:
        query = session.query(TaskInstance).filter_by(dag_id=dag_run.dag_id, run_id=dag_run.run_id)
        return query.filter_by(task_id="validate_params").one()

    with create_session() as session:
        ti = first_task(session)
        if clear:
            clear_task_instances([ti], session)
            session.flush()
        ti.try_number += 1
        ti.state = TaskInstanceState.SCHEDULED
        session.commit()
        _run_task(ti=ti, task=dag.task_dict["validate_params"])
    with create_session() as session:
        ti = first_task(session)
        assert ti.state == TaskInstanceState.SUCCESS
        return int(ti.try_number)


def test_a_scheduled_run_keeps_its_logical_date(nightly: Any, allowed_root: Path) -> None:
    dag_run = scheduled_run(nightly, allowed_root, NIGHT)
    assert config_of(dag_run)["run_directory"] == f"{allowed_root}/nightly-20261129"


def test_a_manual_run_gets_its_own_directory_from_its_run_id(nightly: Any, allowed_root: Path) -> None:
    first = manual_run(nightly, allowed_root)
    second = manual_run(nightly, allowed_root)
    assert first.run_type == "manual" and first.run_id != second.run_id
    directories = {config_of(run)["run_directory"] for run in (first, second)}
    assert len(directories) == 2 and f"{allowed_root}/nightly-{NIGHT:%Y%m%d}" not in directories
    identity = DagRunIdentity(first.dag_id, first.run_id, "manual", first.logical_date)
    assert config_of(first)["run_directory"] == f"{allowed_root}/{run_directory_name('nightly', identity)}"
    # The form's description says where: the trigger time, then a hash of the run id.
    assert config_of(first)["run_name"].startswith(f"nightly-{first.run_after:%Y%m%d-%H%M}-")


@pytest.mark.parametrize("clear", [False, True], ids=["retried", "cleared"])
def test_a_retry_or_a_clear_of_the_same_run_resumes_its_directory(
    nightly: Any, allowed_root: Path, clear: bool
) -> None:
    night = NIGHT - timedelta(days=2 if clear else 1)
    for dag_run in (manual_run(nightly, allowed_root), scheduled_run(nightly, allowed_root, night)):
        before = config_of(dag_run)["run_directory"]
        assert run_first_task(nightly, dag_run, clear=clear) >= 2
        assert config_of(dag_run)["run_directory"] == before


def test_continuing_another_run_is_explicit_and_checked(nightly: Any, allowed_root: Path) -> None:
    earlier = allowed_root / "nightly-20261101"
    earlier.mkdir()
    config = config_of(manual_run(nightly, allowed_root, continue_run_name=earlier.name))
    assert config["run_directory"] == str(earlier) and config["continued"]
    missing = manual_run(nightly, allowed_root, continue_run_name="nightly-20261102")
    assert states(missing)["validate_params"] == "failed"
    refused = xcom(missing, "validate_params", "refused")
    assert refused["param"] == "continue_run_name" and "no run directory" in refused["message"]
