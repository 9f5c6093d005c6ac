"""The controllers' work queue: a failing reconcile is retried with per-key capped exponential
backoff with jitter (client-go's ItemExponentialFailureRateLimiter), and success forgets the key."""

from __future__ import annotations

import asyncio
import random

import pytest

from elastic_training.local.cluster.workqueue import BASE_DELAY_SECONDS, MAX_DELAY_SECONDS, ItemBackoff, WorkQueue


def test_delays_double_from_5_ms_up_to_the_cap_without_jitter() -> None:
    backoff: ItemBackoff[str] = ItemBackoff(jitter=0.0)
    delays = [backoff.when("a") for _ in range(16)]
    assert delays[:4] == [0.005, 0.01, 0.02, 0.04]
    assert delays[12] == pytest.approx(20.48)
    assert delays[13:] == [MAX_DELAY_SECONDS] * 3
    assert backoff.failures("a") == 16


def test_jitter_only_shortens_and_stays_within_its_fraction() -> None:
    backoff: ItemBackoff[str] = ItemBackoff(rng=random.Random(7))
    for failures in range(40):
        nominal = min(MAX_DELAY_SECONDS, BASE_DELAY_SECONDS * 2**failures)
        assert 0.8 * nominal <= backoff.when("a") <= nominal


def test_keys_back_off_independently_and_forget_resets_one() -> None:
    backoff: ItemBackoff[str] = ItemBackoff(jitter=0.0)
    for _ in range(5):
        backoff.when("a")
    assert backoff.when("b") == BASE_DELAY_SECONDS
    backoff.forget("a")
    assert backoff.failures("a") == 0 and backoff.when("a") == BASE_DELAY_SECONDS
    assert backoff.failures("b") == 1


def test_a_huge_failure_count_does_not_overflow() -> None:
    backoff: ItemBackoff[str] = ItemBackoff(jitter=0.0)
    for _ in range(2000):
        delay = backoff.when("a")
    assert delay == MAX_DELAY_SECONDS


@pytest.mark.parametrize(("base", "cap", "jitter"), [(0.0, 1.0, 0.1), (2.0, 1.0, 0.1), (0.1, 1.0, 1.0)])
def test_nonsense_settings_are_refused(base: float, cap: float, jitter: float) -> None:
    with pytest.raises(ValueError):
        ItemBackoff(base, cap, jitter)


def test_a_failing_reconcile_is_retried_until_it_succeeds_and_then_forgotten() -> None:
    attempts: list[str] = []
    failures_seen: list[int] = []

    async def scenario() -> None:
        done = asyncio.Event()
        backoff: ItemBackoff[str] = ItemBackoff(base=0.001, cap=0.01, jitter=0.0)

        def reconcile(key: str) -> None:
            attempts.append(key)
            failures_seen.append(backoff.failures(key))
            if len(attempts) < 4:
                raise RuntimeError("not yet")
            done.set()

        queue: WorkQueue[str] = WorkQueue("test", reconcile, backoff)
        runner = asyncio.create_task(queue.run())
        queue.enqueue("k")
        await asyncio.wait_for(done.wait(), 10)
        await asyncio.sleep(0)
        runner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await runner
        assert queue.backoff.failures("k") == 0

    asyncio.run(scenario())
    assert attempts == ["k"] * 4
    assert failures_seen == [0, 1, 2, 3]
