"""The local cluster's object store: what etcd plus the API server's registry do, in memory.

One store serves every resource type. Every write takes the next cluster-wide resourceVersion
and appends a watch event to a bounded history; a watch that asks to start before the oldest
kept event gets ``410 Gone``, as the real API server does after compaction.

The store is used from a single asyncio event loop (the API handlers, the controllers and the
kubelet all run on it), so its methods are synchronous and need no locks; watchers receive
events through bounded per-watch queues (:class:`Watch`). Code on other threads must hop onto the loop.

Creation follows the API server's create path for every caller, API request or in-process
controller alike: the namespace must exist and not be terminating (NamespaceLifecycle
admission), then defaults, ``status`` reset and validation (:mod:`local.cluster.strategy`).

Deletion follows ``genericregistry.Store.Delete`` and ``rest.BeforeDelete``:
- pods delete gracefully: ``deletionTimestamp`` (now + grace) and ``deletionGracePeriodSeconds``
  (the request's, else the pod's ``terminationGracePeriodSeconds``; 0 for a pod not yet scheduled
  or already terminal); the pod stays, and accepts writes, until the kubelet has stopped every
  container and deletes it with grace 0. A later delete may only shorten the grace period;
- any object with ``metadata.finalizers`` stays, marked with ``deletionTimestamp`` and grace 0,
  whatever grace period was asked for, until an update empties its finalizers;
- an update removes an object only when it empties the finalizers of an object being deleted whose
  ``deletionGracePeriodSeconds`` is 0 or unset (``ShouldDeleteDuringUpdate``); a namespace also
  needs its ``spec.finalizers`` empty;
- ``propagationPolicy=Foreground`` adds the ``foregroundDeletion`` finalizer (when there are
  dependents); the garbage collector deletes them, then drops it. ``Orphan`` strips the owner
  reference from dependents; ``Background`` (the default here for every type) removes the owner
  and leaves dependents to the garbage collector;
- a namespace turns ``Terminating`` and keeps its ``kubernetes`` spec finalizer until the
  namespace controller has deleted everything in it.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import copy
import secrets
import uuid
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from elastic_training.local.cluster.resources import (
    NAMESPACES,
    PODS,
    ApiError,
    ResourceType,
    already_exists,
    bad_request,
    conflict,
    gone,
    invalid,
    not_found,
)
from elastic_training.local.cluster.strategy import after_system_fields, prepare_for_create
from elastic_training.local.cluster.validation import validate

Obj = dict[str, Any]
Key = tuple[ResourceType, str, str]  # (type, namespace or "", name)

FOREGROUND_FINALIZER = "foregroundDeletion"
ORPHAN_FINALIZER = "orphan"
DEFAULT_NAMESPACE = "default"
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the API server's generateName alphabet
# Undelivered events a watch may hold before it is ended; upstream's cacher sizes its per-watcher
# channel between 10 and 1000 (``watchCache.suggestedWatchChannelSize``).
DEFAULT_WATCH_QUEUE_LIMIT = 1000


def now_rfc3339(offset_seconds: float = 0.0) -> str:
    """The current time (plus ``offset_seconds``) as the API server writes it in metadata (seconds, UTC)."""
    return (datetime.now(UTC) + timedelta(seconds=offset_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _shift_rfc3339(stamp: str, seconds: float) -> str:
    try:
        moment = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        moment = datetime.now(UTC)
    return (moment + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class WatchEvent:
    """One change to one object, as a watch stream carries it."""

    type: str  # ADDED, MODIFIED, DELETED
    rtype: ResourceType
    object: Obj
    resource_version: int
    old_object: Obj | None = None  # the object before a MODIFIED event (watch selectors need it)
    previous_version: str | None = None  # the object's resourceVersion before this event

    @property
    def namespace(self) -> str:
        return str(self.object.get("metadata", {}).get("namespace", ""))


class WatchEnd(StrEnum):
    """Why the store ended a watch."""

    EXPIRED = "expired"  # fault injection or shutdown
    TOO_SLOW = "too slow"  # its queue of undelivered events reached the limit


class Watch:
    """A live subscription to the events of one resource type (in one namespace, or all).

    Events wait in a bounded queue: the store ends a watch whose queue is full instead of
    letting it grow, as the API server's cacher terminates a watcher that cannot keep up
    (``cacheWatcher.add`` in ``staging/src/k8s.io/apiserver/pkg/storage/cacher``); the
    client then resumes from the last resourceVersion it saw, or relists.
    """

    def __init__(
        self, store: Store, rtype: ResourceType, namespace: str | None, replay: list[WatchEvent], limit: int
    ) -> None:
        self._store = store
        self.rtype = rtype
        self.namespace = namespace
        self._replay = replay  # history is bounded already; replay is not counted against ``limit``
        self._pending: deque[WatchEvent] = deque()
        self._limit = limit
        self._wake = asyncio.Event()
        self.ended: WatchEnd | None = None
        if replay:
            self._wake.set()

    def deliver(self, event: WatchEvent) -> bool:
        """Queue ``event``; False (and nothing queued) when the queue is full."""
        if len(self._pending) >= self._limit:
            return False
        self._pending.append(event)
        self._wake.set()
        return True

    def end(self, reason: WatchEnd) -> None:
        """Stop the watch; undelivered events of a watch that fell behind are dropped, as upstream."""
        if self.ended is None:
            self.ended = reason
        if reason is WatchEnd.TOO_SLOW:
            self._replay = []
            self._pending.clear()
        self._wake.set()

    async def wait(self, timeout: float | None = None) -> None:
        """Return once events are queued, the watch has ended, or ``timeout`` seconds passed."""
        # asyncio.timeout, not wait_for: Python 3.11's wait_for drops a cancellation that comes in the same turn as
        # the wake (CPython gh-86296), and a cancelled watch would serve on.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._wake.wait()

    def take(self) -> list[WatchEvent]:
        """Every queued event, oldest first, and clear the queue."""
        events = self._replay + list(self._pending)
        self._replay = []
        self._pending.clear()
        if self.ended is None:
            self._wake.clear()
        return events

    def close(self) -> None:
        """Unsubscribe (idempotent)."""
        self._store.unwatch(self)


class Store:
    """In-memory objects of every served type, with resourceVersions and a bounded event history."""

    def __init__(self, history_limit: int = 1000, watch_queue_limit: int = DEFAULT_WATCH_QUEUE_LIMIT) -> None:
        if history_limit < 1:
            raise ValueError("history_limit must be at least 1")
        if watch_queue_limit < 1:
            raise ValueError("watch_queue_limit must be at least 1")
        self.watch_queue_limit = watch_queue_limit
        self._objects: dict[Key, Obj] = {}
        # Indexes kept beside _objects (only create adds a key, only remove drops one): the keys of each type, so
        # that a list of one type does not scan the others (thousands of Events, Jobs and Workloads), and the uids.
        self._keys_of_type: defaultdict[ResourceType, dict[Key, None]] = defaultdict(dict)
        self._uids: set[str] = set()
        self._resource_version = 0
        self._history: deque[WatchEvent] = deque(maxlen=history_limit)
        # Watches by (type, namespace or None for all): an event reaches only those that can want it.
        self._watches: defaultdict[tuple[ResourceType, str | None], set[Watch]] = defaultdict(set)
        self._listeners: list[Callable[[WatchEvent], None]] = []
        self._admission: list[Callable[[ResourceType, Obj], None]] = []
        self._create_namespace(DEFAULT_NAMESPACE)

    # -- reading -----------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._resource_version

    def get(self, rtype: ResourceType, namespace: str, name: str) -> Obj:
        """A copy of one object; ``ApiError`` 404 when it does not exist."""
        obj = self._objects.get(self._key(rtype, namespace, name))
        if obj is None:
            raise not_found(rtype, name)
        return copy.deepcopy(obj)

    def find(self, rtype: ResourceType, namespace: str, name: str) -> Obj | None:
        """A copy of one object, or None."""
        obj = self._objects.get(self._key(rtype, namespace, name))
        return None if obj is None else copy.deepcopy(obj)

    def view(
        self, rtype: ResourceType, namespace: str | None = None, where: Callable[[Obj], bool] | None = None
    ) -> tuple[list[Obj], int]:
        """Like :meth:`list` but the stored objects themselves, not copies: read-only, and only for
        use before the next write (the API serialises them at once, with no await in between)."""
        keys = self._keys_of_type.get(rtype, {})
        chosen = [key for key in keys if namespace is None or not rtype.namespaced or key[1] == namespace]
        items = [self._objects[key] for key in sorted(chosen, key=lambda key: (key[1], key[2]))]
        if where is not None:
            items = [obj for obj in items if where(obj)]
        return items, self._resource_version

    def view_at(self, rtype: ResourceType, namespace: str | None, resource_version: int) -> list[Obj]:
        """The objects of a type (in one namespace, or all) as they were at ``resource_version``.

        What etcd's MVCC gives the API server for a continued list: the current objects with
        every later event undone from the history. Read-only, like :meth:`view`. ``ApiError``
        410 once the history no longer reaches back to ``resource_version`` (etcd's compaction).
        """
        if resource_version > self._resource_version:
            raise bad_request(f"resourceVersion {resource_version} is newer than the store's")
        later: list[WatchEvent] = []
        for event in reversed(self._history):
            if event.resource_version <= resource_version:
                break
            later.append(event)
        oldest = later[-1].resource_version if later else self._resource_version + 1
        if oldest != resource_version + 1:
            raise gone(resource_version, oldest)
        scope = namespace if rtype.namespaced else None
        current, _ = self.view(rtype, scope)
        objects = {(obj["metadata"].get("namespace", ""), obj["metadata"]["name"]): obj for obj in current}
        for event in later:  # newest first
            if event.rtype != rtype or (scope is not None and event.namespace != scope):
                continue
            key = (event.namespace if rtype.namespaced else "", event.object["metadata"]["name"])
            if event.type == "ADDED":
                objects.pop(key, None)
            elif event.type == "DELETED":
                meta = {**event.object["metadata"], "resourceVersion": event.previous_version}
                objects[key] = {**event.object, "metadata": meta}
            elif event.old_object is not None:
                objects[key] = event.old_object
            else:
                raise gone(resource_version, event.resource_version + 1)
        return [objects[key] for key in sorted(objects)]

    def list(
        self, rtype: ResourceType, namespace: str | None = None, where: Callable[[Obj], bool] | None = None
    ) -> tuple[list[Obj], int]:
        """Copies of every object of a type (in one namespace, or all; only those ``where`` accepts),
        and the list's resourceVersion."""
        items, version = self.view(rtype, namespace, where)
        return [copy.deepcopy(obj) for obj in items], version

    def dependents(self, owner_uid: str) -> Iterator[tuple[ResourceType, Obj]]:
        """Objects whose ownerReferences name ``owner_uid`` (copies)."""
        for (rtype, _, _), obj in list(self._objects.items()):
            refs = obj.get("metadata", {}).get("ownerReferences") or []
            if any(ref.get("uid") == owner_uid for ref in refs):
                yield rtype, copy.deepcopy(obj)

    def uid_exists(self, uid: str) -> bool:
        return uid in self._uids

    # -- writing -----------------------------------------------------------------------------

    def create(self, rtype: ResourceType, obj: Obj, namespace: str | None = None) -> Obj:
        """Store a new object as the API server's create does; returns a copy.

        Every caller gets the same path (the HTTP API and the in-process controllers): namespace
        admission, defaults and ``status`` reset, system metadata, validation (422), then 409 when
        the name is taken.
        """
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if rtype.namespaced:
            ns = namespace or meta.get("namespace") or DEFAULT_NAMESPACE
            if meta.get("namespace") not in (None, "", ns):
                raise bad_request(
                    f"the namespace of the provided object ({meta['namespace']}) does not match "
                    f"the namespace sent on the request ({ns})"
                )
            meta["namespace"] = ns
            self._admit_create(rtype, ns, str(meta.get("name") or ""))
        else:
            ns = ""
            meta.pop("namespace", None)
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise ApiError(
                    422,
                    "Invalid",
                    f"{rtype.kind}.{rtype.group or 'core'} is invalid: metadata.name: "
                    "Required value: name or generateName is required",
                )
            meta["name"] = self._generate_name(rtype, ns, prefix)
        prepare_for_create(rtype, obj)
        obj["apiVersion"] = rtype.api_version
        obj["kind"] = rtype.kind
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        meta["generation"] = 1
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
            meta.pop(field, None)
        after_system_fields(rtype, obj)
        for admit in self._admission:
            admit(rtype, obj)
        causes = validate(rtype, obj)
        if causes:
            raise invalid(rtype, str(meta["name"]), causes)
        key = self._key(rtype, ns, meta["name"])
        existing = self._objects.get(key)
        if existing is not None:
            error = already_exists(rtype, meta["name"])
            if self._is_deleting(existing):  # genericregistry.Store.Create says why the name is still taken
                error.message = f"object is being deleted: {error.message}"
            raise error
        self._objects[key] = obj
        self._keys_of_type[rtype][key] = None
        self._uids.add(str(meta.get("uid")))
        return self._record("ADDED", rtype, obj)

    def _admit_create(self, rtype: ResourceType, namespace: str, name: str) -> None:
        """The NamespaceLifecycle admission plugin: no content in a missing or terminating namespace."""
        owner = self._objects.get(self._key(NAMESPACES, "", namespace))
        if owner is None:
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found', "namespaces", namespace)
        if owner.get("status", {}).get("phase") == "Terminating" or self._is_deleting(owner):
            raise ApiError(
                403,
                "Forbidden",
                f'{rtype} "{name}" is forbidden: unable to create new content in namespace {namespace} '
                "because it is being terminated",
                rtype.plural,
                name,
                rtype.group,
            )

    def update(
        self, rtype: ResourceType, obj: Obj, *, subresource: str | None = None, namespace: str | None = None
    ) -> Obj:
        """Replace an object (or only its ``status``), with optimistic concurrency on resourceVersion.

        As on the real API server, a write to the main resource keeps the stored ``status`` of
        types that have a status subresource, and a write to ``status`` changes nothing else.
        """
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        ns = (namespace or meta.get("namespace") or DEFAULT_NAMESPACE) if rtype.namespaced else ""
        key = self._key(rtype, ns, name)
        current = self._objects.get(key)
        if current is None:
            raise not_found(rtype, name)
        sent_version = meta.get("resourceVersion")
        if sent_version not in (None, "") and str(sent_version) != current["metadata"]["resourceVersion"]:
            raise conflict(rtype, name)
        if subresource == "status":
            updated = copy.deepcopy(current)
            updated["status"] = copy.deepcopy(obj.get("status", {}))
        elif subresource == "finalize" and rtype == NAMESPACES:
            # namespaces/finalize changes nothing but spec.finalizers (the namespace controller's call).
            updated = copy.deepcopy(current)
            updated.setdefault("spec", {})["finalizers"] = list((obj.get("spec") or {}).get("finalizers") or [])
        elif subresource is None:
            updated = copy.deepcopy(obj)
            owned_fields = ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds")
            for owned in (*owned_fields, "namespace"):
                if owned in current["metadata"]:
                    updated["metadata"][owned] = current["metadata"][owned]
                else:
                    updated["metadata"].pop(owned, None)
            updated["metadata"]["name"] = name
            updated["apiVersion"] = rtype.api_version
            updated["kind"] = rtype.kind
            if rtype.has_status:
                if "status" in current:
                    updated["status"] = copy.deepcopy(current["status"])
                else:
                    updated.pop("status", None)
            if updated.get("spec") != current.get("spec"):
                updated["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
        else:
            raise bad_request(f"unknown subresource {subresource!r}")
        if updated == current:
            return copy.deepcopy(current)  # a no-op write does not bump resourceVersion
        if self._delete_during_update(rtype, current, updated):
            # genericregistry.Store.Update aborts the write and deletes the stored object; the
            # client gets the object it sent back.
            removed = self.remove(rtype, ns, name)
            updated["metadata"]["resourceVersion"] = removed["metadata"]["resourceVersion"]
            return updated
        self._objects[key] = updated
        return self._record("MODIFIED", rtype, updated, old=current)

    def mutate(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        change: Callable[[Obj], None],
        *,
        subresource: str | None = None,
    ) -> Obj:
        """Read-modify-write for in-process controllers: ``change`` edits a copy in place."""
        obj = self.get(rtype, namespace, name)
        change(obj)
        obj["metadata"].pop("resourceVersion", None)
        return self.update(rtype, obj, subresource=subresource, namespace=namespace)

    def delete(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        *,
        propagation_policy: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> Obj:
        """Delete an object following the API server's rules (see the module docstring).

        Returns the object as the API returns it: the final state when it is gone, or the
        object marked with ``deletionTimestamp`` when deletion continues in the background.
        Use :meth:`find` afterwards to tell which.
        """
        key = self._key(rtype, namespace, name)
        current = self._objects.get(key)
        if current is None:
            raise not_found(rtype, name)
        policy = propagation_policy or "Background"
        if policy not in ("Foreground", "Background", "Orphan"):
            raise bad_request(f"unknown propagationPolicy {policy!r}: want Foreground, Background or Orphan")
        if rtype == NAMESPACES:
            return self._delete_namespace(key)
        meta = current["metadata"]
        graceful, pending, grace = self._before_delete(rtype, current, grace_period_seconds)
        if pending:  # finalizers and propagation cannot change once a graceful deletion is under way
            return copy.deepcopy(current)
        if policy == "Orphan":
            self._orphan_dependents(meta["uid"])
        finalizers = list(meta.get("finalizers") or [])
        if (
            policy == "Foreground"
            and FOREGROUND_FINALIZER not in finalizers
            and any(True for _ in self.dependents(meta["uid"]))
        ):
            finalizers.append(FOREGROUND_FINALIZER)
        if (graceful and grace > 0) or finalizers:
            return self._mark_deleting(rtype, key, grace if graceful else 0, finalizers, graceful=graceful)
        return self.remove(rtype, namespace, name)

    def remove(self, rtype: ResourceType, namespace: str, name: str) -> Obj:
        """Take an object out of the store for good and emit ``DELETED`` (kubelet and GC use this)."""
        key = self._key(rtype, namespace, name)
        current = self._objects.pop(key, None)
        if current is None:
            raise not_found(rtype, name)
        self._keys_of_type[rtype].pop(key, None)
        self._uids.discard(str(current["metadata"].get("uid")))
        return self._record("DELETED", rtype, current)

    # -- watching ----------------------------------------------------------------------------

    def watch(self, rtype: ResourceType, namespace: str | None, resource_version: int | None) -> Watch:
        """Subscribe to the events of ``rtype`` (in ``namespace``, or all) after ``resource_version``.

        ``None`` (or 0) starts at "now" with no replay: the caller lists first, as informers
        do, or asks the HTTP layer for synthetic ADDED events. A version older than the
        kept history raises ``ApiError`` 410.
        """
        scope = namespace if rtype.namespaced else None
        replay: list[WatchEvent] = []
        if resource_version:
            oldest = self._history[0].resource_version if self._history else self._resource_version + 1
            if resource_version < oldest - 1 and resource_version < self._resource_version:
                raise gone(resource_version, oldest)
            replay = [
                event
                for event in self._history
                if event.resource_version > resource_version
                and event.rtype == rtype
                and (scope is None or event.namespace == scope)
            ]
        watch = Watch(self, rtype, scope, replay, self.watch_queue_limit)
        self._watches[(rtype, scope)].add(watch)
        return watch

    def unwatch(self, watch: Watch) -> None:
        """Forget ``watch``: it gets no more events (idempotent)."""
        key = (watch.rtype, watch.namespace)
        watches = self._watches.get(key)
        if watches is not None:
            watches.discard(watch)
            if not watches:
                del self._watches[key]

    def watch_count(self) -> int:
        """How many watches are open."""
        return sum(len(watches) for watches in self._watches.values())

    def expire_watches(self) -> int:
        """End every open watch (fault injection); returns how many were open."""
        count = self.watch_count()
        for watches in list(self._watches.values()):
            for watch in watches:
                watch.end(WatchEnd.EXPIRED)
        self._watches.clear()
        return count

    def compact(self) -> None:
        """Forget the event history, so any watch from an older version gets 410 (fault injection)."""
        self._history.clear()

    def add_admission(self, step: Callable[[ResourceType, Obj], None]) -> None:
        """Run ``step`` on every object being created, after defaults and before validation, as a
        mutating-then-validating admission webhook (it edits the object in place or raises ``ApiError``)."""
        self._admission.append(step)

    def add_listener(self, listener: Callable[[WatchEvent], None]) -> None:
        """Call ``listener`` synchronously on every event (controllers use this to enqueue work)."""
        self._listeners.append(listener)

    # -- internals ---------------------------------------------------------------------------

    def _key(self, rtype: ResourceType, namespace: str, name: str) -> Key:
        return (rtype, namespace if rtype.namespaced else "", name)

    def _next_version(self) -> int:
        self._resource_version += 1
        return self._resource_version

    def _record(self, event_type: str, rtype: ResourceType, obj: Obj, old: Obj | None = None) -> Obj:
        """Stamp the next resourceVersion and publish the event; ``old`` must no longer be in the store.

        A ``MODIFIED`` event must carry ``old``: :meth:`view_at` undoes it with that to serve a
        continued list, and a watch's field selector needs it to tell leaving from changing.
        """
        if event_type == "MODIFIED" and old is None:
            raise ValueError("a MODIFIED event needs the object it replaced")
        previous = obj["metadata"].get("resourceVersion")
        version = self._next_version()
        obj["metadata"]["resourceVersion"] = str(version)
        event = WatchEvent(event_type, rtype, copy.deepcopy(obj), version, old, previous)
        self._history.append(event)
        for watch in self._watchers_of(rtype, event.namespace):
            if not watch.deliver(event):
                watch.end(WatchEnd.TOO_SLOW)
                self.unwatch(watch)
        for listener in self._listeners:
            listener(event)
        return copy.deepcopy(obj)

    def _watchers_of(self, rtype: ResourceType, namespace: str) -> tuple[Watch, ...]:
        """The watches an event of ``rtype`` in ``namespace`` can concern (a copy, safe to unwatch from)."""
        watchers = tuple(self._watches.get((rtype, None), ()))
        if rtype.namespaced:
            watchers += tuple(self._watches.get((rtype, namespace), ()))
        return watchers

    def _generate_name(self, rtype: ResourceType, namespace: str, prefix: str) -> str:
        for _ in range(100):
            suffix = "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(5))
            name = f"{prefix[:58]}{suffix}"
            if self._key(rtype, namespace, name) not in self._objects:
                return name
        raise ApiError(500, "InternalError", f"could not generate a unique name for prefix {prefix!r}")

    def _create_namespace(self, name: str) -> None:
        self.create(NAMESPACES, {"metadata": {"name": name}})

    @staticmethod
    def _is_deleting(obj: Obj) -> bool:
        return bool(obj.get("metadata", {}).get("deletionTimestamp"))

    @staticmethod
    def _before_delete(rtype: ResourceType, obj: Obj, requested: int | None) -> tuple[bool, bool, int]:
        """``rest.BeforeDelete`` with the pod strategy's ``CheckGracefulDelete``: (graceful, pending, grace).

        Only pods delete gracefully here (as upstream among the served types). ``pending`` means a
        graceful deletion is already under way and the request does not shorten it.
        """
        if rtype != PODS:
            return False, False, 0
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            current = meta.get("deletionGracePeriodSeconds")
            if not current:
                return False, False, 0
            if requested is None or requested >= int(current):
                return False, True, int(current)
            return True, False, requested
        spec = obj.get("spec") or {}
        grace = requested if requested is not None else int(spec.get("terminationGracePeriodSeconds", 30))
        # pkg/registry/core/pod/strategy.go: an unscheduled or terminal pod has nothing to stop.
        if not spec.get("nodeName") or obj.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            grace = 0
        return True, False, grace

    @staticmethod
    def _delete_during_update(rtype: ResourceType, old: Obj, new: Obj) -> bool:
        """``ShouldDeleteDuringUpdate`` (plus the namespace store's check of ``spec.finalizers``)."""
        old_meta = old["metadata"]
        if new["metadata"].get("finalizers") or not old_meta.get("deletionTimestamp"):
            return False
        if old_meta.get("deletionGracePeriodSeconds"):
            return False
        return rtype != NAMESPACES or not (new.get("spec") or {}).get("finalizers")

    def _mark_deleting(
        self, rtype: ResourceType, key: Key, grace: int, finalizers: builtins.list[str], *, graceful: bool
    ) -> Obj:
        old = self._objects[key]
        obj = copy.deepcopy(old)
        meta = obj["metadata"]
        previous = meta.get("deletionTimestamp")
        if previous is None:
            meta["generation"] = int(meta.get("generation", 1)) + 1  # controllers see the deletion as a spec change
        if graceful:
            if previous and meta.get("deletionGracePeriodSeconds"):  # a shorter grace period moves the deadline
                meta["deletionTimestamp"] = _shift_rfc3339(previous, grace - int(meta["deletionGracePeriodSeconds"]))
            else:
                meta["deletionTimestamp"] = now_rfc3339(grace)  # BeforeDelete: now + grace
        elif previous is None or previous > now_rfc3339():  # markAsDeleting
            meta["deletionTimestamp"] = now_rfc3339()
        meta["deletionGracePeriodSeconds"] = grace
        if finalizers:
            meta["finalizers"] = finalizers
        if obj == old:
            return copy.deepcopy(old)
        self._objects[key] = obj
        return self._record("MODIFIED", rtype, obj, old=old)

    def _delete_namespace(self, key: Key) -> Obj:
        """pkg/registry/core/namespace/storage: mark it ``Terminating``; remove it only once finalized."""
        current = self._objects[key]
        finalizers = list(current["metadata"].get("finalizers") or [])
        if not (current.get("spec") or {}).get("finalizers") and not finalizers:
            return self.remove(NAMESPACES, "", key[2])
        obj = copy.deepcopy(current)
        meta = obj["metadata"]
        if not meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = now_rfc3339()
            meta["deletionGracePeriodSeconds"] = 0
        obj.setdefault("status", {})["phase"] = "Terminating"
        if obj == current:
            return copy.deepcopy(current)
        self._objects[key] = obj
        return self._record("MODIFIED", NAMESPACES, obj, old=current)

    def _orphan_dependents(self, owner_uid: str) -> None:
        for rtype, dependent in list(self.dependents(owner_uid)):
            meta = dependent["metadata"]
            meta["ownerReferences"] = [r for r in meta.get("ownerReferences", []) if r.get("uid") != owner_uid]
            key = self._key(rtype, meta.get("namespace", ""), meta["name"])
            old = self._objects[key]
            self._objects[key] = dependent
            self._record("MODIFIED", rtype, dependent, old=old)
