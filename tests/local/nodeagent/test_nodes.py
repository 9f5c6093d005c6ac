"""The agent registers the description's nodes with the real kube-apiserver as GKE's kubelets do, keeps their
leases, and when a host is lost the real node lifecycle controller marks its node NotReady."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client

from tests.support.node_agent import (
    CPU_NODE,
    NS,
    TPU_NODES,
    Cluster,
    gone,
    pod_in_phase,
    process_alive,
    running,
    shell_pod,
    unique,
)
from tests.support.waiting import wait_for

UNREACHABLE = "node.kubernetes.io/unreachable"
# kube-controller-manager's --node-monitor-grace-period for this module's cluster (GKE's, the default, is 50 s): the
# promise is that the real node lifecycle controller marks a lost host, not after how long; 25 s still lets a lease
# (renewed every 10 s) miss a renewal without the node being marked.
NODE_MONITOR_GRACE_SECONDS = 25


def _job(name: str, pod: dict[str, Any]) -> dict[str, Any]:
    """A Job of ``pod``'s spec whose ``podFailurePolicy`` makes the Job controller wait for a Failed pod."""
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}
    spec = {"backoffLimit": 0, "podFailurePolicy": policy, "template": {"spec": pod["spec"]}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NS}, "spec": spec}


def _ready(node: client.V1Node) -> str:
    return next((c.status for c in node.status.conditions or [] if c.type == "Ready"), "")


def test_every_node_is_registered_ready_with_gke_labels_tpu_capacity_taints_and_its_kubelet_port(
    cluster: Cluster,
) -> None:
    def settled() -> dict[str, client.V1Node] | None:
        # The node lifecycle controller taints a new node not-ready until it has seen it Ready (its next pass).
        listed = {n.metadata.name: n for n in cluster.core.list_node().items}
        tainted = any(t.key.startswith("node.kubernetes.io/") for n in listed.values() for t in n.spec.taints or [])
        return None if tainted else listed

    nodes = wait_for(settled, timeout=30, interval=0.5)

    assert sorted(nodes) == sorted([*TPU_NODES, CPU_NODE]) == sorted(cluster.agent.node_names)
    tpu = nodes[TPU_NODES[0]]
    assert tpu.metadata.labels["cloud.google.com/gke-nodepool"] == "tpu-v5e-8"
    assert tpu.metadata.labels["cloud.google.com/gke-tpu-topology"] == "2x4"
    assert tpu.metadata.labels["cloud.google.com/gke-tpu-accelerator"] == "tpu-v5-lite-podslice"
    assert tpu.status.capacity["google.com/tpu"] == tpu.status.allocatable["google.com/tpu"] == "4"
    assert [(t.key, t.value, t.effect) for t in tpu.spec.taints] == [("google.com/tpu", "present", "NoSchedule")]
    assert not nodes[CPU_NODE].spec.taints
    for name, node in nodes.items():
        assert _ready(node) == "True"
        assert (node.status.addresses[0].type, node.status.addresses[0].address) == ("InternalIP", "127.0.0.1")
        assert node.status.daemon_endpoints.kubelet_endpoint.port == cluster.agent.kubelet_port(name)
    assert len({cluster.agent.kubelet_port(name) for name in nodes}) == len(nodes)


def test_each_node_has_a_lease_renewed_every_ten_seconds(cluster: Cluster) -> None:
    lease = cluster.coordination.read_namespaced_lease(CPU_NODE, "kube-node-lease")
    assert lease.spec.holder_identity == CPU_NODE and lease.spec.lease_duration_seconds == 40
    assert lease.metadata.owner_references[0].kind == "Node"
    first: datetime = lease.spec.renew_time

    renewed = wait_for(
        lambda: cluster.coordination.read_namespaced_lease(CPU_NODE, "kube-node-lease").spec.renew_time > first,
        timeout=20,
        interval=0.5,
    )

    assert renewed


@pytest.mark.slow
def test_a_lost_host_is_marked_not_ready_by_the_node_lifecycle_controller_and_comes_back(cluster: Cluster) -> None:
    node = TPU_NODES[1]
    toleration = {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
    kept, deleted = unique("kept"), unique("deleted")
    for name in (kept, deleted):
        cluster.core.create_namespaced_pod(NS, shell_pod(name, "sleep 600", node=node, tolerations=[toleration]))
        running(cluster.core, name)
    # A Job whose pod failure policy keeps its pod's tracking finalizer until the pod is Failed.
    batch, job = client.BatchV1Api(cluster.core.api_client), unique("suspended")
    batch.create_namespaced_job(NS, _job(job, shell_pod(job, "sleep 600", node=node, tolerations=[toleration])))
    job_pod = wait_for(lambda: cluster.core.list_namespaced_pod(NS, label_selector=f"job-name={job}").items, 30)[0]
    running(cluster.core, job_pod.metadata.name)
    pids = [pid for name in (kept, deleted, job_pod.metadata.name) for pid in cluster.agent.pids(NS, name)]

    cluster.agent.lose_host(node)

    wait_for(lambda: not any(process_alive(pid) for pid in pids), timeout=10)
    assert cluster.core.read_namespaced_pod(kept, NS).status.phase == "Running"  # nobody reported it
    cluster.core.delete_namespaced_pod(deleted, NS)  # waits for the lost kubelet: Terminating
    batch.patch_namespaced_job(job, NS, {"spec": {"suspend": True}})  # the Job controller deletes its pod so too
    started = time.monotonic()

    def not_ready() -> client.V1Node | None:
        current = cluster.core.read_node(node)
        taints = {t.key for t in current.spec.taints or []}
        return current if _ready(current) == "Unknown" and UNREACHABLE in taints else None

    lost = wait_for(not_ready, timeout=120, interval=1.0)
    print(f"NotReady and tainted after {time.monotonic() - started:.0f} s")
    assert not gone(cluster.core, deleted)
    assert all(_ready(cluster.core.read_node(other)) == "True" for other in (TPU_NODES[0], CPU_NODE))
    assert lost.spec.taints

    cluster.agent.restore_host(node)

    def ready_again() -> bool:
        current = cluster.core.read_node(node)
        return _ready(current) == "True" and UNREACHABLE not in {t.key for t in current.spec.taints or []}

    wait_for(ready_again, timeout=60, interval=0.5)
    wait_for(lambda: gone(cluster.core, deleted), timeout=30)
    wait_for(lambda: gone(cluster.core, job_pod.metadata.name), timeout=30)
    batch.delete_namespaced_job(job, NS, propagation_policy="Background")
    failed = pod_in_phase(cluster.core, kept, "Failed")
    terminated = failed.status.container_statuses[0].state.terminated
    assert (terminated.reason, terminated.exit_code) == ("ContainerStatusUnknown", 137)
