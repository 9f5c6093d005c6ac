"""GKE access for a ``kubernetes`` connection without a kubeconfig: endpoint and CA from the GKE API, Google tokens.

A GKE kubeconfig authenticates by running ``gke-gcloud-auth-plugin``, which an Airflow image or a Composer
worker need not have. This module does what the Google provider's GKE hook does instead
(``providers/google/.../hooks/kubernetes_engine.py``, ``GKEClusterConnection``), without the provider:

- the cluster's endpoint and CA certificate come from the GKE API, ``projects.locations.clusters.get``
  (``endpoint``, ``masterAuth.clusterCaCertificate``; the private or DNS endpoint when asked for), looked
  up once per process and cluster for ``ENDPOINT_TTL_SECONDS``;
- every request carries a short-lived Google access token from Application Default Credentials
  (``google.auth.default``: Workload Identity or the node's service account on GKE, Composer's
  environment service account, ``GOOGLE_APPLICATION_CREDENTIALS``, ``gcloud auth application-default
  login``), fetched through a :class:`TokenSource` and refreshed by a :class:`TokenCache` before it expires.
  The Kubernetes clients ask for the token on every request (their ``refresh_api_key_hook``), so one API
  client serves a whole run, a triggerer's watches included: a watch is authenticated when it opens, and
  each reopening carries the current token.

A connection uses it when its extra has ``gke_cluster`` (see :class:`GkeTarget` and docs/deploy.md).
google-auth is the ``gke`` extra (``pip install 'elastic-training[gke]'``); it is imported only here, only then.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import os
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from airflow.sdk.exceptions import AirflowException

GKE_API_URL = "https://container.googleapis.com"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
# Refresh when less than this much of a token's life is left (or half its lifetime, for short-lived ones):
# a request built just before expiry must still be accepted when it reaches the server.
REFRESH_MARGIN_SECONDS = 300.0
ENDPOINT_TTL_SECONDS = 600.0
GKE_API_TIMEOUT_SECONDS = 30.0
EXTRA_KEYS = ("gke_cluster", "gke_project", "gke_location", "gke_endpoint", "gke_api_url")
NO_CREDENTIALS_ADVICE = (
    "run Airflow with a Google service account (Workload Identity on GKE, the environment's service account "
    "on Cloud Composer), or set GOOGLE_APPLICATION_CREDENTIALS to a credentials file, or run "
    "`gcloud auth application-default login`; install the `gke` extra (`pip install 'elastic-training[gke]'`)"
)


class ClusterAccessError(AirflowException):
    """The cluster behind a connection cannot be used as configured; the message says what to set."""


class EndpointKind(StrEnum):
    """Which address of the control plane to use (``gke_endpoint``)."""

    PUBLIC = "public"  # ``endpoint``: the external IP (or the only one)
    PRIVATE = "private"  # ``privateClusterConfig.privateEndpoint``: from inside the VPC
    DNS = "dns"  # ``controlPlaneEndpointsConfig.dnsEndpointConfig.endpoint``: a publicly trusted certificate


@dataclass(frozen=True)
class AccessToken:
    """A bearer token and when it expires (``time.time()``; ``None`` when the issuer did not say)."""

    value: str
    expires_at: float | None


class TokenSource(Protocol):
    """Where access tokens come from: each call fetches a fresh one (blocking, may do I/O)."""

    def fetch(self) -> AccessToken: ...


class GoogleTokenSource:
    """Access tokens from Application Default Credentials (``google.auth.default``), cloud-platform scope."""

    def __init__(self) -> None:
        self._credentials: Any = None

    def fetch(self) -> AccessToken:
        try:
            import google.auth
            import google.auth.exceptions
            import google.auth.transport.requests
        except ImportError:
            raise ClusterAccessError(
                "a GKE connection needs google-auth: pip install 'elastic-training[gke]'"
            ) from None
        try:
            if self._credentials is None:
                self._credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
            self._credentials.refresh(google.auth.transport.requests.Request())
        except google.auth.exceptions.DefaultCredentialsError as error:
            raise ClusterAccessError(
                f"no Google credentials found for the GKE connection ({_first_line(error)}): {NO_CREDENTIALS_ADVICE}"
            ) from None
        except google.auth.exceptions.GoogleAuthError as error:
            raise ClusterAccessError(
                f"cannot get a Google access token for the GKE connection ({type(error).__name__}: "
                f"{_first_line(error)}): check the service account and its key or Workload Identity binding"
            ) from None
        expiry = self._credentials.expiry  # naive UTC (google-auth's convention), or None
        expires_at = expiry.replace(tzinfo=UTC).timestamp() if expiry is not None else None
        return AccessToken(str(self._credentials.token), expires_at)


class TokenCache:
    """The current token of a source, refreshed when it is close to expiry; safe across threads and tasks."""

    def __init__(self, source: TokenSource) -> None:
        self.source = source
        self._token: AccessToken | None = None
        self._fetched_at = 0.0
        self._lock = threading.Lock()

    def _fresh(self, now: float) -> str | None:
        token = self._token
        if token is None:
            return None
        if token.expires_at is None:
            return token.value
        margin = min(REFRESH_MARGIN_SECONDS, (token.expires_at - self._fetched_at) / 2)
        return token.value if now < token.expires_at - margin else None

    def current(self) -> str:
        """The token to send now (fetched, blocking, when there is none fresh enough)."""
        with self._lock:
            found = self._fresh(time.time())
            if found is not None:
                return found
            fetched_at = time.time()
            self._token = self.source.fetch()
            self._fetched_at = fetched_at
            return self._token.value

    async def acurrent(self) -> str:
        """:meth:`current` for an event loop: no I/O on the loop, a fetch runs in a worker thread."""
        found = self._fresh(time.time())
        return found if found is not None else await asyncio.to_thread(self.current)

    def invalidate(self) -> None:
        """Forget the token (the server refused it): the next request fetches a new one."""
        with self._lock:
            self._token = None


@dataclass(frozen=True)
class GkeTarget:
    """The cluster a connection names: ``projects/<project>/locations/<location>/clusters/<cluster>``."""

    project: str
    location: str
    cluster: str
    endpoint: EndpointKind = EndpointKind.PUBLIC
    api_url: str = GKE_API_URL

    @property
    def name(self) -> str:
        return f"projects/{self.project}/locations/{self.location}/clusters/{self.cluster}"

    @classmethod
    def from_extras(
        cls, extras: Mapping[str, Any], *, conn_id: str, defaults: Mapping[str, str] | None = None
    ) -> GkeTarget | None:
        """The target of a connection's extra; ``None`` without ``gke_cluster``.

        ``gke_cluster`` is a name or ``projects/P/locations/L/clusters/C``; ``gke_project`` and
        ``gke_location`` default to ``defaults`` (the ``[elastic_training]`` options of the same names).
        """
        raw = extras.get("gke_cluster")
        if not raw:
            return None
        where = f"connection {conn_id!r}"
        clashing = [key for key in ("kube_config", "kube_config_path", "in_cluster") if extras.get(key)]
        if clashing:
            raise ClusterAccessError(
                f"{where} sets gke_cluster and {', '.join(clashing)}: a GKE connection takes the endpoint and "
                "credentials from Google; remove one of them"
            )
        values = {"gke_project": "", "gke_location": "", **dict(defaults or {})}
        values.update({k: str(v) for k, v in extras.items() if k in EXTRA_KEYS and v})
        cluster = str(raw)
        parts = cluster.split("/")
        if len(parts) == 6 and parts[0] == "projects" and parts[2] == "locations" and parts[4] == "clusters":
            values["gke_project"], values["gke_location"], cluster = parts[1], parts[3], parts[5]
        elif "/" in cluster:
            raise ClusterAccessError(
                f"{where}: gke_cluster {cluster!r} is neither a cluster name nor projects/P/locations/L/clusters/C"
            )
        missing = [key for key in ("gke_project", "gke_location") if not values[key]]
        if missing:
            raise ClusterAccessError(
                f"{where} names GKE cluster {cluster!r} but not its {' and '.join(missing)}: set them in the "
                "connection's extra or in the [elastic_training] section"
            )
        try:
            endpoint = EndpointKind(values.get("gke_endpoint", EndpointKind.PUBLIC))
        except ValueError:
            raise ClusterAccessError(
                f"{where}: gke_endpoint {values['gke_endpoint']!r} is not one of "
                f"{', '.join(kind.value for kind in EndpointKind)}"
            ) from None
        api_url = values.get("gke_api_url", GKE_API_URL).rstrip("/")
        return cls(values["gke_project"], values["gke_location"], cluster, endpoint, api_url)


@dataclass(frozen=True)
class ClusterEndpoint:
    """Where the control plane answers (``https://...``) and the CA to trust (``None``: the system's)."""

    host: str
    ca_pem: bytes | None

    def ca_file(self) -> str | None:
        """The CA as a file, as the Kubernetes clients take it: one per CA and process, private to it."""
        if self.ca_pem is None:
            return None
        with _CA_FILES_LOCK:
            path = _CA_FILES.get(self.ca_pem)
            if path is None or not Path(path).is_file():
                # mkstemp: a new file only this user can write, never a predictable name another user of the
                # host could have placed (a CA of theirs would let them read the cluster's traffic).
                descriptor, path = tempfile.mkstemp(prefix="elastic-training-gke-ca-", suffix=".crt")
                with os.fdopen(descriptor, "wb") as handle:
                    handle.write(self.ca_pem)
                _CA_FILES[self.ca_pem] = path
            return path


_CA_FILES: dict[bytes, str] = {}
_CA_FILES_LOCK = threading.Lock()


def lookup_endpoint(target: GkeTarget, tokens: TokenCache) -> ClusterEndpoint:
    """``projects.locations.clusters.get``: the endpoint of ``target.endpoint`` kind and the cluster CA."""
    url = f"{target.api_url}/v1/{quote(target.name)}"
    request = urllib.request.Request(
        url, headers={"Authorization": f"Bearer {tokens.current()}", "Accept": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=GKE_API_TIMEOUT_SECONDS) as response:
            cluster: dict[str, Any] = json.loads(response.read())
    except urllib.error.HTTPError as error:
        if error.code == 401:
            tokens.invalidate()
        raise ClusterAccessError(_gke_api_refusal(target, error)) from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise ClusterAccessError(
            f"cannot read GKE cluster {target.name} from {target.api_url} ({type(error).__name__}: "
            f"{_first_line(error)}): check the network path to the GKE API"
        ) from None
    return _endpoint_of(target, cluster)


def _endpoint_of(target: GkeTarget, cluster: Mapping[str, Any]) -> ClusterEndpoint:
    if target.endpoint is EndpointKind.DNS:
        dns = ((cluster.get("controlPlaneEndpointsConfig") or {}).get("dnsEndpointConfig") or {}).get("endpoint")
        if not dns:
            raise ClusterAccessError(
                f"GKE cluster {target.name} has no DNS endpoint: enable it (gcloud container clusters update "
                "--enable-dns-access) or set gke_endpoint to public or private"
            )
        return ClusterEndpoint(f"https://{dns}", None)  # a publicly trusted certificate
    if target.endpoint is EndpointKind.PRIVATE:
        address = (cluster.get("privateClusterConfig") or {}).get("privateEndpoint")
        if not address:
            raise ClusterAccessError(f"GKE cluster {target.name} has no private endpoint: set gke_endpoint to public")
    else:
        address = cluster.get("endpoint")
    if not address:
        raise ClusterAccessError(f"GKE cluster {target.name} has no endpoint yet (is it still being created?)")
    encoded = (cluster.get("masterAuth") or {}).get("clusterCaCertificate")
    try:
        ca_pem = base64.b64decode(str(encoded or ""), validate=True)
    except (binascii.Error, ValueError):
        ca_pem = b""
    if b"-----BEGIN CERTIFICATE-----" not in ca_pem:
        raise ClusterAccessError(f"GKE cluster {target.name}: masterAuth.clusterCaCertificate is not a PEM certificate")
    return ClusterEndpoint(f"https://{address}", ca_pem)


def _gke_api_refusal(target: GkeTarget, error: urllib.error.HTTPError) -> str:
    detail = ""
    with contextlib.suppress(ValueError, AttributeError, OSError):
        detail = str(json.loads(error.read()).get("error", {}).get("message", ""))[:300]
    head = f"the GKE API refused to read cluster {target.name} (HTTP {error.code}{': ' + detail if detail else ''})"
    advice = {
        401: "the Google access token was not accepted; check the credentials Airflow runs with",
        403: (
            "grant Airflow's Google service account roles/container.clusterViewer (container.clusters.get) "
            f"on project {target.project}"
        ),
        404: "check gke_project, gke_location (region or zone) and gke_cluster",
    }.get(error.code, "retry later")
    return f"{head}: {advice}"


class GkeAccess:
    """One GKE cluster's endpoint and token cache, shared by every hook of the process that names it."""

    def __init__(self, target: GkeTarget, tokens: TokenCache) -> None:
        self.target = target
        self.tokens = tokens
        self._endpoint: ClusterEndpoint | None = None
        self._looked_up_at = 0.0
        self._lock = threading.Lock()

    def endpoint(self) -> ClusterEndpoint:
        """The cluster's endpoint and CA (looked up at most every ``ENDPOINT_TTL_SECONDS``)."""
        with self._lock:
            if self._endpoint is None or time.monotonic() - self._looked_up_at > ENDPOINT_TTL_SECONDS:
                self._endpoint = lookup_endpoint(self.target, self.tokens)
                self._looked_up_at = time.monotonic()
            return self._endpoint

    def sync_configuration(self) -> Any:
        """A ``kubernetes.client.Configuration`` for the cluster whose token is refreshed per request."""
        from kubernetes import client

        endpoint = self.endpoint()
        configuration = client.Configuration(
            host=endpoint.host, api_key=_bearer(self.tokens.current()), api_key_prefix=_bearer("Bearer")
        )
        configuration.ssl_ca_cert = endpoint.ca_file()

        def refresh(config: Any) -> None:
            config.api_key.update(_bearer(self.tokens.current()))

        configuration.refresh_api_key_hook = refresh
        return configuration

    async def async_configuration(self) -> Any:
        """A ``kubernetes_asyncio`` configuration likewise; the refresh hook fetches off the event loop."""
        from kubernetes_asyncio import client

        endpoint = await asyncio.to_thread(self.endpoint)
        configuration = client.Configuration(
            host=endpoint.host, api_key=_bearer(await self.tokens.acurrent()), api_key_prefix=_bearer("Bearer")
        )
        configuration.ssl_ca_cert = await asyncio.to_thread(endpoint.ca_file)

        async def refresh(config: Any) -> None:
            config.api_key.update(_bearer(await self.tokens.acurrent()))

        configuration.refresh_api_key_hook = refresh
        return configuration


def _bearer(value: str) -> dict[str, str]:
    """An API key entry under both names the clients look up: ``BearerToken`` (kubernetes >= 36 and
    kubernetes_asyncio read it, with its prefix) and ``authorization`` (the name before 36)."""
    return {"BearerToken": value, "authorization": value}


_ACCESS: dict[GkeTarget, GkeAccess] = {}
_ACCESS_LOCK = threading.Lock()


def gke_access(target: GkeTarget, source: TokenSource | None = None) -> GkeAccess:
    """The process's :class:`GkeAccess` for ``target`` (tokens from ADC unless ``source`` is given)."""
    with _ACCESS_LOCK:
        found = _ACCESS.get(target)
        if found is None or (source is not None and found.tokens.source is not source):
            found = _ACCESS[target] = GkeAccess(target, TokenCache(source or GoogleTokenSource()))
        return found


def config_defaults() -> dict[str, str]:
    """``gke_project`` and ``gke_location`` from the ``[elastic_training]`` section (empty when unset)."""
    from airflow.configuration import conf

    return {key: str(conf.get("elastic_training", key, fallback="") or "") for key in ("gke_project", "gke_location")}


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__
