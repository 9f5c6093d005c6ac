"""Server-side apply (``PATCH`` with ``application/apply-patch+yaml``), in the small.

Follows ``structured-merge-diff`` as the API server uses it, for what ``kubectl apply --server-side``
needs: the applied configuration is merged into the live object (or creates it); each field manager's
applied fields are recorded in ``metadata.managedFields`` (``operation: Apply``, ``fieldsV1``); a field
the same manager applied before and leaves out now is removed, unless another manager applied it
too; a field another Apply manager owns with a different value is a 409 ``Conflict`` naming that
manager, unless ``force=true``, which takes it over. ``fieldManager`` is required.

Simplifications, and why they are safe here: every list is atomic (replaced whole; upstream merges
``x-kubernetes-list-type: map`` lists such as ``replicatedJobs`` and containers by key), so two
managers cannot share entries of one list; writes that are not apply (create, update, merge patch)
record no manager, so they never conflict with an apply.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from elastic_training.local.cluster.resources import ApiError, ResourceType, bad_request
from elastic_training.local.cluster.store import now_rfc3339

APPLY_PATCH = "application/apply-patch+yaml"
Obj = dict[str, Any]
Path = tuple[str, ...]
# Fields the server owns; an applied configuration's values for them are ignored, as upstream does.
_SERVER_METADATA = (
    "managedFields",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
)


def parse_applied(raw: bytes, rtype: ResourceType, name: str | None) -> Obj:
    """The applied configuration: YAML (or JSON) naming the same kind, version and object."""
    try:
        applied = yaml.safe_load(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise bad_request(f"error decoding YAML: {exc}") from exc
    if not isinstance(applied, dict):
        raise bad_request("the applied configuration must be an object")
    if applied.get("apiVersion") != rtype.api_version or applied.get("kind") != rtype.kind:
        raise bad_request(
            f"the applied configuration must have apiVersion {rtype.api_version!r} and kind {rtype.kind!r}"
        )
    meta = applied.get("metadata")
    if not isinstance(meta, dict) or meta.get("name") != name:
        raise bad_request(f"the name in the applied configuration must be {name!r}")
    for key in _SERVER_METADATA:
        meta.pop(key, None)
    return applied


def leaf_paths(value: Any, prefix: Path = ()) -> Iterator[Path]:
    """Every owned path of a configuration: object keys recursively, lists and scalars as leaves."""
    if isinstance(value, Mapping):  # an empty object owns nothing and clears nothing
        for key, item in value.items():
            if prefix == () and key in ("apiVersion", "kind", "status"):  # status is not applied to the object
                continue
            yield from leaf_paths(item, (*prefix, str(key)))
    elif prefix:
        yield prefix


def _fields_v1(paths: set[Path]) -> Obj:
    tree: Obj = {}
    for path in sorted(paths):
        node = tree
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return tree


def _paths_of(fields: Mapping[str, Any], prefix: Path = ()) -> Iterator[Path]:
    if not fields:
        yield prefix
        return
    for key, child in fields.items():
        if key.startswith("f:"):
            yield from _paths_of(child, (*prefix, key[2:]))


def _owned(entry: Mapping[str, Any]) -> set[Path]:
    return {path for path in _paths_of(entry.get("fieldsV1") or {}) if path}


def _get(obj: Any, path: Path) -> tuple[bool, Any]:
    for part in path:
        if not isinstance(obj, Mapping) or part not in obj:
            return False, None
        obj = obj[part]
    return True, obj


def _remove(obj: Obj, path: Path) -> None:
    parents = [obj]
    for part in path[:-1]:
        child = parents[-1].get(part)
        if not isinstance(child, dict):
            return
        parents.append(child)
    parents[-1].pop(path[-1], None)
    for depth in range(len(parents) - 1, 0, -1):  # drop objects the removal left empty
        if not parents[depth]:
            parents[depth - 1].pop(path[depth - 1], None)


def _set(obj: Obj, path: Path, value: Any) -> None:
    for part in path[:-1]:
        child = obj.get(part)
        if not isinstance(child, dict):
            child = obj[part] = {}
        obj = child
    obj[path[-1]] = copy.deepcopy(value)


def _path_text(path: Path) -> str:
    return "." + ".".join(path)


def apply(live: Obj | None, applied: Obj, manager: str, force: bool, rtype: ResourceType) -> Obj:
    """The object after ``manager`` applies ``applied`` to ``live`` (None: the object does not exist yet)."""
    if not manager:
        raise ApiError(
            422,
            "Invalid",
            'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
        )
    result: Obj = copy.deepcopy(live) if live is not None else {"apiVersion": rtype.api_version, "kind": rtype.kind}
    entries: list[Obj] = [dict(e) for e in (result.get("metadata") or {}).get("managedFields") or []]
    mine = next((e for e in entries if e.get("manager") == manager and e.get("operation") == "Apply"), None)
    others = [e for e in entries if e is not mine and e.get("operation") == "Apply"]
    new_paths = set(leaf_paths(applied))
    conflicts: list[tuple[str, Path]] = []
    for entry in others:
        for path in _owned(entry) & new_paths:
            if _get(result, path) != _get(applied, path):
                conflicts.append((str(entry.get("manager")), path))
    if conflicts and not force:
        listed = "\n".join(f'- conflict with "{who}": {_path_text(path)}' for who, path in sorted(conflicts))
        raise ApiError(
            409,
            "Conflict",
            f"Apply failed with {len(conflicts)} conflict{'s' if len(conflicts) > 1 else ''}: "
            + (listed if len(conflicts) > 1 else listed[2:]),
        )
    for entry in others:  # with force, the taken fields change owner
        taken = {path for _, path in conflicts if path in _owned(entry)}
        if taken:
            entry["fieldsV1"] = _fields_v1(_owned(entry) - taken)
    still_owned = set().union(*(_owned(e) for e in others)) if others else set()
    if mine is not None:
        for path in _owned(mine) - new_paths - still_owned:
            _remove(result, path)
    for path in sorted(new_paths):
        _, value = _get(applied, path)
        _set(result, path, value)
    entry = {
        "manager": manager,
        "operation": "Apply",
        "apiVersion": rtype.api_version,
        "time": now_rfc3339(),
        "fieldsType": "FieldsV1",
        "fieldsV1": _fields_v1(new_paths),
    }
    kept = [e for e in entries if e is not mine and (e.get("operation") != "Apply" or _owned(e))]
    result.setdefault("metadata", {})["managedFields"] = [*kept, entry]
    return result
