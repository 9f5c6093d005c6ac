"""Watch streams: newline-delimited ``{"type", "object"}`` JSON, as the API server sends them.

Semantics kept from the real server (``staging/src/k8s.io/apiserver/pkg/storage/cacher``):
- no ``resourceVersion`` (or ``0``): synthetic ``ADDED`` for every current object, then live events;
- a ``resourceVersion``: every event after it, or one ``ERROR`` event carrying a 410 ``Status``
  when it is older than the kept history (HTTP status stays 200: the error is in the stream);
- selectors apply to both the old and new object of a change: an object that stops matching is
  sent as ``DELETED`` (its previous state, stamped with the event's resourceVersion), one that
  starts matching as ``ADDED``;
- ``timeoutSeconds`` ends the stream; so does expiry by fault injection.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from local.cluster.resources import ApiError, ResourceType, bad_request
from local.cluster.selectors import Selection
from local.cluster.store import Store, WatchEvent


def parse_resource_version(value: str | None) -> int | None:
    """A watch's starting resourceVersion; None for "start now with synthetic ADDED"."""
    if value in (None, "", "0"):
        return None
    assert value is not None
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


async def stream_watch(
    request: web.Request,
    store: Store,
    rtype: ResourceType,
    selection: Selection,
    resource_version: str | None,
    timeout_seconds: float | None,
    render: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> web.StreamResponse:
    """Serve one watch request until its timeout, expiry, or the client going away.

    ``render`` turns each object into what the client asked for (a ``Table``, for ``kubectl get -w``).
    """

    def line(event_type: str, obj: dict[str, Any]) -> bytes:
        return _line(event_type, render(obj) if render is not None else obj)

    start = parse_resource_version(resource_version)
    initial = b""
    try:
        watch = store.watch(start)
    except ApiError as error:
        if error.code != 410:
            raise
        response = await _open(request)
        await response.write(_line("ERROR", error.status_body()))
        await response.write_eof()
        return response
    if start is None:
        # Listing and subscribing happen with no await between them, so nothing is missed.
        current, _ = store.view(rtype, selection.namespace, selection.matches)
        initial = b"".join(line("ADDED", obj) for obj in current)  # serialised before any await
    deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
    response = web.StreamResponse(headers={"Content-Type": "application/json", "Cache-Control": "no-cache"})
    try:
        response.enable_chunked_encoding()
        await response.prepare(request)
        if initial:
            await response.write(initial)
        ended = False
        while not ended:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            event = await watch.next(remaining)
            if event is None:
                break
            batch = [event]
            while not watch.queue.empty():  # send what is already queued in one write
                queued = watch.queue.get_nowait()
                if queued is None:  # expired: flush, then end
                    ended = True
                    break
                batch.append(queued)
            seen = (translate(e, rtype, selection) for e in batch)
            chunk = b"".join(line(*pair) for pair in seen if pair is not None)
            if chunk:
                await response.write(chunk)
        await response.write_eof()
    except ConnectionError:
        pass  # the client went away
    finally:
        watch.close()
    return response


async def _open(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "application/json", "Cache-Control": "no-cache"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    return response
