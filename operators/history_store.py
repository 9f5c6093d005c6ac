"""Where the failure history lives: one Airflow Variable per task, read and written through the Task SDK.

Why a Variable (``airflow.sdk.Variable``), and not the other stores Airflow 3.3 offers:

- the **task state store** (``context["task_state_store"]``, which keeps the operator's ``elastic_run`` state) is
  scoped to one task instance (DAG, run, task, map index): the next night's run starts with an empty one and
  cannot read last night's through the Task SDK;
- **XCom** is per run too, and a task reads another run's XCom only by naming that run: there is no public call
  for "the last N runs' reports" from inside a task;
- a **table the plugin owns** would need a migration of the user's metadata database outside Airflow's
  migrations, which a provider has no public API for.

A Variable is shared across runs, readable and writable from a task through the public Task SDK (the
execution API, so a worker needs no database access), visible and editable in the UI and REST API
(Admin > Variables), exported by ``airflow variables export``, and read by the plugin's history page from the
metadata database. Its value is the bounded JSON of :class:`operators.failure_history.FailureHistory` (at most
:data:`operators.failure_history.MAX_RUNS` runs, :data:`~operators.failure_history.MAX_HISTORY_BYTES`).

One writer at a time is assumed (a nightly DAG runs one run at a time, ``max_active_runs=1``): two runs ending in
the same moment may drop one of their entries (read, add, write), never corrupt the value. A value that does
not parse (edited by hand) is reported and replaced by a fresh history, never trusted.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from elastic_training.operators.failure_history import FailureHistory, RunRecord

VARIABLE_PREFIX = "elastic_training_failure_history"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def history_key(dag_id: str, task_id: str) -> str:
    """The Variable that holds the failure history of ``dag_id``'s task ``task_id``."""
    return f"{VARIABLE_PREFIX}.{_UNSAFE.sub('_', dag_id)}.{_UNSAFE.sub('_', task_id)}"[:250]


def load_history(key: str, warn: Callable[..., None]) -> FailureHistory:
    """The history under ``key`` (empty when there is none or it does not parse, with a warning)."""
    from airflow.sdk import Variable

    try:
        text = Variable.get(key, default=None)
    except Exception as error:  # an unreachable API server: run as if there were no history, and say so
        warn("the failure history %s could not be read (%s): running without it", key, error)
        return FailureHistory()
    try:
        return FailureHistory.parse(text if isinstance(text, str) else None)
    except ValueError as error:
        warn("ignoring the failure history %s: %s", key, error)
        return FailureHistory()


def record_run(key: str, run: RunRecord, warn: Callable[..., None]) -> FailureHistory | None:
    """Add ``run`` to the history under ``key``; the history written, or ``None`` when it could not be."""
    from airflow.sdk import Variable

    history = load_history(key, warn).with_run(run)
    try:
        Variable.set(key, history.render(), description="elastic-training: slice failures per node pool, per run")
    except Exception as error:  # the run's own result must not fail on its bookkeeping
        warn("the failure history %s could not be written (%s)", key, error)
        return None
    return history


def parse_stored(value: Any) -> FailureHistory:
    """A stored Variable value as a history; ``ValueError`` when it is not one (for readers outside a task)."""
    return FailureHistory.parse(value if isinstance(value, str) else None)
