"""Failure history across runs: which node pools and hosts the run's slices failed on, run after run. Pure.

A run report (:class:`operators.run_report.RunReport`; its ``history_record`` is this history's entry) lists the
run's slice failures (``slice_failures``), each with the GKE node pool its slice ran on
(``cloud.google.com/gke-nodepool``, the label GKE sets on a pool's nodes), the host (node) that failed, a
Kubernetes time and a kind. :class:`FailureHistory` keeps the last :data:`MAX_RUNS` runs of one task (newest
last), each with at most :data:`MAX_FAILURES_PER_RUN` failures, and what the checkpoint-period model needs from
it (wall time, step time, save time). The edge that stores it in Airflow is :mod:`operators.history_store`; the
aggregation here ("what failed where over the last N runs") is what the pool avoidance
(:mod:`operators.pool_avoidance`), ``checkpoint_period="auto"`` (:func:`operators.advice.auto_period`) and the
plugin's history page read.

Kinds (:class:`FailureKind`), from the pod's ``DisruptionTarget`` condition as upstream sets it
(``k8s.io/api/core/v1`` ``PodReason*``, see :mod:`operators.slice_failures`):

- ``lost_host``: ``DeletionByPodGC`` (the node is gone), ``DeletionByTaintManager`` (the node went NotReady or
  unreachable), or a ``Failed`` pod whose containers the kubelet reports ``ContainerStatusUnknown`` (they could not
  be located: the host went down and came back without them, quicker than the node lifecycle controller's grace
  period, so no taint and no ``DisruptionTarget`` came first);
- ``deleted``: a worker pod deleted before it finished with no disruption reason: ``kubectl delete pod``, the fault
  drill (``operators.slice_drill``: a forced delete), a descheduler or a script. Upstream gives every deletion its
  platform makes a ``DisruptionTarget`` reason (PodGC, the taint manager, the Eviction API, the kubelet, the
  scheduler's preemption: kubernetes ``pkg/controller/podgc``, ``pkg/controller/tainteviction``,
  ``pkg/registry/core/pod/storage/eviction.go``, ``pkg/kubelet/nodeshutdown``, ``pkg/scheduler/framework/preemption``),
  so a bare deletion is someone's decision, not the host failing (entries written before this kind record such a
  deletion as ``lost_host``);
- ``eviction``: ``EvictionByEvictionAPI`` (a drain, GKE maintenance or auto-repair), ``TerminationByKubelet``
  (node shutdown, Spot reclaim);
- ``preemption``: ``PreemptionByScheduler``, or Kueue suspending the admitted JobSet (then no pool: the whole
  run was preempted);
- ``trainer_error``: a worker container that failed (restarted in place, or its pod ``Failed``) with no
  disruption: the program, or the host under it, failed.

Only ``lost_host`` and ``trainer_error`` say something about a pool's health (:data:`HEALTH_KINDS`): an eviction
or a preemption was the platform's decision, and spends no slice budget either; a deletion was a person's or a
tool's (it does spend the slice budget: the slice was lost all the same).

Everything read back is checked (types, bounds), since anyone allowed to edit Airflow Variables can write it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

MAX_RUNS = 50
MAX_FAILURES_PER_RUN = 100
MAX_TEXT = 253  # a node or pool name (DNS-1123 subdomain) or a run id is shorter
MAX_HISTORY_BYTES = 512 * 1024
DEFAULT_RUNS = 3  # the "last N runs" the avoidance and the auto period look at, unless told
MAX_DURATION_SECONDS = 1e7  # a run's wall time, a step, a save or a recovery: longer is not a measurement (116 days)
MAX_DROPPED_SHOWN = 20  # the dropped entries a read names (the rest counted)
# A Kubernetes label value (k8s.io/apimachinery validation.IsValidLabelValue): what the GKE node-pool label holds.
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


class FailureKind(StrEnum):
    """What ended a slice's work (see the module docstring)."""

    LOST_HOST = "lost_host"
    EVICTION = "eviction"
    PREEMPTION = "preemption"
    TRAINER_ERROR = "trainer_error"
    DELETED = "deleted"


HEALTH_KINDS = frozenset({FailureKind.LOST_HOST, FailureKind.TRAINER_ERROR})
_REASON_KINDS = {
    "DeletionByPodGC": FailureKind.LOST_HOST,
    "DeletionByTaintManager": FailureKind.LOST_HOST,
    "EvictionByEvictionAPI": FailureKind.EVICTION,
    "TerminationByKubelet": FailureKind.EVICTION,
    "PreemptionByScheduler": FailureKind.PREEMPTION,
}


DELETED = "Deleted"  # what observations record for a pod deleted before it finished, with no disruption reason
_REASON_KINDS[DELETED] = FailureKind.DELETED
CONTAINER_STATUS_UNKNOWN = "ContainerStatusUnknown"  # the kubelet's reason for a container lost with its host
_REASON_KINDS[CONTAINER_STATUS_UNKNOWN] = FailureKind.LOST_HOST


def kind_of(reasons: Iterable[str]) -> FailureKind:
    """The kind of one slice failure from its pod failures' reasons.

    Each reason is the pod's ``DisruptionTarget`` reason, :data:`DELETED` for a pod deleted before it finished with
    none, :data:`CONTAINER_STATUS_UNKNOWN` for a ``Failed`` pod whose containers were lost with their host, or ``""``
    for a container that failed (restarted in place, or its pod ``Failed``). A preemption outranks
    an eviction, which outranks a lost host, which outranks a deletion: a slice's other pods fail *because* one was
    taken.
    """
    kinds = {_REASON_KINDS[r] for r in reasons if r in _REASON_KINDS}
    for kind in (FailureKind.PREEMPTION, FailureKind.EVICTION, FailureKind.LOST_HOST, FailureKind.DELETED):
        if kind in kinds:
            return kind
    return FailureKind.TRAINER_ERROR


@dataclass(frozen=True)
class SliceFailure:
    """One slice failure of one run: when (Unix seconds, Kubernetes' time), what, and where.

    ``pool``: the slice's GKE node pool (``""``: not known, e.g. a single-host slice whose pod never named its
    pool, or a Kueue preemption of the whole run); ``hosts``: the nodes its failed pods ran on.
    """

    at: float
    kind: FailureKind
    pool: str = ""
    hosts: tuple[str, ...] = ()
    slice: int = -1
    jobset: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "kind": self.kind.value,
            "pool": self.pool,
            "hosts": list(self.hosts),
            "slice": self.slice,
            "jobset": self.jobset,
        }

    @classmethod
    def from_json(cls, data: Any) -> SliceFailure:
        entry = _object(data)
        hosts = entry.get("hosts") or []
        if not isinstance(hosts, list) or len(hosts) > 64:
            raise ValueError("hosts must be a list of at most 64 node names")
        return cls(
            at=_seconds(entry, "at"),
            kind=FailureKind(str(entry.get("kind"))),
            pool=_pool(entry.get("pool")),
            hosts=tuple(_text({"host": h}, "host") for h in hosts),
            slice=_whole(entry, "slice", minimum=-1),
            jobset=_text(entry, "jobset"),
        )


@dataclass(frozen=True)
class RunRecord:
    """One finished run as the history keeps it: its failures, the pools its slices used, its timings.

    ``failures_total``: every failure the checkpoint model counts (in-process recoveries and full restarts), which
    may be more than ``failures`` lists (those are the ones placed on a slice); ``None`` where not measured.
    ``training_seconds``: the time the run spent training (its report's ``capacity.training_seconds``: each
    incarnation's first to last step, Kueue's suspensions taken out), the exposure ``checkpoint_period="auto"``
    counts failures over; ``None`` in entries from before it was kept. ``fingerprint``: the shape of the run
    (:func:`operators.advice.shape_fingerprint`), so ``auto`` learns only from runs like the next; ``""``: unknown.
    ``failures_in_saves``: of ``failures_total``, the in-process recoveries that interrupted a save (the restore went
    to a step older than the newest save started); ``None`` in entries from before it was kept.
    """

    run_id: str
    ended_at: float
    failures: tuple[SliceFailure, ...] = ()
    pools: tuple[str, ...] = ()
    slices: int = 0
    succeeded: bool = True
    wall_seconds: float | None = None
    failures_total: int = 0
    mean_step_seconds: float | None = None
    checkpoint_save_seconds: float | None = None
    recovery_seconds: float | None = None
    checkpoint_period: int | None = None
    goodput: float | None = None
    avoided_pools: tuple[str, ...] = ()
    training_seconds: float | None = None
    fingerprint: str = ""
    failures_in_saves: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "ended_at": self.ended_at,
            "failures": [f.to_json() for f in self.failures],
            "pools": list(self.pools),
            "slices": self.slices,
            "succeeded": self.succeeded,
            "wall_seconds": self.wall_seconds,
            "failures_total": self.failures_total,
            "mean_step_seconds": self.mean_step_seconds,
            "checkpoint_save_seconds": self.checkpoint_save_seconds,
            "recovery_seconds": self.recovery_seconds,
            "checkpoint_period": self.checkpoint_period,
            "goodput": self.goodput,
            "avoided_pools": list(self.avoided_pools),
            "training_seconds": self.training_seconds,
            "fingerprint": self.fingerprint,
            "failures_in_saves": self.failures_in_saves,
        }

    @classmethod
    def from_json(cls, data: Any) -> RunRecord:
        entry = _object(data)
        failures = entry.get("failures") or []
        pools = entry.get("pools") or []
        avoided = entry.get("avoided_pools") or []
        if not isinstance(failures, list) or len(failures) > MAX_FAILURES_PER_RUN:
            raise ValueError(f"failures must be a list of at most {MAX_FAILURES_PER_RUN}")
        for name, names in (("pools", pools), ("avoided_pools", avoided)):
            if not isinstance(names, list) or len(names) > 256:
                raise ValueError(f"{name} must be a list of at most 256 pool names")
        succeeded = entry.get("succeeded", True)
        if not isinstance(succeeded, bool):
            raise ValueError("succeeded must be true or false")
        period = entry.get("checkpoint_period")
        total = _whole(entry, "failures_total")
        in_saves = _count_or_none(entry.get("failures_in_saves"), total)
        return cls(
            run_id=_text(entry, "run_id", required=True),
            ended_at=_seconds(entry, "ended_at"),
            failures=tuple(SliceFailure.from_json(f) for f in failures),
            pools=tuple(name for name in map(_pool, pools) if name),
            slices=_whole(entry, "slices"),
            succeeded=succeeded,
            wall_seconds=_optional_duration(entry, "wall_seconds"),
            failures_total=total,
            mean_step_seconds=_optional_duration(entry, "mean_step_seconds"),
            checkpoint_save_seconds=_optional_duration(entry, "checkpoint_save_seconds"),
            recovery_seconds=_optional_duration(entry, "recovery_seconds"),
            checkpoint_period=None if period is None else _whole(entry, "checkpoint_period", minimum=1),
            goodput=_optional_fraction(entry, "goodput"),
            avoided_pools=tuple(name for name in map(_pool, avoided) if name),
            training_seconds=_optional_duration(entry, "training_seconds"),
            fingerprint=_text(entry, "fingerprint"),
            failures_in_saves=in_saves,
        )


@dataclass(frozen=True)
class FailureHistory:
    """The last runs of one task, oldest first, at most :data:`MAX_RUNS`."""

    runs: tuple[RunRecord, ...] = field(default_factory=tuple)

    def with_run(self, run: RunRecord) -> FailureHistory:
        """This history with ``run`` added (replacing one of the same run id), the oldest dropped past the bound."""
        kept = [r for r in self.runs if r.run_id != run.run_id]
        bounded = replace(run, failures=tuple(sorted(run.failures, key=lambda f: f.at))[-MAX_FAILURES_PER_RUN:])
        return FailureHistory(tuple([*kept, bounded][-MAX_RUNS:]))

    def last(self, runs: int) -> tuple[RunRecord, ...]:
        """The newest ``runs`` runs, oldest first."""
        return self.runs[-runs:] if runs > 0 else ()

    def to_json(self) -> dict[str, Any]:
        return {"version": 1, "runs": [r.to_json() for r in self.runs]}

    def render(self) -> str:
        """Compact JSON; the oldest runs go until it fits :data:`MAX_HISTORY_BYTES`."""
        runs = list(self.runs)
        while True:
            text = json.dumps({"version": 1, "runs": [r.to_json() for r in runs]}, separators=(",", ":"))
            if len(text.encode()) <= MAX_HISTORY_BYTES or not runs:
                return text
            runs.pop(0)

    @classmethod
    def parse(cls, text: str | None) -> FailureHistory:
        """A history from :meth:`render`'s JSON (``None`` or empty: no history); ``ValueError`` when unsound."""
        return cls.from_json(_document(text)) if text else cls()

    @classmethod
    def parse_entries(cls, text: str | None) -> ParsedHistory:
        """Like :meth:`parse`, but each run checked on its own: a bad one is dropped, named in ``dropped`` with
        why, and the rest kept. ``ValueError`` only when the value as a whole is not a history."""
        if not text:
            return ParsedHistory(cls())
        entry = _object(_document(text))
        if entry.get("version") != 1:
            raise ValueError(f"unknown history version {entry.get('version')!r}")
        runs = entry.get("runs")
        if not isinstance(runs, list):
            raise ValueError("runs must be a list")
        kept: list[RunRecord] = []
        dropped: list[str] = [f"runs[{i}]: more than {MAX_RUNS} runs" for i in range(len(runs) - MAX_RUNS)]
        for index, data in enumerate(runs[-MAX_RUNS:], start=max(0, len(runs) - MAX_RUNS)):
            try:
                kept.append(RunRecord.from_json(data))
            except (ValueError, TypeError, KeyError) as error:
                run_id = data.get("run_id") if isinstance(data, dict) else None
                named = f" (run {run_id[:64]!r})" if isinstance(run_id, str) else ""
                dropped.append(f"runs[{index}]{named}: {str(error)[:200]}")
        return ParsedHistory(cls(tuple(kept)), tuple(dropped))

    @classmethod
    def from_json(cls, data: Any) -> FailureHistory:
        entry = _object(data)
        if entry.get("version") != 1:
            raise ValueError(f"unknown history version {entry.get('version')!r}")
        runs = entry.get("runs")
        if not isinstance(runs, list) or len(runs) > MAX_RUNS:
            raise ValueError(f"runs must be a list of at most {MAX_RUNS}")
        try:
            return cls(tuple(RunRecord.from_json(r) for r in runs))
        except (TypeError, KeyError) as error:
            raise ValueError(f"not a sound history: {error}") from None


@dataclass(frozen=True)
class ParsedHistory:
    """A stored history read entry by entry: the runs kept, and each run dropped with why."""

    history: FailureHistory
    dropped: tuple[str, ...] = ()

    def dropped_summary(self) -> str:
        """The dropped entries, for a warning (the first :data:`MAX_DROPPED_SHOWN` named)."""
        shown = "; ".join(self.dropped[:MAX_DROPPED_SHOWN])
        more = len(self.dropped) - MAX_DROPPED_SHOWN
        return shown + (f"; and {more} more" if more > 0 else "")


def _document(text: str) -> Any:
    if len(text.encode()) > MAX_HISTORY_BYTES:
        raise ValueError(f"longer than {MAX_HISTORY_BYTES} bytes")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"not JSON: {error}") from None


@dataclass(frozen=True)
class PoolTally:
    """One pool's failures over the runs looked at: how many of each kind, and in which runs."""

    pool: str
    health_failures: int  # lost_host + trainer_error: what the avoidance counts
    by_kind: Mapping[str, int]
    by_run: Mapping[str, int]  # run id -> health failures in that run (runs with none left out)
    runs_used: int  # of the runs looked at, how many had a slice on this pool

    def to_json(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "health_failures": self.health_failures,
            "by_kind": dict(self.by_kind),
            "by_run": dict(self.by_run),
            "runs_used": self.runs_used,
        }


def tally_pools(runs: Sequence[RunRecord]) -> dict[str, PoolTally]:
    """What failed where over ``runs``: per pool (a failure on no known pool is left out), by kind and by run."""
    kinds: dict[str, dict[str, int]] = {}
    per_run: dict[str, dict[str, int]] = {}
    used: dict[str, int] = {}
    for run in runs:
        for pool in set(run.pools) | {f.pool for f in run.failures if f.pool}:
            used[pool] = used.get(pool, 0) + 1
        for failure in run.failures:
            if not failure.pool:
                continue
            counts = kinds.setdefault(failure.pool, {})
            counts[failure.kind.value] = counts.get(failure.kind.value, 0) + 1
            if failure.kind in HEALTH_KINDS:
                runs_of = per_run.setdefault(failure.pool, {})
                runs_of[run.run_id] = runs_of.get(run.run_id, 0) + 1
    return {
        pool: PoolTally(
            pool=pool,
            health_failures=sum(per_run.get(pool, {}).values()),
            by_kind=dict(sorted(kinds.get(pool, {}).items())),
            by_run=dict(per_run.get(pool, {})),
            runs_used=used[pool],
        )
        for pool in sorted(used)
    }


def history_summary(history: FailureHistory, runs: int = DEFAULT_RUNS) -> dict[str, Any]:
    """The last ``runs`` runs and their per-pool tally, as the report and the plugin show them."""
    looked_at = history.last(runs)
    return {
        "runs": [r.run_id for r in looked_at],
        "pools": [t.to_json() for t in tally_pools(looked_at).values()],
    }


# -- checked reads ------------------------------------------------------------------------------------


def _object(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("an entry must be an object")
    return value


def _text(entry: Mapping[str, Any], key: str, *, required: bool = False) -> str:
    value = entry.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise ValueError(f"{key} must be a string of at most {MAX_TEXT} characters")
    return value


def _whole(entry: Mapping[str, Any], key: str, *, minimum: int = 0) -> int:
    value = entry.get(key, 0 if minimum <= 0 else minimum)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= 2**31 - 1:
        raise ValueError(f"{key} must be a whole number from {minimum} to {2**31 - 1}")
    return value


def _count_or_none(value: Any, most: int) -> int | None:
    """A count of at most ``most`` as read back; ``None`` for anything else (a hint ``auto`` can do without: an
    edit that garbles it costs the run's entry nothing else), and ``most`` for more than that."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return min(value, most)


def _seconds(entry: Mapping[str, Any], key: str) -> float:
    value = entry.get(key)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (math.isfinite(value) and 0 <= value < 1e12)
    ):
        raise ValueError(f"{key} must be a number of seconds")
    return float(value)


def _optional_seconds(entry: Mapping[str, Any], key: str) -> float | None:
    return None if entry.get(key) is None else _seconds(entry, key)


def _optional_fraction(entry: Mapping[str, Any], key: str) -> float | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{key} must be a fraction from 0 to 1")
    return float(value)


def _optional_duration(entry: Mapping[str, Any], key: str) -> float | None:
    value = _optional_seconds(entry, key)
    if value is not None and value > MAX_DURATION_SECONDS:
        raise ValueError(f"{key} must be at most {MAX_DURATION_SECONDS:.0f} seconds")
    return value


def _pool(value: Any) -> str:
    """A node pool name as read back: a Kubernetes label value (it is the GKE node-pool label's), else refused."""
    if value in (None, ""):
        return ""
    if not isinstance(value, str) or not 0 < len(value) <= 63 or not _LABEL_VALUE.fullmatch(value):
        raise ValueError(f"pool {str(value)[:80]!r} is not a Kubernetes label value (at most 63 of [A-Za-z0-9-_.])")
    return value
