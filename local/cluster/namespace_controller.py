"""The namespace controller of the local cluster (kube-controller-manager's ``pkg/controller/namespace``).

A namespace deleted through the API turns ``Terminating`` (``deletionTimestamp``, ``status.phase``)
and keeps its ``kubernetes`` spec finalizer, and the API refuses new content in it (403). This
controller then does what ``namespaced_resources_deleter`` does:

- deletes every object in the namespace, type by type, with ``propagationPolicy: Background``;
  pods are deleted gracefully, so their processes get SIGTERM and their grace period;
- reports progress in the namespace's conditions (``NamespaceDeletionContentFailure``,
  ``NamespaceContentRemaining``, ``NamespaceFinalizersRemaining``, upstream's reasons);
- once nothing is left, removes its finalizer through ``namespaces/finalize``, which removes the
  namespace; a namespace created again under the same name starts empty.

It is woken by the namespace's own events and by any change to an object in a terminating
namespace (a pod going away, a finalizer dropped), never by polling.
"""

from __future__ import annotations

import copy
import logging

from elastic_training.local.cluster.conditions import set_condition
from elastic_training.local.cluster.resources import NAMESPACES, RESOURCE_TYPES, ApiError
from elastic_training.local.cluster.store import Obj, Store, WatchEvent
from elastic_training.local.cluster.strategy import NAMESPACE_FINALIZER
from elastic_training.local.cluster.workqueue import WorkQueue

COMPONENT = "namespace-controller"

log = logging.getLogger(__name__)

CONTENT_FAILURE = "NamespaceDeletionContentFailure"
CONTENT_REMAINING = "NamespaceContentRemaining"
FINALIZERS_REMAINING = "NamespaceFinalizersRemaining"


class NamespaceController:
    """Empties terminating namespaces, then finalizes them."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._terminating: set[str] = set()
        self.queue: WorkQueue[str] = WorkQueue(COMPONENT, self.reconcile)

    def start(self) -> None:
        """Subscribe to store events and queue every namespace already terminating."""
        self._store.add_listener(self._on_event)
        for namespace in self._store.list(NAMESPACES)[0]:
            self._observe_namespace(namespace, removed=False)

    def _on_event(self, event: WatchEvent) -> None:
        if event.rtype == NAMESPACES:
            self._observe_namespace(event.object, removed=event.type == "DELETED")
        elif event.namespace in self._terminating:
            self.queue.enqueue(event.namespace)

    def _observe_namespace(self, namespace: Obj, *, removed: bool) -> None:
        name = str(namespace["metadata"]["name"])
        if removed or not namespace["metadata"].get("deletionTimestamp"):
            self._terminating.discard(name)
            return
        self._terminating.add(name)
        self.queue.enqueue(name)

    def reconcile(self, name: str) -> None:
        namespace = self._store.find(NAMESPACES, "", name)
        if namespace is None or not namespace["metadata"].get("deletionTimestamp"):
            return
        failures: list[str] = []
        remaining: dict[str, int] = {}
        finalizers: dict[str, int] = {}
        for rtype in RESOURCE_TYPES:
            if not rtype.namespaced:
                continue
            for obj in self._store.list(rtype, name)[0]:
                meta = obj["metadata"]
                if not meta.get("deletionTimestamp"):
                    try:
                        self._store.delete(rtype, name, meta["name"], propagation_policy="Background")
                    except ApiError as err:
                        if err.code != 404:
                            failures.append(f"{rtype}/{meta['name']}: {err.message}")
            for obj in self._store.list(rtype, name)[0]:
                remaining[str(rtype)] = remaining.get(str(rtype), 0) + 1
                for finalizer in obj["metadata"].get("finalizers") or []:
                    finalizers[finalizer] = finalizers.get(finalizer, 0) + 1
        self._report(namespace, failures, remaining, finalizers)
        if failures:
            raise RuntimeError(f"namespace {name}: could not delete {'; '.join(failures)}")
        if remaining:
            return  # each removal (or dropped finalizer) in the namespace wakes us again
        spec_finalizers = (namespace.get("spec") or {}).get("finalizers") or []
        if NAMESPACE_FINALIZER in spec_finalizers:
            finalized = copy.deepcopy(namespace)
            finalized["spec"]["finalizers"] = [f for f in spec_finalizers if f != NAMESPACE_FINALIZER]
            self._store.update(NAMESPACES, finalized, subresource="finalize")

    def _report(
        self, namespace: Obj, failures: list[str], remaining: dict[str, int], finalizers: dict[str, int]
    ) -> None:
        """The conditions upstream's deleter sets on a terminating namespace (written only on change)."""
        status = copy.deepcopy(namespace.get("status") or {})
        conditions: list[Obj] = status.setdefault("conditions", [])
        changed = False
        if failures:
            changed |= set_condition(
                conditions, CONTENT_FAILURE, True, "ContentDeletionFailed", "Failed to delete all resource types"
            )
        else:
            changed |= set_condition(
                conditions,
                CONTENT_FAILURE,
                False,
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization",
            )
        if remaining:
            summary = ", ".join(f"{kind} has {count} resource instances" for kind, count in sorted(remaining.items()))
            changed |= set_condition(
                conditions, CONTENT_REMAINING, True, "SomeResourcesRemain", f"Some resources are remaining: {summary}"
            )
        else:
            changed |= set_condition(
                conditions, CONTENT_REMAINING, False, "ContentRemoved", "All content successfully removed"
            )
        if finalizers:
            summary = ", ".join(f"{name} in {count} resource instances" for name, count in sorted(finalizers.items()))
            changed |= set_condition(
                conditions,
                FINALIZERS_REMAINING,
                True,
                "SomeFinalizersRemain",
                f"Some content in the namespace has finalizers remaining: {summary}",
            )
        else:
            changed |= set_condition(
                conditions,
                FINALIZERS_REMAINING,
                False,
                "ContentHasNoFinalizers",
                "All content-preserving finalizers finished",
            )
        if not changed:
            return
        if not conditions:
            status.pop("conditions")
        name = namespace["metadata"]["name"]
        self._store.mutate(NAMESPACES, "", name, lambda o: o.__setitem__("status", status), subresource="status")
