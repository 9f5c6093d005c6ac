"""Faults at GKE's grain over HTTP: a lost TPU host, a node pool under repair, evictions and how Jobs count them."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Collection
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch

from elastic_training.local.cluster import LocalCluster
from elastic_training.local.descriptions.cluster_description import parse_description
from elastic_training.operators.constants import ANNOTATION_EXCLUSIVE_TOPOLOGY, LABEL_JOBSET_NAME
from tests.support.cluster_faults import _control
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

CLUSTER_DESCRIPTION = parse_description(
    {
        "cluster": "f",
        "nodePools": [
            {
                "name": f"tpu-{pool}",
                "machineType": "ct5lp-hightpu-4t",
                "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x4", "chipsPerNode": 4},
                "nodeCount": 2,
                "cpu": "112",
                "memory": "192Gi",
            }
            for pool in ("a", "b", "c")
        ]
        + [{"name": "cpu-np", "machineType": "n2-standard-8", "nodeCount": 1, "cpu": "8", "memory": "32Gi"}],
    }
)
NODEPOOL = "cloud.google.com/gke-nodepool"
TPU_TOLERATION = {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
SLEEP = ["sleep", "120"]


def _tpu_container() -> dict[str, Any]:
    return {"name": "w", "image": "local", "command": SLEEP, "resources": {"limits": {"google.com/tpu": "4"}}}


def _slices(name: str) -> dict[str, Any]:
    """Two 2-host slices, exclusive per node pool, workers restartPolicy OnFailure as Pathways' are."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [
                {
                    "name": "worker",
                    "replicas": 2,
                    "template": {
                        "metadata": {"annotations": {ANNOTATION_EXCLUSIVE_TOPOLOGY: NODEPOOL}},
                        "spec": {
                            "completionMode": "Indexed",
                            "parallelism": 2,
                            "completions": 2,
                            "backoffLimit": 4,
                            "template": {
                                "spec": {
                                    "restartPolicy": "OnFailure",
                                    "terminationGracePeriodSeconds": 0,
                                    "tolerations": [TPU_TOLERATION],
                                    "containers": [_tpu_container()],
                                }
                            },
                        },
                    },
                }
            ],
        },
    }


def _running(k8s: K8s, selector: str) -> list[client.V1Pod]:
    pods = k8s.core.list_namespaced_pod("default", label_selector=selector).items
    return [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]


def _disruptions(
    k8s: K8s, since: str, expect: Collection[str], *, quiet: float | None = None
) -> dict[str, tuple[str, str]]:
    """Pod name → (reason, phase) of every pod that carried a DisruptionTarget condition after ``since``.

    Waits (up to a minute) until each pod of ``expect`` has shown one; with ``quiet``, reads on until the watch
    has been quiet that many seconds, so that a pod marked that should not have been is seen too. A fixed watch
    window would end before a loaded machine replayed the events.
    """
    deadline = time.monotonic() + 60
    while True:
        seen: dict[str, tuple[str, str]] = {}
        stream = watch.Watch()
        try:
            for event in stream.stream(
                k8s.core.list_namespaced_pod,
                "default",
                resource_version=since,
                timeout_seconds=60,
                _request_timeout=(10, quiet or 60),  # a read that waits longer than `quiet` ends this watch
            ):
                pod = event["object"]
                for condition in pod.status.conditions or []:
                    if condition.type == "DisruptionTarget" and condition.status == "True":
                        seen[pod.metadata.name] = (condition.reason, pod.status.phase)
                if quiet is None and set(expect) <= set(seen):
                    break
        except urllib3.exceptions.ReadTimeoutError:
            pass
        finally:
            stream.stop()
        if set(expect) <= set(seen) or time.monotonic() > deadline:
            return seen


def _exactly(k8s: K8s, selector: str, count: int) -> list[client.V1Pod] | None:
    pods = _running(k8s, selector)
    return pods if len(pods) == count else None


def _ready(k8s: K8s, node: str) -> str:
    return str(next(c.status for c in k8s.core.read_node(node).status.conditions if c.type == "Ready"))


def test_a_lost_host_fails_its_whole_slice_and_the_slice_moves_to_a_free_pool(cluster: LocalCluster, k8s: K8s) -> None:
    k8s.custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "default", "jobsets", _slices("lost"))
    selector = f"{LABEL_JOBSET_NAME}=lost"
    running = wait_for(lambda: _exactly(k8s, selector, 4))
    victim = next(p for p in running if p.metadata.labels["batch.kubernetes.io/job-name"] == "lost-worker-0")
    pool = k8s.core.read_node(victim.spec.node_name).metadata.labels[NODEPOOL]
    slice_pods = sorted(
        f"default/{p.metadata.name}"
        for p in running
        if p.metadata.labels["batch.kubernetes.io/job-name"] == "lost-worker-0"
    )
    since = k8s.core.list_namespaced_pod("default").metadata.resource_version

    # 10 s of repair: the reads below must see the pool NotReady and tainted on a loaded machine.
    answer = _control(cluster, "lose-host", {"node": victim.spec.node_name, "repairSeconds": 10})

    assert answer["nodePool"] == pool and sorted(answer["failedPods"]) == slice_pods
    lost_nodes = answer["nodes"]
    assert all(_ready(k8s, n) == "Unknown" for n in lost_nodes)
    taints = {(t.key, t.effect) for t in k8s.core.read_node(lost_nodes[0]).spec.taints}
    assert ("node.kubernetes.io/unreachable", "NoExecute") in taints
    # Both hosts' pods failed as PodGC fails them, and are gone.
    names = [name.split("/")[1] for name in slice_pods]
    assert _disruptions(k8s, since, names, quiet=3.0) == {name: ("DeletionByPodGC", "Failed") for name in names}
    # The Job counted one failure per host; its replacements form the slice again in the free pool.
    job = wait_for(lambda: (j := k8s.batch.read_namespaced_job("lost-worker-0", "default")).status.failed == 2 and j)
    assert not any(c.type == "Failed" for c in job.status.conditions or [])
    replaced = wait_for(lambda: _exactly(k8s, f"{selector},batch.kubernetes.io/job-name=lost-worker-0", 2))
    new_pools = {k8s.core.read_node(p.spec.node_name).metadata.labels[NODEPOOL] for p in replaced}
    assert len(new_pools) == 1 and pool not in new_pools
    # The repaired pool comes back Ready and untainted.
    wait_for(lambda: all(_ready(k8s, n) == "True" for n in lost_nodes), timeout=30)
    assert not k8s.core.read_node(lost_nodes[0]).spec.taints[1:]  # only the TPU taint is left
    k8s.custom.delete_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", "lost", propagation_policy="Foreground"
    )
    wait_for(lambda: not k8s.core.list_namespaced_pod("default", label_selector=selector).items)


def _job(name: str) -> dict[str, Any]:
    container = {"name": "main", "image": "local", "command": SLEEP}
    return {
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 3,
            "template": {
                "spec": {"restartPolicy": "OnFailure", "terminationGracePeriodSeconds": 1, "containers": [container]}
            },
        },
    }


@pytest.mark.parametrize("reason", ["EvictionByEvictionAPI", "PreemptionByScheduler"])
def test_an_eviction_under_on_failure_counts_one_failure_and_the_pod_is_replaced(
    cluster: LocalCluster, k8s: K8s, reason: str
) -> None:
    name = f"evict-{reason.lower()}"
    k8s.batch.create_namespaced_job("default", _job(name))
    (first,) = wait_for(lambda: _running(k8s, f"job-name={name}"))
    since = k8s.core.list_namespaced_pod("default").metadata.resource_version

    answer = _control(cluster, "evict-pod", {"namespace": "default", "name": first.metadata.name, "reason": reason})

    assert answer == {"evicted": first.metadata.name, "reason": reason, "deleted": True}
    job = wait_for(lambda: (j := k8s.batch.read_namespaced_job(name, "default")).status.failed == 1 and j)
    assert not any(c.type == "Failed" for c in job.status.conditions or [])
    (second,) = wait_for(lambda: _running(k8s, f"job-name={name}"))
    assert second.metadata.name != first.metadata.name
    assert _disruptions(k8s, since, [first.metadata.name])[first.metadata.name][0] == reason
    k8s.batch.delete_namespaced_job(name, "default", propagation_policy="Foreground")


def test_termination_by_kubelet_leaves_the_pod_failed(cluster: LocalCluster, k8s: K8s) -> None:
    body = {
        "metadata": {"name": "shutdown"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "local", "command": SLEEP}],
        },
    }
    k8s.core.create_namespaced_pod("default", body)
    wait_for(
        lambda: _running(k8s, "") and k8s.core.read_namespaced_pod("shutdown", "default").status.phase == "Running"
    )

    _control(cluster, "evict-pod", {"namespace": "default", "name": "shutdown", "reason": "TerminationByKubelet"})

    pod = wait_for(lambda: (p := k8s.core.read_namespaced_pod("shutdown", "default")).status.phase == "Failed" and p)
    assert pod.status.reason == "Terminated"
    assert pod.status.message == "Pod was terminated in response to imminent node shutdown."
    (condition,) = [c for c in pod.status.conditions if c.type == "DisruptionTarget"]
    assert (condition.status, condition.reason) == ("True", "TerminationByKubelet")
    assert pod.metadata.deletion_timestamp is None
    k8s.core.delete_namespaced_pod("shutdown", "default", grace_period_seconds=0)


def test_a_node_pool_under_repair_is_drained_and_schedulable_again_later(cluster: LocalCluster, k8s: K8s) -> None:
    pin = {NODEPOOL: "tpu-c"}
    pod = {
        "metadata": {"name": "on-c"},
        "spec": {
            "nodeSelector": pin,
            "tolerations": [TPU_TOLERATION],
            "terminationGracePeriodSeconds": 0,
            "containers": [_tpu_container()],
        },
    }
    k8s.core.create_namespaced_pod("default", pod)
    wait_for(lambda: k8s.core.read_namespaced_pod("on-c", "default").status.phase == "Running")

    # 10 s of repair: the pod below must be created and found unschedulable before it ends, on a loaded machine.
    answer = _control(cluster, "repair-node-pool", {"nodePool": "tpu-c", "seconds": 10})

    assert answer["evictedPods"] == ["default/on-c"]
    assert all(k8s.core.read_node(n).spec.unschedulable for n in answer["nodes"])
    wait_for(lambda: not k8s.core.list_namespaced_pod("default", field_selector="metadata.name=on-c").items)
    k8s.core.create_namespaced_pod("default", {**pod, "metadata": {"name": "waits-for-c"}})

    def unschedulable() -> str | None:
        for condition in k8s.core.read_namespaced_pod("waits-for-c", "default").status.conditions or []:
            if condition.type == "PodScheduled" and condition.status == "False":
                return str(condition.message)
        return None

    message = wait_for(unschedulable)
    assert "2 node(s) were unschedulable" in message
    placed = wait_for(
        lambda: (p := k8s.core.read_namespaced_pod("waits-for-c", "default")).spec.node_name and p, timeout=30
    )
    assert placed.spec.node_name in answer["nodes"]
    k8s.core.delete_namespaced_pod("waits-for-c", "default", grace_period_seconds=0)


@pytest.mark.parametrize(
    ("path", "body", "status", "text"),
    [
        ("lose-host", {"node": "no-such-node"}, 404, 'nodes "no-such-node" not found'),
        ("lose-host", {"node": "gke-f-tpu-a-0", "repairSeconds": -1}, 400, "repairSeconds must be between"),
        ("repair-node-pool", {"nodePool": "tpu-a"}, 400, "seconds is required"),
        ("repair-node-pool", {"nodePool": "nope", "seconds": 1}, 404, 'node pool "nope" not found'),
        ("evict-pod", {"namespace": "default", "name": "x", "reason": "Because"}, 400, "unknown disruption reason"),
        ("evict-pod", {"namespace": "default", "name": "absent"}, 404, 'pods "absent" not found'),
    ],
)
def test_bad_fault_requests_are_refused(
    cluster: LocalCluster, path: str, body: dict[str, Any], status: int, text: str
) -> None:
    with pytest.raises(urllib.error.HTTPError) as caught:
        _control(cluster, path, body)
    assert caught.value.code == status
    assert text in json.loads(caught.value.read())["message"]


def _never_job(name: str, rules: list[dict[str, Any]], command: list[str]) -> dict[str, Any]:
    container = {"name": "main", "image": "local", "command": command}
    return {
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 3,
            "podFailurePolicy": {"rules": rules},
            "template": {
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [container]}
            },
        },
    }


IGNORE_DISRUPTIONS = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}


def test_pod_failure_policy_needs_restart_policy_never(k8s: K8s) -> None:
    body = _never_job("on-failure-policy", [IGNORE_DISRUPTIONS], SLEEP)
    body["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    with pytest.raises(client.ApiException) as caught:
        k8s.batch.create_namespaced_job("default", body)
    assert caught.value.status == 422
    assert (
        'spec.template.spec.restartPolicy: Invalid value: "OnFailure": only "Never" is supported when '
        "podFailurePolicy is specified" in (json.loads(caught.value.body)["message"])
    )


def test_pod_failure_policy_ignores_an_eviction_under_never(cluster: LocalCluster, k8s: K8s) -> None:
    k8s.batch.create_namespaced_job("default", _never_job("ignores", [IGNORE_DISRUPTIONS], SLEEP))
    (first,) = wait_for(lambda: _running(k8s, "job-name=ignores"))
    _control(cluster, "evict-pod", {"namespace": "default", "name": first.metadata.name})
    (second,) = wait_for(lambda: _running(k8s, "job-name=ignores"))
    assert second.metadata.name != first.metadata.name
    assert k8s.batch.read_namespaced_job("ignores", "default").status.failed in (None, 0)
    k8s.batch.delete_namespaced_job("ignores", "default", propagation_policy="Foreground")


def test_pod_failure_policy_fail_job_on_an_exit_code(k8s: K8s) -> None:
    rules = [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]
    k8s.batch.create_namespaced_job("default", _never_job("fails", rules, ["sh", "-c", "exit 42"]))

    def failed() -> client.V1JobCondition | None:
        job = k8s.batch.read_namespaced_job("fails", "default")
        return next((c for c in job.status.conditions or [] if c.type == "Failed"), None)

    condition = wait_for(failed)
    assert condition.reason == "PodFailurePolicy"
    assert condition.message.startswith("Container main for pod default/fails-")
    assert condition.message.endswith("failed with exit code 42 matching FailJob rule at index 0")
    k8s.batch.delete_namespaced_job("fails", "default", propagation_policy="Foreground")


def test_the_eviction_subresource_marks_and_deletes_the_pod(k8s: K8s) -> None:
    k8s.batch.create_namespaced_job("default", _job("drained"))
    (first,) = wait_for(lambda: _running(k8s, "job-name=drained"))
    since = k8s.core.list_namespaced_pod("default").metadata.resource_version
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=first.metadata.name, namespace="default"))
    response = k8s.core.create_namespaced_pod_eviction(first.metadata.name, "default", eviction, _preload_content=False)
    assert response.status == 201
    assert _disruptions(k8s, since, [first.metadata.name])[first.metadata.name][0] == "EvictionByEvictionAPI"
    wait_for(lambda: k8s.batch.read_namespaced_job("drained", "default").status.failed == 1)
    k8s.batch.delete_namespaced_job("drained", "default", propagation_policy="Foreground")
