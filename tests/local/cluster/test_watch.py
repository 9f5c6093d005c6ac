"""Watches through ``kubernetes.watch.Watch``: initial state, resume, selectors, timeouts, 410 and relist."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch

from elastic_training.local.cluster import LocalCluster
from tests.support.cluster_objects import jobset_body, pod
from tests.support.local_cluster import K8s

JOBSET_PATH = ("jobset.x-k8s.io", "v1alpha2", "default", "jobsets")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(workdir=tmp_path_factory.mktemp("watch"), watch_history=50, run_control_plane=False) as running:
        yield running


def _events(k8s: K8s, limit: int, **kwargs: Any) -> list[tuple[str, str, dict[str, str]]]:
    """(type, name, labels) of up to ``limit`` pod events."""
    seen = []
    stream = watch.Watch()
    for event in stream.stream(k8s.core.list_namespaced_pod, "default", **kwargs):
        seen.append((event["type"], event["object"].metadata.name, event["object"].metadata.labels or {}))
        if len(seen) >= limit:
            stream.stop()
    return seen


def test_watch_without_version_starts_with_synthetic_added_then_follows(k8s: K8s) -> None:
    k8s.core.create_namespaced_pod("default", pod("w-initial"))
    seen = []
    stream = watch.Watch()
    for event in stream.stream(
        k8s.core.list_namespaced_pod, "default", timeout_seconds=30, field_selector="metadata.name=w-initial"
    ):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 1:  # the watch is open and has sent the initial state: now change the pod
            k8s.core.patch_namespaced_pod("w-initial", "default", {"metadata": {"labels": {"step": "1"}}})
            k8s.core.delete_namespaced_pod("w-initial", "default", grace_period_seconds=0)
        if len(seen) == 3:
            stream.stop()
    assert seen == [
        ("ADDED", "w-initial"),
        ("MODIFIED", "w-initial"),
        ("DELETED", "w-initial"),
    ]


def test_watch_resumes_from_a_resource_version(k8s: K8s) -> None:
    start = k8s.core.list_namespaced_pod("default").metadata.resource_version
    k8s.core.create_namespaced_pod("default", pod("w-resume-a"))
    k8s.core.create_namespaced_pod("default", pod("w-resume-b"))
    seen = _events(k8s, 2, resource_version=start, timeout_seconds=30)
    assert [(kind, name) for kind, name, _ in seen] == [("ADDED", "w-resume-a"), ("ADDED", "w-resume-b")]


def test_objects_entering_and_leaving_a_selector(k8s: K8s) -> None:
    k8s.core.create_namespaced_pod("default", pod("w-sel", labels={"role": "idle"}))
    start = k8s.core.list_namespaced_pod("default").metadata.resource_version
    k8s.core.patch_namespaced_pod("w-sel", "default", {"metadata": {"labels": {"role": "worker"}}})
    k8s.core.patch_namespaced_pod("w-sel", "default", {"metadata": {"labels": {"extra": "1"}}})
    k8s.core.patch_namespaced_pod("w-sel", "default", {"metadata": {"labels": {"role": "idle"}}})
    seen = _events(k8s, 3, resource_version=start, timeout_seconds=30, label_selector="role=worker")
    assert [kind for kind, _, _ in seen] == ["ADDED", "MODIFIED", "DELETED"]
    # The DELETED event carries the object as it was when it still matched.
    assert seen[-1][2]["role"] == "worker"


def test_timeout_seconds_ends_the_stream(k8s: K8s) -> None:
    began = time.monotonic()
    seen = _events(
        k8s, 1000, timeout_seconds=1, resource_version=k8s.core.list_namespaced_pod("default").metadata.resource_version
    )
    assert seen == []
    assert 0.9 <= time.monotonic() - began < 20  # ended by the server at 1 s (a loaded machine may answer late)


def test_too_old_version_gets_410_and_a_relist_recovers(k8s: K8s, cluster: LocalCluster) -> None:
    old = k8s.core.list_namespaced_pod("default").metadata.resource_version
    for index in range(60):  # more events than the 50 the cluster keeps
        k8s.core.create_namespaced_pod("default", pod(f"w-churn-{index}"))
    with pytest.raises(client.ApiException) as caught:
        _events(k8s, 1, resource_version=old, timeout_seconds=2)
    assert caught.value.status == 410
    # The raw stream carries the error as an ERROR event with a Status, as the real server does.
    raw = k8s.core.list_namespaced_pod("default", watch=True, resource_version=old, _preload_content=False)
    line = raw.data.decode().strip()
    assert '"type":"ERROR"' in line and '"code":410' in line and '"reason":"Expired"' in line
    fresh = k8s.core.list_namespaced_pod("default").metadata.resource_version
    k8s.core.create_namespaced_pod("default", pod("w-after-relist"))
    assert [name for _, name, _ in _events(k8s, 1, resource_version=fresh, timeout_seconds=30)] == ["w-after-relist"]


def test_expired_watch_ends_and_can_resume(k8s: K8s, cluster: LocalCluster) -> None:
    start = k8s.core.list_namespaced_pod("default").metadata.resource_version
    k8s.core.create_namespaced_pod("default", pod("w-before-expiry"))
    seen, began, last = [], 0.0, ""
    stream = watch.Watch()
    for event in stream.stream(
        k8s.core.list_namespaced_pod, "default", resource_version=start, timeout_seconds=60, _request_timeout=60
    ):
        seen.append(event["object"].metadata.name)
        last = event["object"].metadata.resource_version
        began = time.monotonic()
        cluster.faults.expire_watches()  # the watch is open (it has sent an event): end it
    assert seen == ["w-before-expiry"]
    assert time.monotonic() - began < 30  # ended by the fault, not by the 60 s timeout
    k8s.core.create_namespaced_pod("default", pod("w-after-expiry"))
    assert [name for _, name, _ in _events(k8s, 1, resource_version=last, timeout_seconds=30)] == ["w-after-expiry"]


def test_all_namespace_watch_and_custom_objects(k8s: K8s) -> None:
    start = k8s.core.list_pod_for_all_namespaces().metadata.resource_version
    k8s.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="w-other")))
    k8s.core.create_namespaced_pod("w-other", pod("w-elsewhere"))
    stream = watch.Watch()
    seen = []
    for event in stream.stream(k8s.core.list_pod_for_all_namespaces, resource_version=start, timeout_seconds=30):
        seen.append((event["object"].metadata.namespace, event["object"].metadata.name))
        stream.stop()
    assert seen == [("w-other", "w-elsewhere")]
    # JobSets through CustomObjectsApi: the client's Watch handles the dict objects too.
    start = k8s.custom.list_namespaced_custom_object(*JOBSET_PATH)["metadata"]["resourceVersion"]
    k8s.custom.create_namespaced_custom_object(*JOBSET_PATH, jobset_body("w-jobset"))
    k8s.custom.patch_namespaced_custom_object_status(*JOBSET_PATH, "w-jobset", {"status": {"restarts": 1}})
    jobset_events = []
    stream = watch.Watch()
    for event in stream.stream(
        k8s.custom.list_namespaced_custom_object, *JOBSET_PATH, resource_version=start, timeout_seconds=30
    ):
        jobset_events.append((event["type"], event["object"]["metadata"]["name"], event["object"].get("status")))
        if len(jobset_events) == 2:
            stream.stop()
    assert jobset_events == [("ADDED", "w-jobset", None), ("MODIFIED", "w-jobset", {"restarts": 1})]
