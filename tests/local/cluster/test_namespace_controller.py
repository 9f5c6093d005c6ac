"""Namespace deletion through the official client: Terminating, content deleted (pods gracefully,
their processes gone), then the namespace; the same name created again starts empty."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client

from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION
from tests.support.cluster_objects import job_body, jobset_body
from tests.support.control_plane import container, pod_manifest, pod_pids, unique, wait_processes_gone
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

HOLD = "test.local/hold"
LOOP = "while :; do sleep 0.05; done"


def _namespace(k8s: K8s, name: str) -> client.V1Namespace | None:
    try:
        namespace: client.V1Namespace = k8s.core.read_namespace(name)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise
    return namespace


def _condition(namespace: client.V1Namespace | None, kind: str) -> client.V1NamespaceCondition | None:
    conditions = (namespace.status.conditions if namespace and namespace.status else None) or []
    return next((c for c in conditions if c.type == kind), None)


def _create_namespace(k8s: K8s, name: str) -> None:
    k8s.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))


def _content(k8s: K8s, namespace: str) -> dict[str, list[str]]:
    jobsets = k8s.custom.list_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL)
    return {
        "pods": [p.metadata.name for p in k8s.core.list_namespaced_pod(namespace).items],
        "jobs": [j.metadata.name for j in k8s.batch.list_namespaced_job(namespace).items],
        "events": [e.metadata.name for e in k8s.core.list_namespaced_event(namespace).items],
        "jobsets": [j["metadata"]["name"] for j in jobsets["items"]],
    }


def test_deleting_a_namespace_stops_its_pods_gracefully_then_removes_it(k8s: K8s, tmp_path: Path) -> None:
    gate = tmp_path / "may-stop"  # the pod's SIGTERM handler waits for it: Terminating is held, not raced
    handled = tmp_path / "handled"
    ns = unique("doomed")
    _create_namespace(k8s, ns)
    created = _namespace(k8s, ns)
    assert created is not None and created.status.phase == "Active" and created.spec.finalizers == ["kubernetes"]
    ready = tmp_path / "trap-set"  # a SIGTERM before the shell has set its trap would kill it outright
    script = (
        f"trap 'until [ -e {gate} ]; do sleep 0.05; done; echo done > {handled}; exit 0' TERM; touch {ready}; {LOOP}"
    )
    k8s.core.create_namespaced_pod(
        ns, pod_manifest("worker", container("main", script), terminationGracePeriodSeconds=60)
    )
    k8s.batch.create_namespaced_job(ns, job_body("suspended-job"))
    k8s.custom.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, ns, JOBSET_PLURAL, jobset_body("js"))
    k8s.core.create_namespaced_event(
        ns,
        client.CoreV1Event(
            metadata=client.V1ObjectMeta(name="an-event"),
            involved_object=client.V1ObjectReference(kind="Pod", name="worker", namespace=ns),
            reason="Testing",
            message="hello",
            type="Normal",
        ),
    )

    def running() -> list[int] | None:
        pod = k8s.core.read_namespaced_pod("worker", ns)
        statuses = pod.status.container_statuses or []
        return pod_pids(pod) if statuses and statuses[0].state.running else None

    pids = wait_for(running)
    wait_for(ready.exists)

    k8s.core.delete_namespace(ns)
    terminating = _namespace(k8s, ns)
    assert terminating is not None and terminating.status.phase == "Terminating"
    assert terminating.metadata.deletion_timestamp is not None

    with pytest.raises(client.ApiException) as refused:
        k8s.core.create_namespaced_pod(ns, pod_manifest("late", container("main", "true")))
    assert refused.value.status == 403
    assert f"unable to create new content in namespace {ns} because it is being terminated" in refused.value.body
    with pytest.raises(client.ApiException) as taken:
        _create_namespace(k8s, ns)
    assert taken.value.status == 409
    assert json.loads(taken.value.body)["message"].startswith("object is being deleted: ")

    def only_the_pod_is_left() -> client.V1Pod | None:
        if _content(k8s, ns) != {"pods": ["worker"], "jobs": [], "events": [], "jobsets": []}:
            return None
        pod: client.V1Pod = k8s.core.read_namespaced_pod("worker", ns)
        return pod if pod.metadata.deletion_timestamp is not None else None

    pod = wait_for(only_the_pod_is_left)
    assert pod.metadata.deletion_grace_period_seconds == 60  # deleted gracefully, not killed
    remaining = wait_for(lambda: _condition(_namespace(k8s, ns), "NamespaceContentRemaining"))
    assert remaining.status == "True" and "pods has 1 resource instances" in remaining.message

    gate.touch()
    wait_for(lambda: _namespace(k8s, ns) is None, 60)
    assert handled.read_text().strip() == "done"
    wait_processes_gone(pids)

    _create_namespace(k8s, ns)
    again = _namespace(k8s, ns)
    assert again is not None and again.status.phase == "Active" and not _condition(again, "NamespaceContentRemaining")
    assert _content(k8s, ns) == {"pods": [], "jobs": [], "events": [], "jobsets": []}
    k8s.core.delete_namespace(ns)
    wait_for(lambda: _namespace(k8s, ns) is None)


def test_content_with_a_finalizer_holds_the_namespace_until_it_goes(k8s: K8s) -> None:
    ns = unique("held")
    _create_namespace(k8s, ns)
    job = job_body("held-job")
    job["metadata"]["finalizers"] = [HOLD]
    k8s.batch.create_namespaced_job(ns, job)
    k8s.core.delete_namespace(ns)

    def waiting_on_finalizer() -> client.V1NamespaceCondition | None:
        cond = _condition(_namespace(k8s, ns), "NamespaceFinalizersRemaining")
        return cond if cond is not None and cond.status == "True" else None

    held = wait_for(waiting_on_finalizer)
    assert f"{HOLD} in 1 resource instances" in held.message
    stuck = k8s.batch.read_namespaced_job("held-job", ns)
    assert stuck.metadata.deletion_timestamp is not None

    k8s.batch.patch_namespaced_job("held-job", ns, {"metadata": {"finalizers": None}})
    wait_for(lambda: _namespace(k8s, ns) is None)


def test_the_default_namespace_may_not_be_deleted(k8s: K8s) -> None:
    with pytest.raises(client.ApiException) as caught:
        k8s.core.delete_namespace("default")
    assert caught.value.status == 403
