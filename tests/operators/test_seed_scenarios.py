"""The seed's scenarios end to end (issue 16, "What it must show"): ``ElasticJobSetOperator`` through
``dag.test()`` on the local cluster with GKE's node pools (v5e-small), 3 slices of v5e 4x4 (4 hosts, so 4 worker
pods per slice), the real JAX trainer and Orbax checkpoints.

1. One host of one slice is lost mid-run (W2's lose-host: GKE interrupts the whole multi-host slice, so all 4 of
   its pods fail): the trainer recovers in process, the operator counts exactly 1 slice restart (not 4), nothing
   escalates, and at most one checkpoint period of steps is run again. A later eviction of a worker pod of
   another slice (a drain: ``DisruptionTarget``, graceful delete) spends no slice budget, and that slice re-forms.
   The operator's GKE JobSet runs as is: 3 worker replicas of 4 completions, and the trainer's Pathways allocation
   is 3 slices of 4 hosts. The repair is slow and the spare v5e-16 pool is held by another team's pods, so the lost
   slice can come back only where it was, once its pool is repaired: waiting is not stalling. What Kubernetes shows
   of the loss is kube-controller-manager's (after its node-monitor grace period the nodes go ``Unknown`` and their
   pods are marked not ready: the trainer's slice health sees the slice down then), and the repair takes well under
   MaxText's ``elastic_timeout_seconds``, so pathwaysutils' wait for slices rides it out: the trainer saw the slice
   down during the repair, and its slices were back no sooner than the pool, within its wait for slices.
   (test_elastic_operator_repair.py's run, which was this one with 2 slices: one lost host's run, not two.)
2. Two slices lost one after the other with ``max_slice_restarts=1``: the budget is spent in slices (8 pods failed,
   which counted as pods would have escalated at the first loss), and exactly one full restart follows, restoring
   the step its escalation names.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.constants import (
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    LABEL_GKE_NODEPOOL,
    LABEL_JOB_INDEX,
    LABEL_REPLICATED_JOB_NAME,
    LABEL_RUN_NAME,
    TPU_RESOURCE,
    WORKER_REPLICATED_JOB,
)
from tests.support.airflow_dags import dag_from_source, states, xcom
from tests.support.elastic_runs import head_log
from tests.support.step_faults import StepFaults

pytestmark = pytest.mark.slow

NAMESPACE = "default"
HOSTS_PER_SLICE = 4  # v5e 4x4: 16 chips, 4 per host
CHECKPOINT_PERIOD = 10
# Past the nodes' deletion (the node lifecycle controller marks them Unknown ~54 s after the loss); a repair due before
# pod GC has collected their pods (its 40 s quarantine, then its next pass) waits for it. In the budget's scenario
# the first lost pool is back by the escalation (the second loss's pod GC), for the full restart's third slice.
REPAIR_SECONDS = 90.0
# The slow repair of the first scenario, with the spare pool held: past the nodes' deletion and pod GC (~100 s after
# the loss); the slice is back once its pool is and the Job controller's back-off for its 4 failed pods is over (80 s
# from their not-ready, ~50 s after the loss).
SLOW_REPAIR_SECONDS = 120.0
ELASTIC_TIMEOUT_SECONDS = 240  # MaxText's wait for slices, over the slow repair with room for load
STALL_SECONDS = ELASTIC_TIMEOUT_SECONDS + 20  # the lint: over the wait for slices, which stays under the stall clock
HOLD_PREFIX = "hold-"
STEP_SECONDS = 1.5  # the trainer still trains when Kubernetes shows the loss (the nodes Unknown 40-54 s after it)
SMALL_MODEL = {"base_emb_dim": 32, "base_num_decoder_layers": 1, "vocab_size": 32, "max_target_length": 16}
HEADER = """\
from datetime import timedelta
from airflow.sdk import DAG
from elastic_training.operators import ElasticJobSetOperator
"""


def seed_dag(
    dag_id: str, base: Path, *, max_slice_restarts: int, elastic_timeout_seconds: int = 300, stall_seconds: int = 360
) -> Any:
    """The seed's run, small: 3 slices of v5e 4x4, 60 steps, a checkpoint every 10, each step sleeping STEP_SECONDS.

    ``elastic_max_retries`` is set above its default (max_slice_restarts + 1): MaxText spends an attempt on every
    slice loss, evictions included, which spend no slice budget; and in the second scenario the escalation is
    then the operator's (the slice budget), not MaxText giving up its last attempt at the same moment.
    """
    body = f"""
    with DAG({dag_id!r}, schedule=None) as dag:
        ElasticJobSetOperator(
            task_id="pretrain",
            run_name={dag_id.replace("_", "-")!r},
            base_output_directory={str(base)!r},
            steps=60,
            checkpoint_period={CHECKPOINT_PERIOD},
            num_slices=3,
            tpu_type="v5e",
            tpu_topology="4x4",
            runtime="local",
            maxtext_args={SMALL_MODEL!r},
            max_slice_restarts={max_slice_restarts},
            elastic_max_retries=4,
            elastic_timeout_seconds={elastic_timeout_seconds},
            max_full_restarts=1,
            stall_timeout=timedelta(seconds={stall_seconds}),
            deferrable=True,
            poll_interval=1.0,
            local_env={{"LOCAL_STEP_SECONDS": "{STEP_SECONDS}"}},
        )
    """
    return dag_from_source(dag_id, body, HEADER)


def _slice_pods(faults: StepFaults, slice_index: int) -> list[Any]:
    selector = f"{LABEL_RUN_NAME}={faults.run_name},{LABEL_REPLICATED_JOB_NAME}={WORKER_REPLICATED_JOB}"
    pods = faults.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
    return [
        p
        for p in pods
        if (p.metadata.labels or {}).get(LABEL_JOB_INDEX) == str(slice_index)
        and p.metadata.deletion_timestamp is None
        and p.status.phase == "Running"
    ]


def lose_host(
    slice_index: int, lost: list[dict[str, Any]], repair_seconds: float = REPAIR_SECONDS
) -> Callable[[StepFaults], None]:
    """A host of the slice fails, and the slice with it: its pool's hosts stop at once; the node lifecycle controller
    marks them Unknown and their pods not ready (the trainer's slice health sees the slice down then), GKE deletes the
    gone VMs' nodes and pod GC their pods, and the Job controller replaces them after its back-off, on the spare
    pool or the repaired one (``repair_seconds`` later). A repair inside the node-monitor grace period would bring the
    same hosts back with their pods Failed, which JobSet's exclusive placement cannot re-form (two leader pods)."""

    def act(faults: StepFaults) -> None:
        pods = _slice_pods(faults, slice_index)
        if len(pods) != HOSTS_PER_SLICE:
            raise RuntimeError(f"slice {slice_index} has {len(pods)} running pods, not {HOSTS_PER_SLICE}")
        lost_at = time.time()
        answer = faults.cluster.faults.lose_host(pods[0].spec.node_name, repair_seconds=repair_seconds)
        lost.append({**answer, "lostAt": lost_at, "slicePods": {p.metadata.name: p.spec.node_name for p in pods}})

    return act


def hold_the_other_pools(faults: StepFaults, held: list[str]) -> None:
    """Another team's pods take every chip of the v5e-16 pools the run does not use (their names to ``held``)."""
    selector = f"{LABEL_RUN_NAME}={faults.run_name},{LABEL_REPLICATED_JOB_NAME}={WORKER_REPLICATED_JOB}"
    used = {p.spec.node_name for p in faults.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items}
    nodes = faults.core.list_node().items
    used_pools = {(n.metadata.labels or {}).get(LABEL_GKE_NODEPOOL) for n in nodes if n.metadata.name in used}
    for node in nodes:
        pool = (node.metadata.labels or {}).get(LABEL_GKE_NODEPOOL, "")
        if not pool.startswith("tpu-v5e-16-") or pool in used_pools:
            continue
        name = f"{HOLD_PREFIX}{node.metadata.name}"
        container = {
            "name": "hold",
            "image": "local",
            "command": ["sleep", "3600"],
            "resources": {"limits": {TPU_RESOURCE: "4"}},
        }
        spec = {
            "nodeSelector": {"kubernetes.io/hostname": node.metadata.name},
            "tolerations": [{"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 0,
            "containers": [container],
        }
        faults.core.create_namespaced_pod(NAMESPACE, {"metadata": {"name": name}, "spec": spec})
        held.append(name)


def evict_worker(slice_index: int, evicted: list[str]) -> Callable[[StepFaults], None]:
    """One worker pod of the slice is evicted through the Eviction API (a drain for maintenance)."""

    def act(faults: StepFaults) -> None:
        pod = _slice_pods(faults, slice_index)[0]
        faults.cluster.faults.evict_pod(NAMESPACE, pod.metadata.name)
        evicted.append(pod.metadata.name)

    return act


def _jobsets(cluster: UpstreamCluster, run_name: str) -> list[dict[str, Any]]:
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, label_selector=f"{LABEL_RUN_NAME}={run_name}"
        )
        return list(listed["items"])
    finally:
        api.close()


def _gone(cluster: UpstreamCluster, pods: dict[str, str]) -> list[str]:
    """Those of ``pods`` (by name) the API no longer has: pod GC deleted them with their deleted nodes."""
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    core = client.CoreV1Api(api)
    gone = []
    try:
        for name in pods:
            try:
                core.read_namespaced_pod(name, NAMESPACE)
            except client.ApiException as error:
                if error.status != 404:
                    raise
                gone.append(name)
        return gone
    finally:
        api.close()


def test_one_lost_host_is_one_slice_restart_recovered_in_process(
    airflow_db: None, cluster_connection: UpstreamCluster, tmp_path: Path
) -> None:
    lost: list[dict[str, Any]] = []
    evicted: list[str] = []
    held: list[str] = []
    lose = lose_host(1, lost, SLOW_REPAIR_SECONDS)

    def hold_then_lose_host(faults: StepFaults) -> None:
        hold_the_other_pools(faults, held)
        lose(faults)

    dag = seed_dag(
        "seed_host",
        tmp_path,
        max_slice_restarts=1,
        elastic_timeout_seconds=ELASTIC_TIMEOUT_SECONDS,
        stall_seconds=STALL_SECONDS,
    )
    with StepFaults(cluster_connection, "seed-host") as faults:
        faults.at(25, hold_then_lose_host).at(40, evict_worker(2, evicted))
        try:
            dag_run = dag.test()
        finally:
            for name in held:
                faults.core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)

    assert [f.step for f in faults.faults if f.fired_at is not None] == [25, 40], faults.errors
    assert len(held) == HOSTS_PER_SLICE  # the one v5e-16 pool the run did not use
    assert states(dag_run) == {"pretrain": "success"}
    report = xcom(dag_run, "pretrain")
    # The whole slice went down with its host (its pool's hosts: the slice's 4 pods on them, gone with their nodes),
    # counted once.
    [host] = lost
    assert host["repairSeconds"] == SLOW_REPAIR_SECONDS
    assert len(host["nodes"]) == HOSTS_PER_SLICE and set(host["slicePods"].values()) <= set(host["nodes"])
    assert sorted(_gone(cluster_connection, host["slicePods"])) == sorted(host["slicePods"])
    assert report["slice_restarts"] == 1
    assert report["slice_evictions"] == 1 and len(evicted) == 1  # the eviction spent no slice budget
    assert report["full_restarts"] == 0 and report["escalations"] == []
    # Both the lost slice and the evicted pod's slice were recovered in process.
    assert report["in_process_recoveries"] == 2 and all(r["complete"] for r in report["recoveries"])
    assert report["recoveries"][0]["failed_step"] >= 25 and report["recoveries"][1]["failed_step"] >= 40
    assert all(0 <= r["steps_lost"] <= CHECKPOINT_PERIOD for r in report["recoveries"])
    assert report["final_step"] == 59 == report["target_step"]
    # The trainer saw the lost slice down while its pool was being repaired, and waited it out: its slices were back
    # no sooner than the pool was (the last recovery's), within its wait for slices.
    repaired = max(report["recoveries"], key=lambda r: r["slices_ready_at"])
    assert repaired["kind"] == "slice_down"
    assert host["lostAt"] < repaired["detected_at"] < host["lostAt"] + SLOW_REPAIR_SECONDS, (repaired, host)
    assert repaired["slices_ready_at"] - host["lostAt"] >= SLOW_REPAIR_SECONDS - 2
    assert repaired["slices_ready_at"] - repaired["detected_at"] < ELASTIC_TIMEOUT_SECONDS
    [jobset] = _jobsets(cluster_connection, "seed-host")  # one JobSet
    assert jobset["status"].get("restarts", 0) == 0  # no JobSet-level restart either
    worker = jobset["spec"]["replicatedJobs"][1]
    assert (worker["replicas"], worker["template"]["spec"]["completions"]) == (3, HOSTS_PER_SLICE)
    assert "Pathways allocation: 3 slices of 4 hosts" in head_log(cluster_connection, jobset["metadata"]["name"])


def test_slice_budget_spent_in_slices_gets_exactly_one_full_restart(
    airflow_db: None, cluster_connection: UpstreamCluster, tmp_path: Path
) -> None:
    lost: list[dict[str, Any]] = []
    dag = seed_dag("seed_budget", tmp_path, max_slice_restarts=1)
    with StepFaults(cluster_connection, "seed-budget") as faults:
        # The second loss 3 steps after the first: both before the node lifecycle controller shows the first.
        faults.at(15, lose_host(0, lost)).at(18, lose_host(1, lost))
        dag_run = dag.test()

    assert [f.step for f in faults.faults if f.fired_at is not None] == [15, 18], faults.errors
    assert states(dag_run) == {"pretrain": "success"}
    report = xcom(dag_run, "pretrain")
    assert [len(x["slicePods"]) for x in lost] == [HOSTS_PER_SLICE, HOSTS_PER_SLICE]
    assert all(set(x["slicePods"].values()) <= set(x["nodes"]) for x in lost)
    # Eight pods failed; two slices did: the first loss stayed within max_slice_restarts=1, the second spent it.
    assert report["slice_restarts"] == 2
    assert report["full_restarts"] == 1
    [escalation] = report["escalations"]
    assert escalation["reason"] == "slice_restart_budget_spent"
    assert "exceed max_slice_restarts=1" in escalation["message"]
    assert escalation["latest_step"] is not None and escalation["latest_step"] >= 18
    resumed = escalation["resumed_from_step"]
    assert resumed % CHECKPOINT_PERIOD == 0 and escalation["steps_lost"] <= CHECKPOINT_PERIOD
    assert resumed is not None and CHECKPOINT_PERIOD <= resumed < 59
    assert report["final_step"] == 59
    assert len(report["jobsets"]) == 2 and report["jobsets"][1].endswith("-r1")
    # The restart restored the step the report names.
    assert f"restoring from this run's directory step {resumed}" in head_log(cluster_connection, report["jobsets"][1])
    assert [js["metadata"]["name"] for js in _jobsets(cluster_connection, "seed-budget")] == [report["jobsets"][1]]
