"""PATCH bodies: JSON merge patch (RFC 7386) and JSON patch (RFC 6902).

Strategic merge patch is answered as a merge patch for the built-in types: for those served
here the only difference is that lists keyed by ``name`` (containers, env) are replaced instead
of merged. A custom resource has no strategic merge schema, so upstream refuses it with 415
``UnsupportedMediaType`` (``PatchResource`` in ``apiserver/pkg/endpoints/handlers/patch.go``,
whose message is ``negotiation.NewUnsupportedMediaTypeError``'s), and so does this server.
"""

from __future__ import annotations

import copy
from typing import Any

from elastic_training.local.cluster.resources import ApiError, bad_request

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
SUPPORTED_PATCH_TYPES = (MERGE_PATCH, STRATEGIC_MERGE_PATCH, JSON_PATCH)
CUSTOM_RESOURCE_PATCH_TYPES = (JSON_PATCH, MERGE_PATCH)


def check_patch_type(content_type: str, *, custom: bool) -> None:
    """``ApiError`` 415 for a patch type the resource does not take (before its body is read)."""
    accepted = CUSTOM_RESOURCE_PATCH_TYPES if custom else SUPPORTED_PATCH_TYPES
    if content_type not in accepted:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: " + ", ".join(accepted),
        )


def apply_patch(content_type: str, target: dict[str, Any], patch: Any, *, custom: bool = False) -> dict[str, Any]:
    """The patched copy of ``target``; ``ApiError`` 400/415/422 for a patch that cannot apply.

    ``custom``: ``target`` is a custom resource, which takes no strategic merge patch.
    """
    check_patch_type(content_type, custom=custom)
    if content_type in (MERGE_PATCH, STRATEGIC_MERGE_PATCH):
        if not isinstance(patch, dict):
            raise bad_request("a merge patch must be a JSON object")
        result = merge_patch(target, patch)
    elif content_type == JSON_PATCH:
        if not isinstance(patch, list):
            raise bad_request("a JSON patch must be a JSON array of operations")
        result = json_patch(target, patch)
    if not isinstance(result, dict):
        raise _unprocessable("the patched document is not an object")
    return result


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _unprocessable(message: str) -> ApiError:
    return ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: {message}")


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise _unprocessable(f"invalid JSON pointer {path!r}")
    if path == "":
        return []
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _index(container: list[Any], token: str, *, for_add: bool) -> int:
    if for_add and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise _unprocessable(f"invalid array index {token!r}")
    index = int(token)
    limit = len(container) if for_add else len(container) - 1
    if index > limit:
        raise _unprocessable(f"array index {index} out of range")
    return index


def _parent(doc: Any, parts: list[str]) -> Any:
    current = doc
    for token in parts[:-1]:
        if isinstance(current, dict):
            if token not in current:
                raise _unprocessable(f"path component {token!r} not found")
            current = current[token]
        elif isinstance(current, list):
            current = current[_index(current, token, for_add=False)]
        else:
            raise _unprocessable(f"cannot descend into {token!r}")
    return current


def _get(doc: Any, parts: list[str]) -> Any:
    if not parts:
        return doc
    parent = _parent(doc, parts)
    token = parts[-1]
    if isinstance(parent, dict):
        if token not in parent:
            raise _unprocessable(f"path {'/' + '/'.join(parts)!r} not found")
        return parent[token]
    if isinstance(parent, list):
        return parent[_index(parent, token, for_add=False)]
    raise _unprocessable(f"path {'/' + '/'.join(parts)!r} not found")


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _parent(doc, parts)
    token = parts[-1]
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, token, for_add=True), value)
    else:
        raise _unprocessable(f"cannot add at {'/' + '/'.join(parts)!r}")
    return doc


def _remove(doc: Any, parts: list[str]) -> tuple[Any, Any]:
    if not parts:
        raise _unprocessable("cannot remove the whole document")
    parent = _parent(doc, parts)
    token = parts[-1]
    if isinstance(parent, dict):
        if token not in parent:
            raise _unprocessable(f"path {'/' + '/'.join(parts)!r} not found")
        return doc, parent.pop(token)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, token, for_add=False))
    raise _unprocessable(f"cannot remove {'/' + '/'.join(parts)!r}")


def json_patch(target: Any, operations: list[Any]) -> Any:
    """RFC 6902: apply ``add/remove/replace/move/copy/test`` in order to a copy; all or nothing."""
    doc = copy.deepcopy(target)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise _unprocessable(f"invalid operation {operation!r}")
        op = operation["op"]
        parts = _pointer(operation["path"])
        if op in ("add", "replace", "test") and "value" not in operation:
            raise _unprocessable(f"operation {op!r} needs a value")
        if op == "add":
            doc = _add(doc, parts, copy.deepcopy(operation["value"]))
        elif op == "remove":
            doc, _ = _remove(doc, parts)
        elif op == "replace":
            _get(doc, parts)  # the target must exist
            doc, _ = _remove(doc, parts) if parts else (doc, None)
            doc = _add(doc, parts, copy.deepcopy(operation["value"]))
        elif op in ("move", "copy"):
            source = _pointer(operation.get("from"))
            if op == "move" and parts[: len(source)] == source and parts != source:
                raise _unprocessable("cannot move a value into one of its children")
            value = copy.deepcopy(_get(doc, source))
            if op == "move":
                doc, _ = _remove(doc, source)
            doc = _add(doc, parts, value)
        elif op == "test":
            if _get(doc, parts) != operation["value"]:
                raise _unprocessable(f"testing value {operation['path']} failed: test failed")
        else:
            raise _unprocessable(f"unknown operation {op!r}")
    return doc
