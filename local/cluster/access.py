"""Access control at the HTTP layer: authenticate, impersonate, authorize, and the review and token APIs.

Follows the API server's filter chain (``WithAuthentication`` → ``WithImpersonation`` →
``WithAuthorization``) and its request attributes (``RequestInfoFactory``): GET of a collection is
``list`` (``watch`` with ``watch=true``), of an object ``get``; POST ``create``; PUT ``update``; PATCH
``patch``; DELETE ``delete``, or ``deletecollection`` on a collection; ``pods/log`` and
``serviceaccounts/token`` are subresources. Paths outside the resource grammar (discovery, OpenAPI,
``/_local/faults``) are non-resource requests, verb the lower-cased method.

Served here rather than stored: ``serviceaccounts/<name>/token`` (TokenRequest, ``kubectl create token``),
``selfsubjectaccessreviews`` (``kubectl auth can-i``) and ``selfsubjectreviews`` (``kubectl auth whoami``).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from elastic_training.local.cluster.authentication import Authenticator
from elastic_training.local.cluster.protobuf import decode_body
from elastic_training.local.cluster.rbac import Attributes, Authorizer, UserInfo, bootstrap
from elastic_training.local.cluster.resources import (
    SELF_SUBJECT_ACCESS_REVIEWS,
    SELF_SUBJECT_REVIEWS,
    SERVICE_ACCOUNTS,
    ApiError,
    bad_request,
)
from elastic_training.local.cluster.store import Store
from elastic_training.local.cluster.targets import Target

USER_KEY = web.RequestKey("user", UserInfo)
PUBLIC_PATHS = ("/healthz", "/readyz", "/livez", "/version", "/version/")


def is_resource_path(path: str) -> bool:
    """Whether a path names a resource (``/api/v1/<...>``, ``/apis/<g>/<v>/<...>``), not discovery."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        return len(parts) >= 3
    if parts[:1] == ["apis"]:
        return len(parts) >= 4
    return False


def resource_verb(method: str, target: Target, watch: bool) -> str:
    if method == "GET":
        if target.name is None:
            return "watch" if watch else "list"
        return "get"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "deletecollection" if target.name is None else "delete"
    return method.lower()


def user_of(request: web.Request) -> UserInfo:
    """The identity the authentication middleware attached to the request."""
    user = request.get(USER_KEY)
    if not isinstance(user, UserInfo):
        raise ApiError(401, "Unauthorized", "Unauthorized")
    return user


class Access:
    """Authentication, impersonation and RBAC for one API server, and the APIs that expose them."""

    def __init__(self, store: Store, admin_token: str | None) -> None:
        self.store = store
        self.authenticator = Authenticator(store, admin_token)
        self.authorizer = Authorizer(store)
        bootstrap(store)

    def admit(self, request: web.Request) -> None:
        """Attach the request's identity; authorize a non-resource request (resource requests: :meth:`authorize`)."""
        if request.path in PUBLIC_PATHS:
            return
        user = self.authenticator.authenticate(request.headers.get("Authorization", ""))
        user = self.authenticator.impersonate(user, request.headers, self.authorizer)
        request[USER_KEY] = user
        if not is_resource_path(request.path):
            self.authorizer.check(Attributes(user, request.method.lower(), False, path=request.path))

    def authorize(self, request: web.Request, target: Target) -> None:
        """403 unless RBAC lets the request's identity do this to ``target``."""
        watch = request.query.get("watch", "").lower() in ("true", "1")
        verb = resource_verb(request.method, target, watch)
        namespace = target.namespace if target.rtype.namespaced else None
        attributes = Attributes.for_resource(
            user_of(request), verb, target.rtype, namespace, target.name, target.subresource
        )
        self.authorizer.check(attributes)

    async def serve(self, request: web.Request, target: Target) -> web.Response | None:
        """Answer the token and review APIs; None for every other target."""
        rtype = target.rtype
        if rtype == SERVICE_ACCOUNTS and target.subresource == "token":
            if request.method != "POST":
                raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported on {request.path}")
            account = self.store.get(SERVICE_ACCOUNTS, str(target.namespace), str(target.name))
            return _json(self.authenticator.issue(account, await _body(request)), 201)
        if rtype not in (SELF_SUBJECT_ACCESS_REVIEWS, SELF_SUBJECT_REVIEWS):
            return None
        if request.method != "POST" or target.name is not None:
            raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported on {request.path}")
        body = await _body(request)
        user = user_of(request)
        if rtype == SELF_SUBJECT_REVIEWS:
            answer = {"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1", "metadata": {}}
            answer["status"] = {"userInfo": user.as_dict()}
            return _json(answer, 201)
        spec = body.get("spec") or {}
        attributes = _review_attributes(user, spec)
        allowed, reason = self.authorizer.authorize(attributes)
        status: dict[str, Any] = {"allowed": allowed}
        if reason:
            status["reason"] = reason
        answer = {
            "kind": "SelfSubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }
        return _json(answer, 201)


def _review_attributes(user: UserInfo, spec: dict[str, Any]) -> Attributes:
    resource = spec.get("resourceAttributes")
    non_resource = spec.get("nonResourceAttributes")
    if isinstance(resource, dict) == isinstance(non_resource, dict):
        raise ApiError(
            422,
            "Invalid",
            'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes: Invalid value: '
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )
    if isinstance(non_resource, dict):
        return Attributes(user, str(non_resource.get("verb", "")), False, path=str(non_resource.get("path", "")))
    if not isinstance(resource, dict):  # unreachable: exactly one of the two is an object
        raise bad_request("spec.resourceAttributes must be an object")
    return Attributes(
        user,
        str(resource.get("verb", "")),
        True,
        str(resource.get("group", "")),
        str(resource.get("resource", "")),
        str(resource.get("subresource", "")),
        str(resource.get("namespace", "")),
        str(resource.get("name", "")),
    )


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        return {}
    body = decode_body(raw, request.content_type)
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return body


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(body).encode(), status=status, content_type="application/json")
