"""Which node pools ``avoid_failing_node_pools`` keeps a run off (operators/pool_avoidance.py), and the affinity
the JobSet's workers get for it (operators/manifests.py)."""

from __future__ import annotations

import pytest

from elastic_training.operators import manifests
from elastic_training.operators.constants import LABEL_GKE_NODEPOOL, WORKER_REPLICATED_JOB
from elastic_training.operators.failure_history import FailureKind, RunRecord, SliceFailure
from elastic_training.operators.pool_avoidance import Avoidance, choose_avoided_pools, disabled
from elastic_training.operators.spec import ElasticRunSpec, SpecError, lint

POOLS = ("np-0", "np-1", "np-2", "np-3")


def run(run_id: str, *failed: str, kind: FailureKind = FailureKind.LOST_HOST) -> RunRecord:
    failures = tuple(SliceFailure(at=float(i), kind=kind, pool=p, slice=0) for i, p in enumerate(failed))
    return RunRecord(run_id=run_id, ended_at=0.0, failures=failures, pools=POOLS[:3], slices=3)


def test_a_pool_with_more_than_k_failures_in_the_last_runs_is_avoided() -> None:
    runs = [run("r1", "np-1"), run("r2", "np-1", "np-2"), run("r3")]
    decision = choose_avoided_pools(runs, candidates=POOLS, slices=3, threshold=1, source="nodes")
    assert decision.avoided == ("np-1",) and decision.failing == ("np-1",)
    assert decision.evidence["np-1"]["by_run"] == {"r1": 1, "r2": 1}
    assert (
        "np-1: 2 failure(s) in run(s) r1, r2" in decision.reason and "3 pool(s) left for 3 slice(s)" in decision.reason
    )
    assert Avoidance.from_json(decision.to_json()) == decision
    # K=2: two failures are not more than two.
    assert choose_avoided_pools(runs, candidates=POOLS, slices=3, threshold=2).avoided == ()


def test_nothing_is_avoided_when_the_other_pools_cannot_hold_the_slices() -> None:
    runs = [run("r1", "np-1"), run("r2", "np-1"), run("r3")]
    decision = choose_avoided_pools(runs, candidates=POOLS, slices=4, threshold=1)
    assert decision.avoided == () and decision.failing == ("np-1",)
    assert "cannot hold 4 slice(s)" in decision.reason and "3 other pool(s)" in decision.reason
    # Nor when the pools could not be listed (no `list nodes`): no candidates at all.
    unknown = choose_avoided_pools(runs, candidates=[], slices=1, threshold=1, source="could not be listed")
    assert unknown.avoided == () and "cannot hold 1 slice(s)" in unknown.reason


def test_evictions_and_preemptions_are_not_held_against_a_pool() -> None:
    runs = [run("r1", "np-1", kind=FailureKind.EVICTION), run("r2", "np-1", kind=FailureKind.PREEMPTION)]
    runs.append(run("r3", "np-1", kind=FailureKind.TRAINER_ERROR))
    decision = choose_avoided_pools(runs, candidates=POOLS, slices=3, threshold=1)
    assert decision.avoided == () and "no node pool had more than 1" in decision.reason
    assert disabled().to_json()["enabled"] is False


def spec(**overrides: object) -> ElasticRunSpec:
    values: dict[str, object] = {
        "run_name": "r",
        "base_output_directory": "/tmp/out",
        "steps": 20,
        "checkpoint_period": 5,
        "num_slices": 2,
        "runtime": "local",
    }
    return ElasticRunSpec(**{**values, **overrides})  # type: ignore[arg-type]


def test_the_workers_get_a_not_in_affinity_on_the_gke_node_pool_label() -> None:
    body = manifests.elastic_jobset(spec(avoid_node_pools=("np-2", "np-1")), name="r-x", namespace="default", labels={})
    jobs = {r["name"]: r["template"]["spec"]["template"]["spec"] for r in body["spec"]["replicatedJobs"]}
    terms = jobs[WORKER_REPLICATED_JOB]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": LABEL_GKE_NODEPOOL, "operator": "NotIn", "values": ["np-1", "np-2"]}]}
        ]
    }
    assert "affinity" not in jobs["pathways-head"]
    plain = manifests.elastic_jobset(spec(), name="r-x", namespace="default", labels={})
    assert all("affinity" not in r["template"]["spec"]["template"]["spec"] for r in plain["spec"]["replicatedJobs"])


def test_the_spec_refuses_a_pool_name_that_is_not_one() -> None:
    with pytest.raises(SpecError, match="avoid_node_pools"):
        lint(spec(avoid_node_pools=("Not A Pool",)))
    with pytest.raises(SpecError, match="avoid_node_pools"):
        lint(spec(avoid_node_pools=["np-1"]))
