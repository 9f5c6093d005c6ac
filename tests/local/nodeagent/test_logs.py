"""Pod logs: the log files' offsets (pure), and ``read_namespaced_pod_log`` through kube-apiserver's ``pods/log``,
which connects to the node agent's kubelet API, for real pods and for log files written into the agent's store.

The API tests share the process's upstream cluster (:mod:`tests.support.shared_cluster`), not the control plane of
this directory's conftest; test_pods.py there shows tailLines, limitBytes, timestamps, sinceTime, previous and a
waiting container's refusal on a short log, and ``kubectl logs -f``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kubernetes import client

from elastic_training.local.nodeagent.logs import complete_size, rfc3339_nano, since_offset, tail_offset
from elastic_training.local.upstream_cluster import UpstreamCluster
from tests.support import local_cluster
from tests.support.cluster_objects import pod
from tests.support.control_plane import NS, unique
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

# The process's shared upstream cluster and its clients (module fixtures), in place of the conftest's own.
cluster = local_cluster.cluster
k8s = local_cluster.k8s


def _log(k8s: K8s, name: str, **kwargs: object) -> str:
    # kubernetes 36 returns the repr of bytes for preloaded logs; read the raw body instead.
    response = k8s.core.read_namespaced_pod_log(name, NS, _preload_content=False, **kwargs)
    return str(response.data.decode())


def _log_since(k8s: K8s, name: str, since: str, **query: str) -> tuple[int, str]:
    """The official client has no sinceTime parameter: ask the same path with it; (status, body)."""
    try:
        response = k8s.api_client.call_api(
            f"/api/v1/namespaces/{NS}/pods/{name}/log",
            "GET",
            query_params=[("sinceTime", since), *query.items()],
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
    except client.ApiException as err:
        return int(err.status), str(err.body)
    return int(response.status), str(response.data.decode())


def _phase(k8s: K8s, name: str) -> str:
    return str(k8s.core.read_namespaced_pod(name, NS).status.phase)


def test_finished_pod_logs_with_nanosecond_timestamps_and_since_seconds(k8s: K8s) -> None:
    name = unique("logs-done")
    k8s.core.create_namespaced_pod(
        NS, pod(name, command=["sh", "-c", "echo one; echo two; echo three"], restart_policy="Never")
    )
    wait_for(lambda: _phase(k8s, name) == "Succeeded", 60)
    assert _log(k8s, name) == "one\ntwo\nthree\n"
    assert _log(k8s, name, tail_lines=1) == "three\n"
    stamped = _log(k8s, name, timestamps=True).splitlines()
    assert all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z (one|two|three)$", line) for line in stamped)
    assert _log(k8s, name, since_seconds=3600) == "one\ntwo\nthree\n"
    assert _log(k8s, name, limit_bytes=6) == "one\ntw"


def test_container_must_be_named_when_a_pod_has_several(k8s: K8s) -> None:
    name = unique("logs-two")
    body = pod(name, restart_policy="Never")
    body.spec.containers = [
        client.V1Container(name="a", image="local", command=["sh", "-c", "echo from-a"]),
        client.V1Container(name="b", image="local", command=["sh", "-c", "echo from-b"]),
    ]
    k8s.core.create_namespaced_pod(NS, body)
    wait_for(lambda: _phase(k8s, name) == "Succeeded", 60)
    with pytest.raises(client.ApiException) as caught:
        _log(k8s, name)
    assert caught.value.status == 400 and "a container name must be specified" in caught.value.body
    assert _log(k8s, name, container="b") == "from-b\n"
    with pytest.raises(client.ApiException) as caught:
        _log(k8s, name, container="c")
    assert caught.value.status == 400


def test_follow_streams_until_the_container_ends(k8s: K8s, tmp_path: Path) -> None:
    name = unique("logs-follow")
    flag = tmp_path / "may-finish"  # the container prints its second line only once the test has read the first
    script = f"echo line-1; until [ -e {flag} ]; do sleep 0.05; done; echo line-2"
    k8s.core.create_namespaced_pod(NS, pod(name, command=["sh", "-c", script], restart_policy="Never"))
    wait_for(lambda: _phase(k8s, name) == "Running", 60)
    response = k8s.core.read_namespaced_pod_log(
        name, NS, follow=True, timestamps=True, _preload_content=False, _request_timeout=60
    )
    chunks = response.stream(1)
    received = b""
    while not received.endswith(b"\n"):
        received += next(chunks)
    assert received.decode().endswith(" line-1\n")  # streamed while the container still runs
    assert _phase(k8s, name) == "Running"
    flag.touch()
    rest = b"".join(chunks).decode()  # ends when the container does (else the 60 s request timeout fails it)
    assert re.fullmatch(r"\S+Z line-2\n", rest), rest
    wait_for(lambda: _phase(k8s, name) == "Succeeded", 60)


def _idle_pod(k8s: K8s, name: str) -> str:
    """A running pod whose container prints nothing (no command: the idle placeholder); its uid."""
    body = pod(name)
    body.spec.containers[0].command = None

    def running() -> bool:
        statuses = k8s.core.read_namespaced_pod(name, NS).status.container_statuses or []
        return bool(statuses) and statuses[0].state.running is not None

    uid = str(k8s.core.create_namespaced_pod(NS, body).metadata.uid)
    wait_for(running, 60)
    return uid


def test_previous_run_since_seconds_and_since_time_from_log_files(k8s: K8s, cluster: UpstreamCluster) -> None:
    name = unique("logs-files")
    uid = _idle_pod(k8s, name)
    assert cluster.agent is not None
    logs = cluster.agent.log_store
    first = logs.writer(uid, "main", 0)
    first.write_line("first run")
    first.close()
    # A second run's file, in the kubelet's CRI format, with lines printed 2 h, 10 min and 1 s ago.
    now = datetime.now(UTC)
    stamps = [rfc3339_nano(now - age) for age in (timedelta(hours=2), timedelta(minutes=10), timedelta(seconds=1))]
    lines = [f"{stamp} stdout F printed {label}" for stamp, label in zip(stamps, ["2h", "10m", "1s"], strict=True)]
    logs.path(uid, "main", 1).write_text("".join(f"{line}\n" for line in lines))

    assert _log(k8s, name) == "printed 2h\nprinted 10m\nprinted 1s\n"
    assert _log(k8s, name, previous=True) == "first run\n"
    assert _log(k8s, name, since_seconds=3600) == "printed 10m\nprinted 1s\n"
    assert _log(k8s, name, since_seconds=300) == "printed 1s\n"
    assert _log(k8s, name, since_seconds=300, timestamps=True) == f"{stamps[2]} printed 1s\n"
    assert _log(k8s, name, since_seconds=3600, tail_lines=1) == "printed 1s\n"

    def since(moment: datetime) -> str:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    assert _log_since(k8s, name, since(now - timedelta(hours=1))) == (200, "printed 10m\nprinted 1s\n")
    stamped = _log_since(k8s, name, since(now - timedelta(minutes=1)), timestamps="true")
    assert stamped == (200, f"{stamps[2]} printed 1s\n")
    assert _log_since(k8s, name, since(now + timedelta(minutes=1))) == (200, "")
    code, body = _log_since(k8s, name, since(now), sinceSeconds="10")
    # kube-apiserver's validation of the PodLogOptions: Invalid (422), before the kubelet is asked.
    assert code == 422 and "at most one of `sinceTime` or `sinceSeconds` may be specified" in body, body
    k8s.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)


def _cri_lines(count: int, start: datetime) -> list[tuple[str, str]]:
    """(timestamp, text) of ``count`` lines printed a millisecond apart from ``start``."""
    return [(rfc3339_nano(start + timedelta(milliseconds=i)), f"line {i:06d} " + "x" * (i % 97)) for i in range(count)]


@pytest.mark.parametrize(
    ("content", "lines", "expected"),
    [
        (b"", 3, b""),
        (b"a\nb\nc\n", 0, b""),
        (b"a\nb\nc\n", 1, b"c\n"),
        (b"a\nb\nc\n", 2, b"b\nc\n"),
        (b"a\nb\nc\n", 3, b"a\nb\nc\n"),
        (b"a\nb\nc\n", 10, b"a\nb\nc\n"),
        (b"a\nb\nhalf-writ", 1, b"b\n"),  # a line still being written is not a line yet
        (b"\n\nx\n", 2, b"\nx\n"),
    ],
)
def test_tail_offset_reads_back_from_the_end(tmp_path: Path, content: bytes, lines: int, expected: bytes) -> None:
    path = tmp_path / "0.log"
    path.write_bytes(content)
    with path.open("rb") as handle:
        end = complete_size(handle)
        assert content[tail_offset(handle, end, lines) : end] == expected


def test_since_offset_bisects_to_the_first_line_not_older(tmp_path: Path) -> None:
    start = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    lines = _cri_lines(5000, start)
    path = tmp_path / "0.log"
    path.write_text("".join(f"{stamp} stdout F {text}\n" for stamp, text in lines))
    with path.open("rb") as handle:
        end = complete_size(handle)
        for index in (0, 1, 2499, 4999):
            offset = since_offset(handle, end, start + timedelta(milliseconds=index))
            assert handle.seek(offset) == offset and handle.readline().split(b" ", 3)[3].startswith(
                f"line {index:06d}".encode()
            )
        assert since_offset(handle, end, start - timedelta(days=1)) == 0
        assert since_offset(handle, end, start + timedelta(days=1)) == end


def test_tail_since_and_limit_on_a_large_log_through_the_apiserver(k8s: K8s, cluster: UpstreamCluster) -> None:
    name = unique("logs-large")
    uid = _idle_pod(k8s, name)
    assert cluster.agent is not None
    # kube-apiserver passes sinceTime on at second precision (metav1.Time): the last two lines start a new second.
    start = (datetime.now(UTC) - timedelta(hours=1)).replace(microsecond=0) + timedelta(milliseconds=2)
    lines = _cri_lines(60_000, start)  # about 6 MB: several read chunks
    path = cluster.agent.log_store.path(uid, "main", 1)  # a later run than the idle container's own (empty) one
    path.write_text("".join(f"{stamp} stdout F {text}\n" for stamp, text in lines) + "2026-11-30T")

    texts = [text for _, text in lines]
    assert _log(k8s, name) == "".join(
        f"{text}\n" for text in texts
    )  # every chunk boundary stitched, half line left out
    assert _log(k8s, name, tail_lines=3) == "".join(f"{text}\n" for text in texts[-3:])
    assert _log(k8s, name, tail_lines=2, timestamps=True) == "".join(f"{s} {t}\n" for s, t in lines[-2:])
    assert _log(k8s, name, tail_lines=3, limit_bytes=20) == f"{texts[-3]}\n"[:20]
    # sinceSeconds from "now": the lines are an hour old, except none.
    assert _log(k8s, name, since_seconds=60) == ""
    # The kubelet's order: the last 5 lines, then those not older than sinceTime (the last 2 here).
    assert _log_since(k8s, name, lines[-2][0], tailLines="5") == (200, "".join(f"{text}\n" for text in texts[-2:]))
    k8s.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
