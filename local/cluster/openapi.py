"""OpenAPI v3 discovery (``/openapi/v3`` and one document per group-version) and strict field validation.

Follows the API server's ``/openapi/v3`` layout: the index lists ``api/v1``, ``apis/<group>/<version>``
with a ``serverRelativeURL`` carrying the document's hash; each document has the resource paths with
their operations tagged ``x-kubernetes-group-version-kind`` and ``x-kubernetes-action``, and the kinds'
schemas under ``components.schemas``. Two clients depend on it: ``kubectl explain`` (reads the schema
of the kind behind a path) and ``kubectl apply``/``create`` (looks for the ``fieldValidation`` query
parameter on the kind's PATCH operation; when it is there kubectl leaves validation to the server and
sends ``fieldValidation=Strict``). :func:`unknown_fields` is that server side: an unknown field is a
400 ``BadRequest`` with upstream's ``strict decoding error: unknown field "spec.x"`` message.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

from elastic_training.local.cluster.kueue_schemas import KUEUE_KIND_SCHEMAS
from elastic_training.local.cluster.openapi_schemas import KIND_SCHEMAS as _BUILT_IN_SCHEMAS
from elastic_training.local.cluster.openapi_schemas import SHARED_SCHEMAS, Schema
from elastic_training.local.cluster.resources import (
    CUSTOM_RESOURCE_TYPES,
    RESOURCE_TYPES,
    ApiError,
    ResourceType,
    bad_request,
)

PREFIX = "/openapi/v3"
KIND_SCHEMAS: dict[tuple[str, str, str], tuple[str, Schema]] = {**_BUILT_IN_SCHEMAS, **KUEUE_KIND_SCHEMAS}
_PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)
# A CRD's PATCH takes no strategic merge patch (apiextensions-apiserver's builder leaves it out); kubectl
# apply reads this list to choose between a strategic merge patch and a JSON merge patch.
_CUSTOM_PATCH_TYPES = tuple(t for t in _PATCH_TYPES if t != "application/strategic-merge-patch+json")
_FIELD_VALIDATION_DOC = (
    "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing "
    "unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently "
    "dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. - Warn: "
    "This will send a warning via the standard warning response header for each unknown field that is dropped from "
    "the object, and for each duplicate field that is encountered. - Strict: This will fail the request with a "
    "BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are "
    "present. The error returned from the server will contain all unknown and duplicate fields encountered."
)


def _group_version_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _schema_ref(rtype: ResourceType) -> str:
    name, _ = KIND_SCHEMAS[(rtype.group, rtype.version, rtype.kind)]
    return f"#/components/schemas/{name}"


def _parameter(name: str, where: str, description: str, required: bool = False) -> dict[str, Any]:
    parameter: dict[str, Any] = {
        "name": name,
        "in": where,
        "description": description,
        "schema": {"type": "string", "uniqueItems": True},
    }
    if required:
        parameter["required"] = True
    return parameter


def _operation(rtype: ResourceType, action: str, verb: str, *, body: bool = False, patch: bool = False) -> Any:
    gvk = {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
    returns = {"$ref": _schema_ref(rtype)}
    operation: dict[str, Any] = {
        "description": f"{verb} the specified {rtype.kind}",
        "operationId": f"{action}{rtype.kind}",
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": returns}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
    }
    if body:
        operation["parameters"] = [
            _parameter("dryRun", "query", "When present, indicates that modifications should not be persisted."),
            _parameter(
                "fieldManager",
                "query",
                "fieldManager is a name associated with the actor or entity that is making these changes.",
            ),
            _parameter("fieldValidation", "query", _FIELD_VALIDATION_DOC),
        ]
        patch_types = _CUSTOM_PATCH_TYPES if rtype in CUSTOM_RESOURCE_TYPES else _PATCH_TYPES
        types = patch_types if patch else ("application/json",)
        schema = {"type": "object"} if patch else returns
        operation["requestBody"] = {"content": {t: {"schema": schema} for t in types}, "required": True}
    return operation


def _paths(rtype: ResourceType) -> Iterator[tuple[str, dict[str, Any]]]:
    base = "/api/v1" if not rtype.group else f"/apis/{rtype.group}/{rtype.version}"
    collection = f"{base}/namespaces/{{namespace}}/{rtype.plural}" if rtype.namespaced else f"{base}/{rtype.plural}"
    scope = [_parameter("namespace", "path", "object name and auth scope", True)] if rtype.namespaced else []
    name = [_parameter("name", "path", f"name of the {rtype.kind}", True)]
    yield (
        collection,
        {
            "get": _operation(rtype, "list", "list or watch objects of kind"),
            "post": _operation(rtype, "post", "create a", body=True),
            "parameters": scope,
        },
    )
    yield (
        f"{collection}/{{name}}",
        {
            "get": _operation(rtype, "get", "read"),
            "put": _operation(rtype, "put", "replace", body=True),
            "patch": _operation(rtype, "patch", "partially update", body=True, patch=True),
            "delete": _operation(rtype, "delete", "delete a"),
            "parameters": name + scope,
        },
    )
    if rtype.has_status:
        yield (
            f"{collection}/{{name}}/status",
            {
                "get": _operation(rtype, "get", "read status of"),
                "put": _operation(rtype, "put", "replace status of", body=True),
                "patch": _operation(rtype, "patch", "partially update status of", body=True, patch=True),
                "parameters": name + scope,
            },
        )
    if rtype.namespaced:
        yield f"{base}/{rtype.plural}", {"get": _operation(rtype, "list", "list or watch objects of kind")}


@cache
def _documents() -> dict[str, bytes]:
    """Each served group-version's document, serialised once (the schemas never change while serving)."""
    documents: dict[str, bytes] = {}
    by_group_version: dict[str, list[ResourceType]] = {}
    for rtype in RESOURCE_TYPES:
        by_group_version.setdefault(_group_version_path(rtype.group, rtype.version), []).append(rtype)
    for key, rtypes in by_group_version.items():
        schemas: dict[str, Schema] = dict(SHARED_SCHEMAS)
        paths: dict[str, Any] = {}
        for rtype in rtypes:
            name, schema = KIND_SCHEMAS[(rtype.group, rtype.version, rtype.kind)]
            schemas[name] = schema
            paths.update(_paths(rtype))
        document = {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "unversioned"},
            "paths": paths,
            "components": {"schemas": schemas},
        }
        documents[key] = json.dumps(document, separators=(",", ":"), sort_keys=True).encode()
    return documents


def index() -> dict[str, Any]:
    """``/openapi/v3``: every group-version document and its content-addressed URL."""
    return {
        "paths": {
            key: {"serverRelativeURL": f"{PREFIX}/{key}?hash={hashlib.sha512(body).hexdigest().upper()}"}
            for key, body in _documents().items()
        }
    }


def document(group_version_path: str) -> bytes | None:
    """``/openapi/v3/<api/v1|apis/g/v>`` as JSON bytes, or None when not served."""
    return _documents().get(group_version_path.strip("/"))


# -- strict field validation ---------------------------------------------------------------------


def _resolve(schema: Schema) -> Schema:
    while True:
        if "$ref" in schema:
            schema = SHARED_SCHEMAS[schema["$ref"].rsplit("/", 1)[-1]]
        elif "allOf" in schema and len(schema["allOf"]) == 1:
            schema = schema["allOf"][0]
        else:
            return schema


def _unknown(value: Any, schema: Schema, path: str) -> Iterator[str]:
    schema = _resolve(schema)
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, Mapping):
        properties = schema.get("properties")
        if properties is not None:
            for key, item in value.items():
                where = f"{path}.{key}" if path else str(key)
                if key not in properties:
                    yield where
                else:
                    yield from _unknown(item, properties[key], where)
        elif isinstance(schema.get("additionalProperties"), dict):
            for key, item in value.items():
                yield from _unknown(item, schema["additionalProperties"], f"{path}.{key}" if path else str(key))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for position, item in enumerate(value):
            yield from _unknown(item, schema["items"], f"{path}[{position}]")


def unknown_fields(rtype: ResourceType, obj: Mapping[str, Any]) -> list[str]:
    """The paths of ``obj``'s fields that its kind's schema does not declare (``spec.replicatedJobs[0].x``)."""
    _, schema = KIND_SCHEMAS[(rtype.group, rtype.version, rtype.kind)]
    return list(_unknown(obj, schema, ""))


def check_field_validation(directive: str | None, rtype: ResourceType, obj: Mapping[str, Any]) -> None:
    """Honour ``?fieldValidation=``: Strict rejects unknown fields; Ignore and Warn (not reported here) pass."""
    if directive in (None, "", "Ignore", "Warn"):
        return
    if directive != "Strict":
        raise bad_request(f"fieldValidation: invalid value {directive!r}, must be Ignore, Warn or Strict")
    unknown = unknown_fields(rtype, obj)
    if unknown:
        fields = ", ".join(f'unknown field "{path}"' for path in unknown)
        raise ApiError(
            400,
            "BadRequest",
            f'{rtype.kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: '
            f"strict decoding error: {fields}",
        )
