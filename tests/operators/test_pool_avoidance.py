"""Which node pools ``avoid_failing_node_pools`` keeps a run off (operators/pool_avoidance.py), and the affinity
the JobSet's workers get for it (operators/manifests.py)."""

from __future__ import annotations

import pytest

from elastic_training.operators import manifests
from elastic_training.operators.constants import LABEL_GKE_NODEPOOL, WORKER_REPLICATED_JOB
from elastic_training.operators.failure_history import FailureKind, RunRecord, SliceFailure
from elastic_training.operators.pool_avoidance import HALF_LIFE_SECONDS, Avoidance, choose_avoided_pools, disabled
from elastic_training.operators.spec import ElasticRunSpec, SpecError, lint

POOLS = ("np-0", "np-1", "np-2", "np-3")
NOW = 1_700_000_000.0


def run(run_id: str, *failed: str, kind: FailureKind = FailureKind.LOST_HOST) -> RunRecord:
    failures = tuple(SliceFailure(at=float(i), kind=kind, pool=p, slice=0) for i, p in enumerate(failed))
    return RunRecord(run_id=run_id, ended_at=NOW, failures=failures, pools=POOLS[:3], slices=3)


def test_a_pool_with_more_than_k_failures_in_the_last_runs_is_avoided() -> None:
    runs = [run("r1"), run("r2", "np-1"), run("r3", "np-1", "np-2")]
    decision = choose_avoided_pools(runs, candidates=POOLS, slices=3, threshold=1, source="nodes", now=NOW)
    assert decision.avoided == ("np-1",) and decision.failing == ("np-1",)
    assert decision.evidence["np-1"]["by_run"] == {"r2": 1, "r3": 1}
    assert (
        "np-1: weight 2.00 from 2 failure(s) in run(s) r2, r3" in decision.reason
        and "3 pool(s) left for 3 slice(s)" in decision.reason
    )
    assert Avoidance.from_json(decision.to_json()) == decision
    # K=2: two failures are not more than two.
    assert choose_avoided_pools(runs, candidates=POOLS, slices=3, threshold=2, now=NOW).avoided == ()


def test_nothing_is_avoided_when_the_other_pools_cannot_hold_the_slices() -> None:
    runs = [run("r1"), run("r2", "np-1"), run("r3", "np-1")]
    decision = choose_avoided_pools(runs, candidates=POOLS, slices=4, threshold=1, now=NOW)
    assert decision.avoided == () and decision.failing == ("np-1",)
    assert "cannot hold 4 slice(s)" in decision.reason and "3 other schedulable pool(s)" in decision.reason
    # Nor when the pools could not be listed (no `list nodes`): no candidates at all.
    unknown = choose_avoided_pools(runs, candidates=[], slices=1, threshold=1, source="could not be listed", now=NOW)
    assert unknown.avoided == () and "cannot hold 1 slice(s)" in unknown.reason


def test_only_pools_the_cluster_lists_as_schedulable_are_avoided() -> None:
    # "np-9": a sound label value, failing in the stored history, but no pool of this cluster (deleted, renamed, or
    # written into the Variable by hand): named, never put in the affinity.
    runs = [run("r1", "np-9", "np-9", "np-1", "np-1")]
    decision = choose_avoided_pools(runs, candidates=POOLS, slices=2, threshold=1, now=NOW)
    assert decision.failing == ("np-1", "np-9") and decision.avoided == ("np-1",)
    assert "not among the cluster's schedulable pools, so not avoided: np-9" in decision.reason
    alone = choose_avoided_pools([run("r1", "np-9", "np-9")], candidates=POOLS, slices=2, threshold=1, now=NOW)
    assert alone.avoided == () and alone.reason.startswith("not avoiding np-9 (")
    assert "so not avoided: np-9" in alone.reason
    body = manifests.elastic_jobset(spec(avoid_node_pools=alone.avoided), name="r-x", namespace="default", labels={})
    assert all("affinity" not in r["template"]["spec"]["template"]["spec"] for r in body["spec"]["replicatedJobs"])


def test_evictions_preemptions_and_deletions_are_not_held_against_a_pool() -> None:
    runs = [run("r1", "np-1", kind=FailureKind.EVICTION), run("r2", "np-1", kind=FailureKind.PREEMPTION)]
    runs.append(run("r3", "np-1", kind=FailureKind.TRAINER_ERROR))
    runs += [run(f"drill-{n}", "np-1", "np-1", kind=FailureKind.DELETED) for n in range(3)]  # the drill, kubectl
    decision = choose_avoided_pools(runs, candidates=POOLS, slices=3, threshold=1, now=NOW)
    assert decision.avoided == () and "no node pool had a failure weight over 1" in decision.reason
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


def avoided_run(run_id: str, *avoided: str) -> RunRecord:
    return RunRecord(run_id=run_id, ended_at=NOW, pools=("np-0", "np-2", "np-3"), slices=3, avoided_pools=avoided)


def test_evidence_decays_with_clean_runs_on_the_pool_and_with_time() -> None:
    failing = [run("r1", "np-1"), run("r2", "np-1")]
    assert choose_avoided_pools(failing, candidates=POOLS, slices=3, now=NOW).avoided == ("np-1",)
    # One clean run on the pool halves both failures: 1.0 is not more than 1.
    forgiven = choose_avoided_pools([*failing, run("r3")], candidates=POOLS, slices=3, now=NOW)
    assert forgiven.avoided == () and forgiven.failing == ()
    # Runs that avoided the pool wash nothing away: its evidence is its own exposures.
    kept = choose_avoided_pools([*failing, avoided_run("r3", "np-1")], candidates=POOLS, slices=3, now=NOW)
    assert kept.avoided == ("np-1",) and kept.evidence["np-1"]["avoided_since"] == 1
    # Three days later (one half-life) the same failures weigh 1.0.
    later = choose_avoided_pools(failing, candidates=POOLS, slices=3, now=NOW + HALF_LIFE_SECONDS)
    assert later.avoided == ()


def test_a_pool_on_probation_is_tried_and_a_failed_probation_doubles_the_wait() -> None:
    history = [run("r1", "np-1"), run("r2", "np-1"), avoided_run("r3", "np-1"), avoided_run("r4", "np-1")]
    decision = choose_avoided_pools(history, candidates=POOLS, slices=3, now=NOW)
    assert decision.probation == ("np-1",) and decision.avoided == () and "on probation" in decision.reason
    # The probation run failed on it: avoided again, now for twice as long.
    history.append(run("r5", "np-1"))
    for name in ("r6", "r7", "r8", "r9"):
        decision = choose_avoided_pools(history, candidates=POOLS, slices=3, now=NOW)
        assert decision.avoided == ("np-1",) and decision.evidence["np-1"]["probation_wait"] == 4
        history.append(avoided_run(name, "np-1"))
    decision = choose_avoided_pools(history, candidates=POOLS, slices=3, now=NOW)
    assert decision.probation == ("np-1",) and decision.avoided == ()
    # A clean probation run brings it back on evidence.
    history.append(run("r10"))
    back = choose_avoided_pools(history, candidates=POOLS, slices=3, now=NOW)
    assert back.failing == () and back.avoided == ()


def test_nothing_is_avoided_when_the_nodes_cannot_be_listed_and_the_reason_says_rbac() -> None:
    runs = [run("r1", "np-1"), run("r2", "np-1")]
    why = "RBAC forbids listing nodes, so no pool is avoided"
    decision = choose_avoided_pools(runs, candidates=[], slices=1, now=NOW, unlisted=why)
    assert decision.avoided == () and why in decision.reason
    # Nothing failing tonight: the report still says the option cannot work here.
    clean = choose_avoided_pools([run("r1")], candidates=[], slices=1, now=NOW, unlisted=why)
    assert clean.avoided == () and clean.reason.endswith(f"; {why}")
