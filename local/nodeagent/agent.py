"""The node agent: every node of the cluster description played by one process, against the real kube-apiserver.

Stands for one kubelet per node, with no container runtime: it registers the nodes and keeps their heartbeats
(:mod:`.nodes`, :mod:`.heartbeats`), runs the pods bound to them as local processes and writes their status
(:mod:`.pod_sync`, :mod:`.status_sink`), and serves their logs through the kubelet API (:mod:`.log_server`). It runs
its own asyncio loop on a background thread; the public methods are called from any other thread.

The faults the CLI exposes act here where a real host would fail: :meth:`NodeAgent.lose_host` silences one node's
kubelet and kills its pods (the node lifecycle controller does the rest), :meth:`NodeAgent.signal_pod` signals a
container's processes as a process dying on the host would. Nodes of pools provisioned on demand (queued ones too)
are not registered at the start: :meth:`NodeAgent.register_nodes` and :meth:`NodeAgent.unregister_nodes` add and
remove nodes as GKE's provisioning (:mod:`elastic_training.local.gke`) creates and deletes their VMs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any, TypeVar

from elastic_training.local.descriptions.cluster_description import ClusterDescription
from elastic_training.local.nodeagent.api import ApiClient
from elastic_training.local.nodeagent.heartbeats import Heartbeats
from elastic_training.local.nodeagent.log_server import KubeletServer, listening_sockets, serving_context
from elastic_training.local.nodeagent.logs import LogStore
from elastic_training.local.nodeagent.nodes import (
    AgentNode,
    agent_nodes,
    node_count,
    node_manifest,
    register,
    unregister,
)
from elastic_training.local.nodeagent.pod_sync import PodSync
from elastic_training.local.nodeagent.status_sink import ApiPodSink

T = TypeVar("T")
START_TIMEOUT_SECONDS = 60.0
CALL_TIMEOUT_SECONDS = 30.0


class NodeAgentError(RuntimeError):
    """The agent could not start, or was asked about a node it does not have."""


class NodeAgent:
    """Plays the kubelet of every node of ``description`` against the cluster ``kubeconfig`` points at."""

    def __init__(
        self,
        *,
        kubeconfig: Path,
        description: ClusterDescription,
        workdir: Path,
        pod_env: Mapping[str, str],
        serving_cert: Path,
        serving_key: Path,
        client_ca: Path,
    ) -> None:
        self._kubeconfig = kubeconfig
        self._description = description
        self._workdir = workdir
        self._pod_env = dict(pod_env)
        self._tls = serving_context(serving_cert, serving_key, client_ca)
        self._logs = LogStore(workdir / "logs")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._nodes: list[AgentNode] = []
        self._api: ApiClient | None = None
        self._heartbeats: Heartbeats | None = None
        self._pods: PodSync | None = None
        self._sink: ApiPodSink | None = None
        self._server: KubeletServer | None = None

    @property
    def node_names(self) -> list[str]:
        """The names of the nodes the agent registered (empty before :meth:`start`)."""
        return [node.name for node in self._nodes]

    @property
    def log_store(self) -> LogStore:
        """Where the containers' logs are written."""
        return self._logs

    def kubelet_port(self, node: str) -> int:
        """The port of ``node``'s kubelet API (its ``daemonEndpoints.kubeletEndpoint.Port``)."""
        return self._node(node).port

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the loop thread, register the nodes (Ready, leases renewed) and start their pods; returns then."""
        if self._thread is not None:
            raise NodeAgentError("the node agent is already started")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="node-agent", daemon=True)
        self._thread.start()
        try:
            self._call(self._start(), START_TIMEOUT_SECONDS)
        except BaseException:
            self.stop(grace_cap_seconds=0.0)
            raise

    def stop(self, grace_cap_seconds: float = 3.0) -> None:
        """Stop every pod's processes (SIGTERM, SIGKILL after min(grace, cap); none left behind), the heartbeats,
        the kubelet API and the loop. The nodes stay registered."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            self._call(self._stop(grace_cap_seconds), grace_cap_seconds + 15.0)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10.0)
            if not thread.is_alive():
                loop.close()
            self._loop = self._thread = None

    async def _start(self) -> None:
        self._api = ApiClient(self._kubeconfig)
        sockets = listening_sockets(node_count(self._description))
        self._nodes = agent_nodes(self._description, [int(s.getsockname()[1]) for s in sockets])
        self._sink = ApiPodSink(self._api)
        self._pods = PodSync(
            self._api, self._sink, self._logs, self._workdir, self._pod_env, [n.name for n in self._nodes]
        )
        self._server = KubeletServer(self._logs, self._pods.pod, self._tls)
        await self._server.start({node.name: sock for node, sock in zip(self._nodes, sockets, strict=True)})
        await asyncio.gather(*(register(self._api, node) for node in self._nodes))
        self._heartbeats = Heartbeats(self._api, self._nodes)
        await self._heartbeats.start()
        await self._pods.start()

    async def _stop(self, grace_cap_seconds: float) -> None:
        if self._pods is not None:
            await self._pods.stop(grace_cap_seconds)
        if self._heartbeats is not None:
            await self._heartbeats.stop()
        if self._sink is not None:
            await self._sink.flush(timeout=2.0)
        if self._server is not None:
            await self._server.stop()
        if self._api is not None:
            await self._api.close()

    # -- nodes that come and go (GKE's provisioning: local/gke) ---------------------------------

    def register_nodes(self, names: list[str], extra_labels: Mapping[str, str]) -> None:
        """Register more of the description's nodes (a pool provisioned on demand, a ProvisioningRequest's), with
        ``extra_labels`` added to GKE's: each gets a kubelet port, its Node (Ready), its Lease, and its pods run."""
        manifests = []
        for name in names:
            manifest = node_manifest(self._description, name)
            manifest["metadata"]["labels"].update(extra_labels)
            manifests.append(manifest)

        async def add() -> None:
            heartbeats, pods = self._running_parts()
            known = set(self.node_names)
            fresh = [m for m in manifests if m["metadata"]["name"] not in known]
            sockets = listening_sockets(len(fresh))
            nodes = [
                AgentNode(m["metadata"]["name"], m, int(s.getsockname()[1]))
                for m, s in zip(fresh, sockets, strict=True)
            ]
            if self._server is not None:
                await self._server.serve({node.name: sock for node, sock in zip(nodes, sockets, strict=True)})
            # Before the Nodes exist: the scheduler may bind a waiting pod the moment one does, and the watch
            # event for that binding must find the node already ours.
            pods.add_nodes([node.name for node in nodes])
            await asyncio.gather(*(register(self._api_client(), node) for node in nodes))
            self._nodes.extend(nodes)
            await heartbeats.add(nodes)

        self._call(add(), START_TIMEOUT_SECONDS)

    def unregister_nodes(self, names: list[str]) -> None:
        """The nodes' VMs are gone: their heartbeats stop, their pods' processes are killed (nothing written) and
        their Node objects are deleted; pod GC then deals with the pods bound to them. Unknown names are skipped."""

        async def remove() -> None:
            heartbeats, pods = self._running_parts()
            gone = [name for name in names if name in set(self.node_names)]
            heartbeats.remove(gone)
            pods.remove_nodes(gone)
            if self._server is not None:
                await self._server.stop_serving(gone)
            self._nodes = [node for node in self._nodes if node.name not in gone]
            await asyncio.gather(*(unregister(self._api_client(), name) for name in gone))

        self._call(remove())

    # -- faults --------------------------------------------------------------------------------

    def lose_host(self, node: str) -> None:
        """The node's host fails: its lease and status heartbeats stop and its pods' processes are killed, their
        status not written. kube-controller-manager's node lifecycle controller then marks the node
        ``Unknown`` (after ``--node-monitor-grace-period``) and taints it ``node.kubernetes.io/unreachable``."""
        self._node(node)

        async def lose() -> None:
            self._running_parts()[0].lose(node)
            self._running_parts()[1].lose_node(node)

        self._call(lose())

    def restore_host(self, node: str) -> None:
        """The node's host is back: Ready and heartbeats again; its pods' pending deletions finish, its lost pods
        are reported ``Failed`` (see :mod:`.pod_sync`), and the pods bound to it meanwhile start. Nothing when the
        host is not lost."""
        self._node(node)

        async def restore() -> None:
            heartbeats, pods = self._running_parts()
            if not heartbeats.lost(node):
                return
            await heartbeats.restore(node)
            pods.restore_node(node)

        self._call(restore())

    def signal_pod(self, namespace: str, name: str, sig: int, container: str | None = None) -> int:
        """Send ``sig`` to the process groups of the pod's running containers (``container`` only, when given);
        returns how many were signalled (0 when the agent runs no such pod)."""

        async def send() -> int:
            worker = self._running_parts()[1].worker(namespace, name)
            return worker.signal(sig, container) if worker is not None else 0

        return self._call(send())

    def pids(self, namespace: str, name: str) -> list[int]:
        """The pids of the pod's container processes so far (empty when its worker has ended)."""

        async def read() -> list[int]:
            worker = self._running_parts()[1].worker(namespace, name)
            return worker.pids() if worker is not None else []

        return self._call(read())

    # -- plumbing ------------------------------------------------------------------------------

    def _node(self, name: str) -> AgentNode:
        for node in self._nodes:
            if node.name == name:
                return node
        raise NodeAgentError(f"the node agent has no node {name!r}")

    def _api_client(self) -> ApiClient:
        if self._api is None:
            raise NodeAgentError("the node agent is not running")
        return self._api

    def _running_parts(self) -> tuple[Heartbeats, PodSync]:
        if self._heartbeats is None or self._pods is None:
            raise NodeAgentError("the node agent is not running")
        return self._heartbeats, self._pods

    def _call(self, coroutine: Coroutine[Any, Any, T], timeout: float = CALL_TIMEOUT_SECONDS) -> T:
        """Run ``coroutine`` on the agent's loop from another thread and wait for its result."""
        loop = self._loop
        if loop is None or loop.is_closed():
            coroutine.close()
            raise NodeAgentError("the node agent is not running")
        future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise
