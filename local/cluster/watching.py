"""Watch streams: newline-delimited ``{"type", "object"}`` JSON, as the API server sends them.

Semantics kept from the real server (``staging/src/k8s.io/apiserver/pkg/storage/cacher`` and
``pkg/endpoints/handlers/get.go``):
- no ``resourceVersion`` (or ``0``): synthetic ``ADDED`` for every current object, then live events;
- a ``resourceVersion``: every event after it, or one ``ERROR`` event carrying a 410 ``Status``
  when it is older than the kept history (HTTP status stays 200: the error is in the stream);
- a ``resourceVersion`` newer than the store's: the cacher waits up to 3 s for it
  (``watchCache.waitUntilFreshAndBlock``), then sends an ``ERROR`` event with a 504 ``Timeout``
  status "Too large resource version: <asked>, current: <have>", cause ``ResourceVersionTooLarge``
  and ``retryAfterSeconds: 1`` (``storage.NewTooLargeResourceVersionError``);
- selectors apply to both the old and new object of a change: an object that stops matching is
  sent as ``DELETED`` (its previous state, stamped with the event's resourceVersion), one that
  starts matching as ``ADDED``;
- the stream ends after ``timeoutSeconds``, or when it is absent or 0 after a random time
  between ``--min-request-timeout`` (1800 s) and twice that; expiry by fault injection and a
  watcher that fell behind (see :class:`local.cluster.store.Watch`) end it too, and a client
  that goes away unregisters it at once (the server cancels the handler);
- ``allowWatchBookmarks=true``: a ``BOOKMARK`` event (the kind, apiVersion and the current
  ``metadata.resourceVersion`` only) about once a minute, so a client resumes from a recent version.
"""

from __future__ import annotations

import asyncio
import copy
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from elastic_training.local.cluster.resources import ApiError, Cause, ResourceType, bad_request
from elastic_training.local.cluster.selectors import Selection
from elastic_training.local.cluster.store import Store, WatchEvent


def parse_resource_version(value: str | None) -> int | None:
    """A watch's starting resourceVersion; None for "start now with synthetic ADDED"."""
    if value is None or value in ("", "0"):
        return None
    try:
        version = int(value)
    except ValueError as exc:
        raise bad_request(f"invalid resourceVersion {value!r}") from exc
    if version < 0:
        raise bad_request(f"invalid resourceVersion {value!r}")
    return version


def translate(event: WatchEvent, rtype: ResourceType, selection: Selection) -> tuple[str, dict[str, Any]] | None:
    """The (type, object) a watcher with ``selection`` sees for ``event``, or None."""
    if event.rtype != rtype:
        return None
    new_matches = selection.matches(event.object)
    if event.type != "MODIFIED":
        return (event.type, event.object) if new_matches else None
    old_matches = selection.matches(event.old_object) if event.old_object is not None else new_matches
    if new_matches and old_matches:
        return "MODIFIED", event.object
    if new_matches:
        return "ADDED", event.object
    if old_matches and event.old_object is not None:
        previous = copy.deepcopy(event.old_object)
        previous["metadata"]["resourceVersion"] = str(event.resource_version)
        return "DELETED", previous
    return None


def _line(event_type: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode() + b"\n"


@dataclass(frozen=True)
class WatchOptions:
    """Server-side watch settings (upstream flags and constants; tests shorten them)."""

    min_request_timeout: float = 1800.0  # kube-apiserver --min-request-timeout
    bookmark_interval: float = 60.0  # the cacher's bookmarkFrequency
    freshness_wait: float = 3.0  # the watch cache's blockTimeout for a too-new resourceVersion


def parse_timeout(value: str | None, options: WatchOptions) -> float:
    """Seconds until the server ends the watch: ``timeoutSeconds``, or upstream's random default."""
    try:
        seconds = float(value) if value else 0.0
    except ValueError as exc:
        raise bad_request(f"timeoutSeconds: invalid number {value!r}") from exc
    if seconds < 0:
        raise bad_request("timeoutSeconds: must be greater than or equal to 0")
    if seconds == 0:
        return options.min_request_timeout * (1.0 + random.random())
    return seconds


def too_large(asked: int, current: int) -> ApiError:
    """Upstream's ``NewTooLargeResourceVersionError``: a 504 ``Timeout`` to retry after 1 s."""
    return ApiError(
        504,
        "Timeout",
        f"Timeout: Too large resource version: {asked}, current: {current}",
        causes=[Cause("", "Too large resource version", "ResourceVersionTooLarge")],
        retry_after_seconds=1,
    )


def _bookmark(rtype: ResourceType, version: int) -> bytes:
    obj = {"kind": rtype.kind, "apiVersion": rtype.api_version, "metadata": {"resourceVersion": str(version)}}
    return _line("BOOKMARK", obj)


async def _fresh_enough(store: Store, version: int, wait: float) -> bool:
    """Whether the store reaches ``version`` within ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while store.resource_version < version:
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def stream_watch(
    request: web.Request,
    store: Store,
    rtype: ResourceType,
    selection: Selection,
    options: WatchOptions,
    render: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> web.StreamResponse:
    """Serve one watch request until its timeout, expiry, falling behind, or the client going away.

    ``render`` turns each object into what the client asked for (a ``Table``, for ``kubectl get -w``);
    bookmarks carry only a resourceVersion and are sent as they are.
    """

    def line(event_type: str, obj: dict[str, Any]) -> bytes:
        return _line(event_type, render(obj) if render is not None else obj)

    query = request.query
    start = parse_resource_version(query.get("resourceVersion"))
    deadline = time.monotonic() + parse_timeout(query.get("timeoutSeconds"), options)
    bookmarks = query.get("allowWatchBookmarks", "").lower() in ("true", "1")
    if start is not None and not await _fresh_enough(store, start, options.freshness_wait):
        return await _error_stream(request, too_large(start, store.resource_version))
    initial = b""
    try:
        watch = store.watch(rtype, selection.namespace, start)
    except ApiError as error:
        if error.code != 410:
            raise
        return await _error_stream(request, error)
    if start is None:
        # Listing and subscribing happen with no await between them, so nothing is missed.
        current, _ = store.view(rtype, selection.namespace, selection.matches)
        initial = b"".join(line("ADDED", obj) for obj in current)  # serialised before any await
    response = web.StreamResponse(headers={"Content-Type": "application/json", "Cache-Control": "no-cache"})
    try:
        response.enable_chunked_encoding()
        await response.prepare(request)
        if initial:
            await response.write(initial)
        next_bookmark = time.monotonic() + options.bookmark_interval
        while watch.ended is None:
            now = time.monotonic()
            if now >= deadline:
                break
            wake = min(deadline, next_bookmark) if bookmarks else deadline
            await watch.wait(wake - now)
            events = watch.take()
            current_version = store.resource_version  # read with no await after take(): covers every event taken
            seen = (translate(e, rtype, selection) for e in events)
            chunk = b"".join(line(*pair) for pair in seen if pair is not None)
            if bookmarks and time.monotonic() >= next_bookmark:
                chunk += _bookmark(rtype, current_version)
                next_bookmark = time.monotonic() + options.bookmark_interval
            if chunk:
                await response.write(chunk)
        await response.write_eof()
    except ConnectionError:
        pass  # the client went away
    finally:
        watch.close()
    return response


async def _error_stream(request: web.Request, error: ApiError) -> web.StreamResponse:
    """A watch that carries one ``ERROR`` event and ends (HTTP 200, as upstream)."""
    response = await _open(request)
    await response.write(_line("ERROR", error.status_body()))
    await response.write_eof()
    return response


async def _open(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "application/json", "Cache-Control": "no-cache"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    return response
