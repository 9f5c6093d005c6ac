"""Least privilege, checked against the code: the (group, resource, verb) triples the hooks can call, collected
statically from operators/hooks.py, are exactly the grants of `operators.rbac.RULES`, and no other module of
`operators/` calls the Kubernetes API."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from kubernetes import client

import elastic_training.operators.constants as constants
from elastic_training.operators.rbac import (
    RULES,
    kueue_config_reader_manifests,
    node_pool_reader_manifests,
    rbac_manifests,
)

OPERATORS = Path(__file__).resolve().parents[2] / "operators"
HOOKS = OPERATORS / "hooks.py"
API_CLASSES = (client.CustomObjectsApi, client.CoreV1Api, client.BatchV1Api)
# The client's method verbs as RBAC names them.
VERBS = {
    "create": "create",
    "read": "get",
    "get": "get",
    "list": "list",
    "delete": "delete",
    "patch": "patch",
    "replace": "update",
    "delete_collection": "deletecollection",
}
# Kinds of the typed clients: their API group and resource.
KINDS = {
    "pod": ("", "pods"),
    "job": ("batch", "jobs"),
    "event": ("", "events"),
    "secret": ("", "secrets"),
    "config_map": ("", "configmaps"),
    "namespace": ("", "namespaces"),
    "node": ("", "nodes"),
}
DISCOVERY = {"get_api_resources"}  # /apis/<group>/<version>: readable by every authenticated user (system:discovery)
_METHOD = re.compile(
    r"^(delete_collection|create|read|get|list|delete|patch|replace)_(?:namespaced_)?(\w+?)(?:_(log|status))?$"
)
# Cluster-scoped: granted by the opt-in ClusterRole (`node_pool_reader_manifests`), never by the namespaced Role.
NODE_POOLS_GRANTS = {("", "nodes", "list")}
# In kueue-system, one ConfigMap: granted by the opt-in Role (`kueue_config_reader_manifests`), never by the operators'.
KUEUE_CONFIG_GRANTS = {("", "configmaps", "get")}


def _api_method_names() -> set[str]:
    return {name for cls in API_CLASSES for name in dir(cls) if not name.startswith("_")}


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _enclosing(node: ast.AST, parents: dict[ast.AST, ast.AST], kind: type | tuple[type, ...]) -> list[ast.AST]:
    found = []
    while node in parents:
        node = parents[node]
        if isinstance(node, kind):
            found.append(node)
    return found


def _constant(call: ast.Call, suffix: str) -> str:
    """The value of the `operators.constants` name ending in `suffix` among a call's arguments."""
    (name,) = [a.id for a in call.args if isinstance(a, ast.Name) and a.id.endswith(suffix)]
    return str(getattr(constants, name))


def _calls_list_watch(function: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "_list_watch" for n in ast.walk(function))


def used_grants(source: str) -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every Kubernetes API method the module calls or hands to a watch."""
    tree = ast.parse(source)
    parents = _parents(tree)
    api = _api_method_names()
    grants: set[tuple[str, str, str]] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr in api) or node.attr in DISCOVERY:
            continue
        call = parents[node]
        assert isinstance(call, ast.Call), f"line {node.lineno}: {node.attr} used other than in a call"
        streamed = isinstance(call.func, ast.Attribute) and call.func.attr == "stream" and node in call.args
        match = _METHOD.match(node.attr)
        assert match, f"line {node.lineno}: map {node.attr} to a (group, resource, verb)"
        verb, kind, sub = VERBS[match[1]], match[2], match[3]
        if kind == "custom_object":
            group, resource = _constant(call, "_GROUP"), _constant(call, "_PLURAL")
        else:
            group, resource = KINDS[kind]
        if sub:
            resource = f"{resource}/{sub}"
        methods = _enclosing(node, parents, (ast.FunctionDef, ast.AsyncFunctionDef))
        # A list function handed to Watch.stream is only watched; one inside a method using _list_watch is
        # listed, then watched from that list's resourceVersion.
        grants.add((group, resource, "watch" if streamed else verb))
        if verb == "list" and any(_calls_list_watch(m) for m in methods):
            grants.add((group, resource, "watch"))
    return grants


def test_list_watch_really_watches_what_it_lists() -> None:
    """The rule above ("a list call inside a method that uses _list_watch is also watched") holds for _list_watch."""
    tree = ast.parse(HOOKS.read_text())
    (function,) = [n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef) and n.name == "_list_watch"]
    streams = [
        n
        for n in ast.walk(function)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id == "list_call"
        and any(k.arg == "watch" and isinstance(k.value, ast.Constant) and k.value.value is True for k in n.keywords)
    ]
    assert streams  # the same list call, reopened as a watch


def test_the_role_grants_exactly_what_the_hooks_call() -> None:
    granted = {(g, r, v) for groups, resources, verbs in RULES for g in groups for r in resources for v in verbs}
    cluster_role = {
        (g, r, v)
        for manifest in node_pool_reader_manifests("default")
        for rule in manifest.get("rules", [])
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert cluster_role == NODE_POOLS_GRANTS and not granted & cluster_role
    [kueue_role] = [m for m in kueue_config_reader_manifests("default") if m["kind"] == "Role"]
    assert kueue_role["metadata"]["namespace"] == "kueue-system"
    assert kueue_role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["kueue-manager-config"], "verbs": ["get"]}
    ]
    assert used_grants(HOOKS.read_text()) & KUEUE_CONFIG_GRANTS == KUEUE_CONFIG_GRANTS  # Kueue's waitForPodsReady
    used = used_grants(HOOKS.read_text()) - NODE_POOLS_GRANTS - KUEUE_CONFIG_GRANTS
    assert (
        used_grants(HOOKS.read_text()) & NODE_POOLS_GRANTS == NODE_POOLS_GRANTS
    )  # avoid_failing_node_pools lists nodes
    assert used - granted == set(), "the hooks call what the Role does not grant"
    assert granted - used == set(), "the Role grants what no hook calls"
    assert used == {
        ("jobset.x-k8s.io", "jobsets", "create"),
        ("jobset.x-k8s.io", "jobsets", "get"),
        ("jobset.x-k8s.io", "jobsets", "list"),
        ("jobset.x-k8s.io", "jobsets", "watch"),
        ("jobset.x-k8s.io", "jobsets", "delete"),
        ("batch", "jobs", "list"),
        ("batch", "jobs", "watch"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "pods", "delete"),  # a full restart's short grace for a trainer past saving
        ("", "pods/log", "get"),
        ("kueue.x-k8s.io", "workloads", "list"),
        ("kueue.x-k8s.io", "workloads", "watch"),
    }


def test_only_the_hooks_call_the_kubernetes_api() -> None:
    api = _api_method_names()
    # The drill runs inside its own pod with that pod's credentials (a fault injector, not the operators).
    drill = OPERATORS / "slice_drill.py"
    for path in sorted(OPERATORS.rglob("*.py")):
        if path in (HOOKS, drill):
            continue
        calls = {
            n.attr for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Attribute) and n.attr in api
        }
        assert not calls, f"{path.relative_to(OPERATORS.parent)} calls the Kubernetes API directly: {sorted(calls)}"


def test_namespaced_and_no_secrets() -> None:
    kinds = [m["kind"] for m in rbac_manifests("ml")]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding"]  # never a ClusterRole or ClusterRoleBinding
    resources = {r for _groups, rs, _verbs in RULES for r in rs}
    assert not resources & {"secrets", "configmaps", "serviceaccounts", "roles", "rolebindings", "pods/exec"}
    assert not any("*" in g or "*" in r or "*" in v for gs, rs, vs in RULES for g in gs for r in rs for v in vs)


def test_the_collector_sees_a_new_call() -> None:
    """A hook that started reading pods or patching JobSets would need grants the Role lacks."""
    extra = """
def read_pod(self, name, namespace):
    return self.core_v1_client.read_namespaced_pod(name, namespace)

def patch_jobset(self, name, namespace, body):
    return self.custom_object_client.patch_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, name, body
    )

def follow_events(self, namespace):
    for event in watch.Watch().stream(self.core_v1_client.list_namespaced_event, namespace):
        yield event
"""
    assert used_grants(extra) == {
        ("", "pods", "get"),
        ("jobset.x-k8s.io", "jobsets", "patch"),
        ("", "events", "watch"),
    }
