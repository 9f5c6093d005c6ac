"""kube-apiserver's audit log, read back: one event per request as it was received.

The cluster starts kube-apiserver with ``--audit-log-path`` (JSON lines) and a policy that records every request at
the ``Metadata`` level and only at the ``RequestReceived`` stage (:data:`configs.AUDIT_POLICY`), so a watch or a
log follow is one event however long it stays open. Tests count what a client asked from a position in the file.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class AuditEvent:
    """One request as the audit log records it at ``RequestReceived``."""

    verb: str
    api_group: str
    resource: str
    namespace: str | None
    name: str | None
    subresource: str | None
    username: str
    user_agent: str
    request_uri: str
    received_at: float  # requestReceivedTimestamp, Unix time

    def query(self, key: str) -> str | None:
        """A query parameter of the request (``resourceVersion``, ``labelSelector``, ...)."""
        values = parse_qs(urlsplit(self.request_uri).query).get(key)
        return values[0] if values else None


def position(path: Path) -> int:
    """The end of the log now: events written after it are 'since' this position."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def events_since(path: Path, offset: int) -> list[AuditEvent]:
    """The events written after ``offset`` (complete lines only)."""
    try:
        with open(path, "rb") as log:
            log.seek(offset)
            data = log.read()
    except FileNotFoundError:
        return []
    complete = data[: data.rfind(b"\n") + 1]
    return [event(json.loads(line)) for line in complete.splitlines() if line.strip()]


def event(raw: dict[str, Any]) -> AuditEvent:
    """One ``audit.k8s.io/v1`` Event as the project's :class:`AuditEvent`."""
    ref = raw.get("objectRef") or {}
    received = datetime.datetime.fromisoformat(str(raw.get("requestReceivedTimestamp")).replace("Z", "+00:00"))
    return AuditEvent(
        verb=str(raw.get("verb", "")),
        api_group=str(ref.get("apiGroup", "")),
        resource=str(ref.get("resource", "")),
        namespace=ref.get("namespace"),
        name=ref.get("name"),
        subresource=ref.get("subresource"),
        username=str((raw.get("user") or {}).get("username", "")),
        user_agent=str(raw.get("userAgent", "")),
        request_uri=str(raw.get("requestURI", "")),
        received_at=received.timestamp(),
    )
