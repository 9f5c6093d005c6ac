"""The node agent's tests: one real control plane and one node agent per test module (the ``cluster`` fixture),
pods for them and waits on what the API server shows. Upstream etcd, kube-apiserver, kube-controller-manager,
kube-scheduler (and the JobSet and Kueue managers the control plane starts), with the agent playing the kubelet of a
small GKE-like cluster: one v5e-8 slice (two TPU hosts) and one CPU node. tests/local/nodeagent/conftest.py
registers the fixture."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client, config

from elastic_training.local.controlplane import binaries
from elastic_training.local.controlplane.cluster import ControlPlane
from elastic_training.local.descriptions.cluster_description import ClusterDescription, parse_description
from elastic_training.local.nodeagent import NodeAgent
from tests.support.waiting import wait_for

NS = "default"

DESCRIPTION = parse_description(
    {
        "cluster": "agent",
        "nodePools": [
            {
                "name": "tpu-v5e-8",
                "machineType": "ct5lp-hightpu-4t",
                "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x4", "chipsPerNode": 4},
                "nodeCount": 2,
                "cpu": "112",
                "memory": "192Gi",
            },
            {"name": "cpu-np", "machineType": "n2-standard-64", "nodeCount": 1, "cpu": "63", "memory": "240Gi"},
        ],
    }
)
TPU_NODES = ["gke-agent-tpu-v5e-8-0", "gke-agent-tpu-v5e-8-1"]
CPU_NODE = "gke-agent-cpu-np-0"


@dataclass(frozen=True)
class Cluster:
    """The running control plane, the agent, and the official client as the cluster admin."""

    control_plane: ControlPlane
    agent: NodeAgent
    description: ClusterDescription
    core: client.CoreV1Api
    coordination: client.CoordinationV1Api


def start_control_plane(control_plane: ControlPlane) -> None:
    """Start it (a seam: a module can start fewer components)."""
    control_plane.start()


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A module sets kube-controller-manager's ``--node-monitor-grace-period`` with ``NODE_MONITOR_GRACE_SECONDS``
    (the default, 50 s, without it)."""
    if binaries.installed() is None:
        pytest.skip("the control plane's binaries are not built (make control-plane)")
    workdir = tmp_path_factory.mktemp("controlplane")
    grace = getattr(request.module, "NODE_MONITOR_GRACE_SECONDS", None)
    control_plane = ControlPlane(workdir, node_monitor_grace_seconds=grace)
    start_control_plane(control_plane)
    try:
        if control_plane.pki is None:
            raise RuntimeError("the control plane made no certificates")
        agent = NodeAgent(
            kubeconfig=control_plane.kubeconfigs["node-agent"],
            description=DESCRIPTION,
            workdir=workdir / "node-agent",
            pod_env={"KUBECONFIG": str(control_plane.kubeconfig_path)},
            serving_cert=control_plane.pki.node_agent[0],
            serving_key=control_plane.pki.node_agent[1],
            client_ca=control_plane.pki.ca,
        )
        agent.start()
        api_client = config.new_client_from_config(config_file=str(control_plane.kubeconfig_path))
        try:
            core = client.CoreV1Api(api_client)
            _wait_for_default_service_account(core)
            yield Cluster(control_plane, agent, DESCRIPTION, core, client.CoordinationV1Api(api_client))
        finally:
            agent.stop()
            api_client.close()
    finally:
        control_plane.stop()


def _wait_for_default_service_account(core: client.CoreV1Api, timeout: float = 60.0) -> None:
    """Pods need ``default/default``, which kube-controller-manager's service account controller makes."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            core.read_namespaced_service_account("default", "default")
            return
        except client.ApiException as err:
            if err.status != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def shell_pod(
    name: str, script: str, *, node: str | None, restart: str = "Never", grace: int | None = None, **spec: Any
) -> dict[str, Any]:
    """A pod of one ``local``-image container running ``sh -c script``, bound to ``node`` when given."""
    body: dict[str, Any] = {
        "restartPolicy": restart,
        "containers": [{"name": "main", "image": "local", "command": ["sh", "-c", script]}],
        **spec,
    }
    if node is not None:
        body["nodeName"] = node
    if grace is not None:
        body["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": body}


def pod_in_phase(core: client.CoreV1Api, name: str, *phases: str, timeout: float = 60.0) -> client.V1Pod:
    def probe() -> client.V1Pod | None:
        pod = core.read_namespaced_pod(name, NS)
        return pod if pod.status.phase in phases else None

    return wait_for(probe, timeout)


def running(core: client.CoreV1Api, name: str, timeout: float = 60.0) -> client.V1Pod:
    def probe() -> client.V1Pod | None:
        pod = core.read_namespaced_pod(name, NS)
        statuses = pod.status.container_statuses or []
        return pod if statuses and all(s.state.running for s in statuses) else None

    return wait_for(probe, timeout)


def gone(core: client.CoreV1Api, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, NS)
    except client.ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
