"""Two task processes writing one failure history at once, through the real Task SDK path, both recorded.

Two DAGs name the same ``failure_history_key`` (what docs/operators.md suggests for a drill DAG beside the nightly
one) and run at one logical date, so with the same run id (as two DAGs on one schedule); each is run by
``dag.test()`` in a process of its own, on PostgreSQL (a database of this module's on the session's server,
``tests/support/postgres.py``): the database teams run, where two writers really write at once (SQLite serialises
every write, so a lost update between read and write could hide there). Each task calls
:func:`operators.history_store.record_run`, whose ``Variable`` calls go through Airflow's own supervisor
(``InProcessTestSupervisor``) and execution API to the database.

The worst interleaving is forced, not hoped for: each task's ``SUPERVISOR_COMMS`` is wrapped so that its first
``PutVariable`` waits until the other task has reached its own, i.e. both have read the history before either
writes (with one shared value, read-add-write, one entry is lost there). The history starts in the single-value
layout of earlier releases, so both writers also move it at once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic_training.cli.postgres import RunningPostgres
from elastic_training.operators.failure_history import FailureHistory, RunRecord
from elastic_training.operators.history_store import is_run_key
from tests.support.airflow_dags import dag_from_source
from tests.support.history_variables import stored_history
from tests.support.postgres import DAG_TEST, airflow_process, airflow_sessions_on, migrated_airflow_database
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

KEY = "elastic_training_failure_history.shared-by-two-dags"
WRITERS = ("history_writer_a", "history_writer_b")
LOGICAL_DATE = "2026-12-05T00:00:00+00:00"  # both DAGs' runs: one run id, as two DAGs on one schedule have
DEADLINE_SECONDS = 600.0  # only bounds a hang: each process waits for the other's condition, never a fixed time
HEADER = """\
import os
import time
from pathlib import Path

from airflow.sdk import DAG, BaseOperator
from airflow.sdk.execution_time import task_runner
from airflow.sdk.execution_time.supervisor import set_supervisor_comms

from elastic_training.operators.failure_history import RunRecord
from elastic_training.operators.history_store import record_run, record_run_id


class HistoryWriter(BaseOperator):
    # Records this run as the operator does at its end, after meeting the other writer between read and write.
    def __init__(self, key, barrier, peers, deadline, **kwargs):
        super().__init__(**kwargs)
        self.key, self.barrier, self.peers, self.deadline = key, barrier, peers, deadline

    def execute(self, context):
        writer = self
        Path(self.barrier).parent.joinpath(f"started-{context['dag'].dag_id}").touch()

        class MeetBeforeTheFirstWrite:
            # Airflow's own comms, every message passed on; the first PutVariable held until the other writer's.
            def __init__(self, comms):
                self.comms, self.met = comms, False

            def __getattr__(self, name):
                return getattr(self.comms, name)

            def send(self, msg):
                if type(msg).__name__ == "PutVariable" and not self.met:
                    self.met = True
                    Path(writer.barrier, context["dag"].dag_id).touch()
                    until = time.monotonic() + writer.deadline
                    while len(os.listdir(writer.barrier)) < writer.peers:
                        if time.monotonic() > until:
                            raise RuntimeError("the other writer never reached its write")
                        time.sleep(0.05)  # polls the other process's marker, with the deadline above
                return self.comms.send(msg)

        ti = context["ti"]  # both DAGs run at one logical date: one run id, told apart as the operator tells them
        run_id = record_run_id(ti.run_id, dag_id=ti.dag_id, task_id=ti.task_id, map_index=ti.map_index, shared=True)
        run = RunRecord(run_id=run_id, ended_at=time.time(), pools=("tpu-a",), slices=1)
        with set_supervisor_comms(MeetBeforeTheFirstWrite(task_runner.SUPERVISOR_COMMS)):
            written = record_run(self.key, run, self.log.warning)
        return {"recorded": written.history is not None, "notes": list(written.notes), "run_id": ti.run_id}
"""


@pytest.fixture(scope="module")
def history_db(postgres_server: RunningPostgres) -> str:
    """This module's metadata database on the session's PostgreSQL server, migrated once."""
    return migrated_airflow_database(postgres_server, "history")


def test_two_task_processes_writing_at_once_are_both_recorded(history_db: str, tmp_path: Path) -> None:
    earlier = FailureHistory((RunRecord(run_id="earlier", ended_at=1_796_000_000.0, pools=("tpu-b",), slices=1),))
    with airflow_sessions_on(history_db):
        _set(KEY, earlier.render())  # as a release before per-run records left it
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    files = []
    for dag_id in WRITERS:
        body = f"""
        with DAG({dag_id!r}, schedule=None) as dag:
            HistoryWriter(task_id="pretrain", key={KEY!r}, barrier={str(barrier)!r}, peers={len(WRITERS)},
                          deadline={DEADLINE_SECONDS})
        """
        dag_from_source(dag_id, body, HEADER)  # written to the dags folder (dag.test() needs it in the bundle)
        files.append(str(Path(_dags_folder()) / f"{dag_id}.py"))
    # The second starts once the first runs its task: each dag.test() first syncs the whole DAG bundle to the
    # database, and two syncs at once collide on inserting the same DAG rows (not what this test is about).
    processes = []
    for path, dag_id in zip(files, WRITERS, strict=True):
        processes.append(airflow_process(DAG_TEST, path, tmp_path / f"{dag_id}.out", history_db, LOGICAL_DATE))
        wait_for(
            lambda: (tmp_path / f"started-{dag_id}").exists() or processes[-1].poll() is not None,  # noqa: B023
            timeout=DEADLINE_SECONDS,
        )
    for process in processes:
        process.wait(timeout=DEADLINE_SECONDS + 300)
    outputs = [(tmp_path / f"{dag_id}.out").read_text(errors="replace") for dag_id in WRITERS]
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 0 and 'STATE "success"' in output, output[-4000:]
    with airflow_sessions_on(history_db):
        returned = {dag_id: _returned(dag_id) for dag_id in WRITERS}
        history = stored_history(KEY)
        names = _names_from(KEY)
    assert all(r["recorded"] is True for r in returned.values()), returned
    assert sorted(p.name for p in barrier.iterdir()) == sorted(WRITERS)  # both met between read and write
    assert len({r["run_id"] for r in returned.values()}) == 1, returned  # the same Airflow run id
    run_id = next(iter(returned.values()))["run_id"]
    assert sorted(r.run_id for r in history.runs) == sorted(["earlier", *(f"{d}/pretrain/{run_id}" for d in WRITERS)])
    assert KEY not in names  # the single value moved, once its run was listed as a record of its own
    assert len([n for n in names if is_run_key(KEY, n)]) == 3


def _set(key: str, value: str) -> None:
    from airflow.models import Variable

    Variable.set(key, value)


def _names_from(key: str) -> set[str]:
    from airflow.models import Variable
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return set(session.scalars(select(Variable.key).where(Variable.key.startswith(key))))


def _dags_folder() -> str:
    from airflow.configuration import conf

    return str(conf.get("core", "dags_folder"))


def _returned(dag_id: str) -> dict[str, object]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.query(XComModel).filter_by(dag_id=dag_id, task_id="pretrain", key="return_value").one()
        value = XComModel.deserialize_value(row)
    assert isinstance(value, dict)
    return dict(value)
