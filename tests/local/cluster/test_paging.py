"""``limit``/``continue`` through ``list_namespaced_pod``: one consistent snapshot, tokens bound to their list."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from elastic_training.local.cluster import LocalCluster
from tests.support.cluster_objects import job_body, pod
from tests.support.local_cluster import K8s

HISTORY = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        workdir=tmp_path_factory.mktemp("paging"), watch_history=HISTORY, run_control_plane=False
    ) as running:
        yield running


def _namespace(k8s: K8s, name: str, pods: int) -> None:
    k8s.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    for index in range(pods):
        k8s.core.create_namespaced_pod(name, pod(f"p-{index}", labels={"page": "yes"}))


def _names(page: client.V1PodList) -> list[str]:
    return [item.metadata.name for item in page.items]


def _token(body: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(body).encode()).decode().rstrip("=")


def _decoded(token: str) -> dict[str, Any]:
    return dict(json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))))


def _bad(call: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(client.ApiException) as caught:
        call()
    return caught.value.status, json.loads(caught.value.body)


def test_pages_are_one_snapshot_whatever_changes_between_them(k8s: K8s) -> None:
    _namespace(k8s, "paging-snapshot", 6)
    first = k8s.core.list_namespaced_pod("paging-snapshot", limit=2)
    assert _names(first) == ["p-0", "p-1"]
    assert first.metadata.remaining_item_count == 4
    # Between pages: the last item sent and the next one go, a new one comes, one changes.
    k8s.core.delete_namespaced_pod("p-1", "paging-snapshot", grace_period_seconds=0)
    k8s.core.delete_namespaced_pod("p-2", "paging-snapshot", grace_period_seconds=0)
    k8s.core.create_namespaced_pod("paging-snapshot", pod("p-1a"))
    k8s.core.patch_namespaced_pod("p-3", "paging-snapshot", {"metadata": {"labels": {"changed": "yes"}}})
    second = k8s.core.list_namespaced_pod("paging-snapshot", limit=2, _continue=first.metadata._continue)
    # Today's list would skip p-2 (deleted) and show p-1a; the snapshot shows what the first page saw.
    assert _names(second) == ["p-2", "p-3"]
    assert second.items[1].metadata.labels == {"page": "yes"}
    assert second.metadata.resource_version == first.metadata.resource_version
    assert second.metadata.remaining_item_count == 2
    third = k8s.core.list_namespaced_pod("paging-snapshot", limit=2, _continue=second.metadata._continue)
    assert _names(third) == ["p-4", "p-5"] and not third.metadata._continue
    assert _names(k8s.core.list_namespaced_pod("paging-snapshot")) == ["p-0", "p-1a", "p-3", "p-4", "p-5"]


def test_token_is_upstreams_shape_and_selectors_hide_the_remaining_count(k8s: K8s) -> None:
    _namespace(k8s, "paging-shape", 3)
    first = k8s.core.list_namespaced_pod("paging-shape", limit=1, label_selector="page=yes")
    token = _decoded(first.metadata._continue)
    assert (token["v"], token["rv"], token["start"]) == (
        "meta.k8s.io/v1",
        int(first.metadata.resource_version),
        "p-0\x00",
    )
    assert first.metadata.remaining_item_count is None  # upstream counts keys, so only without a selector
    everywhere = k8s.core.list_pod_for_all_namespaces(limit=1, label_selector="page=yes")
    assert _decoded(everywhere.metadata._continue)["start"].endswith("/p-0\x00")  # <namespace>/<name>


def test_a_token_is_bound_to_its_resource_namespace_and_selectors(k8s: K8s) -> None:
    _namespace(k8s, "paging-bound", 3)
    _namespace(k8s, "paging-other", 3)
    token = k8s.core.list_namespaced_pod("paging-bound", limit=1, label_selector="page=yes").metadata._continue
    for call in (
        lambda: k8s.core.list_namespaced_pod("paging-other", limit=1, label_selector="page=yes", _continue=token),
        lambda: k8s.core.list_namespaced_pod("paging-bound", limit=1, label_selector="page=no", _continue=token),
        lambda: k8s.core.list_namespaced_pod("paging-bound", limit=1, _continue=token),
        lambda: k8s.batch.list_namespaced_job("paging-bound", limit=1, label_selector="page=yes", _continue=token),
    ):
        code, status = _bad(call)
        assert (code, status["reason"]) == (400, "BadRequest")
        assert status["message"].startswith("invalid continue token: continue key is not valid")
    rest = k8s.core.list_namespaced_pod("paging-bound", limit=5, label_selector="page=yes", _continue=token)
    assert _names(rest) == ["p-1", "p-2"]


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("not-base64!", "continue key is not valid"),
        (_token({"v": "meta.k8s.io/v1", "rv": -1, "start": "p-0\x00"}), "incorrect encoded start resourceVersion"),
        (_token({"v": "meta.k8s.io/v1", "rv": 0, "start": "p-0\x00"}), "incorrect encoded start resourceVersion"),
        (_token({"v": "meta.k8s.io/v1", "rv": 5, "start": ""}), "encoded start key empty"),
        (_token({"v": "meta.k8s.io/v2", "rv": 5, "start": "p-0\x00"}), "does not recognize this encoded version"),
        (_token({"v": "meta.k8s.io/v1", "rv": 5, "start": "../kube-system/x"}), "continue key is not valid"),
        (_token({"v": "meta.k8s.io/v1", "rv": 5, "start": "p-0\x00"}), "another list"),  # forged: no binding
    ],
    ids=["garbage", "negative", "zero", "empty-key", "version", "traversal", "forged"],
)
def test_forged_tokens_are_bad_requests(k8s: K8s, token: str, message: str) -> None:
    code, status = _bad(lambda: k8s.core.list_namespaced_pod("default", limit=1, _continue=token))
    assert code == 400 and status["message"].startswith("invalid continue token:") and message in status["message"]


def test_resource_version_with_continue_is_a_bad_request(k8s: K8s) -> None:
    _namespace(k8s, "paging-rv", 2)
    first = k8s.core.list_namespaced_pod("paging-rv", limit=1)
    code, status = _bad(
        lambda: k8s.core.list_namespaced_pod(
            "paging-rv", limit=1, _continue=first.metadata._continue, resource_version=first.metadata.resource_version
        )
    )
    assert (code, status["message"]) == (400, "specifying resource version is not allowed when using continue")


def test_a_token_older_than_the_history_is_410_and_a_fresh_list_recovers(k8s: K8s) -> None:
    _namespace(k8s, "paging-old", 3)
    first = k8s.core.list_namespaced_pod("paging-old", limit=1)
    for index in range(HISTORY + 5):  # writes elsewhere push the first page's version out of the history
        k8s.batch.create_namespaced_job("default", job_body(f"paging-churn-{index}"))
    code, status = _bad(lambda: k8s.core.list_namespaced_pod("paging-old", limit=1, _continue=first.metadata._continue))
    assert (code, status["reason"]) == (410, "Expired")
    assert status["message"].startswith("The provided continue parameter is too old to display a consistent list")
    assert _names(k8s.core.list_namespaced_pod("paging-old")) == ["p-0", "p-1", "p-2"]


def test_pages_are_one_snapshot_across_graceful_deletion_and_finalizers(k8s: K8s) -> None:
    # No kubelet here: a bound pod deleted gracefully stays, marked, until deleted with grace 0.
    name = "paging-graceful"
    k8s.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    for index in range(4):
        body = pod(f"p-{index}", node_name="local")
        if index == 2:
            body.metadata.finalizers = ["test.local/hold"]
        k8s.core.create_namespaced_pod(name, body)
    first = k8s.core.list_namespaced_pod(name, limit=1)
    assert _names(first) == ["p-0"]
    before = {item.metadata.name: item.metadata.resource_version for item in k8s.core.list_namespaced_pod(name).items}
    k8s.core.delete_namespaced_pod("p-1", name)  # graceful: MODIFIED with deletionTimestamp
    k8s.core.delete_namespaced_pod("p-2", name, grace_period_seconds=0)  # held by its finalizer: MODIFIED
    k8s.core.patch_namespaced_pod("p-2", name, {"metadata": {"finalizers": None}})  # removed during the update
    k8s.core.delete_namespaced_pod("p-3", name)
    k8s.core.delete_namespaced_pod("p-3", name, grace_period_seconds=0)  # shortened to a forced delete
    now = {item.metadata.name: item for item in k8s.core.list_namespaced_pod(name).items}
    assert sorted(now) == ["p-0", "p-1"] and now["p-1"].metadata.deletion_timestamp is not None
    second = k8s.core.list_namespaced_pod(name, limit=5, _continue=first.metadata._continue)
    assert _names(second) == ["p-1", "p-2", "p-3"] and not second.metadata._continue
    for item in second.items:  # exactly as the first page's snapshot held them
        assert item.metadata.deletion_timestamp is None and item.metadata.deletion_grace_period_seconds is None
        assert item.metadata.resource_version == before[item.metadata.name]
    assert second.items[1].metadata.finalizers == ["test.local/hold"]


def test_namespace_pages_are_one_snapshot_across_a_namespace_turning_terminating(k8s: K8s) -> None:
    names = [f"paging-term-{index}" for index in range(3)]
    for name in names:
        k8s.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"term": "yes"})))
    first = k8s.core.list_namespace(limit=1, label_selector="term=yes")
    assert _names(first) == names[:1]
    k8s.core.delete_namespace(names[1])  # no namespace controller here: it stays Terminating
    assert k8s.core.read_namespace(names[1]).status.phase == "Terminating"
    second = k8s.core.list_namespace(limit=5, label_selector="term=yes", _continue=first.metadata._continue)
    assert _names(second) == names[1:]
    assert [item.status.phase for item in second.items] == ["Active", "Active"]
    assert second.items[0].metadata.deletion_timestamp is None
