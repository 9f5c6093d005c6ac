"""The API faults' rules: requests failed or delayed on their way to kube-apiserver (:mod:`.server`'s proxy).

:class:`ApiFaults` keeps the rules; its aiohttp middleware applies them to each proxied request before it is passed
on, answering a failed one with the ``Status`` kube-apiserver would send for that code. A rule that cannot be kept
(a bad code, count, probability or regex) is refused with :class:`~.kube_faults.FaultError`, which the fault
endpoint answers 400.
"""

from __future__ import annotations

import asyncio
import random
import re
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from aiohttp import web

from elastic_training.local.faults.kube_faults import FaultError

FAULTS_PATH = "/_local/faults"

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    429: "TooManyRequests",
    500: "InternalError",
    502: "BadGateway",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    """A ``metav1.Status`` failure, as kube-apiserver answers an error."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


@dataclass
class FailRule:
    """Fail matching requests with ``code``: the next ``count`` of them, or each with ``probability``; with
    ``until`` (Unix time), only until then (a burst bounded in time, whoever's requests it meets)."""

    code: int
    count: int | None = None
    probability: float | None = None
    path: str | None = None  # a regex searched in the request path
    method: str | None = None
    id: int = 0
    # A 429's Retry-After: 1 is what kube-apiserver's max-in-flight and priority-and-fairness filters say; 0
    # (valid HTTP, "retry now") lets a test burst outlast a client's retries without waiting a second each.
    retry_after: int = 1
    until: float | None = None

    def applies(self, method: str, path: str) -> bool:
        if self.until is not None and time.time() >= self.until:
            return False
        if self.method and self.method.upper() != method:
            return False
        if self.path and not re.search(self.path, path):
            return False
        if self.count is not None and self.count <= 0:
            return False
        return self.probability is None or random.random() < self.probability


@dataclass
class LatencyRule:
    """Delay matching requests by ``seconds`` before they are served."""

    seconds: float
    path: str | None = None
    method: str | None = None
    id: int = 0

    def applies(self, method: str, path: str) -> bool:
        if self.method and self.method.upper() != method:
            return False
        return not self.path or re.search(self.path, path) is not None


@dataclass
class ApiFaults:
    """The active API fault rules."""

    failures: list[FailRule] = field(default_factory=list)
    latencies: list[LatencyRule] = field(default_factory=list)
    injected: int = 0  # requests failed so far
    _next_id: int = 1

    def fail_requests(
        self,
        code: int = 500,
        *,
        count: int | None = None,
        probability: float | None = None,
        path: str | None = None,
        method: str | None = None,
        retry_after: int = 1,
        seconds: float | None = None,
    ) -> FailRule:
        """Add a failure rule; with neither ``count`` nor ``probability`` every matching request fails, for
        ``seconds`` from now when given (else until cleared).

        A 429 carries ``Retry-After: <retry_after>`` (seconds).
        """
        if seconds is not None and not 0 < seconds <= 3600:
            raise FaultError(f"seconds must be over 0 and at most 3600, got {seconds}")
        if not 400 <= code <= 599:
            raise FaultError(f"code must be an HTTP error status (400-599), got {code}")
        if count is not None and count < 1:
            raise FaultError("count must be at least 1")
        if probability is not None and not 0.0 <= probability <= 1.0:
            raise FaultError("probability must be between 0 and 1")
        if not 0 <= retry_after <= 600:
            raise FaultError("retryAfter must be between 0 and 600 seconds")
        _check_regex(path)
        until = None if seconds is None else time.time() + seconds
        rule = FailRule(code, count, probability, path, method, self._take_id(), retry_after, until)
        self.failures.append(rule)
        return rule

    def add_latency(self, seconds: float, *, path: str | None = None, method: str | None = None) -> LatencyRule:
        """Add a latency rule."""
        if not 0 <= seconds <= 600:
            raise FaultError("seconds must be between 0 and 600")
        _check_regex(path)
        rule = LatencyRule(seconds, path, method, self._take_id())
        self.latencies.append(rule)
        return rule

    def clear(self) -> None:
        self.failures.clear()
        self.latencies.clear()

    def describe(self) -> dict[str, Any]:
        return {
            "failures": [asdict(rule) for rule in self.failures],
            "latencies": [asdict(rule) for rule in self.latencies],
            "injected": self.injected,
        }

    def _take_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    async def apply(self, method: str, path: str) -> FailRule | None:
        """Sleep for matching latency rules, then the failure rule that fires, if one does."""
        delay = sum(rule.seconds for rule in self.latencies if rule.applies(method, path))
        if delay:
            await asyncio.sleep(delay)
        for rule in self.failures:
            if rule.applies(method, path):
                if rule.count is not None:
                    rule.count -= 1
                    if rule.count == 0:
                        self.failures.remove(rule)
                self.injected += 1
                return rule
        return None

    def middleware(self) -> Callable[..., Awaitable[web.StreamResponse]]:
        """An aiohttp middleware applying the rules to every request outside ``/_local/``."""

        @web.middleware
        async def inject_faults(
            request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
        ) -> web.StreamResponse:
            if request.path.startswith("/_local/") or not (self.failures or self.latencies):
                return await handler(request)
            rule = await self.apply(request.method, request.path)
            if rule is not None:
                reason = _REASONS.get(rule.code, "InternalError")
                headers = {"Retry-After": str(rule.retry_after)} if rule.code == 429 else None
                body = status_body(rule.code, reason, f"injected fault: {reason} (rule {rule.id})")
                return web.json_response(body, status=rule.code, headers=headers)
            return await handler(request)

        return inject_faults


def _check_regex(pattern: str | None) -> None:
    if pattern is None:
        return
    try:
        re.compile(pattern)
    except re.error as exc:
        raise FaultError(f"path is not a valid regular expression: {exc}") from exc


def parse_signal(value: Any) -> int:
    """A signal given as a number, ``KILL`` or ``SIGKILL``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return int(signal.Signals(value))
    text = str(value).upper()
    if text.isdigit():
        return int(signal.Signals(int(text)))
    name = text if text.startswith("SIG") else f"SIG{text}"
    try:
        return int(signal.Signals[name])
    except KeyError as exc:
        raise FaultError(f"unknown signal {value!r}") from exc
