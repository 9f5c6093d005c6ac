"""``avoid_failing_node_pools``: which GKE node pools the next run keeps its slices off, and why. Pure.

A pool with more than ``threshold`` slice failures that speak of its health (``lost_host``, ``trainer_error``:
:data:`operators.failure_history.HEALTH_KINDS`) over the last ``runs`` runs is *failing*. The run avoids every
failing pool when the pools left can still hold its slices (one slice per pool: JobSet's exclusive placement on
``cloud.google.com/gke-nodepool``); otherwise it avoids none and runs as it would without the option, saying
why. All or nothing, so a run never sits on a half-avoided cluster that was chosen by the order pools were
listed in.

The JobSet's worker pods then carry a required node affinity ``cloud.google.com/gke-nodepool NotIn [...]``
(:func:`operators.manifests.elastic_jobset`), which the scheduler honours as upstream's ``NodeAffinity`` filter
does (kubernetes ``pkg/scheduler/framework/plugins/nodeaffinity``); JobSet's webhook adds its own pod
affinities next to it and leaves it alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from elastic_training.operators.failure_history import RunRecord, tally_pools

DEFAULT_THRESHOLD = 1  # more than this many failures in the runs looked at: the pool is failing


@dataclass(frozen=True)
class Avoidance:
    """The decision: pools avoided (maybe none), the evidence for each failing pool, and a sentence saying why.

    ``candidates``: the pools that can hold a slice of this run (``source`` says where that list came from).
    """

    enabled: bool
    avoided: tuple[str, ...] = ()
    failing: tuple[str, ...] = ()
    candidates: tuple[str, ...] = ()
    source: str = ""
    slices: int = 0
    threshold: int = DEFAULT_THRESHOLD
    runs: tuple[str, ...] = ()  # the run ids looked at
    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)  # pool -> its tally over those runs
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "avoided": list(self.avoided),
            "failing": list(self.failing),
            "candidates": list(self.candidates),
            "source": self.source,
            "slices": self.slices,
            "threshold": self.threshold,
            "runs": list(self.runs),
            "evidence": self.evidence,
            "reason": self.reason,
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
        )


def choose_avoided_pools(
    runs: Sequence[RunRecord],
    *,
    candidates: Sequence[str],
    slices: int,
    threshold: int = DEFAULT_THRESHOLD,
    source: str = "",
) -> Avoidance:
    """The pools to avoid given the last ``runs`` and the ``candidates`` that can hold one of ``slices`` slices."""
    tallies = tally_pools(runs)
    failing = sorted(p for p, t in tallies.items() if t.health_failures > threshold)
    pools = sorted(set(candidates))
    base = Avoidance(
        enabled=True,
        failing=tuple(failing),
        candidates=tuple(pools),
        source=source,
        slices=slices,
        threshold=threshold,
        runs=tuple(r.run_id for r in runs),
        evidence={p: tallies[p].to_json() for p in failing},
    )
    if not failing:
        why = f"no node pool had more than {threshold} slice failure(s) in the last {len(runs)} run(s)"
        return replace(base, reason=why)
    evidence = "; ".join(
        f"{p}: {tallies[p].health_failures} failure(s) in run(s) {', '.join(sorted(tallies[p].by_run))}"
        for p in failing
    )
    left = [p for p in pools if p not in failing]
    if len(left) < slices:
        why = (
            f"not avoiding {', '.join(failing)} ({evidence}): {len(left)} other pool(s) "
            f"({', '.join(left) or 'none'}) cannot hold {slices} slice(s), one per pool"
        )
        return replace(base, reason=why)
    why = f"avoiding {', '.join(failing)} ({evidence}); {len(left)} pool(s) left for {slices} slice(s)"
    return replace(base, avoided=tuple(failing), reason=why)


def disabled() -> Avoidance:
    """The decision when the option is off."""
    return Avoidance(enabled=False, reason="avoid_failing_node_pools is off")
