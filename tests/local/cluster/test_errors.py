"""Errors leave as Kubernetes ``Status`` bodies with the codes and reasons the real API server uses."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from elastic_training.local.cluster import LocalCluster
from tests.support.cluster_objects import jobset_body, pod
from tests.support.local_cluster import K8s


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(workdir=tmp_path_factory.mktemp("errors"), run_control_plane=False) as running:
        yield running


def _status(error: client.ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(error.body)
    assert body["kind"] == "Status" and body["status"] == "Failure" and body["code"] == error.status
    return body


def _raw(
    cluster: LocalCluster, method: str, path: str, body: bytes | None = None, **headers: str
) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {cluster.token}", "Content-Type": "application/json", **headers}
    request = urllib.request.Request(cluster.url + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10, context=cluster.ssl_context()) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_not_found(k8s: K8s) -> None:
    with pytest.raises(client.ApiException) as caught:
        k8s.core.read_namespaced_pod("missing", "default")
    body = _status(caught.value)
    assert (caught.value.status, body["reason"], body["details"]["name"]) == (404, "NotFound", "missing")
    with pytest.raises(client.ApiException) as caught:
        k8s.custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "default", "jobsets", "missing")
    assert _status(caught.value)["details"] == {"name": "missing", "group": "jobset.x-k8s.io", "kind": "jobsets"}


def test_duplicate_create_is_already_exists(k8s: K8s) -> None:
    k8s.core.create_namespaced_pod("default", pod("err-dup"))
    with pytest.raises(client.ApiException) as caught:
        k8s.core.create_namespaced_pod("default", pod("err-dup"))
    assert (caught.value.status, _status(caught.value)["reason"]) == (409, "AlreadyExists")


def test_stale_resource_version_is_conflict(k8s: K8s) -> None:
    created = k8s.core.create_namespaced_pod("default", pod("err-stale"))
    k8s.core.patch_namespaced_pod("err-stale", "default", {"metadata": {"labels": {"a": "b"}}})
    with pytest.raises(client.ApiException) as caught:
        k8s.core.replace_namespaced_pod("err-stale", "default", created)
    assert (caught.value.status, _status(caught.value)["reason"]) == (409, "Conflict")
    with pytest.raises(client.ApiException) as caught:
        k8s.core.patch_namespaced_pod(
            "err-stale", "default", {"metadata": {"resourceVersion": created.metadata.resource_version}}
        )
    assert caught.value.status == 409


def test_invalid_object_names_the_field(k8s: K8s) -> None:
    body = jobset_body("err-invalid", replicas=-1)
    with pytest.raises(client.ApiException) as caught:
        k8s.custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "default", "jobsets", body)
    status = _status(caught.value)
    assert status["reason"] == "Invalid"
    assert [c["field"] for c in status["details"]["causes"]] == ["spec.replicatedJobs[0].replicas"]


def test_bad_requests(cluster: LocalCluster, k8s: K8s) -> None:
    code, body = _raw(cluster, "POST", "/api/v1/namespaces/default/pods", b"{not json")
    assert (code, body["reason"]) == (400, "BadRequest")
    code, body = _raw(cluster, "POST", "/api/v1/namespaces/default/pods", json.dumps({"kind": "Job"}).encode())
    assert code == 400
    code, body = _raw(cluster, "GET", "/api/v1/namespaces/default/pods?watch=true&resourceVersion=abc")
    assert code == 400
    with pytest.raises(client.ApiException) as caught:
        k8s.core.read_namespaced_pod_log("err-dup", "default", tail_lines=-1)
    assert caught.value.status == 400


def test_unknown_paths_methods_and_media_types(cluster: LocalCluster) -> None:
    assert _raw(cluster, "GET", "/api/v1/widgets")[0] == 404
    assert _raw(cluster, "GET", "/apis/example.com/v1")[0] == 404
    code, body = _raw(cluster, "POST", "/api/v1/namespaces/default/pods/err-dup", b"{}")
    assert (code, body["reason"]) == (405, "MethodNotAllowed")
    code, body = _raw(
        cluster,
        "PATCH",
        "/api/v1/namespaces/default/pods/err-dup",
        b"{}",
        **{"Content-Type": "application/yaml"},
    )
    assert code == 415
    # Server-side apply is served: a body that is not an applied configuration is a 400.
    code, body = _raw(
        cluster,
        "PATCH",
        "/api/v1/namespaces/default/pods/err-dup?fieldManager=test",
        b"{}",
        **{"Content-Type": "application/apply-patch+yaml"},
    )
    assert (code, body["reason"]) == (400, "BadRequest")


def test_default_namespace_cannot_be_deleted(k8s: K8s) -> None:
    with pytest.raises(client.ApiException) as caught:
        k8s.core.delete_namespace("default")
    assert (caught.value.status, _status(caught.value)["reason"]) == (403, "Forbidden")


def test_missing_or_wrong_token_is_unauthorized(cluster: LocalCluster) -> None:
    code, body = _raw(cluster, "GET", "/api/v1/pods", Authorization="Bearer wrong")
    assert (code, body["reason"]) == (401, "Unauthorized")
    assert _raw(cluster, "GET", "/version")[0] == 200


def test_strategic_merge_patch_on_a_custom_resource_is_415(k8s: K8s, cluster: LocalCluster) -> None:
    k8s.custom.create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", jobset_body("err-smp")
    )
    path = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/err-smp"
    patch = json.dumps({"metadata": {"labels": {"x": "1"}}}).encode()
    code, body = _raw(cluster, "PATCH", path, patch, **{"Content-Type": "application/strategic-merge-patch+json"})
    assert (code, body["reason"]) == (415, "UnsupportedMediaType")
    assert body["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json"
    )
    code, body = _raw(cluster, "PATCH", path, patch, **{"Content-Type": "application/merge-patch+json"})
    assert code == 200 and body["metadata"]["labels"] == {"x": "1"}
    # A built-in type still takes it.
    k8s.core.create_namespaced_pod("default", pod("err-smp-pod"))
    pod_path = "/api/v1/namespaces/default/pods/err-smp-pod"
    code, body = _raw(cluster, "PATCH", pod_path, patch, **{"Content-Type": "application/strategic-merge-patch+json"})
    assert code == 200 and body["metadata"]["labels"] == {"x": "1"}
