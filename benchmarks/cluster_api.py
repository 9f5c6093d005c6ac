"""Requests per second of the local cluster's kube-apiserver, measured by a separate client process.

    .venv/bin/python -m benchmarks.cluster_api

Starts the upstream local cluster without nodes (:class:`benchmarks.upstream.ClusterProcess`: etcd, kube-apiserver
and the controllers; no node agent, so the 1000 pods stay Pending and no process runs them) and drives kube-apiserver
over loopback with the official ``kubernetes`` client from this process, one request at a time, as the admin:

- **create**: ``create_namespaced_pod`` while filling the namespace;
- **get**: ``read_namespaced_pod``;
- **list 10 / list 1000**: ``list_namespaced_pod`` over a label selector that matches 10, or
  over all 1000 pods, deserialised into ``V1PodList`` by the client as callers do, and once more
  as raw bytes (``_preload_content=False``) to separate the server's cost from the client's;
- **watch replay**: a watch from a resourceVersion with 1000 events to replay (kube-apiserver's watch cache);
- **watch live**: events delivered to a watcher while another thread patches pods.

Every loop is bounded by a request count and by ``--seconds``. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from benchmarks.upstream import ClusterProcess

NS = "default"
PODS = 1000
SELECTED = 10


def _pod(index: int) -> dict[str, Any]:
    labels = {"bench": "api", "group": "selected" if index < SELECTED else "rest"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"bench-{index:04d}", "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "local", "command": ["sleep", "600"]}]},
    }


def _rate(action: Callable[[int], object], count: int, seconds: float) -> tuple[int, float]:
    """Run ``action(i)`` up to ``count`` times or for ``seconds``; (requests done, requests per second)."""
    began = time.perf_counter()
    done = 0
    while done < count and time.perf_counter() - began < seconds:
        action(done)
        done += 1
    elapsed = time.perf_counter() - began
    return done, done / elapsed


def _watch_replay(core: client.CoreV1Api, resource_version: str, expected: int, seconds: float) -> tuple[int, float]:
    began = time.perf_counter()
    stream = watch.Watch()
    seen = 0
    for _ in stream.stream(
        core.list_namespaced_pod, NS, resource_version=resource_version, timeout_seconds=math.ceil(seconds)
    ):
        seen += 1
        if seen >= expected:
            stream.stop()
    return seen, seen / (time.perf_counter() - began)


def _watch_live(core: client.CoreV1Api, writer: client.CoreV1Api, count: int, seconds: float) -> tuple[int, float]:
    resource_version = core.list_namespaced_pod(NS, limit=1).metadata.resource_version
    received = 0
    done = threading.Event()
    began = time.perf_counter()

    def patch_loop() -> None:
        index = 0
        while index < count and not done.is_set() and time.perf_counter() - began < seconds:
            writer.patch_namespaced_pod(
                f"bench-{index % PODS:04d}", NS, {"metadata": {"annotations": {"n": str(index)}}}
            )
            index += 1

    patcher = threading.Thread(target=patch_loop, daemon=True)
    stream = watch.Watch()
    patcher.start()
    last = began
    for _ in stream.stream(
        core.list_namespaced_pod, NS, resource_version=resource_version, timeout_seconds=math.ceil(seconds) + 5
    ):
        received += 1
        last = time.perf_counter()
        if received >= count or last - began > seconds:
            stream.stop()
    done.set()
    patcher.join(timeout=seconds)
    # Up to the last event received: after the writer's window the stream waits for one more event (it checks the
    # clock only on an event), so the time after the last one is its read timeout, not delivery.
    return received, received / max(last - began, 1e-9)


def run(seconds: float, requests: int) -> list[tuple[str, int, float]]:
    with (
        tempfile.TemporaryDirectory(prefix="bench-cluster-api-") as tmp,
        ClusterProcess(Path(tmp) / "cluster", run_nodes=False) as cluster,
    ):
        api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        writer_client = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        try:
            return _measure(client.CoreV1Api(api_client), client.CoreV1Api(writer_client), seconds, requests)
        finally:
            api_client.close()
            writer_client.close()


def _measure(
    core: client.CoreV1Api, writer: client.CoreV1Api, seconds: float, requests: int
) -> list[tuple[str, int, float]]:
    start_version = core.list_namespaced_pod(NS).metadata.resource_version
    results: list[tuple[str, int, float]] = []
    created, rate = _rate(lambda i: core.create_namespaced_pod(NS, _pod(i)), PODS, 120)
    results.append(("create pod", created, rate))
    if created != PODS:
        raise RuntimeError(f"the namespace must hold {PODS} pods for the list measurements, it holds {created}")
    every = max(requests // 10, 10)
    loops: list[tuple[str, Callable[[int], object], int]] = [
        ("get pod", lambda i: core.read_namespaced_pod(f"bench-{i % PODS:04d}", NS), requests),
        (
            f"list {SELECTED} of {PODS} pods (label selector)",
            lambda _: core.list_namespaced_pod(NS, label_selector="group=selected"),
            requests,
        ),
        (f"list {PODS} pods", lambda _: core.list_namespaced_pod(NS), every),
        (
            f"list {PODS} pods, raw body (no client models)",
            lambda _: core.list_namespaced_pod(NS, _preload_content=False).data,
            every,
        ),
    ]
    for name, action, count in loops:
        results.append((name, *_rate(action, count, seconds)))
    results.append(("watch replay (events/s)", *_watch_replay(core, start_version, PODS, seconds)))
    results.append(("watch live, 1 writer (events/s)", *_watch_live(core, writer, requests, seconds)))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="time bound of each measurement")
    parser.add_argument("--requests", type=int, default=2000, help="request bound of each measurement")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    results = run(args.seconds, args.requests)
    print("| operation | requests | per second |")
    print("|---|---|---|")
    for name, count, rate in results:
        print(f"| {name} | {count} | {rate:,.0f} |")
    if args.json:
        args.json.write_text(
            json.dumps([{"operation": n, "count": c, "per_second": r} for n, c, r in results], indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
