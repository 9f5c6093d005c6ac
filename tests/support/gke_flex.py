"""Helpers for the flex-start tests: xpk's check over cpu with a chosen retry strategy, a JobSet in a queue, and
reads of the Workload, its ProvisioningRequest and their conditions through the official client."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client

from elastic_training.local.gke.xpk_flex import admission_check, provisioning_request_config
from elastic_training.operators.constants import LABEL_JOBSET_NAME, LABEL_KUEUE_QUEUE_NAME
from tests.support.control_plane import NS, job_template, jobset_manifest, pods_of, unique
from tests.support.flex import FLEX_NODE_SELECTOR, cluster_queue, provisioning_requests, typed
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

KUEUE, V = "kueue.x-k8s.io", "v1beta2"
Obj = dict[str, Any]


def flex_queue(k8s: K8s, *, retry: Obj | None = None) -> tuple[str, str]:
    """A new check (over cpu, with ``retry``), a ClusterQueue of 16 cpu with it and a LocalQueue: (queue, check)."""
    check, config, flavor, cq, lq = (unique(p) for p in ("check", "config", "flavor", "cq", "lq"))
    for kind, body in (
        ("ProvisioningRequestConfig", provisioning_request_config(config, "cpu", retry)),
        ("AdmissionCheck", admission_check(check, config)),
        ("ResourceFlavor", {"metadata": {"name": flavor}, "spec": {}}),
        ("ClusterQueue", cluster_queue(cq, [(["cpu"], flavor, {"cpu": 16})], check)),
    ):
        k8s.custom.create_cluster_custom_object(KUEUE, V, kind.lower() + "s", typed(kind, body))
    local_queue = typed("LocalQueue", {"metadata": {"name": lq}, "spec": {"clusterQueue": cq}})
    k8s.custom.create_namespaced_custom_object(KUEUE, V, NS, "localqueues", local_queue)
    return lq, check


def flex_jobset(name: str, queue: str, pods: int = 2) -> Obj:
    """A JobSet of ``pods`` pods (1 cpu each) selecting xpk's flex nodes, in ``queue``."""
    rjob = job_template("sleep 300", completions=pods, grace=1, nodeSelector=dict(FLEX_NODE_SELECTOR))
    rjob["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    manifest = jobset_manifest(name, {"workers": rjob})
    manifest["metadata"]["labels"] = {LABEL_KUEUE_QUEUE_NAME: queue}
    return manifest


def workload(k8s: K8s, jobset: str) -> Obj | None:
    items = k8s.custom.list_namespaced_custom_object(KUEUE, V, NS, "workloads")["items"]
    owned = (w for w in items if any(r.get("name") == jobset for r in w["metadata"].get("ownerReferences") or []))
    return next(owned, None)


def condition(obj: Obj | None, kind: str) -> Obj | None:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), None)


def true(obj: Obj | None, kind: str) -> bool:
    found = condition(obj, kind)
    return found is not None and found["status"] == "True"


def check_state(wl: Obj | None, name: str) -> Obj | None:
    checks = ((wl or {}).get("status") or {}).get("admissionChecks") or []
    return next((c for c in checks if c["name"] == name), None)


def wait_workload(k8s: K8s, jobset: str, test: Callable[[Obj], bool], timeout: float = 90.0) -> Obj:
    def probe() -> Obj | None:
        wl = workload(k8s, jobset)
        return wl if wl is not None and test(wl) else None

    return wait_for(probe, timeout)


def wait_request(
    k8s: K8s, wl: Obj, check: str, attempt: int = 1, test: Callable[[Obj], bool] | None = None, timeout: float = 90.0
) -> Obj:
    """Kueue's ProvisioningRequest ``<workload>-<check>-<attempt>``, once ``test`` holds."""
    name = f"{wl['metadata']['name']}-{check}-{attempt}"

    def probe() -> Obj | None:
        found = next((r for r in provisioning_requests(k8s.custom, NS) if r["metadata"]["name"] == name), None)
        return found if found is not None and (test is None or test(found)) else None

    return wait_for(probe, timeout)


def running_pods(k8s: K8s, jobset: str, count: int, timeout: float = 90.0) -> list[client.V1Pod]:
    def probe() -> list[client.V1Pod] | None:
        pods = [p for p in pods_of(k8s.core, f"{LABEL_JOBSET_NAME}={jobset}") if p.status.phase == "Running"]
        return pods if len(pods) == count else None

    return wait_for(probe, timeout)


def events(k8s: K8s, name: str) -> list[tuple[str, str]]:
    items = k8s.core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name}").items
    return [(e.reason, e.message) for e in items]
