"""The pods bound to the agent's nodes: watched on kube-apiserver and run as local processes by pod workers.

Stands for the kubelet's sync loop and pod workers (``pkg/kubelet/kubelet.go`` ``syncLoop``, ``pod_workers.go``):
it lists and watches the pods whose ``spec.nodeName`` is set (the kubelet's own watch is one node's; the agent keeps
those of its nodes), starts a :class:`~elastic_training.local.nodeagent.pod_worker.PodWorker` for each new one, and
hands each change to it:

- a pod with a ``deletionTimestamp`` is stopped (SIGTERM, SIGKILL at ``deletionGracePeriodSeconds``); its worker
  writes the final status and deletes it with grace 0 and a UID precondition. One deleted before it ever ran is
  reported ``Failed`` and deleted at once;
- a pod that disappears (a forced deletion, or one the watch's relist no longer finds) has its processes killed at
  once and nothing more written;
- a pod that ended (``Succeeded``/``Failed``) is never started again, as the kubelet never restarts a terminal pod.

A lost node's pods (:meth:`PodSync.lose_node`) have their processes killed and nothing written: its kubelet is gone.
When the node comes back (:meth:`PodSync.restore_node`) its pods are reported ``Failed``, their containers terminated
``ContainerStatusUnknown`` (exit 137), as the kubelet reports containers it cannot find; one being deleted is then
deleted (grace 0). The final status comes first, as the kubelet's: a Job with a ``podFailurePolicy`` keeps its pod's
tracking finalizer until the pod is Failed. The real kubelet of a rebooted host would start ``OnFailure`` and
``Always`` containers again; a repaired TPU host comes back without its pods, which is the case this follows. Pods
bound to a node while it was lost start when it comes back.

It does not admit pods (the scheduler's placement is trusted: no resource or taint check), and runs no probes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path

from elastic_training.local.group_reaper import GroupReaper
from elastic_training.local.nodeagent.api import (
    TRANSPORT_ERRORS,
    ApiClient,
    ApiStatusError,
    Backoff,
    Obj,
    WatchEvent,
    WatchExpired,
)
from elastic_training.local.nodeagent.logs import LogStore
from elastic_training.local.nodeagent.lost_pods import lost_pod_status
from elastic_training.local.nodeagent.pod_worker import PodWorker, grace_of, pod_is_terminal
from elastic_training.local.nodeagent.status_sink import ApiPodSink

log = logging.getLogger(__name__)

BOUND_PODS = {"fieldSelector": "spec.nodeName!="}


def _uid(pod: Obj) -> str:
    return str(pod["metadata"]["uid"])


def _node_of(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


class PodSync:
    """Runs the pods bound to ``nodes`` and follows their changes, on the agent's loop."""

    def __init__(
        self,
        api: ApiClient,
        sink: ApiPodSink,
        logs: LogStore,
        workdir: Path,
        pod_env: Mapping[str, str],
        nodes: list[str],
    ) -> None:
        self._api = api
        self._sink = sink
        self._logs = logs
        self._workdir = workdir
        self._pod_env = dict(pod_env)
        self._nodes = set(nodes)
        self._lost_nodes: set[str] = set()
        self._pods: dict[str, Obj] = {}  # uid -> the newest object seen, for pods bound to our nodes
        self._workers: dict[str, PodWorker] = {}
        self._finished: set[str] = set()  # uids whose worker has ended: never started again
        self._lost_pods: set[str] = set()  # uids whose processes died with their node
        self._reaper = GroupReaper()
        self._task: asyncio.Task[None] | None = None
        self._running = False

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """List the bound pods and start those of our nodes, then follow the watch."""
        self._reaper.start()
        self._running = True
        version = await self._relist()
        self._task = asyncio.get_running_loop().create_task(self._follow(version), name="pod watch")

    async def stop(self, grace_cap_seconds: float) -> None:
        """Stop every pod's processes (SIGTERM, SIGKILL after min(grace, cap)), writing nothing more."""
        self._running = False
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        workers = list(self._workers.values())
        for worker in workers:
            pod = self._pods.get(worker.uid)
            grace = grace_of(pod) if pod is not None else 0.0
            worker.request_termination(min(grace_cap_seconds, grace), silent=True)
        tasks = [w.task for w in workers if w.task is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_cap_seconds + 2.0)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        self._reaper.stop()

    # -- what the faults and the kubelet API ask -----------------------------------------------

    def worker(self, namespace: str, name: str) -> PodWorker | None:
        """The running worker of the pod ``namespace/name``, if this agent runs it."""
        for worker in self._workers.values():
            if (worker.namespace, worker.name) == (namespace, name):
                return worker
        return None

    def pod(self, node: str, namespace: str, name: str) -> Obj | None:
        """The pod ``namespace/name`` bound to ``node``, with the newest status its worker computed."""
        for uid, pod in self._pods.items():
            meta = pod["metadata"]
            if (meta["namespace"], meta["name"]) == (namespace, name) and _node_of(pod) == node:
                status = self._sink.latest(uid)
                return {**pod, "status": status} if status is not None else pod
        return None

    def add_nodes(self, nodes: list[str]) -> None:
        """Run the pods bound to ``nodes`` too (registered after the start; the watch brings their pods)."""
        self._nodes.update(nodes)

    def remove_nodes(self, nodes: list[str]) -> None:
        """``nodes`` are gone (their VMs deleted): kill their pods' processes at once and keep nothing of them;
        what becomes of the pod objects is pod GC's (orphaned pods)."""
        gone = set(nodes)
        self._nodes -= gone
        self._lost_nodes -= gone
        for uid, pod in list(self._pods.items()):
            if _node_of(pod) in gone:
                self._forget(uid)

    def lose_node(self, node: str) -> None:
        """The node's host is lost: kill its pods' processes at once; write nothing about them."""
        self._lost_nodes.add(node)
        for worker in list(self._workers.values()):
            pod = self._pods.get(worker.uid)
            if pod is not None and _node_of(pod) == node:
                self._lost_pods.add(worker.uid)
                worker.kill_now()

    def restore_node(self, node: str) -> None:
        """The node's host is back: finish its pods' deletions, report its lost pods, start its new pods."""
        self._lost_nodes.discard(node)
        for uid, pod in list(self._pods.items()):
            if _node_of(pod) != node:
                continue
            if uid in self._lost_pods:
                self._settle_lost(pod)
            else:
                self._sync(pod)

    # -- the list and the watch ----------------------------------------------------------------

    async def _follow(self, version: str) -> None:
        """Watch from ``version``; on expiry or error, list again (with backoff) and go on from there."""
        backoff = Backoff()
        while self._running:
            try:
                async for event in self._api.watch("/api/v1/pods", BOUND_PODS, version):
                    backoff.reset()
                    version = str(event.object.get("metadata", {}).get("resourceVersion") or version)
                    self._on_event(event)
                continue  # the server ended the watch: go on from the last version seen
            except WatchExpired:
                pass
            except (ApiStatusError, *TRANSPORT_ERRORS) as err:
                log.warning("pod watch: %s", err)
                await backoff.sleep()
            version = await self._relist_until_done(backoff)

    async def _relist_until_done(self, backoff: Backoff) -> str:
        while True:
            try:
                return await self._relist()
            except (ApiStatusError, *TRANSPORT_ERRORS) as err:
                log.warning("pod list: %s", err)
                await backoff.sleep()

    async def _relist(self) -> str:
        """List the bound pods; sync each of ours; a pod known before and not listed now is gone."""
        listing = await self._api.request("GET", "/api/v1/pods", params=BOUND_PODS)
        seen: set[str] = set()
        for pod in listing.get("items") or []:
            if _node_of(pod) in self._nodes:
                seen.add(_uid(pod))
                self._on_event(WatchEvent("MODIFIED", pod))
        for uid in set(self._pods) - seen:
            self._on_event(WatchEvent("DELETED", self._pods[uid]))
        return str(listing.get("metadata", {}).get("resourceVersion", ""))

    def _on_event(self, event: WatchEvent) -> None:
        if event.type == "BOOKMARK" or not self._running:
            return
        pod = event.object
        if _node_of(pod) not in self._nodes:
            return
        uid = _uid(pod)
        if event.type == "DELETED":
            self._forget(uid)
            return
        self._pods[uid] = pod
        if _node_of(pod) not in self._lost_nodes:
            self._sync(pod)

    def _forget(self, uid: str) -> None:
        """The pod object is gone: kill what still runs of it, keep nothing."""
        worker = self._workers.get(uid)
        if worker is not None:
            worker.kill_now()
        self._pods.pop(uid, None)
        self._finished.discard(uid)
        self._lost_pods.discard(uid)
        self._sink.forget(uid)

    # -- one pod -------------------------------------------------------------------------------

    def _sync(self, pod: Obj) -> None:
        uid = _uid(pod)
        worker = self._workers.get(uid)
        deleting = bool(pod["metadata"].get("deletionTimestamp"))
        if worker is not None:
            if deleting:
                worker.request_termination(grace_of(pod))
            return
        if uid in self._finished:
            return
        if deleting:  # deleted before it ever ran here: nothing to stop
            self._finished.add(uid)
            self._finish_deletion(pod)
            return
        if pod_is_terminal(pod):
            return
        worker = PodWorker(self._sink, self._logs, pod, self._workdir, self._pod_env, self._worker_exited, self._reaper)
        self._workers[uid] = worker
        worker.start()

    def _settle_lost(self, pod: Obj) -> None:
        """A pod whose processes died with its node: report it Failed, and delete it if it is being deleted."""
        meta = pod["metadata"]
        uid = _uid(pod)
        self._lost_pods.discard(uid)
        self._sink.forget(uid)  # the node's kubelet writes again
        if meta.get("deletionTimestamp"):
            self._finish_deletion(pod)
        elif not pod_is_terminal(pod):
            self._sink.write_status(meta["namespace"], meta["name"], uid, lost_pod_status(pod))

    def _finish_deletion(self, pod: Obj) -> None:
        """A pod being deleted that has nothing (left) running here: its final status, then its grace-0 deletion.

        As the kubelet's, the final status is terminal (``Failed`` unless it ended otherwise) before the pod is
        deleted: a Job whose ``podFailurePolicy`` (or ``podReplacementPolicy: Failed``) waits for a Failed pod keeps
        the pod's tracking finalizer until then, and the pod would stay Terminating for good.
        """
        meta = pod["metadata"]
        uid = _uid(pod)
        if not pod_is_terminal(pod):
            self._sink.write_status(meta["namespace"], meta["name"], uid, lost_pod_status(pod))
        self._sink.delete_now(meta["namespace"], meta["name"], uid)

    def _worker_exited(self, worker: PodWorker) -> None:
        self._workers.pop(worker.uid, None)
        if worker.uid in self._pods:
            self._finished.add(worker.uid)
