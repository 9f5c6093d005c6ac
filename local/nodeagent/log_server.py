"""The kubelet API's log endpoint, over HTTPS, one port per node: what ``kubectl logs`` reaches through the apiserver.

Stands for the kubelet server's ``GET /containerLogs/{namespace}/{pod}/{container}`` (``pkg/kubelet/server``):
kube-apiserver's ``pods/log`` connects to the pod's node at its ``InternalIP`` and
``daemonEndpoints.kubeletEndpoint.Port``, presents its ``--kubelet-client-certificate``, and passes ``follow``,
``previous``, ``tailLines``, ``sinceTime``/``sinceSeconds``, ``timestamps`` and ``limitBytes`` on. An error goes
back as plain text with its status code, which kube-apiserver turns into the ``Status`` the client sees.

Client certificates are required and verified against the given CA (the kubelet's ``--client-ca-file``); any
certificate that CA signed is let in (the kubelet would also ask kube-apiserver's SubjectAccessReview). The log
files and their reads are the local kubelet's (:mod:`elastic_training.local.nodeagent.logs`,
:func:`elastic_training.local.nodeagent.pod_logs.stream_container_log`). No other kubelet endpoint is served
(``exec``, ``attach``, ``portForward``, ``metrics``, ``stats``).
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from elastic_training.local.nodeagent.api import Obj
from elastic_training.local.nodeagent.logs import LogStore
from elastic_training.local.nodeagent.pod_logs import LogRequestError, pod_run_finished, stream_container_log

PodLookup = Callable[[str, str, str], Obj | None]  # (node, namespace, name) -> the pod with its newest status


def serving_context(cert: Path, key: Path, client_ca: Path) -> ssl.SSLContext:
    """TLS for the kubelet API: the agent's serving certificate; client certificates required, signed by
    ``client_ca``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    context.load_verify_locations(cafile=str(client_ca))
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def listening_sockets(count: int, host: str = "127.0.0.1") -> list[socket.socket]:
    """``count`` sockets bound to ports the kernel picks and listening (no port is lost to a race)."""
    sockets = []
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        sock.listen(128)
        sock.setblocking(False)
        sockets.append(sock)
    return sockets


class KubeletServer:
    """Serves ``/containerLogs`` for every node, each node on its own socket, on the agent's loop."""

    def __init__(self, logs: LogStore, lookup: PodLookup, context: ssl.SSLContext) -> None:
        self._logs = logs
        self._lookup = lookup
        self._context = context
        self._nodes_by_port: dict[int, str] = {}
        self._sites: dict[str, web.SockSite] = {}
        self._runner: web.AppRunner | None = None

    async def start(self, sockets: dict[str, socket.socket]) -> None:
        """Serve node ``name`` on ``sockets[name]``."""
        app = web.Application()
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._container_logs)
        app.router.add_get("/healthz", self._healthz)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        await self.serve(sockets)

    async def serve(self, sockets: dict[str, socket.socket]) -> None:
        """Serve more nodes (registered after the start): node ``name`` on ``sockets[name]``."""
        if self._runner is None:
            raise RuntimeError("the kubelet API is not started")
        for node, sock in sockets.items():
            self._nodes_by_port[int(sock.getsockname()[1])] = node
            site = web.SockSite(self._runner, sock, ssl_context=self._context, shutdown_timeout=1.0)
            await site.start()
            self._sites[node] = site

    async def stop_serving(self, nodes: list[str]) -> None:
        """Stop serving ``nodes`` (their Node objects are gone); their ports close."""
        for node in nodes:
            site = self._sites.pop(node, None)
            if site is not None:
                await site.stop()
        self._nodes_by_port = {port: n for port, n in self._nodes_by_port.items() if n not in nodes}

    async def stop(self) -> None:
        """Stop serving; open log streams end."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _container_logs(self, request: web.Request) -> web.StreamResponse:
        node = self._node_of(request)
        namespace, name = request.match_info["namespace"], request.match_info["pod"]
        container = request.match_info["container"]
        pod = self._lookup(node, namespace, name) if node else None
        if pod is None:
            return web.Response(status=404, text=f'pod "{namespace}/{name}" not found on node "{node}"')
        spec = pod.get("spec") or {}
        names = {c.get("name") for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])}
        if container not in names:
            return web.Response(status=404, text=f'container "{container}" not found in pod "{namespace}/{name}"')
        uid = str(pod["metadata"]["uid"])

        def finished(run: int) -> bool:
            return pod_run_finished(self._lookup(node, namespace, name), uid, container, run)

        try:
            return await stream_container_log(request, self._logs, pod, container, finished)
        except LogRequestError as err:
            return web.Response(status=err.code, text=err.message)

    def _node_of(self, request: web.Request) -> str:
        sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
        return self._nodes_by_port.get(int(sockname[1]), "") if sockname else ""
