"""kubectl against the local cluster's nodes: get nodes, cordon, drain (the eviction subresource), uncordon."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic_training.local.cluster import LocalCluster
from elastic_training.local.descriptions.cluster_description import parse_description
from tests.support.cluster_objects import pod
from tests.support.kubectl import KUBECTL, header, kubectl, rows
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (no `kubectl` on PATH)")

CLUSTER_DESCRIPTION = parse_description(
    {
        "cluster": "k",
        "nodePools": [{"name": "cpu-np", "machineType": "n2-standard-8", "nodeCount": 2, "cpu": "8", "memory": "32Gi"}],
    }
)


@pytest.fixture(scope="module")
def kubeconfig(cluster: LocalCluster) -> Path:
    return cluster.kubeconfig_path


def test_get_nodes(kubeconfig: Path) -> None:
    out = kubectl(kubeconfig, "get", "nodes").stdout
    assert header(out) == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    table = rows(out)
    assert sorted(table) == ["gke-k-cpu-np-0", "gke-k-cpu-np-1"]
    assert table["gke-k-cpu-np-0"][1:3] == ["Ready", "<none>"]
    wide = kubectl(kubeconfig, "get", "nodes", "-o", "wide", "-l", "cloud.google.com/gke-nodepool=cpu-np").stdout
    assert header(wide)[5:7] == ["INTERNAL-IP", "EXTERNAL-IP"]
    assert rows(wide)["gke-k-cpu-np-1"][5] == "127.0.0.1"


def test_cordon_drain_uncordon(kubeconfig: Path, k8s: K8s) -> None:
    k8s.core.create_namespaced_pod(
        "default", pod("drainee", node_selector={"kubernetes.io/hostname": "gke-k-cpu-np-0"})
    )
    wait_for(lambda: k8s.core.read_namespaced_pod("drainee", "default").status.phase == "Running")
    kubectl(kubeconfig, "cordon", "gke-k-cpu-np-0")
    assert rows(kubectl(kubeconfig, "get", "nodes").stdout)["gke-k-cpu-np-0"][1] == "Ready,SchedulingDisabled"
    drained = kubectl(kubeconfig, "drain", "gke-k-cpu-np-0", "--force", "--timeout=60s")
    assert "evicting pod default/drainee" in drained.stderr + drained.stdout
    assert not k8s.core.list_namespaced_pod("default", field_selector="metadata.name=drainee").items
    kubectl(kubeconfig, "uncordon", "gke-k-cpu-np-0")
    assert rows(kubectl(kubeconfig, "get", "nodes").stdout)["gke-k-cpu-np-0"][1] == "Ready"
