"""A failure history in the test's Airflow metadata DB, read and set as an administrator would (the
``airflow.models.Variable`` calls behind Admin > Variables), in the store's layout: one Variable per run
(:mod:`operators.history_store`), read back as the plugin's page reads it (:func:`plugin.runs.failure_history_of`)."""

from __future__ import annotations

from elastic_training.operators.failure_history import FailureHistory
from elastic_training.operators.history_store import render_record, run_key, runs_prefix


def stored_history(key: str) -> FailureHistory:
    """The history ``key`` as stored (its runs, bad records left out)."""
    from airflow.utils.session import create_session

    from elastic_training.plugin.runs import failure_history_of

    with create_session() as session:
        return failure_history_of(session, key).history


def restore_history(key: str, history: FailureHistory) -> None:
    """Make the history ``key`` exactly ``history``: its Variables removed, one written per run."""
    from airflow.models import Variable
    from airflow.utils.session import create_session
    from sqlalchemy import or_, select

    with create_session() as session:
        names = list(
            session.scalars(
                select(Variable.key).where(or_(Variable.key == key, Variable.key.startswith(runs_prefix(key))))
            )
        )
    for name in names:
        Variable.delete(name)
    for run in history.runs:
        Variable.set(run_key(key, run.run_id), render_record(run))
