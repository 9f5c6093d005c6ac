"""Label and field selectors, parsed and matched as the API server does.

Label selectors: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k`` (exists) and
``!k`` (does not exist), comma-separated and ANDed. ``!=`` and ``notin`` also match objects that
lack the label. Field selectors: ``path=v``, ``path==v``, ``path!=v`` over the fields each type
supports (``metadata.name`` and ``metadata.namespace`` everywhere, ``status.phase`` for pods and
namespaces, a few more); an unsupported field is a 400, as on the real server.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from elastic_training.local.cluster.resources import (
    EVENTS,
    JOBS,
    NAMESPACES,
    NODES,
    PODS,
    ApiError,
    ResourceType,
    bad_request,
)

_KEY_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_SET_RE = re.compile(r"^\s*(!?)\s*(\S+?)\s+(in|notin)\s*\((.*)\)\s*$")
_EQ_RE = re.compile(r"^\s*([^!=\s]+)\s*(==|!=|=)\s*(\S*)\s*$")
_EXISTS_RE = re.compile(r"^\s*(!?)\s*([^!=\s()]+)\s*$")

_COMMON_FIELDS = ("metadata.name", "metadata.namespace")
_TYPE_FIELDS: dict[ResourceType, tuple[str, ...]] = {
    PODS: (
        "status.phase",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "status.podIP",
    ),
    NAMESPACES: ("status.phase",),
    NODES: ("spec.unschedulable",),
    JOBS: ("status.successful",),
    EVENTS: (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.fieldPath",
        "reason",
        "type",
        "reportingComponent",
    ),
}


@dataclass(frozen=True)
class Requirement:
    """One term of a label selector."""

    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "exists":
            return present
        if self.operator == "!exists":
            return not present
        if self.operator in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # "!=", "notin"


@dataclass(frozen=True)
class LabelSelector:
    """A parsed label selector; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(req.matches(labels) for req in self.requirements)


@dataclass(frozen=True)
class FieldSelector:
    """A parsed field selector: (field path, negated, value) terms, ANDed."""

    terms: tuple[tuple[str, bool, str], ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, path) == value) != negated for path, negated, value in self.terms)


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not inside a parenthesised set."""
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return [term for term in terms if term.strip()]


def _bad_selector(text: str, why: str) -> ApiError:
    return bad_request(f"unable to parse requirement: {why} in selector {text!r}")


def _check_key(key: str, text: str) -> None:
    if not _KEY_RE.match(key) or len(key.rsplit("/", 1)[-1]) > 63:
        raise _bad_selector(text, f"invalid label key {key!r}")


def _check_value(value: str, text: str) -> None:
    if len(value) > 63 or not _VALUE_RE.match(value):
        raise _bad_selector(text, f"invalid label value {value!r}")


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse a ``labelSelector`` query value; ``ApiError`` 400 when malformed."""
    if not text or not text.strip():
        return LabelSelector()
    requirements: list[Requirement] = []
    for term in _split_terms(text):
        if match := _SET_RE.match(term):
            negated, key, operator, raw_values = match.groups()
            if negated:
                raise _bad_selector(text, f"unexpected '!' before {key!r}")
            if not raw_values.strip():
                # upstream labels.NewRequirement: "for 'in', 'notin' operators, values set can't be empty"
                raise _bad_selector(text, f"for 'in', 'notin' operators, values set can't be empty ({key!r})")
            values = [v.strip() for v in raw_values.split(",")]
            _check_key(key, text)
            for value in values:
                _check_value(value, text)
            requirements.append(Requirement(key, operator, frozenset(values)))
        elif match := _EQ_RE.match(term):
            key, operator, value = match.groups()
            _check_key(key, text)
            _check_value(value, text)
            requirements.append(Requirement(key, "!=" if operator == "!=" else "=", frozenset([value])))
        elif match := _EXISTS_RE.match(term):
            negated, key = match.groups()
            _check_key(key, text)
            requirements.append(Requirement(key, "!exists" if negated else "exists"))
        else:
            raise _bad_selector(text, f"cannot parse {term.strip()!r}")
    return LabelSelector(tuple(requirements))


def parse_field_selector(text: str | None, rtype: ResourceType) -> FieldSelector:
    """Parse a ``fieldSelector`` query value for ``rtype``; ``ApiError`` 400 when malformed or unsupported."""
    if not text or not text.strip():
        return FieldSelector()
    supported = _COMMON_FIELDS + _TYPE_FIELDS.get(rtype, ())
    terms: list[tuple[str, bool, str]] = []
    for term in text.split(","):
        if not term.strip():
            continue
        match = _EQ_RE.match(term)
        if match is None:
            raise bad_request(f"invalid selector: {text!r}; can't understand {term!r}")
        path, operator, value = match.groups()
        if path not in supported:
            raise bad_request(f'field label not supported: "{path}"')
        terms.append((path, operator == "!=", value))
    return FieldSelector(tuple(terms))


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string form of a dotted field of ``obj``; "" when absent."""
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return ""
        current = current.get(part)
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


@dataclass(frozen=True)
class Selection:
    """A namespace (None: all) plus label and field selectors: what a list or watch asks for."""

    namespace: str | None = None
    labels: LabelSelector = LabelSelector()
    fields: FieldSelector = FieldSelector()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        if self.namespace is not None and (obj.get("metadata") or {}).get("namespace") != self.namespace:
            return False
        return self.labels.matches(obj) and self.fields.matches(obj)
