"""A lost TPU host against a force-deleted worker pod: when the slice runs again, on the real controllers.

    .venv/bin/python -m benchmarks.lost_host --repeat 2

One upstream local cluster (``v5e-small``: four v5e-16 node pools of 4 hosts, the real kube-controller-manager at
its default ``--node-monitor-grace-period``) runs the operator's GKE JobSet, 3 slices of 4 hosts and the head, each
container a ``sleep`` (placement only: no trainer, so what is timed is Kubernetes' and GKE's part). Each repetition
creates a JobSet of its own (a Job's back-off grows with its failures) and, once its 13 pods run:

- **baseline**: force-deletes one worker pod of slice 1 (``kubectl delete pod --grace-period=0 --force``): the Job
  controller counts it failed and creates its replacement after its back-off (10 s for a first failure);
- **lost host**: loses one host of slice 0 (``lose_host``: the pool's hosts stop heartbeating and their processes
  die; GKE deletes the gone VMs' Nodes once the node lifecycle controller has marked them). The pool's repair is
  not due within the run: the slice comes back in the spare pool, as the README's sample says a GKE user sees.

Phases are seconds from the fault, read every 0.2 s through the API: the lost nodes marked (``Ready`` not
``True``), their Node objects deleted, the lost pods gone (pod GC, after its 40 s quarantine), the first replacement
pod created, and every pod of the JobSet running again. The ratio is the lost host's "running again" over the
baseline's, in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.constants import LABEL_JOBSET_NAME
from elastic_training.operators.manifests import elastic_jobset
from tests.support.gke_jobsets import asleep, v5e_16_spec
from tests.support.waiting import wait_for

NAMESPACE = "default"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
PODS = 13  # the head and 3 slices of 4 hosts
POLL_SECONDS = 0.2
LOST_PHASES = ("marked", "nodes_deleted", "pods_gone", "replacement_created", "running")
BASELINE_PHASES = ("replacement_created", "running")
Check = Callable[["Seen"], bool]


def _jobset(name: str) -> dict[str, Any]:
    """The operator's GKE JobSet of 3 v5e 4x4 slices, its containers a ``sleep`` of the ``local`` image."""
    return asleep(elastic_jobset(v5e_16_spec(name), name=name, namespace=NAMESPACE, labels={}), 3600)


@dataclass(frozen=True)
class Seen:
    """One read of the cluster: every node's readiness, and the JobSet's pods."""

    nodes: dict[str, bool]  # by name: whether its ``Ready`` condition is ``True``
    pods: list[client.V1Pod]

    def workers(self, name: str, slice_index: int) -> set[str]:
        """The uids of the pods of the slice's Job."""
        job = f"{name}-worker-{slice_index}"
        return {p.metadata.uid for p in self.pods if p.metadata.labels.get(JOB_NAME_LABEL) == job}

    def running_again(self, lost: set[str]) -> bool:
        """Every pod of the JobSet running, none of them one the fault took (a lost host's pods stay Running, their
        status unwritten, until pod GC fails them)."""
        running = {
            p.metadata.uid for p in self.pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp
        }
        return len(running) == PODS and not lost & running


class Bench:
    """The cluster's API, as the benchmark reads it."""

    def __init__(self, kubeconfig: Path) -> None:
        api = config.new_client_from_config(config_file=str(kubeconfig))
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)

    def seen(self, name: str) -> Seen:
        """The nodes and ``name``'s pods, one list each."""
        nodes = {}
        for node in self.core.list_node().items:
            conditions = {c.type: c.status for c in node.status.conditions or []}
            nodes[node.metadata.name] = conditions.get("Ready") == "True"
        pods = self.core.list_namespaced_pod(NAMESPACE, label_selector=f"{LABEL_JOBSET_NAME}={name}").items
        return Seen(nodes, list(pods))


def _phases(bench: Bench, name: str, checks: dict[str, Check], since: float, timeout: float) -> dict[str, float]:
    """Seconds from ``since`` until each check first held on a read of the cluster, read until every one has."""
    held: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(held) < len(checks):
        if time.monotonic() > deadline:
            missing = [phase for phase in checks if phase not in held]
            raise TimeoutError(f"not within {timeout:.0f} s of the fault: {', '.join(missing)}")
        seen, at = bench.seen(name), round(time.time() - since, 2)
        held |= {phase: at for phase, check in checks.items() if phase not in held and check(seen)}
        time.sleep(POLL_SECONDS)
    return {phase: held[phase] for phase in checks}


def baseline(bench: Bench, name: str) -> dict[str, float]:
    """Force-delete one worker pod of slice 1; the phases of its replacement."""
    before = bench.seen(name)
    old = before.workers(name, 1)
    deleted = next(p for p in before.pods if p.metadata.uid in old)
    since = time.time()
    bench.core.delete_namespaced_pod(deleted.metadata.name, NAMESPACE, grace_period_seconds=0)
    checks: dict[str, Check] = {
        "replacement_created": lambda seen: bool(seen.workers(name, 1) - old),
        "running": lambda seen: seen.running_again({deleted.metadata.uid}),
    }
    return _phases(bench, name, checks, since, timeout=120)


def lost_host(cluster: UpstreamCluster, bench: Bench, name: str) -> dict[str, float]:
    """Lose one host of slice 0 (its whole pool with it); the phases until the slice runs again."""
    before = bench.seen(name)
    old = before.workers(name, 0)
    host = next(p.spec.node_name for p in before.pods if p.metadata.uid in old)
    nodes = set(cluster.faults.pool_nodes(cluster.faults.pool_of(host)))
    checks: dict[str, Check] = {
        "marked": lambda seen: not any(ready for node, ready in seen.nodes.items() if node in nodes),
        "nodes_deleted": lambda seen: not nodes & set(seen.nodes),
        "pods_gone": lambda seen: not old & seen.workers(name, 0),
        "replacement_created": lambda seen: bool(seen.workers(name, 0) - old),
        "running": lambda seen: seen.running_again(old),
    }
    since = time.time()
    try:
        cluster.faults.lose_host(host, repair_seconds=3600)
        return _phases(bench, name, checks, since, timeout=420)
    finally:
        cluster.faults.repair_lost_slices()
        wait_for(lambda: all(bench.seen(name).nodes.get(n) for n in nodes), timeout=120)  # the repaired pool Ready


def repetition(cluster: UpstreamCluster, bench: Bench, index: int) -> dict[str, Any]:
    """One JobSet of its own: created, running, the baseline, the lost host, deleted."""
    name = f"lost-host-{index}"
    bench.custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets", _jobset(name))
    try:
        wait_for(lambda: bench.seen(name).running_again(set()), timeout=180)
        result = {"baseline": baseline(bench, name)}
        result["lost_host"] = lost_host(cluster, bench, name)
        return result
    finally:
        bench.custom.delete_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets", name, propagation_policy="Foreground"
        )
        wait_for(lambda: not bench.seen(name).pods, timeout=120)


def _median(results: list[dict[str, Any]], kind: str, phase: str) -> str:
    values = [r[kind][phase] for r in results]
    spread = f" ({min(values):.1f}-{max(values):.1f})" if len(values) > 1 else ""
    return f"{statistics.median(values):.1f} s{spread}"


def markdown(results: list[dict[str, Any]], load: dict[str, list[float]]) -> str:
    """The phases' medians (range) of both faults, and the ratio of their "running again"."""
    rows = ["| fault | " + " | ".join(LOST_PHASES) + " |", "|---|" + "---|" * len(LOST_PHASES)]
    for kind, phases in (("baseline", BASELINE_PHASES), ("lost_host", LOST_PHASES)):
        cells = [_median(results, kind, p) if p in phases else "-" for p in LOST_PHASES]
        label = "worker pod force-deleted" if kind == "baseline" else "one host of a 4-host slice lost"
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    ratios = [r["lost_host"]["running"] / r["baseline"]["running"] for r in results]
    rows += [
        "",
        f"Running again, lost host / force-deleted pod: {statistics.median(ratios):.1f}x (median of {len(ratios)}).",
        "Load average (1, 5, 15 min) at start "
        + ", ".join(f"{x:.1f}" for x in load["start"])
        + ", at the end "
        + ", ".join(f"{x:.1f}" for x in load["end"])
        + ".",
    ]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=2, help="repetitions, each a JobSet of its own")
    parser.add_argument("--json", type=Path, help="also write every repetition's phases here")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    load = {"start": list(os.getloadavg())}
    results = []
    with UpstreamCluster(Path(tempfile.mkdtemp(prefix="lost-host-bench-")), description="v5e-small") as cluster:
        bench = Bench(cluster.kubeconfig_path)
        for index in range(args.repeat):
            results.append(repetition(cluster, bench, index))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    load["end"] = list(os.getloadavg())
    print(markdown(results, load))
    if args.json:
        args.json.write_text(json.dumps({"repetitions": results, "load_average": load}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
