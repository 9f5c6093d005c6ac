"""Big pod logs and many idle watches on the local cluster's API, seen from a separate client process.

    .venv/bin/python -m benchmarks.cluster_logs_watches [--log-mb 200] [--watches 100] [--idle-seconds 60]

Starts the upstream local cluster (``single-node``) in a child process (:class:`benchmarks.upstream.ClusterProcess`)
and:

- **logs**: writes a CRI-format log of ``--log-mb`` MB for one running pod straight into the node agent's log
  directory (kube-apiserver's ``pods/log`` reads it through the node's kubelet API, the node agent), then times
  ``read_namespaced_pod_log(tail_lines=10)`` and a ``sinceTime`` read of the last second, each repeated, while
  another thread sends ``read_namespaced_pod`` (a simple GET) back to back and records each one's latency: what
  the rest of the API sees during the read;
- **watches**: opens ``--watches`` watch streams on pods (each with its own label selector, as
  one trigger per JobSet would), then samples kube-apiserver's RSS and CPU time
  (``/proc/<pid>``) over ``--idle-seconds`` with nothing happening, and again while a writer
  patches pods in another namespace at about 20 writes/s, and the GET latency with them open.

Prints Markdown tables; ``--json`` also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes import client, config

from benchmarks.upstream import ClusterProcess
from elastic_training.local.kubeconfig import read_endpoint

NS = "default"
LINE_TEXT = "step 000000 loss 2.345678 tokens/s 123456.7 " + "x" * 30  # about 100 bytes with the CRI prefix


def _pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "local", "command": ["sleep", "600"]}]},
    }


def _write_log(path: Path, megabytes: int) -> tuple[int, datetime]:
    """A CRI log of about ``megabytes`` MB, one line per millisecond ending now; (lines, last line's time)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line_bytes = len(f"{datetime.now(UTC).isoformat()} stdout F {LINE_TEXT}\n")
    count = megabytes * 1_000_000 // line_bytes
    start = datetime.now(UTC) - timedelta(milliseconds=count)
    with path.open("w", encoding="utf-8") as handle:
        block: list[str] = []
        for index in range(count):
            moment = start + timedelta(milliseconds=index)
            block.append(f"{moment.strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z stdout F {LINE_TEXT}\n")
            if len(block) == 10_000:
                handle.write("".join(block))
                block = []
        handle.write("".join(block))
    return count, start + timedelta(milliseconds=count - 1)


class _Prober:
    """GETs one pod back to back on its own client and connection, recording each latency."""

    def __init__(self, kubeconfig: Path, name: str) -> None:
        self._core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        self._name = name
        self._stop = threading.Event()
        self.latencies: list[float] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.perf_counter()
            self._core.read_namespaced_pod(self._name, NS, _preload_content=False).read()
            self.latencies.append(time.perf_counter() - began)

    def __enter__(self) -> _Prober:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=120)


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {"count": 0, "median_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
    return {
        "count": len(ordered),
        "median_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        "max_ms": ordered[-1] * 1000,
    }


def _timed(action: Callable[[], object], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return times


def _proc(pid: int) -> tuple[float, int]:
    """(CPU seconds used so far, resident bytes) of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    return cpu, rss


def _open_watch(host: str, port: int, token: str, selector: str, tls: ssl.SSLContext | None) -> socket.socket:
    sock = socket.create_connection((host, port))
    if tls is not None:  # the cluster serves HTTPS; the kubeconfig carries its CA
        sock = tls.wrap_socket(sock, server_hostname=host)
    query = urllib.parse.urlencode({"watch": "true", "labelSelector": selector, "timeoutSeconds": "3600"})
    sock.sendall(
        f"GET /api/v1/namespaces/{NS}/pods?{query} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {token}\r\n\r\n".encode()
    )
    return sock


def _wait_running(core: client.CoreV1Api, name: str, timeout: float = 120.0) -> None:
    """Until the pod runs (a pod's log is its node's: kube-apiserver reads it from the kubelet it runs on)."""
    deadline = time.monotonic() + timeout
    while core.read_namespaced_pod(name, NS).status.phase != "Running":
        if time.monotonic() > deadline:
            raise TimeoutError(f"pod {name} not running after {timeout:.0f} s")
        time.sleep(0.2)


def measure_logs(
    core: client.CoreV1Api, kubeconfig: Path, workdir: Path, megabytes: int, repeat: int
) -> dict[str, Any]:
    created = core.create_namespaced_pod(NS, _pod("bench-logs"))
    core.create_namespaced_pod(NS, _pod("bench-probe"))
    _wait_running(core, "bench-logs")
    # The node agent's log of the container's first run (local/nodeagent/logs.py: <workdir>/logs/<uid>/<container>/
    # <restart count>.log), written over: `sleep` writes nothing of its own.
    path = workdir / "logs" / created.metadata.uid / "main" / "0.log"
    began = time.perf_counter()
    lines, last = _write_log(path, megabytes)
    written = time.perf_counter() - began
    since = (last - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    results: dict[str, Any] = {"log_bytes": path.stat().st_size, "log_lines": lines, "write_seconds": written}
    with _Prober(kubeconfig, "bench-probe") as idle:
        time.sleep(2)
    results["get_idle"] = _summary(idle.latencies)
    reads: dict[str, Callable[[], object]] = {
        "tail_lines=10": lambda: (
            core.read_namespaced_pod_log("bench-logs", NS, tail_lines=10, _preload_content=False).data
        ),
        "since_time=last 1 s": lambda: (
            core.api_client.call_api(
                f"/api/v1/namespaces/{NS}/pods/bench-logs/log",
                "GET",
                query_params=[("sinceTime", since)],
                auth_settings=["BearerToken"],
                _preload_content=False,
            ).data
        ),
    }
    for name, action in reads.items():
        with _Prober(kubeconfig, "bench-probe") as beside:
            times = _timed(action, repeat)
        results[name] = {"read": _summary(times), "get_beside": _summary(beside.latencies)}
    path.unlink()
    return results


def measure_watches(
    core: client.CoreV1Api, kubeconfig: Path, server_pid: int, count: int, idle_seconds: float
) -> dict[str, Any]:
    host_url = urllib.parse.urlsplit(core.api_client.configuration.host)
    endpoint = read_endpoint(kubeconfig)
    token, tls = str(endpoint.token), endpoint.ssl_context()
    core.create_namespace({"metadata": {"name": "bench-other"}})
    core.create_namespaced_pod("bench-other", _pod("bench-churn"))
    cpu0, rss0 = _proc(server_pid)
    sockets = [
        _open_watch(str(host_url.hostname), int(host_url.port or 443), token, f"jobset={i}", tls) for i in range(count)
    ]
    time.sleep(2)  # let every watch register
    cpu1, rss1 = _proc(server_pid)
    time.sleep(idle_seconds)
    cpu2, rss2 = _proc(server_pid)
    writes, stop = 0, threading.Event()

    def churn() -> None:
        nonlocal writes
        writer = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        while not stop.is_set():
            writer.patch_namespaced_pod("bench-churn", "bench-other", {"metadata": {"annotations": {"n": str(writes)}}})
            writes += 1
            time.sleep(0.05)

    writer = threading.Thread(target=churn, daemon=True)
    busy_seconds = min(idle_seconds, 20.0)
    writer.start()
    time.sleep(busy_seconds)
    stop.set()
    writer.join(timeout=30)
    cpu3, rss3 = _proc(server_pid)
    with _Prober(kubeconfig, "bench-probe") as probe:
        time.sleep(3)
    for sock in sockets:
        sock.close()
    return {
        "watches": count,
        "rss_before_mb": rss0 / 1e6,
        "rss_open_mb": rss1 / 1e6,
        "rss_after_idle_mb": rss2 / 1e6,
        "rss_after_writes_mb": rss3 / 1e6,
        "cpu_opening_s": cpu1 - cpu0,
        "idle_seconds": idle_seconds,
        "cpu_idle_s": cpu2 - cpu1,
        "cpu_idle_percent": 100 * (cpu2 - cpu1) / idle_seconds,
        "busy_seconds": busy_seconds,
        "writes_elsewhere": writes,
        "cpu_writes_s": cpu3 - cpu2,
        "cpu_per_write_ms": 1000 * (cpu3 - cpu2) / max(writes, 1),
        "get_with_watches": _summary(probe.latencies),
    }


def run(megabytes: int, repeat: int, watches: int, idle_seconds: float) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="bench-logs-watches-") as tmp,
        ClusterProcess(Path(tmp) / "cluster") as cluster,
    ):
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        try:
            core = client.CoreV1Api(api)
            return {
                "logs": measure_logs(core, cluster.kubeconfig, cluster.workdir, megabytes, repeat),
                "watches": measure_watches(
                    core, cluster.kubeconfig, cluster.pids["kube-apiserver"], watches, idle_seconds
                ),
            }
        finally:
            api.close()


def _ms(summary: dict[str, float], *keys: str) -> str:
    return " / ".join(f"{summary[key]:.1f}" for key in keys) + " ms"


def _print(results: dict[str, Any]) -> None:
    logs = results["logs"]
    print(f"log: {logs['log_bytes'] / 1e6:.0f} MB, {logs['log_lines']:,} lines")
    print("| request | read: median / max | GET beside it: median / p99 / max | GETs |")
    print("|---|---|---|---|")
    idle = logs["get_idle"]
    print(f"| (none: GET alone, 2 s) | | {_ms(idle, 'median_ms', 'p99_ms', 'max_ms')} | {idle['count']} |")
    for name in ("tail_lines=10", "since_time=last 1 s"):
        read, get = logs[name]["read"], logs[name]["get_beside"]
        print(
            f"| {name} | {_ms(read, 'median_ms', 'max_ms')} | {_ms(get, 'median_ms', 'p99_ms', 'max_ms')} "
            f"| {get['count']} |"
        )
    w = results["watches"]
    rss = " / ".join(f"{w[key]:.0f}" for key in ("rss_before_mb", "rss_open_mb", "rss_after_idle_mb"))
    rows = [
        (f"kube-apiserver RSS: before / {w['watches']} open / after {w['idle_seconds']:.0f} s idle", f"{rss} MB"),
        ("kube-apiserver RSS after the writes elsewhere", f"{w['rss_after_writes_mb']:.0f} MB"),
        ("kube-apiserver CPU to open them", f"{w['cpu_opening_s']:.2f} s"),
        (
            f"kube-apiserver CPU over {w['idle_seconds']:.0f} s idle",
            f"{w['cpu_idle_s']:.2f} s ({w['cpu_idle_percent']:.2f} %)",
        ),
        (
            f"kube-apiserver CPU per write in another namespace ({w['writes_elsewhere']})",
            f"{w['cpu_per_write_ms']:.2f} ms",
        ),
        ("GET with them open: median / p99 / max", _ms(w["get_with_watches"], "median_ms", "p99_ms", "max_ms")),
    ]
    print()
    print(f"| {w['watches']} idle watches | value |")
    print("|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-mb", type=int, default=200, help="size of the log to read")
    parser.add_argument("--repeat", type=int, default=5, help="reads of each kind")
    parser.add_argument("--watches", type=int, default=100, help="idle watches to hold open")
    parser.add_argument("--idle-seconds", type=float, default=60.0, help="how long to sample them idle")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    results = run(args.log_mb, args.repeat, args.watches, args.idle_seconds)
    _print(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
