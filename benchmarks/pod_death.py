"""How fast the local cluster reports a pod's process dying, as a watching client sees it.

    .venv/bin/python -m benchmarks.pod_death --runs 30

Starts the upstream local cluster (:class:`UpstreamCluster`, ``single-node``: kube-apiserver, the controllers, the
node agent) in a child process (or uses ``--kubeconfig`` of a running one), then for
each run creates a pod running ``sleep 600`` (``restartPolicy: Never``), waits on a watch until it
runs, and measures with the official ``kubernetes`` client's watch:

- **kill → terminated**: ``SIGKILL`` to the container's process (its pid is the node agent's
  ``local://<pid>`` container ID) until a watch event shows the container ``terminated``: the node agent's
  status write through kube-apiserver, then the watch cache's event;
- **kill → Failed**: until the event that carries phase ``Failed``;
- **graceful delete → DELETED**: ``DELETE`` (default grace period 30 s; ``sleep`` exits on
  SIGTERM) until the watch's ``DELETED`` event.

Prints a Markdown table (median, p95, max in milliseconds); ``--json`` writes the raw numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config, watch

from benchmarks.upstream import wait_for_service_account

NS = "default"
_CLUSTER_SCRIPT = """
import sys
from pathlib import Path
from elastic_training.local.upstream_cluster import UpstreamCluster
with UpstreamCluster(Path(sys.argv[1]), description="single-node") as cluster:
    print(cluster.kubeconfig_path, flush=True)
    sys.stdin.read()
"""


class PodWatch:
    """Watch events for one pod, each stamped with ``time.perf_counter()`` on arrival."""

    def __init__(self, core: client.CoreV1Api, name: str, resource_version: str) -> None:
        self.events: queue.Queue[tuple[float, str, client.V1Pod]] = queue.Queue()
        self._watch = watch.Watch()
        self._thread = threading.Thread(
            target=self._run, args=(core, name, resource_version), name=f"watch-{name}", daemon=True
        )
        self._thread.start()

    def _run(self, core: client.CoreV1Api, name: str, resource_version: str) -> None:
        stream = self._watch.stream(
            core.list_namespaced_pod,
            NS,
            field_selector=f"metadata.name={name}",
            resource_version=resource_version,
            timeout_seconds=120,
        )
        try:
            for event in stream:
                self.events.put((time.perf_counter(), event["type"], event["object"]))
        except urllib3.exceptions.HTTPError:
            return  # the cluster went away under an idle watch at the end of the run

    def until(self, predicate: Any, timeout: float = 30.0) -> tuple[float, client.V1Pod]:
        deadline = time.monotonic() + timeout
        while True:
            stamp, kind, pod = self.events.get(timeout=max(deadline - time.monotonic(), 0.001))
            if predicate(kind, pod):
                return stamp, pod

    def stop(self) -> None:
        self._watch.stop()


def _pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "local", "command": ["sleep", "600"]}],
        },
    }


def _running(kind: str, pod: client.V1Pod) -> bool:
    statuses = pod.status.container_statuses or [] if pod.status else []
    return bool(statuses and statuses[0].state.running and statuses[0].container_id)


def _terminated(kind: str, pod: client.V1Pod) -> bool:
    statuses = pod.status.container_statuses or [] if pod.status else []
    return bool(statuses and statuses[0].state.terminated)


def _failed(kind: str, pod: client.V1Pod) -> bool:
    return bool(pod.status and pod.status.phase == "Failed")


def _start_running_pod(core: client.CoreV1Api, name: str) -> tuple[PodWatch, int]:
    created = core.create_namespaced_pod(NS, _pod(name))
    pod_watch = PodWatch(core, name, str(int(created.metadata.resource_version) - 1))
    _, pod = pod_watch.until(_running)
    return pod_watch, int(pod.status.container_statuses[0].container_id.removeprefix("local://"))


def run_kill(core: client.CoreV1Api, index: int) -> tuple[float, float]:
    name = f"bench-kill-{index}"
    pod_watch, pid = _start_running_pod(core, name)
    started = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    terminated, pod = pod_watch.until(_terminated)
    failed = terminated if _failed("MODIFIED", pod) else pod_watch.until(_failed)[0]
    pod_watch.stop()
    core.delete_namespaced_pod(name, NS)
    return terminated - started, failed - started


def run_graceful_delete(core: client.CoreV1Api, index: int) -> float:
    name = f"bench-delete-{index}"
    pod_watch, _ = _start_running_pod(core, name)
    started = time.perf_counter()
    core.delete_namespaced_pod(name, NS)
    deleted, _ = pod_watch.until(lambda kind, pod: kind == "DELETED")
    pod_watch.stop()
    return deleted - started


def _summary(label: str, seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return f"| {label} | {len(ms)} | {statistics.median(ms):.1f} | {p95:.1f} | {ms[-1]:.1f} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--kubeconfig", type=Path, help="use a running cluster instead of starting one")
    parser.add_argument("--json", type=Path, help="also write the raw timings here")
    args = parser.parse_args(argv)

    cluster: subprocess.Popen[str] | None = None
    kubeconfig = args.kubeconfig
    if kubeconfig is None:
        workdir = tempfile.mkdtemp(prefix="pod-death-bench-")
        cluster = subprocess.Popen(
            [sys.executable, "-c", _CLUSTER_SCRIPT, workdir], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert cluster.stdout is not None
        kubeconfig = Path(cluster.stdout.readline().strip())
    try:
        api_client = config.new_client_from_config(config_file=str(kubeconfig))
        core = client.CoreV1Api(api_client)
        wait_for_service_account(api_client, NS)
        kills = [run_kill(core, i) for i in range(args.runs)]
        deletes = [run_graceful_delete(core, i) for i in range(args.runs)]
    finally:
        if cluster is not None:
            assert cluster.stdin is not None
            cluster.stdin.close()
            cluster.wait(timeout=60)
    print("| measurement | runs | median ms | p95 ms | max ms |")
    print("|---|---|---|---|---|")
    print(_summary("SIGKILL → container `terminated` on the watch", [k[0] for k in kills]))
    print(_summary("SIGKILL → phase `Failed` on the watch", [k[1] for k in kills]))
    print(_summary("graceful DELETE → `DELETED` on the watch", deletes))
    if args.json:
        raw = {"kill_terminated": [k[0] for k in kills], "kill_failed": [k[1] for k in kills], "delete": deletes}
        args.json.write_text(json.dumps(raw, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
