"""A cleared try and the try after it writing the operator's ``elastic_run`` state at once, on PostgreSQL.

The race a user can hit: the task state store (Airflow 3.3's ``task_state_store``, where
:class:`operators.run_state.RunState` lives) is one row per task instance *and key*, kept across tries, and its
write is an upsert (``airflow/state/metastore.py``: last writer wins, no compare-and-set). Clearing a task while it
runs (the UI's Clear, or ``airflow tasks clear``) does not stop it at once: ``clear_task_instances`` gives the task
instance a new id and the state ``RESTARTING`` (``airflow/models/taskinstance.py``), the scheduler may start the
next try at once, and the old process goes on until its next heartbeat tells its supervisor to kill it. Meanwhile
both run the operator: the old one in the middle of a full restart (it recorded ``escalating`` before deleting its
JobSet), the new one finishing that escalation (docs/operators.md, "A full restart"). If the old one's last save
came after the new one's, the new try's JobSet name, uid and restart count would be replaced by the old try's
view, and the next resume or retry would watch or adopt the wrong incarnation.

What keeps it out is Airflow's, not ours: the execution API scopes each store call by the caller's task instance
id (``execution_api/routes/task_state_store.py``), which the clear changed, so the old try's writes are refused
(404) and its reads find nothing. This test holds both tries over real processes (``dag.test()``'s supervisor and
execution API, the try after the clear started as ``dag.test()`` starts a task) on PostgreSQL, where the two
writes really are concurrent, and forces the worst order: the old try saves, is cleared, the new try reads and
saves, then the old try saves again. The new try's state must be what is stored, and the old try must have been
told: :class:`operators.run_state.StateRefused`, which says why, so the operator stops acting (nothing after a save
runs on a refused one). Without the clear (one id for both, as if Airflow had no fence) it fails: the old try
reads the new try's state and its save replaces it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from elastic_training.cli.postgres import RunningPostgres
from elastic_training.operators.run_state import STATE_KEY
from tests.support.airflow_dags import dag_from_source
from tests.support.postgres import DAG_TEST, airflow_process, airflow_sessions_on, migrated_airflow_database
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

DAG_ID = "run_state_two_tries"
DEADLINE_SECONDS = 600.0  # only bounds a hang: each step waits for the other process's marker, never a fixed time
HEADER = """\
import json
import time
from pathlib import Path

from airflow.sdk import DAG, BaseOperator

from elastic_training.operators.run_state import RunState


def wait_for_file(path, deadline):
    until = time.monotonic() + deadline
    while not path.exists():
        if time.monotonic() > until:
            raise RuntimeError(f"{path} never appeared")
        time.sleep(0.05)  # polls the other process's marker, with the deadline above


class StateWriter(BaseOperator):
    # The operator's state as a full restart leaves it: the first try records its escalation, the next finishes it.
    def __init__(self, barrier, deadline, **kwargs):
        super().__init__(**kwargs)
        self.barrier, self.deadline = Path(barrier), deadline

    def execute(self, context):
        run = RunState.load(context)
        if context["ti"].try_number == 1:
            run.jobset_name, run.jobset_uid, run.full_restarts, run.escalating = "train-r0", "uid-r0", 0, True
            run.save(context)
            (self.barrier / "first-saved").touch()
            wait_for_file(self.barrier / "second-saved", self.deadline)
            stale = {"read": RunState.load(context).jobset_name}
            run.jobset_name, run.jobset_uid, run.full_restarts, run.escalating = "train-r1", "uid-old", 1, False
            try:
                run.save(context)
                stale["save"] = "written"
            except Exception as error:
                stale["save"] = f"{type(error).__name__}: {error}"[:500]
            (self.barrier / "stale.json").write_text(json.dumps(stale))
            return stale
        seen = {"jobset_name": run.jobset_name, "escalating": run.escalating, "full_restarts": run.full_restarts}
        (self.barrier / "second-read.json").write_text(json.dumps(seen))
        run.jobset_name, run.jobset_uid, run.full_restarts, run.escalating = "train-r1", "uid-new", 1, False
        run.save(context)
        (self.barrier / "second-saved").touch()
        return seen
"""

# The try after the clear, started as dag.test() starts a task (the API wants it QUEUED), after the scheduler's
# step: a cleared task instance's next try has the next try number.
SECOND = """\
import importlib.util, json, sys

from airflow.models.taskinstance import TaskInstance
from airflow.sdk.definitions.dag import _run_task
from airflow.utils.session import create_session
from sqlalchemy import select

spec = importlib.util.spec_from_file_location("state_dag", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
with create_session() as session:
    ti = session.scalars(select(TaskInstance).where(TaskInstance.dag_id == module.dag.dag_id)).one()
    ti.try_number += 1
    session.merge(ti)
with create_session() as session:
    ti = session.scalars(select(TaskInstance).where(TaskInstance.dag_id == module.dag.dag_id)).one()
result = _run_task(ti=ti, task=module.dag.get_task("pretrain"))
print("STATE " + json.dumps(getattr(result.ti.state, "value", str(result.ti.state))))
"""


@pytest.fixture(scope="module")
def state_db(postgres_server: RunningPostgres) -> str:
    """This module's metadata database on the session's PostgreSQL server, migrated once."""
    return migrated_airflow_database(postgres_server, "runstate")


def test_a_cleared_try_never_overwrites_the_state_of_the_try_after_it(state_db: str, tmp_path: Path) -> None:
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    body = f"""
    with DAG({DAG_ID!r}, schedule=None) as dag:
        StateWriter(task_id="pretrain", barrier={str(barrier)!r}, deadline={DEADLINE_SECONDS})
    """
    dag_from_source(DAG_ID, body, HEADER)
    path = str(Path(_dags_folder()) / f"{DAG_ID}.py")

    first = airflow_process(DAG_TEST, path, tmp_path / "first.out", state_db)
    wait_for(lambda: (barrier / "first-saved").exists() or first.poll() is not None, timeout=DEADLINE_SECONDS)
    assert (barrier / "first-saved").exists(), (tmp_path / "first.out").read_text(errors="replace")[-4000:]
    with airflow_sessions_on(state_db):
        before = _stored()
        _clear()  # what the UI's Clear does to a running task instance
    assert before is not None and before["jobset_name"] == "train-r0", before

    second = airflow_process(SECOND, path, tmp_path / "second.out", state_db)
    second.wait(timeout=DEADLINE_SECONDS + 300)
    second_output = (tmp_path / "second.out").read_text(errors="replace")
    assert second.returncode == 0 and 'STATE "success"' in second_output, second_output[-4000:]
    first.wait(timeout=DEADLINE_SECONDS + 300)  # its own end is refused too (its id is gone): not asserted
    first_output = (tmp_path / "first.out").read_text(errors="replace")
    assert (barrier / "stale.json").exists(), first_output[-4000:]

    # The try after the clear read what the cleared one recorded: the escalation to finish.
    assert json.loads((barrier / "second-read.json").read_text()) == {
        "jobset_name": "train-r0",
        "escalating": True,
        "full_restarts": 0,
    }
    stale = json.loads((barrier / "stale.json").read_text())
    assert stale["save"] != "written", stale  # refused, so the operator stops there
    assert stale["save"].startswith("StateRefused: the task state store refused 'elastic_run'"), stale
    assert "cleared or retried while it ran" in stale["save"], stale
    assert stale["read"] == "", stale  # the old try's reads find nothing: it cannot act on the new try's state
    with airflow_sessions_on(state_db):
        after = _stored()
    assert after is not None, "the state store entry is gone"
    assert (after["jobset_name"], after["jobset_uid"], after["full_restarts"], after["escalating"]) == (
        "train-r1",
        "uid-new",
        1,
        False,
    ), after


def _clear() -> None:
    from airflow.models.taskinstance import TaskInstance, clear_task_instances
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = list(session.scalars(select(TaskInstance).where(TaskInstance.dag_id == DAG_ID)))
        assert [ti.state for ti in tis] == ["running"], [ti.state for ti in tis]
        clear_task_instances(tis, session)


def _stored() -> dict[str, Any] | None:
    from airflow.models.task_state_store import TaskStateStoreModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        raw = session.scalar(
            select(TaskStateStoreModel.value).where(
                TaskStateStoreModel.dag_id == DAG_ID, TaskStateStoreModel.key == STATE_KEY
            )
        )
    value = json.loads(raw) if raw else None
    return value if isinstance(value, dict) else None


def _dags_folder() -> str:
    from airflow.configuration import conf

    return str(conf.get("core", "dags_folder"))
