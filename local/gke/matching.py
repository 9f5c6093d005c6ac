"""Whether a node of a pool could take a pod: the cluster autoscaler's question before it scales a pool up.

The autoscaler runs the scheduler's filter plugins against a template node of each pool
(``cluster-autoscaler/simulator``). This asks a simpler subset, enough for what the product renders:

- every ``nodeSelector`` entry is one of the node's labels;
- ``requiredDuringSchedulingIgnoredDuringExecution`` node affinity: one of the terms matches, each expression by
  ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt``, ``Lt`` on labels (``matchFields`` are not read);
- every ``NoSchedule``/``NoExecute`` taint of the node is tolerated (key, operator ``Equal``/``Exists``, value,
  effect);
- the pod's requests (the sum of its containers', or its largest init container's) fit the node's allocatable.

Not asked: pod (anti-)affinity, topology spread, ports, volumes, what already runs on the pool (a waiting pool has
no nodes, so nothing runs there).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from elastic_training.local.kube_objects import Obj as Obj  # re-exported: the modules beside use it from here

_EFFECTS = ("NoSchedule", "NoExecute")


def fits(pod_spec: Obj, node: Obj) -> bool:
    """Whether ``node`` (a Node manifest) could take a pod of ``pod_spec``."""
    labels: Mapping[str, str] = (node.get("metadata") or {}).get("labels") or {}
    return (
        _selector_matches(pod_spec.get("nodeSelector") or {}, labels)
        and _affinity_matches(pod_spec, labels)
        and _taints_tolerated(pod_spec.get("tolerations") or [], (node.get("spec") or {}).get("taints") or [])
        and _requests_fit(pod_spec, (node.get("status") or {}).get("allocatable") or {})
    )


def _selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def _affinity_matches(pod_spec: Obj, labels: Mapping[str, str]) -> bool:
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not required:
        return True
    terms = required.get("nodeSelectorTerms") or []
    return any(all(_expression(e, labels) for e in term.get("matchExpressions") or []) for term in terms)


def _expression(expression: Obj, labels: Mapping[str, str]) -> bool:
    key, operator = str(expression.get("key")), str(expression.get("operator"))
    values = [str(v) for v in expression.get("values") or []]
    value = labels.get(key)
    if operator == "In":
        return value in values
    if operator == "NotIn":
        return value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and value.lstrip("-").isdigit() and values:
        return int(value) > int(values[0]) if operator == "Gt" else int(value) < int(values[0])
    return False


def _tolerates(toleration: Obj, taint: Obj) -> bool:
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration.get("key") == taint.get("key")
    return toleration.get("key") == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")


def _taints_tolerated(tolerations: list[Obj], taints: list[Obj]) -> bool:
    return all(any(_tolerates(t, taint) for t in tolerations) for taint in taints if taint.get("effect") in _EFFECTS)


def _requests(containers: list[Obj]) -> list[dict[str, float]]:
    found = []
    for container in containers:
        requests = (container.get("resources") or {}).get("requests") or {}
        found.append({str(name): float(parse_quantity(str(q))) for name, q in requests.items()})
    return found


def _requests_fit(pod_spec: Obj, allocatable: Mapping[str, Any]) -> bool:
    total: dict[str, float] = {}
    for requests in _requests(pod_spec.get("containers") or []):
        for name, amount in requests.items():
            total[name] = total.get(name, 0.0) + amount
    for requests in _requests(pod_spec.get("initContainers") or []):
        for name, amount in requests.items():
            total[name] = max(total.get(name, 0.0), amount)
    return all(amount <= float(parse_quantity(str(allocatable.get(name, "0")))) for name, amount in total.items())
