"""Kueue's API objects on the local API server: the defaults the CRDs apply and the checks their webhooks make.

Upstream (kubernetes-sigs/kueue v0.17.1): the CRDs' ``default`` markers in ``apis/kueue/v1beta2/
clusterqueue_types.go`` (``queueingStrategy: BestEffortFIFO``; ``preemption`` ``withinClusterQueue`` and
``reclaimWithinCohort`` ``Never``; ``stopPolicy: None``), ``localqueue_types.go`` (``stopPolicy: None``),
``workload_types.go`` (``active: true``, a podSet's ``name: main``); the validating webhooks in
``pkg/webhooks/{clusterqueue,workload}_webhook.go`` (a flavor's resources must be the group's
``coveredResources`` in order; a podSet's ``count`` is not negative); ``scheduling.k8s.io/v1``
PriorityClass's ``value`` is required (``pkg/apis/scheduling/validation``). Only the checks whose
violation the local Kueue would otherwise misread are made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from elastic_training.local.cluster.resources import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    PRIORITY_CLASSES,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
    Cause,
    ResourceType,
)

Obj = dict[str, Any]

QUEUEING_STRATEGIES = ("BestEffortFIFO", "StrictFIFO")
WITHIN_CLUSTER_QUEUE = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
STOP_POLICIES = ("None", "Hold", "HoldAndDrain")  # the CRDs' enum for spec.stopPolicy
_MAX_PRIORITY = 1_000_000_000  # PriorityClass: user classes above one billion are reserved for the system


def apply_defaults(rtype: ResourceType, obj: Obj) -> None:
    """The CRDs' defaults (the API server applies them when it decodes a custom resource)."""
    spec = obj.get("spec")
    if rtype == CLUSTER_QUEUES and isinstance(spec, dict):
        spec.setdefault("queueingStrategy", "BestEffortFIFO")
        spec.setdefault("stopPolicy", "None")
        preemption = spec.setdefault("preemption", {})
        if isinstance(preemption, dict):
            preemption.setdefault("withinClusterQueue", "Never")
            preemption.setdefault("reclaimWithinCohort", "Never")
    elif rtype == LOCAL_QUEUES and isinstance(spec, dict):
        spec.setdefault("stopPolicy", "None")
    elif rtype == WORKLOADS and isinstance(spec, dict):
        spec.setdefault("active", True)
        for pod_set in spec.get("podSets") or []:
            if isinstance(pod_set, dict):
                pod_set.setdefault("name", "main")


def _invalid(field: str, value: Any, why: str) -> Cause:
    return Cause(field, f"Invalid value: {value!r}: {why}")


def _required(field: str) -> Cause:
    return Cause(field, "Required value", "FieldValueRequired")


def _unsupported(field: str, value: Any, allowed: tuple[str, ...]) -> Cause:
    quoted = ", ".join(f'"{v}"' for v in allowed)
    return Cause(field, f'Unsupported value: "{value}": supported values: {quoted}', "FieldValueNotSupported")


def validate_cluster_queue(obj: Mapping[str, Any]) -> list[Cause]:
    spec = obj.get("spec") or {}
    causes: list[Cause] = []
    if spec.get("queueingStrategy") not in QUEUEING_STRATEGIES:
        causes.append(_unsupported("spec.queueingStrategy", spec.get("queueingStrategy"), QUEUEING_STRATEGIES))
    within = (spec.get("preemption") or {}).get("withinClusterQueue")
    if within not in WITHIN_CLUSTER_QUEUE:
        causes.append(_unsupported("spec.preemption.withinClusterQueue", within, WITHIN_CLUSTER_QUEUE))
    causes.extend(_stop_policy(spec))
    seen: set[str] = set()
    for g, group in enumerate(spec.get("resourceGroups") or []):
        covered = list(group.get("coveredResources") or [])
        for resource in covered:
            if resource in seen:
                causes.append(
                    _invalid(
                        f"spec.resourceGroups[{g}].coveredResources",
                        resource,
                        "a resource can be in only one resource group",
                    )
                )
            seen.add(resource)
        for f, flavor in enumerate(group.get("flavors") or []):
            where = f"spec.resourceGroups[{g}].flavors[{f}]"
            if not flavor.get("name"):
                causes.append(_required(f"{where}.name"))
            names = [r.get("name") for r in flavor.get("resources") or []]
            if names != covered:
                causes.append(
                    _invalid(
                        f"{where}.resources",
                        names,
                        "flavor should contain the same resources as coveredResources, in order",
                    )
                )
    return causes


def _stop_policy(spec: Mapping[str, Any]) -> list[Cause]:
    policy = spec.get("stopPolicy", "None")
    return [] if policy in STOP_POLICIES else [_unsupported("spec.stopPolicy", policy, STOP_POLICIES)]


def validate_local_queue(obj: Mapping[str, Any]) -> list[Cause]:
    spec = obj.get("spec") or {}
    if not spec.get("clusterQueue"):
        return [_required("spec.clusterQueue")]
    return _stop_policy(spec)


def validate_workload(obj: Mapping[str, Any]) -> list[Cause]:
    pod_sets = (obj.get("spec") or {}).get("podSets")
    if not isinstance(pod_sets, list) or not pod_sets:
        return [_required("spec.podSets")]
    causes = []
    for i, pod_set in enumerate(pod_sets):
        count = pod_set.get("count") if isinstance(pod_set, Mapping) else None
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            causes.append(_invalid(f"spec.podSets[{i}].count", count, "must be greater than or equal to 0"))
    return causes


def validate_priority_class(obj: Mapping[str, Any]) -> list[Cause]:
    value = obj.get("value")
    if value is None:
        return [_required("value")]
    if isinstance(value, bool) or not isinstance(value, int) or value > _MAX_PRIORITY:
        return [_invalid("value", value, f"must be an integer no greater than {_MAX_PRIORITY}")]
    return []


VALIDATORS = {
    CLUSTER_QUEUES: validate_cluster_queue,
    LOCAL_QUEUES: validate_local_queue,
    WORKLOADS: validate_workload,
    WORKLOAD_PRIORITY_CLASSES: validate_priority_class,
    PRIORITY_CLASSES: validate_priority_class,
}


def validate_update(rtype: ResourceType, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Cause]:
    """``LocalQueue.spec.clusterQueue`` is immutable (the CRD's CEL rule ``self == oldSelf``)."""
    if rtype == LOCAL_QUEUES:
        before, after = (old.get("spec") or {}).get("clusterQueue"), (new.get("spec") or {}).get("clusterQueue")
        if before != after:
            return [_invalid("spec.clusterQueue", after, "field is immutable")]
    return []
