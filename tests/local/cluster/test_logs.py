"""Pod logs through ``read_namespaced_pod_log``: real pods run by the kubelet, and files written directly."""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kubernetes import client, config

from elastic_training.local.cluster import LocalCluster
from elastic_training.local.nodeagent.logs import complete_size, rfc3339_nano, since_offset, tail_offset
from tests.support.cluster_objects import pod
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for


def _log(k8s: K8s, name: str, **kwargs: object) -> str:
    # kubernetes 36 returns the repr of bytes for preloaded logs; read the raw body instead.
    response = k8s.core.read_namespaced_pod_log(name, "default", _preload_content=False, **kwargs)
    return str(response.data.decode())


def _phase(k8s: K8s, name: str) -> str:
    return str(k8s.core.read_namespaced_pod(name, "default").status.phase)


def test_finished_pod_logs_with_tail_timestamps_since_and_limit(k8s: K8s) -> None:
    k8s.core.create_namespaced_pod(
        "default", pod("logs-done", command=["sh", "-c", "echo one; echo two; echo three"], restart_policy="Never")
    )
    wait_for(lambda: _phase(k8s, "logs-done") == "Succeeded")
    assert _log(k8s, "logs-done") == "one\ntwo\nthree\n"
    assert _log(k8s, "logs-done", tail_lines=1) == "three\n"
    stamped = _log(k8s, "logs-done", timestamps=True).splitlines()
    assert all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z (one|two|three)$", line) for line in stamped)
    assert _log(k8s, "logs-done", since_seconds=3600) == "one\ntwo\nthree\n"
    assert _log(k8s, "logs-done", limit_bytes=6) == "one\ntw"


def test_container_must_be_named_when_a_pod_has_several(k8s: K8s) -> None:
    body = pod("logs-two", restart_policy="Never")
    body.spec.containers = [
        client.V1Container(name="a", image="local", command=["sh", "-c", "echo from-a"]),
        client.V1Container(name="b", image="local", command=["sh", "-c", "echo from-b"]),
    ]
    k8s.core.create_namespaced_pod("default", body)
    wait_for(lambda: _phase(k8s, "logs-two") == "Succeeded")
    with pytest.raises(client.ApiException) as caught:
        _log(k8s, "logs-two")
    assert caught.value.status == 400 and "a container name must be specified" in caught.value.body
    assert _log(k8s, "logs-two", container="b") == "from-b\n"
    with pytest.raises(client.ApiException) as caught:
        _log(k8s, "logs-two", container="c")
    assert caught.value.status == 400


def test_follow_streams_until_the_container_ends(k8s: K8s, tmp_path: Path) -> None:
    flag = tmp_path / "may-finish"  # the container prints its second line only once the test has read the first
    script = f"echo line-1; until [ -e {flag} ]; do sleep 0.05; done; echo line-2"
    k8s.core.create_namespaced_pod("default", pod("logs-follow", command=["sh", "-c", script], restart_policy="Never"))
    wait_for(lambda: _phase(k8s, "logs-follow") == "Running")
    response = k8s.core.read_namespaced_pod_log(
        "logs-follow", "default", follow=True, timestamps=True, _preload_content=False, _request_timeout=60
    )
    chunks = response.stream(1)
    received = b""
    while not received.endswith(b"\n"):
        received += next(chunks)
    assert received.decode().endswith(" line-1\n")  # streamed while the container still runs
    assert _phase(k8s, "logs-follow") == "Running"
    flag.touch()
    rest = b"".join(chunks).decode()  # ends when the container does (else the 60 s request timeout fails it)
    assert re.fullmatch(r"\S+Z line-2\n", rest), rest
    wait_for(lambda: _phase(k8s, "logs-follow") == "Succeeded")


def test_previous_run_since_seconds_and_since_time_from_log_files(tmp_path: Path) -> None:
    with LocalCluster(workdir=tmp_path, run_control_plane=False) as cluster:
        api = client.CoreV1Api(config.new_client_from_config(config_file=str(cluster.kubeconfig_path)))
        created = api.create_namespaced_pod("default", pod("logs-files"))
        uid = created.metadata.uid
        assert cluster.logs is not None
        first = cluster.logs.writer(uid, "main", 0)
        first.write_line("first run")
        first.close()
        # The current run's file, in the kubelet's CRI format, with lines printed 2 h, 10 min and 1 s ago.
        now = datetime.now(UTC)
        stamps = [rfc3339_nano(now - age) for age in (timedelta(hours=2), timedelta(minutes=10), timedelta(seconds=1))]
        lines = [f"{stamp} stdout F printed {label}" for stamp, label in zip(stamps, ["2h", "10m", "1s"], strict=True)]
        cluster.logs.path(uid, "main", 1).write_text("".join(f"{line}\n" for line in lines))

        def read(**kwargs: object) -> str:
            return str(
                api.read_namespaced_pod_log("logs-files", "default", _preload_content=False, **kwargs).data.decode()
            )

        assert read() == "printed 2h\nprinted 10m\nprinted 1s\n"
        assert read(previous=True) == "first run\n"
        assert read(since_seconds=3600) == "printed 10m\nprinted 1s\n"
        assert read(since_seconds=300) == "printed 1s\n"
        assert read(since_seconds=300, timestamps=True) == f"{stamps[2]} printed 1s\n"
        assert read(since_seconds=3600, tail_lines=1) == "printed 1s\n"

        # The official client has no sinceTime parameter; ask over plain HTTP.
        def read_since(moment: datetime, extra: str = "") -> tuple[int, str]:
            since = urllib.parse.quote(moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
            request = urllib.request.Request(
                f"{cluster.url}/api/v1/namespaces/default/pods/logs-files/log?sinceTime={since}{extra}",
                headers={"Authorization": f"Bearer {cluster.token}"},
            )
            try:
                with urllib.request.urlopen(request, timeout=10, context=cluster.ssl_context()) as response:
                    return response.status, response.read().decode()
            except urllib.error.HTTPError as error:
                return error.code, error.read().decode()

        assert read_since(now - timedelta(hours=1)) == (200, "printed 10m\nprinted 1s\n")
        assert read_since(now - timedelta(minutes=1), "&timestamps=true") == (200, f"{stamps[2]} printed 1s\n")
        assert read_since(now + timedelta(minutes=1)) == (200, "")
        code, body = read_since(now, "&sinceSeconds=10")
        assert code == 400 and "at most one of sinceTime or sinceSeconds" in body


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


def test_tail_since_and_limit_on_a_large_log_through_the_client(tmp_path: Path) -> None:
    with LocalCluster(workdir=tmp_path, run_control_plane=False) as cluster:
        api = client.CoreV1Api(config.new_client_from_config(config_file=str(cluster.kubeconfig_path)))
        uid = api.create_namespaced_pod("default", pod("logs-large")).metadata.uid
        assert cluster.logs is not None
        start = datetime.now(UTC) - timedelta(hours=1)
        lines = _cri_lines(60_000, start)  # about 6 MB: several read chunks
        path = cluster.logs.path(uid, "main", 0)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{stamp} stdout F {text}\n" for stamp, text in lines) + "2026-11-30T")

        def read(**kwargs: object) -> str:
            return str(
                api.read_namespaced_pod_log("logs-large", "default", _preload_content=False, **kwargs).data.decode()
            )

        texts = [text for _, text in lines]
        assert read() == "".join(f"{text}\n" for text in texts)  # every chunk boundary stitched, half line left out
        assert read(tail_lines=3) == "".join(f"{text}\n" for text in texts[-3:])
        assert read(tail_lines=2, timestamps=True) == "".join(f"{s} {t}\n" for s, t in lines[-2:])
        assert read(tail_lines=3, limit_bytes=20) == f"{texts[-3]}\n"[:20]
        # sinceSeconds from "now": the lines are an hour old, except none.
        assert read(since_seconds=60) == ""
        # The kubelet's order: the last 5 lines, then those not older than sinceTime (the last 2 here).
        since = urllib.parse.quote(lines[-2][0])
        request = urllib.request.Request(
            f"{cluster.url}/api/v1/namespaces/default/pods/logs-large/log?tailLines=5&sinceTime={since}",
            headers={"Authorization": f"Bearer {cluster.token}"},
        )
        with urllib.request.urlopen(request, timeout=30, context=cluster.ssl_context()) as response:
            assert response.read().decode() == "".join(f"{text}\n" for text in texts[-2:])
