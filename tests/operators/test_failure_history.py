"""The failure history across runs (operators/failure_history.py) and where its records come from: the pools and
hosts of a run's slice failures, as the trigger's state learns them from the pods (operators/observations.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from elastic_training.operators.constants import LABEL_GKE_NODEPOOL
from elastic_training.operators.failure_history import (
    HEALTH_KINDS,
    MAX_FAILURES_PER_RUN,
    MAX_RUNS,
    FailureHistory,
    FailureKind,
    RunRecord,
    SliceFailure,
    history_summary,
    kind_of,
    tally_pools,
)
from elastic_training.operators.observations import MonitorState
from elastic_training.operators.run_report import RunReport
from tests.support.observed_objects import T0, job, pod

LOST, TRAINER, EVICTED = FailureKind.LOST_HOST, FailureKind.TRAINER_ERROR, FailureKind.EVICTION


def failure(pool: str, kind: FailureKind = LOST, at: float = T0, host: str = "") -> SliceFailure:
    return SliceFailure(at=at, kind=kind, pool=pool, hosts=(host,) if host else (), slice=0, jobset="js")


def run(run_id: str, *failures: SliceFailure, pools: tuple[str, ...] = ("a", "b", "c")) -> RunRecord:
    return RunRecord(run_id=run_id, ended_at=T0, failures=failures, pools=pools, slices=3)


@pytest.mark.parametrize(
    ("reasons", "kind"),
    [
        (["DeletionByPodGC"] * 4, LOST),
        (["DeletionByTaintManager"], LOST),
        (["Deleted"], FailureKind.DELETED),  # kubectl delete pod, the drill: no DisruptionTarget reason
        (["Deleted", ""], FailureKind.DELETED),  # its slice's other workers fail because one was deleted
        (["DeletionByPodGC", "Deleted"], LOST),
        ([""], TRAINER),
        (["", ""], TRAINER),
        (["EvictionByEvictionAPI", "Deleted", "Deleted"], EVICTED),  # the others fail because one was evicted
        (["TerminationByKubelet"], EVICTED),
        (["PreemptionByScheduler", "EvictionByEvictionAPI"], FailureKind.PREEMPTION),
    ],
)
def test_the_kind_of_a_slice_failure_comes_from_its_pods_reasons(reasons: list[str], kind: FailureKind) -> None:
    assert kind_of(reasons) is kind


def test_what_failed_where_over_the_last_runs() -> None:
    history = FailureHistory()
    history = history.with_run(run("r1", failure("b", host="b-0"), failure("c", TRAINER)))
    history = history.with_run(run("r2", failure("b", host="b-2"), failure("a", EVICTED)))
    history = history.with_run(run("r3", pools=("a", "b", "d")))
    tallies = tally_pools(history.last(3))
    assert tallies["b"].health_failures == 2 and tallies["b"].by_run == {"r1": 1, "r2": 1}
    assert tallies["c"].health_failures == 1 and tallies["c"].by_kind == {"trainer_error": 1}
    # An eviction is counted by kind, but is no sign of the pool's health.
    assert tallies["a"].health_failures == 0 and tallies["a"].by_kind == {"eviction": 1}
    assert tallies["a"].runs_used == 3 and tallies["d"].runs_used == 1
    # Only the last N runs count.
    assert tally_pools(history.last(1))["b"].health_failures == 0
    summary = history_summary(history, runs=2)
    assert summary["runs"] == ["r2", "r3"]
    assert {p["pool"]: p["health_failures"] for p in summary["pools"]} == {"a": 0, "b": 1, "c": 0, "d": 0}


def test_the_history_is_bounded_and_a_rerun_replaces_its_entry() -> None:
    history = FailureHistory()
    for n in range(MAX_RUNS + 5):
        history = history.with_run(run(f"r{n}"))
    assert len(history.runs) == MAX_RUNS and history.runs[0].run_id == "r5"
    history = history.with_run(run("r7", failure("a")))
    assert [r.run_id for r in history.runs].count("r7") == 1 and history.runs[-1].failures
    many = run("big", *(failure("a", at=T0 + i) for i in range(MAX_FAILURES_PER_RUN + 10)))
    kept = history.with_run(many).runs[-1].failures
    assert len(kept) == MAX_FAILURES_PER_RUN and kept[-1].at == T0 + MAX_FAILURES_PER_RUN + 9  # the newest kept


def test_the_history_round_trips_and_refuses_what_it_did_not_write() -> None:
    history = FailureHistory().with_run(run("r1", failure("b", host="gke-b-0")))
    assert FailureHistory.parse(history.render()) == history
    assert FailureHistory.parse(None) == FailureHistory() == FailureHistory.parse("")
    good = json.loads(history.render())
    for broken in (
        "not json",
        "[]",
        json.dumps({**good, "version": 2}),
        json.dumps({"version": 1, "runs": [{"run_id": 3, "ended_at": T0}]}),
        json.dumps({"version": 1, "runs": [{"run_id": "r", "ended_at": -1}]}),
        json.dumps({"version": 1, "runs": [{"run_id": "r", "ended_at": T0, "failures": [{"at": T0, "kind": "x"}]}]}),
        json.dumps({"version": 1, "runs": [{"run_id": "r", "ended_at": T0, "goodput": 7}]}),
        json.dumps({"version": 1, "runs": [{"run_id": "r" * 300, "ended_at": T0}]}),
        json.dumps({"version": 1, "runs": [{"run_id": "r", "ended_at": T0}] * (MAX_RUNS + 1)}),
    ):
        with pytest.raises(ValueError):
            FailureHistory.parse(broken)


def hostile_history() -> str:
    """A stored value someone edited: two sound runs around runs no reader should trust."""
    good = json.loads(FailureHistory().with_run(run("r1", failure("a"))).with_run(run("r9")).render())["runs"]
    sound = {"run_id": "x", "ended_at": T0}
    hostile: list[Any] = [
        {**sound, "run_id": "script", "failures": [{"at": T0, "kind": "lost_host", "pool": "<script>x</script>"}]},
        {**sound, "run_id": "script-pools", "pools": ["<script>x</script>"]},
        {**sound, "run_id": "long-pool", "avoided_pools": ["p" * 64]},
        {**sound, "run_id": "huge-wall", "wall_seconds": 1e9},
        {**sound, "run_id": "negative-step", "mean_step_seconds": -1},
        {**sound, "run_id": "bool-slices", "slices": True},
        {**sound, "run_id": "string-save", "checkpoint_save_seconds": "1"},
        {**sound, "run_id": "list-failures", "failures": {"at": T0}},
        {**sound, "run_id": 7},
        "not an object",
        None,
    ]
    # Python's json writes (and reads) Infinity and NaN, as a hand edit through it might
    hostile.append({**sound, "run_id": "infinite", "recovery_seconds": float("inf")})
    return json.dumps({"version": 1, "runs": [good[0], *hostile, good[1]]})


def test_each_stored_run_is_checked_on_its_own_the_rest_kept() -> None:
    parsed = FailureHistory.parse_entries(hostile_history())
    assert [r.run_id for r in parsed.history.runs] == ["r1", "r9"]
    assert parsed.history.runs[0].failures[0].pool == "a"
    assert len(parsed.dropped) == 12
    named = dict(d.split(": ", 1) for d in parsed.dropped)
    assert "not a Kubernetes label value" in named["runs[1] (run 'script')"]
    assert "not a Kubernetes label value" in named["runs[2] (run 'script-pools')"]
    assert "not a Kubernetes label value" in named["runs[3] (run 'long-pool')"]
    assert "at most" in named["runs[4] (run 'huge-wall')"]
    assert "seconds" in named["runs[5] (run 'negative-step')"]
    assert "whole number" in named["runs[6] (run 'bool-slices')"]
    assert "runs[9]" in named and "runs[10]" in named and "runs[11]" in named  # wrong run id, not objects
    assert "seconds" in named["runs[12] (run 'infinite')"]
    with pytest.raises(ValueError):  # the strict reader still refuses the whole value
        FailureHistory.parse(hostile_history())
    # zero and tiny measurements are kept: a run may measure them; the advice bounds what it reads
    tiny = json.dumps({"version": 1, "runs": [{"run_id": "z", "ended_at": T0, "mean_step_seconds": 0.0}]})
    assert FailureHistory.parse_entries(tiny).history.runs[0].mean_step_seconds == 0.0


def test_a_value_that_is_not_a_history_at_all_is_refused_whole() -> None:
    for broken in ("<script>x</script>", "{", "[]", json.dumps({"version": 2, "runs": []}), '{"version":1}'):
        with pytest.raises(ValueError):
            FailureHistory.parse_entries(broken)
    too_many = json.dumps({"version": 1, "runs": [{"run_id": f"r{i}", "ended_at": T0} for i in range(MAX_RUNS + 2)]})
    parsed = FailureHistory.parse_entries(too_many)
    assert len(parsed.history.runs) == MAX_RUNS and parsed.history.runs[0].run_id == "r2"
    assert parsed.dropped == (f"runs[0]: more than {MAX_RUNS} runs", f"runs[1]: more than {MAX_RUNS} runs")


def test_a_run_report_becomes_a_history_entry() -> None:
    report: dict[str, Any] = {
        "slice_failures": [failure("b", host="gke-b-1").to_json()],
        "node_pools": ["a", "b"],
        "num_slices": 2,
        "wall_seconds": 100.0,
        "mean_step_seconds": 0.5,
        "checkpoint_save_seconds": 0.25,
        "checkpoint_period": 10,
        "goodput": 0.8,
        "recoveries": [{"phase_seconds": {"total": 4.0}, "interrupted_save": True}, {"phase_seconds": {"total": 2.0}}],
        "escalations": [{"seconds_to_recreate": 8.0}],
        "node_pool_avoidance": {"avoided": ["c"]},
    }
    record = RunReport.from_json({"target_step": 99, **report}).history_record(
        run_id="scheduled__1", ended_at=T0, succeeded=True
    )
    assert record.failures == (failure("b", host="gke-b-1"),)
    assert record.pools == ("a", "b") and record.slices == 2 and record.avoided_pools == ("c",)
    assert record.failures_total == 3 and record.recovery_seconds == pytest.approx(14.0 / 3)
    assert record.failures_in_saves == 1  # the recovery that interrupted a save
    # No recovery could tell (synchronous saves): the history does not say, rather than say none.
    unknown = {**report, "recoveries": [{"phase_seconds": {"total": 4.0}}]}
    told = RunReport.from_json({"target_step": 99, **unknown}).history_record(run_id="r", ended_at=T0, succeeded=True)
    assert told.failures_in_saves is None
    assert (record.wall_seconds, record.mean_step_seconds, record.checkpoint_save_seconds) == (100.0, 0.5, 0.25)
    assert RunRecord.from_json(record.to_json()) == record


def test_failures_in_saves_are_read_back_checked_and_never_more_than_the_failures() -> None:
    sound = {"run_id": "r", "ended_at": T0, "failures_total": 2, "pools": ["a"]}
    assert RunRecord.from_json(sound).failures_in_saves is None  # an entry from before it was kept
    assert RunRecord.from_json({**sound, "failures_in_saves": 1}).failures_in_saves == 1
    assert RunRecord.from_json({**sound, "failures_in_saves": 9}).failures_in_saves == 2  # an edit: all of them
    for broken in (-1, 1.5, "1", True, [1]):
        # a garbled hint is dropped, not the run: its pools and failures are still read
        read = RunRecord.from_json({**sound, "failures_in_saves": broken})
        assert read.failures_in_saves is None and read.pools == ("a",) and read.failures_total == 2


def placed(uid: str, slice_index: int, pool: str, node: str, **kwargs: Any) -> dict[str, Any]:
    """A worker pod bound to ``node``; followers carry JobSet's nodeSelector for their slice's pool."""
    body = pod(uid, slice_index, **kwargs)
    leader = uid.split("-")[0].endswith("p0")
    body["spec"] = {"nodeName": node, "nodeSelector": {} if leader else {LABEL_GKE_NODEPOOL: pool}}
    return body


def test_a_slice_failure_names_its_pool_its_hosts_and_its_kind() -> None:
    state = MonitorState(started_at=T0)
    for index, pool in enumerate(("pool-a", "pool-b")):
        state.on_job(job(f"j{index}", index), deleted=False, now=T0)
        for i in range(4):
            state.on_pod(placed(f"s{index}p{i}", index, pool, f"{pool}-{i}"), deleted=False, now=T0)
    # A host of pool-b is lost: PodGC fails and deletes every pod of the slice (the leader too, which names no pool).
    for i in range(4):
        gone = placed(f"s1p{i}", 1, "pool-b", f"pool-b-{i}", deleting=T0 + 50, disruption=("DeletionByPodGC", T0 + 50))
        state.on_pod(gone, deleted=True, now=T0 + 60)
    # The Job's replacements land on another pool: the failure stays where it happened.
    for i in range(4):
        state.on_pod(placed(f"s1p{i}-new", 1, "pool-c", f"pool-c-{i}", created=T0 + 52), deleted=False, now=T0 + 60)
    # A worker of pool-a crashes and restarts in place.
    state.on_pod(placed("s0p2", 0, "pool-a", "pool-a-2", restarts=1, finished=T0 + 80), deleted=False, now=T0 + 90)
    found = state.slice_failures("js-1")
    assert [(f.slice, f.kind, f.pool) for f in found] == [(1, LOST, "pool-b"), (0, TRAINER, "pool-a")]
    assert found[0].hosts == ("pool-b-0", "pool-b-1", "pool-b-2", "pool-b-3") and found[1].hosts == ("pool-a-2",)
    assert found[0].jobset == "js-1" and found[0].at == T0 + 50
    assert state.node_pools() == ["pool-a", "pool-b", "pool-c"]
    # The pools survive the trigger's serialisation.
    again = MonitorState.from_json(json.loads(json.dumps(state.to_json())))
    assert again.slice_failures("js-1") == found


def test_a_worker_deleted_without_a_disruption_reason_is_a_deletion_not_a_lost_host() -> None:
    """The fault drill's forced delete (and ``kubectl delete pod``): the pod goes with no ``DisruptionTarget``
    condition, so its slice failure is ``deleted``, which no pool's health is judged on."""
    state = MonitorState(started_at=T0)
    state.on_job(job("j0", 0), deleted=False, now=T0)
    for i in range(4):
        state.on_pod(placed(f"s0p{i}", 0, "pool-a", f"pool-a-{i}"), deleted=False, now=T0)
    state.on_pod(placed("s0p1", 0, "pool-a", "pool-a-1", deleting=T0 + 40), deleted=True, now=T0 + 41)
    # The slice's other workers fail because one was taken (their containers exit): still the deletion's doing.
    state.on_pod(placed("s0p2", 0, "pool-a", "pool-a-2", restarts=1, finished=T0 + 41), deleted=False, now=T0 + 42)
    [found] = state.slice_failures("js-1")
    assert (found.kind, found.pool) == (FailureKind.DELETED, "pool-a")
    assert found.kind not in HEALTH_KINDS
    record = run("drill-run", found, pools=("pool-a",))
    assert FailureHistory.parse(FailureHistory().with_run(record).render()).runs[0].failures[0].kind is found.kind
