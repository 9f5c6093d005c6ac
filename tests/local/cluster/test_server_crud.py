"""CRUD, status subresources, patch kinds and deletion rules through the official client."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes import client

from elastic_training.local.cluster import LocalCluster
from tests.support.cluster_objects import job_body, jobset_body, pod
from tests.support.local_cluster import K8s

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """API only: no controller or kubelet rewrites what these tests write."""
    with LocalCluster(workdir=tmp_path_factory.mktemp("crud"), run_control_plane=False) as running:
        yield running


def test_version_and_discovery(k8s: K8s) -> None:
    version = client.VersionApi(k8s.api_client).get_code()
    assert (version.major, version.git_version.startswith("v1.")) == ("1", True)
    assert client.CoreApi(k8s.api_client).get_api_versions().versions == ["v1"]
    groups = {
        g.name: g.preferred_version.group_version for g in client.ApisApi(k8s.api_client).get_api_versions().groups
    }
    assert groups == {
        "batch": "batch/v1",
        GROUP: f"{GROUP}/{VERSION}",
        "rbac.authorization.k8s.io": "rbac.authorization.k8s.io/v1",
        "authorization.k8s.io": "authorization.k8s.io/v1",
        "authentication.k8s.io": "authentication.k8s.io/v1",
        "scheduling.k8s.io": "scheduling.k8s.io/v1",
        "kueue.x-k8s.io": "kueue.x-k8s.io/v1beta2",
        "autoscaling.x-k8s.io": "autoscaling.x-k8s.io/v1",  # the cluster autoscaler's ProvisioningRequest
    }
    core = {r.name for r in k8s.core.get_api_resources().resources}
    assert {"pods", "pods/log", "pods/status", "events", "namespaces"} <= core
    assert {"jobs", "jobs/status"} <= {r.name for r in k8s.batch.get_api_resources().resources}
    jobset_resources = k8s.custom.get_api_resources(GROUP, VERSION).resources
    assert {r.name for r in jobset_resources} == {"jobsets", "jobsets/status"}


def test_pod_create_get_list_replace_delete(k8s: K8s) -> None:
    # Scheduled (this API-only cluster has no kubelet to set nodeName), so deletion is graceful.
    created = k8s.core.create_namespaced_pod("default", pod("crud-a", labels={"app": "a"}, node_name="local-node"))
    assert created.metadata.uid and created.status.phase == "Pending"
    fetched = k8s.core.read_namespaced_pod("crud-a", "default")
    assert fetched.metadata.resource_version == created.metadata.resource_version
    listed = k8s.core.list_namespaced_pod("default")
    assert "crud-a" in [p.metadata.name for p in listed.items]
    assert int(listed.metadata.resource_version) >= int(created.metadata.resource_version)
    fetched.metadata.labels["tier"] = "x"
    replaced = k8s.core.replace_namespaced_pod("crud-a", "default", fetched)
    assert replaced.metadata.labels == {"app": "a", "tier": "x"}
    assert int(replaced.metadata.resource_version) > int(fetched.metadata.resource_version)
    # A scheduled pod may be running: a plain delete is graceful, a zero grace period removes it.
    graceful = k8s.core.delete_namespaced_pod("crud-a", "default")
    assert graceful.metadata.deletion_timestamp is not None
    k8s.core.delete_namespaced_pod("crud-a", "default", grace_period_seconds=0)
    with pytest.raises(client.ApiException) as caught:
        k8s.core.read_namespaced_pod("crud-a", "default")
    assert caught.value.status == 404
    # An unscheduled pod has nothing to stop: the pod strategy gives it grace 0, so it goes at once.
    k8s.core.create_namespaced_pod("default", pod("crud-unscheduled"))
    k8s.core.delete_namespaced_pod("crud-unscheduled", "default")
    with pytest.raises(client.ApiException) as caught:
        k8s.core.read_namespaced_pod("crud-unscheduled", "default")
    assert caught.value.status == 404


def test_merge_strategic_and_json_patch(k8s: K8s) -> None:
    k8s.core.create_namespaced_pod("default", pod("crud-patch", labels={"keep": "1", "drop": "1"}))
    merged = k8s.core.patch_namespaced_pod(
        "crud-patch",
        "default",
        {"metadata": {"labels": {"drop": None, "new": "1"}}},
        _content_type="application/merge-patch+json",
    )
    assert merged.metadata.labels == {"keep": "1", "new": "1"}
    strategic = k8s.core.patch_namespaced_pod("crud-patch", "default", {"metadata": {"annotations": {"a": "b"}}})
    assert strategic.metadata.annotations == {"a": "b"}
    patched = k8s.core.patch_namespaced_pod(
        "crud-patch",
        "default",
        [
            {"op": "test", "path": "/metadata/labels/keep", "value": "1"},
            {"op": "add", "path": "/metadata/labels/via-json-patch", "value": "yes"},
            {"op": "remove", "path": "/metadata/annotations/a"},
        ],
    )
    assert patched.metadata.labels["via-json-patch"] == "yes"
    assert not patched.metadata.annotations
    with pytest.raises(client.ApiException) as caught:
        k8s.core.patch_namespaced_pod("crud-patch", "default", [{"op": "test", "path": "/metadata/name", "value": "x"}])
    assert caught.value.status == 422
    k8s.core.delete_namespaced_pod("crud-patch", "default", grace_period_seconds=0)


def test_status_subresource_is_separate_from_the_main_resource(k8s: K8s) -> None:
    k8s.batch.create_namespaced_job("default", job_body("crud-status"))
    k8s.batch.patch_namespaced_job_status("crud-status", "default", {"status": {"active": 2}})
    # A write to the main resource keeps the stored status...
    main = k8s.batch.patch_namespaced_job(
        "crud-status", "default", {"metadata": {"labels": {"x": "y"}}, "status": {"active": 9}}
    )
    assert main.status.active == 2 and main.metadata.labels == {"x": "y"}
    # ...and a write to status changes nothing else.
    status = k8s.batch.read_namespaced_job_status("crud-status", "default")
    status.metadata.labels = {"ignored": "yes"}
    status.status.active = 3
    replaced = k8s.batch.replace_namespaced_job_status("crud-status", "default", status)
    assert replaced.status.active == 3 and replaced.metadata.labels == {"x": "y"}
    # A status write with a stale resourceVersion conflicts.
    with pytest.raises(client.ApiException) as caught:
        k8s.batch.replace_namespaced_job_status("crud-status", "default", status)
    assert caught.value.status == 409
    k8s.batch.delete_namespaced_job("crud-status", "default")


def test_jobset_crud_and_status_through_custom_objects(k8s: K8s) -> None:
    created = k8s.custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, jobset_body("crud-js"))
    assert created["metadata"]["uid"] and "status" not in created
    k8s.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", PLURAL, "crud-js", {"status": {"restarts": 1}}
    )
    patched = k8s.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        PLURAL,
        "crud-js",
        [{"op": "replace", "path": "/spec/suspend", "value": False}],
        _content_type="application/json-patch+json",  # CustomObjectsApi sends merge patches unless told
    )
    assert patched["spec"]["suspend"] is False and patched["status"] == {"restarts": 1}
    assert patched["metadata"]["generation"] == 2
    listed = k8s.custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    assert [js["metadata"]["name"] for js in listed["items"]] == ["crud-js"]
    everywhere = k8s.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    assert len(everywhere["items"]) == 1
    deleted = k8s.custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "crud-js")
    assert deleted["metadata"]["name"] == "crud-js"


def _owned_job(k8s: K8s, name: str, owner: dict[str, object]) -> None:
    body = job_body(name)
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "JobSet",
            "name": owner["name"],
            "uid": owner["uid"],
            "controller": True,
        }
    ]
    k8s.batch.create_namespaced_job("default", body)


def test_delete_propagation_policies(k8s: K8s) -> None:
    for policy in ("Foreground", "Orphan", "Background"):
        name = f"crud-{policy.lower()}"
        owner = k8s.custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, jobset_body(name))
        _owned_job(k8s, f"{name}-child", owner["metadata"])
        k8s.custom.delete_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, name, body=client.V1DeleteOptions(propagation_policy=policy)
        )
        child = k8s.batch.read_namespaced_job(f"{name}-child", "default")
        if policy == "Foreground":
            # With no garbage collector running, the owner waits for its dependents.
            owner_now = k8s.custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name)
            assert owner_now["metadata"]["finalizers"] == ["foregroundDeletion"]
            assert owner_now["metadata"]["deletionTimestamp"]
        else:
            with pytest.raises(client.ApiException):
                k8s.custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name)
        if policy == "Orphan":
            assert not child.metadata.owner_references
        k8s.batch.delete_namespaced_job(f"{name}-child", "default", propagation_policy="Background")
        if policy == "Foreground":  # do the garbage collector's part, so no JobSet is left for other tests
            k8s.custom.patch_namespaced_custom_object(
                GROUP, VERSION, "default", PLURAL, name, {"metadata": {"finalizers": None}}
            )
    left = {
        js["metadata"]["name"]
        for js in k8s.custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)["items"]
    }
    assert not left & {"crud-foreground", "crud-orphan", "crud-background"}


def test_namespaces_events_and_all_namespace_lists(k8s: K8s) -> None:
    k8s.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="crud-ns")))
    assert k8s.core.read_namespace("crud-ns").status.phase == "Active"
    k8s.core.create_namespaced_pod("crud-ns", pod("in-other-ns"))
    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(name="crud-event"),
        involved_object=client.V1ObjectReference(kind="Pod", name="in-other-ns", namespace="crud-ns"),
        reason="Testing",
        message="hello",
        type="Normal",
    )
    k8s.core.create_namespaced_event("crud-ns", event)
    assert [e.reason for e in k8s.core.list_namespaced_event("crud-ns").items] == ["Testing"]
    all_pods = k8s.core.list_pod_for_all_namespaces()
    assert ("crud-ns", "in-other-ns") in {(p.metadata.namespace, p.metadata.name) for p in all_pods.items}
    # Without a control plane nothing empties the namespace: it stays Terminating (the namespace
    # controller's work is tested in test_namespace_controller.py) and refuses new content.
    k8s.core.delete_namespace("crud-ns")  # the body is the Namespace; the client reads it as a V1Status
    assert k8s.core.read_namespace("crud-ns").status.phase == "Terminating"
    with pytest.raises(client.ApiException) as caught:
        k8s.core.create_namespaced_pod("crud-ns", pod("late"))
    assert caught.value.status == 403
    assert "being terminated" in json.loads(caught.value.body)["message"]
    # namespaces/finalize is the way out: emptying spec.finalizers removes the namespace.
    stuck = k8s.core.read_namespace("crud-ns")
    assert stuck.spec.finalizers == ["kubernetes"]
    stuck.spec.finalizers = []
    k8s.core.replace_namespace_finalize("crud-ns", stuck)
    assert "crud-ns" not in [ns.metadata.name for ns in k8s.core.list_namespace().items]
    with pytest.raises(client.ApiException) as caught:
        k8s.core.create_namespaced_pod("no-such-ns", pod("x"))
    assert caught.value.status == 404


def test_generate_name_delete_collection_and_paging(k8s: K8s) -> None:
    for _ in range(5):
        body = pod("")
        body.metadata = client.V1ObjectMeta(generate_name="crud-gen-", labels={"batch": "gen"})
        created = k8s.core.create_namespaced_pod("default", body)
        assert created.metadata.name.startswith("crud-gen-") and len(created.metadata.name) == len("crud-gen-") + 5
    first = k8s.core.list_namespaced_pod("default", label_selector="batch=gen", limit=2)
    assert len(first.items) == 2 and first.metadata._continue
    rest = k8s.core.list_namespaced_pod(
        "default", label_selector="batch=gen", limit=10, _continue=first.metadata._continue
    )
    assert len(rest.items) == 3 and not rest.metadata._continue
    k8s.core.delete_collection_namespaced_pod("default", label_selector="batch=gen", grace_period_seconds=0)
    assert k8s.core.list_namespaced_pod("default", label_selector="batch=gen").items == []


def test_jobs_jobsets_and_events_get_update_patch_and_delete(k8s: K8s) -> None:
    # Jobs: update (PUT) of the main resource, JSON patch, get, delete.
    k8s.batch.create_namespaced_job("default", job_body("crud-verbs"))
    job = k8s.batch.read_namespaced_job("crud-verbs", "default")
    job.metadata.annotations = {"updated": "yes"}
    assert k8s.batch.replace_namespaced_job("crud-verbs", "default", job).metadata.annotations == {"updated": "yes"}
    patched = k8s.batch.patch_namespaced_job(
        "crud-verbs", "default", [{"op": "add", "path": "/metadata/labels", "value": {"j": "1"}}]
    )
    assert patched.metadata.labels == {"j": "1"} and patched.metadata.annotations == {"updated": "yes"}
    k8s.batch.delete_namespaced_job("crud-verbs", "default")
    # JobSets: update (PUT) and merge patch.
    k8s.custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, jobset_body("crud-verbs"))
    jobset = k8s.custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "crud-verbs")
    jobset["metadata"]["labels"] = {"put": "1"}
    replaced = k8s.custom.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "crud-verbs", jobset)
    assert replaced["metadata"]["labels"] == {"put": "1"}
    merged = k8s.custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "crud-verbs", {"metadata": {"labels": {"put": None, "merge": "1"}}}
    )
    assert merged["metadata"]["labels"] == {"merge": "1"}
    k8s.custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "crud-verbs")
    # Events: every verb.
    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(name="crud-verbs-event"),
        involved_object=client.V1ObjectReference(kind="Pod", name="p", namespace="default"),
        reason="First",
        message="one",
    )
    k8s.core.create_namespaced_event("default", event)
    fetched = k8s.core.read_namespaced_event("crud-verbs-event", "default")
    fetched.message = "two"
    assert k8s.core.replace_namespaced_event("crud-verbs-event", "default", fetched).message == "two"
    patched_event = k8s.core.patch_namespaced_event(
        "crud-verbs-event", "default", {"reason": "Second"}, _content_type="application/merge-patch+json"
    )
    assert (patched_event.reason, patched_event.message) == ("Second", "two")
    listed = k8s.core.list_namespaced_event("default", field_selector="reason=Second")
    assert [e.metadata.name for e in listed.items] == ["crud-verbs-event"]
    k8s.core.delete_namespaced_event("crud-verbs-event", "default")
    with pytest.raises(client.ApiException) as caught:
        k8s.core.read_namespaced_event("crud-verbs-event", "default")
    assert caught.value.status == 404
