"""Capped exponential backoff with full jitter, as client-go's ``wait.Backoff`` retries API calls. Pure."""

from __future__ import annotations

import random


class Backoff:
    """Capped exponential backoff with full jitter (client-go's ``wait.Backoff`` shape)."""

    def __init__(self, base: float = 0.2, cap: float = 30.0) -> None:
        self.base, self.cap, self.attempt = base, cap, 0

    def next_delay(self) -> float:
        delay = min(self.cap, self.base * (2**self.attempt))
        self.attempt = min(self.attempt + 1, 30)
        return random.uniform(delay / 2, delay)

    def reset(self) -> None:
        self.attempt = 0
