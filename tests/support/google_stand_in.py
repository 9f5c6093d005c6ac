"""Google's side of a GKE connection, stood in for the local cluster: OAuth tokens and ``clusters.get``.

``GoogleStandIn`` serves, on a loopback HTTP port:

- ``POST /token``: Google's OAuth 2.0 token endpoint for the JWT-bearer grant (RFC 7523), which
  ``google.auth`` uses to refresh service-account Application Default Credentials (a key file named by
  ``GOOGLE_APPLICATION_CREDENTIALS``; ``google/oauth2/service_account.py`` and ``_client.py``,
  ``jwt_grant``): form fields ``grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`` and
  ``assertion``, a JWT signed RS256 with the account's key, ``iss`` its email, ``exp`` in the future; the
  answer is ``access_token``, ``expires_in``, ``token_type``. A bad signature, issuer or expiry is 400
  ``invalid_grant``, as Google answers. The key file's ``token_uri`` points here (``google.auth`` honours
  it for service accounts). Tokens live ``token_seconds`` (Google's an hour; tests make them short).
- ``GET /v1/projects/{project}/locations/{location}/clusters/{cluster}``: the GKE API's
  ``projects.locations.clusters.get`` (``google/container/v1/cluster_service.proto``, ``Cluster``):
  ``name``, ``endpoint`` (here ``127.0.0.1:<port>``, GKE's is an address on 443), ``masterAuth
  .clusterCaCertificate`` (base64 of the PEM), ``privateClusterConfig.privateEndpoint``, ``status``. It
  wants a live access token (401 ``UNAUTHENTICATED`` otherwise) and answers 404 ``NOT_FOUND`` for
  another cluster, with Google's JSON error body.

:meth:`GoogleStandIn.review` answers kube-apiserver's token webhook (``UpstreamCluster.add_token_webhook``), as
GKE's authenticator accepts a live Google access token as the Google account's email and refuses an
expired one with 401. Plain HTTP, loopback only: Google's endpoints are HTTPS with public certificates.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
CLOCK_SKEW_SECONDS = 300


AUTHENTICATED = "system:authenticated"


@dataclass(frozen=True)
class UserInfo:
    """Who a Google access token stands for, as GKE's authenticator answers kube-apiserver's TokenReview."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""


@dataclass
class TokenLedger:
    """Access tokens issued, and what became of them (for the tests' assertions)."""

    issued: list[tuple[str, float]] = field(default_factory=list)  # (token, expires_at)
    refused_expired: int = 0
    cluster_lookups: int = 0


class GoogleStandIn:
    """A Google OAuth token endpoint and a GKE API for one local cluster; a context manager."""

    def __init__(
        self,
        *,
        project: str,
        location: str,
        cluster: str,
        endpoint: str,
        ca_pem: bytes,
        email: str = "airflow@stand-in-project.iam.gserviceaccount.com",
        token_seconds: float = 3600.0,
    ) -> None:
        self.project, self.location, self.cluster = project, location, cluster
        self.endpoint, self.ca_pem, self.email = endpoint, ca_pem, email
        self.token_seconds = token_seconds
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ledger = TokenLedger()
        self._live: dict[str, float] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the stand-in is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> GoogleStandIn:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                stand_in._serve(self, "POST")

            def do_GET(self) -> None:
                stand_in._serve(self, "GET")

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the tests' output stays the tests'

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="google-stand-in", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> GoogleStandIn:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def write_credentials(self, path: Path) -> Path:
        """A service-account key file (``GOOGLE_APPLICATION_CREDENTIALS``) whose token URI is this stand-in."""
        pem = self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        path.write_text(
            json.dumps(
                {
                    "type": "service_account",
                    "project_id": self.project,
                    "private_key_id": "stand-in",
                    "private_key": pem.decode(),
                    "client_email": self.email,
                    "client_id": "1",
                    "token_uri": f"{self.url}/token",
                }
            )
        )
        path.chmod(0o600)
        return path

    # -- the token webhook ------------------------------------------------------------------

    def review(self, token: str) -> UserInfo | None:
        """The Google account a live token stands for; ``None`` for an unknown or expired one."""
        with self._lock:
            expires_at = self._live.get(token)
            if expires_at is None:
                return None
            if expires_at <= time.time():
                self.ledger.refused_expired += 1
                return None
        return UserInfo(self.email, (AUTHENTICATED,), "")

    def expired(self, token: str) -> bool:
        """Whether ``token`` (one this stand-in issued) has expired."""
        with self._lock:
            return self._live.get(token, 0.0) <= time.time()

    # -- HTTP -------------------------------------------------------------------------------

    def _serve(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        path = handler.path.split("?", 1)[0]
        if method == "POST" and path == "/token":
            length = int(handler.headers.get("Content-Length") or 0)
            form = {k: v[0] for k, v in parse_qs(handler.rfile.read(length).decode()).items()}
            self._answer(handler, *self._token(form))
        elif method == "GET" and path.startswith("/v1/"):
            self._answer(handler, *self._cluster(unquote(path[len("/v1/") :]), handler.headers.get("Authorization")))
        else:
            self._answer(handler, 404, _google_error(404, "NOT_FOUND", f"{method} {path} is not served"))

    def _token(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if form.get("grant_type") != JWT_BEARER:
            return 400, {"error": "unsupported_grant_type", "error_description": "Invalid grant_type"}
        problem = self._assertion_problem(form.get("assertion", ""))
        if problem:
            return 400, {"error": "invalid_grant", "error_description": problem}
        token = "ya29." + secrets.token_urlsafe(32)
        expires_at = time.time() + self.token_seconds
        with self._lock:
            self._live = {t: e for t, e in self._live.items() if e > time.time() - 3600}
            self._live[token] = expires_at
            self.ledger.issued.append((token, expires_at))
        return 200, {
            "access_token": token,
            "expires_in": max(1, int(self.token_seconds)),
            "token_type": "Bearer",
        }

    def _assertion_problem(self, assertion: str) -> str | None:
        """Why Google would refuse the JWT assertion, or ``None``."""
        try:
            header, payload, signature = (_unb64(part) for part in assertion.split("."))
            claims = json.loads(payload)
            algorithm = json.loads(header).get("alg")
        except (ValueError, binascii.Error):
            return "Invalid JWT: malformed assertion"
        if algorithm != "RS256":
            return "Invalid JWT: unsupported algorithm"
        signed = assertion.rsplit(".", 1)[0].encode()
        try:
            self._key.public_key().verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            return "Invalid JWT Signature."
        now = time.time()
        if claims.get("iss") != self.email:
            return "Invalid JWT: the issuer is not a known service account"
        if not isinstance(claims.get("exp"), int) or claims["exp"] < now - CLOCK_SKEW_SECONDS:
            return "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe."
        return None

    def _cluster(self, name: str, authorization: str | None) -> tuple[int, dict[str, Any]]:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or self.review(token) is None:
            message = (
                "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie "
                "or other valid authentication credential."
            )
            return 401, _google_error(401, "UNAUTHENTICATED", message)
        expected = f"projects/{self.project}/locations/{self.location}/clusters/{self.cluster}"
        if name != expected:
            return 404, _google_error(404, "NOT_FOUND", f"Not found: {name}.")
        with self._lock:
            self.ledger.cluster_lookups += 1
        return 200, {
            "name": self.cluster,
            "location": self.location,
            "endpoint": self.endpoint,
            "masterAuth": {"clusterCaCertificate": base64.b64encode(self.ca_pem).decode()},
            "privateClusterConfig": {"privateEndpoint": self.endpoint},
            "status": "RUNNING",
        }

    @staticmethod
    def _answer(handler: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json; charset=UTF-8")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)


def _unb64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _google_error(code: int, status: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}
