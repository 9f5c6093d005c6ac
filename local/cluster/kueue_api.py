"""Kueue's API objects on the local API server: the defaults the CRDs apply and the checks their webhooks make.

Upstream (kubernetes-sigs/kueue v0.17.1): the CRDs' ``default`` markers in ``apis/kueue/v1beta2/
clusterqueue_types.go`` (``queueingStrategy: BestEffortFIFO``; ``preemption`` ``withinClusterQueue`` and
``reclaimWithinCohort`` ``Never``; ``stopPolicy: None``), ``localqueue_types.go`` (``stopPolicy: None``),
``workload_types.go`` (``active: true``, a podSet's ``name: main``); the validating webhooks in
``pkg/webhooks/{clusterqueue,workload}_webhook.go`` (a flavor's resources must be the group's
``coveredResources`` in order; a podSet's ``count`` is not negative); ``scheduling.k8s.io/v1``
PriorityClass's ``value`` is required (``pkg/apis/scheduling/validation``); ``admissioncheck_types.go``
and
``provisioningrequestconfig_types.go`` (``controllerName`` required and immutable; ``retryStrategy`` defaults to
3 retries, 60 s base, 1800 s max); kubernetes/autoscaler ``apis/provisioningrequest/autoscaling.x-k8s.io/v1/
types.go`` (a ProvisioningRequest's class and pod sets are required and immutable, each ``count`` at least 1).
Only the checks whose violation the local Kueue would otherwise misread are made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from elastic_training.local.cluster.resources import (
    ADMISSION_CHECKS,
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    PRIORITY_CLASSES,
    PROVISIONING_REQUEST_CONFIGS,
    PROVISIONING_REQUESTS,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
    Cause,
    ResourceType,
)

Obj = dict[str, Any]

QUEUEING_STRATEGIES = ("BestEffortFIFO", "StrictFIFO")
WITHIN_CLUSTER_QUEUE = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
# ProvisioningRequestConfig.spec.retryStrategy's default (provisioningrequestconfig_types.go).
RETRY_DEFAULTS = {"backoffLimitCount": 3, "backoffBaseSeconds": 60, "backoffMaxSeconds": 1800}
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
    elif rtype == PROVISIONING_REQUEST_CONFIGS and isinstance(spec, dict):
        retry = spec.setdefault("retryStrategy", dict(RETRY_DEFAULTS))
        if isinstance(retry, dict):
            for key, value in RETRY_DEFAULTS.items():
                retry.setdefault(key, value)


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


def validate_admission_check(obj: Mapping[str, Any]) -> list[Cause]:
    """``controllerName`` is required (MinLength=1); ``parameters`` names all of apiGroup, kind and name."""
    spec = obj.get("spec") or {}
    if not spec.get("controllerName"):
        return [_required("spec.controllerName")]
    params = spec.get("parameters")
    if isinstance(params, Mapping):
        for key in ("apiGroup", "kind", "name"):
            if not params.get(key):
                return [_required(f"spec.parameters.{key}")]
    return []


def validate_provisioning_request_config(obj: Mapping[str, Any]) -> list[Cause]:
    spec = obj.get("spec") or {}
    if not spec.get("provisioningClassName"):
        return [_required("spec.provisioningClassName")]
    retry = spec.get("retryStrategy") or {}
    for key in RETRY_DEFAULTS:
        value = retry.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return [_invalid(f"spec.retryStrategy.{key}", value, "must be greater than or equal to 0")]
    return []


def validate_provisioning_request(obj: Mapping[str, Any]) -> list[Cause]:
    """The CRD's required fields and the pod sets' ``count`` minimum (kubernetes/autoscaler types.go)."""
    spec = obj.get("spec") or {}
    if not spec.get("provisioningClassName"):
        return [_required("spec.provisioningClassName")]
    pod_sets = spec.get("podSets")
    if not isinstance(pod_sets, list) or not pod_sets:
        return [_required("spec.podSets")]
    for i, pod_set in enumerate(pod_sets):
        count = pod_set.get("count") if isinstance(pod_set, Mapping) else None
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            return [_invalid(f"spec.podSets[{i}].count", count, "should be greater than or equal to 1")]
        if not ((pod_set.get("podTemplateRef") or {}).get("name")):
            return [_required(f"spec.podSets[{i}].podTemplateRef.name")]
    return []


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
    ADMISSION_CHECKS: validate_admission_check,
    PROVISIONING_REQUEST_CONFIGS: validate_provisioning_request_config,
    PROVISIONING_REQUESTS: validate_provisioning_request,
}

# The CRDs' ``self == oldSelf`` rules: AdmissionCheck's controllerName, a ProvisioningRequest's spec.
_IMMUTABLE = {
    LOCAL_QUEUES: ("clusterQueue",),
    ADMISSION_CHECKS: ("controllerName",),
    PROVISIONING_REQUESTS: ("podSets", "provisioningClassName", "parameters"),
}


def validate_update(rtype: ResourceType, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Cause]:
    """The fields the CRDs' CEL rules ``self == oldSelf`` keep (``LocalQueue.spec.clusterQueue``, ...)."""
    for field in _IMMUTABLE.get(rtype, ()):
        before, after = (old.get("spec") or {}).get(field), (new.get("spec") or {}).get(field)
        if before != after:
            message = "Value is immutable" if rtype == PROVISIONING_REQUESTS else "field is immutable"
            return [_invalid(f"spec.{field}", after, message)]
    return []
