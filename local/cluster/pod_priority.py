"""The API server's Priority admission plugin: a pod's ``priorityClassName`` resolved to ``spec.priority``.

Follows kubernetes ``plugin/pkg/admission/priority/admission.go`` (v1.33): a pod naming a PriorityClass
gets that class's ``value`` as ``spec.priority`` and its ``preemptionPolicy`` (default
``PreemptLowerPriority``); a class that does not exist is refused, 403 ``pods "<name>" is forbidden: no
PriorityClass with name <class> was found``; a pod naming none gets the ``globalDefault`` class (the lowest
if several), else priority 0. The built-in ``system-cluster-critical`` (2000000000) and
``system-node-critical`` (2000001000) always exist. Run as a store admission step on every pod create,
before JobSet's pod webhook (which labels a pod with its priority), as the API server runs built-in
admission before webhooks. Not checked: a pod that sets ``spec.priority`` itself (upstream refuses one
that disagrees with its class).
"""

from __future__ import annotations

from elastic_training.local.cluster.resources import PODS, PRIORITY_CLASSES, ApiError, ResourceType
from elastic_training.local.cluster.store import Obj, Store

SYSTEM_CLASSES = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}
DEFAULT_PREEMPTION_POLICY = "PreemptLowerPriority"


class PodPriority:
    """The admission step; ``admit`` edits the pod in place or raises the plugin's 403."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def admit(self, rtype: ResourceType, pod: Obj) -> None:
        if rtype != PODS:
            return
        spec = pod.setdefault("spec", {})
        name = str(spec.get("priorityClassName") or "")
        if name in SYSTEM_CLASSES:
            spec["priority"] = SYSTEM_CLASSES[name]
            spec.setdefault("preemptionPolicy", DEFAULT_PREEMPTION_POLICY)
            return
        if name:
            found = self._store.find(PRIORITY_CLASSES, "", name)
            if found is None:
                pod_name = pod.get("metadata", {}).get("name") or pod.get("metadata", {}).get("generateName", "")
                raise ApiError(
                    403,
                    "Forbidden",
                    f'pods "{pod_name}" is forbidden: no PriorityClass with name {name} was found',
                    "pods",
                    str(pod_name),
                )
        else:
            defaults = [pc for pc in self._store.view(PRIORITY_CLASSES)[0] if pc.get("globalDefault")]
            if not defaults:
                spec["priority"] = 0
                return
            found = min(defaults, key=lambda pc: int(pc.get("value", 0)))
            spec["priorityClassName"] = found["metadata"]["name"]
        spec["priority"] = int(found.get("value", 0))
        spec["preemptionPolicy"] = str(found.get("preemptionPolicy") or DEFAULT_PREEMPTION_POLICY)
