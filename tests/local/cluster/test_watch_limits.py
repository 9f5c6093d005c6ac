"""What bounds a watch: its server-side timeout, bookmarks, a too-new resourceVersion, a slow or vanished client.

The server's clocks are shortened for the test (a 2 s minimum request timeout, bookmarks every
0.5 s, a 2 s wait for a too-new resourceVersion, 20 undelivered events per watch).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch

from elastic_training.local.cluster import LocalCluster
from elastic_training.local.cluster.resources import JOBS, NAMESPACES, PODS
from elastic_training.local.cluster.store import Store, WatchEnd
from elastic_training.local.cluster.watching import WatchOptions
from tests.support.cluster_objects import pod
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

QUEUE_LIMIT = 20
OPTIONS = WatchOptions(min_request_timeout=2.0, bookmark_interval=0.5, freshness_wait=2.0)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        workdir=tmp_path_factory.mktemp("watch-limits"),
        run_control_plane=False,
        watch_queue_limit=QUEUE_LIMIT,
        watch_options=OPTIONS,
    ) as running:
        yield running


def _open_watches(cluster: LocalCluster) -> int:
    assert cluster.store is not None
    store = cluster.store
    return int(cluster.call(store.watch_count))


def _raw_watch(cluster: LocalCluster, query: str, receive_buffer: int | None = None) -> socket.socket:
    """A watch request on a TLS socket of its own that the test reads (or does not) as it likes."""
    plain = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer is not None:
        plain.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    plain.connect((cluster.host, cluster.port))
    sock = cluster.ssl_context().wrap_socket(plain, server_hostname=cluster.host)
    request = (
        f"GET /api/v1/namespaces/default/pods?watch=true&{query} HTTP/1.1\r\n"
        f"Host: {cluster.host}:{cluster.port}\r\nAuthorization: Bearer {cluster.token}\r\n\r\n"
    )
    sock.sendall(request.encode())
    return sock


def _read_events(sock: socket.socket) -> list[dict[str, Any]]:
    """Read a chunked watch response to its end; the events in it."""
    sock.settimeout(60)
    data = b""
    while not data.endswith(b"\r\n0\r\n\r\n"):  # the last chunk of a chunked response
        block = sock.recv(1 << 20)
        if not block:
            break
        data += block
    body, rest = b"", data.split(b"\r\n\r\n", 1)[1]
    while rest:
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line, 16)
        body, rest = body + rest[:size], rest[size + 2 :]
    return [json.loads(line) for line in body.splitlines() if line]


def test_timeout_seconds_zero_is_the_servers_default_not_now(k8s: K8s) -> None:
    version = k8s.core.list_namespaced_pod("default").metadata.resource_version
    threading.Timer(1.0, lambda: k8s.core.create_namespaced_pod("default", pod("wl-late"))).start()
    seen = []
    for event in watch.Watch().stream(
        k8s.core.list_namespaced_pod, "default", resource_version=version, timeout_seconds=0, _request_timeout=60
    ):
        seen.append((event["type"], event["object"].metadata.name))
    # The event a second in arrived (0 is not "now"), and the server ended the stream by itself
    # (after 2-4 s here, 30-60 min by default; the 60 s client timeout would fail the test otherwise).
    assert seen == [("ADDED", "wl-late")]


def test_bookmarks_only_when_allowed_and_with_the_current_version(k8s: K8s) -> None:
    k8s.core.create_namespaced_pod("default", pod("wl-bookmark"))
    version = k8s.core.list_namespaced_pod("default").metadata.resource_version
    allowed = [
        event
        for event in watch.Watch().stream(
            k8s.core.list_namespaced_pod,
            "default",
            resource_version=version,
            timeout_seconds=2,
            allow_watch_bookmarks=True,
        )
    ]
    assert allowed and {event["type"] for event in allowed} == {"BOOKMARK"}
    marks = [event["raw_object"] for event in allowed]
    assert all(mark["kind"] == "Pod" and mark["apiVersion"] == "v1" for mark in marks)
    assert all(int(mark["metadata"]["resourceVersion"]) >= int(version) for mark in marks)
    plain = list(
        watch.Watch().stream(k8s.core.list_namespaced_pod, "default", resource_version=version, timeout_seconds=2)
    )
    assert plain == []


def test_a_resource_version_newer_than_the_store_is_a_504_timeout(k8s: K8s) -> None:
    version = int(k8s.core.list_namespaced_pod("default").metadata.resource_version)
    stream = watch.Watch().stream(
        k8s.core.list_namespaced_pod, "default", resource_version=str(version + 1000), timeout_seconds=30
    )
    with pytest.raises(client.ApiException) as caught:
        next(stream)
    assert caught.value.status == 504
    assert f"Too large resource version: {version + 1000}, current: " in str(caught.value.reason)
    response = k8s.core.list_namespaced_pod(
        "default", watch=True, resource_version=str(version + 1000), timeout_seconds=30, _preload_content=False
    )
    status: dict[str, Any] = json.loads(response.data.splitlines()[0])["object"]
    assert (status["reason"], status["code"]) == ("Timeout", 504)
    assert status["details"] == {
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": 1,
    }


def test_a_resource_version_the_store_reaches_soon_is_waited_for(k8s: K8s) -> None:
    version = int(k8s.core.list_namespaced_pod("default").metadata.resource_version)
    seen: list[str] = []

    def follow() -> None:
        for event in watch.Watch().stream(
            k8s.core.list_namespaced_pod, "default", resource_version=str(version + 1), timeout_seconds=5
        ):
            seen.append(event["object"].metadata.name)

    watcher = threading.Thread(target=follow)
    watcher.start()
    k8s.core.create_namespaced_pod("default", pod("wl-soon-a"))  # takes version + 1: not after it
    k8s.core.create_namespaced_pod("default", pod("wl-soon-b"))
    watcher.join(timeout=60)
    assert seen == ["wl-soon-b"]


def test_a_client_that_goes_away_is_unregistered_at_once(cluster: LocalCluster) -> None:
    before = _open_watches(cluster)
    sock = _raw_watch(cluster, "timeoutSeconds=600")
    wait_for(lambda: _open_watches(cluster) == before + 1)
    sock.close()  # no event follows: only the disconnect can end the watch
    wait_for(lambda: _open_watches(cluster) == before)


def test_a_watcher_that_falls_behind_is_closed_and_the_client_resumes(k8s: K8s, cluster: LocalCluster) -> None:
    k8s.core.create_namespaced_pod("default", pod("wl-slow"))
    version = k8s.core.list_namespaced_pod("default").metadata.resource_version
    before = _open_watches(cluster)
    sock = _raw_watch(cluster, f"resourceVersion={version}&timeoutSeconds=600", receive_buffer=4096)
    wait_for(lambda: _open_watches(cluster) == before + 1)
    filler = "x" * 100_000
    patches = 0
    while _open_watches(cluster) > before and patches < 2000:  # the test does not read: the server's queue fills
        annotations = {"step": str(patches), "fill": filler}
        k8s.core.patch_namespaced_pod("wl-slow", "default", {"metadata": {"annotations": annotations}})
        patches += 1
    assert _open_watches(cluster) == before, "the slow watcher was never closed"
    events = _read_events(sock)
    sock.close()
    steps = [event["object"]["metadata"]["annotations"]["step"] for event in events]
    # What was sent before it fell behind, in order, then the stream ended (the queued rest was dropped).
    assert 0 < len(steps) < patches and steps == [str(step) for step in range(len(steps))]
    last = events[-1]["object"]["metadata"]["resourceVersion"]
    # As informers do: resume from the last version seen (here still in the history) and miss nothing.
    resumed = [
        event["object"].metadata.annotations["step"]
        for event in watch.Watch().stream(
            k8s.core.list_namespaced_pod, "default", resource_version=last, timeout_seconds=2
        )
    ]
    assert resumed == [str(step) for step in range(len(steps), patches)]


def _pod_body(**meta: str) -> dict[str, Any]:
    return {"metadata": meta, "spec": {"containers": [{"name": "main", "image": "local"}]}}


def test_events_reach_only_the_watches_of_their_resource_and_namespace() -> None:
    store = Store()
    for name in ("a", "b"):  # the store admits content only into existing namespaces
        store.create(NAMESPACES, {"metadata": {"name": name}})
    in_a = store.watch(PODS, "a", None)
    everywhere = store.watch(PODS, None, None)
    jobs_in_a = store.watch(JOBS, "a", None)
    store.create(PODS, _pod_body(name="p"), namespace="b")
    store.create(PODS, _pod_body(name="q"), namespace="a")
    assert [e.object["metadata"]["name"] for e in in_a.take()] == ["q"]
    assert [e.object["metadata"]["name"] for e in everywhere.take()] == ["p", "q"]
    assert jobs_in_a.take() == []
    for _ in range(store.watch_queue_limit + 1):  # nobody drains ``everywhere``: it is ended, not grown
        store.create(PODS, _pod_body(generateName="fill-"), namespace="b")
    assert everywhere.ended is WatchEnd.TOO_SLOW and everywhere.take() == []
    assert store.watch_count() == 2
    for opened in (in_a, jobs_in_a):
        opened.close()
    assert store.watch_count() == 0
