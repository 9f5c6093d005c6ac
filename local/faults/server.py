"""The fault endpoint of a running cluster, and the loopback proxy in front of kube-apiserver for the API's faults.

``cluster up`` serves it over HTTPS on 127.0.0.1 (a certificate from the cluster CA); the kubeconfig names it as the
context ``elastic-training-local-faults``. It answers:

- ``/_local/faults/...``: the faults (bodies below and in ``rules.py``), each done through its real
  mechanism by :class:`UpstreamFaults`; they need the admin's bearer token;
- every other path: proxied to kube-apiserver unchanged (the client's own credentials go with it), after the API
  fault rules (``fail-requests``, ``latency``) had their say. ``expire-watches`` ends every watch open through the
  proxy, as an apiserver restart or a load balancer's idle timeout does, and with ``compact`` compacts etcd to its
  newest revision first. kube-apiserver's watch cache still serves the compacted events for a while, so a watch
  resumed from an older resourceVersion gets 410 Gone only once the cache has moved past it (measured: not at once).

Only clients that use the proxy's context meet the API faults: the user's default context talks to kube-apiserver.

``POST /_local/token-review`` is kube-apiserver's token webhook (``--authentication-token-webhook-config-file``), as
GKE's authenticator accepts a live Google access token as the Google account: an ``authentication.k8s.io/v1``
TokenReview answered by the reviewers registered in :attr:`FaultServer.token_reviewers` (GKE's closed part, stood
in by a test's Google stand-in); with none, or none that knows the token, it is not authenticated.
"""

from __future__ import annotations

import asyncio
import json
import signal
import ssl
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp
from aiohttp import web

from elastic_training.local.faults.kube_faults import FaultError
from elastic_training.local.faults.rules import FAULTS_PATH, ApiFaults, parse_signal, status_body

if TYPE_CHECKING:
    from elastic_training.local.upstream_cluster import UpstreamCluster

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
TOKEN_REVIEW_PATH = "/_local/token-review"


class Reviewed(Protocol):
    """Who a token stands for, as a token reviewer answers (``name`` and ``groups``, as ``user.Info``)."""

    name: str
    groups: tuple[str, ...]


TokenReviewer = Callable[[str], "Reviewed | None"]
HOP_HEADERS = frozenset({"host", "connection", "keep-alive", "transfer-encoding", "upgrade", "content-length"})


class FaultServer:
    """The fault endpoint and API proxy of one :class:`UpstreamCluster`."""

    def __init__(self, cluster: UpstreamCluster, token: str) -> None:
        self._cluster = cluster
        self._token = token
        self.api = ApiFaults()
        self._watches: set[asyncio.BaseTransport] = set()  # the connections of the watches open through the proxy
        self._session: aiohttp.ClientSession | None = None
        self.token_reviewers: list[TokenReviewer] = []  # kube-apiserver's token webhook asks them, in order
        self.app = web.Application(middlewares=[self._errors, self.api.middleware()])
        self._routes()

    def _routes(self) -> None:
        router, post = self.app.router, self.app.router.add_post
        router.add_get(FAULTS_PATH, self._show)
        router.add_delete(FAULTS_PATH, self._clear)
        post(f"{FAULTS_PATH}/fail-requests", self._fail_requests)
        post(f"{FAULTS_PATH}/latency", self._latency)
        post(f"{FAULTS_PATH}/expire-watches", self._expire_watches)
        for verb, action in self._cluster_faults().items():
            post(f"{FAULTS_PATH}/{verb}", self._cluster_fault(action))
        post(TOKEN_REVIEW_PATH, self._token_review)
        router.add_route("*", FAULTS_PATH + "/{name}", self._unknown)
        router.add_route("*", "/{tail:.*}", self._proxy)

    def _cluster_faults(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        faults = self._cluster.faults
        return {
            "delete-pod": lambda b: faults.delete_pod(_text(b, "namespace"), _text(b, "name")),
            "evict-pod": lambda b: faults.evict_pod(_text(b, "namespace"), _text(b, "name")),
            "signal-pod": lambda b: {
                "signalled": b.get("name"),
                "signal": signal.Signals(parse_signal(b.get("signal", "SIGKILL"))).name,
                "processes": faults.signal_pod(
                    _text(b, "namespace"),
                    _text(b, "name"),
                    parse_signal(b.get("signal", "SIGKILL")),
                    b.get("container"),
                ),
            },
            "lose-host": lambda b: faults.lose_host(_text(b, "node"), _number(b, "repairSeconds")),
            "repair-node-pool": lambda b: faults.repair_node_pool(_text(b, "nodePool"), _number(b, "seconds") or 0.0),
            "stop-queue": lambda b: faults.stop_queue(
                cluster_queue=b.get("clusterQueue"), local_queue=b.get("localQueue"), policy=_text(b, "stopPolicy")
            ),
            "deactivate-workload": lambda b: faults.deactivate_workload(
                str(b.get("namespace") or "default"), _text(b, "jobSet"), bool(b.get("active", False))
            ),
            "kueue-configuration": lambda b: faults.kueue_configuration(b),
            "provision-on-demand": lambda b: faults.provision_on_demand(
                _text(b, "nodePool"), _required_number(b, "seconds"), _flag(b, "queued")
            ),
            "provisioning": lambda b: faults.provisioning(
                _text(b, "outcome"),
                _optional_text(b, "namespace"),
                _optional_text(b, "name"),
                int(_number(b, "count") or 1),
                _number(b, "seconds") or 0.0,
                _optional_text(b, "reason") or "",
                _optional_text(b, "message") or "",
            ),
        }

    # -- the fault endpoint ----------------------------------------------------------------------------------

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith(FAULTS_PATH):
            return await handler(request)
        if request.headers.get("Authorization") != f"Bearer {self._token}":
            return _status(401, "Unauthorized", "the fault endpoint needs the cluster admin's token")
        try:
            return await handler(request)
        except (FaultError, ValueError, KeyError, TypeError) as error:
            return _status(400, "BadRequest", str(error).strip("'\""))
        except Exception as error:  # the API's own refusal (kubernetes.client.ApiException), passed on
            status = int(getattr(error, "status", 0) or 500)
            return _status(status, "Failed", str(getattr(error, "body", None) or error)[:2000])

    def _cluster_fault(self, action: Callable[[dict[str, Any]], Any]) -> Handler:
        async def handle(request: web.Request) -> web.Response:
            body = await _json(request)
            result = await asyncio.get_running_loop().run_in_executor(None, action, body)
            return web.json_response(result if isinstance(result, dict) else {"result": result})

        return handle

    async def _unknown(self, request: web.Request) -> web.Response:
        known = ", ".join(sorted(["fail-requests", "latency", "expire-watches", *self._cluster_faults()]))
        return _status(404, "NotFound", f"no fault {request.match_info['name']!r} on this cluster (known: {known})")

    async def _show(self, request: web.Request) -> web.Response:
        return web.json_response(self.api.describe())

    async def _clear(self, request: web.Request) -> web.Response:
        self.api.clear()
        return web.json_response(self.api.describe())

    async def _fail_requests(self, request: web.Request) -> web.Response:
        body = await _json(request)
        rule = self.api.fail_requests(
            int(body.get("code", 500)),
            count=body.get("count"),
            probability=body.get("probability"),
            path=body.get("path"),
            method=body.get("method"),
            retry_after=int(body.get("retryAfter", 1)),
            seconds=body.get("seconds"),
        )
        return web.json_response(asdict(rule), status=201)

    async def _latency(self, request: web.Request) -> web.Response:
        body = await _json(request)
        rule = self.api.add_latency(float(body["seconds"]), path=body.get("path"), method=body.get("method"))
        return web.json_response(asdict(rule), status=201)

    async def _expire_watches(self, request: web.Request) -> web.Response:
        body = await _json(request)
        return web.json_response(await self.expire_watches(bool(body.get("compact", False))))

    async def expire_watches(self, compact: bool) -> dict[str, Any]:
        """End every watch open through the proxy (after compacting etcd, with ``compact``); how many ended."""
        if compact:
            await asyncio.get_running_loop().run_in_executor(None, self._compact_etcd)
        ended = len(self._watches)
        for transport in list(self._watches):
            transport.close()
        self._watches.clear()
        return {"expired": ended, "compacted": compact}

    def _compact_etcd(self) -> None:
        """Compact etcd to its newest revision through its gRPC gateway (what its periodic compaction does)."""
        base = f"http://127.0.0.1:{self._cluster.control_plane.ports.etcd_client}/v3/kv"
        header = _post_json(f"{base}/range", {"key": "AA=="})["header"]
        _post_json(f"{base}/compaction", {"revision": header["revision"], "physical": True})

    async def _token_review(self, request: web.Request) -> web.Response:
        """A TokenReview (``authentication.k8s.io/v1``) answered: the first reviewer that knows the token says who
        it is; the audiences asked for are the ones it is valid for."""
        review = await _json(request)
        spec = review.get("spec") or {}
        token = str(spec.get("token") or "")
        user = next((found for reviewer in self.token_reviewers if (found := reviewer(token)) is not None), None)
        status: dict[str, Any] = {"authenticated": False}
        if user is not None:
            status = {
                "authenticated": True,
                "user": {"username": user.name, "groups": list(user.groups)},
                "audiences": list(spec.get("audiences") or []),
            }
        return web.json_response({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status})

    # -- the proxy --------------------------------------------------------------------------------------------

    async def _proxy(self, request: web.Request) -> web.StreamResponse:
        session = await self._client()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        url = f"{self._cluster.url}{request.rel_url}"
        body = await request.read() if request.can_read_body else None
        async with session.request(request.method, url, headers=headers, data=body, allow_redirects=False) as upstream:
            response = web.StreamResponse(
                status=upstream.status,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in HOP_HEADERS},
            )
            await response.prepare(request)
            transport = request.transport
            # kube-apiserver reads these with Go's strconv.ParseBool; the Python client sends "True"
            watch = any(request.query.get(key, "").lower() in ("true", "t", "1") for key in ("watch", "follow"))
            if watch and transport is not None:
                self._watches.add(transport)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except (ConnectionResetError, aiohttp.ClientError):
                pass
            finally:
                if transport is not None:
                    self._watches.discard(transport)
            return response

    async def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            context = ssl.create_default_context(cafile=str(self._cluster.ca_path))
            timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
            # The body passes as kube-apiserver sent it: a large list comes gzipped (Content-Encoding passed on)
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=context), timeout=timeout, auto_decompress=False
            )
        return self._session

    async def close(self) -> None:
        """End the watches streaming through the proxy, then its client session."""
        for transport in list(self._watches):
            transport.close()
        self._watches.clear()
        if self._session is not None:
            await self._session.close()


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(status_body(code, reason, message), status=code)


async def _json(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        body = await request.json()
    except json.JSONDecodeError as error:
        raise ValueError(f"the body is not JSON: {error}") from error
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    return body


def _text(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key} is required")
    return value


def _number(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} must be a number")
    return float(value)


def _required_number(body: dict[str, Any], key: str) -> float:
    value = _number(body, key)
    if value is None:
        raise ValueError(f"{key} is required")
    return value


def _optional_text(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key} must be a string")
    return value or None


def _flag(body: dict[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"{key} must be true or false")
    return value


def _post_json(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer
