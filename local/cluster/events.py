"""Kubernetes ``v1`` Events that the local controllers record about the objects they act on.

As client-go's event recorder, a failed write (the namespace is terminating or gone) is logged
and dropped: recording an event never fails the reconcile that asked for it.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from elastic_training.local.cluster.resources import EVENTS, ApiError
from elastic_training.local.cluster.store import Obj, Store, now_rfc3339

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"


NOTE_LENGTH_LIMIT = 1024  # k8s.io/apimachinery/pkg/api/validation NoteLengthLimit: an event's message


def record_event(
    store: Store, obj: Obj, event_type: str, reason: str, message: str, component: str, action: str = ""
) -> Obj | None:
    """Create an Event about ``obj`` (as ``kubectl describe`` and ``kubectl get events`` show them);
    None when the API refused it. ``action``: what the component was doing (the events API's ``action``, e.g.
    kube-scheduler's ``Scheduling``); a message past :data:`NOTE_LENGTH_LIMIT` is cut with `` ...`` as
    kube-scheduler's ``truncateMessage`` cuts it."""
    if len(message) > NOTE_LENGTH_LIMIT:
        message = message[: NOTE_LENGTH_LIMIT - 4] + " ..."
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
    if action:
        event["action"] = action
    try:
        return store.create(EVENTS, event, namespace=namespace)
    except ApiError as err:
        log.debug("%s: event %s on %s/%s dropped: %s", component, reason, namespace, meta.get("name"), err.message)
        return None
