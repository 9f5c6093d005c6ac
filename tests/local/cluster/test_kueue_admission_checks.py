"""Flex-start through the local Kueue over HTTP: admission checks, ProvisioningRequests and their outcomes.

What upstream does (kubernetes-sigs/kueue v0.17.1 ``pkg/controller/admissionchecks/provisioning/controller.go``,
``pkg/controller/core/workload_controller.go``, ``pkg/workload/admissionchecks.go``; kubernetes/autoscaler's
ProvisioningRequest conditions) with xpk's ``dws-prov`` check: quota is reserved, the Workload waits with no
``Admitted`` condition while its check is Pending, a ProvisioningRequest asks for the capacity, and the request's
outcome decides (Provisioned: admitted on the new nodes; Failed: retried, then rejected and deactivated;
CapacityRevoked: rejected and deactivated, the JobSet stopped). Also Kueue's side effects on JobSets: the
``resource-in-use`` finalizer, LocalQueueDefaulting, the ``kueue.x-k8s.io/podset`` label.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from elastic_training.local.cluster import LocalCluster
from elastic_training.local.descriptions.cluster_description import parse_description
from elastic_training.operators.constants import LABEL_JOBSET_NAME, LABEL_KUEUE_QUEUE_NAME
from elastic_training.operators.queueing import is_queued_jobset
from tests.support.control_plane import NS, JobSets, job_template, jobset_manifest, pods_of, unique
from tests.support.flex import (
    CHECK,
    FLEX_NODE_SELECTOR,
    LABEL_PROVISIONING_REQUEST,
    cluster_queue,
    create_flex_check,
    provisioning_requests,
)
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

KUEUE, V = "kueue.x-k8s.io", "v1beta2"
Obj = dict[str, Any]
DELAY = 1.0


def _queued_pool(name: str) -> Obj:
    return {
        "name": name,
        "machineType": "n2-standard-8",
        "nodeCount": 2,
        "cpu": "8",
        "memory": "32Gi",
        "provisioning": {"onDemand": True, "queued": True, "delaySeconds": DELAY},
    }


CLUSTER_DESCRIPTION = parse_description(
    {
        "cluster": "flex",
        "nodePools": [
            {"name": "always", "machineType": "n2-standard-8", "nodeCount": 1, "cpu": "8", "memory": "32Gi"},
            _queued_pool("flex-a"),
            _queued_pool("flex-b"),
        ],
    }
)


@pytest.fixture(autouse=True)
def _no_jobset_left(k8s: K8s) -> Iterator[None]:
    yield
    jobsets = JobSets(k8s.custom)
    jobsets.delete_all()
    wait_for(lambda: not k8s.custom.list_namespaced_custom_object(KUEUE, V, NS, "workloads")["items"] or None, 60)


def _cpu_queue(k8s: K8s, cpu: int, namespace: str, local_queue: str, *checks: str) -> None:
    """A flavor, a ClusterQueue of ``cpu`` cpu for every namespace (with ``checks``), and its LocalQueue."""
    flavor, cq = unique("flavor"), unique("cq")
    k8s.custom.create_cluster_custom_object(KUEUE, V, "resourceflavors", {"metadata": {"name": flavor}, "spec": {}})
    body = cluster_queue(cq, [(["cpu"], flavor, {"cpu": cpu})], *checks)
    if not checks:
        body["spec"].pop("admissionChecksStrategy")
    k8s.custom.create_cluster_custom_object(KUEUE, V, "clusterqueues", body)
    k8s.custom.create_namespaced_custom_object(
        KUEUE, V, namespace, "localqueues", {"metadata": {"name": local_queue}, "spec": {"clusterQueue": cq}}
    )


def _flex_queue(k8s: K8s, check: str, config: str, *, retry: Obj | None = None) -> str:
    """The check (over cpu), a ClusterQueue with it and 16 cpu, a LocalQueue; the LocalQueue's name."""
    create_flex_check(k8s.custom, check, config, managed_resource="cpu", retry=retry)
    lq = unique("lq")
    _cpu_queue(k8s, 16, NS, lq, check)
    return lq


def _flex_jobset(name: str, queue: str | None, pods: int = 2) -> Obj:
    rjob = job_template("sleep 300", completions=pods, grace=1, nodeSelector=dict(FLEX_NODE_SELECTOR))
    rjob["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    manifest = jobset_manifest(name, {"workers": rjob})
    if queue:
        manifest["metadata"]["labels"] = {LABEL_KUEUE_QUEUE_NAME: queue}
    return manifest


def _workload(k8s: K8s, jobset: str) -> Obj | None:
    items = k8s.custom.list_namespaced_custom_object(KUEUE, V, NS, "workloads")["items"]
    return next(
        (w for w in items if any(r.get("name") == jobset for r in w["metadata"].get("ownerReferences") or [])), None
    )


def _cond(obj: Obj | None, kind: str) -> Obj | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def _true(obj: Obj | None, kind: str) -> bool:
    found = _cond(obj, kind)
    return found is not None and found["status"] == "True"


def _check(wl: Obj | None, name: str = CHECK) -> Obj | None:
    return next((c for c in ((wl or {}).get("status") or {}).get("admissionChecks") or [] if c["name"] == name), None)


def _wait_workload(k8s: K8s, jobset: str, test: Any, timeout: float = 60.0) -> Obj:
    def probe() -> Obj | None:
        wl = _workload(k8s, jobset)
        return wl if wl is not None and test(wl) else None

    return wait_for(probe, timeout)


def _request_of(k8s: K8s, wl: Obj, attempt: int = 1, test: Any = None, timeout: float = 60.0) -> Obj:
    name = f"{wl['metadata']['name']}-{CHECK}-{attempt}"

    def probe() -> Obj | None:
        found = next((r for r in provisioning_requests(k8s.custom, NS) if r["metadata"]["name"] == name), None)
        return found if found is not None and (test is None or test(found)) else None

    return wait_for(probe, timeout)


def _events(k8s: K8s, name: str) -> list[client.CoreV1Event]:
    items: list[client.CoreV1Event] = k8s.core.list_namespaced_event(
        NS, field_selector=f"involvedObject.name={name}"
    ).items
    return items


def test_the_admission_check_is_active_once_its_config_exists(k8s: K8s) -> None:
    k8s.custom.create_cluster_custom_object(
        KUEUE,
        V,
        "admissionchecks",
        {
            "metadata": {"name": "orphan-check"},
            "spec": {
                "controllerName": "kueue.x-k8s.io/provisioning-request",
                "parameters": {"apiGroup": KUEUE, "kind": "ProvisioningRequestConfig", "name": "later"},
            },
        },
    )

    def active(status: str) -> Obj | None:
        check = k8s.custom.get_cluster_custom_object(KUEUE, V, "admissionchecks", "orphan-check")
        found = _cond(check, "Active")
        return found if found is not None and found["status"] == status else None

    refused = wait_for(lambda: active("False"), 30)
    assert refused["reason"] == "BadParametersRef"
    assert refused["message"] == 'provisioningrequestconfigs.kueue.x-k8s.io "later" not found'
    create_flex_check(k8s.custom, "orphan-check", "later", managed_resource="cpu")
    ready = wait_for(lambda: active("True"), 30)
    assert (ready["reason"], ready["message"]) == ("Active", "The admission check is active")
    config = k8s.custom.get_cluster_custom_object(KUEUE, V, "provisioningrequestconfigs", "later")
    assert config["spec"]["retryStrategy"] == {
        "backoffLimitCount": 3,
        "backoffBaseSeconds": 60,
        "backoffMaxSeconds": 1800,
    }


def test_a_flex_jobset_waits_for_provisioning_then_runs_on_the_new_nodes(k8s: K8s) -> None:
    queue = _flex_queue(k8s, CHECK, "dws-config")
    name = unique("flex")
    JobSets(k8s.custom).create(_flex_jobset(name, queue))
    # Quota reserved, the check Pending: no Admitted condition, the JobSet still suspended.
    wl = _wait_workload(k8s, name, lambda w: _true(w, "QuotaReserved") and _check(w) is not None)
    assert _cond(wl, "Admitted") is None
    assert _check(wl)["state"] == "Pending"  # type: ignore[index]
    assert JobSets(k8s.custom).get(name)["spec"]["suspend"] is True
    request = _request_of(k8s, wl, test=lambda r: _cond(r, "Accepted") is not None)
    assert request["spec"]["provisioningClassName"] == "queued-provisioning.gke.io"
    assert request["metadata"]["labels"] == {"kueue.x-k8s.io/managed": "true"}
    assert request["metadata"]["ownerReferences"][0]["name"] == wl["metadata"]["name"]
    [pod_set] = request["spec"]["podSets"]
    assert pod_set["count"] == 2
    template = k8s.core.read_namespaced_pod_template(pod_set["podTemplateRef"]["name"], NS)
    assert template.metadata.name == f"ppt-{request['metadata']['name']}-workers"
    assert template.template.spec.node_selector == FLEX_NODE_SELECTOR
    accepted = _cond(request, "Accepted")
    assert (accepted or {})["message"] == "ProvisioningRequest is accepted by ClusterAutoscaler"
    # Provisioned: the check is Ready with the pod-set updates, the Workload admitted, the JobSet started.
    admitted = _wait_workload(k8s, name, lambda w: _true(w, "Admitted"))
    check = _check(admitted)
    assert check is not None and check["state"] == "Ready"
    assert check["message"] == "Capacity is found in the cluster"
    provisioned = _request_of(k8s, wl, test=lambda r: _true(r, "Provisioned"))
    resize = provisioned["status"]["provisioningClassDetails"]["ResizeRequestName"]
    [update] = check["podSetUpdates"]
    assert update["name"] == "workers"
    assert update["nodeSelector"] == {LABEL_PROVISIONING_REQUEST: resize}
    assert update["annotations"] == {
        "autoscaling.x-k8s.io/consume-provisioning-request": provisioned["metadata"]["name"],
        "autoscaling.x-k8s.io/provisioning-class-name": "queued-provisioning.gke.io",
    }

    def running() -> list[client.V1Pod] | None:
        pods = [p for p in pods_of(k8s.core, f"{LABEL_JOBSET_NAME}={name}") if p.status.phase == "Running"]
        return pods if len(pods) == 2 else None

    pods = wait_for(running, 60)
    nodes = {p.spec.node_name for p in pods}
    for node in nodes:
        labels = k8s.core.read_node(node).metadata.labels
        assert labels[LABEL_PROVISIONING_REQUEST] == resize and labels["cloud.google.com/gke-queued"] == "true"
    for pod in pods:
        assert pod.metadata.labels["kueue.x-k8s.io/podset"] == "workers"
        assert (
            pod.metadata.annotations["autoscaling.x-k8s.io/consume-provisioning-request"]
            == provisioned["metadata"]["name"]
        )
    reasons = [e.reason for e in _events(k8s, wl["metadata"]["name"])]
    assert "ProvisioningRequestCreated" in reasons and "Admitted" in reasons
    updated = [e.message for e in _events(k8s, wl["metadata"]["name"]) if e.reason == "AdmissionCheckUpdated"]
    assert (
        f"Admission check {CHECK} updated state from Pending to Ready with message: Capacity is found in the cluster"
        in updated
    )


def test_a_failed_request_without_retries_deactivates_the_workload(k8s: K8s, cluster: LocalCluster) -> None:
    check, config = unique("no-retry"), unique("no-retry-config")
    queue = _flex_queue(k8s, check, config, retry={"backoffLimitCount": 0})
    cluster.faults.provisioning("fail", message="GCE out of resources in the zone")
    name = unique("flex-fails")
    JobSets(k8s.custom).create(_flex_jobset(name, queue))
    wl = _wait_workload(k8s, name, lambda w: _true(w, "Evicted"))
    evicted = _cond(wl, "Evicted")
    assert evicted is not None and evicted["reason"] == "DeactivatedDueToAdmissionCheck"
    assert evicted["message"] == f"The workload is deactivated due to Admission check(s): {check}, were rejected"
    assert wl["spec"]["active"] is False
    assert _cond(wl, "DeactivationTarget") is None
    released = _wait_workload(k8s, name, lambda w: _cond(w, "QuotaReserved")["status"] == "False")  # type: ignore[index]
    requeued = _cond(released, "Requeued")
    assert requeued is not None and (requeued["status"], requeued["reason"]) == (
        "False",
        "DeactivatedDueToAdmissionCheck",
    )
    state = next(c for c in released["status"]["admissionChecks"] if c["name"] == check)
    assert state["state"] == "Pending" and state["message"] == "Reset to Pending after eviction. Previously: Rejected"
    rejected = [e.message for e in _events(k8s, wl["metadata"]["name"]) if e.reason == "AdmissionCheckRejected"]
    assert rejected == [
        f"Deactivating workload because AdmissionCheck for {check} was Rejected: GCE out of resources in the zone"
    ]
    assert JobSets(k8s.custom).get(name)["spec"]["suspend"] is True


def test_a_failed_request_is_retried_and_the_next_attempt_provisions(k8s: K8s, cluster: LocalCluster) -> None:
    check, config = unique("retry"), unique("retry-config")
    retry = {"backoffLimitCount": 1, "backoffBaseSeconds": 1, "backoffMaxSeconds": 1}
    queue = _flex_queue(k8s, check, config, retry=retry)
    cluster.faults.provisioning("fail", message="stockout")
    name = unique("flex-retry")
    JobSets(k8s.custom).create(_flex_jobset(name, queue))
    admitted = _wait_workload(k8s, name, lambda w: _true(w, "Admitted"), timeout=90)
    events = [(e.reason, e.message) for e in _events(k8s, admitted["metadata"]["name"])]
    assert ("EvictedDueToAdmissionCheck", "At least one admission check is false") in events
    retrying = (
        f"Admission check {check} updated state from Pending to Retry with message: Retrying after failure: stockout"
    )
    assert ("AdmissionCheckUpdated", retrying) in events
    previously = _cond(admitted, "Evicted")
    assert previously is not None and previously["message"] == "Previously: At least one admission check is false"
    state = next(c for c in admitted["status"]["admissionChecks"] if c["name"] == check)
    assert state["state"] == "Ready" and state["retryCount"] == 1
    names = sorted(r["metadata"]["name"] for r in provisioning_requests(k8s.custom, NS))
    assert f"{admitted['metadata']['name']}-{check}-2" in names
    assert f"{admitted['metadata']['name']}-{check}-1" not in names  # the failed attempt is deleted


def test_capacity_revoked_mid_run_deactivates_and_stops_the_jobset(k8s: K8s, cluster: LocalCluster) -> None:
    check, config = unique("revoke"), unique("revoke-config")
    queue = _flex_queue(k8s, check, config)
    name = unique("flex-revoked")
    JobSets(k8s.custom).create(_flex_jobset(name, queue))
    wl = _wait_workload(k8s, name, lambda w: _true(w, "Admitted"))
    wait_for(
        lambda: (
            len([p for p in pods_of(k8s.core, f"{LABEL_JOBSET_NAME}={name}") if p.status.phase == "Running"]) == 2
            or None
        ),
        60,
    )
    request = f"{wl['metadata']['name']}-{check}-1"
    result = cluster.faults.provisioning("revoke", namespace=NS, name=request, message="maxRunDuration reached")
    assert len(result["failedPods"]) == 2 and len(result["nodes"]) == 2
    revoked = _wait_workload(k8s, name, lambda w: _true(w, "Evicted"))
    evicted = _cond(revoked, "Evicted")
    assert evicted is not None and evicted["reason"] == "DeactivatedDueToAdmissionCheck"
    rejected = [e.message for e in _events(k8s, wl["metadata"]["name"]) if e.reason == "AdmissionCheckRejected"]
    assert rejected == [
        f"Deactivating workload because AdmissionCheck for {check} was Rejected: maxRunDuration reached"
    ]
    wait_for(lambda: JobSets(k8s.custom).get(name)["spec"]["suspend"] is True or None, 30)
    for node in result["nodes"]:
        with pytest.raises(client.ApiException) as gone:
            k8s.core.read_node(node)
        assert gone.value.status == 404


def test_a_jobset_without_a_label_joins_the_namespaces_default_local_queue(k8s: K8s) -> None:
    namespace = unique("defaulted")
    k8s.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    _cpu_queue(k8s, 4, namespace, "default")
    rjob = job_template("sleep 300", grace=1)
    rjob["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    name = unique("unlabelled")
    created = k8s.custom.create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", jobset_manifest(name, {"workers": rjob})
    )
    assert created["metadata"]["labels"] == {LABEL_KUEUE_QUEUE_NAME: "default"}
    assert created["spec"]["suspend"] is True
    assert is_queued_jobset(created)  # so the operator reads it as queued, not "no label: nothing will admit it"

    def admitted() -> Obj | None:
        items = k8s.custom.list_namespaced_custom_object(KUEUE, V, namespace, "workloads")["items"]
        return next((w for w in items if _true(w, "Admitted")), None)

    wl = wait_for(admitted, 30)
    assert wl["spec"]["queueName"] == "default"
    assert wl["metadata"]["finalizers"] == ["kueue.x-k8s.io/resource-in-use"]
    wait_for(
        lambda: (
            k8s.custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", name)["spec"][
                "suspend"
            ]
            is False
            or None
        ),
        30,
    )
    # A foreground delete waits for Kueue to drop its finalizer from the Workload, then completes.
    k8s.custom.delete_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", name, propagation_policy="Foreground"
    )

    def gone() -> bool | None:
        try:
            k8s.custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", name)
        except client.ApiException as err:
            return True if err.status == 404 else None
        return None

    wait_for(gone, 60)
    assert k8s.custom.list_namespaced_custom_object(KUEUE, V, namespace, "workloads")["items"] == []
