"""The node agent's client of kube-apiserver: JSON requests and watch streams over HTTPS, with a bearer token.

Stands for the part of client-go the kubelet uses: a REST client built from a kubeconfig (the server URL, the
cluster's CA, the token) and the list-then-watch of a reflector (a list gives a ``resourceVersion``, a watch goes on
from it with bookmarks; a ``410 Gone`` asks for a new list). It does not cache, retry a failed write, or negotiate
protobuf: callers decide what a failure means, and every body is JSON.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp

from elastic_training.local.kube_objects import Obj as Obj  # re-exported: the modules beside use it from here
from elastic_training.local.kubeconfig import read_endpoint

STRATEGIC_MERGE: Final = "application/strategic-merge-patch+json"
MERGE_PATCH: Final = "application/merge-patch+json"
REQUEST_TIMEOUT_SECONDS = 30.0
WATCH_TIMEOUT_SECONDS = 290  # the server ends each watch near this; the reflector's are 5-10 min
BACKOFF_INITIAL_SECONDS = 0.2
BACKOFF_MAX_SECONDS = 10.0
# What a request can fail with short of an answer: the connection, TLS, a timeout.
TRANSPORT_ERRORS: Final = (aiohttp.ClientError, OSError, TimeoutError)


class ApiStatusError(Exception):
    """kube-apiserver answered with an error ``Status`` (or no JSON at all)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message


class WatchExpired(Exception):
    """The watch's resourceVersion is too old (``410 Gone``): list again."""


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watch: ``ADDED``, ``MODIFIED``, ``DELETED`` or ``BOOKMARK``, and the object."""

    type: str
    object: Obj


class Backoff:
    """Capped exponential backoff with full jitter, as client-go's rate limiters; :meth:`reset` on success."""

    def __init__(self, initial: float = BACKOFF_INITIAL_SECONDS, cap: float = BACKOFF_MAX_SECONDS) -> None:
        self._initial = initial
        self._cap = cap
        self._next = initial

    def reset(self) -> None:
        """Back to the initial delay (after a success)."""
        self._next = self._initial

    async def sleep(self) -> None:
        """Wait a random time up to the current delay, then double the delay (up to the cap)."""
        delay = random.uniform(0, self._next)
        self._next = min(self._next * 2, self._cap)
        await asyncio.sleep(delay)


class ApiClient:
    """Requests to one kube-apiserver; open it on the event loop that uses it, :meth:`close` it there."""

    def __init__(self, kubeconfig: Path) -> None:
        endpoint = read_endpoint(kubeconfig)
        self.url = endpoint.url
        self._headers = {"Accept": "application/json"}
        if endpoint.token:
            self._headers["Authorization"] = f"Bearer {endpoint.token}"
        self._ssl = endpoint.ssl_context()
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else False, limit=32)
            self._session = aiohttp.ClientSession(connector=connector, headers=self._headers)
        return self._session

    async def close(self) -> None:
        """Close the connections (on the loop that used them)."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        """One request; the decoded JSON answer, or :class:`ApiStatusError` for any status but 2xx."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": content_type} if data is not None else {}
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS)
        async with self._open().request(
            method, self.url + path, data=data, params=params, headers=headers, timeout=timeout
        ) as response:
            text = await response.text()
            if response.status >= 300:
                raise status_error(response.status, text)
            return json.loads(text) if text else {}

    async def watch(self, path: str, params: Mapping[str, str], resource_version: str) -> AsyncIterator[WatchEvent]:
        """The events of one watch from ``resource_version`` until the server ends it; :class:`WatchExpired` on 410."""
        query = {
            **params,
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_TIMEOUT_SECONDS),
        }
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=REQUEST_TIMEOUT_SECONDS)
        async with self._open().get(self.url + path, params=query, timeout=timeout) as response:
            if response.status == 410:
                raise WatchExpired(await response.text())
            if response.status >= 300:
                raise status_error(response.status, await response.text())
            async for line in response.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    raise _watch_error(event.get("object") or {})
                yield WatchEvent(str(event.get("type")), event.get("object") or {})


def status_error(code: int, text: str) -> ApiStatusError:
    """The error for an answer ``code`` whose body is ``text`` (a ``Status`` when the server wrote one)."""
    try:
        status = json.loads(text)
    except ValueError:
        return ApiStatusError(code, "", text.strip()[:500])
    if not isinstance(status, dict):
        return ApiStatusError(code, "", text.strip()[:500])
    return ApiStatusError(code, str(status.get("reason", "")), str(status.get("message", "")))


def _watch_error(status: Obj) -> Exception:
    code = int(status.get("code") or 500)
    if code == 410:
        return WatchExpired(str(status.get("message", "")))
    return ApiStatusError(code, str(status.get("reason", "")), str(status.get("message", "")))
