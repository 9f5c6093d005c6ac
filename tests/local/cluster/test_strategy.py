"""One create strategy for API requests and controllers: what a controller creates reads like what
the API server would have stored (defaults, status reset, validation) from its first event on."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client, watch

from elastic_training.operators.constants import LABEL_CONTROLLER_UID, LABEL_JOB_NAME
from tests.support.cluster_objects import job_body
from tests.support.control_plane import NS, container, unique
from tests.support.local_cluster import K8s

Obj = dict[str, Any]


def _first_added(k8s: K8s, selector: str, resource_version: str) -> Obj:
    stream = watch.Watch()
    try:
        for event in stream.stream(
            k8s.core.list_namespaced_pod,
            NS,
            label_selector=selector,
            resource_version=resource_version,
            timeout_seconds=60,
        ):
            if event["type"] == "ADDED":
                raw: Obj = event["raw_object"]
                return raw
    finally:
        stream.stop()
    raise AssertionError("no ADDED event within 60 s")


def test_a_pod_made_by_the_job_controller_is_pending_from_its_first_event(k8s: K8s) -> None:
    name = unique("strategy-job")
    since = k8s.core.list_namespaced_pod(NS).metadata.resource_version
    body = job_body(name, suspend=False)
    body["spec"]["template"]["spec"]["containers"] = [container("main", "sleep 0.2")]
    k8s.batch.create_namespaced_job(NS, body)
    pod = _first_added(k8s, f"{LABEL_JOB_NAME}={name}", since)
    assert pod["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    assert pod["spec"]["terminationGracePeriodSeconds"] == 30
    assert pod["spec"]["dnsPolicy"] == "ClusterFirst" and pod["spec"]["restartPolicy"] == "Never"
    k8s.batch.delete_namespaced_job(name, NS, propagation_policy="Background")


def test_the_api_answers_a_created_job_with_defaults_and_selector(k8s: K8s) -> None:
    name = unique("strategy-defaults")
    body = job_body(name)
    del body["spec"]["backoffLimit"]
    created = k8s.batch.create_namespaced_job(NS, body)
    spec = created.spec
    assert (spec.completions, spec.parallelism, spec.backoff_limit) == (1, 1, 6)
    assert spec.completion_mode == "NonIndexed" and spec.suspend is True
    uid = created.metadata.uid
    assert spec.selector.match_labels == {LABEL_CONTROLLER_UID: uid}
    labels = spec.template.metadata.labels
    assert labels[LABEL_CONTROLLER_UID] == uid and labels[LABEL_JOB_NAME] == name
    assert spec.template.spec.termination_grace_period_seconds == 30
    assert created.status == client.V1JobStatus()
    k8s.batch.delete_namespaced_job(name, NS)


def test_client_status_on_create_is_reset(k8s: K8s) -> None:
    name = unique("strategy-status")
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [container("main", "true")]},
        "status": {"phase": "Succeeded"},
    }
    created = k8s.core.create_namespaced_pod(NS, pod)
    assert created.status.phase == "Pending"
    k8s.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)


def test_an_invalid_object_is_refused_with_its_causes(k8s: K8s) -> None:
    body = job_body(unique("strategy-invalid"))
    body["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    with pytest.raises(client.ApiException) as caught:
        k8s.batch.create_namespaced_job(NS, body)
    assert caught.value.status == 422 and "spec.template.spec.restartPolicy" in caught.value.body
