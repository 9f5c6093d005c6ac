"""`ElasticJobSetOperator` through a slow host repair on the local cluster (``v5e-small``): waiting is not stalling.

A host of one slice is lost and its node pool stays NotReady for ``REPAIR_SECONDS`` (the local cluster's slow-repair
fault, ``lose-host`` with ``repairSeconds``), while every other v5e-16 pool is held by another team's pods: the lost
slice can come back only where it was, once the pool is repaired. The repair takes well under MaxText's
``elastic_timeout_seconds``, so pathwaysutils' wait for slices rides it out: the run must recover in process, with
one slice restart, no escalation, no full restart and one JobSet. Every wait is on a condition with a deadline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from elastic_training.local.cluster import LocalCluster
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
REPAIR_SECONDS = 30.0  # slow beside a pod restart (seconds); any repair under elastic_timeout_seconds rides out
ELASTIC_TIMEOUT_SECONDS = 180  # MaxText's wait for slices: the repair plus the slice's pods starting, with room
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
    airflow_db: None, cluster_connection: LocalCluster, tmp_path: Path
) -> None:
    seen: dict[str, Any] = {}

    def lose_a_host_repaired_slowly(faults: StepFaults) -> None:
        pods = _running_slice_pods(faults, 1)
        if len(pods) != HOSTS_PER_SLICE:
            raise RuntimeError(f"slice 1 has {len(pods)} running pods, not {HOSTS_PER_SLICE}")
        seen["held"] = _hold_the_other_pools(faults)
        seen["lost"] = faults.cluster.faults.lose_host(pods[0].spec.node_name, repair_seconds=REPAIR_SECONDS)

    # The trainer must still be training when the host goes: the tiny model trains its 60 steps in about a second
    # (a run here finished at step 59 before the loss reached it: one slice restart, no recovery). 0.3 s a step, as
    # an accelerator's, leaves the 35 steps after the fault over 10 s, and load slows the steps with the fault.
    dag = elastic_dag(
        "elastic_slow_repair",
        tmp_path,
        elastic_timeout_seconds=ELASTIC_TIMEOUT_SECONDS,
        stall_timeout=f"timedelta(seconds={STALL_SECONDS})",
        local_env={"LOCAL_STEP_SECONDS": "0.3"},
    )
    with StepFaults(cluster_connection, "elastic-slow-repair").at(25, lose_a_host_repaired_slowly) as faults:
        try:
            dag_run = dag.test()
        finally:
            for name in seen.get("held", []):
                faults.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
    assert faults.fired == [25], faults.errors
    assert len(seen["held"]) == 2 * HOSTS_PER_SLICE  # the two v5e-16 pools the run did not use
    assert seen["lost"]["repairSeconds"] == REPAIR_SECONDS and len(seen["lost"]["failedPods"]) == HOSTS_PER_SLICE
    assert states(dag_run) == {"pretrain": "success"}
    report = xcom(dag_run, "pretrain")
    assert report["final_step"] == 59
    assert report["full_restarts"] == 0 and report["escalations"] == []
    assert report["slice_restarts"] == 1 and report["in_process_recoveries"] == 1
    [recovery] = report["recoveries"]
    assert recovery["kind"] == "slice_down" and recovery["complete"]
    # The trainer waited out the repair: its slices were back no sooner than the pool was.
    waited = recovery["slices_ready_at"] - recovery["detected_at"]
    assert REPAIR_SECONDS - 2 <= waited < ELASTIC_TIMEOUT_SECONDS
    assert 0 <= recovery["steps_lost"] <= 10
    assert len(jobsets_of(cluster_connection, "elastic-slow-repair")) == 1
