"""ownerReferences: who controls an object, and the reference a controller stamps on what it creates."""

from __future__ import annotations

from typing import Any

from elastic_training.local.cluster.resources import RESOURCE_TYPES, ApiError, ResourceType
from elastic_training.local.cluster.store import Obj, Store


def controller_ref(obj: Obj) -> dict[str, Any] | None:
    """The ownerReference with ``controller: true``, if any."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return next((ref for ref in refs if ref.get("controller")), None)


def owned_by(obj: Obj, owner_uid: str) -> bool:
    ref = controller_ref(obj)
    return ref is not None and ref.get("uid") == owner_uid


def owner_reference(owner: Obj) -> dict[str, Any]:
    """A controller reference to ``owner`` that blocks its foreground deletion (as controllers set it)."""
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def type_of_reference(ref: dict[str, Any]) -> ResourceType | None:
    """The served resource type an ownerReference points at, or None."""
    api_version = str(ref.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    for rtype in RESOURCE_TYPES:
        if rtype.kind == ref.get("kind") and rtype.group == group and rtype.version == version:
            return rtype
    return None


def delete_all(store: Store, rtype: ResourceType, objs: list[Obj], propagation_policy: str | None = None) -> None:
    """Delete objects a controller acts on, skipping those already being deleted or already gone."""
    for obj in objs:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        try:
            store.delete(rtype, str(meta.get("namespace", "")), meta["name"], propagation_policy=propagation_policy)
        except ApiError as err:
            if err.code != 404:
                raise
