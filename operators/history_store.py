"""Where the failure history lives: Airflow Variables, one per run, read and written through the Task SDK.

Why Variables (``airflow.sdk.Variable``), and not the other stores Airflow 3.3 offers:

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
metadata database.

**One Variable per run, pruned by the newest writer.** The Task SDK (Airflow 3.3,
``task-sdk/src/airflow/sdk/definitions/variable.py``) offers ``get``, ``set``, ``keys(prefix=...)`` and ``delete``;
its ``PutVariable`` message (``execution_time/comms.py``) and the execution API's ``PUT /variables/{key}``
(``api_fastapi/execution_api/routes/variables.py``) carry a key, a value and a description, no version: there is
no compare-and-set, so a read-add-write of one shared value drops the entry of a writer that wrote in between.
So each run writes only its own Variable, ``<key>.r.<run id, sanitized>-<hash of the run id>`` (:func:`run_key`),
holding one :class:`~operators.failure_history.RunRecord`; in a history several task instances share, the run id is
qualified by the writer (:func:`record_run_id`), so writers of one run id keep a record each; the history is every
Variable ``Variable.keys(prefix="<key>.r.")`` lists (the execution API's ``GET /variables/keys``: keys that start
with the prefix, ``LIKE`` escaped, ordered by key, paged), newest :data:`~operators.failure_history.MAX_RUNS` by
``ended_at``. Two runs ending at once write two keys: neither can drop the other's. After writing, the writer
deletes the records older than the newest ``MAX_RUNS`` it read (never its own, never one it could not parse: it
has no known age): a record a concurrent writer added is newer than those, so a prune can keep one too many for a
while (the next writer removes it), never remove one of the newest ``MAX_RUNS``. A retry or a clear of the same
run rewrites its own key, as the single value replaced its entry.

**The single Variable of earlier releases** (``<key>`` itself, the JSON of
:class:`~operators.failure_history.FailureHistory`) is still read and merged (a per-run record wins for the same
run id). It is never written again: the next writer copies its runs (those among the newest ``MAX_RUNS``) into
per-run Variables, lists them, and deletes the old value only when each is listed and the old value still reads
as it did (a value with runs left out, or one that does not parse, is first copied to ``<key>.corrupt-<UTC>``).

**Reads tell "absent" from "could not read"** (:func:`load_history`): the Task SDK's ``Variable.get``
(``execution_time/context.py`` ``_get_variable``) raises the same not-found error for a transient API error as for
a missing key, since its ``ExecutionAPISecretsBackend`` answers ``None`` on any error reply; its ``Variable.keys``
raises on one. So the keys are listed first (a failed listing: nothing is known); a listed Variable whose get
fails is read as gone only when a second listing no longer shows it (a concurrent prune deleted it), otherwise
the read is uncertain and :func:`record_run` writes nothing (the run's notes say so). Each record is checked on
its own: a bad one (edited by hand) is left out, named in the notes, never rewritten, and never pruned.

What is said about a read or a write (:attr:`HistoryRead.notes`, :attr:`HistoryWrite.notes`) goes into the log and
the run report (``history_notes``). :func:`assemble_history` is the pure part the plugin shares.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from elastic_training.operators.failure_history import (
    MAX_DROPPED_SHOWN,
    MAX_FAILURES_PER_RUN,
    MAX_RUNS,
    MAX_TEXT,
    FailureHistory,
    RunRecord,
)

VARIABLE_PREFIX = "elastic_training_failure_history"
MAX_KEY = 250  # Airflow's Variable key column (ID_LEN)
RUNS_MARK = ".r."
RUN_ID_CHARS = 40  # of the run id, sanitized, in its record's key (readable in Admin > Variables)
RUN_HASH_CHARS = 12  # of the run id's SHA-256: two run ids sanitized alike still get keys of their own
RECORD_VERSION = 1
MAX_RECORD_BYTES = 64 * 1024  # one run's record (MySQL's TEXT column holds 64 KiB)
MAX_NOTES, MAX_NOTE_CHARS = 10, 600  # what a report carries of the notes
MAX_RECORDS_READ = 4 * MAX_RUNS  # a prune keeps a few past the bound; more were written by hand (or by an attack)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_RUN_PART_CHARS = RUN_ID_CHARS + 1 + RUN_HASH_CHARS
_RUN_PART = re.compile(rf"[A-Za-z0-9_-]{{1,{_RUN_PART_CHARS}}}")
_ROOM = MAX_KEY - len(RUNS_MARK) - _RUN_PART_CHARS
_CUT_TAG = re.compile(rf"~[0-9a-f]{{{RUN_HASH_CHARS}}}$")


def history_key(dag_id: str, task_id: str, map_index: int = -1) -> str:
    """The failure history of ``dag_id``'s task ``task_id`` (of its mapped instance ``map_index``: each has its own,
    ``.m<index>`` after the task's key; an unmapped task, -1, keeps the key it always had)."""
    base = f"{VARIABLE_PREFIX}.{_UNSAFE.sub('_', dag_id)}.{_UNSAFE.sub('_', task_id)}"
    if map_index is None or map_index < 0:
        return base[:MAX_KEY]
    suffix = f".m{int(map_index)}"
    return base[: MAX_KEY - len(suffix)] + suffix


def _digest(text: str, chars: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:chars]


def runs_prefix(key: str) -> str:
    """The prefix of the per-run Variables of the history ``key``: ``<key>.r.``; a key too long to leave room for a
    run's part is cut, with a hash of the whole key after it (two long keys never share their runs)."""
    if len(key) <= _ROOM:
        return key + RUNS_MARK
    tag = f".h{_digest(key, 16)}"
    return key[: _ROOM - len(tag)] + tag + RUNS_MARK


def run_key(key: str, run_id: str) -> str:
    """The Variable holding run ``run_id``'s record in the history ``key`` (at most :data:`MAX_KEY`)."""
    readable = re.sub(r"[^A-Za-z0-9_-]", "_", run_id)[:RUN_ID_CHARS]
    return f"{runs_prefix(key)}{readable}-{_digest(run_id, RUN_HASH_CHARS)}"


def record_run_id(run_id: str, *, dag_id: str, task_id: str, map_index: int | None = -1, shared: bool) -> str:
    """The id a task instance's run is recorded under: Airflow's ``run_id`` in the task's own history (its key already
    names the DAG, the task and the map index); in a ``shared`` one (a ``failure_history_key`` several tasks, mapped
    instances or DAGs name) ``<dag>/<task>[<map index>]/<run id>`` (Airflow's ids hold no ``/``), since two DAGs on
    one schedule, or two tasks of one DAG run, have the same run id and would otherwise replace each other's record.
    At most :data:`~operators.failure_history.MAX_TEXT` characters: a longer one is cut, with a hash of the whole
    after it."""
    if not shared:
        return run_id[:MAX_TEXT]
    mapped = f"[{int(map_index)}]" if map_index is not None and map_index >= 0 else ""
    whole = f"{dag_id}/{task_id}{mapped}/{run_id}"
    if len(whole) <= MAX_TEXT:
        return whole
    tag = f"~{_digest(whole, RUN_HASH_CHARS)}"
    return whole[: MAX_TEXT - len(tag)] + tag


def split_record_run_id(recorded: str) -> tuple[str | None, str]:
    """The DAG id and Airflow run id of a recorded run id (:func:`record_run_id`): ``(None, recorded)`` for a plain
    run id (or one cut to its bound), whose DAG is the history's own."""
    parts = recorded.split("/", 2)
    cut = len(recorded) == MAX_TEXT and _CUT_TAG.search(recorded) is not None
    if len(parts) == 3 and all(parts) and not cut:
        return parts[0], parts[2]
    return None, recorded


def is_run_key(key: str, listed: str) -> bool:
    """Whether the listed Variable ``listed`` is a run record of the history ``key`` (and not, say, of a history
    whose key starts with this one's runs prefix: a run's part has no dot)."""
    prefix = runs_prefix(key)
    return listed.startswith(prefix) and _RUN_PART.fullmatch(listed[len(prefix) :]) is not None


def history_keys(key: str, listed: Iterable[str]) -> list[str]:
    """Of the Variable keys ``listed``, those that hold the history ``key``: the single value of earlier releases
    and the per-run records."""
    return sorted(k for k in set(listed) if k == key or is_run_key(key, k))


def listing_prefixes(key: str) -> tuple[str, ...]:
    """The prefixes to list to find every Variable of the history ``key`` (one, unless the key was cut)."""
    prefix = runs_prefix(key)
    return (key,) if prefix.startswith(key) else (key, prefix)


def render_record(run: RunRecord) -> str:
    """One run's record as stored: compact JSON; the run's oldest failures go until it fits
    :data:`MAX_RECORD_BYTES` (its failures bounded, newest kept, as the single value bounded them)."""
    failures = list(sorted(run.failures, key=lambda f: f.at)[-MAX_FAILURES_PER_RUN:])
    while True:
        body = {"version": RECORD_VERSION, "run": replace(run, failures=tuple(failures)).to_json()}
        text = json.dumps(body, separators=(",", ":"))
        if len(text.encode()) <= MAX_RECORD_BYTES or not failures:
            return text
        failures.pop(0)


def parse_record(text: Any) -> RunRecord:
    """A stored run record; ``ValueError`` naming what is wrong."""
    if not isinstance(text, str) or not text:
        raise ValueError("not a text value")
    if len(text.encode()) > MAX_RECORD_BYTES:
        raise ValueError(f"longer than {MAX_RECORD_BYTES} bytes")
    try:
        body = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"not JSON: {str(error)[:120]}") from None
    if not isinstance(body, dict) or body.get("version") != RECORD_VERSION:
        raise ValueError(f"not a run record of version {RECORD_VERSION}")
    try:
        return RunRecord.from_json(body.get("run"))
    except (TypeError, KeyError) as error:
        raise ValueError(str(error)) from None


def bounded_notes(notes: Iterable[str]) -> tuple[str, ...]:
    """``notes`` as a report carries them: each once, each cut to :data:`MAX_NOTE_CHARS`, at most :data:`MAX_NOTES`."""
    return tuple(dict.fromkeys(str(n)[:MAX_NOTE_CHARS] for n in notes))[:MAX_NOTES]


def _newest(runs: Iterable[RunRecord]) -> tuple[RunRecord, ...]:
    """The newest :data:`MAX_RUNS` of ``runs``, oldest first (by end time, then run id: the same order for all)."""
    return tuple(sorted(runs, key=lambda r: (r.ended_at, r.run_id))[-MAX_RUNS:])


def _summary(items: tuple[str, ...]) -> str:
    more = len(items) - MAX_DROPPED_SHOWN
    return "; ".join(items[:MAX_DROPPED_SHOWN]) + (f"; and {more} more" if more > 0 else "")


@dataclass(frozen=True)
class Assembled:
    """The history ``key`` made of the Variables that hold it (pure: see :func:`assemble_history`)."""

    key: str
    history: FailureHistory
    records: Mapping[str, RunRecord] = field(default_factory=dict)  # per-run key -> its record
    legacy: FailureHistory | None = None  # the runs of the single value of earlier releases, when present
    legacy_text: str | None = None  # that value as stored
    dropped: tuple[str, ...] = ()  # each entry left out, with where and why
    unsound: Mapping[str, str] = field(default_factory=dict)  # key -> stored text that lost something when read

    def notes(self) -> tuple[str, ...]:
        """What the read left out, for the log, the report and the page."""
        if not self.dropped:
            return ()
        left_out = f"{len(self.dropped)} stored entr(ies) left out"
        return (f"the failure history {self.key}: {left_out}: {_summary(self.dropped)}",)


def assemble_history(key: str, values: Mapping[str, str | None]) -> Assembled:
    """The history ``key`` from its Variables' values (``values``: listed key -> stored text; other keys ignored).

    Each per-run record is checked on its own and a bad one left out (named in ``dropped``); the single value of
    earlier releases is read entry by entry. A per-run record wins over an old entry of the same run id."""
    records: dict[str, RunRecord] = {}
    dropped: list[str] = []
    unsound: dict[str, str] = {}
    legacy: FailureHistory | None = None
    legacy_text: str | None = None
    for name in history_keys(key, values):
        text = values[name]
        if name == key:
            legacy_text = str(text)
            try:
                parsed = FailureHistory.parse_entries(text if isinstance(text, str) else None)
            except ValueError as error:
                dropped.append(f"{name} (the single value of earlier releases) does not parse: {str(error)[:200]}")
                unsound[name] = str(text)
                legacy = FailureHistory()
                continue
            legacy = parsed.history
            dropped.extend(f"{name} {entry}" for entry in parsed.dropped)
            if parsed.dropped:
                unsound[name] = str(text)
            continue
        try:
            records[name] = parse_record(text)
        except ValueError as error:
            dropped.append(f"{name}: {str(error)[:200]}")
            unsound[name] = str(text)
    by_run = {r.run_id: r for r in (legacy.runs if legacy is not None else ())}
    by_run.update({r.run_id: r for r in sorted(records.values(), key=lambda r: (r.ended_at, r.run_id))})
    history = FailureHistory(_newest(by_run.values()))
    return Assembled(key, history, records, legacy, legacy_text, tuple(dropped), unsound)


def parse_stored(value: Any) -> FailureHistory:
    """A stored single value (of earlier releases) as a history, bad runs left out; ``ValueError`` when it is not
    one at all (for readers outside a task)."""
    return FailureHistory.parse_entries(value if isinstance(value, str) else None).history


def prune(assembled: Assembled, own: str, own_run: RunRecord) -> list[str]:
    """The per-run Variables the writer of ``own`` deletes: those older than the newest :data:`MAX_RUNS` it knows
    (its own record included), never its own, never one it could not parse (their age is unknown)."""
    known = {**assembled.records, own: own_run}
    kept = {id(r) for r in _newest(known.values())}
    return sorted(name for name, record in known.items() if name != own and id(record) not in kept)


# -- through the Task SDK ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryRead:
    """What reading the history under ``key`` found.

    ``certain``: the history is what the store holds (``absent`` when it holds none); ``False`` when some of it
    could not be read, so nothing may be written from this read. ``notes`` say what was left out or unreadable.
    """

    key: str
    history: FailureHistory
    certain: bool
    absent: bool = False
    reason: str = ""
    assembled: Assembled | None = None
    notes: tuple[str, ...] = ()

    @property
    def dropped(self) -> tuple[str, ...]:
        return self.assembled.dropped if self.assembled is not None else ()


@dataclass(frozen=True)
class HistoryWrite:
    """What :func:`record_run` did: the history as it now is (``None``: this run was not recorded), and the notes."""

    history: FailureHistory | None
    notes: tuple[str, ...] = ()


def _listed(prefixes: Iterable[str]) -> set[str]:
    """The Variable keys the API server lists under ``prefixes``; raises when it cannot answer."""
    from airflow.sdk import Variable

    found: set[str] = set()
    for prefix in prefixes:
        found.update(Variable.keys(prefix=prefix))
    return found


def _uncertain(key: str, reason: str, warn: Callable[..., None]) -> HistoryRead:
    warn("%s: running without it, and it will not be updated", reason)
    return HistoryRead(key, FailureHistory(), certain=False, reason=reason, notes=(f"{reason}: not used",))


def load_history(key: str, warn: Callable[..., None]) -> HistoryRead:
    """The history under ``key``: empty and certain when there is none; empty and *uncertain* when some of it could
    not be read (see the module docstring)."""
    from airflow.sdk import Variable

    try:
        names = history_keys(key, _listed(listing_prefixes(key)))
    except Exception as error:  # the API server did not answer: nothing is known
        return _uncertain(key, f"the failure history {key} could not be read ({str(error)[:300]})", warn)
    if not names:
        return HistoryRead(key, FailureHistory(), certain=True, absent=True, reason="no history yet")
    # Reading only some is safe to write from: a prune deletes only records older than the newest MAX_RUNS read,
    # which are older than the newest MAX_RUNS stored too. The history used is then short of some runs: said.
    unread = names[MAX_RECORDS_READ:]
    values: dict[str, str | None] = {}
    for name in names[:MAX_RECORDS_READ]:
        try:
            text: Any = Variable.get(name)
        except Exception as get_error:
            try:
                still = name in _listed((name,))
            except Exception as error:
                return _uncertain(key, f"the failure history {key} could not be read ({str(error)[:300]})", warn)
            if still:  # it exists, yet could not be read
                # Said first, before the error cuts it short: a value that stays unreadable blocks every later record.
                why = (
                    f"the failure history {key} could not be read: {name} is listed but unreadable (if it stays so, as"
                    f" after a Fernet key change, delete it under Admin > Variables: until then no run is recorded in"
                    f" {key}): {get_error}"
                )
                return _uncertain(key, why[:600], warn)
            continue  # deleted since it was listed (a concurrent writer pruned it)
        values[name] = text if isinstance(text, str) else json.dumps(text)
    assembled = assemble_history(key, values)
    if unread:
        more = f"{len(unread)} stored record(s) past the first {MAX_RECORDS_READ} not read (delete stray ones)"
        assembled = replace(assembled, dropped=(*assembled.dropped, more))
    notes = assembled.notes()
    for note in notes:
        warn("%s", note)
    return HistoryRead(key, assembled.history, certain=True, absent=not values, assembled=assembled, notes=notes)


def corrupt_key(key: str, now: datetime | None = None) -> str:
    """Where an unsound value of ``key`` is copied before it is rewritten or removed: ``<key>.corrupt-<UTC time>``."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S%fZ")
    suffix = f".corrupt-{stamp}"
    return key[: MAX_KEY - len(suffix)] + suffix


def _keep_aside(name: str, text: str, notes: list[str], warn: Callable[..., None]) -> bool:
    """Copy the unsound value of ``name`` aside; ``False`` when the copy failed (then it must not be touched)."""
    from airflow.sdk import Variable

    copy = corrupt_key(name)
    try:
        Variable.set(copy, text, description=f"elastic-training: the unsound value of {name}, kept aside")
    except Exception as error:
        warn(
            "the failure history value %s could not be copied aside to %s (%s): it is left as it is", name, copy, error
        )
        notes.append(f"{name} could not be copied aside ({str(error)[:200]}): left as it is")
        return False
    warn("the failure history value %s was copied to %s before it is replaced", name, copy)
    notes.append(f"{name} (unsound) was copied to {copy} before it was replaced")
    return True


def _migrate(read: Assembled, kept: tuple[RunRecord, ...], notes: list[str], warn: Callable[..., None]) -> None:
    """Copy the single value's runs among ``kept`` into per-run Variables, then delete it once each is listed and it
    still reads as it did (a concurrent writer of an earlier release may have added a run meanwhile)."""
    from airflow.sdk import Variable

    key = read.key
    if read.legacy is None:
        return
    have = {r.run_id for r in read.records.values()}
    wanted = {r.run_id for r in kept}
    moved = [r for r in read.legacy.runs if r.run_id in wanted and r.run_id not in have]
    try:
        for record in moved:
            Variable.set(run_key(key, record.run_id), render_record(record), description=_DESCRIPTION)
        listed = _listed(listing_prefixes(key))
        if key not in listed:
            return  # another writer moved it meanwhile
        missing = [r.run_id for r in read.legacy.runs if r.run_id in wanted and run_key(key, r.run_id) not in listed]
        if missing:
            notes.append(f"the single-value history {key} is kept: {len(missing)} of its runs are not yet copied")
            return
        now = Variable.get(key)
    except Exception as error:
        warn("the single-value history %s was not moved to per-run Variables (%s): it is kept", key, error)
        notes.append(f"the single-value history {key} is kept: moving it failed ({str(error)[:200]})")
        return
    if now != read.legacy_text:
        return  # changed since it was read (an earlier release's writer): moved on a later run
    unsound = read.unsound.get(key)
    if unsound is not None and not _keep_aside(key, unsound, notes, warn):
        return
    try:
        Variable.delete(key)
    except Exception as error:
        warn("the single-value history %s could not be removed (%s): it is read again next time", key, error)
        return
    notes.append(f"the single-value history {key} was moved to per-run Variables ({len(moved)} run(s) copied)")


_DESCRIPTION = "elastic-training: one run's slice failures per node pool (failure history)"


def record_run(key: str, run: RunRecord, warn: Callable[..., None]) -> HistoryWrite:
    """Add ``run`` to the history under ``key``: write its own Variable, move an old single value, prune past the
    bound. Nothing is written when the stored history could not be read (see the module docstring)."""
    from airflow.sdk import Variable

    read = load_history(key, warn)
    notes = list(read.notes)
    if not read.certain:
        warn("the failure history %s was not updated with run %s: %s", key, run.run_id, read.reason)
        notes.append(f"run {run.run_id} was not recorded in {key}: {read.reason}")
        return HistoryWrite(None, tuple(notes))
    assembled = read.assembled or assemble_history(key, {})
    own = run_key(key, run.run_id)
    unsound_own = assembled.unsound.get(own)
    if unsound_own is not None and not _keep_aside(own, unsound_own, notes, warn):
        notes.append(f"run {run.run_id} was not recorded in {key}: its own Variable holds a value not kept aside")
        return HistoryWrite(None, tuple(notes))
    text = render_record(run)
    try:
        Variable.set(own, text, description=_DESCRIPTION)
    except Exception as error:  # the run's own result must not fail on its bookkeeping
        warn("the failure history %s could not be written (%s)", own, error)
        notes.append(f"run {run.run_id} was not recorded in {key}: writing {own} failed ({str(error)[:200]})")
        return HistoryWrite(None, tuple(notes))
    written = parse_record(text)
    merged = {r.run_id: r for r in assembled.history.runs}
    merged[written.run_id] = written
    history = FailureHistory(_newest(merged.values()))
    _migrate(assembled, history.runs, notes, warn)
    for name in prune(assembled, own, written):
        try:
            Variable.delete(name)
        except Exception as error:  # left for the next writer
            warn("the failure history record %s could not be pruned (%s)", name, error)
    return HistoryWrite(history, tuple(notes))
