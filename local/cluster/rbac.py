"""RBAC authorization, as ``plugin/pkg/auth/authorizer/rbac`` in the API server decides it.

A request is described by :class:`Attributes` (user, verb, API group, resource, subresource,
namespace, name; or a non-resource path). It is allowed when the user is in ``system:masters``
(the API server's superuser group, which skips authorization), or when a ClusterRoleBinding, or a
RoleBinding in the request's namespace, binds one of the user's identities (User, Group, or
ServiceAccount subject) to a role with a rule that covers the request. Rules match as upstream's
``RuleAllows``: ``*`` in verbs, apiGroups and resources; ``resource/subresource`` and ``*/subresource``;
``resourceNames`` only restrict requests that name an object; ``nonResourceURLs`` exactly or by a
trailing ``*``. Aggregated ClusterRoles are not supported. Denials become a 403 with upstream's text
(``pods is forbidden: User "x" cannot list resource "pods" in API group "" in the namespace "default"``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from elastic_training.local.cluster.resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    RBAC_GROUP,
    ROLE_BINDINGS,
    ROLES,
    ApiError,
    ResourceType,
)
from elastic_training.local.cluster.store import Store

Obj = dict[str, Any]

SUPERUSER_GROUP = "system:masters"
AUTHENTICATED = "system:authenticated"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
ADMIN_USER = "elastic-training-admin"


@dataclass(frozen=True)
class UserInfo:
    """Who a request comes from: ``user.Info`` of the API server."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def service_account(self) -> tuple[str, str] | None:
        """(namespace, name) when this is a ServiceAccount's identity."""
        if not self.name.startswith(SERVICE_ACCOUNT_PREFIX):
            return None
        namespace, _, name = self.name[len(SERVICE_ACCOUNT_PREFIX) :].partition(":")
        return (namespace, name) if namespace and name else None

    def as_dict(self) -> dict[str, Any]:
        """``UserInfo`` as reviews and ``kubectl auth whoami`` print it."""
        info: dict[str, Any] = {"username": self.name, "groups": list(self.groups)}
        if self.uid:
            info["uid"] = self.uid
        if self.extra:
            info["extra"] = {key: list(values) for key, values in self.extra.items()}
        return info


def admin() -> UserInfo:
    """The identity of the cluster's admin token: cluster-admin through ``system:masters``."""
    return UserInfo(ADMIN_USER, (SUPERUSER_GROUP, AUTHENTICATED))


def service_account_user(namespace: str, name: str, uid: str = "") -> UserInfo:
    """The identity a ServiceAccount's token authenticates as (with upstream's groups)."""
    return UserInfo(
        f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
        uid,
    )


@dataclass(frozen=True)
class Attributes:
    """What a request does: ``authorizer.Attributes``."""

    user: UserInfo
    verb: str
    resource_request: bool = True
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    @classmethod
    def for_resource(
        cls,
        user: UserInfo,
        verb: str,
        rtype: ResourceType,
        namespace: str | None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> Attributes:
        return cls(user, verb, True, rtype.group, rtype.plural, subresource or "", namespace or "", name or "", "")


# -- rules ---------------------------------------------------------------------------------------


def _has(values: Sequence[str], wanted: str) -> bool:
    return "*" in values or wanted in values


def _resource_matches(rule_resources: Sequence[str], resource: str, subresource: str) -> bool:
    combined = f"{resource}/{subresource}" if subresource else resource
    for candidate in rule_resources:
        if candidate in ("*", combined):
            return True
        if subresource and candidate == f"*/{subresource}":
            return True
    return False


def _path_matches(rule_paths: Sequence[str], path: str) -> bool:
    for candidate in rule_paths:
        if candidate == "*" or candidate == path:
            return True
        if candidate.endswith("*") and path.startswith(candidate[:-1]):
            return True
    return False


def rule_allows(rule: Mapping[str, Any], attributes: Attributes) -> bool:
    """Does one ``PolicyRule`` cover the request (``rbac.RuleAllows``)?"""
    verbs = list(rule.get("verbs") or [])
    if not _has(verbs, attributes.verb):
        return False
    if not attributes.resource_request:
        return _path_matches(list(rule.get("nonResourceURLs") or []), attributes.path)
    if not _has(list(rule.get("apiGroups") or []), attributes.api_group):
        return False
    if not _resource_matches(list(rule.get("resources") or []), attributes.resource, attributes.subresource):
        return False
    names = list(rule.get("resourceNames") or [])
    return not names or attributes.name in names


def _subject_matches(subject: Mapping[str, Any], user: UserInfo, binding_namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return bool(name == user.name)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return user.name == f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"
    return False


class Authorizer:
    """RBAC over the store's roles and bindings; ``system:masters`` is allowed everything."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def _rules(self, binding: Obj, namespace: str) -> list[Mapping[str, Any]]:
        ref = binding.get("roleRef") or {}
        if ref.get("kind") == "ClusterRole":
            role = self._store.find(CLUSTER_ROLES, "", str(ref.get("name", "")))
        elif ref.get("kind") == "Role" and namespace:
            role = self._store.find(ROLES, namespace, str(ref.get("name", "")))
        else:
            role = None
        return list((role or {}).get("rules") or [])

    def _bindings(self, attributes: Attributes) -> Iterator[tuple[Obj, str]]:
        for binding in self._store.view(CLUSTER_ROLE_BINDINGS)[0]:
            yield binding, ""
        if attributes.namespace:
            for binding in self._store.view(ROLE_BINDINGS, attributes.namespace)[0]:
                yield binding, attributes.namespace

    def authorize(self, attributes: Attributes) -> tuple[bool, str]:
        """(allowed, reason): the reason names the binding and role that allowed it."""
        user = attributes.user
        if SUPERUSER_GROUP in user.groups:
            return True, f'allowed: member of "{SUPERUSER_GROUP}"'
        for binding, namespace in self._bindings(attributes):
            if not any(_subject_matches(s, user, namespace) for s in binding.get("subjects") or []):
                continue
            if any(rule_allows(rule, attributes) for rule in self._rules(binding, namespace)):
                kind = "RoleBinding" if namespace else "ClusterRoleBinding"
                ref = binding.get("roleRef") or {}
                where = f' of {ref.get("kind")} "{ref.get("name")}"'
                scope = f' in namespace "{namespace}"' if namespace else ""
                return True, f'RBAC: allowed by {kind} "{binding["metadata"]["name"]}{scope}"{where} to {user.name}'
        return False, ""

    def check(self, attributes: Attributes) -> None:
        """``forbidden(...)`` unless the request is allowed."""
        allowed, _ = self.authorize(attributes)
        if not allowed:
            raise forbidden(attributes)


def forbidden(attributes: Attributes, reason: str = "") -> ApiError:
    """The 403 ``Forbidden`` Status the API server answers a denied request with."""
    user = attributes.user.name
    if not attributes.resource_request:
        message = f'forbidden: User "{user}" cannot {attributes.verb} path "{attributes.path}"'
        return ApiError(403, "Forbidden", message + (f": {reason}" if reason else ""))
    resource = attributes.resource + (f"/{attributes.subresource}" if attributes.subresource else "")
    scope = f'in the namespace "{attributes.namespace}"' if attributes.namespace else "at the cluster scope"
    why = f'User "{user}" cannot {attributes.verb} resource "{resource}" in API group "{attributes.api_group}" {scope}'
    if reason:
        why = f"{why}: {reason}"
    group_resource = f"{attributes.resource}.{attributes.api_group}" if attributes.api_group else attributes.resource
    subject = f'{group_resource} "{attributes.name}"' if attributes.name else group_resource
    return ApiError(
        403, "Forbidden", f"{subject} is forbidden: {why}", attributes.resource, attributes.name, attributes.api_group
    )


# -- bootstrap and validation --------------------------------------------------------------------


def _bootstrap_role(name: str, rules: list[dict[str, Any]], subject: dict[str, str]) -> tuple[Obj, Obj]:
    labels = {"kubernetes.io/bootstrapping": "rbac-defaults"}
    role = {"metadata": {"name": name, "labels": labels}, "rules": rules}
    binding = {
        "metadata": {"name": name, "labels": labels},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": RBAC_GROUP, **subject}],
    }
    return role, binding


# The bootstrap policy of ``plugin/pkg/auth/authorizer/rbac/bootstrappolicy`` that this cluster needs:
# cluster-admin for system:masters; discovery and self-reviews for every authenticated identity.
BOOTSTRAP = (
    _bootstrap_role(
        "cluster-admin",
        [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, {"nonResourceURLs": ["*"], "verbs": ["*"]}],
        {"kind": "Group", "name": SUPERUSER_GROUP},
    ),
    _bootstrap_role(
        "system:discovery",
        [
            {
                "nonResourceURLs": [
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
                "verbs": ["get"],
            }
        ],
        {"kind": "Group", "name": AUTHENTICATED},
    ),
    _bootstrap_role(
        "system:basic-user",
        [
            {
                "apiGroups": ["authorization.k8s.io"],
                "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                "verbs": ["create"],
            },
            {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
        ],
        {"kind": "Group", "name": AUTHENTICATED},
    ),
)


def bootstrap(store: Store) -> None:
    """Create the bootstrap ClusterRoles and ClusterRoleBindings that are missing."""
    for role, binding in BOOTSTRAP:
        name = role["metadata"]["name"]
        if store.find(CLUSTER_ROLES, "", name) is None:
            store.create(CLUSTER_ROLES, role)
        if store.find(CLUSTER_ROLE_BINDINGS, "", name) is None:
            store.create(CLUSTER_ROLE_BINDINGS, binding)
