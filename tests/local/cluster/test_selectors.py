"""Label and field selectors: parsing and matching tables, then through the official client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from elastic_training.local.cluster import LocalCluster
from elastic_training.local.cluster.resources import JOBSETS, PODS, ApiError
from elastic_training.local.cluster.selectors import parse_field_selector, parse_label_selector
from tests.support.cluster_objects import pod
from tests.support.local_cluster import K8s

LABELS = {"app": "trainer", "tier": "worker", "slice": "0"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("app=trainer", True),
        ("app==trainer", True),
        ("app=eval", False),
        ("app!=eval", True),
        ("missing!=x", True),
        ("tier in (worker, head)", True),
        ("tier in (head)", False),
        ("tier notin (head)", True),
        ("missing notin (a)", True),
        ("tier notin (worker)", False),
        ("slice", True),
        ("!slice", False),
        ("!missing", True),
        ("missing", False),
        ("app=trainer,tier in (worker),!missing", True),
        ("app=trainer,tier=head", False),
        ("example.com/key=v", False),
    ],
)
def test_label_selector_matching(selector: str, matches: bool) -> None:
    obj = {"metadata": {"labels": LABELS}}
    assert parse_label_selector(selector).matches(obj) is matches


@pytest.mark.parametrize(
    "selector",
    ["app=", "=x", "app in x", "app in (a", "a b", "app=bad value", "-bad=1", "a!!b", "a in ()", "a notin ( )"],
)
def test_malformed_label_selectors_are_rejected(selector: str) -> None:
    if selector == "app=":
        assert parse_label_selector(selector).matches({"metadata": {"labels": {"app": ""}}})
        return
    with pytest.raises(ApiError) as caught:
        parse_label_selector(selector)
    assert caught.value.code == 400


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("metadata.name=p", True),
        ("metadata.name==p", True),
        ("metadata.name!=p", False),
        ("metadata.namespace=default", True),
        ("status.phase=Running", True),
        ("status.phase!=Running", False),
        ("status.phase=Running,metadata.name=q", False),
        ("spec.nodeName=", True),
    ],
)
def test_field_selector_matching(selector: str, matches: bool) -> None:
    obj = {"metadata": {"name": "p", "namespace": "default"}, "status": {"phase": "Running"}}
    assert parse_field_selector(selector, PODS).matches(obj) is matches


def test_unsupported_field_is_a_bad_request() -> None:
    with pytest.raises(ApiError) as caught:
        parse_field_selector("status.phase=Running", JOBSETS)
    assert caught.value.code == 400 and "field label not supported" in caught.value.message


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(workdir=tmp_path_factory.mktemp("selectors"), run_control_plane=False) as running:
        yield running


def test_selectors_through_the_client(k8s: K8s) -> None:
    for name, labels in [
        ("sel-head", {"role": "head"}),
        ("sel-w0", {"role": "worker"}),
        ("sel-w1", {"role": "worker", "slice": "1"}),
    ]:
        k8s.core.create_namespaced_pod("default", pod(name, labels=labels))
    k8s.core.patch_namespaced_pod_status("sel-w0", "default", {"status": {"phase": "Running"}})

    def names(**kwargs: str) -> list[str]:
        return sorted(p.metadata.name for p in k8s.core.list_namespaced_pod("default", **kwargs).items)

    assert names(label_selector="role=worker") == ["sel-w0", "sel-w1"]
    assert names(label_selector="role!=worker") == ["sel-head"]
    assert names(label_selector="role in (head,worker),!slice") == ["sel-head", "sel-w0"]
    assert names(label_selector="role notin (head)") == ["sel-w0", "sel-w1"]
    assert names(label_selector="slice") == ["sel-w1"]
    assert names(field_selector="metadata.name=sel-w1") == ["sel-w1"]
    assert names(field_selector="status.phase=Running") == ["sel-w0"]
    assert names(field_selector="status.phase!=Running", label_selector="role=worker") == ["sel-w1"]
    with pytest.raises(client.ApiException) as caught:
        k8s.core.list_namespaced_pod("default", label_selector="role in (head")
    assert caught.value.status == 400
    # upstream labels.NewRequirement refuses an empty set (it would otherwise match nothing, or all for notin)
    for empty in ("role in ()", "role notin ()"):
        with pytest.raises(client.ApiException) as caught:
            k8s.core.list_namespaced_pod("default", label_selector=empty)
        assert caught.value.status == 400 and "values set can't be empty" in caught.value.body
    assert names(label_selector="role in (head,)") == ["sel-head"]  # a trailing comma adds "", as upstream
