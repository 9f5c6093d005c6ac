"""`ElasticJobSetOperator` through a slow host repair on the local cluster (``v5e-small``): waiting is not stalling.

A host of one slice is lost and its node pool stays down for ``REPAIR_SECONDS`` (``lose_host`` with
``repair_seconds``: the hosts stop heartbeating, their processes die), while every other v5e-16 pool is held by
another team's pods: the lost slice can come back only where it was, once the pool is repaired. What Kubernetes
shows of it is kube-controller-manager's: after its node-monitor grace period the nodes go ``Unknown`` and their pods
are marked not ready (the trainer's slice health sees the slice down then), and once the hosts are back the node
agent reports the pods ``Failed`` and the Job controller replaces them after its back-off. The repair takes well
under MaxText's ``elastic_timeout_seconds``, so pathwaysutils' wait for slices rides it out: the run must recover in
process, with one slice restart, no escalation, no full restart and one JobSet. Every wait is on a condition with a
deadline.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.constants import (
    LABEL_GKE_NODEPOOL,
    LABEL_JOB_INDEX,
    LABEL_REPLICATED_JOB_NAME,
    LABEL_RUN_NAME,
    TPU_RESOURCE,
    WORKER_REPLICATED_JOB,
)
from tests.support.airflow_dags import states, xcom
from tests.support.elastic_runs import elastic_dag, jobsets_of
from tests.support.step_faults import StepFaults

pytestmark = pytest.mark.slow

NS = "default"
HOSTS_PER_SLICE = 4  # the local runtime's v5e 4x4: 4 hosts of 4 chips
# Longer than what Kubernetes and GKE do before it: the nodes Unknown and their pods not ready 40-54 s after the loss
# (the trainer sees the slice down then), the gone VMs' nodes deleted, pod GC's 40 s quarantine, then the pods
# deleted; the lost slice's pods can come back only on the repaired pool, after the Job controller's back-off.
REPAIR_SECONDS = 150.0  # with room for load: pod GC must have deleted the lost pods before the nodes are back
ELASTIC_TIMEOUT_SECONDS = 240  # MaxText's wait for slices: the repair, the Job's back-off (80 s for 4 pods), the start
STALL_SECONDS = ELASTIC_TIMEOUT_SECONDS + 20  # the lint: over the wait for slices
HOLD_PREFIX = "hold-"


def _running_slice_pods(faults: StepFaults, slice_index: int) -> list[Any]:
    selector = f"{LABEL_RUN_NAME}={faults.run_name},{LABEL_REPLICATED_JOB_NAME}={WORKER_REPLICATED_JOB}"
    return [
        p
        for p in faults.core.list_namespaced_pod(NS, label_selector=selector).items
        if (p.metadata.labels or {}).get(LABEL_JOB_INDEX) == str(slice_index)
        and p.metadata.deletion_timestamp is None
        and p.status.phase == "Running"
    ]


def _hold_the_other_pools(faults: StepFaults) -> list[str]:
    """Another team's pods take every chip of the v5e-16 pools the run does not use; returns their names."""
    selector = f"{LABEL_RUN_NAME}={faults.run_name},{LABEL_REPLICATED_JOB_NAME}={WORKER_REPLICATED_JOB}"
    used = {p.spec.node_name for p in faults.core.list_namespaced_pod(NS, label_selector=selector).items}
    nodes = faults.core.list_node().items
    used_pools = {(n.metadata.labels or {}).get(LABEL_GKE_NODEPOOL) for n in nodes if n.metadata.name in used}
    held = []
    for node in nodes:
        pool = (node.metadata.labels or {}).get(LABEL_GKE_NODEPOOL, "")
        if not pool.startswith("tpu-v5e-16-") or pool in used_pools:
            continue
        name = f"{HOLD_PREFIX}{node.metadata.name}"
        pod = {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node.metadata.name},
                "tolerations": [{"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "hold",
                        "image": "local",
                        "command": ["sleep", "3600"],
                        "resources": {"limits": {TPU_RESOURCE: "4"}},
                    }
                ],
            },
        }
        faults.core.create_namespaced_pod(NS, pod)
        held.append(name)
    return held


def test_a_slow_repair_inside_elastic_timeout_is_recovered_in_process_not_escalated(
    airflow_db: None, cluster_connection: UpstreamCluster, tmp_path: Path
) -> None:
    seen: dict[str, Any] = {}

    def lose_a_host_repaired_slowly(faults: StepFaults) -> None:
        pods = _running_slice_pods(faults, 1)
        if len(pods) != HOSTS_PER_SLICE:
            raise RuntimeError(f"slice 1 has {len(pods)} running pods, not {HOSTS_PER_SLICE}")
        seen["held"] = _hold_the_other_pools(faults)
        seen["lost_at"] = time.time()
        seen["lost"] = faults.cluster.faults.lose_host(pods[0].spec.node_name, repair_seconds=REPAIR_SECONDS)
        seen["slice_nodes"] = {p.spec.node_name for p in pods}

    # The trainer must still be training when Kubernetes shows the loss (the nodes Unknown, up to 54 s after it):
    # 1.5 s a step leaves the 48 steps after the fault 72 s (the tiny model trains its 60 steps in about a second).
    dag = elastic_dag(
        "elastic_slow_repair",
        tmp_path,
        elastic_timeout_seconds=ELASTIC_TIMEOUT_SECONDS,
        stall_timeout=f"timedelta(seconds={STALL_SECONDS})",
        local_env={"LOCAL_STEP_SECONDS": "1.5"},
    )
    with StepFaults(cluster_connection, "elastic-slow-repair").at(12, lose_a_host_repaired_slowly) as faults:
        try:
            dag_run = dag.test()
        finally:
            for name in seen.get("held", []):
                faults.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
    assert faults.fired == [12], faults.errors
    assert len(seen["held"]) == 2 * HOSTS_PER_SLICE  # the two v5e-16 pools the run did not use
    assert seen["lost"]["repairSeconds"] == REPAIR_SECONDS and len(seen["lost"]["nodes"]) == HOSTS_PER_SLICE
    assert seen["slice_nodes"] <= set(seen["lost"]["nodes"])  # every host of the slice went
    assert states(dag_run) == {"pretrain": "success"}
    report = xcom(dag_run, "pretrain")
    assert report["final_step"] == 59
    assert report["full_restarts"] == 0 and report["escalations"] == []
    assert report["slice_restarts"] == 1 and report["in_process_recoveries"] == 1
    [recovery] = report["recoveries"]
    assert recovery["kind"] == "slice_down" and recovery["complete"]
    # The trainer saw the slice down while the pool was being repaired, and waited it out: its slices were back no
    # sooner than the pool was, within its wait for slices.
    assert recovery["detected_at"] < seen["lost_at"] + REPAIR_SECONDS, (recovery, seen["lost_at"])
    assert recovery["slices_ready_at"] - seen["lost_at"] >= REPAIR_SECONDS - 2
    assert recovery["slices_ready_at"] - recovery["detected_at"] < ELASTIC_TIMEOUT_SECONDS
    assert 0 <= recovery["steps_lost"] <= 10
    assert len(jobsets_of(cluster_connection, "elastic-slow-repair")) == 1
