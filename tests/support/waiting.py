"""Waiting for a condition with a deadline, instead of a fixed sleep a loaded machine may miss."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


MAX_INTERVAL = 0.25  # the longest pause between two polls, unless the caller asks for a longer one
BACKOFF = 1.5


def wait_for(check: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.05) -> T:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds.

    The first pause is ``interval`` long, each next one half again as long, up to :data:`MAX_INTERVAL` (or
    ``interval``, if longer): a condition met at once is seen at once, and a long wait polls a few times a second,
    not twenty (most checks read the API, and the suite's CPU is the machine's).

    The default is generous on purpose: a wait costs only as long as the condition takes, and CI runs
    the suite on a loaded 2-core machine.
    """
    deadline = time.monotonic() + timeout
    pause, longest = interval, max(interval, MAX_INTERVAL)
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(pause)
        pause = min(pause * BACKOFF, longest)
