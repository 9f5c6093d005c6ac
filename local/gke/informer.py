"""List, then watch, one kind of object with the official client, on a thread of its own: client-go's reflector.

Stands for a shared informer without its indexer: the list gives a ``resourceVersion``, a watch goes on from it (with
bookmarks); when the server ends the watch it goes on from the last version seen; a ``410 Gone`` or an error lists
again after a capped, jittered backoff. Each object is handed to a callback as a plain dict, on the event loop the
caller names (``ADDED``/``MODIFIED``/``DELETED``; after a relist, every listed object as ``MODIFIED`` and those no
longer listed as ``DELETED``). The loop side keeps the newest object of each key (:attr:`Informer.objects`).

It does not resync on a timer, index, or share one watch between callers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes.client import ApiException
from kubernetes.watch.watch import iter_resp_lines
from urllib3.exceptions import HTTPError

from elastic_training.local.kube_objects import Obj

Handler = Callable[[str, Obj], None]
WATCH_SECONDS = 240
BACKOFF_INITIAL, BACKOFF_CAP = 0.2, 10.0

log = logging.getLogger(__name__)


def key_of(obj: Obj) -> tuple[str, str]:
    """``(namespace, name)`` of an object (namespace empty for a cluster-scoped one)."""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class Informer:
    """Calls ``handler(event_type, obj)`` on ``loop`` for every change of the objects ``list_call`` lists.

    ``list_call`` is an official client list method (or a ``functools.partial`` of one) taking ``watch``,
    ``resource_version``, ``allow_watch_bookmarks``, ``timeout_seconds`` and ``_preload_content``.
    """

    def __init__(self, name: str, list_call: Callable[..., Any], loop: asyncio.AbstractEventLoop, handler: Handler):
        self._name = name
        self._list_call = list_call
        self._loop = loop
        self._handler = handler
        self.objects: dict[tuple[str, str], Obj] = {}  # read and written on the loop only
        self._stopping = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"informer-{name}", daemon=True)

    def start(self) -> None:
        """Start listing and watching."""
        self._thread.start()

    def stop(self) -> None:
        """Stop: the open watch is shut down; the thread ends at once."""
        self._stopping.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # already closed
                response.shutdown()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        backoff = BACKOFF_INITIAL
        version = ""
        while not self._stopping.is_set():
            try:
                if not version:
                    version = self._relist()
                version = self._watch(version)
                backoff = BACKOFF_INITIAL
            except _Expired:
                version = ""
            except (ApiException, HTTPError, OSError, ValueError) as err:
                if self._stopping.is_set():
                    return
                log.warning("%s informer: %s", self._name, err)
                self._stopping.wait(random.uniform(0, backoff))
                backoff = min(backoff * 2, BACKOFF_CAP)
                version = ""

    def _relist(self) -> str:
        response = self._list_call(_preload_content=False)
        listing = json.loads(response.data)
        items = [dict(item) for item in listing.get("items") or []]
        self._loop.call_soon_threadsafe(self._sync, items)
        return str((listing.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, version: str) -> str:
        response = self._list_call(
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SECONDS,
            _preload_content=False,
        )
        self._response = response
        started = time.monotonic()
        try:
            if self._stopping.is_set():  # stop() ran before the response was there to shut down
                return version
            for line in iter_resp_lines(response):
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    if int(obj.get("code") or 0) == 410:
                        raise _Expired()
                    raise ValueError(f"watch error: {obj.get('message')}")
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if event.get("type") != "BOOKMARK":
                    self._loop.call_soon_threadsafe(self._dispatch, str(event["type"]), obj)
        finally:
            self._response = None
            response.release_conn()
        if time.monotonic() - started < 1.0 and not self._stopping.is_set():
            self._stopping.wait(0.5)  # a watch ended at once: do not spin
        return version

    # -- on the loop ---------------------------------------------------------------------------

    def _sync(self, items: list[Obj]) -> None:
        listed = {key_of(item): item for item in items}
        for key in set(self.objects) - set(listed):
            self._dispatch("DELETED", self.objects[key])
        for item in items:
            self._dispatch("MODIFIED", item)

    def _dispatch(self, kind: str, obj: Obj) -> None:
        key = key_of(obj)
        if kind == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        try:
            self._handler(kind, obj)
        except Exception:  # one bad object must not stop the others
            log.exception("%s informer: handling %s %s/%s", self._name, kind, *key)


class _Expired(Exception):
    """The watch's resourceVersion is too old: list again."""
