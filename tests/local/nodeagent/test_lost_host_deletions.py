"""Pods deleted while their node's host is lost are finished when it comes back, as a real kubelet does: it reports
their final status (Failed, containers it cannot find ``ContainerStatusUnknown``) and removes them. A Job with a
``podFailurePolicy`` (as the operator's leader Jobs have) keeps its pods' tracking finalizer until the pod is
Failed, so a removal without the final status leaves the pod Terminating for good.

Here the host comes back before the node lifecycle controller marks the node (the shared cluster keeps the default
50 s grace); tests/local/nodeagent/test_nodes.py shows a bare pod deleted while its node is marked.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from elastic_training.local.upstream_cluster import UpstreamCluster
from tests.support import local_cluster
from tests.support.control_plane import NS, container, pod_pids, unique, wait_processes_gone
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

# The process's shared upstream cluster (v5e-small, as test_kubelet's) and its clients.
cluster = local_cluster.cluster
k8s = local_cluster.k8s

GRACE_SECONDS = 30


def _job(name: str, node: str) -> dict[str, Any]:
    """A Job of one pod on ``node`` whose pod failure policy makes the Job controller wait for a Failed pod."""
    template = {
        "metadata": {"labels": {"lost-host-job": name}},
        "spec": {
            "restartPolicy": "Never",
            "nodeName": node,
            "terminationGracePeriodSeconds": GRACE_SECONDS,
            "containers": [container("main", "sleep 600")],
        },
    }
    policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"backoffLimit": 0, "podFailurePolicy": policy, "template": template},
    }


def _running_pod(k8s: K8s, job: str) -> client.V1Pod:
    def probe() -> client.V1Pod | None:
        pods = k8s.core.list_namespaced_pod(NS, label_selector=f"lost-host-job={job}").items
        running = [p for p in pods if any(s.state.running for s in p.status.container_statuses or [])]
        return running[0] if running else None

    return wait_for(probe, 60)


def _gone(k8s: K8s, pod: client.V1Pod) -> bool:
    """The pod (this uid) is no longer in the API."""
    try:
        current = k8s.core.read_namespaced_pod(pod.metadata.name, NS)
    except client.ApiException as err:
        if err.status == 404:
            return True
        raise
    return bool(current.metadata.uid != pod.metadata.uid)


def test_pods_deleted_while_their_host_is_lost_are_finished_when_it_comes_back(
    cluster: UpstreamCluster, k8s: K8s
) -> None:
    assert cluster.agent is not None
    node = cluster.agent.node_names[0]
    suspended, forced = unique("lost-suspended"), unique("lost-forced")
    for name in (suspended, forced):
        k8s.batch.create_namespaced_job(NS, _job(name, node))
    pods = {name: _running_pod(k8s, name) for name in (suspended, forced)}
    try:
        cluster.agent.lose_host(node)
        wait_processes_gone([pid for pod in pods.values() for pid in pod_pids(pod)])
        # Graceful: the Job controller deletes a suspended Job's pods with their grace period; and one deleted with
        # grace 0, which the tracking finalizer keeps too.
        k8s.batch.patch_namespaced_job(suspended, NS, {"spec": {"suspend": True}})
        k8s.core.delete_namespaced_pod(pods[forced].metadata.name, NS, grace_period_seconds=0)
        for pod in pods.values():
            terminating = wait_for(lambda pod=pod: _terminating(k8s, pod), 30)
            assert terminating.status.phase == "Running"  # the lost kubelet wrote nothing
    finally:
        cluster.agent.restore_host(node)
    try:
        for pod in pods.values():
            wait_for(lambda pod=pod: _gone(k8s, pod), GRACE_SECONDS + 30)
    finally:
        for name in (suspended, forced):
            k8s.batch.delete_namespaced_job(name, NS, propagation_policy="Background")


def _terminating(k8s: K8s, pod: client.V1Pod) -> client.V1Pod | None:
    current: client.V1Pod = k8s.core.read_namespaced_pod(pod.metadata.name, NS)
    return current if current.metadata.deletion_timestamp is not None else None
