"""Deletion with finalizers, and what DELETE answers, through the official client.

Upstream (``genericregistry.Store.Delete``, ``handlers/delete.go``): an object with finalizers
stays, marked with ``deletionTimestamp`` and grace 0, whatever grace period was asked for, and
DELETE answers 200 with that object; 202 only when the client set ``orphanDependents: false``.
An object removed at once is answered with a ``Status`` (pods and JobSets: the object).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION
from tests.support.cluster_objects import job_body, jobset_body
from tests.support.control_plane import NS, unique
from tests.support.local_cluster import K8s

HOLD = "test.local/hold"
Obj = dict[str, Any]


def _event_body(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "name": "nobody", "namespace": NS},
        "reason": "Testing",
        "message": "hello",
        "type": "Normal",
    }


class Kind:
    """Create, read, patch and delete one kind through its official client API."""

    def __init__(self, k8s: K8s, kind: str) -> None:
        self.k8s = k8s
        self.kind = kind

    def create(self, name: str, finalizers: list[str]) -> None:
        if self.kind == "Job":
            body = job_body(name)
        elif self.kind == "JobSet":
            body = jobset_body(name)
        else:
            body = _event_body(name)
        body["metadata"]["finalizers"] = finalizers
        self._call("create", body=body)

    def read(self, name: str) -> Obj | None:
        try:
            response = self._call("read", name=name, _preload_content=False)
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        body: Obj = json.loads(response.data)
        return body

    def patch(self, name: str, body: Obj) -> None:
        self._call("patch", name=name, body=body)

    def delete(self, name: str, **options: Any) -> tuple[int, Obj]:
        response = self._call("delete", name=name, _preload_content=False, **options)
        body: Obj = json.loads(response.data)
        return response.status, body

    def _call(self, verb: str, **kwargs: Any) -> Any:
        method: Callable[..., Any]
        if self.kind == "Job":
            method = getattr(self.k8s.batch, f"{verb}_namespaced_job")
            return method(namespace=NS, **kwargs)
        if self.kind == "Event":
            method = getattr(self.k8s.core, f"{verb}_namespaced_event")
            return method(namespace=NS, **kwargs)
        custom_verb = {"read": "get"}.get(verb, verb)
        method = getattr(self.k8s.custom, f"{custom_verb}_namespaced_custom_object")
        return method(JOBSET_GROUP, JOBSET_VERSION, NS, JOBSET_PLURAL, **kwargs)


@pytest.mark.parametrize("kind", ["Job", "JobSet", "Event"])
def test_a_finalizer_holds_the_object_even_with_grace_zero(k8s: K8s, kind: str) -> None:
    api = Kind(k8s, kind)
    name = unique(f"held-{kind.lower()}")
    api.create(name, [HOLD])

    status, body = api.delete(name, grace_period_seconds=0, propagation_policy="Background")
    assert status == 200
    assert body["kind"] == kind and body["metadata"]["deletionTimestamp"]
    assert body["metadata"]["deletionGracePeriodSeconds"] == 0
    stored = api.read(name)
    assert stored is not None and stored["metadata"]["finalizers"] == [HOLD]
    assert stored["metadata"]["deletionTimestamp"] == body["metadata"]["deletionTimestamp"]

    status, again = api.delete(name)  # deleting again changes nothing and answers the object
    assert status == 200 and again["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]

    api.patch(name, {"metadata": {"labels": {"still": "writable"}}})
    stored = api.read(name)
    assert stored is not None and stored["metadata"]["labels"] == {"still": "writable"}

    api.patch(name, {"metadata": {"finalizers": None}})
    assert api.read(name) is None


def test_no_finalizer_may_be_added_to_an_object_being_deleted(k8s: K8s) -> None:
    api = Kind(k8s, "Job")
    name = unique("no-new-finalizer")
    api.create(name, [HOLD])
    api.delete(name)
    with pytest.raises(client.ApiException) as caught:
        api.patch(name, {"metadata": {"finalizers": [HOLD, "test.local/another"]}})
    assert caught.value.status == 422
    assert "no new finalizers" in json.loads(caught.value.body)["message"]
    api.patch(name, {"metadata": {"finalizers": None}})
    assert api.read(name) is None


def test_orphan_dependents_false_is_the_one_202(k8s: K8s) -> None:
    api = Kind(k8s, "Job")
    name = unique("accepted")
    api.create(name, [HOLD])
    status, body = api.delete(name, body=client.V1DeleteOptions(orphan_dependents=False))
    assert status == 202 and body["kind"] == "Job" and body["metadata"]["deletionTimestamp"]
    api.patch(name, {"metadata": {"finalizers": None}})
    assert api.read(name) is None


@pytest.mark.parametrize(("kind", "answer"), [("Job", "Status"), ("Event", "Status"), ("JobSet", "JobSet")])
def test_an_object_removed_at_once_is_answered_with_a_status_or_itself(k8s: K8s, kind: str, answer: str) -> None:
    api = Kind(k8s, kind)
    name = unique(f"gone-{kind.lower()}")
    api.create(name, [])
    uid = (api.read(name) or {})["metadata"]["uid"]
    status, body = api.delete(name, propagation_policy="Background")
    assert status == 200 and body["kind"] == answer
    if answer == "Status":
        assert body["status"] == "Success" and body["details"]["name"] == name and body["details"]["uid"] == uid
    assert api.read(name) is None
