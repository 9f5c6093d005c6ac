"""Request bodies in ``application/vnd.kubernetes.protobuf``, for the kinds kubectl's typed commands send.

``kubectl create token``, ``create serviceaccount``, ``create namespace``, ``create role``,
``create rolebinding``/``clusterrolebinding`` and ``auth can-i``/``auth whoami`` send protobuf, as
client-go's typed clients do for built-in kinds. Decoded as the API server's protobuf serializer
reads them (``k8s.io/apimachinery/pkg/runtime/serializer/protobuf``): the ``k8s\\x00`` magic, then a
``runtime.Unknown`` (typeMeta, raw), whose ``raw`` is the kind's message with the field numbers of
``k8s.io/api/<group>/<version>/generated.proto``. Only the fields those commands set are mapped;
other fields are skipped. Responses stay JSON, which every client accepts.
"""

from __future__ import annotations

import json
from typing import Any, Union

from elastic_training.local.cluster.resources import ApiError, bad_request

PROTOBUF = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
MAX_DEPTH = 32

# A message schema: field number -> (JSON name, kind, repeated). Kind is "string", "int", "bool", "map"
# (map<string,string>), or a nested schema.
Schema = dict[int, tuple[str, Union[str, "Schema"], bool]]

_TYPE_META: Schema = {1: ("apiVersion", "string", False), 2: ("kind", "string", False)}
_UNKNOWN: Schema = {1: ("typeMeta", _TYPE_META, False), 2: ("raw", "bytes", False)}
_OBJECT_META: Schema = {
    1: ("name", "string", False),
    2: ("generateName", "string", False),
    3: ("namespace", "string", False),
    11: ("labels", "map", False),
    12: ("annotations", "map", False),
    14: ("finalizers", "string", True),
}
_POLICY_RULE: Schema = {
    1: ("verbs", "string", True),
    2: ("apiGroups", "string", True),
    3: ("resources", "string", True),
    4: ("resourceNames", "string", True),
    5: ("nonResourceURLs", "string", True),
}
_SUBJECT: Schema = {
    1: ("kind", "string", False),
    2: ("apiGroup", "string", False),
    3: ("name", "string", False),
    4: ("namespace", "string", False),
}
_ROLE_REF: Schema = {1: ("apiGroup", "string", False), 2: ("kind", "string", False), 3: ("name", "string", False)}
_BINDING: Schema = {
    1: ("metadata", _OBJECT_META, False),
    2: ("subjects", _SUBJECT, True),
    3: ("roleRef", _ROLE_REF, False),
}
_ROLE: Schema = {1: ("metadata", _OBJECT_META, False), 2: ("rules", _POLICY_RULE, True)}
_RESOURCE_ATTRIBUTES: Schema = {
    1: ("namespace", "string", False),
    2: ("verb", "string", False),
    3: ("group", "string", False),
    4: ("version", "string", False),
    5: ("resource", "string", False),
    6: ("subresource", "string", False),
    7: ("name", "string", False),
}
_NON_RESOURCE_ATTRIBUTES: Schema = {1: ("path", "string", False), 2: ("verb", "string", False)}

KINDS: dict[tuple[str, str], Schema] = {
    ("v1", "Namespace"): {
        1: ("metadata", _OBJECT_META, False),
        2: ("spec", {1: ("finalizers", "string", True)}, False),
    },
    ("v1", "ServiceAccount"): {
        1: ("metadata", _OBJECT_META, False),
        4: ("automountServiceAccountToken", "bool", False),
    },
    ("authentication.k8s.io/v1", "TokenRequest"): {
        1: ("metadata", _OBJECT_META, False),
        2: ("spec", {1: ("audiences", "string", True), 4: ("expirationSeconds", "int", False)}, False),
    },
    ("authentication.k8s.io/v1", "SelfSubjectReview"): {1: ("metadata", _OBJECT_META, False)},
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): {
        1: ("metadata", _OBJECT_META, False),
        2: (
            "spec",
            {
                1: ("resourceAttributes", _RESOURCE_ATTRIBUTES, False),
                2: ("nonResourceAttributes", _NON_RESOURCE_ATTRIBUTES, False),
            },
            False,
        ),
    },
    ("rbac.authorization.k8s.io/v1", "Role"): _ROLE,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): _ROLE,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): _BINDING,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): _BINDING,
}


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data) or shift > 63:
            raise bad_request("protobuf: truncated varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """The (field number, value) pairs of one message: varints as ints, length-delimited as bytes."""
    fields: list[tuple[int, int | bytes]] = []
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, position = _varint(data, position)
            fields.append((number, value))
        elif wire == 2:
            size, position = _varint(data, position)
            if position + size > len(data):
                raise bad_request("protobuf: truncated field")
            fields.append((number, data[position : position + size]))
            position += size
        elif wire in (1, 5):
            position += 8 if wire == 1 else 4
        else:
            raise bad_request(f"protobuf: unsupported wire type {wire}")
    return fields


def _decode(data: bytes, schema: Schema, depth: int = 0) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise bad_request("protobuf: message nested too deeply")
    result: dict[str, Any] = {}
    for number, raw in _fields(data):
        if number not in schema:
            continue
        name, kind, repeated = schema[number]
        value: Any
        if kind == "int":
            value = raw if isinstance(raw, int) else None
        elif kind == "bool":
            value = bool(raw) if isinstance(raw, int) else None
        elif not isinstance(raw, bytes):
            raise bad_request(f"protobuf: field {name} has the wrong wire type")
        elif kind == "bytes":
            value = raw
        elif kind == "string":
            value = raw.decode("utf-8", errors="strict")
        elif kind == "map":
            entry = dict(_fields(raw))
            key, item = entry.get(1, b""), entry.get(2, b"")
            if not isinstance(key, bytes) or not isinstance(item, bytes):
                raise bad_request(f"protobuf: bad map entry in {name}")
            result.setdefault(name, {})[key.decode()] = item.decode()
            continue
        elif isinstance(kind, dict):
            value = _decode(raw, kind, depth + 1)
        else:
            continue
        if repeated:
            result.setdefault(name, []).append(value)
        elif value != "":  # gogo-protobuf writes empty strings; upstream's JSON omits them (omitempty)
            result[name] = value
    return result


def decode(body: bytes) -> dict[str, Any]:
    """The JSON-shaped object of a Kubernetes protobuf body; 415 for a kind not mapped here."""
    if not body.startswith(MAGIC):
        raise bad_request("protobuf: the body does not start with the Kubernetes magic number")
    unknown = _decode(body[len(MAGIC) :], _UNKNOWN)
    type_meta = unknown.get("typeMeta") or {}
    api_version, kind = type_meta.get("apiVersion", ""), type_meta.get("kind", "")
    schema = KINDS.get((api_version, kind))
    if schema is None:
        raise ApiError(
            415, "UnsupportedMediaType", f"protobuf bodies of {kind} ({api_version}) are not supported; send JSON"
        )
    decoded = _decode(unknown.get("raw") or b"", schema)
    return {"apiVersion": api_version, "kind": kind, **decoded}


def decode_body(raw: bytes, content_type: str) -> Any:
    """A request body as JSON-shaped data, whether it came as JSON or as Kubernetes protobuf."""
    if content_type == PROTOBUF:
        return decode(raw)
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise bad_request(f"the request body is not JSON: {exc}") from exc
