"""The local Kueue on ``v5e-small`` as xpk sets it up: a Pathways-shaped JobSet behind ``multislice-queue``."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.utils import parse_quantity

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.constants import (
    LABEL_GKE_NODEPOOL,
    LABEL_GKE_TPU_ACCELERATOR,
    LABEL_GKE_TPU_TOPOLOGY,
    LABEL_JOBSET_NAME,
    LABEL_KUEUE_QUEUE_NAME,
    TPU_RESOURCE,
)
from elastic_training.operators.manifests import elastic_jobset
from tests.support.control_plane import NS, JobSets, condition, job_template, jobset_manifest, pods_of, unique
from tests.support.gke_jobsets import asleep, v5e_16_spec
from tests.support.kubectl import header, kubectl, rows
from tests.support.kueue_objects import KUEUE, V, cond, running_pods, workload_of, workload_when
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

CLUSTER_DESCRIPTION = "v5e-small"
UPSTREAM = True
HOLD = "sleep 300"
Obj = dict[str, Any]


@pytest.fixture(autouse=True)
def _no_jobset_left_running(k8s: K8s) -> Iterator[None]:
    yield
    JobSets(k8s.custom).delete_all()
    # Until their pods are gone: a deleted run's pending high-priority pod is still the real scheduler's to place,
    # and it preempted the next test's pod (seen in the suite under load).
    wait_for(lambda: not pods_of(k8s.core, LABEL_JOBSET_NAME), 120)


def pathways_like(name: str, slices: int, *, queue: str | None = "multislice-queue", priority: str = "") -> Obj:
    """A head on cpu-np and ``slices`` v5e-16 slices of 4 hosts (the shape the operator renders)."""
    extra: Obj = {"priorityClassName": priority} if priority else {}
    head = job_template(HOLD, grace=5, nodeSelector={LABEL_GKE_NODEPOOL: "cpu-np"}, **extra)
    head["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"cpu": "24", "memory": "100G"}
    }
    worker = job_template(
        HOLD,
        replicas=slices,
        completions=4,
        grace=5,
        nodeSelector={LABEL_GKE_TPU_ACCELERATOR: "tpu-v5-lite-podslice", LABEL_GKE_TPU_TOPOLOGY: "4x4"},
        tolerations=[{"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        **extra,
    )
    worker["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {TPU_RESOURCE: "4"}}
    manifest = jobset_manifest(name, {"pathways-head": head, "worker": worker})
    if queue:
        manifest["metadata"]["labels"] = {LABEL_KUEUE_QUEUE_NAME: queue}
    return manifest


def test_the_description_creates_xpks_queues(k8s: K8s) -> None:
    cq = k8s.custom.get_cluster_custom_object(KUEUE, V, "clusterqueues", "cluster-queue")
    assert cq["spec"]["queueingStrategy"] == "BestEffortFIFO"
    assert cq["spec"]["preemption"]["withinClusterQueue"] == "LowerPriority"
    assert cq["spec"]["namespaceSelector"] == {}
    lq = k8s.custom.get_namespaced_custom_object(KUEUE, V, NS, "localqueues", "multislice-queue")
    assert lq["spec"]["clusterQueue"] == "cluster-queue"
    flavor = k8s.custom.get_cluster_custom_object(KUEUE, V, "resourceflavors", "4xv5litepod-16")
    assert flavor["spec"]["nodeLabels"] == {
        LABEL_GKE_TPU_ACCELERATOR: "tpu-v5-lite-podslice",
        LABEL_GKE_TPU_TOPOLOGY: "4x4",
    }
    high = client.SchedulingV1Api(k8s.api_client).read_priority_class("high")
    assert high.value == 750

    def active_condition() -> Obj | None:  # the real Kueue activates the queues a moment after their creation
        read = k8s.custom.get_namespaced_custom_object(KUEUE, V, NS, "localqueues", "multislice-queue")
        found = [c for c in (read.get("status") or {}).get("conditions") or [] if c["type"] == "Active"]
        return found[0] if found and found[0]["status"] == "True" else None

    active = wait_for(active_condition, 30)
    assert (active["status"], active["reason"], active["message"]) == (
        "True",
        "Ready",
        "Can submit new workloads to localQueue",
    )


def test_three_slices_are_admitted_and_a_second_run_waits_for_quota(k8s: K8s) -> None:
    jobsets = JobSets(k8s.custom)
    first, second = unique("first"), unique("second")
    jobsets.create(pathways_like(first, 3, priority="high"))
    wl = workload_when(k8s, first, "Admitted")
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("pathways-head", 1), ("worker", 12)]
    assert (wl["spec"]["priority"], wl["spec"]["priorityClassRef"]) == (
        750,
        {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"},
    )
    assignments = {a["name"]: a for a in wl["status"]["admission"]["podSetAssignments"]}
    assert assignments["pathways-head"]["flavors"] == {"cpu": "cpu-user", "memory": "cpu-user"}
    # The real Kueue writes quantities in canonical form (100G as 97656250Ki): compare their values
    usage = {k: parse_quantity(v) for k, v in assignments["pathways-head"]["resourceUsage"].items()}
    assert usage == {"cpu": 24, "memory": parse_quantity("100G")}
    assert assignments["worker"]["flavors"] == {TPU_RESOURCE: "4xv5litepod-16"}
    assert assignments["worker"]["resourceUsage"] == {TPU_RESOURCE: "48"}
    workers = running_pods(k8s, first, 13)
    assert {p.spec.node_name.rsplit("-", 1)[0] for p in workers if "worker" in p.metadata.name} <= {
        f"gke-local-tpu-v5e-16-{i}" for i in range(4)
    }
    jobsets.create(pathways_like(second, 3, priority="high"))
    pending = cond(workload_when(k8s, second, "QuotaReserved", "False"), "QuotaReserved")
    assert pending is not None
    assert pending["message"] == (
        "couldn't assign flavors to pod set worker: flavor 1xv5litepod-4 doesn't match node affinity, "
        f"insufficient unused quota for {TPU_RESOURCE} in flavor 4xv5litepod-16, 32 more needed"
    )
    assert jobsets.get(second)["spec"]["suspend"] is True
    jobsets.delete(first)
    workload_when(k8s, second, "Admitted", timeout=90)
    assert cond(workload_of(k8s, second), "Requeued") is None


def test_a_jobset_without_the_queue_label_runs_at_once_as_before(k8s: K8s) -> None:
    jobsets = JobSets(k8s.custom)
    name = unique("plain")
    jobsets.create(pathways_like(name, 1, queue=None))
    running_pods(k8s, name, 5)
    assert not any(
        r.get("name") == name
        for wl in k8s.custom.list_namespaced_custom_object(KUEUE, V, NS, "workloads")["items"]
        for r in wl["metadata"].get("ownerReferences") or []
    )


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed (no `kubectl` on PATH)")
def test_kubectl_prints_kueues_tables_and_knows_the_short_names(k8s: K8s, cluster: UpstreamCluster) -> None:
    jobsets = JobSets(k8s.custom)
    name = unique("table")
    jobsets.create(pathways_like(name, 1))
    wl = workload_when(k8s, name, "Admitted")
    kubeconfig = cluster.kubeconfig_path
    cq = kubectl(kubeconfig, "get", "cq").stdout
    assert header(cq) == ["NAME", "COHORT", "PENDING WORKLOADS"]
    assert rows(cq)["cluster-queue"] == ["cluster-queue", "0"]  # no cohort: the column is empty
    wide = kubectl(kubeconfig, "get", "clusterqueues", "-o", "wide").stdout
    assert header(wide) == ["NAME", "COHORT", "STRATEGY", "PENDING WORKLOADS", "ADMITTED WORKLOADS"]

    def admitted_row() -> list[str] | None:  # the real Kueue counts the admission in the queue's status a moment later
        row: list[str] = rows(kubectl(kubeconfig, "get", "clusterqueues", "-o", "wide").stdout)["cluster-queue"]
        return row if row[-1] == "1" else None

    assert wait_for(admitted_row, 30) == ["cluster-queue", "BestEffortFIFO", "0", "1"]
    lq = kubectl(kubeconfig, "get", "lq").stdout
    assert header(lq) == ["NAME", "CLUSTERQUEUE", "PENDING WORKLOADS", "ADMITTED WORKLOADS"]
    lq_row = wait_for(
        lambda: (r := rows(kubectl(kubeconfig, "get", "lq").stdout)["multislice-queue"])[-1] == "1" and r, 30
    )
    assert lq_row == ["multislice-queue", "cluster-queue", "0", "1"]
    workloads = kubectl(kubeconfig, "get", "kwl").stdout
    assert header(workloads) == ["NAME", "QUEUE", "RESERVED IN", "ADMITTED", "FINISHED", "AGE"]
    row = rows(workloads)[wl["metadata"]["name"]]
    assert row[:4] == [wl["metadata"]["name"], "multislice-queue", "cluster-queue", "True"]
    together = kubectl(kubeconfig, "get", "workloads,clusterqueues,localqueues").stdout
    assert f"workload.kueue.x-k8s.io/{wl['metadata']['name']}" in together
    assert "clusterqueue.kueue.x-k8s.io/cluster-queue" in together
    assert "localqueue.kueue.x-k8s.io/multislice-queue" in together
    flavors = kubectl(kubeconfig, "get", "rf").stdout
    assert header(flavors) == ["NAME", "AGE"] and "4xv5litepod-16" in rows(flavors)
    classes = kubectl(kubeconfig, "get", "pc").stdout
    assert header(classes) == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    assert rows(classes)["high"][:3] == ["high", "750", "false"]


def _rendered(name: str, priority_class: str) -> Obj:
    """The JobSet the operator renders for GKE (3 slices of v5e 4x4, exclusive per node pool), in the queue."""
    spec = v5e_16_spec(name, priority_class=priority_class)
    jobset = elastic_jobset(spec, name=name, namespace=NS, labels={LABEL_KUEUE_QUEUE_NAME: "multislice-queue"})
    return asleep(jobset, 300)  # the trainer: something that stays up


def test_a_higher_priority_run_preempts_a_running_one_which_resumes_after_it(k8s: K8s) -> None:
    jobsets = JobSets(k8s.custom)
    low, high = unique("low"), unique("high")
    jobsets.create(_rendered(low, "low"))
    workload_when(k8s, low, "Admitted")
    running_pods(k8s, low, 13)
    jobsets.create(_rendered(high, "very-high"))
    evicted = cond(workload_when(k8s, low, "Evicted"), "Preempted")
    assert evicted is not None and evicted["reason"] == "InClusterQueue"
    wait_for(lambda: condition(jobsets.status(low).get("conditions"), "Suspended"), 60)
    wait_for(lambda: not pods_of(k8s.core, f"{LABEL_JOBSET_NAME}={low}"), 90)  # stopped, gracefully
    workload_when(k8s, low, "Requeued")
    admitted = workload_when(k8s, high, "Admitted", timeout=90)
    assert admitted["spec"]["priority"] == 1000
    running_pods(k8s, high, 13)
    jobsets.delete(high)
    workload_when(k8s, low, "QuotaReserved", timeout=120)
    assert not jobsets.get(low)["spec"].get("suspend") or wait_for(lambda: not jobsets.get(low)["spec"]["suspend"], 30)
    running_pods(k8s, low, 13, timeout=120)  # the same JobSet resumed: no new one was made
