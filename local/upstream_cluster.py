"""``UpstreamCluster``: GKE on one machine with the real control plane.

    with UpstreamCluster(workdir=tmp_path, description="v5e-small") as cluster:
        kubernetes.config.load_kube_config(config_file=str(cluster.kubeconfig_path))
        cluster.faults.evict_pod("default", "trainer-worker-0-0-x7k2p")

Upstream (:mod:`local.controlplane`): etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the JobSet
controller and the Kueue controller manager. Ours: the node agent (:mod:`local.nodeagent`) that registers the
description's nodes and runs their pods as local processes, GKE's node provisioning (:mod:`local.gke`: pools
provisioned on demand, the ProvisioningRequest responder), the description's Kueue objects and configuration
applied through the API, and the faults (:mod:`local.faults`). Every behaviour of a Job, a JobSet, a Workload, a
node's lifecycle or a pod's garbage collection is the upstream controllers'.
"""

from __future__ import annotations

import asyncio
import copy
import socket
import ssl
import threading
import time
from dataclasses import asdict
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from aiohttp import web
from kubernetes import client, config

from elastic_training.local.controlplane import audit
from elastic_training.local.controlplane.audit import AuditEvent
from elastic_training.local.controlplane.cluster import ControlPlane
from elastic_training.local.descriptions.cluster_description import ClusterDescription, load_description
from elastic_training.local.faults import kube_faults
from elastic_training.local.faults.server import TOKEN_REVIEW_PATH, FaultServer, TokenReviewer
from elastic_training.local.gke import GkeStandIn, Rule
from elastic_training.local.nodeagent import NodeAgent

KUEUE_CONFIG_NAMESPACE, KUEUE_CONFIG_MAP = "kueue-system", "kueue-manager-config"
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"


class UpstreamCluster:
    """The upstream control plane, the node agent for ``description``'s nodes, and the faults."""

    def __init__(
        self,
        workdir: Path,
        port: int = 0,
        *,
        kubeconfig_path: Path | None = None,
        description: ClusterDescription | str | Path = "v5e-small",
        run_nodes: bool = True,
        progress: Any = None,
        node_monitor_grace_seconds: int | None = None,
    ) -> None:
        self.description = description if isinstance(description, ClusterDescription) else load_description(description)
        self.workdir = workdir.resolve()
        # The fault server's port serves kube-apiserver's token webhook, named at its start: bound now and held until
        # the fault server serves on it (a port only picked meanwhile went to another process's pick under load).
        self._fault_socket = socket.create_server(("127.0.0.1", 0))
        self._fault_server_port = int(self._fault_socket.getsockname()[1])
        self.control_plane = ControlPlane(
            self.workdir,
            port=port,
            kubeconfig_path=kubeconfig_path,
            kueue_configuration=copy.deepcopy(dict(self.description.kueue_configuration)),
            progress=progress,
            write_user_kubeconfig=False,  # written last, once nodes and faults are up
            token_webhook_url=f"https://127.0.0.1:{self._fault_server_port}{TOKEN_REVIEW_PATH}",
            node_monitor_grace_seconds=node_monitor_grace_seconds,  # kube-controller-manager's default when None
        )
        self._run_nodes = run_nodes
        self.agent: NodeAgent | None = None
        self.gke: GkeStandIn | None = None
        self._gke_api: client.ApiClient | None = None
        self._api: client.ApiClient | None = None
        self.faults = UpstreamFaults(self)
        self.timings: dict[str, float] = {}
        self.faults_port = 0
        self._fault_loop: asyncio.AbstractEventLoop | None = None
        self._fault_thread: threading.Thread | None = None
        self.fault_server: FaultServer | None = None
        self._fault_runner: web.AppRunner | None = None
        self._started = False
        self.kueue_reconfigured = False  # Kueue restarted with a Configuration other than the description's

    # -- lifecycle ----------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the control plane, apply the description's Kueue objects, register the nodes.

        On any failure (a signal's exception too) everything started is stopped and the kubeconfig this start wrote
        is removed: nothing is left running, and nothing points at a cluster that is not there.
        """
        started = time.monotonic()
        before = _signature(self.kubeconfig_path)
        self._started = True
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.control_plane.start()
            self._wait_for_default_service_account()
            self._publish_kueue_configuration()
            self._apply_queue_objects()
            if self._run_nodes:
                self._start_agent()
                self._start_gke()
            self._start_fault_server()
        except BaseException:
            self.stop()
            if _signature(self.kubeconfig_path) != before:
                self.kubeconfig_path.unlink(missing_ok=True)
            raise
        self.timings = {**self.control_plane.timings, "total": time.monotonic() - started}

    def _wait_for_default_service_account(self, seconds: float = 60.0) -> None:
        """Until kube-controller-manager's service-account controller has made ``default/default``: before it,
        kube-apiserver's ServiceAccount admission refuses every pod in ``default`` (403), so the cluster is not
        ready for a user's first run."""
        core = client.CoreV1Api(self.api)
        deadline = time.monotonic() + seconds
        while True:
            try:
                core.read_namespaced_service_account("default", "default")
                return
            except client.ApiException as error:
                if error.status != 404 or time.monotonic() > deadline:
                    raise
            time.sleep(0.1)

    def _start_agent(self) -> None:
        keys = self.control_plane.pki
        assert keys is not None
        self.agent = NodeAgent(
            kubeconfig=self.control_plane.kubeconfigs["node-agent"],
            description=self.description,
            workdir=self.workdir,
            pod_env=self.pod_env(),
            serving_cert=keys.node_agent[0],
            serving_key=keys.node_agent[1],
            client_ca=keys.ca,
        )
        self.agent.start()

    def _start_gke(self) -> None:
        """GKE's node provisioning (:mod:`local.gke`): on-demand pools and the ProvisioningRequest responder."""
        if self.agent is None:
            return
        configuration = client.Configuration()
        config.load_kube_config(
            config_file=str(self.control_plane.kubeconfigs["admin"]), client_configuration=configuration
        )
        configuration.connection_pool_maxsize = 16  # two watches and the writes, from several threads
        self._gke_api = client.ApiClient(configuration)
        self.gke = GkeStandIn(self.description, self.agent, self._gke_api)
        self.gke.start()

    def _stop_gke(self) -> None:
        if self.gke is not None:
            self.gke.stop()
            self.gke = None
        if self._gke_api is not None:
            self._gke_api.close()
            self._gke_api = None

    def _start_fault_server(self) -> None:
        """The fault endpoint and API proxy on its own loop and thread; the kubeconfig gets its context."""
        keys = self.control_plane.pki
        assert keys is not None
        admin = self.control_plane.identities["admin"]
        self.fault_server = FaultServer(self, admin.token)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(keys.faults[0]), str(keys.faults[1]))
        self.faults_port = self._fault_server_port
        loop = asyncio.new_event_loop()

        async def serve() -> None:
            assert self.fault_server is not None
            self._fault_runner = web.AppRunner(
                self.fault_server.app,
                access_log=None,
                shutdown_timeout=2.0,  # a client's kept-alive connection
            )
            await self._fault_runner.setup()
            await web.SockSite(self._fault_runner, self._fault_socket, ssl_context=context).start()

        self._fault_thread = threading.Thread(target=loop.run_forever, name="fault-server", daemon=True)
        self._fault_thread.start()
        self._fault_loop = loop
        asyncio.run_coroutine_threadsafe(serve(), loop).result(timeout=30)
        self.control_plane.write_user_kubeconfig(faults_url=f"https://127.0.0.1:{self.faults_port}")

    def fault_proxy(self) -> tuple[FaultServer, asyncio.AbstractEventLoop]:
        """The fault endpoint and API proxy, and the loop it runs on; RuntimeError when it is not running."""
        if self.fault_server is None or self._fault_loop is None:
            raise RuntimeError("the cluster's fault proxy is not running")
        return self.fault_server, self._fault_loop

    def add_token_webhook(self, reviewer: TokenReviewer) -> None:
        """Authenticate bearer tokens no other authenticator knows through ``reviewer`` (kube-apiserver's token
        webhook, as GKE authenticates Google access tokens): it returns who a token stands for, or None."""
        self.fault_proxy()[0].token_reviewers.append(reviewer)

    def remove_token_webhook(self, reviewer: TokenReviewer) -> None:
        """Stop asking ``reviewer`` (its tokens are refused again)."""
        reviewers = self.fault_proxy()[0].token_reviewers
        if reviewer in reviewers:
            reviewers.remove(reviewer)

    def _stop_fault_server(self) -> None:
        loop, server = self._fault_loop, self.fault_server
        if loop is None or server is None:
            self._fault_socket.close()  # never served on (a start that failed before it)
            return
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(timeout=10)
        if self._fault_runner is not None:  # its listening socket closed, not left to the garbage collector
            asyncio.run_coroutine_threadsafe(self._fault_runner.cleanup(), loop).result(timeout=10)
            self._fault_runner = None
        asyncio.run_coroutine_threadsafe(_cancel_the_rest(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        if self._fault_thread is not None:
            self._fault_thread.join(timeout=10)
        loop.close()
        self._fault_loop = None

    def stop(self) -> None:
        """Stop every pod process, then every control-plane process; nothing is left running. Idempotent."""
        if not self._started:
            return
        self._started = False
        self._stop_fault_server()
        self._stop_gke()
        if self.agent is not None:
            self.agent.stop()
            self.agent = None
        self.faults.cancel()
        self.control_plane.stop()
        if self._api is not None:
            self._api.close()
            self._api = None

    def __enter__(self) -> UpstreamCluster:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    # -- where it is ---------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.control_plane.url

    @property
    def port(self) -> int:
        return self.control_plane.ports.apiserver

    @property
    def kubeconfig_path(self) -> Path:
        return self.control_plane.kubeconfig_path

    @property
    def ca_path(self) -> Path:
        assert self.control_plane.pki is not None
        return self.control_plane.pki.ca

    @property
    def faults_url(self) -> str:
        """The API fault proxy in front of kube-apiserver (the kubeconfig's ``elastic-training-local-faults``
        context): a client that talks to it meets :meth:`UpstreamFaults.fail_requests` and the other API faults."""
        if not self.faults_port:
            raise RuntimeError("the cluster's fault proxy is not running")
        return f"https://127.0.0.1:{self.faults_port}"

    @property
    def ca_pem(self) -> bytes:
        """The cluster CA's certificate (PEM), as a kubeconfig's ``certificate-authority-data`` holds it."""
        return self.ca_path.read_bytes()

    @property
    def audit_log_path(self) -> Path:
        return self.control_plane.audit_log_path

    def audit_position(self) -> int:
        """A position in kube-apiserver's audit log: :meth:`audit_events` returns what came after it."""
        return audit.position(self.audit_log_path)

    def audit_events(self, since: int = 0) -> list[AuditEvent]:
        """The requests kube-apiserver received after ``since``: verb, objectRef, user, user agent, URI."""
        return audit.events_since(self.audit_log_path, since)

    def pod_env(self) -> dict[str, str]:
        """What a pod's processes find: the cluster's kubeconfig, as in-cluster config would give them."""
        return {
            "KUBECONFIG": str(self.kubeconfig_path),
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.port),
        }

    @property
    def api(self) -> client.ApiClient:
        """An API client as the cluster admin (its kubeconfig under ``etc/``, written before the user's)."""
        if self._api is None:
            self._api = config.new_client_from_config(config_file=str(self.control_plane.kubeconfigs["admin"]))
        return self._api

    # -- Kueue's objects and configuration -----------------------------------------------------------------------

    def _apply_queue_objects(self) -> None:
        documents = [
            {"apiVersion": o.rtype.api_version, "kind": o.rtype.kind, **copy.deepcopy(dict(o.body))}
            for o in self.description.queue_objects
        ]
        self.control_plane.apply(documents)

    def _publish_kueue_configuration(self) -> None:
        """The ConfigMap Kueue's release installs, holding the configuration the manager runs with."""
        text = self.control_plane.kueue_configuration_path().read_text()
        self.control_plane.apply(
            [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": KUEUE_CONFIG_MAP, "namespace": KUEUE_CONFIG_NAMESPACE},
                    "data": {KUEUE_CONFIG_KEY: text},
                }
            ]
        )

    def configure_kueue(self, configuration: dict[str, Any]) -> dict[str, Any]:
        """A new Kueue Configuration: the ConfigMap edited, then the manager restarted (how a real Kueue takes it).

        ``configuration`` is the Configuration document (``waitForPodsReady`` and the like) as written: Kueue checks
        and defaults it when it starts. One it refuses raises ``KueueConfigurationError`` (local/controlplane/
        cluster.py) quoting Kueue's error; the manager then runs again with its previous configuration, and the
        ConfigMap is unchanged. The integrations (JobSet's too), where the manager listens and its certificates stay
        as they are. Returns the Configuration the manager now runs with.
        """
        self.control_plane.restart_kueue(copy.deepcopy(configuration))
        self.kueue_reconfigured = True
        self._publish_kueue_configuration()
        return dict(yaml.safe_load(self.control_plane.kueue_configuration_path().read_text()))


async def _cancel_the_rest() -> None:
    """Cancel the loop's other tasks (requests still being handled) and wait for them, so none is left pending."""
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


def _signature(path: Path) -> tuple[int, int] | None:
    """The file's inode and modification time (None: no file): a kubeconfig written since has another."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns


class _LostSlice:
    """A lost slice's nodes: deleted once the node lifecycle controller marks them ``Unknown`` (their VMs are gone),
    registered again at the repair (or, repaired before that, their hosts simply back)."""

    MARK_TIMEOUT_SECONDS = 300.0

    def __init__(self, cluster: UpstreamCluster, agent: NodeAgent, nodes: list[str]) -> None:
        self._cluster, self._agent, self._nodes = cluster, agent, nodes
        self._lock = threading.Lock()
        self._deleted = False
        self._repaired = False

    def _all_unknown(self) -> bool:
        core = client.CoreV1Api(self._cluster.api)
        for name in self._nodes:
            conditions = core.read_node_status(name).status.conditions or []
            if not any(c.type == "Ready" and c.status == "Unknown" for c in conditions):
                return False
        return True

    def delete_when_unknown(self) -> None:
        deadline = time.monotonic() + self.MARK_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            with self._lock:
                if self._repaired:
                    return
            try:
                if self._all_unknown():
                    break
            except Exception:  # the cluster is stopping (its API gone, or refusing)
                return
            time.sleep(1.0)
        with self._lock:
            if self._repaired or self._cluster.agent is None:
                return
            try:
                self._agent.unregister_nodes(self._nodes)
            except RuntimeError:  # the agent stopped meanwhile (the cluster is stopping)
                return
            self._deleted = True

    def _wait_for_pod_gc(self, seconds: float = 120.0) -> None:
        """Until pod GC has collected the pods bound to the deleted nodes (its 40 s quarantine, then its next pass):
        a recreated TPU VM takes minutes on GKE, so its node never registers under pods of the VM before it. A
        repair due sooner waits here, rather than leave those pods to a node that knows nothing of them."""
        core = client.CoreV1Api(self._cluster.api)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                bound = [
                    core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={n}").items for n in self._nodes
                ]
            except (client.ApiException, OSError):  # the cluster is stopping
                return
            if not any(bound):
                return
            time.sleep(1.0)

    def repair(self) -> list[str]:
        """The slice's VMs back (once; later calls do nothing); its nodes."""
        with self._lock:
            if self._repaired or self._cluster.agent is None:
                return []
            self._repaired = True
            if self._deleted:
                self._wait_for_pod_gc()
                self._agent.register_nodes(self._nodes, {})
            else:
                for name in self._nodes:
                    self._agent.restore_host(name)
            return list(self._nodes)


class UpstreamFaults:
    """Faults, each through the real mechanism (module :mod:`local.faults.kube_faults`, the node agent)."""

    def __init__(self, cluster: UpstreamCluster) -> None:
        self._cluster = cluster
        self._timers: list[threading.Timer] = []
        self._lost: list[_LostSlice] = []

    def _agent(self) -> NodeAgent:
        if self._cluster.agent is None:
            raise RuntimeError("the cluster runs no node agent")
        return self._cluster.agent

    def delete_pod(self, namespace: str, name: str) -> dict[str, Any]:
        """``kubectl delete pod``: a graceful deletion through the API."""
        return kube_faults.delete_pod(self._cluster.api, namespace, name)

    def evict_pod(self, namespace: str, name: str) -> dict[str, Any]:
        """The Eviction API, as a drain or GKE's maintenance evicts."""
        return kube_faults.evict_pod(self._cluster.api, namespace, name)

    def signal_pod(self, namespace: str, name: str, sig: int, container: str | None = None) -> int:
        """Send ``sig`` to the pod's processes (a process crash, an OOM kill); how many were signalled."""
        return self._agent().signal_pod(namespace, name, sig, container)

    def pool_nodes(self, pool: str) -> list[str]:
        described = self._cluster.description.pool(pool)
        if described is None:
            raise kube_faults.FaultError(f"no node pool {pool!r} in the cluster description")
        return self._cluster.description.node_names(described)

    def pool_of(self, node: str) -> str:
        for pool in self._cluster.description.pools:
            if node in self._cluster.description.node_names(pool):
                return pool.name
        raise kube_faults.FaultError(f"no node {node!r} in the cluster description")

    def lose_host(self, node: str, repair_seconds: float | None = None) -> dict[str, Any]:
        """A TPU host is lost, and its slice with it; ``repair_seconds`` later (the description's ``repairSeconds``
        when None) GKE has recreated the slice's VMs and their nodes register again.

        GKE cannot live-migrate a TPU VM: a host event ends the VM, and the slice's other hosts with it. Here the
        pool's hosts stop at once (no heartbeats; their processes die). The rest is the real controllers' and
        GKE's: the node lifecycle controller marks the nodes ``Unknown`` after its grace period; GKE then deletes
        the gone VMs' Node objects (as the cloud node lifecycle controller does for a NotReady node whose
        instance no longer exists); pod GC fails and deletes their pods after its 40 s quarantine
        (``DeletionByPodGC``), and the Job controller replaces them. A repair due before the nodes were marked
        brings the same hosts back instead.
        """
        pool = self.pool_of(node)
        described = self._cluster.description.pool(pool)
        seconds = repair_seconds if repair_seconds is not None else (described.repair_seconds if described else 0.0)
        nodes = self.pool_nodes(pool)
        for name in nodes:
            self._agent().lose_host(name)
        slice_ = _LostSlice(self._cluster, self._agent(), nodes)
        threading.Thread(target=slice_.delete_when_unknown, name=f"lost-{pool}", daemon=True).start()
        self._lost.append(slice_)
        self._later(seconds, slice_.repair)
        return {"node": node, "nodePool": pool, "nodes": nodes, "repairSeconds": seconds}

    def repair_lost_slices(self) -> list[str]:
        """Every lost slice's repair, now rather than when due (a test's cleanup, the shared cluster's reset); the
        nodes repaired."""
        repaired = [node for lost in self._lost for node in lost.repair()]
        self._lost.clear()
        return repaired

    def repair_node_pool(self, pool: str, seconds: float) -> dict[str, Any]:
        """GKE's auto-repair of a pool: cordon and drain through the API, the hosts down for ``seconds``, then back
        and uncordoned."""
        nodes = self.pool_nodes(pool)
        evicted = kube_faults.drain(self._cluster.api, nodes)
        for name in nodes:
            self._agent().lose_host(name)

        def back() -> None:
            for name in nodes:
                self._agent().restore_host(name)
            kube_faults.set_unschedulable(self._cluster.api, nodes, False)

        self._later(seconds, back)
        return {"nodePool": pool, "nodes": nodes, "evictedPods": evicted, "seconds": seconds}

    def stop_queue(
        self, *, cluster_queue: str | None = None, local_queue: str | None = None, policy: str = "HoldAndDrain"
    ) -> dict[str, Any]:
        """``spec.stopPolicy`` of a ClusterQueue or LocalQueue (``namespace/name``)."""
        return kube_faults.stop_queue(
            self._cluster.api, cluster_queue=cluster_queue, local_queue=local_queue, policy=policy
        )

    def deactivate_workload(self, namespace: str, jobset: str, active: bool = False) -> dict[str, Any]:
        """``spec.active`` of the JobSet's Workload (False: Kueue evicts it as ``Deactivated``)."""
        return kube_faults.set_workload_active(self._cluster.api, namespace, jobset, active)

    def kueue_configuration(self, configuration: dict[str, Any]) -> dict[str, Any]:
        """A new Kueue manager Configuration (e.g. ``waitForPodsReady``): the ConfigMap, then a restart."""
        return self._cluster.configure_kueue(configuration)

    # -- the API's faults, in the proxy (only clients of the context elastic-training-local-faults meet them) ----

    def _proxy(self) -> tuple[FaultServer, asyncio.AbstractEventLoop]:
        return self._cluster.fault_proxy()

    def fail_requests(self, code: int = 500, **rule: Any) -> dict[str, Any]:
        """Answer matching requests with ``code`` (``count``, ``probability``, ``seconds``, ``path``, ``method``,
        ``retry_after``: :meth:`ApiFaults.fail_requests`); the rule as added."""
        return asdict(self._proxy()[0].api.fail_requests(code, **rule))

    def latency(self, seconds: float, *, path: str | None = None, method: str | None = None) -> dict[str, Any]:
        """Delay matching requests by ``seconds``; the rule as added."""
        return asdict(self._proxy()[0].api.add_latency(seconds, path=path, method=method))

    def clear_api_faults(self) -> dict[str, Any]:
        """Remove every fail-requests and latency rule; what is left (nothing) and how many requests were failed."""
        api = self._proxy()[0].api
        api.clear()
        return api.describe()

    def expire_watches(self, compact: bool = False) -> dict[str, Any]:
        """End every watch open through the proxy; with ``compact``, etcd is compacted first, so a watch resumed
        from an older resourceVersion gets 410 Gone from kube-apiserver."""
        server, loop = self._proxy()
        return asyncio.run_coroutine_threadsafe(server.expire_watches(compact), loop).result(timeout=60)

    def _gke(self) -> GkeStandIn:
        if self._cluster.gke is None:
            raise RuntimeError("the cluster runs no node agent, so no GKE provisioning")
        return self._cluster.gke

    def provision_on_demand(self, pool: str, seconds: float, queued: bool = False) -> dict[str, Any]:
        """The idle ``pool``'s nodes go (their VMs deleted); they come back ``seconds`` after a pending pod asks for
        them, or, ``queued``, only for a ProvisioningRequest (:mod:`local.gke.node_pools`)."""
        return self._gke().provision_on_demand(pool, seconds, queued=queued)

    def provisioning(
        self,
        outcome: str,
        namespace: str | None = None,
        name: str | None = None,
        count: int = 1,
        seconds: float = 0.0,
        reason: str = "",
        message: str = "",
    ) -> dict[str, Any]:
        """A ProvisioningRequest's outcome (``fail``, ``delay``, ``expire``, ``revoke``): now for the request
        ``namespace/name``, else for the next ``count`` requests (:mod:`local.gke.provisioning_requests`)."""
        rule = Rule(outcome, count, seconds, reason, message)
        return self._gke().provisioning(rule, namespace, name)

    def clear_provisioning_rules(self) -> list[dict[str, Any]]:
        """Drop the ProvisioningRequest outcomes set for requests not yet made (what they were)."""
        return self._gke().clear_provisioning_rules()

    def _later(self, seconds: float, action: Any) -> None:
        timer = threading.Timer(seconds, action)
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def cancel(self) -> None:
        """Cancel the repairs not yet due (the cluster is stopping)."""
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
