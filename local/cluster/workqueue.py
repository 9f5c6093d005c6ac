"""A level-triggered work queue: the reconcile loop every local controller runs.

Store listeners enqueue keys; the loop pops each key once (duplicates collapse) and calls the
controller's reconcile for it. A reconcile reads the current state and acts on it, so it does
not matter how many events woke it. A reconcile that raises is retried after a short delay.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

log = logging.getLogger(__name__)

RETRY_DELAY_SECONDS = 0.5


class WorkQueue(Generic[K]):
    """Deduplicating keys to reconcile, processed one at a time on the event loop."""

    def __init__(self, name: str, reconcile: Callable[[K], Awaitable[None] | None]) -> None:
        self.name = name
        self._reconcile = reconcile
        self._pending: dict[K, None] = {}
        self._wakeup = asyncio.Event()
        self._timers: set[asyncio.TimerHandle] = set()

    def enqueue(self, key: K) -> None:
        """Ask for ``key`` to be reconciled soon (safe to call from a store listener)."""
        self._pending[key] = None
        self._wakeup.set()

    def enqueue_after(self, key: K, delay: float) -> None:
        """Ask for ``key`` to be reconciled after ``delay`` seconds (deadlines, retries)."""
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            if handle is not None:
                self._timers.discard(handle)
            self.enqueue(key)

        handle = loop.call_later(max(delay, 0.0), fire)
        self._timers.add(handle)

    async def run(self) -> None:
        """Process keys until cancelled."""
        try:
            while True:
                await self._wakeup.wait()
                self._wakeup.clear()
                while self._pending:
                    key = next(iter(self._pending))
                    del self._pending[key]
                    await self._reconcile_one(key)
                    await asyncio.sleep(0)  # let the API and the kubelet run between keys
        finally:
            for handle in self._timers:
                handle.cancel()
            self._timers.clear()

    async def _reconcile_one(self, key: K) -> None:
        try:
            result = self._reconcile(key)
            if inspect.isawaitable(result):
                await result
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: reconcile of %r failed; retrying in %.1fs", self.name, key, RETRY_DELAY_SECONDS)
            self.enqueue_after(key, RETRY_DELAY_SECONDS)
