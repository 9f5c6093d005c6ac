"""``avoid_failing_node_pools`` over several runs on the local cluster (issue 27): GKE's node pools (v5e-small:
four v5e-16 pools of 4 hosts), the real JAX trainer, faults through the cluster's fault API (lose-host: the whole
slice's pool goes down and is repaired 2 s later, before the node lifecycle controller marks it NotReady: the node
agent reports its pods Failed, their containers ``ContainerStatusUnknown``, as a kubelet does for containers lost
with their host).

A history of three runs, a host of the same pool lost in two of them; then the fourth run, three ways, each from
that same three-run history: option on (the pool is avoided: no worker lands on it, the report says on what
evidence), option off (the pool is used as before), option on with 4 slices (avoiding it would leave 3 pools for 4
slices: it is used, and the report says why).

The history's first run is a real run of 3 slices, a host lost: it proves the run records the pool and host of its
slice failure where the next runs read it. It may train on with 2 slices (``elastic_min_slice_count=2``): a slice
whose hosts came back before the node lifecycle controller marked them keeps its ``Failed`` pods, beside which
JobSet's exclusive placement cannot re-form it (two leader pods: the followers are refused), so a run waiting for
every slice would wait out MaxText's whole ``elastic_timeout_seconds`` (5 min) for a full restart, and the record
is the same either way. The two after it (the same pool failing again, then a clean run) are added through the
product's own history API (`FailureHistory.with_run`, the call `record_run` makes): a second real run would record
the same thing the same way.

Then, each from a seeded history: an avoidance the cluster cannot honour (a pool full of another team's pods) is
relaxed and the run proceeds; the relaxation driven step by step (state kept, no budget spent, one JobSet); a
failing pool avoided, tried on probation and forgiven by its clean run, over real runs of one history, with old
failures decayed; and a run without the node-reading ClusterRole, whose report says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, utils

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.constants import (
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    LABEL_GKE_NODEPOOL,
    LABEL_REPLICATED_JOB_NAME,
    LABEL_RUN_NAME,
    WORKER_REPLICATED_JOB,
)
from elastic_training.operators.failure_history import FailureHistory, FailureKind, RunRecord, SliceFailure
from elastic_training.operators.pool_avoidance import choose_avoided_pools
from elastic_training.operators.rbac import node_pool_reader_manifests
from tests.support.airflow_dags import dag_from_source, grant_node_reading, states, xcom
from tests.support.history_variables import restore_history, stored_history
from tests.support.step_faults import StepFaults

pytestmark = pytest.mark.slow

NAMESPACE = "default"
HISTORY_KEY = "elastic_training_failure_history.avoidance-test"
SMALL_MODEL = {"base_emb_dim": 32, "base_num_decoder_layers": 1, "vocab_size": 32, "max_target_length": 16}
HEADER = """\
from datetime import timedelta
from airflow.sdk import DAG
from elastic_training.operators import ElasticJobSetOperator
"""


def history_dag(dag_id: str, base: Path, *, slices: int = 3, avoid: bool = False, min_slices: int = -1) -> Any:
    """A tiny run (16 steps, a checkpoint every 4, 0.3 s a step) sharing one failure history; ``min_slices``: MaxText's
    ``elastic_min_slice_count`` (-1: wait for every slice)."""
    body = f"""
    with DAG({dag_id!r}, schedule=None) as dag:
        ElasticJobSetOperator(
            task_id="pretrain",
            run_name={dag_id.replace("_", "-")!r},
            base_output_directory={str(base)!r},
            steps=16,
            checkpoint_period=4,
            num_slices={slices},
            elastic_min_slice_count={min_slices},
            tpu_type="v5e",
            tpu_topology="4x4",
            runtime="local",
            maxtext_args={SMALL_MODEL!r},
            max_slice_restarts=2,
            elastic_max_retries=4,
            max_full_restarts=1,
            stall_timeout=timedelta(minutes=6),
            deferrable=True,
            poll_interval=1.0,
            local_env={{"LOCAL_STEP_SECONDS": "0.3"}},
            avoid_failing_node_pools={avoid!r},
            node_pool_failure_threshold=1,
            failure_history_runs=3,
            failure_history_key={HISTORY_KEY!r},
        )
    """
    return dag_from_source(dag_id, body, HEADER)


@pytest.fixture(scope="module")
def node_reader(cluster_connection: UpstreamCluster) -> Iterator[UpstreamCluster]:
    """The operators' account may also list nodes (deploy/rbac-node-pools.yaml), as the option needs."""
    grant_node_reading(cluster_connection)
    yield cluster_connection


def _pool_of_node(faults: StepFaults, node: str) -> str:
    return str((faults.core.read_node(node).metadata.labels or {})[LABEL_GKE_NODEPOOL])


def _running_workers(faults: StepFaults) -> list[Any]:
    selector = f"{LABEL_RUN_NAME}={faults.run_name},{LABEL_REPLICATED_JOB_NAME}={WORKER_REPLICATED_JOB}"
    pods = faults.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
    return [p for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]


def lose_host_of(pool: list[str], lost: list[dict[str, Any]]) -> Callable[[StepFaults], None]:
    """Lose a host of ``pool[0]`` (of the pool slice 0 runs on when ``pool`` is empty), repaired 2 s later."""

    def act(faults: StepFaults) -> None:
        workers = _running_workers(faults)
        if not pool:
            first = next(p for p in workers if p.metadata.labels.get("jobset.sigs.k8s.io/job-index") == "0")
            pool.append(_pool_of_node(faults, first.spec.node_name))
        victims = [p for p in workers if _pool_of_node(faults, p.spec.node_name) == pool[0]]
        if not victims:
            raise RuntimeError(f"no worker of this run runs on {pool[0]}")
        lost.append(faults.cluster.faults.lose_host(victims[0].spec.node_name, repair_seconds=2.0))

    return act


@contextlib.contextmanager
def cordoned_but(cluster: UpstreamCluster, keep: list[str]) -> Iterator[None]:
    """One v5e-16 pool other than ``keep[0]`` cordoned: 3 slices on the 3 pools left must use ``keep[0]``, which
    the scheduler would otherwise be free to skip (4 pools for 3 slices)."""
    admin = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    core = client.CoreV1Api(admin)
    try:
        nodes = core.list_node().items
        pools = sorted({(n.metadata.labels or {}).get(LABEL_GKE_NODEPOOL, "") for n in nodes})
        other = next(p for p in pools if p.startswith("tpu-v5e-16-") and p != keep[0])
        names = [n.metadata.name for n in nodes if (n.metadata.labels or {}).get(LABEL_GKE_NODEPOOL) == other]
        for name in names:
            core.patch_node(name, {"spec": {"unschedulable": True}})
        try:
            yield
        finally:
            for name in names:
                core.patch_node(name, {"spec": {"unschedulable": None}})
    finally:
        admin.close()


def note_pools(used: set[str]) -> Callable[[StepFaults], None]:
    """Note the node pools the run's running workers are bound to (read from their nodes: the scheduler's choice)."""

    def act(faults: StepFaults) -> None:
        used.update(_pool_of_node(faults, p.spec.node_name) for p in _running_workers(faults))

    return act


def worker_affinity(cluster: UpstreamCluster, jobset: str) -> Any:
    """The worker pod template's affinity in the JobSet the operator created (``None``: none)."""
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        body = client.CustomObjectsApi(api).get_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, jobset
        )
    finally:
        api.close()
    worker = next(r for r in body["spec"]["replicatedJobs"] if r["name"] == WORKER_REPLICATED_JOB)
    return worker["template"]["spec"]["template"]["spec"].get("affinity")


def fourth_run(cluster: UpstreamCluster, dag: Any, run_name: str) -> tuple[Any, dict[str, Any], set[str]]:
    used: set[str] = set()
    with StepFaults(cluster, run_name) as faults:
        faults.at(3, note_pools(used))
        dag_run = dag.test()
    assert states(dag_run) == {"pretrain": "success"} and not faults.errors, faults.errors
    assert used, "the run's workers were never seen running"
    return dag_run, xcom(dag_run, "pretrain"), used


def test_a_pool_failing_in_two_of_three_runs_is_avoided_in_the_fourth(
    airflow_db: None, node_reader: UpstreamCluster, tmp_path: Path
) -> None:
    cluster = node_reader
    pool: list[str] = []
    lost: list[dict[str, Any]] = []
    # The lost slice cannot re-form beside its Failed pods (the module's docstring): the run trains on with 2 slices.
    dag = history_dag("history_run_1", tmp_path, min_slices=2)
    with StepFaults(cluster, "history-run-1") as faults:
        faults.at(5, lose_host_of(pool, lost))
        dag_run = dag.test()
    assert states(dag_run) == {"pretrain": "success"}, faults.errors
    assert not faults.errors, faults.errors
    report = xcom(dag_run, "pretrain")
    assert report["node_pool_avoidance"]["enabled"] is False
    # The run's report names the pool and the host of its slice failure.
    failed = [f for f in report["slice_failures"] if f["kind"] == "lost_host"]
    assert [f["pool"] for f in failed] == [pool[0]], report["slice_failures"]
    assert len(lost) == 1 and lost[0]["node"] in failed[0]["hosts"]
    failing = pool[0]
    # And so does the history it wrote, where the next runs read it.
    [first] = stored_history(HISTORY_KEY).runs
    assert [(f.kind, f.pool) for f in first.failures] == [(FailureKind.LOST_HOST, failing)]
    assert lost[0]["node"] in first.failures[0].hosts

    # Two more runs on the same pools, as the operator records them: the same pool failing again, then none.
    again = RunRecord(
        run_id="history-run-2",
        ended_at=first.ended_at + 60,
        failures=(SliceFailure(first.ended_at + 30, FailureKind.LOST_HOST, failing, first.failures[0].hosts, 0),),
        pools=first.pools,
        slices=3,
    )
    # The clean run kept off the failing pool: a clean run on it would weigh its failures down (pool_avoidance.py).
    others = tuple(p for p in first.pools if p != failing)
    clean = RunRecord(run_id="history-run-3", ended_at=first.ended_at + 120, pools=others, slices=3)
    restore_history(HISTORY_KEY, FailureHistory((first, again, clean)))
    history = stored_history(HISTORY_KEY)
    assert len(history.runs) == 3
    assert [sum(f.pool == failing for f in r.failures) for r in history.runs] == [1, 1, 0]

    # The fourth run, option on: its workers keep off the failing pool.
    restore_history(HISTORY_KEY, history)
    _, report, used = fourth_run(cluster, history_dag("history_run_4_on", tmp_path, avoid=True), "history-run-4-on")
    avoidance = report["node_pool_avoidance"]
    assert avoidance["avoided"] == [failing], avoidance
    assert avoidance["evidence"][failing]["health_failures"] == 2
    assert sorted(avoidance["evidence"][failing]["by_run"]) == sorted(r.run_id for r in history.runs[:2])
    assert len(avoidance["candidates"]) == 4 and failing in avoidance["reason"]
    assert len(used) == 3 and failing not in used, used
    assert set(report["node_pools"]) == used
    assert worker_affinity(cluster, report["jobset_name"])["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ] == {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": LABEL_GKE_NODEPOOL, "operator": "NotIn", "values": [failing]}]}
        ]
    }

    # Option off: the same history; the JobSet carries no affinity and the failing pool is used (another pool
    # cordoned, so the scheduler cannot skip it by chance, as the option on could not make it).
    restore_history(HISTORY_KEY, history)
    with cordoned_but(cluster, [failing]):
        _, report, used = fourth_run(cluster, history_dag("history_run_4_off", tmp_path), "history-run-4-off")
    assert report["node_pool_avoidance"]["enabled"] is False and report["node_pool_avoidance"]["avoided"] == []
    assert len(used) == 3 and failing in used and worker_affinity(cluster, report["jobset_name"]) is None

    # Option on, 4 slices: avoiding the pool would leave 3 pools for 4 slices; it is used, and the report says why.
    restore_history(HISTORY_KEY, history)
    dag = history_dag("history_run_4_four", tmp_path, slices=4, avoid=True)
    _, report, used = fourth_run(cluster, dag, "history-run-4-four")
    avoidance = report["node_pool_avoidance"]
    assert avoidance["avoided"] == [] and avoidance["failing"] == [failing]
    assert "cannot hold 4 slice(s)" in avoidance["reason"], avoidance["reason"]
    assert failing in used and len(used) == 4 and worker_affinity(cluster, report["jobset_name"]) is None


V5E_16 = [f"tpu-v5e-16-{n}" for n in range(4)]  # the v5e-small pools a slice of these runs fits (4 hosts each)


def seeded(now: float, failing: str, *, others: tuple[str, ...] = ()) -> FailureHistory:
    """Two runs of 3 slices, a host of ``failing`` lost in each (weight 2: failing at K=1), on ``failing`` and the
    first two ``others`` pools."""
    pools = (failing, *others[:2])
    history = FailureHistory()
    for n in (1, 2):
        lost = SliceFailure(now - 7200 + 60 * n, FailureKind.LOST_HOST, failing, (f"gke-{failing}-node-{n}",), 0)
        history = history.with_run(
            RunRecord(run_id=f"seed-{n}", ended_at=now - 7200 + 60 * n + 30, failures=(lost,), pools=pools, slices=3)
        )
    return history


@contextlib.contextmanager
def squatted(cluster: UpstreamCluster, pool: str) -> Iterator[None]:
    """Another team's pods holding every TPU chip of ``pool``: its nodes stay Ready and uncordoned (so the plan
    counts it), but no slice of ours fits there: capacity the plan cannot see, which only the scheduler tells."""
    admin = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    core = client.CoreV1Api(admin)
    names = [f"squatter-{pool}-{n}" for n in range(4)]
    try:
        for name in names:
            core.create_namespaced_pod(
                NAMESPACE,
                {
                    "metadata": {"name": name},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "nodeSelector": {LABEL_GKE_NODEPOOL: pool},
                        "tolerations": [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
                        "containers": [
                            {
                                "name": "hold",
                                "image": "local",
                                "command": ["sleep", "3600"],
                                "resources": {"limits": {"google.com/tpu": "4"}},
                            }
                        ],
                    },
                },
            )
        deadline = time.monotonic() + 60
        while not all(core.read_namespaced_pod(n, NAMESPACE).spec.node_name for n in names):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the squatters of {pool} were not scheduled in 60 s")
            time.sleep(0.2)
        yield
    finally:
        for name in names:
            with contextlib.suppress(client.ApiException):
                core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
        admin.close()


def note_pools_by_jobset(used: dict[str, set[str]]) -> Callable[[StepFaults], None]:
    """Note the pools the running workers are bound to, by the JobSet they belong to."""

    def act(faults: StepFaults) -> None:
        for pod in _running_workers(faults):
            jobset = pod.metadata.labels.get("jobset.sigs.k8s.io/jobset-name", "")
            used.setdefault(jobset, set()).add(_pool_of_node(faults, pod.spec.node_name))

    return act


def jobsets_of(cluster: UpstreamCluster, run_name: str) -> list[dict[str, Any]]:
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        found = client.CustomObjectsApi(api).list_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, label_selector=f"{LABEL_RUN_NAME}={run_name}"
        )
    finally:
        api.close()
    return [j for j in found["items"] if not j["metadata"].get("deletionTimestamp")]


def test_an_avoidance_the_cluster_cannot_honour_is_relaxed_and_the_run_proceeds(
    airflow_db: None, node_reader: UpstreamCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan avoids a failing pool with 3 pools left for 3 slices, but one of those is full (another team's
    pods): a slice's workers stay ``Unschedulable``. After ``RELAX_AFTER_SECONDS`` (5 s here instead of 60: the
    same code path, a shorter wait) the JobSet is recreated without the avoidance, spending no full restart, and
    the run trains to its end on the failing pool, its report saying why."""
    from elastic_training.operators import elastic_operator

    monkeypatch.setattr(elastic_operator, "RELAX_AFTER_SECONDS", 5.0)
    cluster = node_reader
    failing, full = V5E_16[0], V5E_16[1]
    restore_history(HISTORY_KEY, seeded(time.time(), failing, others=tuple(V5E_16[1:])))
    by_jobset: dict[str, set[str]] = {}
    with squatted(cluster, full), StepFaults(cluster, "history-relaxed") as faults:
        faults.at(3, note_pools_by_jobset(by_jobset))
        dag_run = history_dag("history_relaxed", tmp_path, avoid=True).test()
    assert states(dag_run) == {"pretrain": "success"} and not faults.errors, faults.errors
    report = xcom(dag_run, "pretrain")
    used = by_jobset.get(report["jobset_name"], set())
    avoidance = report["node_pool_avoidance"]
    assert avoidance["failing"] == [failing] and avoidance["avoided"] == [], avoidance
    assert "Unschedulable" in avoidance["relaxed"] and "Insufficient google.com/tpu" in avoidance["relaxed"]
    assert f"avoidance of {failing}" in avoidance["relaxed"] and "relaxed:" in avoidance["reason"]
    # One recreation, no full restart spent; the first JobSet is gone, never two at once.
    [relaxation] = report["escalations"]
    assert relaxation["reason"] == "node_pool_avoidance_relaxed" and relaxation["relaxation"] is True
    assert report["full_restarts"] == 0
    [left] = jobsets_of(cluster, "history-relaxed")
    assert left["metadata"]["name"] == report["jobset_name"] != relaxation["jobset_name"]
    assert worker_affinity(cluster, report["jobset_name"]) is None
    assert failing in used and full not in used and len(used) == 3
    # The run recorded where it really ran: on the failing pool, not avoiding it.
    [*_, recorded] = stored_history(HISTORY_KEY).runs
    assert failing in recorded.pools and recorded.avoided_pools == ()


def test_a_failing_pool_is_avoided_then_tried_on_probation_and_its_clean_run_forgives_it(
    airflow_db: None, node_reader: UpstreamCluster, tmp_path: Path
) -> None:
    """One history, runs of the operator one after another: a pool failing in two runs (2 h ago) is avoided by
    the first run; another pool's two failures of 9 days ago have decayed (3-day half-life: weight 0.25) and are
    not held against it. The run after that one tries the failing pool on probation (avoided 2 runs in a row:
    the seeded one and the first), on it (another pool cordoned so the scheduler cannot skip it), and records a
    clean run on it; the plan after that no longer finds it failing."""
    cluster = node_reader
    failing, old = V5E_16[0], V5E_16[3]
    now = time.time()
    history = seeded(now, failing, others=(V5E_16[1], V5E_16[2]))
    stale = tuple(SliceFailure(now - 9 * 86400, FailureKind.LOST_HOST, old, (f"gke-{old}-n",), 0) for _ in range(2))
    history = FailureHistory(
        (RunRecord("stale", ended_at=now - 9 * 86400 + 60, failures=stale, pools=(old,), slices=1), *history.runs)
    )
    # A run since that kept off the failing pool (as the option on recorded it).
    skipped = RunRecord("seed-3", ended_at=now - 3600, pools=tuple(V5E_16[1:]), avoided_pools=(failing,), slices=3)
    restore_history(HISTORY_KEY, history.with_run(skipped))

    # First run: the pool is avoided (avoided 1 run since it was last used: not yet on probation); the old pool's
    # failures have decayed and it is not failing.
    _, report, used = fourth_run(cluster, history_dag("history_avoid", tmp_path, avoid=True), "history-avoid")
    avoidance = report["node_pool_avoidance"]
    assert avoidance["failing"] == [failing] and avoidance["avoided"] == [failing], avoidance
    assert avoidance["evidence"][failing]["avoided_since"] == 1 and avoidance["probation"] == []
    assert old not in avoidance["failing"] and failing not in used
    [*_, first] = stored_history(HISTORY_KEY).runs
    assert first.avoided_pools == (failing,) and failing not in first.pools

    # Second run: avoided 2 runs in a row, so on probation: not avoided, and used.
    with cordoned_but(cluster, [failing]):
        dag = history_dag("history_probation", tmp_path, avoid=True)
        _, report, used = fourth_run(cluster, dag, "history-probation")
    avoidance = report["node_pool_avoidance"]
    assert avoidance["probation"] == [failing] and avoidance["avoided"] == [], avoidance
    assert f"on probation (tried again this run): {failing}" in avoidance["reason"]
    assert failing in used and worker_affinity(cluster, report["jobset_name"]) is None
    # Its result is recorded like any run's: a clean run on the pool.
    runs = stored_history(HISTORY_KEY).runs
    assert failing in runs[-1].pools and not runs[-1].failures and runs[-1].avoided_pools == ()

    # The plan the next run makes from that history: the clean run halved the pool's failures (weight 1.0, not
    # over K=1): it is no longer failing.
    nxt = choose_avoided_pools(runs, candidates=V5E_16, slices=3, threshold=1, now=time.time())
    assert nxt.failing == () and nxt.avoided == (), nxt.reason


def test_the_relaxation_survives_as_state_spends_no_budget_and_never_leaves_two_jobsets(
    node_reader: UpstreamCluster, custom: client.CustomObjectsApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator driven as the task runner drives it (``execute`` to its deferral, the trigger to its event,
    ``execute_complete``), with a plan that avoids every v5e-16 pool: every worker is unschedulable. The
    ``unschedulable`` event relaxes it: the state store keeps the relaxed plan (a worker crash resumes without the
    avoidance), the full-restart budget of the try is untouched, and only the new JobSet exists."""
    from airflow.sdk.exceptions import TaskDeferred

    from elastic_training.operators import elastic_operator, kube_names
    from elastic_training.operators.lifecycle import first_event
    from elastic_training.operators.pool_avoidance import Avoidance
    from elastic_training.operators.run_state import STATE_KEY
    from tests.support.lifecycle_runs import DAG_ID, _delete_mine, _elastic, _get, _stored, _TaskInstance

    monkeypatch.setattr(elastic_operator, "RELAX_AFTER_SECONDS", 2.0)
    monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__DEFER_SETTLE_SECONDS", "0")
    ti = _TaskInstance("pretrain", "manual__relax")
    identity = kube_names.identity_labels(dag_id=DAG_ID, task_id="pretrain", run_id=ti.run_id, map_index=-1)
    plan = Avoidance(enabled=True, avoided=tuple(V5E_16), failing=tuple(V5E_16), reason="avoiding all (a test)")
    store = _stored("", None, plan={"try_number": 1, "node_pool_avoidance": plan.to_json()})
    operator = _elastic(
        tmp_path, "relax", num_slices=1, tpu_type="v5e", tpu_topology="4x4", avoid_failing_node_pools=True
    )
    context: Any = {"ti": ti, "task_state_store": store}
    try:
        with pytest.raises(TaskDeferred) as deferred:
            operator.execute(context)
        first = store[STATE_KEY]["jobset_name"]
        assert deferred.value.trigger.relax_after_seconds == 2.0
        assert worker_affinity(node_reader, first) is not None
        event = asyncio.run(asyncio.wait_for(first_event(deferred.value.trigger), timeout=120))
        assert event["status"] == "unschedulable", event
        with pytest.raises(TaskDeferred) as again:
            operator.execute_complete(context, event)
        state = store[STATE_KEY]
        assert state["jobset_name"] != first and _get(custom, first) is None, "the avoided JobSet is gone first"
        assert worker_affinity(node_reader, state["jobset_name"]) is None
        assert state["full_restarts"] == 1 and state["budget_base"] == 1 and not state["escalating"]
        assert again.value.trigger.full_restarts_used == 0, "the relaxation spent no full restart"
        assert again.value.trigger.relax_after_seconds is None, "relaxed once: nothing left to drop"
        relaxed = Avoidance.from_json(state["plan"]["node_pool_avoidance"])
        assert relaxed.avoided == () and "Unschedulable" in relaxed.relaxed and relaxed.failing == tuple(V5E_16)
        [record] = state["escalations"]
        assert record["reason"] == "node_pool_avoidance_relaxed" and record["relaxation"] is True
        # A worker crash now: the next execute resumes with the relaxed plan (adopts, never re-avoids).
        with pytest.raises(TaskDeferred) as resumed:
            _elastic(
                tmp_path, "relax", num_slices=1, tpu_type="v5e", tpu_topology="4x4", avoid_failing_node_pools=True
            ).execute(context)
        assert store[STATE_KEY]["jobset_name"] == state["jobset_name"]
        assert resumed.value.trigger.relax_after_seconds is None
        assert len(jobsets_of(node_reader, "relax")) == 1
    finally:
        _delete_mine(custom, identity)


def test_without_the_node_reading_clusterrole_nothing_is_avoided_and_the_report_says_why(
    airflow_db: None, node_reader: UpstreamCluster, tmp_path: Path
) -> None:
    """A deployment that skipped deploy/rbac-node-pools.yaml (the binding deleted here, put back after): listing
    the nodes is a real 403, the run goes ahead avoiding nothing, and its report names the ClusterRole to bind."""
    cluster = node_reader
    _, binding = node_pool_reader_manifests(NAMESPACE)
    admin = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    rbac = client.RbacAuthorizationV1Api(admin)
    try:
        rbac.delete_cluster_role_binding(binding["metadata"]["name"])
        restore_history(HISTORY_KEY, seeded(time.time(), V5E_16[0], others=tuple(V5E_16[1:])))
        dag = history_dag("history_no_rbac", tmp_path, avoid=True)
        _, report, used = fourth_run(cluster, dag, "history-no-rbac")
    finally:
        utils.create_from_dict(admin, binding)
        admin.close()
    avoidance = report["node_pool_avoidance"]
    assert avoidance["enabled"] is True and avoidance["avoided"] == [] and avoidance["failing"] == [V5E_16[0]]
    assert "RBAC forbids listing nodes, so no pool is avoided" in avoidance["reason"], avoidance["reason"]
    assert "deploy/rbac-node-pools.yaml" in avoidance["reason"] and "403" in avoidance["reason"]
    # Nodes are cluster-scoped: the hook's own words say so, and name no namespace of theirs and no namespaced Role.
    assert "may not list nodes, which are cluster-scoped" in avoidance["reason"], avoidance["reason"]
    assert "in namespace None" not in avoidance["reason"] and "deploy/rbac.yaml" not in avoidance["reason"]
    assert worker_affinity(cluster, report["jobset_name"]) is None and len(used) == 3


def test_the_candidate_pools_count_only_schedulable_nodes(node_reader: UpstreamCluster) -> None:
    """A pool with a cordoned node, or NotReady (a lost host under repair), cannot hold a 4-host slice: it is no
    candidate, so an avoidance never counts on it; uncordoned and repaired, it is one again. A lost host is NotReady
    once kube-controller-manager's node lifecycle controller says so (its grace period for missed heartbeats,
    about 40 s), and Ready, its taint removed, a moment after it is back."""
    from elastic_training.operators.hooks import JobSetHook

    selector = v5e_16_selector()  # what the operator lists
    hook = JobSetHook()  # the operators' account, as the operator lists them
    # A node registered a moment ago carries the not-ready taint until the node lifecycle controller's next pass.
    until(lambda: len(hook.list_node_pools(selector, hosts=4)) == 4, "the nodes untainted", 60)
    pools = hook.list_node_pools(selector, hosts=4)
    assert len(pools) == 4 and all(p.startswith("tpu-v5e-16-") for p in pools), pools
    admin = config.new_client_from_config(config_file=str(node_reader.kubeconfig_path))
    core = client.CoreV1Api(admin)
    nodes = {
        p: sorted(n.metadata.name for n in core.list_node(label_selector=f"{LABEL_GKE_NODEPOOL}={p}").items)
        for p in pools
    }
    cordoned, lost = pools[0], pools[1]
    try:
        core.patch_node(nodes[cordoned][0], {"spec": {"unschedulable": True}})
        node_reader.faults.lose_host(nodes[lost][0], repair_seconds=3600.0)
        assert hook.list_node_pools(selector, hosts=4) == [lost, *pools[2:]]  # cordoned at once
        until(lambda: hook.list_node_pools(selector, hosts=4) == pools[2:], "the lost host NotReady", 180)
        assert hook.list_node_pools(selector, hosts=3) == [cordoned, *pools[2:]]  # 3 of its 4 hosts schedulable
    finally:
        core.patch_node(nodes[cordoned][0], {"spec": {"unschedulable": None}})
        node_reader.faults.repair_lost_slices()  # repaired now: its hosts back, or (deleted by then) its VMs recreated
        admin.close()
    until(lambda: hook.list_node_pools(selector, hosts=4) == pools, "the repaired host Ready, untainted", 120)


def v5e_16_selector() -> str:
    """The label selector of the nodes a v5e 4x4 slice's workers may run on, as the operator lists them."""
    from elastic_training.operators import manifests
    from elastic_training.operators.spec import ElasticRunSpec

    run_spec = ElasticRunSpec(
        run_name="r", base_output_directory="/tmp/out", steps=16, checkpoint_period=4, num_slices=3,
        tpu_type="v5e", tpu_topology="4x4", runtime="local",
    )  # fmt: skip
    return manifests.worker_node_selector(run_spec)


def until_steady(probe: Callable[[], bool], what: str, seconds: float, *, hold: float) -> None:
    """Until ``probe`` has held for ``hold`` seconds on end (two of the node lifecycle controller's 5 s passes and
    more), within ``seconds``."""
    deadline = time.monotonic() + seconds
    since: float | None = None
    while since is None or time.monotonic() - since < hold:
        now = time.monotonic()
        if now > deadline:
            raise TimeoutError(f"{what}: not for {hold:.0f} s on end within {seconds:.0f} s")
        since = (since or now) if probe() else None
        time.sleep(0.5)


def until(probe: Callable[[], bool], what: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {seconds:.0f} s")
        time.sleep(0.5)


def test_a_hostile_history_never_fails_the_run_and_the_report_says_what_was_left_out(
    airflow_db: None, node_reader: UpstreamCluster, tmp_path: Path
) -> None:
    """Records edited by hand beside two sound ones: a pool name that is no label value, a sound name of no pool of
    this cluster failing often, huge and zero numbers, wrong types, a value that is not JSON. The run succeeds,
    avoids only the pool the sound records and the cluster both name, and its report says what it left out."""
    from airflow.models import Variable

    from elastic_training.operators.history_store import run_key
    from elastic_training.operators.hooks import JobSetHook

    cluster = node_reader
    now = time.time()
    history = seeded(now, V5E_16[0], others=tuple(V5E_16[1:]))
    gone = tuple(SliceFailure(now - 600, FailureKind.LOST_HOST, "np-gone", ("gke-np-gone-n",), 0) for _ in range(3))
    history = history.with_run(RunRecord("gone", ended_at=now - 300, failures=gone, pools=("np-gone",), slices=1))
    restore_history(HISTORY_KEY, history)
    hostile = {
        "xss": {"run_id": "xss", "ended_at": now, "pools": ["<script>x</script>"], "failures_total": 50},
        "huge": {"run_id": "huge", "ended_at": now, "mean_step_seconds": 1e300, "wall_seconds": 1e308},
        "zero": {"run_id": "zero", "ended_at": now, "mean_step_seconds": 0.0, "checkpoint_save_seconds": -1},
        "types": {"run_id": "types", "ended_at": "yesterday", "slices": "3"},
    }
    for name, entry in hostile.items():
        Variable.set(run_key(HISTORY_KEY, name), json.dumps({"version": 1, "run": entry}))
    Variable.set(run_key(HISTORY_KEY, "text"), "{not json")

    # The run avoids one of the 4 pools for its 3 slices: every pool must be schedulable (a host repaired by the test
    # before may still carry the node lifecycle controller's taint), or too few are left and nothing is avoided.
    # Schedulable through the controller's passes, not at one read: ci51 saw the repaired pool listed, then gone
    # again when the run listed it.
    hook, selector = JobSetHook(), v5e_16_selector()
    until_steady(lambda: len(hook.list_node_pools(selector, hosts=4)) == 4, "every pool schedulable", 90, hold=12)
    _, report, used = fourth_run(cluster, history_dag("history_hostile", tmp_path, avoid=True), "history-hostile")
    avoidance = report["node_pool_avoidance"]
    assert avoidance["failing"] == ["np-gone", V5E_16[0]], avoidance["failing"]
    assert avoidance["avoided"] == [V5E_16[0]], (avoidance["reason"], avoidance["candidates"], avoidance["relaxed"])
    assert "not among the cluster's schedulable pools, so not avoided: np-gone" in avoidance["reason"]
    assert V5E_16[0] not in used
    notes = " ".join(report["history_notes"])  # one note, cut to 600 characters: the first records named
    assert "5 stored entr(ies) left out" in notes, report["history_notes"]
    assert all(run_key(HISTORY_KEY, name) in notes for name in ("huge", "text", "types")), notes
    terms = worker_affinity(cluster, report["jobset_name"])["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [V5E_16[0]]
    stored = [r.run_id for r in stored_history(HISTORY_KEY).runs]  # its own record written, the bad ones kept
    assert stored[-1].startswith("history_hostile/pretrain/") and "seed-1" in stored
    for name in (*hostile, "text"):
        assert Variable.get(run_key(HISTORY_KEY, name), default_var=None) is not None  # never rewritten nor pruned
