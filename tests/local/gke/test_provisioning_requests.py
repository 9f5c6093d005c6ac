"""GKE's ProvisioningRequest responder under the real Kueue (v0.17.0) and the real JobSet controller.

The stand-in (:mod:`elastic_training.local.gke.provisioning_requests`) sets the conditions the cluster autoscaler
sets; what Kueue makes of them (its admission check's state, retries, rejection, deactivation) and what the
scheduler and pod GC do with the nodes are the upstream components'. Every assertion reads what they wrote.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from elastic_training.local.upstream_cluster import UpstreamCluster
from tests.support.control_plane import NS, JobSets, unique
from tests.support.flex import FLEX_NODE_SELECTOR, LABEL_PROVISIONING_REQUEST, provisioning_requests
from tests.support.gke_flex import (
    KUEUE,
    V,
    check_state,
    condition,
    events,
    flex_jobset,
    flex_queue,
    running_pods,
    true,
    wait_request,
    wait_workload,
)
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

CHECK, QUEUE = "dws-prov", "flex-queue"  # the description's (tests/local/gke/flex.yaml)


@pytest.fixture(autouse=True)
def _no_jobset_left(k8s: K8s, cluster: UpstreamCluster) -> Iterator[None]:
    yield
    cluster.faults.clear_provisioning_rules()
    JobSets(k8s.custom).delete_all()
    wait_for(lambda: not k8s.custom.list_namespaced_custom_object(KUEUE, V, NS, "workloads")["items"], 120)


def _queued_nodes(k8s: K8s) -> list[client.V1Node]:
    items: list[client.V1Node] = k8s.core.list_node(label_selector="cloud.google.com/gke-queued=true").items
    return items


def test_a_flex_jobset_is_admitted_once_its_request_is_provisioned_and_runs_on_the_new_nodes(k8s: K8s) -> None:
    assert _queued_nodes(k8s) == []  # queued pools have no nodes until a request asks
    name = unique("flex")
    JobSets(k8s.custom).create(flex_jobset(name, QUEUE))
    wl = wait_workload(k8s, name, lambda w: true(w, "QuotaReserved") and check_state(w, CHECK) is not None)
    request = wait_request(k8s, wl, CHECK, test=lambda r: condition(r, "Accepted") is not None)
    assert request["spec"]["provisioningClassName"] == "queued-provisioning.gke.io"
    [pod_set] = request["spec"]["podSets"]
    assert pod_set["count"] == 2
    template = k8s.core.read_namespaced_pod_template(pod_set["podTemplateRef"]["name"], NS)
    assert template.template.spec.node_selector == FLEX_NODE_SELECTOR
    admitted = wait_workload(k8s, name, lambda w: true(w, "Admitted"))
    provisioned = wait_request(k8s, wl, CHECK, test=lambda r: true(r, "Provisioned"))
    resize = provisioned["status"]["provisioningClassDetails"]["ResizeRequestName"]
    check = check_state(admitted, CHECK)
    assert check is not None and check["state"] == "Ready"
    [update] = check["podSetUpdates"]
    assert update["nodeSelector"] == {LABEL_PROVISIONING_REQUEST: resize}
    pods = running_pods(k8s, name, 2)
    for pod in pods:
        labels = k8s.core.read_node(pod.spec.node_name).metadata.labels
        assert labels[LABEL_PROVISIONING_REQUEST] == resize
        assert labels["cloud.google.com/gke-queued"] == "true"
        assert pod.spec.node_selector[LABEL_PROVISIONING_REQUEST] == resize
    reasons = [reason for reason, _ in events(k8s, wl["metadata"]["name"])]
    assert "ProvisioningRequestCreated" in reasons and "Admitted" in reasons
    # Done with: the Workload goes with its JobSet, the request with it (owner references), then its nodes.
    JobSets(k8s.custom).delete(name)
    wait_for(lambda: _queued_nodes(k8s) == [], 120)


def test_a_failed_request_without_retries_deactivates_the_workload(k8s: K8s, cluster: UpstreamCluster) -> None:
    queue, check = flex_queue(k8s, retry={"backoffLimitCount": 0})
    cluster.faults.provisioning("fail", message="GCE out of resources in the zone")
    name = unique("flex-fails")
    JobSets(k8s.custom).create(flex_jobset(name, queue))
    wl = wait_workload(k8s, name, lambda w: true(w, "Evicted"))
    failed = condition(wait_request(k8s, wl, check, test=lambda r: true(r, "Failed")), "Failed")
    assert failed is not None and failed["message"] == "GCE out of resources in the zone"
    evicted = condition(wl, "Evicted")
    assert evicted is not None and evicted["reason"] == "DeactivatedDueToAdmissionCheck"
    assert evicted["message"] == f"The workload is deactivated due to Admission check(s): {check}, were rejected"
    assert wl["spec"]["active"] is False
    released = wait_workload(k8s, name, lambda w: not true(w, "QuotaReserved"))
    requeued = condition(released, "Requeued")
    assert requeued is not None and (requeued["status"], requeued["reason"]) == (
        "False",
        "DeactivatedDueToAdmissionCheck",
    )
    state = check_state(released, check)
    assert state is not None and state["state"] == "Pending"
    assert state["message"] == "Reset to Pending after eviction. Previously: Rejected"
    assert (
        "AdmissionCheckRejected",
        f"Deactivating workload because AdmissionCheck for {check} was Rejected: GCE out of resources in the zone",
    ) in events(k8s, wl["metadata"]["name"])
    assert JobSets(k8s.custom).get(name)["spec"]["suspend"] is True


def test_a_failed_request_is_retried_and_the_next_attempt_provisions(k8s: K8s, cluster: UpstreamCluster) -> None:
    queue, check = flex_queue(k8s, retry={"backoffLimitCount": 1, "backoffBaseSeconds": 1, "backoffMaxSeconds": 1})
    cluster.faults.provisioning("fail", message="stockout")
    name = unique("flex-retry")
    JobSets(k8s.custom).create(flex_jobset(name, queue))
    admitted = wait_workload(k8s, name, lambda w: true(w, "Admitted"), timeout=120)
    recorded = events(k8s, admitted["metadata"]["name"])
    retrying = (
        f"Admission check {check} updated state from Pending to Retry with message: Retrying after failure: stockout"
    )
    assert ("AdmissionCheckUpdated", retrying) in recorded
    assert ("EvictedDueToAdmissionCheck", "At least one admission check is false") in recorded
    state = check_state(admitted, check)
    assert state is not None and (state["state"], state["retryCount"]) == ("Ready", 1)
    names = [r["metadata"]["name"] for r in provisioning_requests(k8s.custom, NS)]
    assert f"{admitted['metadata']['name']}-{check}-2" in names
    assert f"{admitted['metadata']['name']}-{check}-1" not in names  # Kueue deleted the failed attempt
    running_pods(k8s, name, 2)


def test_capacity_revoked_mid_run_deactivates_the_workload(k8s: K8s, cluster: UpstreamCluster) -> None:
    queue, check = flex_queue(k8s)
    name = unique("flex-revoked")
    JobSets(k8s.custom).create(flex_jobset(name, queue))
    wl = wait_workload(k8s, name, lambda w: true(w, "Admitted"))
    running_pods(k8s, name, 2)
    request = f"{wl['metadata']['name']}-{check}-1"
    result = cluster.faults.provisioning("revoke", namespace=NS, name=request, message="maxRunDuration reached")
    assert len(result["nodes"]) == 2 and len(result["pods"]) == 2
    revoked = wait_workload(k8s, name, lambda w: true(w, "Evicted"))
    evicted = condition(revoked, "Evicted")
    assert evicted is not None and evicted["reason"] == "DeactivatedDueToAdmissionCheck"
    assert revoked["spec"]["active"] is False
    recorded = events(k8s, wl["metadata"]["name"])
    rejected = f"Admission check {check} updated state from Ready to Rejected with message: maxRunDuration reached"
    assert ("AdmissionCheckUpdated", rejected) in recorded
    assert (
        "AdmissionCheckRejected",
        f"Deactivating workload because AdmissionCheck for {check} was Rejected: maxRunDuration reached",
    ) in recorded
    wait_for(lambda: JobSets(k8s.custom).get(name)["spec"]["suspend"] is True or None, 60)
    for node in result["nodes"]:
        with pytest.raises(client.ApiException) as gone:
            k8s.core.read_node(node)
        assert gone.value.status == 404
    # Pod GC deletes the pods bound to the deleted nodes (orphaned), and the JobSet's Jobs are gone with the suspend.
    wait_for(lambda: not [p for p in result["pods"] if _exists(k8s, p)], 120)


def test_a_rule_is_refused_when_its_outcome_is_unknown(cluster: UpstreamCluster) -> None:
    with pytest.raises(ValueError, match="outcome must be one of fail, delay, expire, revoke"):
        cluster.faults.provisioning("explode")


def _exists(k8s: K8s, pod: str) -> bool:
    namespace, name = pod.split("/")
    try:
        k8s.core.read_namespaced_pod(name, namespace)
    except client.ApiException as err:
        if err.status == 404:
            return False
        raise
    return True
