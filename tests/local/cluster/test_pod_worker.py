"""Graceful pod deletion through the official client: the pod stays, and takes writes, until every
container has stopped; the kubelet then deletes it with grace 0; finalizers keep it after that."""

from __future__ import annotations

import json
from pathlib import Path

from kubernetes import client

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

HOLD = "test.local/hold"


def _read(k8s: K8s, name: str) -> client.V1Pod | None:
    try:
        pod: client.V1Pod = k8s.core.read_namespaced_pod(name, NS)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise
    return pod


def _all_running(k8s: K8s, name: str, count: int) -> client.V1Pod:
    def probe() -> client.V1Pod | None:
        pod = _read(k8s, name)
        statuses = (pod.status.container_statuses or []) if pod else []
        running = [s for s in statuses if s.state.running]
        return pod if len(running) == count and len(pod_pids(pod)) == count else None

    pod = wait_for(probe)
    wait_armed(k8s.core, name, *(s.name for s in pod.status.container_statuses))  # signalled only once trapped
    return pod


def _state(pod: client.V1Pod, container_name: str) -> client.V1ContainerState:
    return next(s.state for s in pod.status.container_statuses if s.name == container_name)


def _drop_finalizers(k8s: K8s, name: str) -> None:
    k8s.core.patch_namespaced_pod(name, NS, {"metadata": {"finalizers": None}})


def test_a_slow_sigterm_handler_finishes_after_the_other_container_stopped(k8s: K8s, tmp_path: Path) -> None:
    """The reproduction: two containers, 20 s grace; the first stops at once on SIGTERM, the
    second needs 2 s. Its status write used to remove the pod, and the kubelet then SIGKILLed the
    second container mid-handler."""
    marker = tmp_path / "slow-finished"
    name = unique("two-containers")
    k8s.core.create_namespaced_pod(
        NS,
        pod_manifest(
            name,
            container("fast", armed("trap 'exit 0' TERM")),
            container("slow", armed(f"trap 'sleep 2; echo done > {marker}; exit 0' TERM")),
            terminationGracePeriodSeconds=20,
        ),
    )
    pids = pod_pids(_all_running(k8s, name, 2))
    deleted = k8s.core.delete_namespaced_pod(name, NS)
    assert deleted.metadata.deletion_grace_period_seconds == 20
    wait_for(lambda: _read(k8s, name) is None, 60)
    assert marker.read_text().strip() == "done"
    wait_processes_gone(pids)


def test_a_terminating_pod_takes_label_and_status_writes_until_its_containers_stop(k8s: K8s, tmp_path: Path) -> None:
    gate = tmp_path / "may-stop"  # the handler waits for it, so the terminating state is held, not raced
    name = unique("terminating")
    k8s.core.create_namespaced_pod(
        NS,
        pod_manifest(
            name,
            container("fast", armed("trap 'exit 0' TERM")),
            container("gated", armed(f"trap 'until [ -e {gate} ]; do sleep 0.05; done; exit 0' TERM")),
            terminationGracePeriodSeconds=60,
        ),
    )
    pids = pod_pids(_all_running(k8s, name, 2))
    k8s.core.delete_namespaced_pod(name, NS)

    def fast_stopped() -> client.V1Pod | None:
        pod = _read(k8s, name)
        return pod if pod is not None and _state(pod, "fast").terminated is not None else None

    pod = wait_for(fast_stopped)
    assert pod.metadata.deletion_timestamp is not None and _state(pod, "gated").running is not None

    labelled = k8s.core.patch_namespaced_pod(name, NS, {"metadata": {"labels": {"seen": "yes"}}})
    assert labelled.metadata.labels["seen"] == "yes"  # beside the zone and region PodTopologyLabels copies
    condition = {"type": "test.local/Checked", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    k8s.core.patch_namespaced_pod_status(name, NS, {"status": {"conditions": [condition]}})
    pod = _read(k8s, name)
    assert pod is not None and pod.metadata.labels["seen"] == "yes"
    assert any(process_alive(pid) for pid in pids)  # the gated handler still runs

    gate.touch()
    wait_for(lambda: _read(k8s, name) is None, 60)
    wait_processes_gone(pids)


def test_a_finalizer_keeps_the_stopped_pod_with_its_exit_codes(k8s: K8s, tmp_path: Path) -> None:
    marker = tmp_path / "handled"
    name = unique("finalized")
    manifest = pod_manifest(
        name,
        container("main", armed(f"trap 'sleep 1; echo done > {marker}; exit 0' TERM")),
        terminationGracePeriodSeconds=30,
    )
    manifest["metadata"]["finalizers"] = [HOLD]
    k8s.core.create_namespaced_pod(NS, manifest)
    pids = pod_pids(_all_running(k8s, name, 1))
    k8s.core.delete_namespaced_pod(name, NS)

    def stopped() -> client.V1Pod | None:
        pod = _read(k8s, name)
        return pod if pod is not None and pod.metadata.deletion_grace_period_seconds == 0 else None

    pod = wait_for(stopped, 60)  # the kubelet's grace-0 delete once the container stopped
    assert pod.status.phase == "Succeeded"
    terminated = _state(pod, "main").terminated
    assert terminated is not None and terminated.exit_code == 0
    assert marker.read_text().strip() == "done"
    wait_processes_gone(pids)

    _drop_finalizers(k8s, name)
    assert _read(k8s, name) is None


def test_grace_zero_with_a_finalizer_kills_at_once_and_keeps_the_pod(k8s: K8s) -> None:
    name = unique("forced-held")
    manifest = pod_manifest(name, container("main", armed("trap '' TERM")), terminationGracePeriodSeconds=60)
    manifest["metadata"]["finalizers"] = [HOLD]
    k8s.core.create_namespaced_pod(NS, manifest)
    pids = pod_pids(_all_running(k8s, name, 1))
    k8s.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
    wait_processes_gone(pids)  # SIGTERM is ignored: only an immediate SIGKILL ends it this soon
    pod = _read(k8s, name)
    assert pod is not None and pod.metadata.deletion_grace_period_seconds == 0
    assert pod.metadata.finalizers == [HOLD]
    _drop_finalizers(k8s, name)
    assert _read(k8s, name) is None


def test_a_later_delete_may_only_shorten_the_grace_period(k8s: K8s, tmp_path: Path) -> None:
    gate = tmp_path / "may-stop"
    name = unique("shorten")
    k8s.core.create_namespaced_pod(
        NS,
        pod_manifest(
            name,
            container("main", armed(f"trap 'until [ -e {gate} ]; do sleep 0.05; done; exit 0' TERM")),
            terminationGracePeriodSeconds=300,
        ),
    )
    pids = pod_pids(_all_running(k8s, name, 1))
    first = k8s.core.delete_namespaced_pod(name, NS, grace_period_seconds=120)
    assert first.metadata.deletion_grace_period_seconds == 120
    longer = k8s.core.delete_namespaced_pod(name, NS, grace_period_seconds=200)
    assert longer.metadata.deletion_grace_period_seconds == 120
    assert longer.metadata.deletion_timestamp == first.metadata.deletion_timestamp
    shorter = k8s.core.delete_namespaced_pod(name, NS, grace_period_seconds=100)
    assert shorter.metadata.deletion_grace_period_seconds == 100
    # rest.BeforeDelete moves the deadline with the grace period: timestamp = start + grace.
    assert (first.metadata.deletion_timestamp - shorter.metadata.deletion_timestamp).total_seconds() == 20
    gate.touch()
    wait_for(lambda: _read(k8s, name) is None, 60)
    wait_processes_gone(pids)


def test_a_shortened_grace_period_kills_at_the_new_deadline(k8s: K8s) -> None:
    """A container that ignores SIGTERM (a hung trainer) is killed at the shortened deadline, not its first one: what
    a full restart's 1 s grace relies on when the garbage collector already deleted the pod with its own."""
    name = unique("shortened")
    k8s.core.create_namespaced_pod(
        NS, pod_manifest(name, container("main", armed("trap '' TERM")), terminationGracePeriodSeconds=600)
    )
    pids = pod_pids(_all_running(k8s, name, 1))
    k8s.core.delete_namespaced_pod(name, NS, grace_period_seconds=600)
    shorter = k8s.core.delete_namespaced_pod(name, NS, grace_period_seconds=1)
    assert shorter.metadata.deletion_grace_period_seconds == 1
    wait_for(lambda: _read(k8s, name) is None, 120)  # under the first deadline by far, however loaded
    wait_processes_gone(pids)


def test_a_negative_grace_period_means_one_second(k8s: K8s) -> None:
    name = unique("negative")
    k8s.core.create_namespaced_pod(
        NS, pod_manifest(name, container("main", armed("trap '' TERM")), terminationGracePeriodSeconds=60)
    )
    pids = pod_pids(_all_running(k8s, name, 1))
    response = k8s.core.delete_namespaced_pod(name, NS, grace_period_seconds=-5, _preload_content=False)
    assert json.loads(response.data)["metadata"]["deletionGracePeriodSeconds"] == 1
    wait_for(lambda: _read(k8s, name) is None, 30)
    wait_processes_gone(pids)
