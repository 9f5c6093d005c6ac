"""The local Kueue's evictions other than a preemption, through the official client (kubernetes-sigs/kueue v0.17.1).

``PodsReadyTimeout`` (with ``waitForPodsReady`` configured: ``requeueState``, the backoff, the requeue, then
``DeactivatedDueToRequeuingLimitExceeded`` once ``backoffLimitCount`` is reached), a user's ``Deactivated`` and its
reactivation, and ``ClusterQueueStopped`` / ``LocalQueueStopped`` (``stopPolicy``) with their restarts: conditions,
reasons and messages as upstream's ``pkg/controller/core/workload_controller.go`` and ``pkg/workload/workload.go``
write them (upstream tests: ``test/integration/singlecluster/scheduler/podsready/scheduler_test.go``,
``test/integration/singlecluster/controller/core/workload_controller_test.go``).

Each test makes its own flavor and queues (quota in ``cpu``); the Kueue configuration is the module cluster's, set
by the ``pods_ready`` fixture and put back to "off" after each test. Timeouts are seconds, so each test takes a few.
"""

from __future__ import annotations

import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from elastic_training.local.cluster import LocalCluster
from elastic_training.operators.constants import LABEL_JOBSET_NAME, LABEL_KUEUE_QUEUE_NAME
from tests.support.cluster_faults import _control
from tests.support.control_plane import NS, JobSets, job_template, jobset_manifest, pods_of, unique
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

KUEUE, V = "kueue.x-k8s.io", "v1beta2"
Obj = dict[str, Any]
HOLD = "sleep 300"


@pytest.fixture(autouse=True)
def _clean(k8s: K8s, cluster: LocalCluster) -> Iterator[None]:
    yield
    JobSets(k8s.custom).delete_all()
    cluster.faults.configure_kueue(None)


def configure(cluster: LocalCluster, **wait_for_pods_ready: Any) -> Obj:
    return cluster.faults.configure_kueue({"waitForPodsReady": wait_for_pods_ready})


def queues(k8s: K8s, cpu: str = "4") -> tuple[str, str]:
    """A flavor, a ClusterQueue with ``cpu`` of it for every namespace, a LocalQueue in ``default``: (cq, lq)."""
    flavor, cq, lq = unique("flavor"), unique("cq"), unique("lq")
    k8s.custom.create_cluster_custom_object(KUEUE, V, "resourceflavors", {"metadata": {"name": flavor}, "spec": {}})
    group = {
        "coveredResources": ["cpu"],
        "flavors": [{"name": flavor, "resources": [{"name": "cpu", "nominalQuota": cpu}]}],
    }
    k8s.custom.create_cluster_custom_object(
        KUEUE,
        V,
        "clusterqueues",
        {"metadata": {"name": cq}, "spec": {"namespaceSelector": {}, "resourceGroups": [group]}},
    )
    k8s.custom.create_namespaced_custom_object(
        KUEUE, V, NS, "localqueues", {"metadata": {"name": lq}, "spec": {"clusterQueue": cq}}
    )
    return cq, lq


def queued(name: str, queue: str, script: str = HOLD, *, backoff_limit: int = 0, **pod_spec: Any) -> Obj:
    rjob = job_template(script, backoff_limit=backoff_limit, grace=2, **pod_spec)
    rjob["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    manifest = jobset_manifest(name, {"workers": rjob})
    manifest["metadata"]["labels"] = {LABEL_KUEUE_QUEUE_NAME: queue}
    return manifest


def workload(k8s: K8s, jobset: str) -> Obj | None:
    items = k8s.custom.list_namespaced_custom_object(KUEUE, V, NS, "workloads")["items"]
    return next(
        (w for w in items if any(r["name"] == jobset for r in w["metadata"].get("ownerReferences") or [])), None
    )


def cond(obj: Obj | None, kind: str) -> Obj | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def when(k8s: K8s, jobset: str, kind: str, status: str = "True", reason: str | None = None, timeout: float = 60) -> Obj:
    """The JobSet's Workload once its condition ``kind`` has ``status`` (and ``reason``)."""

    def probe() -> Obj | None:
        wl = workload(k8s, jobset)
        found = cond(wl, kind)
        ok = found is not None and found["status"] == status and (reason is None or found["reason"] == reason)
        return wl if ok else None

    return wait_for(probe, timeout)


def said(wl: Obj, kind: str) -> tuple[str, str, str]:
    found = cond(wl, kind)
    assert found is not None, f"no {kind} condition"
    return found["status"], found["reason"], found["message"]


def events(k8s: K8s, name: str) -> set[str]:
    return {e.reason for e in k8s.core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name}").items}


def suspended(k8s: K8s, name: str) -> bool:
    return bool(JobSets(k8s.custom).get(name)["spec"].get("suspend"))


# -- the configuration ----------------------------------------------------------------------------------


def test_kueue_faults_over_http_and_bad_ones_refused(cluster: LocalCluster, k8s: K8s) -> None:
    applied = _control(cluster, "kueue-configuration", {"waitForPodsReady": {"timeout": "2m"}})
    assert applied["waitForPodsReady"]["timeout"] == "2m0s"
    assert applied["waitForPodsReady"]["recoveryTimeout"] == "2m0s"  # defaults to the timeout
    # Published where Kueue's manifests install it, for whoever reads Kueue's configuration.
    published = k8s.core.read_namespaced_config_map("kueue-manager-config", "kueue-system").data
    assert yaml.safe_load(published["controller_manager_config.yaml"]) == applied
    cq, _ = queues(k8s)
    stopped = _control(cluster, "stop-queue", {"clusterQueue": cq, "stopPolicy": "Hold"})
    assert stopped["spec"]["stopPolicy"] == "Hold"
    for path, bad in (
        ("kueue-configuration", {"waitForPodsReady": {"timeout": "soon"}}),
        ("kueue-configuration", {"waitForPodsReady": {"blockAdmission": True}}),
        ("stop-queue", {"clusterQueue": cq, "stopPolicy": "Pause"}),
        ("stop-queue", {"stopPolicy": "Hold"}),
        ("deactivate-workload", {"jobSet": "no-such-jobset-x"}),
        ("deactivate-workload", {"jobSet": "x", "active": "no"}),
    ):
        with pytest.raises(urllib.error.HTTPError) as error:
            _control(cluster, path, bad)
        assert error.value.code in (400, 404), bad
    assert _control(cluster, "stop-queue", {"clusterQueue": cq, "stopPolicy": "None"})["spec"]["stopPolicy"] == "None"


# -- PodsReadyTimeout ------------------------------------------------------------------------------------


def test_pods_never_ready_are_evicted_requeued_after_a_backoff_then_deactivated_at_the_limit(
    k8s: K8s, cluster: LocalCluster
) -> None:
    configure(
        cluster,
        timeout="2s",
        requeuingStrategy={"backoffBaseSeconds": 1, "backoffMaxSeconds": 2, "backoffLimitCount": 2},
    )
    _, lq = queues(k8s)
    name = unique("unready")
    # A node selector no node has: admitted by quota, its pod never scheduled, never ready.
    JobSets(k8s.custom).create(queued(name, lq, nodeSelector={"example.com/nowhere": "true"}))
    admitted = when(k8s, name, "Admitted")
    wl_name = admitted["metadata"]["name"]
    assert said(when(k8s, name, "PodsReady", "False"), "PodsReady") == (
        "False",
        "WaitForStart",
        "Not all pods are ready or succeeded",
    )
    first = when(k8s, name, "Evicted", reason="PodsReadyTimeout")
    assert said(first, "Evicted")[2] == f"Exceeded the PodsReady timeout {NS}/{wl_name}"
    assert first["status"]["requeueState"]["count"] == 1 and first["status"]["requeueState"]["requeueAt"]
    wait_for(lambda: suspended(k8s, name), 30)
    # Released, and not requeued until its backoff has passed (Requeued=False, the eviction's reason).
    released = when(k8s, name, "QuotaReserved", "False", reason="Pending")
    assert said(released, "Requeued") == ("False", "PodsReadyTimeout", f"Exceeded the PodsReady timeout {NS}/{wl_name}")
    backed_off = when(k8s, name, "Requeued", reason="BackoffFinished")
    assert said(backed_off, "Requeued") == ("True", "BackoffFinished", "The workload backoff was finished")
    # Admitted again, evicted again: the count goes on.
    when(k8s, name, "Admitted")
    second = wait_for(
        lambda: (w := workload(k8s, name)) and w["status"].get("requeueState", {}).get("count") == 2 and w, 60
    )
    assert said(second, "Evicted")[:2] == ("True", "PodsReadyTimeout")
    # The third time the count would pass backoffLimitCount=2: deactivated instead (spec.active false).
    deactivated = when(k8s, name, "Evicted", reason="DeactivatedDueToRequeuingLimitExceeded", timeout=90)
    assert said(deactivated, "Evicted")[2] == (
        "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
    )
    assert deactivated["spec"]["active"] is False
    assert "requeueState" not in deactivated["status"]
    assert cond(deactivated, "DeactivationTarget") is None
    stats = {
        (e["reason"], e["underlyingCause"]): e["count"] for e in deactivated["status"]["schedulingStats"]["evictions"]
    }
    assert stats == {("PodsReadyTimeout", "WaitForStart"): 2, ("Deactivated", "RequeuingLimitExceeded"): 1}
    held = when(k8s, name, "Requeued", "False", reason="DeactivatedDueToRequeuingLimitExceeded")
    assert said(held, "QuotaReserved")[:2] == ("False", "Pending")
    assert suspended(k8s, name)
    assert {"EvictedDueToPodsReadyTimeout", "EvictedDueToDeactivatedDueToRequeuingLimitExceeded"} <= events(
        k8s, wl_name
    )


def test_pods_not_back_to_ready_within_recovery_timeout_are_evicted_then_run_again(
    k8s: K8s, cluster: LocalCluster, tmp_path: Path
) -> None:
    """A node lost for longer than ``recoveryTimeout``: the running JobSet is evicted (cause ``WaitForRecovery``),
    requeued after its backoff, and runs again once the node is back; ``timeout`` (the start) is long."""
    configure(cluster, timeout="2m", recoveryTimeout="2s", requeuingStrategy={"backoffBaseSeconds": 1})
    _, lq = queues(k8s)
    name = unique("recover")
    JobSets(k8s.custom).create(queued(name, lq, backoff_limit=20))
    ready = when(k8s, name, "PodsReady", reason="Started")
    assert said(ready, "PodsReady") == ("True", "Started", "All pods reached readiness and the workload is running")
    node = pods_of(k8s.core, f"{LABEL_JOBSET_NAME}={name}")[0].spec.node_name
    cluster.faults.lose_host(node, repair_seconds=6)
    waiting = when(k8s, name, "PodsReady", "False", reason="WaitForRecovery")
    assert said(waiting, "PodsReady")[2] == "At least one pod has failed, waiting for recovery"
    evicted = when(k8s, name, "Evicted", reason="PodsReadyTimeout")
    causes = {e["underlyingCause"] for e in evicted["status"]["schedulingStats"]["evictions"]}
    assert causes == {"WaitForRecovery"}
    # Requeued, admitted again, and ready once the node is repaired: the same JobSet runs again.
    when(k8s, name, "Requeued", reason="BackoffFinished")
    back = when(k8s, name, "PodsReady", reason="Started", timeout=90)
    assert said(back, "Evicted")[:2] == ("False", "QuotaReserved")
    assert not suspended(k8s, name)


# -- Deactivated by a user ---------------------------------------------------------------------------------


def test_a_deactivated_workload_is_evicted_and_a_reactivated_one_requeued(k8s: K8s, cluster: LocalCluster) -> None:
    _, lq = queues(k8s)
    name = unique("inactive")
    JobSets(k8s.custom).create(queued(name, lq))
    when(k8s, name, "Admitted")
    wait_for(lambda: not suspended(k8s, name), 30)
    cluster.faults.deactivate_workload(NS, name)  # kubectl patch workload … spec.active=false
    evicted = when(k8s, name, "Evicted", reason="Deactivated")
    assert said(evicted, "Evicted") == ("True", "Deactivated", "The workload is deactivated")
    wait_for(lambda: suspended(k8s, name), 30)
    held = when(k8s, name, "Requeued", "False", reason="Deactivated")
    assert said(held, "QuotaReserved") == ("False", "Pending", "The workload is deactivated")
    assert "EvictedDueToDeactivated" in events(k8s, evicted["metadata"]["name"])
    cluster.faults.deactivate_workload(NS, name, active=True)
    reactivated = when(k8s, name, "Requeued", reason="Reactivated")
    assert said(reactivated, "Requeued") == ("True", "Reactivated", "The workload was reactivated")
    when(k8s, name, "Admitted")
    wait_for(lambda: not suspended(k8s, name), 30)


# -- stopPolicy -----------------------------------------------------------------------------------------------


def test_a_drained_cluster_queue_evicts_its_workloads_and_requeues_them_when_started(
    k8s: K8s, cluster: LocalCluster
) -> None:
    cq, lq = queues(k8s, cpu="1")
    running, waiting = unique("drained"), unique("waiting")
    jobsets = JobSets(k8s.custom)
    jobsets.create(queued(running, lq))
    when(k8s, running, "Admitted")
    jobsets.create(queued(waiting, lq))
    when(k8s, waiting, "QuotaReserved", "False", reason="Pending")
    cluster.faults.stop_queue(cluster_queue=cq, policy="HoldAndDrain")
    evicted = when(k8s, running, "Evicted", reason="ClusterQueueStopped")
    assert said(evicted, "Evicted")[2] == "The ClusterQueue is stopped"
    wait_for(lambda: suspended(k8s, running), 30)
    when(k8s, running, "Requeued", "False", reason="ClusterQueueStopped")
    # Released ("Pending", the eviction's message), then the scheduler says why it waits.
    held = when(k8s, running, "QuotaReserved", "False", reason="Inadmissible")
    assert said(held, "QuotaReserved")[2] == f"ClusterQueue {cq} is inactive"
    assert said(when(k8s, waiting, "QuotaReserved", "False", reason="Inadmissible"), "QuotaReserved")[2] == (
        f"ClusterQueue {cq} is inactive"
    )

    def active(plural: str, name: str, namespaced: bool) -> Obj | None:
        queue = (
            k8s.custom.get_namespaced_custom_object(KUEUE, V, NS, plural, name)
            if namespaced
            else k8s.custom.get_cluster_custom_object(KUEUE, V, plural, name)
        )
        return cond(queue, "Active")

    assert (
        wait_for(lambda: (c := active("clusterqueues", cq, False)) and c["status"] == "False" and c)["reason"]
        == "Stopped"
    )
    assert active("clusterqueues", cq, False)["message"] == "Can't admit new workloads: is stopped."  # type: ignore[index]
    assert wait_for(lambda: (c := active("localqueues", lq, True)) and c["status"] == "False" and c)["reason"] == (
        "ClusterQueueIsInactive"
    )
    cluster.faults.stop_queue(cluster_queue=cq, policy="None")
    restarted = when(k8s, running, "Requeued", reason="ClusterQueueRestarted")
    assert said(restarted, "Requeued")[2] == "The ClusterQueue was restarted after being stopped"
    when(k8s, running, "Admitted")  # first in the queue again (created first)


def test_a_held_local_queue_admits_nothing_new_and_its_drain_evicts(k8s: K8s, cluster: LocalCluster) -> None:
    _, lq = queues(k8s, cpu="4")
    first, second = unique("kept"), unique("held")
    jobsets = JobSets(k8s.custom)
    jobsets.create(queued(first, lq))
    when(k8s, first, "Admitted")
    cluster.faults.stop_queue(local_queue=f"{NS}/{lq}", policy="Hold")
    jobsets.create(queued(second, lq))
    pending = when(k8s, second, "QuotaReserved", "False", reason="Inadmissible")
    assert said(pending, "QuotaReserved")[2] == f"LocalQueue {lq} is inactive"
    assert cond(workload(k8s, first), "Evicted") is None  # Hold: the admitted one runs on
    cluster.faults.stop_queue(local_queue=f"{NS}/{lq}", policy="HoldAndDrain")
    evicted = when(k8s, first, "Evicted", reason="LocalQueueStopped")
    assert said(evicted, "Evicted")[2] == "The LocalQueue is stopped"
    when(k8s, first, "Requeued", "False", reason="LocalQueueStopped")
    with pytest.raises(client.ApiException) as caught:
        k8s.custom.patch_namespaced_custom_object(KUEUE, V, NS, "localqueues", lq, {"spec": {"stopPolicy": "Pause"}})
    assert caught.value.status == 422
    cluster.faults.stop_queue(local_queue=f"{NS}/{lq}", policy="None")
    assert said(when(k8s, first, "Requeued", reason="LocalQueueRestarted"), "Requeued")[2] == (
        "The LocalQueue was restarted after being stopped"
    )
    when(k8s, first, "Admitted")
    when(k8s, second, "Admitted")
