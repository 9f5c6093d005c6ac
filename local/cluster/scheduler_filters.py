"""kube-scheduler's filter plugins, as pure functions over a pod, a node and the pods bound so far.

Follows kubernetes/kubernetes ``pkg/scheduler/framework/plugins`` (v1.32): the default profile runs
the filters in this order and stops at a node's first failing one (``RunFilterPlugins``):

- ``NodeUnschedulable`` (``nodeunschedulable/node_unschedulable.go``): ``spec.unschedulable`` unless
  the pod tolerates ``node.kubernetes.io/unschedulable:NoSchedule`` → "node(s) were unschedulable";
- ``NodeName`` (``nodename/node_name.go``) → "node(s) didn't match the requested node name";
- ``TaintToleration`` (``tainttoleration/taint_toleration.go``): a ``NoSchedule``/``NoExecute`` taint
  the pod does not tolerate → "node(s) had untolerated taint {key: value}";
- ``NodeAffinity`` (``nodeaffinity/node_affinity.go``): ``nodeSelector`` and required node affinity
  → "node(s) didn't match Pod's node affinity/selector";
- ``NodePorts`` (``nodeports/node_ports.go``): host ports (a ``hostNetwork`` pod's container ports,
  which the API server defaults into ``hostPort``) → "node(s) didn't have free ports for the
  requested pod ports";
- ``NodeResourcesFit`` (``noderesources/fit.go``): the pod count ("Too many pods") and the pod's
  requests (``computePodResourceRequest``: the main containers plus native sidecars, or the largest
  init container with the sidecars started before it, whichever is larger) against allocatable
  minus what bound pods request → "Insufficient cpu", "Insufficient google.com/tpu", ...;
- ``InterPodAffinity`` (``interpodaffinity/filtering.go``): required pod affinity and anti-affinity
  of the pod, and existing pods' required anti-affinity; a pod whose affinity matches no pod yet
  may go anywhere it matches its own terms (the first pod of a group).

Each reason carries whether preemption could help (``Unschedulable``) or not
(``UnschedulableAndUnresolvable``), which the ``FailedScheduling`` message's preemption part reports.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from elastic_training.local.descriptions.quantity import QuantityError, parse_quantity

Obj = dict[str, Any]

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_NODE_NAME = "node(s) didn't match the requested node name"
REASON_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_PORTS = "node(s) didn't have free ports for the requested pod ports"
REASON_TOO_MANY_PODS = "Too many pods"
REASON_POD_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_POD_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"


@dataclass(frozen=True)
class Rejection:
    """Why one node cannot take the pod: the reasons of the first failing filter."""

    reasons: tuple[str, ...]
    resolvable: bool  # could preemption help (Unschedulable) or not (UnschedulableAndUnresolvable)


@dataclass(frozen=True)
class BoundPod:
    """A pod already on a node, as the filters see it."""

    pod: Obj
    node: Obj


def node_labels(node: Obj) -> Mapping[str, str]:
    labels: Mapping[str, str] = (node.get("metadata") or {}).get("labels") or {}
    return labels


def filter_node(pod: Obj, node: Obj, on_node: Sequence[Obj], bound: Sequence[BoundPod]) -> Rejection | None:
    """None when ``node`` can take ``pod`` (``on_node``: pods bound to it; ``bound``: every bound pod)."""
    spec = pod.get("spec") or {}
    node_spec = node.get("spec") or {}
    if node_spec.get("unschedulable") and not tolerates(
        spec.get("tolerations"), {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
    ):
        return Rejection((REASON_UNSCHEDULABLE,), False)
    if spec.get("nodeName") and spec["nodeName"] != node["metadata"]["name"]:
        return Rejection((REASON_NODE_NAME,), False)
    for taint in node_spec.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(spec.get("tolerations"), taint):
            return Rejection(
                (f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}",), False
            )
    if not matches_node_selection(spec, node):
        return Rejection((REASON_AFFINITY,), False)
    wanted = host_ports(pod)
    if wanted and wanted & set().union(*(host_ports(p) for p in on_node)):
        return Rejection((REASON_PORTS,), True)
    insufficient = insufficient_resources(pod, node, on_node)
    if insufficient:
        return Rejection(tuple(insufficient), True)
    return pod_affinity_rejection(pod, node, bound)


# -- taints ---------------------------------------------------------------------------------------


def tolerates(tolerations: Iterable[Obj] | None, taint: Mapping[str, Any]) -> bool:
    """``v1.Toleration.ToleratesTaint``: key (empty with Exists tolerates all), operator, value, effect."""
    for toleration in tolerations or []:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        if key and key != taint.get("key"):
            continue
        if not key and operator != "Exists":
            continue
        if operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


# -- node affinity --------------------------------------------------------------------------------


def matches_node_selection(spec: Mapping[str, Any], node: Obj) -> bool:
    """``nodeSelector`` (every label equal) and required node affinity (any term, each all expressions)."""
    labels = node_labels(node)
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return True
    return any(_node_term_matches(term, node) for term in required.get("nodeSelectorTerms") or [])


def _node_term_matches(term: Mapping[str, Any], node: Obj) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # an empty term matches no node
    labels = node_labels(node)
    name = {"metadata.name": node["metadata"]["name"]}
    return all(_node_requirement(e, labels) for e in expressions) and all(_node_requirement(f, name) for f in fields)


def _node_requirement(requirement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator = requirement.get("key", ""), requirement.get("operator", "")
    values = [str(v) for v in requirement.get("values") or []]
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


# -- host ports -----------------------------------------------------------------------------------


def host_ports(pod: Obj) -> set[tuple[str, str, int]]:
    """(hostIP, protocol, hostPort) the pod takes on its node (0.0.0.0 when no hostIP)."""
    spec = pod.get("spec") or {}
    containers = list(spec.get("containers") or [])
    containers += [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    ports: set[tuple[str, str, int]] = set()
    for container in containers:
        for port in container.get("ports") or []:
            host_port = port.get("hostPort") or (port.get("containerPort") if spec.get("hostNetwork") else None)
            if host_port:
                ports.add((str(port.get("hostIP") or "0.0.0.0"), str(port.get("protocol") or "TCP"), int(host_port)))
    return ports


# -- resources ------------------------------------------------------------------------------------


def container_requests(container: Mapping[str, Any]) -> dict[str, Fraction]:
    """A container's requests; a limit without a request counts as the request (the API server's default)."""
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    out: dict[str, Fraction] = {}
    for name, quantity in merged.items():
        try:
            out[str(name)] = parse_quantity(quantity)
        except QuantityError:
            continue  # validation refuses these; never let one stop scheduling
    return out


def pod_requests(pod: Obj) -> dict[str, Fraction]:
    """``resourcehelper.PodRequests``: main containers plus sidecars, or the peak of the init phase."""
    spec = pod.get("spec") or {}
    total: dict[str, Fraction] = {}
    for container in spec.get("containers") or []:
        _add(total, container_requests(container))
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for container in spec.get("initContainers") or []:
        requests = container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(sidecars, requests)
            _max(init_peak, sidecars)
        else:
            during = dict(sidecars)
            _add(during, requests)
            _max(init_peak, during)
    _add(total, sidecars)
    _max(total, init_peak)
    return total


def _add(into: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    for name, value in more.items():
        into[name] = into.get(name, Fraction(0)) + value


def _max(into: dict[str, Fraction], other: Mapping[str, Fraction]) -> None:
    for name, value in other.items():
        into[name] = max(into.get(name, Fraction(0)), value)


def allocatable(node: Obj) -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    for name, quantity in ((node.get("status") or {}).get("allocatable") or {}).items():
        try:
            out[str(name)] = parse_quantity(quantity)
        except QuantityError:
            continue
    return out


def insufficient_resources(pod: Obj, node: Obj, on_node: Sequence[Obj]) -> list[str]:
    """``fitsRequest``: "Too many pods", then each requested resource the node lacks, in upstream's order."""
    free = allocatable(node)
    if len(on_node) + 1 > int(free.get("pods", Fraction(0))):
        return [REASON_TOO_MANY_PODS]
    wanted = {name: value for name, value in pod_requests(pod).items() if value > 0}
    if not wanted:
        return []
    used: dict[str, Fraction] = {}
    for other in on_node:
        _add(used, pod_requests(other))
    order = ["cpu", "memory", "ephemeral-storage", *sorted(n for n in wanted if n not in ("cpu", "memory"))]
    reasons = []
    for name in dict.fromkeys(order):
        if name in wanted and wanted[name] > free.get(name, Fraction(0)) - used.get(name, Fraction(0)):
            reasons.append(f"Insufficient {name}")
    return reasons


# -- inter-pod affinity ---------------------------------------------------------------------------


def label_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """``metav1.LabelSelectorAsSelector``: matchLabels and matchExpressions; a nil selector matches nothing."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for requirement in selector.get("matchExpressions") or []:
        if requirement.get("operator") in ("Gt", "Lt") or not _node_requirement(requirement, labels):
            return False
    return True


def _required_terms(pod: Obj, kind: str) -> list[Obj]:
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get(kind) or {}
    return list(affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or [])


def _term_selects(term: Mapping[str, Any], owner: Obj, candidate: Obj) -> bool:
    """Whether ``term`` (of ``owner``) selects ``candidate``: its namespaces, then its label selector."""
    candidate_ns = candidate["metadata"].get("namespace", "")
    namespaces = term.get("namespaces") or []
    if term.get("namespaceSelector") == {}:
        pass  # an empty namespaceSelector selects every namespace
    elif namespaces:
        if candidate_ns not in namespaces:
            return False
    elif term.get("namespaceSelector") is None and candidate_ns != owner["metadata"].get("namespace", ""):
        return False
    return label_selector_matches(term.get("labelSelector"), candidate["metadata"].get("labels") or {})


def _same_domain(key: str, node: Obj, other: Obj) -> bool:
    value = node_labels(node).get(key)
    return value is not None and node_labels(other).get(key) == value


def pod_affinity_rejection(pod: Obj, node: Obj, bound: Sequence[BoundPod]) -> Rejection | None:
    """``InterPodAffinity`` Filter: existing pods' anti-affinity, then the pod's affinity and anti-affinity."""
    for existing in bound:
        for term in _required_terms(existing.pod, "podAntiAffinity"):
            if _same_domain(term.get("topologyKey", ""), node, existing.node) and _term_selects(
                term, existing.pod, pod
            ):
                return Rejection((REASON_EXISTING_ANTI_AFFINITY,), True)
    affinity = _required_terms(pod, "podAffinity")
    if affinity:
        anywhere = any(_term_selects(term, pod, b.pod) for term in affinity for b in bound)
        for term in affinity:
            key = term.get("topologyKey", "")
            if key not in node_labels(node):
                return Rejection((REASON_POD_AFFINITY,), False)
            here = any(_same_domain(key, node, b.node) and _term_selects(term, pod, b.pod) for b in bound)
            if not here and (anywhere or not _term_selects(term, pod, pod)):
                return Rejection((REASON_POD_AFFINITY,), False)
    for term in _required_terms(pod, "podAntiAffinity"):
        key = term.get("topologyKey", "")
        if any(_same_domain(key, node, b.node) and _term_selects(term, pod, b.pod) for b in bound):
            return Rejection((REASON_POD_ANTI_AFFINITY,), True)
    return None
