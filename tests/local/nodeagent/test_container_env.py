"""``$(VAR)`` expansion and downward-API env, checked against Kubernetes' own expansion cases."""

from __future__ import annotations

import pytest

from elastic_training.local.nodeagent.container_env import ContainerConfigError, container_argv, container_env, expand

VARS = {"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Cases from k8s.io/kubernetes third_party/forked/golang/expansion/expand_test.go.
        ("$(VAR_A)", "A"),
        ("___$(VAR_B)___", "___B___"),
        ("$(VAR_A)-$(VAR_A)", "A-A"),
        ("$(VAR_A)-1", "A-1"),
        ("$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"),
        ("foo\\$(VAR_C)bar", "foo\\Cbar"),
        ("$(VAR_REF)", "$(VAR_A)"),  # no recursion
        ("$(VAR_EMPTY)", ""),
        ("$(UNKNOWN)", "$(UNKNOWN)"),
        ("$$(VAR_A)", "$(VAR_A)"),
        ("$$$(VAR_A)", "$A"),
        ("$$$$(VAR_A)", "$$(VAR_A)"),
        ("f000-$$VAR_A", "f000-$VAR_A"),
        ("$(VAR_A", "$(VAR_A"),  # unterminated reference stays as written
        ("$VAR_A", "$VAR_A"),
        ("$", "$"),
        ("$()", "$()"),
        ("", ""),
        ("plain", "plain"),
        ("$(VAR_A)$", "A$"),
    ],
)
def test_expand(text: str, expected: str) -> None:
    assert expand(text, VARS.get) == expected


def _pod() -> dict[str, object]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"a": "1"}, "annotations": {"b/c": "2"}},
        "spec": {"nodeName": "n"},
        "status": {"podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]},
    }


def test_env_values_see_only_earlier_variables_and_service_env() -> None:
    container = {
        "env": [
            {"name": "FIRST", "value": "$(SERVICE)-$(SECOND)"},
            {"name": "SECOND", "value": "two"},
            {"name": "THIRD", "value": "$(SECOND)/$(FIRST)"},
            {"name": "LABEL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['a']"}}},
            {"name": "NOTE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['b/c']"}}},
            {"name": "IPS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIPs"}}},
        ],
        "command": ["run", "$(THIRD)"],
        "args": ["--label=$(LABEL)", "$$(LABEL)", "$(MISSING)"],
    }
    env = container_env(_pod(), container, {"PATH": "/bin"}, {"SERVICE": "svc"})
    assert env["FIRST"] == "svc-$(SECOND)"
    assert env["THIRD"] == "two/svc-$(SECOND)"
    assert (env["LABEL"], env["NOTE"], env["IPS"], env["PATH"]) == ("1", "2", "127.0.0.1", "/bin")
    assert container_argv(container, env) == ["run", "two/svc-$(SECOND)", "--label=1", "$(LABEL)", "$(MISSING)"]


@pytest.mark.parametrize(
    "source",
    [
        {"secretKeyRef": {"name": "s", "key": "k"}},
        {"fieldRef": {"fieldPath": "spec.unknownField"}},
    ],
)
def test_unsupported_env_sources_are_config_errors(source: dict[str, object]) -> None:
    with pytest.raises(ContainerConfigError):
        container_env(_pod(), {"env": [{"name": "X", "valueFrom": source}]}, {}, {})
