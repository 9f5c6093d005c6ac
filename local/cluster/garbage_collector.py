"""ownerReference-based garbage collection, as kube-controller-manager's garbage collector does it.

- Foreground: an owner marked with ``deletionTimestamp`` and the ``foregroundDeletion``
  finalizer gets its dependents deleted (themselves in foreground, so grandchildren go first);
  once none is left the finalizer is dropped and the store removes the owner. Every dependent
  is waited for, whether or not it sets ``blockOwnerDeletion`` (a loose reading of it).
- Background/orphans: a dependent none of whose owners exists any more is deleted.

Deleting a pod is graceful: the kubelet stops its processes, then removes it.
"""

from __future__ import annotations

from elastic_training.local.cluster.owners import delete_all, type_of_reference
from elastic_training.local.cluster.resources import RESOURCE_TYPES, ResourceType
from elastic_training.local.cluster.store import FOREGROUND_FINALIZER, Obj, Store, WatchEvent
from elastic_training.local.cluster.workqueue import WorkQueue

COMPONENT = "garbage-collector"

GcKey = tuple[str, ResourceType, str, str]  # (what to check, type, namespace, name)
FOREGROUND, ORPHAN = "foreground", "orphan"


class GarbageCollector:
    """Deletes dependents of deleted owners."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.queue: WorkQueue[GcKey] = WorkQueue(COMPONENT, self.reconcile)

    def start(self) -> None:
        """Subscribe to store events and check every stored object once."""
        self._store.add_listener(self._on_event)
        for rtype in RESOURCE_TYPES:
            for obj in self._store.list(rtype)[0]:
                self._check(rtype, obj)

    def _on_event(self, event: WatchEvent) -> None:
        obj = event.object
        meta = obj["metadata"]
        if event.type == "DELETED":
            for rtype, dependent in self._store.dependents(str(meta["uid"])):
                self.queue.enqueue((ORPHAN, rtype, _namespace(dependent), dependent["metadata"]["name"]))
            for ref in meta.get("ownerReferences") or []:
                owner_type = type_of_reference(ref)
                if owner_type is not None:  # a foreground owner may be waiting for this one
                    namespace = _namespace(obj) if owner_type.namespaced else ""
                    self.queue.enqueue((FOREGROUND, owner_type, namespace, str(ref.get("name", ""))))
            return
        self._check(event.rtype, obj)

    def _check(self, rtype: ResourceType, obj: Obj) -> None:
        meta = obj["metadata"]
        key = (rtype, _namespace(obj), str(meta["name"]))
        if meta.get("deletionTimestamp") and FOREGROUND_FINALIZER in (meta.get("finalizers") or []):
            self.queue.enqueue((FOREGROUND, *key))
        if meta.get("ownerReferences"):
            self.queue.enqueue((ORPHAN, *key))

    def reconcile(self, key: GcKey) -> None:
        kind, rtype, namespace, name = key
        obj = self._store.find(rtype, namespace, name)
        if obj is None:
            return
        if kind == FOREGROUND:
            self._resolve_foreground(rtype, obj)
        else:
            self._collect_orphan(rtype, obj)

    def _resolve_foreground(self, rtype: ResourceType, owner: Obj) -> None:
        meta = owner["metadata"]
        if not meta.get("deletionTimestamp") or FOREGROUND_FINALIZER not in (meta.get("finalizers") or []):
            return
        dependents = list(self._store.dependents(str(meta["uid"])))
        for dep_type, dependent in dependents:
            if not dependent["metadata"].get("deletionTimestamp"):
                delete_all(self._store, dep_type, [dependent], "Foreground")
        if any(self._store.find(t, _namespace(d), d["metadata"]["name"]) is not None for t, d in dependents):
            return  # each dependent's DELETED event brings us back

        def drop_finalizer(obj: Obj) -> None:
            obj["metadata"]["finalizers"] = [f for f in obj["metadata"]["finalizers"] if f != FOREGROUND_FINALIZER]

        self._store.mutate(rtype, _namespace(owner), meta["name"], drop_finalizer)

    def _collect_orphan(self, rtype: ResourceType, obj: Obj) -> None:
        refs = obj["metadata"].get("ownerReferences") or []
        if not refs or obj["metadata"].get("deletionTimestamp"):
            return
        if any(self._store.uid_exists(str(ref.get("uid", ""))) for ref in refs):
            return
        delete_all(self._store, rtype, [obj], "Background")


def _namespace(obj: Obj) -> str:
    return str(obj["metadata"].get("namespace", ""))
