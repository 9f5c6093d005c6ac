"""Reading elastic runs back from what Airflow and the run directory persisted. No writes, ever.

Where each fact lives (the same places Airflow's public API reads them from):

- which task instances are elastic: those whose task state store holds the ``elastic_run`` entry, which
  ``ElasticJobSetOperator`` (and so every subclass of it, e.g. the pipeline's ``PretrainOperator``, and
  every mapped instance) writes at the start of each attempt, before it waits. The operator's class name
  is not enough (``task_instance.operator`` is the subclass's name); it is kept only as a fallback for a
  base-class task whose state entry was removed by ``airflow state-store cleanup`` (rows expire after
  ``[state_store] default_retention_days``, 30 by default);
- the run report: XCom ``return_value`` of a finished task, or ``report`` of a failed one;
- the ``elastic_run`` entry of the task state store (``task_state_store``, Airflow 3.3), JSON;
- the rendered template fields (run name, base directory, steps, slices) while no report exists;
- while the task runs or is deferred: its head pod's recent log, read through the Kubernetes hook and
  folded on top of the persisted state (bounded, cached; :mod:`plugin.live`);
- a task's failure history across runs: its Airflow Variables, one per run (and the single value of earlier
  releases), assembled as the operator assembles them (:func:`operators.history_store.assemble_history`); a task's
  histories are its default key, its mapped instances' keys, and any key its run reports name (``history_key``: a
  custom ``failure_history_key``);
- the run directory: checkpoint verdicts (:func:`operators.checkpoints.validate_checkpoints`, metadata
  level, no array reads) and the local trainer's ``recoveries.jsonl`` (bounded).

So a view of a run works after the run ended and after every Airflow component restarted.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import or_, select

from elastic_training.operators import run_layout
from elastic_training.operators.checkpoints import ValidationOptions, validate_checkpoints
from elastic_training.operators.checkpoints.storage import FileTooLargeError, StorageError, storage_for
from elastic_training.operators.checkpoints.timing import save_seconds
from elastic_training.operators.constants import CHECKPOINTS_DIR, RECOVERY_RECORDS_FILE
from elastic_training.operators.history_store import (
    MAX_RECORDS_READ,
    Assembled,
    assemble_history,
    history_key,
    is_run_key,
    runs_prefix,
)
from elastic_training.operators.run_report import ReportError, RunReport
from elastic_training.operators.run_state import STATE_KEY
from elastic_training.plugin import live
from elastic_training.plugin.view import run_view

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

ELASTIC_OPERATORS = ("ElasticJobSetOperator",)
MAX_RECORDS_BYTES = 1 << 20
MAX_RECORDS = 1000
LIVE_STATES = frozenset({"running", "deferred"})
MAX_HISTORY_ROWS = MAX_RECORDS_READ  # the Variables one history page reads, as many as the operator reads
MAX_HISTORY_KEYS = 100  # the histories one task lists
HISTORY_REPORTS = 50  # the task's newest reports whose history_key is looked at
VIEW_VALIDATION = ValidationOptions(require_commit_marker=True, check_ocdbt_index=False, max_workers=4)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def elastic_task_instances(
    session: Session,
    *,
    dag_ids: Iterable[str] | None,
    dag_id: str | None = None,
    run_id: str | None = None,
    limit: int = 50,
) -> list[Any]:
    """Elastic task instances (see the module docstring), newest first; ``dag_ids=None`` means every DAG."""
    from airflow.models.task_state_store import TaskStateStoreModel as State
    from airflow.models.taskinstance import TaskInstance

    has_state = (
        select(State.id)
        .where(
            State.dag_id == TaskInstance.dag_id,
            State.run_id == TaskInstance.run_id,
            State.task_id == TaskInstance.task_id,
            State.map_index == TaskInstance.map_index,
            State.key == STATE_KEY,
        )
        .exists()
    )
    query = select(TaskInstance).where(or_(has_state, TaskInstance.operator.in_(ELASTIC_OPERATORS)))
    if dag_ids is not None:
        query = query.where(TaskInstance.dag_id.in_(list(dag_ids)))
    if dag_id is not None:
        query = query.where(TaskInstance.dag_id == dag_id)
    if run_id is not None:
        query = query.where(TaskInstance.run_id == run_id)
    query = query.order_by(TaskInstance.start_date.desc().nulls_last(), TaskInstance.task_id).limit(limit)
    return list(session.scalars(query))


def _rows_of(model: Any, ti: Any) -> tuple[Any, ...]:
    """The conditions picking `ti`'s rows of a table keyed as task instances are (DAG, run, task, map index)."""
    return (
        model.dag_id == ti.dag_id,
        model.run_id == ti.run_id,
        model.task_id == ti.task_id,
        model.map_index == ti.map_index,
    )


def _xcom(session: Session, ti: Any, key: str) -> Any:
    from airflow.models.xcom import XComModel

    row = session.scalars(
        select(XComModel).where(
            *_rows_of(XComModel, ti),
            XComModel.key == key,
        )
    ).first()
    return None if row is None else XComModel.deserialize_value(row)


def report_of(session: Session, ti: Any) -> RunReport | None:
    """The run report: ``return_value`` when the task succeeded, else ``report`` (pushed before failing).

    ``ReportError`` when it is one this release cannot read (a newer version, a wrong value).
    """
    for key in ("return_value", "report"):
        value = _xcom(session, ti, key)
        if isinstance(value, Mapping) and "target_step" in value:
            return RunReport.from_json(value)
    return None


def state_of(session: Session, ti: Any) -> dict[str, Any] | None:
    """The operator's ``elastic_run`` entry in the task state store."""
    from airflow.models.task_state_store import TaskStateStoreModel

    raw = session.scalar(
        select(TaskStateStoreModel.value).where(
            *_rows_of(TaskStateStoreModel, ti),
            TaskStateStoreModel.key == STATE_KEY,
        )
    )
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def rendered_of(session: Session, ti: Any) -> dict[str, Any]:
    """The task's rendered template fields (run name, directory, steps, slices), by their flat names.

    The operator's option groups are rendered as ``training.steps``, ``scale.num_slices`` (its
    ``template_fields_renderers``); a run of an earlier release has ``steps``, ``num_slices``.
    """
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF

    fields = session.scalar(select(RTIF.rendered_fields).where(*_rows_of(RTIF, ti)))
    return flat_rendered(fields) if isinstance(fields, Mapping) else {}


def flat_rendered(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Rendered fields with the groups' ``<group>.<field>`` keys (``training.steps``) also under ``<field>``."""
    flat = dict(fields)
    for key, value in fields.items():
        group, dot, name = str(key).partition(".")
        if dot and group in ("training", "scale") and name not in flat:
            flat[name] = value
    return flat


def checkpoints_of(run_directory: str | None) -> dict[str, Any] | None:
    """Each checkpoint step with its verdict, commit time and save time; ``error`` when storage failed."""
    if not run_directory:
        return None
    directory = f"{run_directory.rstrip('/')}/{CHECKPOINTS_DIR}"
    try:
        report = validate_checkpoints(directory, options=VIEW_VALIDATION)
    except Exception as error:  # storage, credentials, a vanished directory: say so, never fail the view
        return {"path": directory, "error": f"{type(error).__name__}: {error}"[:500], "steps": [], "ignored": []}
    steps = []
    for verdict in sorted(report.steps, key=lambda v: v.step):
        saved = save_seconds([verdict.path], limit=1)
        steps.append(
            {
                "step": verdict.step,
                "valid": verdict.valid,
                "problems": [p.to_json() for p in verdict.problems],
                "committed_at": None if verdict.committed_at_nsecs is None else verdict.committed_at_nsecs / 1e9,
                "save_seconds": saved[0] if saved else None,
                "bytes": verdict.bytes,
                "files": verdict.files,
            }
        )
    return {
        "path": directory,
        "error": report.error,
        "latest_valid_step": report.latest_valid_step,
        "steps": steps,
        "ignored": [i.to_json() for i in report.ignored],
    }


def recovery_records_of(run_directory: str | None) -> list[dict[str, Any]]:
    """The local trainer's ``recoveries.jsonl`` (at most ``MAX_RECORDS`` lines of ``MAX_RECORDS_BYTES``)."""
    if not run_directory:
        return []
    path = f"{run_directory.rstrip('/')}/{RECOVERY_RECORDS_FILE}"
    try:
        if not path.startswith("gs://") and not os.path.isfile(path):
            return []
        raw = storage_for(path).read(path, MAX_RECORDS_BYTES)
    except (FileNotFoundError, FileTooLargeError, StorageError, OSError):
        return []
    records = []
    for line in raw.decode("utf-8", errors="replace").splitlines()[:MAX_RECORDS]:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def task_view(session: Session, ti: Any, *, storage: bool = True, reader: live.Reader | None = None) -> dict[str, Any]:
    """One elastic task's view; ``storage=False`` skips the run directory and the cluster (the list endpoint).

    A task still running or deferred also gets ``live``: its head pod's recent log folded in (``reader``
    reads it; the Kubernetes connection by default).
    """
    report_error: str | None = None
    try:
        report = report_of(session, ti)
    except ReportError as error:  # the page says why instead of failing (the list endpoint would fail for all)
        report, report_error = None, str(error)
    state = state_of(session, ti)
    rendered = rendered_of(session, ti)
    now: dict[str, Any] | None = None
    if storage and report is None and state and str(ti.state) in LIVE_STATES:
        namespace = _xcom(session, ti, "namespace")
        found = live.live_state(state, namespace=namespace if isinstance(namespace, str) else "default", reader=reader)
        if found is not None:
            state, now = found
    task = {
        "dag_id": ti.dag_id,
        "run_id": ti.run_id,
        "task_id": ti.task_id,
        "map_index": ti.map_index,
        "state": ti.state,
        "try_number": ti.try_number,
        "start_date": _iso(ti.start_date),
        "end_date": _iso(ti.end_date),
        "start_ts": _ts(ti.start_date),
        "end_ts": _ts(ti.end_date),
    }
    run_directory = report.run_directory if report is not None else None
    if not run_directory and rendered.get("base_output_directory") and rendered.get("run_name"):
        run_directory = run_layout.run_directory(str(rendered["base_output_directory"]), str(rendered["run_name"]))
    view = run_view(
        task=task,
        report=report,
        state=state,
        checkpoints=checkpoints_of(run_directory) if storage else None,
        recovery_records=recovery_records_of(run_directory) if storage else [],
        rendered=rendered,
        now=None if ti.end_date is not None else time.time(),
    )
    view["live"] = now
    view["report_error"] = report_error
    return view


def failure_history_of(session: Session, key: str) -> Assembled:
    """The failure history ``key``, from its Airflow Variables (``operators.history_store``); empty when unset.

    Read as the operator reads it: each record checked on its own, a bad one left out and named in ``dropped``
    (the page says so), never a failure of the page.
    """
    from airflow.models.variable import Variable

    rows = session.scalars(
        select(Variable)
        .where(or_(Variable.key == key, Variable.key.startswith(runs_prefix(key), autoescape=True)))
        .order_by(Variable.key)
        .limit(MAX_HISTORY_ROWS + 1)
    )
    values = {row.key: row.val for row in rows if row.key == key or is_run_key(key, row.key)}
    assembled = assemble_history(key, dict(list(values.items())[:MAX_HISTORY_ROWS]))
    if len(values) > MAX_HISTORY_ROWS:
        more = f"more than {MAX_HISTORY_ROWS} stored Variables: the first {MAX_HISTORY_ROWS} by key are shown"
        return dataclasses.replace(assembled, dropped=(*assembled.dropped, more))
    return assembled


def history_keys_of(session: Session, dag_id: str, task_id: str) -> list[str]:
    """The failure histories of one task: its default key first, then its mapped instances' keys (``.m<index>``,
    found by prefix) and the keys its newest run reports name (``history_key``: a custom ``failure_history_key``)."""
    from airflow.models.variable import Variable
    from airflow.models.xcom import XComModel

    base = history_key(dag_id, task_id)
    found: dict[str, None] = {base: None}
    mapped = re.compile(re.escape(base) + r"\.m(\d{1,9})(?:$|\.r\.)")
    names = session.scalars(
        select(Variable.key).where(Variable.key.startswith(f"{base}.m", autoescape=True)).limit(MAX_HISTORY_ROWS * 10)
    )
    for name in names:
        match = mapped.match(name)
        if match:
            found.setdefault(history_key(dag_id, task_id, int(match.group(1))), None)
    reports = session.scalars(
        select(XComModel)
        .where(
            XComModel.dag_id == dag_id,
            XComModel.task_id == task_id,
            XComModel.key.in_(("return_value", "report")),
        )
        .order_by(XComModel.timestamp.desc())
        .limit(HISTORY_REPORTS)
    )
    for row in reports:
        try:
            value = XComModel.deserialize_value(row)
        except Exception:  # an XCom this reader cannot decode names no history
            continue
        named = value.get("history_key") if isinstance(value, Mapping) else None
        if isinstance(named, str) and 0 < len(named) <= 250:
            found.setdefault(named, None)
    return list(found)[:MAX_HISTORY_KEYS]
