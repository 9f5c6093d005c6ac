"""The Kueue part of a cluster description: flavors, queues, quotas and priority classes, created at start.

A description may carry (each entry is the upstream object's ``spec`` fields next to its ``name``)::

    kueue:
      resourceFlavors:
        - {name: 4xv5litepod-16, nodeLabels: {cloud.google.com/gke-tpu-accelerator: tpu-v5-lite-podslice}}
      clusterQueues:
        - name: cluster-queue
          namespaceSelector: {}               # null (absent) selects no namespace, {} all, as upstream
          queueingStrategy: BestEffortFIFO    # or StrictFIFO
          preemption: {withinClusterQueue: LowerPriority}
          resourceGroups:
            - coveredResources: [google.com/tpu]
              flavors: [{name: 4xv5litepod-16, resources: [{name: google.com/tpu, nominalQuota: 64}]}]
          admissionChecks: [dws-prov]        # xpk's v1beta1 list; or admissionChecksStrategy (v1beta2)
      localQueues:
        - {name: multislice-queue, namespace: default, clusterQueue: cluster-queue}
      admissionChecks:                       # flex-start (xpk --flex): kueue_provisioning.py
        - {name: dws-prov, controllerName: kueue.x-k8s.io/provisioning-request,
           parameters: {apiGroup: kueue.x-k8s.io, kind: ProvisioningRequestConfig, name: dws-config}}
      provisioningRequestConfigs:
        - {name: dws-config, provisioningClassName: queued-provisioning.gke.io, managedResources: [google.com/tpu],
           podSetUpdates: {nodeSelector: [{key: autoscaling.gke.io/provisioning-request,
                                           valueFromProvisioningClassDetail: ResizeRequestName}]}}
      workloadPriorityClasses:
        - {name: urgent, value: 1000}
      priorityClasses:                       # scheduling.k8s.io/v1 PriorityClass
        - {name: high, value: 750, description: High}
      configuration:                         # Kueue's manager Configuration, handed to Kueue as written
        waitForPodsReady:                    # absent: off (v0.17); the timeout is required
          timeout: 5m
          recoveryTimeout: 3m                # default: the timeout; "0s": no recovery check
          requeuingStrategy: {timestamp: Eviction, backoffBaseSeconds: 60, backoffMaxSeconds: 3600,
                              backoffLimitCount: 3}   # backoffLimitCount absent: requeued forever

Here the section's shape is checked (known sections, names, no duplicates), and a ClusterQueue naming an undeclared
flavor or a LocalQueue naming an undeclared ClusterQueue is refused (upstream would accept and leave the queue
inactive: in a description it is a typo). The objects' own fields are checked where they are on GKE: by
kube-apiserver (Kueue's CRD schemas, defaults) and Kueue's webhooks when the cluster applies them at start, which
fails with their message; ``configuration`` by Kueue's manager, which refuses a bad one at its start (with its own
message). ``cohortName`` is Kueue's own: the real Kueue borrows and lends within a cohort.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ResourceType:
    """The kind of a described object, as the API serves it."""

    api_version: str
    kind: str
    namespaced: bool = False


RESOURCE_FLAVORS = ResourceType("kueue.x-k8s.io/v1beta2", "ResourceFlavor")
CLUSTER_QUEUES = ResourceType("kueue.x-k8s.io/v1beta2", "ClusterQueue")
LOCAL_QUEUES = ResourceType("kueue.x-k8s.io/v1beta2", "LocalQueue", namespaced=True)
WORKLOAD_PRIORITY_CLASSES = ResourceType("kueue.x-k8s.io/v1beta2", "WorkloadPriorityClass")
PRIORITY_CLASSES = ResourceType("scheduling.k8s.io/v1", "PriorityClass")
PROVISIONING_REQUEST_CONFIGS = ResourceType("kueue.x-k8s.io/v1beta2", "ProvisioningRequestConfig")
ADMISSION_CHECKS = ResourceType("kueue.x-k8s.io/v1beta2", "AdmissionCheck")

# section: (type, fields in `spec`?). Each entry's fields beside its name go where the API has them; kube-apiserver
# refuses an unknown one when the cluster applies it (server-side apply: "field not declared in schema").
_SECTIONS: dict[str, tuple[ResourceType, bool]] = {
    "resourceFlavors": (RESOURCE_FLAVORS, True),
    "clusterQueues": (CLUSTER_QUEUES, True),
    "localQueues": (LOCAL_QUEUES, True),
    "workloadPriorityClasses": (WORKLOAD_PRIORITY_CLASSES, False),
    "priorityClasses": (PRIORITY_CLASSES, False),
    "provisioningRequestConfigs": (PROVISIONING_REQUEST_CONFIGS, True),
    "admissionChecks": (ADMISSION_CHECKS, True),
}


CONFIGURATION = "configuration"


class QueueDescriptionError(ValueError):
    """A bad ``kueue`` section; the message names the field."""


def parse_kueue_configuration(raw: Any, where: str = "kueue") -> dict[str, Any]:
    """The section's ``configuration`` (Kueue's manager Configuration) as written (``{}``: absent); Kueue checks it."""
    configuration = raw.get(CONFIGURATION) if isinstance(raw, Mapping) else None
    if configuration is None:
        return {}
    if not isinstance(configuration, Mapping):
        raise QueueDescriptionError(f"{where}.{CONFIGURATION}: must be a mapping (a Kueue Configuration)")
    return copy.deepcopy(dict(configuration))


@dataclass(frozen=True)
class QueueObject:
    """One object to create at start: its type and its body."""

    rtype: ResourceType
    body: Mapping[str, Any]

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])


def parse_queues(raw: Any, where: str = "kueue") -> tuple[QueueObject, ...]:
    """The objects of a description's ``kueue`` section, checked (``QueueDescriptionError`` names the bad field)."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise QueueDescriptionError(f"{where}: must be a mapping with {', '.join(_SECTIONS)}")
    for key in raw:
        if key not in _SECTIONS and key != CONFIGURATION:
            known = ", ".join((*_SECTIONS, CONFIGURATION))
            raise QueueDescriptionError(f"{where}.{key}: unknown field (known: {known})")
    objects: list[QueueObject] = []
    for section, (rtype, in_spec) in _SECTIONS.items():
        entries = raw.get(section) or []
        if not isinstance(entries, list):
            raise QueueDescriptionError(f"{where}.{section}: must be a list")
        seen: set[tuple[str, str]] = set()
        for index, entry in enumerate(entries):
            here = f"{where}.{section}[{index}]"
            body = _object(entry, rtype, in_spec, here)
            key = (str(body["metadata"].get("namespace", "")), str(body["metadata"]["name"]))
            if key in seen:
                raise QueueDescriptionError(f"{here}.name: duplicate {rtype.kind} {key[1]!r}")
            seen.add(key)
            objects.append(QueueObject(rtype, body))
    _check_references(objects, where)
    return tuple(objects)


def _object(entry: Any, rtype: ResourceType, in_spec: bool, here: str) -> dict[str, Any]:
    if not isinstance(entry, Mapping):
        raise QueueDescriptionError(f"{here}: must be a mapping with a name and the {rtype.kind}'s fields")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise QueueDescriptionError(f"{here}.name: required")
    metadata: dict[str, Any] = {"name": name}
    values = {k: copy.deepcopy(v) for k, v in entry.items() if k not in ("name", "namespace")}
    if rtype == CLUSTER_QUEUES and "admissionChecks" in values:
        values = _checks_strategy(values, here)
    if rtype.namespaced:
        metadata["namespace"] = str(entry.get("namespace") or "default")
    return {"metadata": metadata, **({"spec": values} if in_spec else values)}


def _checks_strategy(values: dict[str, Any], here: str) -> dict[str, Any]:
    """xpk's v1beta1 ``admissionChecks: [name]`` as v1beta2 stores it (``clusterqueue_conversion.go``): rules
    without flavors in ``admissionChecksStrategy``."""
    names = values.pop("admissionChecks")
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise QueueDescriptionError(f"{here}.admissionChecks: must be a list of AdmissionCheck names")
    if "admissionChecksStrategy" in values:
        raise QueueDescriptionError(
            f"{here}.admissionChecks: give admissionChecks or admissionChecksStrategy, not both"
        )
    values["admissionChecksStrategy"] = {"admissionChecks": [{"name": n} for n in names]}
    return values


def _check_references(objects: list[QueueObject], where: str) -> None:
    flavors = {o.name for o in objects if o.rtype == RESOURCE_FLAVORS}
    queues = {o.name for o in objects if o.rtype == CLUSTER_QUEUES}
    for obj in objects:
        spec = obj.body.get("spec") or {}
        if obj.rtype == CLUSTER_QUEUES:
            for group in spec.get("resourceGroups") or []:
                for flavor in group.get("flavors") or []:
                    if flavor.get("name") not in flavors:
                        raise QueueDescriptionError(
                            f"{where}.clusterQueues[{obj.name}]: flavor {flavor.get('name')!r} is not one of "
                            f"{where}.resourceFlavors ({', '.join(sorted(flavors)) or 'none'})"
                        )
        elif obj.rtype == LOCAL_QUEUES and spec.get("clusterQueue") not in queues:
            raise QueueDescriptionError(
                f"{where}.localQueues[{obj.name}]: clusterQueue {spec.get('clusterQueue')!r} is not one of "
                f"{where}.clusterQueues ({', '.join(sorted(queues)) or 'none'})"
            )
