"""Node pools provisioned on demand under the real kube-scheduler: the scale-up a pending pod triggers, and the
``provision-on-demand`` fault through the fault endpoint."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any

import pytest
from kubernetes import client

from elastic_training.local.upstream_cluster import UpstreamCluster
from tests.support.control_plane import NS, unique
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

NODEPOOL = "cloud.google.com/gke-nodepool"
DELAY = 2.0  # the burst pool's delaySeconds (flex.yaml)


def _pod(name: str, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {NODEPOOL: pool},
            "containers": [{"name": "main", "image": "local", "command": ["sh", "-c", "sleep 300"]}],
        },
    }


def _nodes(k8s: K8s, pool: str) -> list[client.V1Node]:
    items: list[client.V1Node] = k8s.core.list_node(label_selector=f"{NODEPOOL}={pool}").items
    return items


def _phase(k8s: K8s, name: str) -> str:
    return str(k8s.core.read_namespaced_pod(name, NS).status.phase)


def _fault(cluster: UpstreamCluster, verb: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST to the fault endpoint with the admin's token, as ``elastic-training cluster fault`` does."""
    request = urllib.request.Request(
        f"https://127.0.0.1:{cluster.faults_port}/_local/faults/{verb}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Authorization": f"Bearer {cluster.control_plane.identities['admin'].token}",
            "Content-Type": "application/json",
        },
    )
    context = ssl.create_default_context(cafile=str(cluster.ca_path))
    with urllib.request.urlopen(request, timeout=60, context=context) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def test_an_on_demand_pool_has_no_nodes_until_an_unschedulable_pod_needs_them(k8s: K8s) -> None:
    assert _nodes(k8s, "burst") == []
    name = unique("wants-burst")
    k8s.core.create_namespaced_pod(NS, _pod(name, "burst"))

    def scale_up() -> list[client.CoreV1Event]:
        listed = k8s.core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name}").items
        return [e for e in listed if e.reason == "TriggeredScaleUp"]

    [event] = wait_for(scale_up, 60)
    assert event.message == "pod triggered scale-up: [{burst 0->2 (max: 2)}]"
    assert event.source.component == "cluster-autoscaler"
    scheduled = next(c for c in k8s.core.read_namespaced_pod(name, NS).status.conditions if c.type == "PodScheduled")
    assert (scheduled.status, scheduled.reason) == ("False", "Unschedulable")  # kube-scheduler's, before the nodes
    wait_for(lambda: _phase(k8s, name) == "Running", 90)
    nodes = _nodes(k8s, "burst")
    assert len(nodes) == 2
    assert k8s.core.read_namespaced_pod(name, NS).spec.node_name in {n.metadata.name for n in nodes}
    created = min(n.metadata.creation_timestamp for n in nodes)
    assert (created - event.first_timestamp).total_seconds() >= DELAY - 1  # second-resolution stamps
    k8s.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)


def test_the_fault_takes_an_idle_pools_nodes_away_until_a_pod_asks(k8s: K8s, cluster: UpstreamCluster) -> None:
    busy = unique("on-spare")
    k8s.core.create_namespaced_pod(NS, _pod(busy, "spare"))
    wait_for(lambda: _phase(k8s, busy) == "Running", 60)
    with pytest.raises(urllib.error.HTTPError) as refused:
        _fault(cluster, "provision-on-demand", {"nodePool": "spare", "seconds": 1})
    assert refused.value.code == 400
    assert f"node pool spare runs 1 pod(s) (default/{busy})" in refused.value.read().decode()
    k8s.core.delete_namespaced_pod(busy, NS, grace_period_seconds=0)
    wait_for(lambda: not k8s.core.list_namespaced_pod(NS, field_selector=f"metadata.name={busy}").items, 60)
    answer = _fault(cluster, "provision-on-demand", {"nodePool": "spare", "seconds": 1})
    assert answer == {"nodePool": "spare", "nodes": ["gke-flex-spare-0"], "seconds": 1.0, "queued": False}
    assert _nodes(k8s, "spare") == []
    back = unique("back-on-spare")
    k8s.core.create_namespaced_pod(NS, _pod(back, "spare"))
    wait_for(lambda: _phase(k8s, back) == "Running", 90)
    assert [n.metadata.name for n in _nodes(k8s, "spare")] == ["gke-flex-spare-0"]
    k8s.core.delete_namespaced_pod(back, NS, grace_period_seconds=0)


def test_a_queued_pool_is_never_scaled_up_for_a_pod(k8s: K8s, cluster: UpstreamCluster) -> None:
    name = unique("wants-flex")
    k8s.core.create_namespaced_pod(NS, _pod(name, "flex-a"))
    scheduled = wait_for(
        lambda: next(
            (c for c in k8s.core.read_namespaced_pod(name, NS).status.conditions or [] if c.type == "PodScheduled"),
            None,
        ),
        60,
    )
    assert scheduled.reason == "Unschedulable"
    answer = _fault(cluster, "provisioning", {"outcome": "delay", "seconds": 1})
    assert answer == {"outcome": "delay", "count": 1, "seconds": 1.0}
    assert cluster.faults.clear_provisioning_rules() == [{"outcome": "delay", "count": 1, "seconds": 1.0}]
    events = k8s.core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name}").items
    assert "TriggeredScaleUp" not in [e.reason for e in events]
    assert _nodes(k8s, "flex-a") == []
    k8s.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
