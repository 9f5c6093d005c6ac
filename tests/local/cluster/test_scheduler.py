"""Nodes and the scheduler over HTTP: GKE's node pools, filters, FailedScheduling, binding, retries."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client, watch

from elastic_training.local.cluster.scheduler import fit_error_message
from elastic_training.local.cluster.scheduler_filters import Rejection
from elastic_training.local.descriptions.cluster_description import parse_description
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

# Two v5e 2x4 slices (2 hosts each) and a small CPU pool: 6 nodes.
CLUSTER_DESCRIPTION = parse_description(
    {
        "cluster": "t",
        "nodePools": [
            {
                "name": f"tpu-{letter}",
                "machineType": "ct5lp-hightpu-4t",
                "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x4", "chipsPerNode": 4},
                "nodeCount": 2,
                "cpu": "112",
                "memory": "192Gi",
            }
            for letter in ("a", "b")
        ]
        + [{"name": "cpu-np", "machineType": "n2-standard-8", "nodeCount": 2, "cpu": "8", "memory": "32Gi"}],
    }
)
TPU_TOLERATION = {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
TPU_SELECTOR = {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice"}


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "local", "command": ["sleep", "60"]}
    if "resources" in spec:
        container["resources"] = spec.pop("resources")
    if "ports" in spec:
        container["ports"] = spec.pop("ports")
    return {
        "metadata": {"name": name},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 0, **spec},
    }


def _scheduled(k8s: K8s, name: str) -> client.V1Pod | None:
    pod = k8s.core.read_namespaced_pod(name, "default")
    return pod if pod.spec.node_name else None


def _unschedulable(k8s: K8s, name: str) -> str | None:
    pod = k8s.core.read_namespaced_pod(name, "default")
    for condition in pod.status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            assert condition.reason == "Unschedulable"
            return str(condition.message)
    return None


def _delete(k8s: K8s, *names: str) -> None:
    for name in names:
        k8s.core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def test_nodes_are_served_with_gke_labels_taints_and_capacity(k8s: K8s) -> None:
    nodes = k8s.core.list_node().items
    assert sorted(n.metadata.name for n in nodes) == sorted(
        [*(f"gke-t-tpu-{p}-{i}" for p in "ab" for i in range(2)), "gke-t-cpu-np-0", "gke-t-cpu-np-1"]
    )
    node = k8s.core.read_node("gke-t-tpu-a-1")
    assert node.metadata.labels["cloud.google.com/gke-nodepool"] == "tpu-a"
    assert node.metadata.labels["cloud.google.com/gke-tpu-topology"] == "2x4"
    assert node.metadata.labels["kubernetes.io/hostname"] == "gke-t-tpu-a-1"
    assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [("google.com/tpu", "present", "NoSchedule")]
    assert node.status.allocatable["google.com/tpu"] == "4"
    assert [(c.type, c.status) for c in node.status.conditions] == [("Ready", "True")]
    by_pool = k8s.core.list_node(label_selector="cloud.google.com/gke-nodepool=tpu-b").items
    assert [n.metadata.name for n in by_pool] == ["gke-t-tpu-b-0", "gke-t-tpu-b-1"]


def test_node_watch_sees_a_cordon(k8s: K8s) -> None:
    stream = watch.Watch()
    version = k8s.core.list_node().metadata.resource_version
    k8s.core.patch_node("gke-t-cpu-np-1", {"spec": {"unschedulable": True}})
    try:
        for event in stream.stream(k8s.core.list_node, resource_version=version, timeout_seconds=10):
            if event["object"].metadata.name == "gke-t-cpu-np-1":
                assert event["type"] == "MODIFIED"
                assert event["object"].spec.unschedulable is True
                break
        else:
            pytest.fail("no watch event for the cordon")
    finally:
        stream.stop()
        k8s.core.patch_node("gke-t-cpu-np-1", {"spec": {"unschedulable": False}})


def test_plain_pod_is_bound_to_an_untainted_node_and_runs(k8s: K8s) -> None:
    k8s.core.create_namespaced_pod("default", _pod("plain"))
    pod = wait_for(lambda: _scheduled(k8s, "plain"))
    assert pod.spec.node_name.startswith("gke-t-cpu-np-")
    wait_for(lambda: k8s.core.read_namespaced_pod("plain", "default").status.phase == "Running")
    events = k8s.core.list_namespaced_event("default", field_selector="involvedObject.name=plain").items
    assert any(
        e.reason == "Scheduled"
        and e.action == "Binding"
        and e.message == f"Successfully assigned default/plain to {pod.spec.node_name}"
        for e in events
    )
    _delete(k8s, "plain")


def test_tpu_pod_without_toleration_stays_pending_with_kube_scheduler_reasons(k8s: K8s) -> None:
    k8s.core.create_namespaced_pod("default", _pod("no-toleration", resources={"limits": {"google.com/tpu": "4"}}))
    message = wait_for(lambda: _unschedulable(k8s, "no-toleration"))
    assert message == (
        "0/6 nodes are available: 2 Insufficient google.com/tpu, 4 node(s) had untolerated taint "
        "{google.com/tpu: present}. preemption: 0/6 nodes are available: 2 No preemption victims found for "
        "incoming pod, 4 Preemption is not helpful for scheduling."
    )
    pod = k8s.core.read_namespaced_pod("no-toleration", "default")
    assert pod.status.phase == "Pending"
    assert pod.spec.node_name is None
    assert pod.spec.containers[0].resources.requests == {"google.com/tpu": "4"}  # limits imply requests
    events = k8s.core.list_namespaced_event("default", field_selector="involvedObject.name=no-toleration").items
    assert [(e.type, e.reason, e.message) for e in events] == [("Warning", "FailedScheduling", message)]
    # As kube-scheduler's handleSchedulingFailure (pkg/scheduler/schedule_one.go): action, reporter, condition.
    assert (events[0].action, events[0].reporting_component) == ("Scheduling", "default-scheduler")
    [condition] = [c for c in pod.status.conditions if c.type == "PodScheduled"]
    assert (condition.status, condition.reason, condition.message) == ("False", "Unschedulable", message)
    _delete(k8s, "no-toleration")


def test_selector_and_resources_each_name_their_nodes(k8s: K8s) -> None:
    k8s.core.create_namespaced_pod(
        "default",
        _pod(
            "too-big",
            nodeSelector=TPU_SELECTOR,
            tolerations=[TPU_TOLERATION],
            resources={"limits": {"google.com/tpu": "8"}},
        ),
    )
    message = wait_for(lambda: _unschedulable(k8s, "too-big"))
    assert message.startswith(
        "0/6 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 4 Insufficient google.com/tpu."
    )
    _delete(k8s, "too-big")


def test_a_tpu_worker_takes_a_whole_host(k8s: K8s) -> None:
    names = [f"worker-{i}" for i in range(5)]
    for name in names:
        k8s.core.create_namespaced_pod(
            "default",
            _pod(
                name,
                nodeSelector=TPU_SELECTOR,
                tolerations=[TPU_TOLERATION],
                resources={"limits": {"google.com/tpu": "4"}},
            ),
        )
    wait_for(lambda: sum(1 for n in names if _scheduled(k8s, n)) == 4 and _unschedulable(k8s, names[-1]))
    hosts = [k8s.core.read_namespaced_pod(n, "default").spec.node_name for n in names[:4]]
    assert sorted(hosts) == [f"gke-t-tpu-{p}-{i}" for p in "ab" for i in range(2)]
    # The fifth is retried when a host frees up.
    _delete(k8s, names[0])
    assert wait_for(lambda: _scheduled(k8s, names[-1])).spec.node_name == hosts[0]
    _delete(k8s, *names[1:])


def test_host_ports_of_host_network_pods_conflict(k8s: K8s) -> None:
    pin = {"kubernetes.io/hostname": "gke-t-cpu-np-0"}
    ports = [{"containerPort": 29000, "protocol": "TCP"}]
    k8s.core.create_namespaced_pod("default", _pod("port-a", hostNetwork=True, nodeSelector=pin, ports=ports))
    k8s.core.create_namespaced_pod("default", _pod("port-b", hostNetwork=True, nodeSelector=pin, ports=ports))
    wait_for(lambda: _scheduled(k8s, "port-a"))
    message = wait_for(lambda: _unschedulable(k8s, "port-b"))
    assert "1 node(s) didn't have free ports for the requested pod ports" in message
    assert k8s.core.read_namespaced_pod("port-a", "default").spec.containers[0].ports[0].host_port == 29000
    _delete(k8s, "port-a", "port-b")


def test_cordoned_node_takes_no_pod_until_uncordoned(k8s: K8s) -> None:
    for name in ("gke-t-cpu-np-0", "gke-t-cpu-np-1"):
        k8s.core.patch_node(name, {"spec": {"unschedulable": True}})
    try:
        k8s.core.create_namespaced_pod("default", _pod("waits"))
        message = wait_for(lambda: _unschedulable(k8s, "waits"))
        assert message.startswith(
            "0/6 nodes are available: 2 node(s) were unschedulable, 4 node(s) had untolerated taint"
        )
    finally:
        for name in ("gke-t-cpu-np-0", "gke-t-cpu-np-1"):
            k8s.core.patch_node(name, {"spec": {"unschedulable": False}})
    wait_for(lambda: _scheduled(k8s, "waits"))
    _delete(k8s, "waits")


def test_pod_bound_to_a_missing_node_is_not_run(k8s: K8s) -> None:
    k8s.core.create_namespaced_pod("default", _pod("ghost", nodeName="no-such-node"))
    pod = k8s.core.read_namespaced_pod("ghost", "default")
    assert pod.status.phase == "Pending"
    assert not pod.status.container_statuses
    _delete(k8s, "ghost")


def test_fit_error_message_without_nodes() -> None:
    assert fit_error_message(0, []) == "no nodes available to schedule pods"


def test_fit_error_message_sorts_reasons_as_strings() -> None:
    rejections = [Rejection(("Insufficient cpu", "Insufficient memory"), True), Rejection(("Too many pods",), True)]
    assert fit_error_message(2, rejections) == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, 1 Too many pods. "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    )


def test_binding_subresource_binds_a_pod_another_scheduler_owns(k8s: K8s) -> None:
    k8s.core.create_namespaced_pod("default", _pod("bound-by-hand", schedulerName="my-scheduler"))
    assert k8s.core.read_namespaced_pod("bound-by-hand", "default").spec.node_name is None  # not ours to place
    binding = client.V1Binding(
        metadata=client.V1ObjectMeta(name="bound-by-hand"),
        target=client.V1ObjectReference(kind="Node", name="gke-t-cpu-np-1"),
    )
    response = k8s.core.create_namespaced_pod_binding("bound-by-hand", "default", binding, _preload_content=False)
    assert response.status == 201 and json.loads(response.data)["status"] == "Success"
    pod = wait_for(
        lambda: (p := k8s.core.read_namespaced_pod("bound-by-hand", "default")).status.phase == "Running" and p
    )
    assert pod.spec.node_name == "gke-t-cpu-np-1"
    with pytest.raises(client.ApiException) as caught:
        k8s.core.create_namespaced_pod_binding("bound-by-hand", "default", binding, _preload_content=False)
    assert caught.value.status == 409
    assert json.loads(caught.value.body)["message"] == 'pod bound-by-hand is already assigned to node "gke-t-cpu-np-1"'
    _delete(k8s, "bound-by-hand")


def test_node_affinity_not_in_a_node_pool_keeps_the_pod_off_it(k8s: K8s) -> None:
    """avoid_failing_node_pools' affinity (``cloud.google.com/gke-nodepool NotIn [...]``), as upstream's NodeAffinity
    filter reads it (kubernetes pkg/scheduler/framework/plugins/nodeaffinity, k8s.io/component-helpers
    scheduling/corev1/nodeaffinity: NotIn matches a node without the label or with another value)."""

    def avoiding(*pools: str) -> dict[str, Any]:
        term = {
            "matchExpressions": [{"key": "cloud.google.com/gke-nodepool", "operator": "NotIn", "values": list(pools)}]
        }
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}

    for n in range(2):
        k8s.core.create_namespaced_pod(
            "default",
            _pod(f"off-a-{n}", nodeSelector=TPU_SELECTOR, tolerations=[TPU_TOLERATION], affinity=avoiding("tpu-a")),
        )
    placed = [wait_for(lambda n=n: _scheduled(k8s, f"off-a-{n}")) for n in range(2)]
    assert {p.spec.node_name for p in placed} <= {"gke-t-tpu-b-0", "gke-t-tpu-b-1"}
    k8s.core.create_namespaced_pod(
        "default",
        _pod("off-both", nodeSelector=TPU_SELECTOR, tolerations=[TPU_TOLERATION], affinity=avoiding("tpu-a", "tpu-b")),
    )
    message = wait_for(lambda: _unschedulable(k8s, "off-both"))
    assert message.startswith("0/6 nodes are available: 6 node(s) didn't match Pod's node affinity/selector."), message
    _delete(k8s, "off-a-0", "off-a-1", "off-both")


def test_an_event_message_is_cut_at_the_events_apis_note_limit() -> None:
    """As kube-scheduler's ``truncateMessage`` (pkg/scheduler/schedule_one.go): a FitError message over
    ``NoteLengthLimit`` (1024) is cut to it, ending in `` ...``; the pod's condition keeps it whole."""
    from elastic_training.local.cluster.events import NOTE_LENGTH_LIMIT, WARNING, record_event
    from elastic_training.local.cluster.store import Store

    store = Store()  # it has the "default" namespace, as an API server does
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default", "uid": "u"}}
    long = "0/5000 nodes are available: " + "x" * 2000
    event = record_event(store, pod, WARNING, "FailedScheduling", long, "default-scheduler", action="Scheduling")
    assert event is not None and len(event["message"]) == NOTE_LENGTH_LIMIT == 1024
    assert event["message"].endswith(" ...") and long.startswith(event["message"][:-4])
    assert event["action"] == "Scheduling"
