"""Capacity that takes time: a node pool provisioned on demand, a lost host repaired slowly (over HTTP)."""

from __future__ import annotations

import time
import urllib.error
from datetime import datetime

import pytest
from kubernetes import client

from elastic_training.local.cluster import LocalCluster
from elastic_training.local.cluster.resources import ApiError
from elastic_training.local.descriptions.cluster_description import parse_description
from tests.support.cluster_faults import _control
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

NODEPOOL = "cloud.google.com/gke-nodepool"
DELAY = 2.0
CLUSTER_DESCRIPTION = parse_description(
    {
        "cluster": "p",
        "nodePools": [
            {"name": "always", "machineType": "n2-standard-8", "nodeCount": 1, "cpu": "8", "memory": "32Gi"},
            {
                "name": "flex",
                "machineType": "n2-standard-8",
                "nodeCount": 2,
                "cpu": "8",
                "memory": "32Gi",
                "provisioning": {"onDemand": True, "delaySeconds": DELAY},
            },
            {
                "name": "slow-repair",
                "machineType": "n2-standard-8",
                "nodeCount": 1,
                "cpu": "8",
                "memory": "32Gi",
                "repairSeconds": 1.5,
            },
            {"name": "spare", "machineType": "n2-standard-8", "nodeCount": 1, "cpu": "8", "memory": "32Gi"},
        ],
    }
)


def _pod(name: str, pool: str) -> client.V1Pod:
    container = client.V1Container(name="main", image="local", command=["sleep", "60"])
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            containers=[container], node_selector={NODEPOOL: pool}, termination_grace_period_seconds=0
        ),
    )


def _nodes(k8s: K8s, pool: str) -> list[client.V1Node]:
    items: list[client.V1Node] = k8s.core.list_node(label_selector=f"{NODEPOOL}={pool}").items
    return items


def _stamp(value: datetime) -> float:
    return value.timestamp()


def test_an_on_demand_pool_has_no_nodes_until_a_pod_asks_then_all_of_them(k8s: K8s) -> None:
    assert _nodes(k8s, "flex") == []
    assert len(_nodes(k8s, "always")) == 1
    k8s.core.create_namespaced_pod("default", _pod("wants-flex", "flex"))
    pending = wait_for(
        lambda: (
            (p := k8s.core.read_namespaced_pod("wants-flex", "default")).status.conditions
            and any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in p.status.conditions)
            and p
        ),
        30,
    )
    assert pending.spec.node_name is None
    scale_up = wait_for(
        lambda: [
            e
            for e in k8s.core.list_namespaced_event("default", field_selector="involvedObject.name=wants-flex").items
            if e.reason == "TriggeredScaleUp"
        ],
        30,
    )
    assert scale_up[0].message == "pod triggered scale-up: [{flex 0->2 (max: 2)}]"
    running = wait_for(
        lambda: (p := k8s.core.read_namespaced_pod("wants-flex", "default")).status.phase == "Running" and p, 60
    )
    nodes = _nodes(k8s, "flex")
    assert len(nodes) == 2 and running.spec.node_name in {n.metadata.name for n in nodes}
    # The nodes registered no earlier than the delay after the scale-up (second-resolution stamps).
    triggered = _stamp(scale_up[0].first_timestamp or scale_up[0].event_time)
    assert min(_stamp(n.metadata.creation_timestamp) for n in nodes) - triggered >= DELAY - 1
    k8s.core.delete_namespaced_pod("wants-flex", "default", grace_period_seconds=0)


def test_the_fault_makes_an_idle_pool_on_demand_and_refuses_a_busy_one(cluster: LocalCluster, k8s: K8s) -> None:
    k8s.core.create_namespaced_pod("default", _pod("on-spare", "spare"))
    wait_for(lambda: k8s.core.read_namespaced_pod("on-spare", "default").status.phase == "Running", 60)
    with pytest.raises(urllib.error.HTTPError) as caught:
        _control(cluster, "provision-on-demand", {"nodePool": "spare", "seconds": 1})
    assert caught.value.code == 400
    assert "node pool spare runs 1 pod(s) (default/on-spare)" in caught.value.read().decode()
    k8s.core.delete_namespaced_pod("on-spare", "default", grace_period_seconds=0)
    wait_for(lambda: not k8s.core.list_namespaced_pod("default", field_selector="metadata.name=on-spare").items, 30)
    answer = _control(cluster, "provision-on-demand", {"nodePool": "spare", "seconds": 1})
    assert (answer["nodePool"], answer["nodes"], answer["seconds"]) == ("spare", ["gke-p-spare-0"], 1)
    assert _nodes(k8s, "spare") == []
    k8s.core.create_namespaced_pod("default", _pod("back-on-spare", "spare"))
    wait_for(lambda: k8s.core.read_namespaced_pod("back-on-spare", "default").status.phase == "Running", 60)
    assert [n.metadata.name for n in _nodes(k8s, "spare")] == ["gke-p-spare-0"]
    k8s.core.delete_namespaced_pod("back-on-spare", "default", grace_period_seconds=0)


def test_a_lost_host_is_repaired_after_its_pools_repair_time(cluster: LocalCluster, k8s: K8s) -> None:
    before = time.monotonic()
    answer = _control(cluster, "lose-host", {"node": "gke-p-slow-repair-0"})
    assert answer["repairSeconds"] == 1.5  # the description's, since the fault named none

    def ready() -> bool:
        node = k8s.core.read_node("gke-p-slow-repair-0")
        return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)

    wait_for(ready, 30)
    assert time.monotonic() - before >= 1.5  # repaired no sooner than its repair time allows
    quick = _control(cluster, "lose-host", {"node": "gke-p-slow-repair-0", "repairSeconds": 0})
    assert quick["repairSeconds"] == 0


def test_the_python_facade_reaches_both_faults(cluster: LocalCluster) -> None:
    with pytest.raises(ApiError) as caught:
        cluster.faults.provision_on_demand("no-such-pool", 1)
    assert caught.value.code == 404 and 'node pool "no-such-pool" not found' in caught.value.message
    lost = cluster.faults.lose_host("gke-p-always-0")
    assert (lost["nodePool"], lost["repairSeconds"]) == ("always", 0.0)  # no repairSeconds declared: at once
