"""The documents a Kubernetes client reads before it talks to resources: version and discovery."""

from __future__ import annotations

from typing import Any

from elastic_training.local.cluster.resources import RESOURCE_TYPES, ResourceType

# What `kubectl version` would print for the API server we stand in for.
KUBERNETES_MAJOR = "1"
KUBERNETES_MINOR = "33"
GIT_VERSION = f"v{KUBERNETES_MAJOR}.{KUBERNETES_MINOR}.0-local"


def version_info() -> dict[str, str]:
    """``/version``: every field the official clients' models require."""
    return {
        "major": KUBERNETES_MAJOR,
        "minor": KUBERNETES_MINOR,
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def _groups() -> dict[str, list[str]]:
    """Group name → served versions (the core group is "")."""
    groups: dict[str, list[str]] = {}
    for rtype in RESOURCE_TYPES:
        versions = groups.setdefault(rtype.group, [])
        if rtype.version not in versions:
            versions.append(rtype.version)
    return groups


def core_versions(server_address: str) -> dict[str, Any]:
    """``/api``."""
    return {
        "kind": "APIVersions",
        "versions": _groups().get("", []),
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def api_group(group: str) -> dict[str, Any] | None:
    """``/apis/<group>``, or None for a group that is not served."""
    versions = _groups().get(group)
    if not group or versions is None:
        return None
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": entries,
        "preferredVersion": entries[0],
    }


def api_group_list() -> dict[str, Any]:
    """``/apis``."""
    groups = [api_group(group) for group in _groups() if group]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [g for g in groups if g is not None]}


def _resource_entries(rtype: ResourceType) -> list[dict[str, Any]]:
    main: dict[str, Any] = {
        "name": rtype.plural,
        "singularName": rtype.singular,
        "namespaced": rtype.namespaced,
        "kind": rtype.kind,
        "verbs": [*rtype.verbs, "deletecollection"] if rtype.namespaced else list(rtype.verbs),
    }
    if rtype.short_names:
        main["shortNames"] = list(rtype.short_names)
    if rtype.categories:
        main["categories"] = list(rtype.categories)
    entries = [main]
    if rtype.has_status:
        entries.append(
            {
                "name": f"{rtype.plural}/status",
                "singularName": "",
                "namespaced": rtype.namespaced,
                "kind": rtype.kind,
                "verbs": ["get", "patch", "update"],
            }
        )
    if rtype.plural == "pods" and not rtype.group:
        entries.append({"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]})
        entries.append(
            {"name": "pods/binding", "singularName": "", "namespaced": True, "kind": "Binding", "verbs": ["create"]}
        )
        entries.append(
            {
                "name": "pods/eviction",
                "singularName": "",
                "namespaced": True,
                "group": "policy",
                "version": "v1",
                "kind": "Eviction",
                "verbs": ["create"],
            }
        )
    if rtype.plural == "serviceaccounts" and not rtype.group:
        entries.append(
            {
                "name": "serviceaccounts/token",
                "singularName": "",
                "namespaced": True,
                "group": "authentication.k8s.io",
                "version": "v1",
                "kind": "TokenRequest",
                "verbs": ["create"],
            }
        )
    return entries


def api_resource_list(group: str, version: str) -> dict[str, Any] | None:
    """``/api/v1`` or ``/apis/<group>/<version>``, or None when not served."""
    served = [r for r in RESOURCE_TYPES if (r.group, r.version) == (group, version)]
    if not served:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": [entry for rtype in served for entry in _resource_entries(rtype)],
    }
