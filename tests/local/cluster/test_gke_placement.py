"""The operator's GKE JobSet on the default v5e-small cluster: 3 slices of 4 hosts and the head, placed as on GKE.

One JobSet for the module (`placed`): the placement test reads it, the lost-host test then loses a host under it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.constants import ANNOTATION_EXCLUSIVE_TOPOLOGY, LABEL_JOBSET_NAME
from elastic_training.operators.manifests import elastic_jobset
from tests.support.gke_jobsets import asleep, v5e_16_spec
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

CLUSTER_DESCRIPTION = "v5e-small"
NODEPOOL = "cloud.google.com/gke-nodepool"
# The trainer's stand-in outlives the lost slice's re-forming (about 135 s on the real controllers, below); the tests
# delete the JobSet when done.
TRAINER_SECONDS = 900


def _gke_jobset() -> dict[str, Any]:
    jobset = elastic_jobset(v5e_16_spec("placed"), name="placed", namespace="default", labels={})
    for rjob in jobset["spec"]["replicatedJobs"]:
        if rjob["name"] == "worker":  # as rendered: one slice per node pool, as xpk and pathways-job set it
            assert rjob["template"]["metadata"]["annotations"][ANNOTATION_EXCLUSIVE_TOPOLOGY] == NODEPOOL
    return asleep(jobset, TRAINER_SECONDS)  # the trainer: placement only here, so something that stays up


def _all_running(k8s: K8s, count: int) -> list[client.V1Pod] | None:
    pods = k8s.core.list_namespaced_pod("default", label_selector=f"{LABEL_JOBSET_NAME}=placed").items
    # (a lost host's pods stay Running, their status unwritten, until pod GC fails them)
    running = [p for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]
    return running if len(running) == count else None


def _delete_placed(k8s: K8s) -> None:
    k8s.custom.delete_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", "placed", propagation_policy="Foreground"
    )
    wait_for(lambda: not k8s.core.list_namespaced_pod("default", label_selector=f"{LABEL_JOBSET_NAME}=placed").items)
    # The next module may reuse the name: wait until the foreground deletion has removed the JobSet itself.
    wait_for(
        lambda: (
            not k8s.custom.list_namespaced_custom_object(
                "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", field_selector="metadata.name=placed"
            )["items"]
        )
    )


@pytest.fixture(scope="module")
def placed(k8s: K8s) -> Iterator[list[client.V1Pod]]:
    """The operator's GKE JobSet created and its 13 pods Running (those pods); deleted after the module's tests."""
    k8s.custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "default", "jobsets", _gke_jobset())
    try:
        yield wait_for(lambda: _all_running(k8s, 13), timeout=90)
    finally:
        _delete_placed(k8s)


def test_three_four_host_slices_and_the_head_land_as_on_gke(k8s: K8s, placed: list[client.V1Pod]) -> None:
    pods = placed
    pools = {n.metadata.name: n.metadata.labels[NODEPOOL] for n in k8s.core.list_node().items}
    by_job: dict[str, list[str]] = {}
    for pod in pods:
        by_job.setdefault(pod.metadata.labels["batch.kubernetes.io/job-name"], []).append(pod.spec.node_name)
    assert [pools[n] for n in by_job.pop("placed-pathways-head-0")] == ["cpu-np"]
    assert sorted(by_job) == ["placed-worker-0", "placed-worker-1", "placed-worker-2"]
    slice_pools = []
    for nodes in by_job.values():
        assert len(set(nodes)) == 4  # a multi-host slice: 4 worker pods on 4 hosts ...
        (pool,) = {pools[n] for n in nodes}  # ... of one node pool
        slice_pools.append(pool)
    assert len(set(slice_pools)) == 3 and all(p.startswith("tpu-v5e-16-") for p in slice_pools)


def _jobset_status(k8s: K8s) -> dict[str, Any]:
    jobset = k8s.custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "default", "jobsets", "placed")
    status: dict[str, Any] = jobset.get("status") or {}
    return status


@pytest.mark.slow
@pytest.mark.timeout(420)  # the lost slice re-forms about 135 s after the loss (below)
def test_a_lost_host_spends_slice_budget_and_a_head_eviction_restarts_off_budget(
    cluster: UpstreamCluster, k8s: K8s, placed: list[client.V1Pod]
) -> None:
    worker = next(p for p in placed if p.metadata.labels["batch.kubernetes.io/job-name"] == "placed-worker-0")

    # One host of slice 0 lost (its pool's hosts with it), as on GKE (measured on the real controllers, from the
    # loss): the node lifecycle controller marks the pool's nodes Unknown and their pods not Ready after its grace
    # period (~54 s); GKE deletes the gone VMs' Nodes (~58 s); pod GC fails and deletes their 4 pods after its 40 s
    # quarantine (~99 s), which the Job counts as failed (4 of its backoffLimit 12); the Job controller's back-off
    # for 4 failures in a row (10 s * 2^3 = 80 s, from the pods' finish: their Ready=False at the mark) ends at
    # ~134 s, when the replacements are created, and the slice re-forms at once in the free pool.
    lost = cluster.faults.lose_host(worker.spec.node_name, repair_seconds=3600)
    try:
        wait_for(lambda: k8s.batch.read_namespaced_job("placed-worker-0", "default").status.failed == 4, 240)
        assert not {n.metadata.name for n in k8s.core.list_node().items} & set(lost["nodes"])  # deleted, not back
        again = wait_for(lambda: _all_running(k8s, 13), timeout=150)
    finally:
        cluster.faults.repair_lost_slices()  # now rather than in an hour
    pools = {n.metadata.name: n.metadata.labels[NODEPOOL] for n in k8s.core.list_node().items}
    slice0 = {
        pools[p.spec.node_name] for p in again if p.metadata.labels["batch.kubernetes.io/job-name"] == "placed-worker-0"
    }
    assert len(slice0) == 1 and lost["nodePool"] not in slice0
    assert not _jobset_status(k8s).get("restarts")

    # The head evicted: its podFailurePolicy fails the Job with PodFailurePolicy, and the JobSet's
    # headDisrupted rule restarts it without counting toward maxRestarts (0 here).
    head = next(p for p in again if p.metadata.labels["batch.kubernetes.io/job-name"] == "placed-pathways-head-0")
    cluster.faults.evict_pod("default", head.metadata.name)
    status = wait_for(lambda: (s := _jobset_status(k8s)).get("restarts") == 1 and s, timeout=60)
    assert status.get("restartsCountTowardsMax", 0) == 0
    assert not any(c["type"] == "Failed" and c["status"] == "True" for c in status.get("conditions") or [])
