"""Merge patch (RFC 7386) and JSON patch (RFC 6902), checked against the RFCs' own examples."""

from __future__ import annotations

from typing import Any

import pytest

from elastic_training.local.cluster.patching import JSON_PATCH, MERGE_PATCH, apply_patch, json_patch, merge_patch
from elastic_training.local.cluster.resources import ApiError


@pytest.mark.parametrize(
    ("target", "patch", "result"),
    [  # RFC 7386 appendix A
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_merge_patch_rfc_examples(target: Any, patch: Any, result: Any) -> None:
    assert merge_patch(target, patch) == result


@pytest.mark.parametrize(
    ("target", "operations", "result"),
    [  # RFC 6902 appendix A
        ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}], {"baz": "qux", "foo": "bar"}),
        ({"foo": ["bar", "baz"]}, [{"op": "add", "path": "/foo/1", "value": "qux"}], {"foo": ["bar", "qux", "baz"]}),
        ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
        ({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}], {"foo": ["bar", "baz"]}),
        (
            {"baz": "qux", "foo": "bar"},
            [{"op": "replace", "path": "/baz", "value": "boo"}],
            {"baz": "boo", "foo": "bar"},
        ),
        (
            {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
            [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
            {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
        ),
        (
            {"foo": ["all", "grass", "cows", "eat"]},
            [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
            {"foo": ["all", "cows", "eat", "grass"]},
        ),
        (
            {"foo": "bar"},
            [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
            {"foo": "bar", "child": {"grandchild": {}}},
        ),
        (
            {"foo": ["bar"]},
            [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
            {"foo": ["bar", ["abc", "def"]]},
        ),
        ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}], {"/": 9, "~1": 10}),
        ({"a/b": 1}, [{"op": "copy", "from": "/a~1b", "path": "/c"}], {"a/b": 1, "c": 1}),
    ],
)
def test_json_patch_rfc_examples(target: Any, operations: list[Any], result: Any) -> None:
    assert json_patch(target, operations) == result


@pytest.mark.parametrize(
    ("target", "operations"),
    [
        ({"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}]),
        ({"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}]),
        ({"foo": "bar"}, [{"op": "remove", "path": "/missing"}]),
        ({"foo": "bar"}, [{"op": "replace", "path": "/missing", "value": 1}]),
        ({"foo": [1]}, [{"op": "add", "path": "/foo/5", "value": 2}]),
        ({"foo": [1]}, [{"op": "remove", "path": "/foo/01"}]),
        ({"foo": {"a": 1}}, [{"op": "move", "from": "/foo", "path": "/foo/a/b"}]),
        ({"foo": 1}, [{"op": "frobnicate", "path": "/foo"}]),
        ({"foo": 1}, [{"op": "add", "path": "foo", "value": 1}]),
    ],
)
def test_json_patch_errors_are_422_and_leave_the_target_alone(target: Any, operations: list[Any]) -> None:
    before = repr(target)
    with pytest.raises(ApiError) as caught:
        json_patch(target, operations)
    assert caught.value.code == 422
    assert repr(target) == before


def test_apply_patch_checks_the_body_shape() -> None:
    with pytest.raises(ApiError) as caught:
        apply_patch(MERGE_PATCH, {}, [1])
    assert caught.value.code == 400
    with pytest.raises(ApiError) as caught:
        apply_patch(JSON_PATCH, {}, {"op": "add"})
    assert caught.value.code == 400
    with pytest.raises(ApiError) as caught:
        apply_patch("application/apply-patch+yaml", {}, {})
    assert caught.value.code == 415
