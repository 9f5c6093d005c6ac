"""``avoid_failing_node_pools``: which GKE node pools the next run keeps its slices off, and why. Pure.

**Evidence.** A pool's evidence is the slice failures that speak of its health (``lost_host``, ``trainer_error``:
:data:`operators.failure_history.HEALTH_KINDS`) in the last ``runs`` runs *that used the pool* (its exposures:
a run that avoided it, or never needed it, neither adds nor washes away evidence). Each failure weighs
``0.5 ** (age / HALF_LIFE_SECONDS)`` (``age``: from the failing run's ``ended_at`` to now) times
``CLEAN_RUN_FACTOR`` for every later run that used the pool without a health failure on it. A pool whose weight is
more than ``threshold`` is *failing*. So a pool that failed twice last night and ran clean since is forgiven by
its clean runs, and one nobody has used for weeks is forgiven by time, while one avoided every night keeps its
evidence: the history of a pool is what happened on it, not how many runs went by.

**Probation.** A failing pool that was avoided in the runs since it was last used for at least
``PROBATION_AFTER_RUNS * 2 ** k`` runs (``k``: the probation runs in a row that failed on it, up to
:data:`MAX_PROBATION_DOUBLINGS`) is *on probation*: this run does not avoid it, so it is tried again and its
result is recorded like any run's. A clean probation run weighs its old failures down by ``CLEAN_RUN_FACTOR``
(the pool comes back on evidence); a failing one adds evidence and doubles the wait before the next try, so a pool
that stays bad is tried ever more rarely, never alternately. A probation pool that the scheduler did not pick (more
pools than slices) is simply still on probation next run.

**Feasibility.** Only pools among ``candidates`` are avoided (a failing pool the cluster does not list as
schedulable is named, not put in the affinity). The run avoids every failing pool not on probation when the pools
left (``candidates``: the pools with enough schedulable nodes for one slice,
:meth:`operators.hooks.JobSetHook.list_node_pools`) can still hold its slices (one slice per pool: JobSet's
exclusive placement on ``cloud.google.com/gke-nodepool``); otherwise it avoids none and runs as it would without the
option, saying why. All or nothing, so a run never sits on a half-avoided cluster that was chosen by the order pools
were listed in. When the nodes cannot be listed (RBAC forbids it) nothing is avoided, and the reason says so.

The JobSet's worker pods then carry a required node affinity ``cloud.google.com/gke-nodepool NotIn [...]``
(:func:`operators.manifests.elastic_jobset`), which the scheduler honours as upstream's ``NodeAffinity`` filter
does (kubernetes ``pkg/scheduler/framework/plugins/nodeaffinity``); JobSet's webhook adds its own pod
affinities next to it and leaves it alone. If a worker still cannot be scheduled (``PodScheduled=False``, reason
``Unschedulable``, as kube-scheduler's ``handleSchedulingFailure`` writes it beside its ``FailedScheduling``
event: :mod:`operators.scheduling`) for :data:`RELAX_AFTER_SECONDS`, whatever the cause (a pool full of other
pods, a cordon after the plan, a slow scale-up), the trigger wakes the operator, which drops the avoidance for the
rest of the try (:func:`relaxed`) and recreates the JobSet without it, spending no full restart (its escalation
record: :data:`RELAXED_REASON`): the option never strands a run, at the cost of one recreation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from elastic_training.operators.failure_history import HEALTH_KINDS, RunRecord, tally_pools

DEFAULT_THRESHOLD = 1  # more than this much (decayed) failure weight: the pool is failing
HALF_LIFE_SECONDS = 3 * 24 * 3600.0  # a failure three days old weighs half
CLEAN_RUN_FACTOR = 0.5  # each later clean run on the pool halves a failure's weight
PROBATION_AFTER_RUNS = 2  # a failing pool avoided this many runs in a row is tried again
MAX_PROBATION_DOUBLINGS = 4  # the wait doubles per failed probation, up to 2 ** 4 times (32 runs)
RELAX_AFTER_SECONDS = 60.0  # workers unschedulable this long under an avoidance: the avoidance is dropped
RELAXED_REASON = "node_pool_avoidance_relaxed"  # the escalation record of the recreation that dropped it


@dataclass(frozen=True)
class PoolEvidence:
    """One pool's decayed evidence: its weight, the exposures it was read from, and its probation state."""

    pool: str
    weight: float
    failures: int  # health failures in the exposures looked at
    exposures: int  # runs that used the pool, of those looked at
    clean_since: int  # clean runs on the pool since its newest health failure
    avoided_since: int  # runs in a row, newest first, that avoided the pool since it was last used
    failed_probations: int  # probation runs in a row (newest first) that failed on the pool
    by_run: Mapping[str, int] = field(default_factory=dict)  # run id -> health failures in that run

    @property
    def probation_wait(self) -> int:
        """Runs the pool is avoided before it is tried again."""
        return int(PROBATION_AFTER_RUNS * 2 ** min(self.failed_probations, MAX_PROBATION_DOUBLINGS))

    def to_json(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "weight": round(self.weight, 4),
            "health_failures": self.failures,
            "exposures": self.exposures,
            "clean_since": self.clean_since,
            "avoided_since": self.avoided_since,
            "failed_probations": self.failed_probations,
            "probation_wait": self.probation_wait,
            "by_run": dict(self.by_run),
        }


def _used(run: RunRecord, pool: str) -> bool:
    return pool in run.pools or any(f.pool == pool for f in run.failures)


def _health_failures(run: RunRecord, pool: str) -> int:
    return sum(1 for f in run.failures if f.pool == pool and f.kind in HEALTH_KINDS)


def pool_evidence(history: Sequence[RunRecord], pool: str, *, runs: int, now: float) -> PoolEvidence:
    """``pool``'s evidence over its last ``runs`` exposures in ``history`` (oldest first), decayed to ``now``."""
    exposures = [r for r in history if _used(r, pool)][-runs:] if runs > 0 else []
    weight, clean_after, by_run = 0.0, 0, {}
    for run in reversed(exposures):
        failed = _health_failures(run, pool)
        if failed:
            age = max(0.0, now - run.ended_at)
            weight += failed * 0.5 ** (age / HALF_LIFE_SECONDS) * CLEAN_RUN_FACTOR**clean_after
            by_run[run.run_id] = failed
        else:
            clean_after += 1
    clean_since = 0
    for run in reversed(exposures):
        if _health_failures(run, pool):
            break
        clean_since += 1
    return PoolEvidence(
        pool=pool,
        weight=weight,
        failures=sum(by_run.values()),
        exposures=len(exposures),
        clean_since=clean_since,
        avoided_since=_avoided_since(history, pool),
        failed_probations=_failed_probations(history, pool),
        by_run=dict(sorted(by_run.items())),
    )


def _avoided_since(history: Sequence[RunRecord], pool: str) -> int:
    count = 0
    for run in reversed(history):
        if _used(run, pool):
            break
        count += pool in run.avoided_pools
    return count


def _failed_probations(history: Sequence[RunRecord], pool: str) -> int:
    """Newest first: the runs that used ``pool`` right after runs that avoided it and failed on it, in a row."""
    count, previous_use_failed = 0, None
    uses = [(i, r) for i, r in enumerate(history) if _used(r, pool)]
    for position in range(len(uses) - 1, -1, -1):
        index, run = uses[position]
        start = uses[position - 1][0] + 1 if position else 0
        after_avoidance = any(pool in r.avoided_pools for r in history[start:index])
        previous_use_failed = _health_failures(run, pool) > 0
        if not (after_avoidance and previous_use_failed):
            break
        count += 1
    return count


@dataclass(frozen=True)
class Avoidance:
    """The decision: pools avoided (maybe none), the evidence for each failing pool, and a sentence saying why.

    ``candidates``: the pools that can hold a slice of this run (``source`` says where that list came from);
    ``probation``: failing pools tried again this run; ``relaxed``: set when the avoidance was dropped after the
    run's workers could not be scheduled under it (why, in words).
    """

    enabled: bool
    avoided: tuple[str, ...] = ()
    failing: tuple[str, ...] = ()
    candidates: tuple[str, ...] = ()
    source: str = ""
    slices: int = 0
    threshold: int = DEFAULT_THRESHOLD
    runs: tuple[str, ...] = ()  # the run ids looked at
    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)  # pool -> its evidence over those runs
    reason: str = ""
    probation: tuple[str, ...] = ()
    relaxed: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "avoided": list(self.avoided),
            "failing": list(self.failing),
            "probation": list(self.probation),
            "candidates": list(self.candidates),
            "source": self.source,
            "slices": self.slices,
            "threshold": self.threshold,
            "runs": list(self.runs),
            "evidence": self.evidence,
            "reason": self.reason,
            "relaxed": self.relaxed,
        }

    @classmethod
    def from_json(cls, data: Any) -> Avoidance:
        if not isinstance(data, dict):
            return cls(enabled=False)
        return cls(
            enabled=bool(data.get("enabled")),
            avoided=tuple(str(p) for p in data.get("avoided") or []),
            failing=tuple(str(p) for p in data.get("failing") or []),
            candidates=tuple(str(p) for p in data.get("candidates") or []),
            source=str(data.get("source") or ""),
            slices=int(data.get("slices") or 0),
            threshold=int(data.get("threshold") or 0),
            runs=tuple(str(r) for r in data.get("runs") or []),
            evidence=dict(data.get("evidence") or {}),
            reason=str(data.get("reason") or ""),
            probation=tuple(str(p) for p in data.get("probation") or []),
            relaxed=str(data.get("relaxed") or ""),
        )


def choose_avoided_pools(
    runs: Sequence[RunRecord],
    *,
    candidates: Sequence[str],
    slices: int,
    threshold: int = DEFAULT_THRESHOLD,
    source: str = "",
    now: float,
    exposures: int = 3,
    unlisted: str = "",
) -> Avoidance:
    """The pools to avoid given the stored ``runs`` (oldest first) and the ``candidates`` that can hold one of
    ``slices`` slices; ``exposures``: how many of each pool's runs are read; ``unlisted``: why the pools could not
    be listed (then nothing is avoided)."""
    known = sorted(tally_pools(runs))
    evidence = {p: pool_evidence(runs, p, runs=exposures, now=now) for p in known}
    failing = sorted(p for p, e in evidence.items() if e.weight > threshold)
    probation = sorted(p for p in failing if evidence[p].avoided_since >= evidence[p].probation_wait)
    pools = sorted(set(candidates))
    base = Avoidance(
        enabled=True,
        failing=tuple(failing),
        probation=tuple(probation),
        candidates=tuple(pools),
        source=source,
        slices=slices,
        threshold=threshold,
        runs=tuple(r.run_id for r in runs),
        evidence={p: evidence[p].to_json() for p in failing},
    )
    if not failing:
        why = (
            f"no node pool had a failure weight over {threshold} in its last {exposures} run(s) "
            f"(decayed by time and by clean runs)"
        )
        # nothing to avoid tonight, but a pool that fails later could not be avoided either: say so now
        return replace(base, reason=f"{why}; {unlisted}" if unlisted else why)
    said = "; ".join(_evidence_text(evidence[p]) for p in failing)
    if unlisted:
        return replace(base, reason=f"not avoiding {', '.join(failing)} ({said}): {unlisted}")
    # Only pools the cluster lists as schedulable are avoided: a stored name of no such pool (deleted, renamed, or
    # edited by hand into the Variable) would only put a name the scheduler never sees into the NotIn list.
    held = [p for p in failing if p not in probation]
    avoid = [p for p in held if p in pools]
    unknown = [p for p in held if p not in pools]
    tried = f"; on probation (tried again this run): {', '.join(probation)}" if probation else ""
    if unknown:
        tried += f"; not among the cluster's schedulable pools, so not avoided: {', '.join(unknown)}"
    if not held:
        return replace(base, reason=f"not avoiding {', '.join(failing)} ({said}){tried}")
    left = [p for p in pools if p not in avoid]
    if len(left) < slices:
        why = (
            f"not avoiding {', '.join(avoid or unknown)} ({said}): {len(left)} other schedulable pool(s) "
            f"({', '.join(left) or 'none'}) cannot hold {slices} slice(s), one per pool{tried}"
        )
        return replace(base, reason=why)
    if not avoid:
        return replace(base, reason=f"not avoiding {', '.join(failing)} ({said}){tried}")
    why = f"avoiding {', '.join(avoid)} ({said}); {len(left)} pool(s) left for {slices} slice(s){tried}"
    return replace(base, avoided=tuple(avoid), reason=why)


def _evidence_text(e: PoolEvidence) -> str:
    runs = ", ".join(e.by_run)
    return (
        f"{e.pool}: weight {e.weight:.2f} from {e.failures} failure(s) in run(s) {runs}, "
        f"{e.clean_since} clean run(s) since, avoided {e.avoided_since} run(s) since last used"
    )


def relaxed(avoidance: Avoidance, why: str) -> Avoidance:
    """``avoidance`` dropped because the run's workers could not be scheduled under it."""
    return replace(avoidance, avoided=(), relaxed=why, reason=f"{avoidance.reason}; relaxed: {why}")


def disabled() -> Avoidance:
    """The decision when the option is off."""
    return Avoidance(enabled=False, reason="avoid_failing_node_pools is off")
