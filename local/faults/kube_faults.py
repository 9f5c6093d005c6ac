"""Faults that an admin or GKE causes through the Kubernetes API, done through that API against the real cluster.

Each is the request a real component makes, so what follows is the real controllers' doing:

- **delete-pod**: ``DELETE pods/<name>`` with the pod's own grace period, as ``kubectl delete pod`` (a node agent
  stops the processes, the Job controller makes a replacement).
- **evict-pod**: ``POST pods/<name>/eviction`` (the Eviction API, as ``kubectl drain`` and GKE's upgrades and repairs
  evict): the API server marks the pod ``DisruptionTarget`` (reason ``EvictionByEvictionAPI``) and deletes it,
  honouring PodDisruptionBudgets.
- **cordon** and **drain** (a node pool's repair): ``spec.unschedulable`` on each node, then every pod on it
  evicted.
- **stop-queue**: ``spec.stopPolicy`` of a ClusterQueue or LocalQueue (``Hold``, ``HoldAndDrain``, ``None``), as
  ``kubectl patch``; Kueue stops admitting, and with ``HoldAndDrain`` evicts the admitted.
- **deactivate-workload**: ``spec.active`` of a JobSet's Workload; Kueue evicts it (``Deactivated``).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
STOP_POLICIES = ("None", "Hold", "HoldAndDrain")


class FaultError(ValueError):
    """A fault that cannot be done as asked; the message says why."""


def delete_pod(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """Delete the pod gracefully (its ``terminationGracePeriodSeconds``)."""
    client.CoreV1Api(api).delete_namespaced_pod(name, namespace)
    return {"deleted": f"{namespace}/{name}"}


def evict_pod(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """Evict the pod through the Eviction API (``policy/v1``)."""
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
    client.CoreV1Api(api).create_namespaced_pod_eviction(name, namespace, eviction)
    return {"evicted": f"{namespace}/{name}", "reason": "EvictionByEvictionAPI"}


def set_unschedulable(api: client.ApiClient, nodes: list[str], unschedulable: bool) -> None:
    """Cordon (``True``) or uncordon the nodes."""
    core = client.CoreV1Api(api)
    for node in nodes:
        core.patch_node(node, {"spec": {"unschedulable": unschedulable}})


def pods_on(api: client.ApiClient, nodes: list[str]) -> list[tuple[str, str]]:
    """``(namespace, name)`` of every pod bound to one of ``nodes``."""
    core = client.CoreV1Api(api)
    found = []
    for node in nodes:
        for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items:
            found.append((pod.metadata.namespace, pod.metadata.name))
    return found


def drain(api: client.ApiClient, nodes: list[str]) -> list[str]:
    """Cordon the nodes and evict every pod on them, as ``kubectl drain``; the evicted pods, ``ns/name``."""
    set_unschedulable(api, nodes, True)
    evicted = []
    for namespace, name in pods_on(api, nodes):
        try:
            evict_pod(api, namespace, name)
        except client.ApiException as error:
            if error.status != 404:  # gone already
                raise
        evicted.append(f"{namespace}/{name}")
    return evicted


def stop_queue(
    api: client.ApiClient, *, cluster_queue: str | None, local_queue: str | None, policy: str
) -> dict[str, Any]:
    """Set ``stopPolicy`` on a ClusterQueue (by name) or a LocalQueue (``namespace/name``); the queue as written."""
    if policy not in STOP_POLICIES:
        raise FaultError(f"stopPolicy: must be one of {', '.join(STOP_POLICIES)}, got {policy!r}")
    if (cluster_queue is None) == (local_queue is None):
        raise FaultError("give clusterQueue or localQueue (namespace/name), not both")
    custom = client.CustomObjectsApi(api)
    patch = {"spec": {"stopPolicy": policy}}
    if cluster_queue is not None:
        return dict(
            custom.patch_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", cluster_queue, patch)
        )
    namespace, _, name = str(local_queue).rpartition("/")
    return dict(
        custom.patch_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, namespace or "default", "localqueues", name, patch
        )
    )


def workload_of_jobset(api: client.ApiClient, namespace: str, jobset: str) -> dict[str, Any]:
    """The Workload Kueue made for the JobSet (its controller owner reference)."""
    custom = client.CustomObjectsApi(api)
    owner = custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", jobset)
    uid = owner["metadata"]["uid"]
    workloads = custom.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads")["items"]
    for workload in workloads:
        if any(ref.get("uid") == uid for ref in workload["metadata"].get("ownerReferences") or []):
            return dict(workload)
    raise FaultError(f"JobSet {namespace}/{jobset} has no Workload yet (is it in a Kueue queue?)")


def set_workload_active(api: client.ApiClient, namespace: str, jobset: str, active: bool) -> dict[str, Any]:
    """``spec.active`` of the JobSet's Workload; the Workload as written."""
    name = workload_of_jobset(api, namespace, jobset)["metadata"]["name"]
    custom = client.CustomObjectsApi(api)
    return dict(
        custom.patch_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads", name, {"spec": {"active": active}}
        )
    )
