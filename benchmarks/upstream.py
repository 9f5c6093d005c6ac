"""What the benchmarks read from the upstream local cluster (:class:`UpstreamCluster`) beside the official client.

- :func:`wait_for_service_account`: kube-controller-manager's ServiceAccount controller makes a namespace's
  ``default`` ServiceAccount a moment after the cluster is up; until then kube-apiserver's admission refuses every
  pod in it (403 ``serviceaccount "default" not found``), as on any fresh cluster.
- :func:`request_totals`: kube-apiserver's own count of the requests it served, ``apiserver_request_total`` from
  its ``/metrics`` (read as the admin), summed by verb, resource and subresource. It counts a request when it ends:
  a watch or a log follow still open is not in it yet.
- :class:`AuditCounter`: the requests kube-apiserver received, by client (``User-Agent``) and kind, from its audit
  log (``RequestReceived``: a watch or a log follow is one request however long it stays open, counted when it opens).
- :func:`component_pids` and :func:`cpu_seconds`: the control plane's processes and their CPU time, from ``/proc``.
- :class:`ClusterProcess`: an :class:`UpstreamCluster` in a child process, so that the benchmark's client never
  shares a GIL with the node agent (the kubelet that serves the pods' logs).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from kubernetes import client

from elastic_training.local.controlplane import audit

SERVICE_ACCOUNT_SECONDS = 60.0
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def wait_for_service_account(api: client.ApiClient, namespace: str = "default") -> float:
    """Wait until ``namespace``'s ``default`` ServiceAccount exists (pods can be created); the seconds waited."""
    core = client.CoreV1Api(api)
    began = time.monotonic()
    while True:
        try:
            core.read_namespaced_service_account("default", namespace)
            return time.monotonic() - began
        except client.ApiException as error:
            if error.status != 404:
                raise
        if time.monotonic() - began > SERVICE_ACCOUNT_SECONDS:
            raise TimeoutError(f"no ServiceAccount default/{namespace} after {SERVICE_ACCOUNT_SECONDS:.0f} s")
        time.sleep(0.2)


def request_totals(api: client.ApiClient) -> dict[str, dict[str, int]]:
    """kube-apiserver's ``/metrics`` now: ``apiserver_request_total`` (requests ended) and
    ``apiserver_longrunning_requests`` (watches and log follows open), each as ``{"VERB resource[/sub]": n}``."""
    response = api.call_api("/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False)
    text = response.data.decode()
    return {
        "requests": parse_metric(text, "apiserver_request_total"),
        "open_longrunning": parse_metric(text, "apiserver_longrunning_requests"),
    }


def parse_metric(text: str, metric: str) -> dict[str, int]:
    """A metric's samples in a Prometheus text exposition, summed by their ``verb`` and ``resource`` labels."""
    totals: Counter[str] = Counter()
    sample = re.compile(rf"^{re.escape(metric)}\{{(?P<labels>[^}}]*)\}} (?P<value>\S+)$")
    for line in text.splitlines():
        match = sample.match(line)
        if not match:
            continue
        labels = dict(_LABEL.findall(match.group("labels")))
        resource = labels.get("resource") or "(non-resource)"
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        totals[f"{labels.get('verb', '')} {resource}"] += int(float(match.group("value")))
    return dict(totals)


def difference(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """``after - before`` per key, only the keys that grew."""
    return {key: value - before.get(key, 0) for key, value in sorted(after.items()) if value > before.get(key, 0)}


def request_kind(verb: str, subresource: str | None, query: dict[str, str]) -> str:
    """A request's kind as the benchmarks count them: list, get, watch, log follow, log read, or its verb."""
    if subresource == "log":
        return "log follow" if query.get("follow", "").lower() in ("true", "1") else "log read"
    return verb


class AuditCounter:
    """Requests kube-apiserver received since it was made, by ``"<User-Agent>\\t<kind>"``, from its audit log."""

    def __init__(self, log_path: Path) -> None:
        self._path = log_path
        self._position = audit.position(log_path)
        self.counts: Counter[str] = Counter()

    def update(self) -> dict[str, int]:
        """Read the whole lines written since the last update; every count so far."""
        with open(self._path, "rb") as log:
            log.seek(self._position)
            data = log.read()
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written is read next time
        self._position += len(complete)
        for line in complete.splitlines():
            if not line.strip():
                continue
            event = audit.event(json.loads(line))
            query = {"follow": event.query("follow") or ""}
            self.counts[f"{event.user_agent}\t{request_kind(event.verb, event.subresource, query)}"] += 1
        return dict(self.counts)


def component_pids(cluster: Any) -> dict[str, int]:
    """The control plane's running processes by component name (etcd, kube-apiserver, the controllers)."""
    return {name: c.pid for name, c in cluster.control_plane.components.items() if c.pid}


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) a process has used, from ``/proc/<pid>/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_CLUSTER_SCRIPT = """
import json, sys
from pathlib import Path
from benchmarks.upstream import component_pids
from elastic_training.local.upstream_cluster import UpstreamCluster
workdir, description, run_nodes = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "nodes"
with UpstreamCluster(workdir, description=description, run_nodes=run_nodes) as cluster:
    print(json.dumps({"kubeconfig": str(cluster.kubeconfig_path), "pids": component_pids(cluster)}), flush=True)
    sys.stdin.read()
"""


class ClusterProcess:
    """An :class:`UpstreamCluster` (``description``; without nodes unless ``run_nodes``) in a child process, up when
    entered, stopped (every process it started) when left. ``kubeconfig`` is the admin's, ``pids`` the control
    plane's processes by component, ``pid`` the child's (the node agent and the fault proxy)."""

    def __init__(self, workdir: Path, description: str = "single-node", *, run_nodes: bool = True) -> None:
        self.workdir = workdir
        self._argv = [sys.executable, "-c", _CLUSTER_SCRIPT, str(workdir), description]
        self._argv.append("nodes" if run_nodes else "api-only")
        self._process: subprocess.Popen[str] | None = None
        self.kubeconfig = Path()
        self.pids: dict[str, int] = {}
        self.pid = 0

    def __enter__(self) -> ClusterProcess:
        repo = Path(__file__).resolve().parent.parent
        self._process = subprocess.Popen(self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=repo)
        self.pid = self._process.pid
        line = self._process.stdout.readline() if self._process.stdout else ""
        if not line:
            self.__exit__()
            raise RuntimeError("the cluster process ended before the cluster was up (its stderr says why)")
        started = json.loads(line)
        self.kubeconfig, self.pids = Path(started["kubeconfig"]), dict(started["pids"])
        return self

    def __exit__(self, *_: object) -> None:
        if self._process is None:
            return
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self._process.terminate()  # UpstreamCluster.stop runs on the way out of its with-block
            self._process.wait(timeout=60)
        self._process = None
