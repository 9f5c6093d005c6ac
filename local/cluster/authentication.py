"""Who a request comes from: bearer tokens, ServiceAccount tokens from the TokenRequest API, impersonation.

Follows the API server's authenticators in the small:
- the admin token ``cluster up`` writes into the kubeconfig authenticates as a member of
  ``system:masters`` (cluster-admin);
- ``POST .../serviceaccounts/<name>/token`` (``kubectl create token``) issues a bound token for that
  ServiceAccount: it authenticates as ``system:serviceaccount:<ns>:<name>`` with upstream's groups, until it
  expires (``expirationSeconds``, default 3600, at least 600) or the ServiceAccount is deleted (its uid is
  checked). Tokens are opaque random strings held in memory, not signed JWTs: nothing outside this
  server needs to verify them;
- ``Impersonate-User`` / ``Impersonate-Group`` / ``Impersonate-Uid`` headers (``kubectl --as``,
  ``--as-group``) switch to another identity when the requester may ``impersonate`` it (users, groups,
  serviceaccounts in RBAC; the admin may), as ``WithImpersonation`` does;
- any other bearer token goes to the token webhooks (``--authentication-token-webhook-config-file``,
  ``k8s.io/apiserver/plugin/pkg/authenticator/token/webhook/webhook.go``): a webhook answers a
  TokenReview with the identity, or ``authenticated: false``. GKE authenticates Google OAuth access
  tokens this way (as the Google account's email); a webhook here is a callable
  (:meth:`Authenticator.add_token_webhook`) that answers for the tokens it issued and refuses them once
  they have expired. Upstream caches a webhook's answer (``--authentication-token-webhook-cache-ttl``,
  2 minutes); this server asks on every request, so an expired token is refused at once.
Any other token is 401 ``Unauthorized``.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from multidict import CIMultiDictProxy

from elastic_training.local.cluster.rbac import (
    AUTHENTICATED,
    Attributes,
    Authorizer,
    UserInfo,
    admin,
    forbidden,
    service_account_user,
)
from elastic_training.local.cluster.resources import SERVICE_ACCOUNTS, ApiError, bad_request
from elastic_training.local.cluster.store import Obj, Store

DEFAULT_EXPIRATION_SECONDS = 3600
MIN_EXPIRATION_SECONDS = 600
MAX_EXPIRATION_SECONDS = 48 * 3600  # kube-apiserver's --service-account-max-token-expiration, as GKE sets it
MAX_TOKENS = 10_000  # issued tokens kept; the oldest go first


# A token webhook: the identity a bearer token stands for, or None when the webhook does not know it
# (``status.authenticated: false``), it expired, or it was revoked.
TokenWebhook = Callable[[str], UserInfo | None]


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


@dataclass(frozen=True)
class IssuedToken:
    """A ServiceAccount token: whose, until when."""

    namespace: str
    name: str
    uid: str
    expires: float  # time.time()
    audiences: tuple[str, ...]


class Authenticator:
    """Maps a request's bearer token (and impersonation headers) to a :class:`UserInfo`."""

    def __init__(self, store: Store, admin_token: str | None) -> None:
        self._store = store
        self._admin_token = admin_token
        self._tokens: dict[str, IssuedToken] = {}
        self._webhooks: list[TokenWebhook] = []

    def add_token_webhook(self, webhook: TokenWebhook) -> None:
        """Ask ``webhook`` about bearer tokens that are neither the admin's nor a ServiceAccount's."""
        self._webhooks.append(webhook)

    def issue(self, service_account: Obj, request: Any) -> dict[str, Any]:
        """Answer a ``TokenRequest`` for ``service_account``: the TokenRequest with ``status.token``."""
        spec = (request or {}).get("spec") or {}
        seconds = spec.get("expirationSeconds", DEFAULT_EXPIRATION_SECONDS)
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            raise bad_request("spec.expirationSeconds must be an integer")
        if seconds < MIN_EXPIRATION_SECONDS:
            raise ApiError(
                422,
                "Invalid",
                f'TokenRequest.authentication.k8s.io "{service_account["metadata"]["name"]}" is invalid: '
                "spec.expirationSeconds: Invalid value: "
                f"{seconds}: may not specify a duration less than 10 minutes",
            )
        seconds = min(seconds, MAX_EXPIRATION_SECONDS)
        audiences = tuple(str(a) for a in spec.get("audiences") or ["https://kubernetes.default.svc"])
        meta = service_account["metadata"]
        token = secrets.token_urlsafe(32)
        if len(self._tokens) >= MAX_TOKENS:
            del self._tokens[next(iter(self._tokens))]
        self._tokens[token] = IssuedToken(
            meta["namespace"], meta["name"], meta["uid"], time.time() + seconds, audiences
        )
        expires = datetime.now(UTC) + timedelta(seconds=seconds)
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "creationTimestamp": None},
            "spec": {"audiences": list(audiences), "expirationSeconds": seconds, "boundObjectRef": None},
            "status": {"token": token, "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")},
        }

    def authenticate(self, authorization: str) -> UserInfo:
        """The identity behind an ``Authorization`` header; 401 when it names none."""
        if self._admin_token is None:
            return admin()
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise unauthorized()
        if hmac.compare_digest(token.encode(), self._admin_token.encode()):
            return admin()
        issued = self._tokens.get(token)
        if issued is None:
            for webhook in self._webhooks:
                reviewed = webhook(token)
                if reviewed is not None:
                    return reviewed
            raise unauthorized()
        if issued.expires < time.time():
            del self._tokens[token]
            raise unauthorized()
        account = self._store.find(SERVICE_ACCOUNTS, issued.namespace, issued.name)
        if account is None or account["metadata"].get("uid") != issued.uid:
            raise unauthorized()  # the ServiceAccount the token was bound to is gone
        return service_account_user(issued.namespace, issued.name, issued.uid)

    def impersonate(self, user: UserInfo, headers: CIMultiDictProxy[str], authorizer: Authorizer) -> UserInfo:
        """The identity the ``Impersonate-*`` headers ask for, when ``user`` may impersonate it."""
        name = headers.get("Impersonate-User")
        groups = tuple(headers.getall("Impersonate-Group", []))
        uid = headers.get("Impersonate-Uid")
        if name is None:
            if groups or uid:
                raise bad_request("requested impersonation of groups or uid without impersonating a user")
            return user
        target = service_account_user(*_split_service_account(name)) if _is_service_account(name) else None
        if target is not None:
            namespace, account = _split_service_account(name)
            checks = [Attributes(user, "impersonate", True, "", "serviceaccounts", "", namespace, account)]
        else:
            checks = [Attributes(user, "impersonate", True, "", "users", "", "", name)]
        checks += [Attributes(user, "impersonate", True, "", "groups", "", "", group) for group in groups]
        if uid:
            checks.append(Attributes(user, "impersonate", True, "authentication.k8s.io", "uids", "", "", uid))
        for attributes in checks:
            allowed, _ = authorizer.authorize(attributes)
            if not allowed:
                raise forbidden(attributes)
        if target is not None and not groups:
            return UserInfo(target.name, target.groups, uid or "")
        base = groups if AUTHENTICATED in groups or name == "system:anonymous" else (*groups, AUTHENTICATED)
        return UserInfo(name, base, uid or "")


def _is_service_account(name: str) -> bool:
    return name.startswith("system:serviceaccount:") and name.count(":") == 3


def _split_service_account(name: str) -> tuple[str, str]:
    _, _, namespace, account = name.split(":", 3)
    return namespace, account
