"""OpenAPI v3 documents, strict field validation, and server-side apply, through the official client."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from elastic_training.local.cluster import openapi
from elastic_training.local.cluster.openapi_schemas import JOBSET
from elastic_training.local.cluster.resources import JOBSETS, PODS
from elastic_training.local.cluster.server_side_apply import apply
from tests.support.cluster_objects import jobset_body
from tests.support.local_cluster import K8s

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"


def _get(k8s: K8s, path: str) -> Any:
    response = k8s.api_client.call_api(path, "GET", auth_settings=["BearerToken"], _preload_content=False)
    return json.loads(response.data)


def test_index_lists_each_group_version_at_a_hashed_url(k8s: K8s) -> None:
    index = _get(k8s, "/openapi/v3")
    assert sorted(index["paths"]) == [
        "api/v1",
        "apis/authentication.k8s.io/v1",
        "apis/authorization.k8s.io/v1",
        "apis/autoscaling.x-k8s.io/v1",
        "apis/batch/v1",
        "apis/jobset.x-k8s.io/v1alpha2",
        "apis/kueue.x-k8s.io/v1beta2",
        "apis/rbac.authorization.k8s.io/v1",
        "apis/scheduling.k8s.io/v1",
    ]
    url = index["paths"]["apis/jobset.x-k8s.io/v1alpha2"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/jobset.x-k8s.io/v1alpha2?hash=")
    document = _get(k8s, url)
    assert document["openapi"] == "3.0.0"
    patch = document["paths"]["/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": GROUP, "version": VERSION, "kind": "JobSet"}
    assert "fieldValidation" in [p["name"] for p in patch["parameters"] if p["in"] == "query"]
    schema = document["components"]["schemas"]["io.x-k8s.jobset.v1alpha2.JobSet"]
    assert schema["x-kubernetes-group-version-kind"] == [{"group": GROUP, "version": VERSION, "kind": "JobSet"}]


def test_jobset_schema_has_the_upstream_fields() -> None:
    spec = JOBSET["properties"]["spec"]["properties"]
    assert sorted(spec) == [
        "coordinator",
        "failurePolicy",
        "managedBy",
        "network",
        "replicatedJobs",
        "startupPolicy",
        "successPolicy",
        "suspend",
        "ttlSecondsAfterFinished",
        "volumeClaimPolicies",
    ]
    failure = spec["failurePolicy"]["properties"]
    assert sorted(failure) == ["maxRestarts", "restartStrategy", "rules"]
    assert failure["restartStrategy"]["enum"] == ["Recreate", "BlockingRecreate", "InPlaceRestart"]
    assert failure["rules"]["items"]["required"] == ["action", "name"]
    replicated = spec["replicatedJobs"]
    assert replicated["x-kubernetes-list-map-keys"] == ["name"]
    assert replicated["items"]["properties"]["replicas"]["default"] == 1
    status = JOBSET["properties"]["status"]["properties"]
    assert {"restarts", "restartsCountTowardsMax", "terminalState", "replicatedJobsStatus", "conditions"} <= set(status)


@pytest.mark.parametrize(
    ("obj", "unknown"),
    [
        (jobset_body("ok"), []),
        ({**jobset_body("x"), "extra": 1}, ["extra"]),
        ({"metadata": {"name": "x", "labels": {"a": "b"}, "nickname": "y"}}, ["metadata.nickname"]),
        (
            {"spec": {"failurePolicy": {"rules": [{"name": "r", "action": "FailJobSet", "when": "now"}]}}},
            ["spec.failurePolicy.rules[0].when"],
        ),
        ({"spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"anything": {}}}}]}}, []),
    ],
)
def test_unknown_fields(obj: dict[str, Any], unknown: list[str]) -> None:
    assert openapi.unknown_fields(JOBSETS, obj) == unknown


def test_strict_field_validation_over_http(k8s: K8s) -> None:
    body = jobset_body("strict-js")
    body["spec"]["sucessPolicy"] = {"operator": "All"}
    with pytest.raises(client.ApiException) as caught:
        k8s.custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body, field_validation="Strict")
    status = json.loads(caught.value.body)
    assert (caught.value.status, status["reason"]) == (400, "BadRequest")
    assert status["message"] == (
        'JobSet in version "v1alpha2" cannot be handled as a JobSet: strict decoding error: '
        'unknown field "spec.sucessPolicy"'
    )
    created = k8s.custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)  # Ignore
    assert created["metadata"]["name"] == "strict-js"
    k8s.custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "strict-js")


def _configuration(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "a", "namespace": "default"},
        "spec": spec,
    }


def test_apply_records_owners_removes_dropped_fields_and_keeps_others() -> None:
    first = apply(None, _configuration(suspend=True, managedBy="x/y"), "one", False, JOBSETS)
    assert first["spec"] == {"suspend": True, "managedBy": "x/y"}
    second = apply(first, _configuration(suspend=True, ttlSecondsAfterFinished=5), "two", False, JOBSETS)
    third = apply(second, _configuration(), "one", False, JOBSETS)
    # "one" dropped managedBy (removed) and suspend (kept: "two" applied it too).
    assert third["spec"] == {"suspend": True, "ttlSecondsAfterFinished": 5}
    managers = [e["manager"] for e in third["metadata"]["managedFields"]]
    assert managers == ["two", "one"]


def test_apply_conflicts_with_another_manager_unless_forced() -> None:
    live = apply(None, _configuration(suspend=True), "one", False, JOBSETS)
    with pytest.raises(Exception) as caught:
        apply(live, _configuration(suspend=False), "two", False, JOBSETS)
    assert str(caught.value) == 'Apply failed with 1 conflict: conflict with "one": .spec.suspend'
    forced = apply(live, _configuration(suspend=False), "two", True, JOBSETS)
    owners = {e["manager"]: e["fieldsV1"] for e in forced["metadata"]["managedFields"]}
    assert "f:spec" not in owners["one"] and owners["two"]["f:spec"] == {"f:suspend": {}}
    with pytest.raises(Exception) as missing:
        apply(live, _configuration(), "", False, PODS)
    assert "fieldManager: Required value" in str(missing.value)


def test_server_side_apply_over_http(k8s: K8s) -> None:
    configuration = _configuration(suspend=True, replicatedJobs=jobset_body("a")["spec"]["replicatedJobs"])
    configuration["metadata"]["name"] = "applied-http"
    path = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/applied-http"
    for expected in (201, 200):
        response = k8s.api_client.call_api(
            path,
            "PATCH",
            query_params=[("fieldManager", "tests")],
            header_params={"Content-Type": "application/apply-patch+yaml"},
            body=configuration,
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
        assert response.status == expected
    stored = k8s.custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "applied-http")
    assert [e["manager"] for e in stored["metadata"]["managedFields"]] == ["tests"]
    k8s.custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "applied-http")
