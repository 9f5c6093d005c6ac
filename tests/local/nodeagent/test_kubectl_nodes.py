"""The built kubectl against the nodes the node agent registered: get nodes, cordon, drain (kube-apiserver's
eviction subresource), uncordon. On the process's shared upstream cluster (v5e-small: 19 nodes in 6 pools), one
node of its CPU pool."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from elastic_training.local.upstream_cluster import UpstreamCluster
from tests.support import local_cluster
from tests.support.cluster_objects import pod
from tests.support.control_plane import NS, unique
from tests.support.kubectl import header, rows
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

# The process's shared upstream cluster and its clients (module fixtures), in place of the conftest's own.
cluster = local_cluster.cluster
k8s = local_cluster.k8s
POOL = "cpu-np"  # v5e-small's CPU pool, 2 nodes


def _kubectl(cluster: UpstreamCluster, *args: str) -> subprocess.CompletedProcess[str]:
    command = [str(cluster.control_plane.binaries["kubectl"]), f"--kubeconfig={cluster.kubeconfig_path}", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"kubectl {' '.join(args)} exited {done.returncode}: {done.stderr}"
    return done


@pytest.fixture
def node(cluster: UpstreamCluster) -> Iterator[str]:
    """A node of the CPU pool (untainted), uncordoned again after the test."""
    assert cluster.agent is not None
    name = next(n for n in cluster.agent.node_names if n.startswith(f"gke-local-{POOL}-"))
    yield name
    _kubectl(cluster, "uncordon", name)


def test_get_nodes(cluster: UpstreamCluster, node: str) -> None:
    out = _kubectl(cluster, "get", "nodes").stdout
    assert header(out) == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    table = rows(out)
    assert cluster.agent is not None
    assert sorted(table) == sorted(cluster.agent.node_names)
    assert {row[1] for row in table.values()} == {"Ready"}
    assert table[node][1:3] == ["Ready", "<none>"]
    wide = _kubectl(cluster, "get", "nodes", "-o", "wide", "-l", f"cloud.google.com/gke-nodepool={POOL}").stdout
    assert len(rows(wide)) == 2
    assert header(wide)[5:7] == ["INTERNAL-IP", "EXTERNAL-IP"]
    assert rows(wide)[node][5] == "127.0.0.1"
    assert not rows(_kubectl(cluster, "get", "nodes", "-l", "cloud.google.com/gke-nodepool=no-such-pool").stdout)


def test_cordon_drain_uncordon(cluster: UpstreamCluster, k8s: K8s, node: str) -> None:
    name = unique("drainee")
    k8s.core.create_namespaced_pod(NS, pod(name, node_selector={"kubernetes.io/hostname": node}))
    wait_for(lambda: k8s.core.read_namespaced_pod(name, NS).status.phase == "Running", 60)
    _kubectl(cluster, "cordon", node)
    assert rows(_kubectl(cluster, "get", "nodes").stdout)[node][1] == "Ready,SchedulingDisabled"
    drained = _kubectl(cluster, "drain", node, "--force", "--timeout=60s")  # --force: a pod no controller owns
    assert f"evicting pod {NS}/{name}" in drained.stderr + drained.stdout
    assert not k8s.core.list_namespaced_pod(NS, field_selector=f"metadata.name={name}").items
    _kubectl(cluster, "uncordon", node)
    assert rows(_kubectl(cluster, "get", "nodes").stdout)[node][1] == "Ready"
