"""The API server's audit log: one event per resource request, as it arrives.

Follows kube-apiserver's audit (``staging/src/k8s.io/apiserver/pkg/apis/audit/types.go``, ``Event``; recorded by
``pkg/endpoints/filters/audit.go`` from the same request attributes authorization uses): the verb (``get``,
``list``, ``watch``, ``create``, ``update``, ``patch``, ``delete``, ``deletecollection``), the ``objectRef``
(apiGroup, resource, namespace, name, subresource), the user and the user agent, the request URI with its query.
Only the ``RequestReceived`` stage, at the ``Metadata`` level: a watch or a log follow is one event however long it
stays open. Kept in memory and bounded (the oldest events are dropped), for tests that count what a client asks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

__all__ = ["AuditEvent", "AuditLog"]

MAX_EVENTS = 100_000


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


class AuditLog:
    """The recorded events, oldest first (at most ``limit``)."""

    def __init__(self, limit: int = MAX_EVENTS) -> None:
        self._events: deque[AuditEvent] = deque(maxlen=limit)
        self.recorded = 0  # every event ever recorded, dropped ones included: a position to count from

    def record(self, event: AuditEvent) -> None:
        self._events.append(event)
        self.recorded += 1

    def since(self, position: int) -> list[AuditEvent]:
        """The events recorded after ``position`` (a past value of :attr:`recorded`) that are still kept."""
        kept = len(self._events)
        return list(self._events)[max(0, kept - (self.recorded - position)) :]
