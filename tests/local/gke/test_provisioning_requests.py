"""GKE's node provisioning on the flex cluster (``flex.yaml``), under the real Kueue (v0.17.0), kube-scheduler and
JobSet controller: the ProvisioningRequest responder, and the pools provisioned on demand (the scale-up a pending pod
triggers, the ``provision-on-demand`` fault through the fault endpoint). One module, so one cluster start for both.

The stand-in (:mod:`elastic_training.local.gke`) sets the conditions the cluster autoscaler sets and creates and
deletes the pools' nodes; what Kueue makes of them (its admission check's state, retries, rejection, deactivation)
and what the scheduler and pod GC do with the nodes are the upstream components'. Every assertion reads what they
wrote.

The order is the module's: the first test revokes a run's capacity, and pod GC's quarantine for the pods of its
deleted nodes (40 s, no flag) runs while the tests that create no queued-provisioning node do; then the pod GC test
waits for what is left of it, before any test provisions a queued pool again (its nodes would come back under the
revoked nodes' names).
"""

from __future__ import annotations

import asyncio
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from elastic_training.local.gke.informer import Informer
from elastic_training.local.upstream_cluster import UpstreamCluster
from tests.support.cluster_faults import control
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
NODEPOOL = "cloud.google.com/gke-nodepool"
DELAY = 2.0  # the burst pool's delaySeconds (flex.yaml)


@pytest.fixture(autouse=True)
def _no_jobset_left(k8s: K8s, cluster: UpstreamCluster) -> Iterator[None]:
    yield
    cluster.faults.clear_provisioning_rules()
    JobSets(k8s.custom).delete_all()
    wait_for(lambda: not k8s.custom.list_namespaced_custom_object(KUEUE, V, NS, "workloads")["items"], 120)


def _queued_nodes(k8s: K8s) -> list[client.V1Node]:
    items: list[client.V1Node] = k8s.core.list_node(label_selector="cloud.google.com/gke-queued=true").items
    return items


@dataclass(frozen=True)
class Revoked:
    """A flex run whose capacity was revoked: its JobSet, check and Workload, and the fault's answer (the deleted
    nodes and the pods that were on them)."""

    name: str
    check: str
    workload: str
    nodes: list[str]
    pods: list[str]


@pytest.fixture(scope="module")
def revoked(k8s: K8s, cluster: UpstreamCluster) -> Revoked:
    """Made by the module's first test, so that pod GC's quarantine for the revoked nodes' pods (40 s, no flag)
    runs while the next tests do: the pod GC test waits for what is left of it."""
    queue, check = flex_queue(k8s)
    name = unique("flex-revoked")
    JobSets(k8s.custom).create(flex_jobset(name, queue))
    wl = wait_workload(k8s, name, lambda w: true(w, "Admitted"))
    running_pods(k8s, name, 2)
    request = f"{wl['metadata']['name']}-{check}-1"
    result = cluster.faults.provisioning("revoke", namespace=NS, name=request, message="maxRunDuration reached")
    return Revoked(name, check, wl["metadata"]["name"], result["nodes"], result["pods"])


# First in the module: the fixture's revocation starts pod GC's quarantine (see the pod GC test).
def test_capacity_revoked_mid_run_deactivates_the_workload(k8s: K8s, revoked: Revoked) -> None:
    name, check = revoked.name, revoked.check
    assert len(revoked.nodes) == 2 and len(revoked.pods) == 2
    wl = wait_workload(k8s, name, lambda w: true(w, "Evicted"))
    evicted = condition(wl, "Evicted")
    assert evicted is not None and evicted["reason"] == "DeactivatedDueToAdmissionCheck"
    assert wl["spec"]["active"] is False
    recorded = events(k8s, revoked.workload)
    rejected = f"Admission check {check} updated state from Ready to Rejected with message: maxRunDuration reached"
    assert ("AdmissionCheckUpdated", rejected) in recorded
    assert (
        "AdmissionCheckRejected",
        f"Deactivating workload because AdmissionCheck for {check} was Rejected: maxRunDuration reached",
    ) in recorded
    wait_for(lambda: JobSets(k8s.custom).get(name)["spec"]["suspend"] is True or None, 60)
    for node in revoked.nodes:
        with pytest.raises(client.ApiException) as gone:
            k8s.core.read_node(node)
        assert gone.value.status == 404


def test_an_on_demand_pool_has_no_nodes_until_an_unschedulable_pod_needs_them(k8s: K8s) -> None:
    assert _nodes(k8s, "burst") == []
    name = unique("wants-burst")
    k8s.core.create_namespaced_pod(NS, _pod(name, "burst"))

    def scale_up() -> list[client.CoreV1Event]:
        listed = k8s.core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name}").items
        return [e for e in listed if e.reason == "TriggeredScaleUp"]

    [event] = wait_for(scale_up, 60)
    assert event.message == "pod triggered scale-up: [{burst 0->2 (max: 2)}]"
    assert event.source.component == "cluster-autoscaler"
    scheduled = next(c for c in k8s.core.read_namespaced_pod(name, NS).status.conditions if c.type == "PodScheduled")
    assert (scheduled.status, scheduled.reason) == ("False", "Unschedulable")  # kube-scheduler's, before the nodes
    wait_for(lambda: _phase(k8s, name) == "Running", 90)
    nodes = _nodes(k8s, "burst")
    assert len(nodes) == 2
    assert k8s.core.read_namespaced_pod(name, NS).spec.node_name in {n.metadata.name for n in nodes}
    created = min(n.metadata.creation_timestamp for n in nodes)
    assert (created - event.first_timestamp).total_seconds() >= DELAY - 1  # second-resolution stamps
    k8s.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)


def test_the_fault_takes_an_idle_pools_nodes_away_until_a_pod_asks(k8s: K8s, cluster: UpstreamCluster) -> None:
    busy = unique("on-spare")
    k8s.core.create_namespaced_pod(NS, _pod(busy, "spare"))
    wait_for(lambda: _phase(k8s, busy) == "Running", 60)
    with pytest.raises(urllib.error.HTTPError) as refused:
        control(cluster, "provision-on-demand", {"nodePool": "spare", "seconds": 1})
    assert refused.value.code == 400
    assert f"node pool spare runs 1 pod(s) (default/{busy})" in refused.value.read().decode()
    k8s.core.delete_namespaced_pod(busy, NS, grace_period_seconds=0)
    wait_for(lambda: not k8s.core.list_namespaced_pod(NS, field_selector=f"metadata.name={busy}").items, 60)
    answer = control(cluster, "provision-on-demand", {"nodePool": "spare", "seconds": 1})
    assert answer == {"nodePool": "spare", "nodes": ["gke-flex-spare-0"], "seconds": 1.0, "queued": False}
    assert _nodes(k8s, "spare") == []
    back = unique("back-on-spare")
    k8s.core.create_namespaced_pod(NS, _pod(back, "spare"))
    wait_for(lambda: _phase(k8s, back) == "Running", 90)
    assert [n.metadata.name for n in _nodes(k8s, "spare")] == ["gke-flex-spare-0"]
    k8s.core.delete_namespaced_pod(back, NS, grace_period_seconds=0)


def test_a_queued_pool_is_never_scaled_up_for_a_pod(k8s: K8s, cluster: UpstreamCluster) -> None:
    name = unique("wants-flex")
    k8s.core.create_namespaced_pod(NS, _pod(name, "flex-a"))
    scheduled = wait_for(
        lambda: next(
            (c for c in k8s.core.read_namespaced_pod(name, NS).status.conditions or [] if c.type == "PodScheduled"),
            None,
        ),
        60,
    )
    assert scheduled.reason == "Unschedulable"
    answer = control(cluster, "provisioning", {"outcome": "delay", "seconds": 1})
    assert answer == {"outcome": "delay", "count": 1, "seconds": 1.0}
    assert cluster.faults.clear_provisioning_rules() == [{"outcome": "delay", "count": 1, "seconds": 1.0}]
    events = k8s.core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name}").items
    assert "TriggeredScaleUp" not in [e.reason for e in events]
    assert _nodes(k8s, "flex-a") == []
    k8s.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)


def test_a_failed_request_without_retries_deactivates_the_workload(k8s: K8s, cluster: UpstreamCluster) -> None:
    queue, check = flex_queue(k8s, retry={"backoffLimitCount": 0})
    cluster.faults.provisioning("fail", message="GCE out of resources in the zone")
    later = cluster.faults.provisioning("delay", seconds=60)  # for the next request: none, as Kueue makes no other
    name = unique("flex-fails")
    JobSets(k8s.custom).create(flex_jobset(name, queue))
    wl = wait_workload(k8s, name, lambda w: true(w, "Evicted"))
    failed = condition(wait_request(k8s, wl, check, test=lambda r: true(r, "Failed")), "Failed")
    assert failed is not None and failed["message"] == "GCE out of resources in the zone"
    # The failed request gave its pools back for good. The responder once read a stale copy of it (its cache, or a
    # watch event older than its own Failed), saw it waiting, booked it again (taking the next rule) and provisioned it.
    assert cluster.faults.clear_provisioning_rules() == [later]
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


def test_a_rule_is_refused_when_its_outcome_is_unknown(cluster: UpstreamCluster) -> None:
    with pytest.raises(ValueError, match="outcome must be one of fail, delay, expire, revoke"):
        cluster.faults.provisioning("explode")


# After the tests that create no queued-provisioning node: what is left of pod GC's quarantine for the revoked
# nodes' pods; the tests below provision queued pools again.
def test_pod_gc_deletes_the_pods_the_revoked_nodes_ran(k8s: K8s, revoked: Revoked) -> None:
    """Pod GC deletes the pods bound to the revoked (deleted) nodes: orphaned, and the suspend's Jobs gone."""
    # Pod GC looks every 20 s (no flag): polling each second costs the loaded machine less and loses nothing.
    wait_for(lambda: not [p for p in revoked.pods if _exists(k8s, p)], 120, interval=1.0)


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


def _pod(name: str, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {NODEPOOL: pool},
            "containers": [{"name": "main", "image": "local", "command": ["sh", "-c", "sleep 300"]}],
        },
    }


def _nodes(k8s: K8s, pool: str) -> list[client.V1Node]:
    items: list[client.V1Node] = k8s.core.list_node(label_selector=f"{NODEPOOL}={pool}").items
    return items


def _phase(k8s: K8s, name: str) -> str:
    return str(k8s.core.read_namespaced_pod(name, NS).status.phase)


def _exists(k8s: K8s, pod: str) -> bool:
    namespace, name = pod.split("/")
    try:
        k8s.core.read_namespaced_pod(name, namespace)
    except client.ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def test_an_informer_stopped_while_its_watch_opens_ends_at_once(k8s: K8s) -> None:
    """The stand-ins' informer, stopped between its watch's request and its response: the watch, once open, is not
    read. It was, until the server ended it 240 s later, so each cluster's stop waited 5 s for the thread and left
    it running."""
    loop = asyncio.new_event_loop()
    stoppers: list[threading.Thread] = []

    def list_pods(**kwargs: Any) -> Any:
        response = k8s.core.list_namespaced_pod(NS, **kwargs)
        if kwargs.get("watch"):
            stoppers.append(threading.Thread(target=informer.stop))
            stoppers[0].start()
            stoppers[0].join(timeout=0.5)  # stop() found no response yet, and waits for this thread
        return response

    informer = Informer("stop-race", list_pods, loop, lambda kind, obj: None)
    try:
        informer.start()
        wait_for(lambda: bool(stoppers), 30)
        stoppers[0].join(timeout=30)
        assert not [t for t in threading.enumerate() if t.name == "informer-stop-race"]
    finally:
        loop.close()
