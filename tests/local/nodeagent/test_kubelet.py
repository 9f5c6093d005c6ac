"""The node agent as a kubelet, driven through the real kube-apiserver: init containers and sidecars, downward-API
env and ``$(VAR)`` expansion, restarts, signals, graceful and forced deletion, and no process left behind (what a
container forked, or a node agent killed abruptly).

These tests share the process's upstream cluster (:mod:`tests.support.shared_cluster`), not the control plane of
this directory's conftest. What tests/local/nodeagent/test_pods.py already shows is not repeated here: a failed
container's exit code and reason, SIGTERM on deletion, the kill at the pod's grace period, the previous run's log.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client

from elastic_training.local.upstream_cluster import UpstreamCluster
from tests.support import local_cluster
from tests.support.control_plane import (
    NS,
    armed,
    container,
    pod_manifest,
    pod_pids,
    process_alive,
    unique,
    wait_armed,
    wait_processes_gone,
)
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

# The process's shared upstream cluster and its clients (module fixtures), in place of the conftest's own.
cluster = local_cluster.cluster
k8s = local_cluster.k8s

TERMINAL = ("Succeeded", "Failed")


def _finished(k8s: K8s, name: str, timeout: float = 60.0) -> client.V1Pod:
    def probe() -> client.V1Pod | None:
        pod = k8s.core.read_namespaced_pod(name, NS)
        return pod if pod.status.phase in TERMINAL else None

    return wait_for(probe, timeout)


def _running(k8s: K8s, name: str) -> client.V1Pod:
    def probe() -> client.V1Pod | None:
        pod = k8s.core.read_namespaced_pod(name, NS)
        statuses = pod.status.container_statuses or []
        return pod if statuses and all(s.state.running for s in statuses) else None

    return wait_for(probe, 60)


def _gone(k8s: K8s, name: str) -> bool:
    try:
        k8s.core.read_namespaced_pod(name, NS)
    except client.ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


def _log(k8s: K8s, name: str, container_name: str, *, previous: bool = False) -> str:
    response = k8s.core.read_namespaced_pod_log(
        name, NS, container=container_name, previous=previous, _preload_content=False
    )
    return str(response.data.decode())


def test_plain_init_then_sidecar_then_main_and_sidecar_stops_after_main(k8s: K8s, tmp_path: Path) -> None:
    name = unique("sidecars")
    order = tmp_path / "order"
    env = [{"name": "ORDER", "value": str(order)}]
    sidecar = (
        # The trap first: main starts once it reads sidecar-start, and may stop (and SIGTERM the sidecar) at once.
        "trap 'echo sidecar-stop >> $ORDER; exit 0' TERM; echo sidecar-start >> $ORDER; while :; do sleep 0.05; done"
    )
    main = (
        "until grep -q sidecar-start $ORDER; do sleep 0.01; done; "
        "echo main-start >> $ORDER; sleep 0.2; echo main-stop >> $ORDER"
    )
    pod = pod_manifest(
        name,
        container("main", main, env=env),
        initContainers=[
            container("init", "sleep 0.2; echo init >> $ORDER", env=env),
            container("proxy", sidecar, env=env, restartPolicy="Always"),
        ],
    )
    k8s.core.create_namespaced_pod(NS, pod)
    done = _finished(k8s, name)
    assert done.status.phase == "Succeeded"  # the main container's result, not the sidecar's
    assert order.read_text().split() == ["init", "sidecar-start", "main-start", "main-stop", "sidecar-stop"]
    statuses = {s.name: s for s in done.status.init_container_statuses}
    assert statuses["init"].state.terminated.exit_code == 0
    assert statuses["proxy"].state.terminated is not None
    wait_processes_gone(pod_pids(done))


def test_field_ref_env_and_variable_expansion(k8s: K8s) -> None:
    name = unique("env")
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": "SLICE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['slice']"}}},
        {"name": "COORD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['example.com/coord']"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "HEAD", "value": "$(COORD)"},
        {"name": "TARGET", "value": "grpc://$(HEAD):29000"},
        {"name": "ESCAPED", "value": "$$(HEAD)"},
        {"name": "UNDEFINED", "value": "$(NOPE)-$(LATER)"},
        {"name": "LATER", "value": "late"},
    ]
    args = [
        "echo name=$(POD_NAME) ns=$(POD_NS) slice=$(SLICE) target=$(TARGET) escaped='$(ESCAPED)' "
        "undefined='$(UNDEFINED)' node=$(NODE) ip=$(POD_IP) uid=$POD_UID host=$HOSTNAME kc=${KUBECONFIG:+set}"
    ]
    pod = pod_manifest(name, {"name": "main", "image": "local", "command": ["sh", "-c"], "args": args, "env": env})
    pod["metadata"]["labels"] = {"slice": "3"}
    pod["metadata"]["annotations"] = {"example.com/coord": "js-head-0-0.js"}
    k8s.core.create_namespaced_pod(NS, pod)
    done = _finished(k8s, name)
    out = _log(k8s, name, "main").strip()
    assert done.status.phase == "Succeeded", out
    fields = dict(part.split("=", 1) for part in out.split())
    assert fields["name"] == name
    assert fields["ns"] == NS
    assert fields["slice"] == "3"
    assert fields["target"] == "grpc://js-head-0-0.js:29000"
    assert fields["escaped"] == "$(HEAD)"
    assert fields["undefined"] == "$(NOPE)-$(LATER)"  # unknown and later-defined references stay as written
    assert fields["node"] == done.spec.node_name
    assert fields["ip"] == done.status.pod_ip == "127.0.0.1"
    assert fields["uid"] == done.metadata.uid
    assert fields["host"] == name
    assert fields["kc"] == "set"


def test_python_on_path_is_the_projects_interpreter(k8s: K8s) -> None:
    name = unique("python")
    k8s.core.create_namespaced_pod(
        NS, pod_manifest(name, container("main", "python -c 'import sys; print(sys.prefix)'"))
    )
    _finished(k8s, name)
    assert _log(k8s, name, "main").strip() == sys.prefix


def test_on_failure_restarts_the_container_in_place_until_it_succeeds(k8s: K8s, tmp_path: Path) -> None:
    name = unique("onfailure")
    count = tmp_path / "count"
    script = f"n=`cat {count} 2>/dev/null || echo 0`; n=$((n+1)); echo $n > {count}; echo run $n; [ $n -ge 3 ]"
    k8s.core.create_namespaced_pod(NS, pod_manifest(name, container("main", script), restart_policy="OnFailure"))
    done = _finished(k8s, name)
    status = done.status.container_statuses[0]
    assert done.status.phase == "Succeeded"
    assert status.restart_count == 2
    assert status.state.terminated.exit_code == 0
    assert _log(k8s, name, "main").strip() == "run 3"  # the current run's log
    assert _log(k8s, name, "main", previous=True).strip() == "run 2"


def test_signal_kills_the_process_and_status_says_so(k8s: K8s, cluster: UpstreamCluster) -> None:
    name = unique("signal")
    k8s.core.create_namespaced_pod(NS, pod_manifest(name, container("main", "sleep 30")))
    pids = pod_pids(_running(k8s, name))
    assert cluster.faults.signal_pod(NS, name, signal.SIGKILL) == 1
    done = _finished(k8s, name)
    terminated = done.status.container_statuses[0].state.terminated
    assert (done.status.phase, done.status.container_statuses[0].restart_count) == ("Failed", 0)
    assert (terminated.exit_code, terminated.signal, terminated.reason) == (137, 9, "Error")
    wait_processes_gone(pids)


def test_container_without_command_idles_until_deleted(k8s: K8s) -> None:
    name = unique("idle")
    k8s.core.create_namespaced_pod(NS, pod_manifest(name, container("rm"), terminationGracePeriodSeconds=5))
    pids = pod_pids(_running(k8s, name))
    # A negative check ("it did not exit on its own") needs a window: load can only shorten what it sees, never
    # fail it; the deletion below is waited for on its condition.
    time.sleep(0.3)
    assert k8s.core.read_namespaced_pod(name, NS).status.phase == "Running"
    k8s.core.delete_namespaced_pod(name, NS)
    wait_for(lambda: _gone(k8s, name), timeout=30)
    wait_processes_gone(pids)


@pytest.mark.parametrize(
    ("spec_grace", "delete_grace"),
    [(30, 2), (2, None)],
    ids=["gracePeriodSeconds of the delete call", "terminationGracePeriodSeconds of the pod"],
)
def test_graceful_deletion_kills_a_process_that_ignores_sigterm_after_the_grace_period(
    k8s: K8s, spec_grace: int, delete_grace: int | None
) -> None:
    name = unique("stubborn")
    manifest = pod_manifest(name, container("main", armed("trap '' TERM")), terminationGracePeriodSeconds=spec_grace)
    k8s.core.create_namespaced_pod(NS, manifest)
    pod = _running(k8s, name)
    wait_armed(k8s.core, name)
    started = time.monotonic()
    marked = k8s.core.delete_namespaced_pod(name, NS, grace_period_seconds=delete_grace)
    assert marked.metadata.deletion_grace_period_seconds == 2
    wait_for(lambda: _gone(k8s, name), timeout=30)
    # Killed at the 2 s grace period (never before: SIGTERM is ignored), not at the 30 s of the pod spec when the
    # delete call overrides it; the upper bound leaves room for a loaded box.
    assert 1.9 < time.monotonic() - started < 20
    wait_processes_gone(pod_pids(pod))


_FORKS = (
    "(sh -c \"trap '' TERM; sleep 300\" & echo $! > {dir}/grandchild-$n); "  # double fork: reparented at once
    "sh -c \"trap '' TERM; sleep 300\" & echo $! > {dir}/child-$n; "
)


def _forked(directory: Path, *names: str) -> list[int]:
    files = [directory / name for name in names]
    wait_for(lambda: all(f.exists() and f.read_text().strip() for f in files), 60)
    return [int(f.read_text()) for f in files]


def test_processes_a_container_forked_die_with_each_run(k8s: K8s, tmp_path: Path) -> None:
    """No orphan: what a run forked (a child, a double-forked grandchild, both ignoring SIGTERM) ends with it."""
    name = unique("forks")
    # Run 1 forks and fails (OnFailure restarts it in place); run 2 forks and succeeds.
    count = f"n=`cat {tmp_path}/count 2>/dev/null || echo 0`; n=$((n+1)); echo $n > {tmp_path}/count; "
    script = count + _FORKS.format(dir=tmp_path) + "[ $n -ge 2 ]"
    k8s.core.create_namespaced_pod(NS, pod_manifest(name, container("main", script), restart_policy="OnFailure"))
    done = _finished(k8s, name)
    assert (done.status.phase, done.status.container_statuses[0].restart_count) == ("Succeeded", 1)
    wait_processes_gone(_forked(tmp_path, "child-1", "grandchild-1", "child-2", "grandchild-2"))


def test_graceful_deletion_ends_what_the_container_forked_when_its_main_process_exits(k8s: K8s, tmp_path: Path) -> None:
    name = unique("forkdel")
    # The trap before the forks: the test signals once it has read what they wrote.
    script = "n=1; trap 'exit 0' TERM; " + _FORKS.format(dir=tmp_path) + "while :; do sleep 0.05; done"
    manifest = pod_manifest(name, container("main", script), terminationGracePeriodSeconds=60)
    k8s.core.create_namespaced_pod(NS, manifest)
    pod = _running(k8s, name)
    forked = _forked(tmp_path, "child-1", "grandchild-1")
    assert all(process_alive(pid) for pid in forked)
    k8s.core.delete_namespaced_pod(name, NS)
    # The main process exits on SIGTERM; its forked processes, which ignore SIGTERM, go with it, long before the
    # SIGKILL the 60 s grace period would bring.
    wait_for(lambda: _gone(k8s, name), timeout=30)
    wait_processes_gone([*forked, *pod_pids(pod)], timeout=20)


def test_forced_deletion_removes_the_pod_at_once_and_kills_its_processes(k8s: K8s) -> None:
    """``kubectl delete --force --grace-period=0``: the object is gone at once, the processes are SIGKILLed."""
    name = unique("forced")
    manifest = pod_manifest(name, container("main", armed("trap '' TERM")), terminationGracePeriodSeconds=30)
    k8s.core.create_namespaced_pod(NS, manifest)
    pids = pod_pids(_running(k8s, name))
    wait_armed(k8s.core, name)  # else a SIGTERM would end it as soon as the SIGKILL this test is about
    assert all(process_alive(pid) for pid in pids)
    started = time.monotonic()
    k8s.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
    assert _gone(k8s, name)
    wait_processes_gone(pids, timeout=20)
    assert time.monotonic() - started < 20  # SIGKILL at once: SIGTERM is ignored and the grace period is 30 s


_ABRUPT_AGENT = """
import sys
from pathlib import Path
from elastic_training.local.descriptions.cluster_description import parse_description
from elastic_training.local.nodeagent import NodeAgent

kubeconfig, cert, key, ca, workdir = sys.argv[1:]
description = parse_description({"cluster": "abrupt", "nodePools": [
    {"name": "np", "machineType": "n2-standard-8", "nodeCount": 1, "cpu": "8", "memory": "32Gi",
     "taints": [{"key": "test.local/abrupt", "value": "true", "effect": "NoSchedule"}]}]})
agent = NodeAgent(kubeconfig=Path(kubeconfig), description=description, workdir=Path(workdir), pod_env={},
                  serving_cert=Path(cert), serving_key=Path(key), client_ca=Path(ca))
agent.start()
print(agent.node_names[0], flush=True)
sys.stdin.read()  # until the test kills this process: no shutdown code runs
"""


def test_container_processes_die_with_an_abruptly_killed_node_agent(
    k8s: K8s, cluster: UpstreamCluster, tmp_path: Path
) -> None:
    """A node agent SIGKILLed (no stop code runs) leaves no container process behind, forked ones included."""
    pki = cluster.control_plane.pki
    assert pki is not None
    argv = [str(cluster.control_plane.kubeconfigs["node-agent"]), *map(str, pki.node_agent), str(pki.ca)]
    agent = subprocess.Popen(
        [sys.executable, "-c", _ABRUPT_AGENT, *argv, str(tmp_path / "agent")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert agent.stdout is not None
    node, name = agent.stdout.readline().strip(), unique("orphan")
    try:
        assert node, "the node agent did not start"
        script = f"sleep 300 & echo $! > {tmp_path}/child; wait"
        k8s.core.create_namespaced_pod(NS, pod_manifest(name, container("main", script), nodeName=node))
        pids = [*pod_pids(_running(k8s, name)), *_forked(tmp_path, "child")]  # the shell and its background job
        assert len(pids) == 2 and all(process_alive(pid) for pid in pids)
    finally:
        agent.kill()  # SIGKILL
        agent.wait()
        if node:  # the Node and its pod stay behind a dead kubelet: remove them for the next tests
            with contextlib.suppress(client.ApiException):
                k8s.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
            k8s.core.delete_node(node)
    wait_processes_gone(pids, timeout=20)
