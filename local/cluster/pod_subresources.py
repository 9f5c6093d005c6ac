"""The ``pods/binding`` and ``pods/eviction`` subresources (POST), as the API server serves them.

Follows kubernetes ``pkg/registry/core/pod/storage/storage.go`` (``BindingREST.Create``,
``assignPod``) and ``pkg/registry/core/pod/storage/eviction.go`` (``EvictionREST.Create``):

- **binding** (``v1`` ``Binding``, what a scheduler posts): ``target.name`` is the node; the pod gets
  ``spec.nodeName`` and ``PodScheduled=True``. A pod already bound is a 409 ``pod <name> is already
  assigned to node "<node>"``; one being deleted a 409 ``pod <name> is being deleted, cannot be assigned
  to a host``.
- **eviction** (``policy/v1`` ``Eviction``, what ``kubectl drain`` posts): a running pod gets
  ``DisruptionTarget`` (``EvictionByEvictionAPI``, "Eviction API: evicting") and is deleted with the
  request's ``deleteOptions`` (else its own grace period); a terminal pod is deleted directly.
  There are no PodDisruptionBudgets here, so an eviction is never refused with 429.

Both answer 201 with a ``Status`` of ``Success``, as upstream.
"""

from __future__ import annotations

from typing import Any

from elastic_training.local.cluster.node_faults import DisruptionReason, disruption_condition, set_pod_condition
from elastic_training.local.cluster.resources import PODS, ApiError, bad_request
from elastic_training.local.cluster.scheduler import pod_scheduled_condition
from elastic_training.local.cluster.store import Obj, Store

SUCCESS: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def bind(store: Store, namespace: str, name: str, body: Any) -> Obj:
    """``POST pods/<name>/binding``."""
    target = body.get("target") if isinstance(body, dict) else None
    if not isinstance(target, dict) or not target.get("name"):
        raise ApiError(422, "Invalid", f'Binding.core "{name}" is invalid: target.name: Required value')
    if target.get("kind") not in (None, "", "Node"):
        raise bad_request(f"target.kind: must be Node, got {target.get('kind')!r}")
    pod = store.get(PODS, namespace, name)
    if pod["metadata"].get("deletionTimestamp"):
        raise ApiError(409, "Conflict", f"pod {name} is being deleted, cannot be assigned to a host", "pods", name)
    bound = pod.get("spec", {}).get("nodeName")
    if bound:
        raise ApiError(409, "Conflict", f'pod {name} is already assigned to node "{bound}"', "pods", name)
    node = str(target["name"])
    store.mutate(PODS, namespace, name, lambda o: o["spec"].__setitem__("nodeName", node))
    store.mutate(PODS, namespace, name, lambda o: pod_scheduled_condition(o, "True"), subresource="status")
    return SUCCESS


def evict(store: Store, namespace: str, name: str, body: Any) -> Obj:
    """``POST pods/<name>/eviction``."""
    options = (body.get("deleteOptions") if isinstance(body, dict) else None) or {}
    if not isinstance(options, dict):
        raise bad_request("deleteOptions must be an object")
    pod = store.get(PODS, namespace, name)
    grace = options.get("gracePeriodSeconds", pod.get("spec", {}).get("terminationGracePeriodSeconds"))
    if pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
        condition = disruption_condition(DisruptionReason.EVICTION_API)
        store.mutate(PODS, namespace, name, lambda o: set_pod_condition(o, condition), subresource="status")
    store.delete(PODS, namespace, name, grace_period_seconds=None if grace is None else int(grace))
    return SUCCESS
