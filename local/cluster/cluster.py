"""``LocalCluster``: the API server and the control plane on one event loop in a background thread.

    with LocalCluster(workdir=tmp_path) as cluster:
        kubernetes.config.load_kube_config(config_file=str(cluster.kubeconfig_path))
        cluster.faults.delete_pod("default", "trainer-0")

The API is HTTPS with a CA made at start (:mod:`local.cluster.tls`); the kubeconfig carries the CA, so
clients verify the server. The store, the controllers and the kubelet are single-threaded on that loop; code on other
threads reaches them through :meth:`LocalCluster.call` and the :attr:`LocalCluster.faults` facade,
which marshal onto the loop.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import ipaddress
import logging
import secrets
import socket
import ssl
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from aiohttp import web

from elastic_training.local.cluster.audit import AuditEvent
from elastic_training.local.cluster.authentication import TokenWebhook
from elastic_training.local.cluster.control_plane import ControlPlane
from elastic_training.local.cluster.faults import FailRule, FaultInjector, LatencyRule
from elastic_training.local.cluster.provisioning_requests import Rule
from elastic_training.local.cluster.server import ApiServer
from elastic_training.local.cluster.store import DEFAULT_WATCH_QUEUE_LIMIT, Store
from elastic_training.local.cluster.tls import ServingCertificates, generate
from elastic_training.local.cluster.watching import WatchOptions
from elastic_training.local.descriptions.cluster_description import SINGLE_NODE, ClusterDescription, load_description
from elastic_training.local.kubeconfig import write_kubeconfig
from elastic_training.local.nodeagent.logs import LogStore

log = logging.getLogger(__name__)

T = TypeVar("T")
STOP_TIMEOUT_SECONDS = 60.0


class ClusterStartError(RuntimeError):
    """The cluster could not start (port in use, unwritable work directory, ...)."""


class Faults:
    """Thread-safe fault injection: every method runs on the cluster's loop and waits for it."""

    def __init__(self, cluster: LocalCluster) -> None:
        self._cluster = cluster

    def _injector(self) -> FaultInjector:
        injector = self._cluster._injector
        if injector is None:
            raise RuntimeError("the cluster is not running")
        return injector

    def delete_pod(self, namespace: str, name: str) -> None:
        """Remove a pod at once and kill its processes (``kubectl delete pod --grace-period=0 --force``)."""
        self._cluster.run(lambda: self._injector().delete_pod(namespace, name))

    def signal_pod(self, namespace: str, name: str, sig: int, container: str | None = None) -> None:
        """Send ``sig`` to a pod's container processes (every container when ``container`` is None)."""
        self._cluster.run(lambda: self._injector().signal_pod(namespace, name, sig, container))

    def lose_host(self, node: str, repair_seconds: float | None = None) -> dict[str, Any]:
        """A TPU host is lost: every pod of its node pool fails (PodGC), the pool is NotReady for
        ``repair_seconds`` (None: the pool's ``repairSeconds`` from the cluster description, else 0)."""
        result: dict[str, Any] = self._cluster.run(lambda: self._injector().lose_host(node, repair_seconds))
        return result

    def provision_on_demand(self, pool: str, seconds: float, *, queued: bool = False) -> dict[str, Any]:
        """An idle node pool loses its nodes; they register ``seconds`` after a pending pod needs them (``queued``:
        after a ProvisioningRequest takes the pool, GKE's queued provisioning)."""
        result: dict[str, Any] = self._cluster.call(lambda: self._injector().provision_on_demand(pool, seconds, queued))
        return result

    def provisioning(
        self,
        outcome: str,
        *,
        namespace: str | None = None,
        name: str | None = None,
        count: int = 1,
        seconds: float = 0.0,
        reason: str = "",
        message: str = "",
    ) -> dict[str, Any]:
        """A ProvisioningRequest's outcome (``fail``, ``delay``, ``expire``, ``revoke``): now for the named request,
        else for the next ``count`` (``seconds``: a delay's length, or how long after provisioning)."""
        rule = Rule(outcome, count, seconds, reason, message)
        result: dict[str, Any] = self._cluster.run(lambda: self._injector().provisioning(rule, namespace, name))
        return result

    def clear_provisioning_rules(self) -> list[dict[str, Any]]:
        """Drop the outcomes :meth:`provisioning` set for requests not yet made; returns what they were."""
        result: list[dict[str, Any]] = self._cluster.call(lambda: self._injector().clear_provisioning_rules())
        return result

    def repair_node_pool(self, pool: str, seconds: float) -> dict[str, Any]:
        """GKE auto-repair: the pool's pods are evicted, its nodes cordoned and NotReady for ``seconds``."""
        result: dict[str, Any] = self._cluster.run(lambda: self._injector().repair_node_pool(pool, seconds))
        return result

    def evict_pod(self, namespace: str, name: str, reason: str = "EvictionByEvictionAPI") -> dict[str, Any]:
        """``DisruptionTarget`` with ``reason`` (EvictionByEvictionAPI, PreemptionByScheduler,
        TerminationByKubelet, DeletionByPodGC), then the termination that component does."""
        result: dict[str, Any] = self._cluster.run(lambda: self._injector().evict_pod(namespace, name, reason))
        return result

    def stop_queue(
        self, *, cluster_queue: str | None = None, local_queue: str | None = None, policy: str = "HoldAndDrain"
    ) -> dict[str, Any]:
        """A Kueue ClusterQueue's (by name) or LocalQueue's (``namespace/name``) ``stopPolicy``."""
        result: dict[str, Any] = self._cluster.call(
            lambda: self._injector().stop_queue(cluster_queue=cluster_queue, local_queue=local_queue, policy=policy)
        )
        return result

    def deactivate_workload(self, namespace: str, jobset: str, active: bool = False) -> dict[str, Any]:
        """``spec.active`` of the JobSet's Kueue Workload (false: Kueue evicts it, reason ``Deactivated``)."""
        result: dict[str, Any] = self._cluster.call(
            lambda: self._injector().deactivate_workload(namespace, jobset, active)
        )
        return result

    def configure_kueue(self, configuration: dict[str, Any] | None) -> dict[str, Any]:
        """A new Kueue manager Configuration (``waitForPodsReady``; ``None``/``{}``: off); the one now in force."""
        result: dict[str, Any] = self._cluster.call(lambda: self._injector().configure_kueue(configuration))
        return result

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
        """Fail matching API requests with ``code`` (the next ``count``, or each with ``probability``; for
        ``seconds`` from now when given); a 429 says ``Retry-After: <retry_after>``."""
        rule: FailRule = self._cluster.call(
            lambda: self._injector().api.fail_requests(
                code,
                count=count,
                probability=probability,
                path=path,
                method=method,
                retry_after=retry_after,
                seconds=seconds,
            )
        )
        return rule

    def add_latency(self, seconds: float, *, path: str | None = None, method: str | None = None) -> LatencyRule:
        """Delay matching API requests by ``seconds``."""
        rule: LatencyRule = self._cluster.call(
            lambda: self._injector().api.add_latency(seconds, path=path, method=method)
        )
        return rule

    def expire_watches(self, compact: bool = False) -> int:
        """End every open watch; with ``compact`` also drop the history so resuming watches get 410."""
        expired: int = self._cluster.call(lambda: self._injector().expire_watches(compact))
        return expired

    def clear(self) -> None:
        """Remove every API fault rule."""
        self._cluster.call(lambda: self._injector().clear())


def _check_loopback(host: str) -> None:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise ValueError(f"the local cluster serves on a loopback address only, not {host!r}")


class LocalCluster:
    """A Kubernetes API with JobSet semantics on 127.0.0.1, running pods as local processes."""

    def __init__(
        self,
        workdir: Path,
        port: int = 0,
        watch_history: int = 1000,
        host: str = "127.0.0.1",
        *,
        kubeconfig_path: Path | None = None,
        run_control_plane: bool = True,
        watch_queue_limit: int = DEFAULT_WATCH_QUEUE_LIMIT,
        watch_options: WatchOptions | None = None,
        description: ClusterDescription | str | Path | None = None,
    ) -> None:
        """``run_control_plane=False`` serves the API alone (no controllers, no kubelet, no nodes);
        ``watch_queue_limit`` and ``watch_options`` bound watches (tests make them small);
        ``description`` gives the node pools (a :class:`ClusterDescription`, a YAML path or a built-in
        name such as ``"v5e-small"``; default: the single node ``local-node``). A bad description
        raises :class:`~local.cluster.cluster_description.DescriptionError` here, before anything starts."""
        _check_loopback(host)
        if description is None:
            self.description = SINGLE_NODE
        elif isinstance(description, ClusterDescription):
            self.description = description
        else:
            self.description = load_description(description)
        self.workdir = Path(workdir)
        self.host = host
        self.port = port
        self.watch_history = watch_history
        self.watch_queue_limit = watch_queue_limit
        self.watch_options = watch_options or WatchOptions()
        self.kubeconfig_path = Path(kubeconfig_path) if kubeconfig_path else self.workdir / "kubeconfig"
        self.run_control_plane = run_control_plane
        self.token = secrets.token_urlsafe(24)
        self.certificates: ServingCertificates | None = None
        self.faults = Faults(self)
        self.store: Store | None = None
        self.logs: LogStore | None = None
        self.control_plane: ControlPlane | None = None
        self._injector: FaultInjector | None = None
        self._server: ApiServer | None = None
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The API's base URL (``https://127.0.0.1:<port>``)."""
        return f"https://{self.host}:{self.port}"

    @property
    def ca_pem(self) -> bytes:
        """The PEM of the CA that signed the serving certificate (the kubeconfig carries it too)."""
        if self.certificates is None:
            raise RuntimeError("the cluster has not started")
        return self.certificates.ca_pem

    @property
    def ca_path(self) -> Path:
        """The CA certificate on disk, for tools that take a file (``curl --cacert``, ``REQUESTS_CA_BUNDLE``)."""
        return self.workdir / "pki" / "ca.crt"

    def ssl_context(self) -> ssl.SSLContext:
        """A client TLS context that trusts this cluster's CA, for raw HTTP clients (urllib, aiohttp)."""
        if self.certificates is None:
            raise RuntimeError("the cluster has not started")
        return self.certificates.client_context()

    @property
    def running(self) -> bool:
        return self._loop is not None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> LocalCluster:
        """Bind the port, write the kubeconfig, start serving; ``ClusterStartError`` when it cannot."""
        if self._loop is not None:
            raise RuntimeError("the cluster is already running")
        sock = self._bind()
        hosts = tuple(dict.fromkeys((self.host, "127.0.0.1", "localhost")))
        self.certificates = generate(hosts)
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            server_tls = self.certificates.server_context(self.ca_path.parent)
            write_kubeconfig(self.kubeconfig_path, self.url, self.token, ca_pem=self.certificates.ca_pem)
        except (OSError, ssl.SSLError) as exc:
            sock.close()
            raise ClusterStartError(f"cannot write the cluster's files: {exc}") from exc
        loop = asyncio.new_event_loop()
        ready: Future[None] = Future()
        self._thread = threading.Thread(
            target=self._run_loop,
            args=(loop, sock, server_tls, ready),
            name=f"local-cluster-{self.port}",
            daemon=True,
        )
        self._thread.start()
        try:
            ready.result(timeout=STOP_TIMEOUT_SECONDS)
        except BaseException:
            self._thread.join(timeout=STOP_TIMEOUT_SECONDS)
            self._thread = None
            raise
        self._loop = loop
        return self

    def stop(self) -> None:
        """Stop every pod process, then the server, then the loop thread. Idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=STOP_TIMEOUT_SECONDS)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=STOP_TIMEOUT_SECONDS)
            self._loop = None
            self._server = None
            self._thread = None

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def add_token_webhook(self, webhook: TokenWebhook) -> None:
        """Authenticate other bearer tokens through ``webhook`` (as ``--authentication-token-webhook``
        does; GKE authenticates Google access tokens so). It runs on the cluster's loop: answer fast."""
        self.call(lambda: self._require_server().access.authenticator.add_token_webhook(webhook))

    def audit_position(self) -> int:
        """Where the API server's audit log stands now: pass it to :meth:`audit_events` to see what came after."""
        return int(self.call(lambda: self._require_server().audit.recorded))

    def audit_events(self, since: int = 0) -> list[AuditEvent]:
        """The resource requests the API server received after ``since`` (:mod:`local.cluster.audit`)."""
        return list(self.call(lambda: self._require_server().audit.since(since)))

    def _require_server(self) -> ApiServer:
        if self._server is None:
            raise RuntimeError("the cluster is not running")
        return self._server

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the cluster's loop and return its result (awaited when it is awaitable)."""

        async def invoke() -> Any:
            result = fn()
            if inspect.isawaitable(result):
                return await result
            return result

        return self.run(invoke)

    def run(self, coroutine_function: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Await ``coroutine_function()`` on the cluster's loop and return its result."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("the cluster is not running")
        future = asyncio.run_coroutine_threadsafe(coroutine_function(), loop)
        return future.result(timeout=STOP_TIMEOUT_SECONDS)

    # -- internals ---------------------------------------------------------------------------

    def _bind(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
            sock.listen(128)
        except OverflowError as exc:  # a port outside 0-65535
            sock.close()
            raise ClusterStartError(f"cannot listen on {self.host}:{self.port}: {exc}") from exc
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                raise ClusterStartError(f"port {self.port} on {self.host} is already in use") from exc
            raise ClusterStartError(f"cannot listen on {self.host}:{self.port}: {exc}") from exc
        self.port = sock.getsockname()[1]
        return sock

    def _run_loop(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, server_tls: ssl.SSLContext, ready: Future[None]
    ) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._startup(sock, server_tls))
        except BaseException as exc:
            sock.close()
            loop.run_until_complete(self._shutdown())
            loop.close()
            ready.set_exception(ClusterStartError(f"the cluster failed to start: {exc}"))
            return
        ready.set_result(None)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _startup(self, sock: socket.socket, server_tls: ssl.SSLContext) -> None:
        self.store = Store(history_limit=self.watch_history, watch_queue_limit=self.watch_queue_limit)
        self.logs = LogStore(self.workdir / "logs")
        if self.run_control_plane:
            pod_env = {
                "KUBECONFIG": str(self.kubeconfig_path),
                "KUBERNETES_SERVICE_HOST": self.host,
                "KUBERNETES_SERVICE_PORT": str(self.port),
            }
            self.control_plane = ControlPlane(self.store, self.logs, self.workdir, pod_env, self.description)
        self._injector = FaultInjector(
            self.store,
            self.control_plane,
            self.control_plane.node_faults if self.control_plane else None,
            self.control_plane.provisioner if self.control_plane else None,
            self.control_plane.provisioning_requests if self.control_plane else None,
            self.control_plane.kueue if self.control_plane else None,
        )
        server = ApiServer(self.store, self.logs, self._injector, self.token, self.watch_options)
        self._server = server
        # handler_cancellation: a request whose client went away stops at once (a watch unregisters),
        # as the Go server cancels the request's context.
        self._runner = web.AppRunner(server.app(), access_log=None, handle_signals=False, handler_cancellation=True)
        await self._runner.setup()
        await web.SockSite(self._runner, sock, shutdown_timeout=1.0, ssl_context=server_tls).start()
        if self.control_plane is not None:
            await self.control_plane.start()
        log.info("local cluster serving on %s (kubeconfig %s)", self.url, self.kubeconfig_path)

    async def _shutdown(self) -> None:
        if self.control_plane is not None:
            try:
                await self.control_plane.stop()
            except Exception:
                log.exception("stopping the control plane failed")
        if self.store is not None:
            self.store.expire_watches()  # lets open watch streams end before the server goes
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
