"""Kubernetes ``v1`` Events that the local controllers record about the objects they act on."""

from __future__ import annotations

import secrets
from typing import Any

from local.cluster.resources import EVENTS
from local.cluster.store import Obj, Store, now_rfc3339

NORMAL = "Normal"
WARNING = "Warning"


def record_event(store: Store, obj: Obj, event_type: str, reason: str, message: str, component: str) -> Obj:
    """Create an Event about ``obj`` (as ``kubectl describe`` and ``kubectl get events`` show them)."""
    meta = obj.get("metadata", {})
    namespace = meta.get("namespace") or "default"
    stamp = now_rfc3339()
    involved: dict[str, Any] = {
        "apiVersion": obj.get("apiVersion", ""),
        "kind": obj.get("kind", ""),
        "name": meta.get("name", ""),
        "namespace": namespace,
        "uid": meta.get("uid", ""),
        "resourceVersion": meta.get("resourceVersion", ""),
    }
    event: Obj = {
        "metadata": {"name": f"{meta.get('name', 'object')}.{secrets.token_hex(8)}", "namespace": namespace},
        "involvedObject": involved,
        "type": event_type,
        "reason": reason,
        "message": message,
        "count": 1,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": component,
    }
    return store.create(EVENTS, event, namespace=namespace)
