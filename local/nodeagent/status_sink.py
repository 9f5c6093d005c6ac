"""Pod status writes and final deletions over HTTP: the pod workers' :class:`PodSink` on the real kube-apiserver.

Stands for the kubelet's status manager (``pkg/kubelet/status/status_manager.go``): a pod worker sets the status it
computed, and the manager writes it apart from the worker, the newest one only, through ``pods/{name}/status`` as a
strategic merge patch that carries the pod's UID (the kubelet's ``PatchPodStatus``: a pod recreated under the same
name refuses it). Conditions merge by type, so those others own (``DisruptionTarget``, Kueue's) stay. Once a
terminating pod's last status is in, it deletes the pod with grace 0 and a UID precondition.

It keeps the last status of each pod it was given, for the kubelet API's log reads. It does not write
``qosClass`` (kube-apiserver computes it at creation and refuses a change), and it retries a failed write with
backoff until the pod is gone or the agent stops, where the kubelet would retry on its next sync.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from elastic_training.local.nodeagent.api import (
    STRATEGIC_MERGE,
    TRANSPORT_ERRORS,
    ApiClient,
    ApiStatusError,
    Backoff,
    Obj,
)

log = logging.getLogger(__name__)


def status_patch(uid: str, status: Obj) -> Obj:
    """The strategic merge patch for ``status``: the UID as a precondition; a condition's reason and message
    cleared when the worker gives none, so a stale one does not survive the merge."""
    conditions = [{"reason": None, "message": None, **condition} for condition in status.get("conditions") or []]
    body = {key: value for key, value in status.items() if key != "qosClass"}
    body["conditions"] = conditions
    return {"metadata": {"uid": uid}, "status": body}


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


class ApiPodSink:
    """A :class:`~elastic_training.local.nodeagent.pod_worker.PodSink` writing to kube-apiserver, on the agent's
    loop."""

    def __init__(self, api: ApiClient) -> None:
        self._api = api
        self._latest: dict[str, Obj] = {}  # uid -> the last status given
        self._pending: dict[str, tuple[str, str, Obj]] = {}  # uid -> (namespace, name, status) not yet written
        self._deletions: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name) to delete once written
        self._gone: set[str] = set()
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def write_status(self, namespace: str, name: str, uid: str, status: Obj) -> bool:
        """Schedule the write of ``status`` (replacing one not yet written); False once the pod is known gone."""
        if uid in self._gone:
            return False
        self._latest[uid] = status
        self._pending[uid] = (namespace, name, status)
        self._kick(uid)
        return True

    def delete_now(self, namespace: str, name: str, uid: str) -> None:
        """Schedule the pod's deletion (grace 0, UID precondition) after its pending status write."""
        if uid in self._gone:
            return
        self._deletions[uid] = (namespace, name)
        self._kick(uid)

    def latest(self, uid: str) -> Obj | None:
        """The last status a worker gave for pod ``uid``, written or not."""
        return self._latest.get(uid)

    def forget(self, uid: str) -> None:
        """The pod is gone for good: drop what is kept of it (a write in flight ends on its own)."""
        self._latest.pop(uid, None)
        self._pending.pop(uid, None)
        self._deletions.pop(uid, None)
        self._gone.discard(uid)

    async def flush(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the writes in flight (at stop), then cancel what is left."""
        tasks = list(self._tasks.values())
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    def _kick(self, uid: str) -> None:
        if uid not in self._tasks:
            self._tasks[uid] = asyncio.get_running_loop().create_task(self._drain(uid), name=f"pod status {uid}")

    async def _drain(self, uid: str) -> None:
        """Write the newest pending status, then the deletion, until nothing is left for this pod."""
        backoff = Backoff()
        try:
            while uid not in self._gone:
                if uid in self._pending:
                    namespace, name, status = self._pending.pop(uid)
                    done = await self._attempt(uid, self._patch(namespace, name, uid, status))
                    if not done:
                        self._pending.setdefault(uid, (namespace, name, status))
                elif uid in self._deletions:
                    namespace, name = self._deletions.pop(uid)
                    done = await self._attempt(uid, self._delete(namespace, name, uid))
                    if not done:
                        self._deletions.setdefault(uid, (namespace, name))
                else:
                    return
                if done:
                    backoff.reset()
                else:
                    await backoff.sleep()
        finally:
            self._tasks.pop(uid, None)

    async def _attempt(self, uid: str, call: Awaitable[None]) -> bool:
        """Run one write; True when it is done (or moot: the pod is gone), False to retry it."""
        try:
            await call
        except ApiStatusError as err:
            if err.code in (404, 409):  # gone, or the name now belongs to another pod (UID precondition)
                self._gone.add(uid)
                return True
            log.warning("pod %s: status manager: %s", uid, err)
            return False
        except TRANSPORT_ERRORS as err:
            log.warning("pod %s: status manager: %s", uid, err)
            return False
        return True

    async def _patch(self, namespace: str, name: str, uid: str, status: Obj) -> None:
        await self._api.request(
            "PATCH",
            _pod_path(namespace, name) + "/status",
            body=status_patch(uid, status),
            content_type=STRATEGIC_MERGE,
        )

    async def _delete(self, namespace: str, name: str, uid: str) -> None:
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        await self._api.request("DELETE", _pod_path(namespace, name), body=options)
        self._gone.add(uid)
