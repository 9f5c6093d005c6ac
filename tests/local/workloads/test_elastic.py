"""pathwaysutils' own retry loop, fed slice health from a `SliceHealth`.

These run in the test process, which has one CPU device, so both slices map to that device here; the
multi-device runs are in test_trainer_elastic.py.
"""

from __future__ import annotations

import logging
import threading

import jax
import pytest
from pathwaysutils.elastic import elastic as pw_elastic

from elastic_training.local.workloads.elastic import (
    ElasticRetryLimit,
    ElasticRuntimeError,
    LocalElasticManager,
    group_devices,
    slice_down_error,
    use_slice_health,
)
from elastic_training.local.workloads.slices import StaticSliceHealth
from elastic_training.operators.constants import ELASTIC_ATTEMPT_RE, ELASTIC_EVENT_RE, SUFFICIENT_SLICES_RE


def _manager(health: StaticSliceHealth) -> LocalElasticManager:
    device = jax.devices()[0]
    return LocalElasticManager({i: [device] for i in range(health.num_slices)}, health)


def test_group_devices_needs_enough_devices() -> None:
    devices = jax.devices()
    assert group_devices(devices, 1, 1) == {0: [devices[0]]}
    with pytest.raises(RuntimeError, match="xla_force_host_platform_device_count"):
        group_devices(devices, len(devices) + 1, 1)


def test_slice_down_error_is_what_pathwaysutils_retries() -> None:
    error = slice_down_error({1})
    assert isinstance(error, jax.errors.JaxRuntimeError)
    assert str(error).startswith("DATA_LOSS")
    assert pw_elastic.is_error_due_to_slice_down(error)


def test_health_checker_is_swapped_only_inside_the_block() -> None:
    original = pw_elastic.DefaultSliceHealthChecker
    health = StaticSliceHealth(3)
    health.set_down(2)
    with use_slice_health(health):
        assert pw_elastic.get_active_slice_indices({i: [jax.devices()[0]] for i in range(3)}) == {0, 1}
    assert pw_elastic.DefaultSliceHealthChecker is original


class _BackAfterTheWaitSawItDown(StaticSliceHealth):
    """A slice that comes back right after pathwaysutils' wait (in the test's thread) polled it down once.

    No timer: the wait pauses on the down slice however slow the machine is. pathwaysutils' monitor thread
    polls too, but its polls never bring the slice back.
    """

    def __init__(self, num_slices: int) -> None:
        super().__init__(num_slices)
        self.waiter = threading.get_ident()
        self.polls_while_down = 0

    def refresh(self) -> frozenset[int]:
        healthy = super().refresh()
        if threading.get_ident() == self.waiter and len(healthy) < self.num_slices:
            self.polls_while_down += 1
            for index in set(range(self.num_slices)) - healthy:
                self.set_up(index)
        return healthy


def test_recovers_in_the_same_call_and_logs_like_pathwaysutils(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    health = _BackAfterTheWaitSawItDown(2)
    manager = _manager(health)
    calls: list[frozenset[int]] = []
    events: list[str] = []

    def train() -> str:
        calls.append(frozenset(manager.active_slice_indices))
        if len(calls) == 1:
            health.set_down(1)
            raise slice_down_error({1})
        return "done"

    retry = manager.elastic_retry(
        poll_interval=0.05,
        timeout=10,
        retry_policy=ElasticRetryLimit(3),
        on_elastic_event_callback=lambda: events.append("event"),
    )
    with use_slice_health(health):
        assert retry(train)() == "done"
    assert calls == [frozenset({0, 1}), frozenset({0, 1})]
    assert events == ["event"]
    assert [m[1] for m in ELASTIC_ATTEMPT_RE.finditer(caplog.text)] == ["1", "2"]
    assert ELASTIC_EVENT_RE.search(caplog.text)
    assert SUFFICIENT_SLICES_RE.findall(caplog.text) == [("2", "2"), ("2", "2")]
    assert health.polls_while_down == 1  # the second attempt waited for the slice
    assert "1 slices active. Wanting at least 2." in caplog.text


def test_max_retries_counts_attempts() -> None:
    health = StaticSliceHealth(2)
    manager = _manager(health)
    attempts = []

    def always_fails() -> None:
        attempts.append(1)
        raise slice_down_error({0})

    retry = manager.elastic_retry(poll_interval=0.01, timeout=5, retry_policy=ElasticRetryLimit(2))
    with use_slice_health(health), pytest.raises(ElasticRuntimeError, match="Elastic attempt 2 failed"):
        retry(always_fails)()
    assert len(attempts) == 2


def test_other_runtime_errors_are_not_retried() -> None:
    health = StaticSliceHealth(1)
    manager = _manager(health)

    def oom() -> None:
        raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: out of memory")

    retry = manager.elastic_retry(poll_interval=0.01, timeout=5, retry_policy=ElasticRetryLimit(5))
    with use_slice_health(health), pytest.raises(jax.errors.JaxRuntimeError, match="RESOURCE_EXHAUSTED"):
        retry(oom)()


def test_waiting_for_slices_times_out() -> None:
    health = StaticSliceHealth(2)
    health.set_down(1)
    manager = _manager(health)
    retry = manager.elastic_retry(poll_interval=0.05, timeout=0.3, retry_policy=ElasticRetryLimit(5))
    with use_slice_health(health), pytest.raises(TimeoutError, match="Timed out waiting for 2 slices"):
        retry(lambda: None)()


def test_minimum_slice_count_runs_on_fewer_slices() -> None:
    health = StaticSliceHealth(2)
    health.set_down(0)
    manager = _manager(health)
    retry = manager.elastic_retry(minimum_slice_count=1, poll_interval=0.05, timeout=2)
    with use_slice_health(health):
        assert retry(lambda: frozenset(manager.active_slice_indices))() == frozenset({1})
