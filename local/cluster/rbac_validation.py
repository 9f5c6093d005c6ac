"""Validation of the RBAC kinds, as ``pkg/apis/rbac/validation`` in the API server checks them.

Roles and ClusterRoles: every rule needs verbs; a resource rule needs apiGroups and resources; a
``nonResourceURLs`` rule only in a ClusterRole and never mixed with resources. RoleBindings and
ClusterRoleBindings: ``roleRef`` (apiGroup ``rbac.authorization.k8s.io``, kind Role or ClusterRole,
ClusterRole only cluster-wide, name), immutable on update; subjects of kind User, Group or
ServiceAccount with a name (a ServiceAccount in a ClusterRoleBinding also a namespace). Kept apart
from :mod:`local.cluster.rbac` (authorization and bootstrap, which write through the store) so the
store's validation does not depend on the authorizer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from elastic_training.local.cluster.resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    RBAC_GROUP,
    ROLE_BINDINGS,
    ROLES,
    Cause,
    ResourceType,
)


def _required(path: str) -> Cause:
    return Cause(path, "Required value", "FieldValueRequired")


def validate_role(obj: Mapping[str, Any], *, namespaced: bool) -> list[Cause]:
    """``rules[*]``: verbs required; resource rules need apiGroups and resources; nonResourceURLs only cluster-wide."""
    causes: list[Cause] = []
    rules = obj.get("rules") or []
    if not isinstance(rules, list):
        return [Cause("rules", "Invalid value: must be a list")]
    for index, rule in enumerate(rules):
        path = f"rules[{index}]"
        if not isinstance(rule, dict):
            causes.append(Cause(path, "Invalid value: must be an object"))
            continue
        if not rule.get("verbs"):
            causes.append(_required(f"{path}.verbs"))
        if rule.get("nonResourceURLs"):
            if namespaced:
                causes.append(Cause(f"{path}.nonResourceURLs", "Invalid value: namespaced rules cannot apply to "
                                    "non-resource URLs"))  # fmt: skip
            if rule.get("resources") or rule.get("apiGroups"):
                causes.append(Cause(f"{path}.nonResourceURLs", "Invalid value: rules cannot apply to both regular "
                                    "resources and non-resource URLs"))  # fmt: skip
        else:
            if not rule.get("apiGroups"):
                causes.append(_required(f"{path}.apiGroups"))
            if not rule.get("resources"):
                causes.append(_required(f"{path}.resources"))
    return causes


def validate_binding(obj: Mapping[str, Any], *, namespaced: bool) -> list[Cause]:
    """``roleRef`` (Role only in a RoleBinding) and ``subjects`` (User, Group, ServiceAccount)."""
    causes: list[Cause] = []
    ref = obj.get("roleRef")
    if not isinstance(ref, dict):
        return [_required("roleRef")]
    if ref.get("apiGroup") != RBAC_GROUP:
        causes.append(Cause("roleRef.apiGroup", f'Unsupported value: {ref.get("apiGroup")!r}: supported values: '
                            f'"{RBAC_GROUP}"', "FieldValueNotSupported"))  # fmt: skip
    allowed = ("Role", "ClusterRole") if namespaced else ("ClusterRole",)
    if ref.get("kind") not in allowed:
        choices = ", ".join(f'"{k}"' for k in allowed)
        causes.append(Cause("roleRef.kind", f"Unsupported value: {ref.get('kind')!r}: supported values: {choices}",
                            "FieldValueNotSupported"))  # fmt: skip
    if not ref.get("name"):
        causes.append(_required("roleRef.name"))
    for index, subject in enumerate(obj.get("subjects") or []):
        path = f"subjects[{index}]"
        if not isinstance(subject, dict):
            causes.append(Cause(path, "Invalid value: must be an object"))
            continue
        if subject.get("kind") not in ("User", "Group", "ServiceAccount"):
            causes.append(Cause(f"{path}.kind", f"Unsupported value: {subject.get('kind')!r}: supported values: "
                                '"ServiceAccount", "User", "Group"', "FieldValueNotSupported"))  # fmt: skip
        if not subject.get("name"):
            causes.append(_required(f"{path}.name"))
        if subject.get("kind") == "ServiceAccount" and not namespaced and not subject.get("namespace"):
            causes.append(_required(f"{path}.namespace"))
    return causes


def validate_binding_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Cause]:
    """A binding's ``roleRef`` cannot change (delete and recreate it instead)."""
    if old.get("roleRef") != new.get("roleRef"):
        return [Cause("roleRef", f"Invalid value: {new.get('roleRef')!r}: cannot change roleRef")]
    return []


BINDING_TYPES = (ROLE_BINDINGS, CLUSTER_ROLE_BINDINGS)
VALIDATORS: dict[ResourceType, Callable[[Mapping[str, Any]], list[Cause]]] = {
    ROLES: partial(validate_role, namespaced=True),
    CLUSTER_ROLES: partial(validate_role, namespaced=False),
    ROLE_BINDINGS: partial(validate_binding, namespaced=True),
    CLUSTER_ROLE_BINDINGS: partial(validate_binding, namespaced=False),
}
