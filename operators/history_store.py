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

Reads tell "absent" from "could not read" (:func:`load_history`): the Task SDK's ``Variable.get`` (Airflow 3.3,
``airflow/sdk/execution_time/context.py`` ``_get_variable``) raises the same not-found error for a transient API
error as for a missing key, since its ``ExecutionAPISecretsBackend`` answers ``None`` on any error reply; its
``Variable.keys`` raises on one. A failed get is "absent" only when a successful ``Variable.keys(prefix=key)``
does not list the key; otherwise the read is uncertain and :func:`record_run` writes nothing (writing would
replace the stored history with one run).

One writer at a time is assumed (a nightly DAG runs one run at a time, ``max_active_runs=1``): the SDK offers no
compare-and-set on a Variable, so two runs ending in the same moment may drop one of their entries (read, add,
write), never corrupt the value. Each stored run is checked on its own: a bad one (edited by hand) is left out
and named in the warning, the rest kept; before a value that lost something (a run left out, or a value that
does not parse at all) is rewritten, it is copied to ``<key>.corrupt-<UTC time>``, and the warning names the copy.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from elastic_training.operators.failure_history import FailureHistory, RunRecord

VARIABLE_PREFIX = "elastic_training_failure_history"
MAX_KEY = 250  # Airflow's Variable key column (ID_LEN)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def history_key(dag_id: str, task_id: str, map_index: int = -1) -> str:
    """The Variable that holds the failure history of ``dag_id``'s task ``task_id`` (of its mapped instance
    ``map_index``: each has its own, ``.m<index>`` after the task's key; an unmapped task, -1, keeps the key it
    always had)."""
    base = f"{VARIABLE_PREFIX}.{_UNSAFE.sub('_', dag_id)}.{_UNSAFE.sub('_', task_id)}"
    if map_index is None or map_index < 0:
        return base[:MAX_KEY]
    suffix = f".m{int(map_index)}"
    return base[: MAX_KEY - len(suffix)] + suffix


@dataclass(frozen=True)
class HistoryRead:
    """What reading the history under ``key`` found.

    ``certain``: the history is what the store holds (``absent`` when it holds none); ``False`` when the value
    could not be read, so nothing may be written over it. ``reason`` says why, for the log and the report.
    """

    key: str
    history: FailureHistory
    certain: bool
    absent: bool = False
    reason: str = ""
    dropped: tuple[str, ...] = ()  # the stored runs left out, each with why
    unsound: str | None = None  # the stored text, when rewriting would lose some of it (copied aside first)


def _is_listed(key: str) -> bool:
    """Whether the API server lists a Variable named ``key``; raises when it cannot answer."""
    from airflow.sdk import Variable

    return key in list(Variable.keys(prefix=key))


def load_history(key: str, warn: Callable[..., None]) -> HistoryRead:
    """The history under ``key``: empty and certain when there is none; empty and *uncertain* when it could not
    be read (the Task SDK's ``Variable.get`` raises the same not-found error for a transient API error as for a
    missing key, so a failed get is "absent" only when a successful ``Variable.keys`` does not list the key)."""
    from airflow.sdk import Variable

    try:
        text: Any = Variable.get(key)
    except Exception as get_error:
        try:
            listed = _is_listed(key)
        except Exception as error:  # the API server did not answer either: nothing is known
            reason = f"the failure history {key} could not be read ({error})"
            warn("%s: running without it, and it will not be updated", reason)
            return HistoryRead(key, FailureHistory(), certain=False, reason=reason)
        if listed:  # it exists, yet could not be read
            reason = f"the failure history {key} exists but could not be read ({get_error})"
            warn("%s: running without it, and it will not be updated", reason)
            return HistoryRead(key, FailureHistory(), certain=False, reason=reason)
        return HistoryRead(key, FailureHistory(), certain=True, absent=True, reason="no history yet")
    stored = text if isinstance(text, str) else None
    try:
        parsed = FailureHistory.parse_entries(stored)
    except ValueError as error:
        warn("ignoring the failure history %s (%s): it is kept aside before it is next written", key, error)
        return HistoryRead(key, FailureHistory(), certain=True, reason=f"does not parse: {error}", unsound=stored)
    if parsed.dropped:
        warn("the failure history %s: %d run(s) left out: %s", key, len(parsed.dropped), parsed.dropped_summary())
        reason = f"{len(parsed.dropped)} stored run(s) left out"
        return HistoryRead(key, parsed.history, certain=True, reason=reason, dropped=parsed.dropped, unsound=stored)
    return HistoryRead(key, parsed.history, certain=True)


def corrupt_key(key: str, now: datetime | None = None) -> str:
    """Where an unsound value of ``key`` is copied before it is rewritten: ``<key>.corrupt-<UTC time>``."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S%fZ")
    suffix = f".corrupt-{stamp}"
    return key[: MAX_KEY - len(suffix)] + suffix


def _keep_aside(read: HistoryRead, warn: Callable[..., None]) -> bool:
    """Copy the stored value aside when rewriting would lose some of it; ``False`` when the copy failed."""
    from airflow.sdk import Variable

    if read.unsound is None:
        return True
    copy = corrupt_key(read.key)
    try:
        Variable.set(copy, read.unsound, description=f"elastic-training: the unsound value of {read.key}, kept aside")
    except Exception as error:
        warn("the failure history %s could not be copied aside to %s (%s): it is not rewritten", read.key, copy, error)
        return False
    warn("the failure history %s (%s) was copied to %s before it is rewritten", read.key, read.reason, copy)
    return True


def record_run(key: str, run: RunRecord, warn: Callable[..., None]) -> FailureHistory | None:
    """Add ``run`` to the history under ``key``; the history written, or ``None`` when it could not be (or the
    stored one could not be read: writing then would replace it with this run alone)."""
    from airflow.sdk import Variable

    read = load_history(key, warn)
    if not read.certain:
        warn("the failure history %s was not updated with run %s: %s", key, run.run_id, read.reason)
        return None
    if not _keep_aside(read, warn):
        return None
    history = read.history.with_run(run)
    try:
        Variable.set(key, history.render(), description="elastic-training: slice failures per node pool, per run")
    except Exception as error:  # the run's own result must not fail on its bookkeeping
        warn("the failure history %s could not be written (%s)", key, error)
        return None
    return history


def parse_stored(value: Any) -> FailureHistory:
    """A stored Variable value as a history, bad runs left out; ``ValueError`` when it is not one at all (for
    readers outside a task)."""
    return FailureHistory.parse_entries(value if isinstance(value, str) else None).history
