"""One list+watch per connection, namespace and kind in a triggerer process, shared by every trigger in it.

Airflow's triggerer runs all the triggers of a process as tasks of one asyncio event loop
(apache/airflow ``airflow-core/src/airflow/jobs/triggerer_job_runner.py``: ``TriggerRunner.run`` is
``asyncio.run(self.arun())``, ``create_triggers`` makes one task per trigger and ``cancel_triggers`` cancels it).
So a registry per running loop can hold, for each (connection, namespace, kind), a single list+watch through the
hook (its ``watch_*`` methods: resume from the last resourceVersion, relist on ``410 Gone``, bookmarks, backoff,
giving up after repeated refusals) and an index of what it holds, and hand each trigger only its own JobSet's
objects: JobSets by name, Jobs and pods by their ``jobset.sigs.k8s.io/jobset-name`` label, Kueue Workloads by their
``kueue.x-k8s.io/job-uid`` label. A thousand triggers then hold four streams, not four thousand.

This is client-go's shared informer (``tools/cache/shared_informer.go``): one reflector per resource feeding an
indexed store; a handler added to a running informer is first given what the store holds; handlers are removed
when done. Unlike a controller's informer, a watch here lives only while someone subscribes: the last subscriber
to leave stops it, as a trigger ends with its deferral.

A subscription yields what a hook's watch yields, narrowed to its JobSet: ``("SYNC", {"items": [...]})`` when it
joins a listed watch and after every relist, then ``(type, object)`` per change. A watch that ends (a resource
the cluster does not serve) ends every subscription; one that gives up (refused access) raises its error in every
subscription, and the next subscriber starts a new one. :meth:`SharedWatches.subscribers` counts each open
watch's subscriptions and :meth:`SharedWatches.synced` names those whose list is done (client-go's
``HasSynced``), read-only views for whoever runs the loop: how many streams it holds, and whether a watch is stuck
listing.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from elastic_training.operators.constants import LABEL_JOBSET_NAME, LABEL_KUEUE_JOB_UID

if TYPE_CHECKING:
    from elastic_training.operators.hooks import AsyncJobSetHook

__all__ = ["SharedWatches", "WatchKey", "WatchKind", "shared_watches"]

Obj = dict[str, Any]
Item = tuple[str, Obj]
HookFactory = Callable[[str], Awaitable["AsyncJobSetHook"]]


class WatchKind(StrEnum):
    """What a shared watch lists and watches in its namespace."""

    JOBSETS = "jobsets"  # every JobSet; routed by name
    JOBS = "jobs"  # Jobs with a jobset-name label; routed by it
    PODS = "pods"  # pods with a jobset-name label; routed by it
    WORKLOADS = "workloads"  # Kueue Workloads with a job-uid label; routed by it (the JobSet's uid)


@dataclass(frozen=True)
class WatchKey:
    """One shared watch: a connection's view of one kind in one namespace."""

    conn_id: str
    namespace: str
    kind: WatchKind


def _route(kind: WatchKind, obj: Obj) -> str:
    """The subscription key an object belongs to: its name (JobSets) or its owner's label."""
    meta = obj.get("metadata") or {}
    if kind is WatchKind.JOBSETS:
        return str(meta.get("name") or "")
    label = LABEL_KUEUE_JOB_UID if kind is WatchKind.WORKLOADS else LABEL_JOBSET_NAME
    return str((meta.get("labels") or {}).get(label) or "")


def _identity(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")


def _stream(hook: AsyncJobSetHook, key: WatchKey) -> AsyncIterator[Item]:
    """The hook's list+watch for a key; the label selectors ask only for what can be routed (the label exists)."""
    if key.kind is WatchKind.JOBSETS:
        return hook.watch_jobsets(key.namespace)
    if key.kind is WatchKind.JOBS:
        return hook.watch_jobs(key.namespace, LABEL_JOBSET_NAME)
    if key.kind is WatchKind.PODS:
        return hook.watch_pods(key.namespace, LABEL_JOBSET_NAME)
    return hook.watch_workloads(key.namespace, LABEL_KUEUE_JOB_UID)


async def _new_hook(conn_id: str) -> AsyncJobSetHook:
    # The Kubernetes clients take seconds to import; a worker thread does it, off the triggerer's loop.
    hooks = await asyncio.to_thread(importlib.import_module, "elastic_training.operators.hooks")
    hook: AsyncJobSetHook = hooks.AsyncJobSetHook(conn_id=conn_id)
    return hook


_END = object()  # the watch ended: every subscription ends


class _Subscriber:
    __slots__ = ("queue", "value")

    def __init__(self, value: str) -> None:
        self.value = value
        self.queue: asyncio.Queue[Any] = asyncio.Queue()


class _SharedWatch:
    """One list+watch, its objects indexed by subscription key, and the subscribers of each key."""

    def __init__(self, registry: SharedWatches, key: WatchKey) -> None:
        self.registry = registry
        self.key = key
        self.objects: dict[str, dict[str, Obj]] = {}  # subscription key -> identity -> object
        self.routes: dict[str, str] = {}  # identity -> subscription key
        self.subscribers: dict[str, set[_Subscriber]] = {}
        self.synced = False
        self.task = asyncio.create_task(self._run(), name=f"shared watch {key.kind} in {key.namespace}")

    def add(self, subscriber: _Subscriber) -> None:
        self.subscribers.setdefault(subscriber.value, set()).add(subscriber)
        if self.synced:  # a late joiner gets what the watch holds, as a list would have given it
            subscriber.queue.put_nowait(("SYNC", self._snapshot(subscriber.value)))

    def remove(self, subscriber: _Subscriber) -> None:
        same = self.subscribers.get(subscriber.value)
        if same is not None:
            same.discard(subscriber)
            if not same:
                del self.subscribers[subscriber.value]
        if not self.subscribers:
            self.registry.forget(self)
            self.task.cancel()

    async def _run(self) -> None:
        hook: AsyncJobSetHook | None = None
        try:
            hook = await self.registry.hook_factory(self.key.conn_id)
            async for kind, obj in _stream(hook, self.key):
                if kind == "SYNC":
                    self._relisted(obj.get("items") or [])
                else:
                    self._changed(kind, obj)
            self._end(_END)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the watch gave up (a refusal repeated): every subscriber ends with it
            self._end(error)
        finally:
            self.registry.forget(self)
            if hook is not None:
                with contextlib.suppress(Exception):
                    await hook.close()

    def _relisted(self, items: list[Obj]) -> None:
        self.objects.clear()
        self.routes.clear()
        for obj in items:
            if isinstance(obj, dict):
                self._keep(obj)
        self.synced = True
        for value, subscribers in self.subscribers.items():
            snapshot = self._snapshot(value)
            for subscriber in subscribers:
                subscriber.queue.put_nowait(("SYNC", snapshot))

    def _changed(self, kind: str, obj: Obj) -> None:
        identity = _identity(obj)
        before = self.routes.pop(identity, None)
        if before is not None:
            held = self.objects.get(before, {})
            held.pop(identity, None)
            if not held:
                self.objects.pop(before, None)
        value = _route(self.key.kind, obj)
        if before is not None and before != value:  # relabelled away: gone for the subscribers it belonged to
            self._deliver(before, ("DELETED", obj))
        if kind != "DELETED":
            self._keep(obj)
        self._deliver(value, (kind, obj))

    def _keep(self, obj: Obj) -> None:
        value, identity = _route(self.key.kind, obj), _identity(obj)
        self.objects.setdefault(value, {})[identity] = obj
        self.routes[identity] = value

    def _deliver(self, value: str, item: Item) -> None:
        for subscriber in self.subscribers.get(value, ()):
            subscriber.queue.put_nowait(item)

    def _snapshot(self, value: str) -> Obj:
        return {"items": list(self.objects.get(value, {}).values())}

    def _end(self, outcome: object) -> None:
        for subscribers in self.subscribers.values():
            for subscriber in subscribers:
                subscriber.queue.put_nowait(outcome)


class SharedWatches:
    """The shared watches of one event loop (see :func:`shared_watches`)."""

    def __init__(self, hook_factory: HookFactory = _new_hook) -> None:
        self.hook_factory = hook_factory
        self._watches: dict[WatchKey, _SharedWatch] = {}

    async def subscribe(self, key: WatchKey, value: str) -> AsyncIterator[Item]:
        """``key``'s objects that belong to ``value`` (a JobSet's name, or its uid for Workloads), as a watch gives
        them; opens the watch if no one holds it, and closes it when the last subscriber leaves."""
        watch = self._watches.get(key)
        if watch is None:
            watch = self._watches[key] = _SharedWatch(self, key)
        subscriber = _Subscriber(value)
        watch.add(subscriber)
        try:
            while True:
                item = await subscriber.queue.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            watch.remove(subscriber)

    def forget(self, watch: _SharedWatch) -> None:
        """Drop a watch that stopped or is stopping: the next subscriber opens a new one."""
        if self._watches.get(watch.key) is watch:
            del self._watches[watch.key]

    def subscribers(self) -> dict[WatchKey, int]:
        """How many subscriptions each open watch serves."""
        return {key: sum(map(len, w.subscribers.values())) for key, w in self._watches.items()}

    def synced(self) -> set[WatchKey]:
        """The open watches whose list is done (client-go's ``HasSynced``): each of their subscriptions has been
        given what the watch holds (its ``SYNC``, ahead of any later change), so nothing that happens from now on
        misses a subscriber. An open watch not in it is still listing (an API server slow to answer, or refusing).
        """
        return {key for key, w in self._watches.items() if w.synced}


_REGISTRIES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SharedWatches] = weakref.WeakKeyDictionary()


def shared_watches() -> SharedWatches:
    """The running event loop's shared watches (the triggerer's loop: one per triggerer process)."""
    loop = asyncio.get_running_loop()
    registry = _REGISTRIES.get(loop)
    if registry is None:
        registry = _REGISTRIES[loop] = SharedWatches()
    return registry
