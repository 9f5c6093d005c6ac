"""Fault injection: failing and slow requests, expired watches, killed and force-deleted pods."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from kubernetes import client, watch

from elastic_training.local.cluster import LocalCluster
from tests.support.cluster_objects import pod
from tests.support.control_plane import process_alive
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for


@pytest.fixture(autouse=True)
def _no_leftover_faults(cluster: LocalCluster) -> None:
    cluster.faults.clear()


def _control(cluster: LocalCluster, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{cluster.url}/_local/faults{path}",
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"Authorization": f"Bearer {cluster.token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10, context=cluster.ssl_context()) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def test_failures_for_a_count_then_recovery(cluster: LocalCluster, k8s: K8s) -> None:
    cluster.faults.fail_requests(500, count=2, path=r"/pods$", method="GET")
    k8s.batch.list_namespaced_job("default")  # other paths are untouched
    for _ in range(2):
        with pytest.raises(client.ApiException) as caught:
            k8s.core.list_namespaced_pod("default")
        assert caught.value.status == 500 and json.loads(caught.value.body)["reason"] == "InternalError"
    k8s.core.list_namespaced_pod("default")


def test_failures_for_a_time_then_recovery(cluster: LocalCluster, k8s: K8s) -> None:
    """A burst bounded in time fails every matching request until its end, whoever asks, then none."""
    rule = cluster.faults.fail_requests(503, seconds=1.0, path=r"/pods$", method="GET")
    assert rule.until is not None
    failed_sent_at: list[float] = []  # a failed request was judged after it was sent and before the burst ended
    while True:
        sent = time.time()
        try:
            k8s.core.list_namespaced_pod("default")
            break
        except client.ApiException as caught:
            assert caught.status == 503
            failed_sent_at.append(sent)
    answered_at = time.time()  # the answered one was judged at or after the burst's end, and before this
    assert failed_sent_at and max(failed_sent_at) < rule.until <= answered_at
    k8s.core.list_namespaced_pod("default")  # and stays answered


def test_failures_by_probability_with_path_and_method_filters(cluster: LocalCluster, k8s: K8s) -> None:
    injected_before = _control(cluster, "GET", "")["injected"]  # counts every failure since the cluster started
    cluster.faults.fail_requests(500, probability=0.5, path=r"/namespaces/default/events$", method="GET")
    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name="fault-probe-"),
        involved_object=client.V1ObjectReference(kind="Pod", name="nobody", namespace="default"),
        reason="Probe",
    )
    failed = 0
    for _ in range(200):
        try:
            k8s.core.list_namespaced_event("default")
        except client.ApiException as err:
            assert err.status == 500
            failed += 1
        k8s.core.list_namespaced_pod("default")  # another path: never failed
        k8s.core.create_namespaced_event("default", event)  # the same path, another method: never failed
    assert 50 < failed < 150  # binomial(200, 0.5): outside this band once in ~10^12 runs
    assert _control(cluster, "GET", "")["injected"] - injected_before == failed
    assert _control(cluster, "GET", "")["failures"][0]["probability"] == 0.5  # a probability rule stays


def test_throttling_is_retried_by_the_client_then_fails_until_cleared(cluster: LocalCluster, k8s: K8s) -> None:
    # 429 carries Retry-After: 1, which urllib3 under the official client honours by retrying.
    cluster.faults.fail_requests(429, count=1)
    began = time.monotonic()
    k8s.core.list_namespaced_pod("default")
    assert time.monotonic() - began >= 0.9
    cluster.faults.fail_requests(429, probability=1.0)
    # A fresh Configuration, not get_default_copy(): the process-wide default may carry another test's
    # kubeconfig refresh hook, which points every request back at that test's (stopped) cluster.
    configuration = client.Configuration(host=cluster.url, api_key={"authorization": f"Bearer {cluster.token}"})
    configuration.ssl_ca_cert = str(cluster.ca_path)
    configuration.retries = False
    with client.ApiClient(configuration) as no_retries:
        with pytest.raises(client.ApiException) as caught:
            client.CoreV1Api(no_retries).list_namespaced_pod("default")
        assert caught.value.status == 429 and caught.value.headers["Retry-After"] == "1"
        cluster.faults.clear()
        cluster.faults.fail_requests(429, count=1, retry_after=0)  # "retry now": valid HTTP, for a burst's tests
        with pytest.raises(client.ApiException) as caught:
            client.CoreV1Api(no_retries).list_namespaced_pod("default")
        assert caught.value.headers["Retry-After"] == "0"
        client.CoreV1Api(no_retries).list_namespaced_pod("default")


def test_latency(cluster: LocalCluster, k8s: K8s) -> None:
    # A delay large enough that an undelayed call on a loaded 2-core machine stays well below it.
    cluster.faults.add_latency(2.0, path="/pods")
    began = time.monotonic()
    k8s.core.list_namespaced_pod("default")
    assert time.monotonic() - began >= 2.0
    began = time.monotonic()
    k8s.batch.list_namespaced_job("default")
    assert time.monotonic() - began < 2.0


def test_http_control_endpoint(cluster: LocalCluster, k8s: K8s) -> None:
    rule = _control(cluster, "POST", "/fail-requests", {"code": 503, "count": 1, "path": "jobs"})
    assert rule["code"] == 503
    assert _control(cluster, "GET", "")["failures"][0]["id"] == rule["id"]
    with pytest.raises(client.ApiException) as caught:
        k8s.batch.list_namespaced_job("default")
    assert caught.value.status == 503
    _control(cluster, "POST", "/latency", {"seconds": 0.01})
    cleared = _control(cluster, "DELETE", "")
    assert (cleared["failures"], cleared["latencies"]) == ([], [])
    bad_bodies: list[tuple[str, dict[str, Any]]] = [
        ("/fail-requests", {"code": 200}),
        ("/fail-requests", {"code": "many"}),
        ("/fail-requests", {"probability": 2}),
        ("/fail-requests", {"count": 0}),
        ("/fail-requests", {"seconds": 0}),
        ("/fail-requests", {"seconds": "soon"}),
        ("/fail-requests", {"path": "("}),
        ("/fail-requests", {"code": 429, "retryAfter": -1}),
        ("/latency", {}),
        ("/latency", {"seconds": "slow"}),
        ("/signal-pod", {"namespace": "default", "name": "x", "signal": "SIGNOPE"}),
    ]
    for path, bad in bad_bodies:
        with pytest.raises(urllib.error.HTTPError) as error:
            _control(cluster, "POST", path, bad)
        assert error.value.code == 400, bad
    assert _control(cluster, "GET", "")["failures"] == []  # nothing was added


def test_expired_and_compacted_watch_must_relist(cluster: LocalCluster, k8s: K8s) -> None:
    start = k8s.core.list_namespaced_pod("default").metadata.resource_version
    k8s.core.create_namespaced_pod("default", pod("fault-churn"))
    raw = k8s.core.list_namespaced_pod(
        "default", watch=True, resource_version=start, timeout_seconds=60, _preload_content=False
    )
    first = json.loads(raw.readline())  # the watch is open: only now expire it
    assert first["type"] == "ADDED" and first["object"]["metadata"]["name"] == "fault-churn"
    began = time.monotonic()
    _control(cluster, "POST", "/expire-watches", {"compact": True})
    raw.read()  # the rest (the kubelet's status updates of the pod) until the stream ends
    assert time.monotonic() - began < 30  # ended by the fault, not by the 60 s timeout
    k8s.core.create_namespaced_pod("default", pod("fault-after-compaction"))
    with pytest.raises(client.ApiException) as caught:
        list(watch.Watch().stream(k8s.core.list_namespaced_pod, "default", resource_version=start, timeout_seconds=30))
    assert caught.value.status == 410


def _running_pids(cluster: LocalCluster, name: str) -> list[int]:
    assert cluster.control_plane is not None
    control_plane = cluster.control_plane
    pids: list[int] = cluster.call(lambda: control_plane.pod_pids("default", name))
    return pids


def test_delete_pod_force_removes_it_and_its_processes(cluster: LocalCluster, k8s: K8s) -> None:
    k8s.core.create_namespaced_pod("default", pod("fault-delete", restart_policy="Never"))
    pids = wait_for(lambda: _running_pids(cluster, "fault-delete"))
    cluster.faults.delete_pod("default", "fault-delete")
    with pytest.raises(client.ApiException) as caught:
        k8s.core.read_namespaced_pod("fault-delete", "default")
    assert caught.value.status == 404
    wait_for(lambda: not any(process_alive(pid) for pid in pids), timeout=20)


def test_signal_pod_kills_its_container(cluster: LocalCluster, k8s: K8s) -> None:
    k8s.core.create_namespaced_pod("default", pod("fault-signal", restart_policy="Never"))
    wait_for(lambda: _running_pids(cluster, "fault-signal"))
    cluster.faults.signal_pod("default", "fault-signal", signal.SIGKILL)
    failed = wait_for(
        lambda: (p := k8s.core.read_namespaced_pod("fault-signal", "default")).status.phase == "Failed" and p
    )
    assert failed.status.container_statuses[0].state.terminated.exit_code == 137
