"""Kueue's Workloads read back through the official client: a JobSet's Workload, its conditions, and the JobSet's
pods once Kueue admitted it and they run (kubernetes-sigs/kueue v0.17's ``kueue.x-k8s.io/v1beta2``)."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from elastic_training.operators.constants import (
    LABEL_JOBSET_NAME,
)
from tests.support.control_plane import NS, pods_of
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

KUEUE, V = "kueue.x-k8s.io", "v1beta2"


Obj = dict[str, Any]


def workloads(k8s: K8s) -> list[Obj]:
    items: list[Obj] = k8s.custom.list_namespaced_custom_object(KUEUE, V, NS, "workloads")["items"]
    return items


def workload_of(k8s: K8s, jobset: str, timeout: float = 30.0) -> Obj:
    def probe() -> Obj | None:
        return next(
            (
                wl
                for wl in workloads(k8s)
                if any(r.get("name") == jobset for r in wl["metadata"].get("ownerReferences") or [])
            ),
            None,
        )

    return wait_for(probe, timeout)


def cond(obj: Obj, kind: str) -> Obj | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def workload_when(k8s: K8s, jobset: str, kind: str, status: str = "True", timeout: float = 60.0) -> Obj:
    def probe() -> Obj | None:
        wl = workload_of(k8s, jobset)
        found = cond(wl, kind)
        return wl if found is not None and found["status"] == status else None

    return wait_for(probe, timeout)


def running_pods(k8s: K8s, jobset: str, count: int, timeout: float = 90.0) -> list[client.V1Pod]:
    """Once ``count`` pods of ``jobset`` are Running, those pods."""

    def probe() -> list[client.V1Pod] | None:
        pods = [p for p in pods_of(k8s.core, f"{LABEL_JOBSET_NAME}={jobset}") if p.status.phase == "Running"]
        return pods if len(pods) >= count else None

    return wait_for(probe, timeout)
