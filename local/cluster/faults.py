"""Fault injection: failing or slow API requests, expired watches, killed pods.

API faults are rules kept in :class:`ApiFaults` and applied by an aiohttp middleware before a
request reaches its handler. Pod faults go to the control plane (force-delete through the store,
signals through the kubelet). Everything is reachable over HTTP under ``/_local/faults`` so the
demo, benchmarks and the CLI can inject faults into a cluster running in another process:

- ``GET    /_local/faults``                 the active rules
- ``DELETE /_local/faults``                 clear every rule
- ``POST   /_local/faults/fail-requests``   ``{"code", "count"?, "probability"?, "seconds"?, "path"?, "method"?,
  "retryAfter"?}`` (``seconds``: a burst bounded in time, as an API server's bad minute is)
- ``POST   /_local/faults/latency``         ``{"seconds", "path"?, "method"?}``
- ``POST   /_local/faults/expire-watches``  ``{"compact"?: bool}``
- ``POST   /_local/faults/delete-pod``      ``{"namespace", "name"}``
- ``POST   /_local/faults/signal-pod``      ``{"namespace", "name", "signal", "container"?}``
- ``POST   /_local/faults/lose-host``       ``{"node", "repairSeconds"?}`` (:mod:`local.cluster.node_faults`)
- ``POST   /_local/faults/repair-node-pool`` ``{"nodePool", "seconds"}``
- ``POST   /_local/faults/evict-pod``       ``{"namespace", "name", "reason"?}`` (default ``EvictionByEvictionAPI``)
- ``POST   /_local/faults/provision-on-demand`` ``{"nodePool", "seconds", "queued"?}``
  (:mod:`local.cluster.provisioning`)
- ``POST   /_local/faults/provisioning``    ``{"outcome": fail|delay|expire|revoke, "namespace"?, "name"?, "count"?,
  "seconds"?, "reason"?, "message"?}``: a ProvisioningRequest's outcome (:mod:`local.cluster.provisioning_requests`),
  now for the named request, else for the next ``count``
- ``POST   /_local/faults/stop-queue``      ``{"clusterQueue" | "localQueue": "ns/name", "stopPolicy"}``
  (:mod:`local.cluster.kueue_faults`)
- ``POST   /_local/faults/deactivate-workload`` ``{"namespace"?, "jobSet", "active"?}`` (default ``active: false``)
- ``POST   /_local/faults/kueue-configuration`` ``{...}``: a Kueue Configuration (``waitForPodsReady``)

All state lives on the cluster's event loop; nothing here is thread-safe by itself.
"""

from __future__ import annotations

import asyncio
import random
import re
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from aiohttp import web

from elastic_training.local.cluster import kueue_faults
from elastic_training.local.cluster.node_faults import DisruptionReason, NodeFaults
from elastic_training.local.cluster.provisioning import NodeProvisioner
from elastic_training.local.cluster.provisioning_requests import QueuedProvisioning, Rule
from elastic_training.local.cluster.resources import PODS, ApiError, bad_request
from elastic_training.local.cluster.store import Obj, Store
from elastic_training.local.descriptions.kueue_config import ConfigurationError, KueueConfiguration, parse_configuration

FAULTS_PATH = "/_local/faults"

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    429: "TooManyRequests",
    500: "InternalError",
    502: "BadGateway",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class KueueControl(Protocol):
    """The part of the local Kueue a new configuration goes to."""

    def configure(self, configuration: KueueConfiguration) -> None: ...


class PodControl(Protocol):
    """The part of the control plane pod faults need."""

    async def signal_pod(self, namespace: str, name: str, sig: int, container: str | None = None) -> None: ...

    async def delete_pod_now(self, namespace: str, name: str) -> None: ...


@dataclass
class FailRule:
    """Fail matching requests with ``code``: the next ``count`` of them, or each with ``probability``; with
    ``until`` (Unix time), only until then (a burst bounded in time, whoever's requests it meets)."""

    code: int
    count: int | None = None
    probability: float | None = None
    path: str | None = None  # a regex searched in the request path
    method: str | None = None
    id: int = 0
    # A 429's Retry-After: 1 is what kube-apiserver's max-in-flight and priority-and-fairness filters say; 0
    # (valid HTTP, "retry now") lets a test burst outlast a client's retries without waiting a second each.
    retry_after: int = 1
    until: float | None = None

    def applies(self, method: str, path: str) -> bool:
        if self.until is not None and time.time() >= self.until:
            return False
        if self.method and self.method.upper() != method:
            return False
        if self.path and not re.search(self.path, path):
            return False
        if self.count is not None and self.count <= 0:
            return False
        return self.probability is None or random.random() < self.probability


@dataclass
class LatencyRule:
    """Delay matching requests by ``seconds`` before they are served."""

    seconds: float
    path: str | None = None
    method: str | None = None
    id: int = 0

    def applies(self, method: str, path: str) -> bool:
        if self.method and self.method.upper() != method:
            return False
        return not self.path or re.search(self.path, path) is not None


@dataclass
class ApiFaults:
    """The active API fault rules."""

    failures: list[FailRule] = field(default_factory=list)
    latencies: list[LatencyRule] = field(default_factory=list)
    injected: int = 0  # requests failed so far
    _next_id: int = 1

    def fail_requests(
        self,
        code: int = 500,
        *,
        count: int | None = None,
        probability: float | None = None,
        path: str | None = None,
        method: str | None = None,
        retry_after: int = 1,
        seconds: float | None = None,
    ) -> FailRule:
        """Add a failure rule; with neither ``count`` nor ``probability`` every matching request fails, for
        ``seconds`` from now when given (else until cleared).

        A 429 carries ``Retry-After: <retry_after>`` (seconds).
        """
        if seconds is not None and not 0 < seconds <= 3600:
            raise bad_request(f"seconds must be over 0 and at most 3600, got {seconds}")
        if not 400 <= code <= 599:
            raise bad_request(f"code must be an HTTP error status (400-599), got {code}")
        if count is not None and count < 1:
            raise bad_request("count must be at least 1")
        if probability is not None and not 0.0 <= probability <= 1.0:
            raise bad_request("probability must be between 0 and 1")
        if not 0 <= retry_after <= 600:
            raise bad_request("retryAfter must be between 0 and 600 seconds")
        _check_regex(path)
        until = None if seconds is None else time.time() + seconds
        rule = FailRule(code, count, probability, path, method, self._take_id(), retry_after, until)
        self.failures.append(rule)
        return rule

    def add_latency(self, seconds: float, *, path: str | None = None, method: str | None = None) -> LatencyRule:
        """Add a latency rule."""
        if not 0 <= seconds <= 600:
            raise bad_request("seconds must be between 0 and 600")
        _check_regex(path)
        rule = LatencyRule(seconds, path, method, self._take_id())
        self.latencies.append(rule)
        return rule

    def clear(self) -> None:
        self.failures.clear()
        self.latencies.clear()

    def describe(self) -> dict[str, Any]:
        return {
            "failures": [asdict(rule) for rule in self.failures],
            "latencies": [asdict(rule) for rule in self.latencies],
            "injected": self.injected,
        }

    def _take_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    async def apply(self, method: str, path: str) -> FailRule | None:
        """Sleep for matching latency rules, then the failure rule that fires, if one does."""
        delay = sum(rule.seconds for rule in self.latencies if rule.applies(method, path))
        if delay:
            await asyncio.sleep(delay)
        for rule in self.failures:
            if rule.applies(method, path):
                if rule.count is not None:
                    rule.count -= 1
                    if rule.count == 0:
                        self.failures.remove(rule)
                self.injected += 1
                return rule
        return None

    def middleware(self) -> Callable[..., Awaitable[web.StreamResponse]]:
        """An aiohttp middleware applying the rules to every request outside ``/_local/``."""

        @web.middleware
        async def inject_faults(
            request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
        ) -> web.StreamResponse:
            if request.path.startswith("/_local/") or not (self.failures or self.latencies):
                return await handler(request)
            rule = await self.apply(request.method, request.path)
            if rule is not None:
                reason = _REASONS.get(rule.code, "InternalError")
                error = ApiError(rule.code, reason, f"injected fault: {reason} (rule {rule.id})")
                headers = {"Retry-After": str(rule.retry_after)} if rule.code == 429 else None
                return web.json_response(error.status_body(), status=error.code, headers=headers)
            return await handler(request)

        return inject_faults


def _check_regex(pattern: str | None) -> None:
    if pattern is None:
        return
    try:
        re.compile(pattern)
    except re.error as exc:
        raise bad_request(f"path is not a valid regular expression: {exc}") from exc


class FaultInjector:
    """API faults plus pod faults, on the cluster's event loop."""

    def __init__(
        self,
        store: Store,
        pods: PodControl | None,
        nodes: NodeFaults | None = None,
        provisioner: NodeProvisioner | None = None,
        provisioning_requests: QueuedProvisioning | None = None,
        kueue: KueueControl | None = None,
    ) -> None:
        self.store = store
        self.api = ApiFaults()
        self._pods = pods
        self._nodes = nodes
        self._provisioner = provisioner
        self._requests = provisioning_requests
        self._kueue = kueue

    def node_faults(self) -> NodeFaults:
        if self._nodes is None:
            raise ApiError(501, "NotImplemented", "this cluster runs no kubelet (API only)")
        return self._nodes

    async def lose_host(self, node: str, repair_seconds: float | None = None) -> Obj:
        """A TPU host is lost: its node pool's pods fail (PodGC) and the pool is NotReady for ``repair_seconds``
        (None: the pool's ``repairSeconds`` from the cluster description)."""
        return await self.node_faults().lose_host(node, repair_seconds)

    def provision_on_demand(self, pool: str, seconds: float, queued: bool = False) -> Obj:
        """Remove an idle pool's nodes; they register ``seconds`` after a pending pod needs them (``queued``: after
        a ProvisioningRequest takes the pool)."""
        if self._provisioner is None:
            raise ApiError(501, "NotImplemented", "this cluster runs no control plane (API only)")
        return self._provisioner.provision_on_demand(pool, seconds, queued=queued)

    async def provisioning(self, rule: Rule, namespace: str | None = None, name: str | None = None) -> Obj:
        """A ProvisioningRequest's outcome: now for ``namespace/name``, else for the next ``rule.count`` requests."""
        if self._requests is None:
            raise ApiError(501, "NotImplemented", "this cluster runs no control plane (API only)")
        if name:
            return await self._requests.act(namespace or "default", name, rule)
        return self._requests.add_rule(rule)

    def clear_provisioning_rules(self) -> list[Obj]:
        """Drop the ProvisioningRequest outcomes set for requests not yet made (what they were)."""
        if self._requests is None:
            raise ApiError(501, "NotImplemented", "this cluster runs no control plane (API only)")
        return self._requests.clear_rules()

    async def repair_node_pool(self, pool: str, seconds: float) -> Obj:
        """GKE auto-repair of ``pool``: its pods evicted, its nodes cordoned and NotReady for ``seconds``."""
        return await self.node_faults().repair_node_pool(pool, seconds)

    async def evict_pod(self, namespace: str, name: str, reason: str = DisruptionReason.EVICTION_API) -> Obj:
        """Mark a pod ``DisruptionTarget`` with ``reason`` and terminate it as that component does."""
        return await self.node_faults().evict_pod(namespace, name, parse_reason(reason))

    def stop_queue(self, *, cluster_queue: str | None, local_queue: str | None, policy: str) -> Obj:
        """A ClusterQueue's or LocalQueue's ``stopPolicy`` (``Hold``, ``HoldAndDrain``, ``None``)."""
        return kueue_faults.stop_queue(self.store, cluster_queue=cluster_queue, local_queue=local_queue, policy=policy)

    def deactivate_workload(self, namespace: str, jobset: str, active: bool = False) -> Obj:
        """``spec.active`` of a JobSet's Kueue Workload (false: Kueue evicts it, ``Deactivated``)."""
        return kueue_faults.set_workload_active(self.store, namespace, jobset, active)

    def configure_kueue(self, configuration: Any) -> Obj:
        """A new Kueue Configuration (its ``waitForPodsReady``), as after editing the ConfigMap and a restart."""
        if self._kueue is None:
            raise ApiError(501, "NotImplemented", "this cluster runs no control plane (API only)")
        try:
            parsed = parse_configuration(configuration)
        except ConfigurationError as exc:
            raise bad_request(str(exc)) from exc
        self._kueue.configure(parsed)
        return parsed.manifest()

    def expire_watches(self, compact: bool = False) -> int:
        """End every open watch; with ``compact`` also forget history, so resuming gets 410."""
        if compact:
            self.store.compact()
        return self.store.expire_watches()

    async def delete_pod(self, namespace: str, name: str) -> None:
        """Remove a pod at once and kill its processes, like ``kubectl delete pod --grace-period=0 --force``."""
        self.store.get(PODS, namespace, name)  # 404 for an unknown pod
        if self._pods is None:
            self.store.delete(PODS, namespace, name, grace_period_seconds=0)
        else:
            await self._pods.delete_pod_now(namespace, name)

    async def signal_pod(self, namespace: str, name: str, sig: int, container: str | None = None) -> None:
        """Send ``sig`` to a pod's container processes (all containers when ``container`` is None)."""
        self.store.get(PODS, namespace, name)  # 404 for an unknown pod
        if self._pods is None:
            raise ApiError(501, "NotImplemented", "this cluster runs no kubelet (API only)")
        await self._pods.signal_pod(namespace, name, sig, container)

    def clear(self) -> None:
        self.api.clear()

    # -- HTTP control endpoint ---------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get(FAULTS_PATH, self._get)
        app.router.add_delete(FAULTS_PATH, self._clear)
        app.router.add_post(f"{FAULTS_PATH}/fail-requests", self._fail_requests)
        app.router.add_post(f"{FAULTS_PATH}/latency", self._latency)
        app.router.add_post(f"{FAULTS_PATH}/expire-watches", self._expire_watches)
        app.router.add_post(f"{FAULTS_PATH}/delete-pod", self._delete_pod)
        app.router.add_post(f"{FAULTS_PATH}/signal-pod", self._signal_pod)
        app.router.add_post(f"{FAULTS_PATH}/lose-host", self._lose_host)
        app.router.add_post(f"{FAULTS_PATH}/repair-node-pool", self._repair_node_pool)
        app.router.add_post(f"{FAULTS_PATH}/evict-pod", self._evict_pod)
        app.router.add_post(f"{FAULTS_PATH}/provision-on-demand", self._provision_on_demand)
        app.router.add_post(f"{FAULTS_PATH}/provisioning", self._provisioning)
        app.router.add_post(f"{FAULTS_PATH}/stop-queue", self._stop_queue)
        app.router.add_post(f"{FAULTS_PATH}/deactivate-workload", self._deactivate_workload)
        app.router.add_post(f"{FAULTS_PATH}/kueue-configuration", self._kueue_configuration)

    async def _get(self, request: web.Request) -> web.Response:
        return web.json_response(self.api.describe())

    async def _clear(self, request: web.Request) -> web.Response:
        self.clear()
        return web.json_response(self.api.describe())

    async def _fail_requests(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        code = _optional(body, "code", int)
        retry_after = _optional(body, "retryAfter", int)
        rule = self.api.fail_requests(
            500 if code is None else code,
            count=_optional(body, "count", int),
            probability=_optional(body, "probability", float),
            path=_optional(body, "path", str),
            method=_optional(body, "method", str),
            retry_after=1 if retry_after is None else retry_after,
            seconds=_optional(body, "seconds", float),
        )
        return web.json_response(asdict(rule), status=201)

    async def _latency(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        if "seconds" not in body:
            raise bad_request("seconds is required")
        rule = self.api.add_latency(
            _optional(body, "seconds", float), path=_optional(body, "path", str), method=_optional(body, "method", str)
        )
        return web.json_response(asdict(rule), status=201)

    async def _expire_watches(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        expired = self.expire_watches(bool(body.get("compact", False)))
        return web.json_response({"expired": expired, "compacted": bool(body.get("compact", False))})

    async def _delete_pod(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        await self.delete_pod(_required(body, "namespace"), _required(body, "name"))
        return web.json_response({"deleted": body["name"]})

    async def _signal_pod(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        sig = parse_signal(body.get("signal", "SIGKILL"))
        await self.signal_pod(
            _required(body, "namespace"), _required(body, "name"), sig, _optional(body, "container", str)
        )
        return web.json_response({"signalled": body["name"], "signal": signal.Signals(sig).name})

    async def _lose_host(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        seconds = _optional(body, "repairSeconds", float)
        return web.json_response(await self.lose_host(_required(body, "node"), seconds))

    async def _provision_on_demand(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        if "seconds" not in body:
            raise bad_request("seconds is required")
        queued = body.get("queued", False)
        if not isinstance(queued, bool):
            raise bad_request("queued must be true or false")
        return web.json_response(
            self.provision_on_demand(_required(body, "nodePool"), _optional(body, "seconds", float), queued)
        )

    async def _provisioning(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        rule = Rule(
            _required(body, "outcome"),
            count=_optional(body, "count", int) or 1,
            seconds=_optional(body, "seconds", float) or 0.0,
            reason=_optional(body, "reason", str) or "",
            message=_optional(body, "message", str) or "",
        )
        result = await self.provisioning(rule, _optional(body, "namespace", str), _optional(body, "name", str))
        return web.json_response(result, status=201)

    async def _repair_node_pool(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        if "seconds" not in body:
            raise bad_request("seconds is required")
        return web.json_response(
            await self.repair_node_pool(_required(body, "nodePool"), _optional(body, "seconds", float))
        )

    async def _evict_pod(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        reason = _optional(body, "reason", str) or DisruptionReason.EVICTION_API
        return web.json_response(await self.evict_pod(_required(body, "namespace"), _required(body, "name"), reason))

    async def _stop_queue(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        return web.json_response(
            self.stop_queue(
                cluster_queue=_optional(body, "clusterQueue", str),
                local_queue=_optional(body, "localQueue", str),
                policy=_required(body, "stopPolicy"),
            )
        )

    async def _deactivate_workload(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        active = body.get("active", False)
        if not isinstance(active, bool):
            raise bad_request("active: must be true or false")
        namespace = _optional(body, "namespace", str) or "default"
        return web.json_response(self.deactivate_workload(namespace, _required(body, "jobSet"), active))

    async def _kueue_configuration(self, request: web.Request) -> web.Response:
        return web.json_response(self.configure_kueue(await _json_body(request)))


def parse_reason(value: str) -> DisruptionReason:
    """A ``DisruptionTarget`` reason by its upstream name."""
    try:
        return DisruptionReason(value)
    except ValueError as exc:
        known = ", ".join(r.value for r in DisruptionReason)
        raise bad_request(f"reason: unknown disruption reason {value!r} (known: {known})") from exc


def parse_signal(value: Any) -> int:
    """A signal given as a number, ``KILL`` or ``SIGKILL``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return int(signal.Signals(value))
    text = str(value).upper()
    if text.isdigit():
        return int(signal.Signals(int(text)))
    name = text if text.startswith("SIG") else f"SIG{text}"
    try:
        return int(signal.Signals[name])
    except KeyError as exc:
        raise bad_request(f"unknown signal {value!r}") from exc


async def _json_body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        body = await request.json()
    except ValueError as exc:
        raise bad_request(f"the request body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return body


def _required(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise bad_request(f"{key} is required")
    return value


def _optional(body: dict[str, Any], key: str, kind: Callable[[Any], Any]) -> Any:
    value = body.get(key)
    if value is None:
        return None
    try:
        return kind(value)
    except (TypeError, ValueError) as exc:
        raise bad_request(f"{key}: {exc}") from exc
