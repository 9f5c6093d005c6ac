"""A level-triggered work queue: the reconcile loop every local controller runs.

Store listeners enqueue keys; the loop pops each key once (duplicates collapse) and calls the
controller's reconcile for it. A reconcile reads the current state and acts on it, so it does
not matter how many events woke it.

A reconcile that raises is retried after a per-key exponential backoff, as client-go's
``workqueue.AddRateLimited`` with ``ItemExponentialFailureRateLimiter`` does: 5 ms doubling with
every consecutive failure of the same key. Upstream caps it at 1000 s; the local cluster caps it
at 30 s, because its controllers must recover within a test's or a demo's patience once the cause
is gone, and one stuck key retried twice a minute costs nothing. The delay is jittered down by up
to 20 % so keys that failed together do not retry in lockstep. A successful reconcile forgets the
key (``Forget``): its next failure starts again at 5 ms.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

log = logging.getLogger(__name__)

BASE_DELAY_SECONDS = 0.005  # client-go's DefaultControllerRateLimiter base
MAX_DELAY_SECONDS = 30.0  # client-go: 1000 s (see the module docstring)
JITTER_FRACTION = 0.2


class ItemBackoff(Generic[K]):
    """Per-key capped exponential backoff with jitter (client-go ``ItemExponentialFailureRateLimiter``)."""

    def __init__(
        self,
        base: float = BASE_DELAY_SECONDS,
        cap: float = MAX_DELAY_SECONDS,
        jitter: float = JITTER_FRACTION,
        rng: random.Random | None = None,
    ) -> None:
        if base <= 0 or cap < base or not 0 <= jitter < 1:
            raise ValueError("want 0 < base <= cap and 0 <= jitter < 1")
        self.base = base
        self.cap = cap
        self.jitter = jitter
        self._rng = rng or random.Random()
        self._failures: dict[K, int] = {}

    def when(self, key: K) -> float:
        """Record one more failure of ``key``; the delay before its retry."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        # Cap the exponent first: 2**failures overflows a float long before anyone retries that often.
        delay: float = min(self.cap, self.base * 2.0 ** min(failures, 64))
        return delay * (1.0 - self.jitter * self._rng.random())

    def forget(self, key: K) -> None:
        """The key succeeded: its next failure starts from ``base`` again."""
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        """Consecutive failures of ``key`` so far (client-go's ``NumRequeues``)."""
        return self._failures.get(key, 0)


class WorkQueue(Generic[K]):
    """Deduplicating keys to reconcile, processed one at a time on the event loop."""

    def __init__(
        self,
        name: str,
        reconcile: Callable[[K], Awaitable[None] | None],
        backoff: ItemBackoff[K] | None = None,
    ) -> None:
        self.name = name
        self._reconcile = reconcile
        self.backoff: ItemBackoff[K] = backoff or ItemBackoff()
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
            delay = self.backoff.when(key)
            log.exception(
                "%s: reconcile of %r failed (%d in a row); retrying in %.3fs",
                self.name,
                key,
                self.backoff.failures(key),
                delay,
            )
            self.enqueue_after(key, delay)
        else:
            self.backoff.forget(key)
