"""Pods bound to the agent's nodes run as local processes; their status, deletion and logs go through the real
kube-apiserver (the kubelet's pods/status, DELETE with a UID precondition, and the kubelet API behind pods/log)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes import client, config

from elastic_training.local.controlplane import binaries
from elastic_training.local.descriptions.cluster_description import SINGLE_NODE
from elastic_training.local.nodeagent import NodeAgent
from tests.support.node_agent import (
    NS,
    Cluster,
    gone,
    pod_in_phase,
    process_alive,
    running,
    shell_pod,
    unique,
)
from tests.support.shared_cluster import shared_cluster
from tests.support.waiting import wait_for

# The suite's usual cluster, its agent the kubelet of every node (the process's shared cluster, reused and reset, not
# a control plane of the module's own): two hosts of a v5e-16 slice, the single-host v5e pool and a CPU node.
CLUSTER_DESCRIPTION = "v5e-small"
USES_SHARED_CLUSTER = True  # its `cluster` below asks for it (tests/conftest.py orders and releases by this)
TPU_NODES = ["gke-local-tpu-v5e-16-0-0", "gke-local-tpu-v5e-16-0-1"]
SINGLE_HOST_POOL, SINGLE_HOST_NODE = "tpu-v5e-4", "gke-local-tpu-v5e-4-0"
CPU_NODE = "gke-local-cpu-np-0"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The shared cluster's control plane and agent, and the official client as the cluster admin."""
    if binaries.installed() is None:
        pytest.skip("the control plane's binaries are not built (make control-plane)")
    upstream = shared_cluster(CLUSTER_DESCRIPTION, tmp_path_factory.getbasetemp())
    assert upstream.agent is not None
    assert set(TPU_NODES) | {SINGLE_HOST_NODE, CPU_NODE} <= set(upstream.agent.node_names)
    api_client = config.new_client_from_config(config_file=str(upstream.control_plane.kubeconfigs["admin"]))
    try:
        core = client.CoreV1Api(api_client)
        yield Cluster(
            upstream.control_plane, upstream.agent, upstream.description, core, client.CoordinationV1Api(api_client)
        )
    finally:
        api_client.close()


def _conditions(pod: client.V1Pod) -> dict[str, str]:
    return {c.type: c.status for c in pod.status.conditions or []}


def test_a_bound_pod_runs_and_reports_succeeded_or_failed_with_its_exit_code(cluster: Cluster) -> None:
    ok, bad = unique("ok"), unique("bad")
    cluster.core.create_namespaced_pod(NS, shell_pod(ok, "echo fine", node=CPU_NODE))
    cluster.core.create_namespaced_pod(NS, shell_pod(bad, "exit 3", node=TPU_NODES[0]))

    succeeded = pod_in_phase(cluster.core, ok, "Succeeded", "Failed")
    failed = pod_in_phase(cluster.core, bad, "Succeeded", "Failed")

    assert succeeded.status.phase == "Succeeded"
    assert succeeded.status.container_statuses[0].state.terminated.exit_code == 0
    assert failed.status.phase == "Failed"
    terminated = failed.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")
    assert failed.status.host_ip == failed.status.pod_ip == "127.0.0.1"
    assert failed.status.start_time is not None
    conditions = _conditions(failed)
    assert conditions["PodScheduled"] == conditions["Initialized"] == "True"
    assert conditions["Ready"] == conditions["ContainersReady"] == "False"


def test_a_running_pod_is_ready_and_restarts_on_failure_with_its_count(cluster: Cluster, tmp_path: Path) -> None:
    name = unique("restarts")
    mark = f"{tmp_path}/ran-once"
    script = f"if [ -f {mark} ]; then sleep 300; else touch {mark}; exit 1; fi"
    cluster.core.create_namespaced_pod(NS, shell_pod(name, script, node=CPU_NODE, restart="OnFailure"))

    def restarted() -> client.V1Pod | None:  # Running is seen during the first run too, before it exits 1
        pod = running(cluster.core, name)
        return pod if pod.status.container_statuses[0].restart_count >= 1 else None

    pod = wait_for(restarted, 60)
    status = pod.status.container_statuses[0]
    assert status.restart_count == 1 and status.ready
    assert status.last_state.terminated.exit_code == 1
    assert _conditions(pod)["Ready"] == "True" and pod.status.phase == "Running"
    cluster.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)


def test_the_real_scheduler_binds_a_pod_to_an_agent_node_and_it_runs(cluster: Cluster) -> None:
    name = unique("scheduled")
    toleration = {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
    pod = shell_pod(
        name,
        "echo scheduled",
        node=None,
        nodeSelector={"cloud.google.com/gke-nodepool": SINGLE_HOST_POOL},
        tolerations=[toleration],
    )
    pod["spec"]["containers"][0]["resources"] = {"limits": {"google.com/tpu": "4"}}
    cluster.core.create_namespaced_pod(NS, pod)

    done = pod_in_phase(cluster.core, name, "Succeeded", "Failed")

    assert done.status.phase == "Succeeded" and done.spec.node_name == SINGLE_HOST_NODE


def test_a_deleted_pod_gets_sigterm_then_is_removed_with_its_processes_gone(cluster: Cluster) -> None:
    name = unique("deleted")
    script = "trap 'echo got-term; exit 0' TERM; echo up; while :; do sleep 0.1; done"
    cluster.core.create_namespaced_pod(NS, shell_pod(name, script, node=TPU_NODES[1], grace=20))
    uid = running(cluster.core, name).metadata.uid
    pids = wait_for(lambda: cluster.agent.pids(NS, name))

    started = time.monotonic()
    cluster.core.delete_namespaced_pod(name, NS)
    wait_for(lambda: gone(cluster.core, name), timeout=30)

    assert time.monotonic() - started < 15  # it stopped on SIGTERM, not at the 20 s deadline
    assert not any(process_alive(pid) for pid in pids)
    assert "got-term" in cluster.agent.log_store.path(uid, "main", 0).read_text()


def test_a_pod_ignoring_sigterm_is_killed_at_its_grace_period(cluster: Cluster) -> None:
    name = unique("stubborn")
    cluster.core.create_namespaced_pod(
        NS, shell_pod(name, "trap '' TERM; while :; do sleep 0.1; done", node=CPU_NODE, grace=2)
    )
    running(cluster.core, name)
    pids = wait_for(lambda: cluster.agent.pids(NS, name))

    cluster.core.delete_namespaced_pod(name, NS)
    wait_for(lambda: gone(cluster.core, name), timeout=30)

    assert not any(process_alive(pid) for pid in pids)


def test_a_force_deleted_pod_has_its_processes_killed_at_once(cluster: Cluster) -> None:
    name = unique("forced")
    cluster.core.create_namespaced_pod(NS, shell_pod(name, "trap '' TERM; sleep 300", node=CPU_NODE, grace=60))
    running(cluster.core, name)
    pids = wait_for(lambda: cluster.agent.pids(NS, name))

    cluster.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)

    wait_for(lambda: not any(process_alive(pid) for pid in pids), timeout=10)


def test_signal_pod_signals_the_containers_processes(cluster: Cluster) -> None:
    name = unique("signalled")
    cluster.core.create_namespaced_pod(NS, shell_pod(name, "sleep 300", node=CPU_NODE))
    running(cluster.core, name)

    assert cluster.agent.signal_pod(NS, name, signal.SIGKILL) == 1
    failed = pod_in_phase(cluster.core, name, "Failed")

    terminated = failed.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 128 + signal.SIGKILL
    assert cluster.agent.signal_pod(NS, "no-such-pod", signal.SIGTERM) == 0


def test_the_agent_keeps_the_conditions_others_own_when_it_writes_status(cluster: Cluster) -> None:
    name = unique("disrupted")
    cluster.core.create_namespaced_pod(NS, shell_pod(name, "sleep 300", node=CPU_NODE))
    running(cluster.core, name)
    # kube-controller-manager's disruption controller resets a stale one (2 min after its transition) to False.
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    disruption = {"type": "DisruptionTarget", "status": "True", "reason": "Test", "lastTransitionTime": now}
    cluster.core.patch_namespaced_pod_status(name, NS, {"status": {"conditions": [disruption]}})

    cluster.agent.signal_pod(NS, name, signal.SIGTERM)
    failed = pod_in_phase(cluster.core, name, "Failed")

    assert _conditions(failed)["DisruptionTarget"] == "True"


def test_stopping_an_agent_stops_every_pod_process(cluster: Cluster, tmp_path: Path) -> None:
    pki = cluster.control_plane.pki
    assert pki is not None
    other = NodeAgent(
        kubeconfig=cluster.control_plane.kubeconfigs["node-agent"],
        description=SINGLE_NODE,
        workdir=tmp_path,
        pod_env={},
        serving_cert=pki.node_agent[0],
        serving_key=pki.node_agent[1],
        client_ca=pki.ca,
    )
    other.start()
    name = unique("left")
    try:
        cluster.core.create_namespaced_pod(NS, shell_pod(name, "trap '' TERM; sleep 300", node="local-node"))
        running(cluster.core, name)
        pids = wait_for(lambda: other.pids(NS, name))
    finally:
        other.stop(grace_cap_seconds=1.0)

    assert not any(process_alive(pid) for pid in pids)
    cluster.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
    cluster.core.delete_node("local-node")


# -- logs through kube-apiserver -> the agent's kubelet API --------------------------------------------------


def _log(cluster: Cluster, name: str, **params: object) -> str:
    response = cluster.core.read_namespaced_pod_log(name, NS, _preload_content=False, **params)
    return str(response.data.decode())


def test_logs_through_the_apiserver_with_tail_timestamps_limit_and_since(cluster: Cluster) -> None:
    name = unique("logs")
    cluster.core.create_namespaced_pod(
        NS, shell_pod(name, "echo one; echo two >&2; sleep 1.2; echo three", node=TPU_NODES[0])
    )
    pod_in_phase(cluster.core, name, "Succeeded")

    assert _log(cluster, name) == "one\ntwo\nthree\n"
    assert _log(cluster, name, tail_lines=1) == "three\n"
    assert _log(cluster, name, limit_bytes=6) == "one\ntw"
    stamped = _log(cluster, name, timestamps=True).splitlines()
    assert [line.split(" ", 1)[1] for line in stamped] == ["one", "two", "three"]
    third = datetime.fromisoformat(stamped[2].split(" ", 1)[0][:26] + "+00:00")
    since = third.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert (
        cluster.core.api_client.call_api(
            f"/api/v1/namespaces/{NS}/pods/{name}/log",
            "GET",
            query_params=[("sinceTime", since)],
            auth_settings=["BearerToken"],
            _preload_content=False,
        ).data.decode()
        == "three\n"
    )


def test_logs_previous_is_the_run_before_the_restart(cluster: Cluster, tmp_path: Path) -> None:
    name = unique("previous")
    mark = f"{tmp_path}/ran-once"
    script = f"if [ -f {mark} ]; then echo second; sleep 300; else touch {mark}; echo first; exit 1; fi"
    cluster.core.create_namespaced_pod(NS, shell_pod(name, script, node=CPU_NODE, restart="OnFailure"))
    running(cluster.core, name)

    assert wait_for(lambda: _log(cluster, name) == "second\n")
    assert _log(cluster, name, previous=True) == "first\n"
    cluster.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)


def test_logs_of_an_unknown_container_or_a_waiting_one_are_refused(cluster: Cluster) -> None:
    name = unique("waiting")
    pod = shell_pod(name, "true", node=CPU_NODE)
    pod["spec"]["containers"][0]["image"] = "registry.example/not-in-the-catalogue:1"
    cluster.core.create_namespaced_pod(NS, pod)

    def waiting() -> bool:
        statuses = cluster.core.read_namespaced_pod(name, NS).status.container_statuses or []
        return (
            bool(statuses)
            and statuses[0].state.waiting is not None
            and statuses[0].state.waiting.reason in ("ErrImagePull", "ImagePullBackOff")
        )

    wait_for(waiting)
    with pytest.raises(client.ApiException) as refused:
        _log(cluster, name)
    assert refused.value.status == 400 and "is waiting to start" in str(refused.value.body)
    cluster.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)


def _kubectl() -> str:
    built = binaries.installed()
    path = str(built.paths["kubectl"]) if built is not None and "kubectl" in built.paths else shutil.which("kubectl")
    if path is None:
        pytest.skip("no kubectl built or on PATH")
    return path


def test_kubectl_logs_follow_streams_until_the_container_ends(cluster: Cluster) -> None:
    kubectl = _kubectl()
    name = unique("follow")
    script = "for i in 1 2 3 4; do echo line-$i; sleep 0.5; done"
    cluster.core.create_namespaced_pod(NS, shell_pod(name, script, node=TPU_NODES[1]))
    running(cluster.core, name)

    started = time.monotonic()
    result = subprocess.run(
        [kubectl, f"--kubeconfig={cluster.control_plane.kubeconfig_path}", "logs", "-f", name],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout == "line-1\nline-2\nline-3\nline-4\n"
    assert time.monotonic() - started >= 1.0  # it followed the run to its end
