"""``avoid_failing_node_pools`` over several runs on the local cluster (issue 27): GKE's node pools (v5e-small:
four v5e-16 pools of 4 hosts), the real JAX trainer, faults through the cluster's fault API (lose-host: the whole
slice's pool goes NotReady and its pods are failed as PodGC fails them).

A history of three runs, a host of the same pool lost in two of them; then the fourth run, three ways, each from
that same three-run history: option on (the pool is avoided: no worker lands on it, the report says on what
evidence), option off (the pool is used as before), option on with 4 slices (avoiding it would leave 3 pools for 4
slices: it is used, and the report says why).

The history's first run is a real run of 3 slices, a host lost: it proves the run records the pool and host of its
slice failure where the next runs read it. The two after it (the same pool failing again, then a clean run) are
added through the product's own history API (`FailureHistory.with_run`, the call `record_run` makes): a second
real run would record the same thing the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, utils

from elastic_training.local.cluster import LocalCluster
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
from elastic_training.operators.rbac import node_pool_reader_manifests
from tests.support.airflow_dags import dag_from_source, states, xcom
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


def history_dag(dag_id: str, base: Path, *, slices: int = 3, avoid: bool = False) -> Any:
    """A tiny run (16 steps, a checkpoint every 4, 0.2 s a step) sharing one failure history."""
    body = f"""
    with DAG({dag_id!r}, schedule=None) as dag:
        ElasticJobSetOperator(
            task_id="pretrain",
            run_name={dag_id.replace("_", "-")!r},
            base_output_directory={str(base)!r},
            steps=16,
            checkpoint_period=4,
            num_slices={slices},
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
            local_env={{"LOCAL_STEP_SECONDS": "0.2"}},
            avoid_failing_node_pools={avoid!r},
            node_pool_failure_threshold=1,
            failure_history_runs=3,
            failure_history_key={HISTORY_KEY!r},
        )
    """
    return dag_from_source(dag_id, body, HEADER)


@pytest.fixture(scope="module")
def node_reader(cluster_connection: LocalCluster) -> Iterator[LocalCluster]:
    """The operators' account may also list nodes (deploy/rbac-node-pools.yaml), as the option needs."""
    admin = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    try:
        for manifest in node_pool_reader_manifests(NAMESPACE):
            utils.create_from_dict(admin, manifest)
    finally:
        admin.close()
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
def cordoned_but(cluster: LocalCluster, keep: list[str]) -> Iterator[None]:
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


def worker_affinity(cluster: LocalCluster, jobset: str) -> Any:
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


def fourth_run(cluster: LocalCluster, dag: Any, run_name: str) -> tuple[Any, dict[str, Any], set[str]]:
    used: set[str] = set()
    with StepFaults(cluster, run_name) as faults:
        faults.at(3, note_pools(used))
        dag_run = dag.test()
    assert states(dag_run) == {"pretrain": "success"} and not faults.errors, faults.errors
    assert used, "the run's workers were never seen running"
    return dag_run, xcom(dag_run, "pretrain"), used


def test_a_pool_failing_in_two_of_three_runs_is_avoided_in_the_fourth(
    airflow_db: None, node_reader: LocalCluster, tmp_path: Path
) -> None:
    cluster = node_reader
    pool: list[str] = []
    lost: list[dict[str, Any]] = []
    dag = history_dag("history_run_1", tmp_path)
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
