"""The local kubelet, driven through the real client: processes, env, sidecars, restarts, deletion."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from kubernetes import client

from elastic_training.local.cluster import LocalCluster
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

TERMINAL = ("Succeeded", "Failed")


def _finished(k8s: K8s, name: str, timeout: float = 30.0) -> client.V1Pod:
    def probe() -> client.V1Pod | None:
        pod = k8s.core.read_namespaced_pod(name, NS)
        return pod if pod.status.phase in TERMINAL else None

    return wait_for(probe, timeout)


def _running(k8s: K8s, name: str) -> client.V1Pod:
    def probe() -> client.V1Pod | None:
        pod = k8s.core.read_namespaced_pod(name, NS)
        statuses = pod.status.container_statuses or []
        return pod if statuses and all(s.state.running for s in statuses) else None

    return wait_for(probe)


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
    import sys

    name = unique("python")
    k8s.core.create_namespaced_pod(
        NS, pod_manifest(name, container("main", "python -c 'import sys; print(sys.prefix)'"))
    )
    _finished(k8s, name)
    assert _log(k8s, name, "main").strip() == sys.prefix


def test_on_failure_restarts_the_container_in_place(k8s: K8s) -> None:
    name = unique("onfailure")
    script = "n=`cat count 2>/dev/null || echo 0`; n=$((n+1)); echo $n > count; echo run $n; [ $n -ge 3 ]"
    k8s.core.create_namespaced_pod(NS, pod_manifest(name, container("main", script), restart_policy="OnFailure"))
    done = _finished(k8s, name)
    status = done.status.container_statuses[0]
    assert done.status.phase == "Succeeded"
    assert status.restart_count == 2
    assert status.state.terminated.exit_code == 0
    assert _log(k8s, name, "main").strip() == "run 3"  # the current run's log
    assert _log(k8s, name, "main", previous=True).strip() == "run 2"


def test_never_leaves_the_failed_container_terminated(k8s: K8s) -> None:
    name = unique("never")
    k8s.core.create_namespaced_pod(NS, pod_manifest(name, container("main", "echo oops >&2; exit 3")))
    done = _finished(k8s, name)
    status = done.status.container_statuses[0]
    assert done.status.phase == "Failed"
    assert status.restart_count == 0
    assert (status.state.terminated.exit_code, status.state.terminated.reason) == (3, "Error")
    assert _log(k8s, name, "main").strip() == "oops"


def test_signal_kills_the_process_and_status_says_so(k8s: K8s, cluster: LocalCluster) -> None:
    name = unique("signal")
    k8s.core.create_namespaced_pod(NS, pod_manifest(name, container("main", "sleep 30")))
    pids = pod_pids(_running(k8s, name))
    cluster.faults.signal_pod(NS, name, signal.SIGKILL)
    done = _finished(k8s, name)
    terminated = done.status.container_statuses[0].state.terminated
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


def test_graceful_deletion_sends_sigterm_and_waits_for_the_exit(k8s: K8s) -> None:
    name = unique("graceful")
    script = "trap 'echo got-term; exit 0' TERM; echo up; while :; do sleep 0.05; done"
    k8s.core.create_namespaced_pod(NS, pod_manifest(name, container("main", script), terminationGracePeriodSeconds=60))
    pod = _running(k8s, name)
    wait_for(lambda: "up" in _log(k8s, name, "main"))
    uid = pod.metadata.uid
    marked = k8s.core.delete_namespaced_pod(name, NS)
    assert marked.metadata.deletion_timestamp is not None  # graceful: the pod stays until its process exits
    wait_for(lambda: _gone(k8s, name), timeout=30)  # it exits on SIGTERM, long before the SIGKILL at 60 s
    wait_processes_gone(pod_pids(pod))
    assert uid


@pytest.mark.parametrize(
    ("spec_grace", "delete_grace"),
    [(30, 2), (2, None)],
    ids=["gracePeriodSeconds of the delete call", "terminationGracePeriodSeconds of the pod"],
)
def test_graceful_deletion_kills_a_process_that_ignores_sigterm_after_the_grace_period(
    k8s: K8s, spec_grace: int, delete_grace: int | None
) -> None:
    name = unique("stubborn")
    script = "trap '' TERM; echo up; while :; do sleep 0.05; done"
    manifest = pod_manifest(name, container("main", script), terminationGracePeriodSeconds=spec_grace)
    k8s.core.create_namespaced_pod(NS, manifest)
    pod = _running(k8s, name)
    wait_for(lambda: "up" in _log(k8s, name, "main"))
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
    wait_for(lambda: all(f.exists() and f.read_text().strip() for f in files))
    return [int(f.read_text()) for f in files]


def test_processes_a_container_forked_die_with_each_run(k8s: K8s, tmp_path: Path) -> None:
    """No orphan: what a run forked (a child, a double-forked grandchild, both ignoring SIGTERM) ends with it."""
    name = unique("forks")
    # Run 1 forks and fails (OnFailure restarts it in place); run 2 forks and succeeds.
    count = "n=`cat count 2>/dev/null || echo 0`; n=$((n+1)); echo $n > count; "
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


def test_forced_deletion_kills_at_once(k8s: K8s, cluster: LocalCluster) -> None:
    name = unique("forced")
    k8s.core.create_namespaced_pod(
        NS, pod_manifest(name, container("main", armed("trap '' TERM")), terminationGracePeriodSeconds=30)
    )
    pids = pod_pids(_running(k8s, name))
    wait_armed(k8s.core, name)  # else a SIGTERM would end it as soon as the SIGKILL this test is about
    assert all(process_alive(pid) for pid in pids)
    started = time.monotonic()
    cluster.faults.delete_pod(NS, name)
    assert _gone(k8s, name)
    wait_processes_gone(pids, timeout=20)
    assert time.monotonic() - started < 20  # SIGKILL at once: SIGTERM is ignored and the grace period is 30 s


def test_api_delete_with_grace_zero_is_forced(k8s: K8s) -> None:
    name = unique("grace0")
    k8s.core.create_namespaced_pod(NS, pod_manifest(name, container("main", armed("trap '' TERM", "sleep 30"))))
    pids = pod_pids(_running(k8s, name))
    wait_armed(k8s.core, name)
    k8s.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
    assert _gone(k8s, name)
    wait_processes_gone(pids, timeout=20)  # SIGTERM is ignored: only a SIGKILL ends it before the 30 s grace period


_ABRUPT_CLUSTER = """
import sys, time
from pathlib import Path
from elastic_training.local.cluster import LocalCluster
from elastic_training.local.cluster.resources import PODS

cluster = LocalCluster(workdir=Path(sys.argv[1])).start()
pod = {"metadata": {"name": "orphan-check"}, "spec": {"restartPolicy": "Never", "containers": [
    {"name": "main", "image": "local", "command": ["sh", "-c", "sleep 60 & echo $! > child; wait"],
     "workingDir": sys.argv[1]}]}}
cluster.call(lambda: cluster.store.create(PODS, pod))
while True:
    status = cluster.call(lambda: cluster.store.get(PODS, "default", "orphan-check")).get("status", {})
    running = [c for c in status.get("containerStatuses", []) if "running" in c["state"]]
    if running and (Path(sys.argv[1]) / "child").stat().st_size if (Path(sys.argv[1]) / "child").exists() else 0:
        child = (Path(sys.argv[1]) / "child").read_text().strip()
        print(running[0]["containerID"].removeprefix("local://"), child, flush=True)
        break
    time.sleep(0.02)
time.sleep(60)
"""


def test_container_processes_die_with_an_abruptly_killed_cluster(tmp_path: Path) -> None:
    import subprocess
    import sys

    cluster = subprocess.Popen(
        [sys.executable, "-c", _ABRUPT_CLUSTER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert cluster.stdout is not None
        pids = [int(pid) for pid in cluster.stdout.readline().split()]  # the shell and its background job
        assert len(pids) == 2 and all(process_alive(pid) for pid in pids)
    finally:
        cluster.kill()  # SIGKILL: no shutdown code runs
        cluster.wait()
    wait_processes_gone(pids, timeout=20)
