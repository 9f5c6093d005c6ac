"""What an API path names: a resource type, a namespace, an object and a subresource.

Follows the API server's request-info resolution (kubernetes
``staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go``): ``/api/v1/...`` and
``/apis/<group>/<version>/...`` paths, ``namespaces/<ns>/<plural>[/<name>[/<subresource>]]`` or
``<plural>[/<name>[/<subresource>]]``; anything else is a 404. Used by the HTTP layer and by the
access filters alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from elastic_training.local.cluster.resources import ApiError, ResourceType, resource_type


@dataclass(frozen=True)
class Target:
    """What an API path names: a collection (``name`` None), an object, or an object's subresource."""

    rtype: ResourceType
    namespace: str | None
    name: str | None = None
    subresource: str | None = None


def not_found_path(path: str) -> ApiError:
    """The API server's 404 for a path it does not serve."""
    return ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")


def parse_target(group: str, version: str, rest: list[str], path: str) -> Target:
    """Turn the path segments after ``/api/v1`` or ``/apis/<g>/<v>`` into a :class:`Target`."""
    if len(rest) >= 3 and rest[0] == "namespaces":
        nested = resource_type(group, version, rest[2])
        if nested is not None and nested.namespaced:
            if len(rest) > 5:
                raise not_found_path(path)
            name = rest[3] if len(rest) > 3 else None
            sub = rest[4] if len(rest) > 4 else None
            return Target(nested, rest[1], name, sub)
    rtype = resource_type(group, version, rest[0])
    if rtype is None or len(rest) > 3 or (rtype.namespaced and len(rest) > 1):
        raise not_found_path(path)
    return Target(rtype, None, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None)
