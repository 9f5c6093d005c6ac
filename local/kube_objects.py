"""What the node agent and the descriptions write into Kubernetes objects: the object type and the API's timestamps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

Obj = dict[str, Any]  # a Kubernetes object (or part of one) as JSON


def now_rfc3339(offset_seconds: float = 0.0) -> str:
    """The current time (plus ``offset_seconds``) as kube-apiserver writes it in metadata (seconds, UTC)."""
    return (datetime.now(UTC) + timedelta(seconds=offset_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
