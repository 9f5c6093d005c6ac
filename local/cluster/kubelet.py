"""The local kubelet: every pod in the store runs as local processes on this machine.

Images map to local programs through the image catalogue (``local/cluster/images.py``): the image
``local`` runs its ``command`` + ``args`` as written (after ``$(VAR)`` expansion); a MaxText or Pathways
image runs the local stand-in of its program with the same arguments; any other image is not pulled
(``ErrImagePull`` / ``ImagePullBackOff``, the pod stays Pending). PATH = the project's venv ``bin`` first
(so ``python``/``python3`` are the project's interpreter), then the system PATH. A ``local`` container
without ``command`` runs an idle placeholder that stays up until it is stopped.
The environment is: a few host variables (HOME, LANG, TMPDIR, ...), PATH, HOSTNAME, the
cluster's ``pod_env`` (KUBECONFIG, KUBERNETES_SERVICE_HOST/PORT), then the container's ``env``.

The kubelet runs only pods bound to a node (``spec.nodeName``, set by the scheduler or by the pod's
author) that exists and is ``Ready``: one Kubelet object plays every node's kubelet. A pod bound to
a node that is missing or not ready waits, as it would for that node's kubelet, and starts when the
node becomes ready. The kubelet reacts to store events: a newly runnable pod starts a
:class:`PodWorker`; a pod marked for deletion is stopped gracefully (SIGTERM, SIGKILL at
``deletionGracePeriodSeconds``) and, once every container has stopped, deleted with grace 0 (it
stays while it has finalizers); a pod removed at once (forced deletion) has its processes killed
immediately.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from pathlib import Path

from elastic_training.local.cluster.nodes import node_is_ready
from elastic_training.local.cluster.resources import NODES, PODS, ApiError, not_found
from elastic_training.local.cluster.store import Obj, Store, WatchEvent
from elastic_training.local.group_reaper import GroupReaper
from elastic_training.local.nodeagent.logs import LogStore
from elastic_training.local.nodeagent.pod_worker import PodWorker, grace_of, merged_status, pod_is_terminal


class StorePodSink:
    """The pod workers' status writes and final deletions, straight into the in-memory store."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def write_status(self, namespace: str, name: str, uid: str, status: Obj) -> bool:
        """Merge ``status`` into the stored pod's (others' conditions kept); False when the pod is gone."""
        try:
            self._store.mutate(
                PODS, namespace, name, lambda o: o.__setitem__("status", merged_status(o, status)), subresource="status"
            )
        except ApiError as err:
            if err.code == 404:
                return False
            raise
        return True

    def delete_now(self, namespace: str, name: str, uid: str) -> None:
        """Delete the pod with grace 0 when it is still the one with ``uid``."""
        current = self._store.find(PODS, namespace, name)
        if current is None or current["metadata"].get("uid") != uid:
            return
        with contextlib.suppress(ApiError):
            self._store.delete(PODS, namespace, name, grace_period_seconds=0)


class Kubelet:
    """Starts, stops and reports on pod processes."""

    def __init__(self, store: Store, logs: LogStore, workdir: Path, pod_env: Mapping[str, str]) -> None:
        self._store = store
        self._sink = StorePodSink(store)
        self._logs = logs
        self._workdir = workdir
        self._pod_env = dict(pod_env)
        self._workers: dict[str, PodWorker] = {}
        self._finished: set[str] = set()  # uids whose worker has ended: never start them again
        self._running = False
        self._reaper = GroupReaper()

    def start(self) -> None:
        """Subscribe to pod events and start the pods already stored (call on the event loop)."""
        self._running = True
        self._reaper.start()
        self._store.add_listener(self._on_event)
        pods, _ = self._store.list(PODS)
        for pod in pods:
            self._sync(pod)

    async def stop(self, grace_cap_seconds: float = 3.0) -> None:
        """Stop every pod's processes: SIGTERM, then SIGKILL after min(grace, cap); write nothing more."""
        self._running = False
        workers = list(self._workers.values())
        for worker in workers:
            worker.request_termination(min(grace_cap_seconds, worker_grace(self._store, worker)), silent=True)
        tasks = [w.task for w in workers if w.task is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_cap_seconds + 2.0)
            for task in pending:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*pending, return_exceptions=True)
        self._reaper.stop()

    def worker(self, namespace: str, name: str) -> PodWorker | None:
        for worker in self._workers.values():
            if (worker.namespace, worker.name) == (namespace, name):
                return worker
        return None

    def pids(self, namespace: str, name: str) -> list[int]:
        """The pids of the pod's container processes so far (tests check they are all gone)."""
        worker = self.worker(namespace, name)
        return worker.pids() if worker else []

    async def signal_pod(self, namespace: str, name: str, sig: int, container: str | None = None) -> None:
        """Send ``sig`` to the process group of one container (or all) of a running pod."""
        worker = self.worker(namespace, name)
        if worker is None:
            raise not_found(PODS, name)
        if worker.signal(sig, container) == 0 and container is not None:
            raise ApiError(400, "BadRequest", f"container {container} is not running in pod {name}")

    async def delete_pod_now(self, namespace: str, name: str) -> None:
        """Remove the pod from the store at once and kill its processes (a forced deletion)."""
        worker = self.worker(namespace, name)
        self._store.delete(PODS, namespace, name, grace_period_seconds=0)
        if worker is not None and worker.task is not None:
            worker.kill_now()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(worker.task), 5.0)

    async def fail_pod(self, namespace: str, name: str, condition: Obj) -> None:
        """PodGC for a pod whose node is gone: kill its processes (no graceful stop: the host is lost),
        write phase ``Failed`` and ``condition``, then delete it with grace 0."""
        worker = self.worker(namespace, name)
        if worker is not None and worker.task is not None:
            worker.kill_now()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(worker.task), 5.0)

        def failed(pod: Obj) -> None:
            status = pod.setdefault("status", {})
            status["phase"] = "Failed"
            conditions = status.setdefault("conditions", [])
            conditions[:] = [c for c in conditions if c.get("type") != condition["type"]] + [condition]

        with contextlib.suppress(ApiError):
            self._store.mutate(PODS, namespace, name, failed, subresource="status")
            self._store.delete(PODS, namespace, name, grace_period_seconds=0)

    def shut_down_pod(self, namespace: str, name: str, message: str) -> bool:
        """The kubelet terminates a running pod itself (graceful node shutdown): SIGTERM, SIGKILL after
        its grace period; it ends ``Failed`` with reason ``Terminated`` and is not deleted. False when
        no worker runs it."""
        worker = self.worker(namespace, name)
        if worker is None:
            return False
        pod = self._store.find(PODS, namespace, name)
        worker.shut_down(grace_of(pod) if pod is not None else 0.0, "Terminated", message)
        return True

    # -- events ------------------------------------------------------------------------------

    def _on_event(self, event: WatchEvent) -> None:
        if not self._running:
            return
        if event.rtype == NODES:
            if event.type != "DELETED" and node_is_ready(event.object):
                name = event.object["metadata"]["name"]
                for pod in self._store.list(PODS, where=lambda p: p.get("spec", {}).get("nodeName") == name)[0]:
                    self._sync(pod)
            return
        if event.rtype != PODS:
            return
        uid = str(event.object["metadata"].get("uid", ""))
        if event.type == "DELETED":
            worker = self._workers.get(uid)
            if worker is not None:
                worker.kill_now()
            self._finished.discard(uid)
            return
        self._sync(event.object)

    def _sync(self, pod: Obj) -> None:
        meta = pod["metadata"]
        uid = str(meta["uid"])
        worker = self._workers.get(uid)
        deleting = bool(meta.get("deletionTimestamp"))
        if worker is not None:
            if deleting:
                worker.request_termination(grace_of(pod))
            return
        if uid in self._finished:
            return
        if deleting:
            # Deleted before it ever ran: nothing to stop; remove it outside the listener so
            # every watcher sees MODIFIED before DELETED.
            asyncio.get_running_loop().call_soon(self._remove_quietly, pod)
            return
        if pod_is_terminal(pod) or not self._runnable_here(pod):
            return
        worker = PodWorker(self._sink, self._logs, pod, self._workdir, self._pod_env, self._worker_exited, self._reaper)
        self._workers[uid] = worker
        worker.start()

    def _runnable_here(self, pod: Obj) -> bool:
        node_name = pod.get("spec", {}).get("nodeName")
        return bool(node_name) and node_is_ready(self._store.find(NODES, "", str(node_name)))

    def _worker_exited(self, worker: PodWorker) -> None:
        self._workers.pop(worker.uid, None)
        if self._store.find(PODS, worker.namespace, worker.name) is not None:
            self._finished.add(worker.uid)

    def _remove_quietly(self, pod: Obj) -> None:
        meta = pod["metadata"]
        current = self._store.find(PODS, meta["namespace"], meta["name"])
        if current is not None and current["metadata"].get("uid") == meta["uid"]:
            with contextlib.suppress(ApiError):
                self._store.delete(PODS, meta["namespace"], meta["name"], grace_period_seconds=0)


def worker_grace(store: Store, worker: PodWorker) -> float:
    pod = store.find(PODS, worker.namespace, worker.name)
    return grace_of(pod) if pod is not None else 0.0
