"""Pods matching a selector, kept current by one list and then a watch: client-go's reflector, in small.

The trainer stand-in learns two things from the cluster while it trains: which worker pods are up (slice health,
local/workloads/slices.py) and whether its own pod's Pathways sidecars restarted (local/workloads/pathways_session.py).
On GKE neither is polled: the resource manager hears a lost host from its own connection to it, and the JAX client's
session breaks when the proxy goes (pathwaysutils 0.1.13 only ever polls for slices coming *back*,
`Manager._monitor_new_slices`, every `poll_interval`, 10 s by default, `pathwaysutils/elastic/manager.py`). Listing the
pods ten times a second stood in for that at the cost of a list (and its deserialization) every 100 ms; a watch hears
the same change as it happens and costs nothing while nothing changes.

What it keeps from client-go's `tools/cache/reflector.go` (`ListAndWatch`): the list gives the
`resourceVersion` the watch starts from; the watch asks for bookmarks and ends after `timeoutSeconds`
(resumed from the last version seen); a 410 `Gone` (the version is older than the server keeps) or any
other failure relists, after a capped exponential backoff with jitter for failures.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from kubernetes import client, watch

_logger = logging.getLogger(__name__)

# client-go's reflector picks a watch timeout between 5 and 10 minutes (minWatchTimeout); bookmarks every
# minute or so keep the version it resumes from fresh in between.
WATCH_TIMEOUT_SECONDS: Final = 300
RELIST_BACKOFF_SECONDS: Final = (0.2, 5.0)
HTTP_GONE: Final = 410

PodsChanged = Callable[[Mapping[str, "client.V1Pod"]], None]


class PodWatch:
    """The pods of `namespace` matching the selectors, by name; `on_change(pods)` after every change.

    The first list runs in the constructor (so the first `on_change` has happened when it returns, unless
    the API failed: then a warning, and the watcher thread lists again). `on_change` runs on the watcher
    thread, with the pods as they are after the change; it must not block.
    """

    def __init__(
        self,
        api: client.CoreV1Api,
        namespace: str,
        on_change: PodsChanged,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        name: str = "pod-watch",
    ) -> None:
        self._api = api
        self._namespace = namespace
        self._on_change = on_change
        self._selectors = {
            key: value
            for key, value in (("label_selector", label_selector), ("field_selector", field_selector))
            if value is not None
        }
        self._pods: dict[str, client.V1Pod] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._watch: watch.Watch | None = None
        version = self._list_or_warn()
        self._thread = threading.Thread(target=self._run, args=(version,), name=name, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop watching (the open watch request is cut, so this returns at once)."""
        self._stop.set()
        with self._lock:
            current = self._watch
        if current is not None:
            current.stop()
        self._thread.join(timeout=5)

    def _list_or_warn(self) -> str | None:
        """List the pods, replace the known set, and return the list's resourceVersion; None on an error."""
        try:
            listing = self._api.list_namespaced_pod(self._namespace, **self._selectors)
        except Exception as error:  # the API briefly unreachable is no change in the pods
            _logger.warning("Watching pods: listing failed: %s", error)
            return None
        self._pods = {pod.metadata.name: pod for pod in listing.items or [] if pod.metadata is not None}
        self._on_change(dict(self._pods))
        return str(listing.metadata.resource_version) if listing.metadata is not None else None

    def _run(self, version: str | None) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        low, high = RELIST_BACKOFF_SECONDS
        delay = low
        while not self._stop.is_set():
            if version is None:
                version = self._list_or_warn()
                if version is None:
                    self._stop.wait(random.uniform(delay / 2, delay))
                    delay = min(high, delay * 2)
                    continue
            stream = watch.Watch()
            with self._lock:
                self._watch = stream
            try:
                for event in stream.stream(
                    self._api.list_namespaced_pod,
                    self._namespace,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=WATCH_TIMEOUT_SECONDS,
                    **self._selectors,
                ):
                    if self._stop.is_set():
                        return
                    self._apply(event["type"], event["object"])
                    version = stream.resource_version or version
                    delay = low
                version = stream.resource_version or version  # the server ended the watch: resume
            except ApiException as error:
                if self._stop.is_set():
                    return
                if error.status != HTTP_GONE:
                    _logger.warning("Watching pods: the watch failed, listing again: %s", error)
                    self._stop.wait(random.uniform(delay / 2, delay))
                    delay = min(high, delay * 2)
                version = None
            except Exception as error:  # a dropped connection: list again, as the reflector does
                if self._stop.is_set():
                    return
                _logger.warning("Watching pods: the watch broke, listing again: %s", error)
                self._stop.wait(random.uniform(delay / 2, delay))
                delay = min(high, delay * 2)
                version = None
            finally:
                with self._lock:
                    self._watch = None

    def _apply(self, kind: str, pod: client.V1Pod) -> None:
        if kind == "BOOKMARK" or pod is None or pod.metadata is None:
            return
        if kind == "DELETED":
            self._pods.pop(pod.metadata.name, None)
        else:
            self._pods[pod.metadata.name] = pod
        self._on_change(dict(self._pods))
