"""In-process elastic recovery driven by `pathwaysutils.elastic`'s own retry loop.

MaxText wraps its train loop in `pathwaysutils.elastic.Manager().elastic_retry(...)`. That loop runs
unchanged here; two things are supplied for CPU JAX, which has no Pathways slices:

* the slice -> devices mapping: host CPU devices grouped `devices_per_slice` at a time (on Pathways,
  `Manager()` groups `jax.devices()` by `slice_index`, which CPU devices lack);
* slice health: pathwaysutils asks a `SliceHealthChecker` which slices are active (by default a tiny
  `pmap` per slice, which never fails on CPU). `use_slice_health` installs a checker that answers from a
  `SliceHealth` instead (the JobSet's worker pods), for as long as the retry loop runs.

So `Elastic attempt N`, `Elastic event detected`, `Waiting for K slices`, `Sufficient slices active: A >= K`,
the attempt budget (`elastic_max_retries` counts attempts) and the `TimeoutError` on
`elastic_timeout_seconds` all come from pathwaysutils itself.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping, Sequence, Set

import jax
from pathwaysutils.elastic import elastic as pw_elastic
from pathwaysutils.elastic import manager as pw_manager

from elastic_training.local.workloads.slices import SliceHealth

ElasticRuntimeError = pw_manager.ElasticRuntimeError
ScaleUpSignalError = pw_manager.ScaleUpSignalError
ElasticRetryLimit = pw_manager.ElasticRetryLimit


def group_devices(
    devices: Sequence[jax.Device], num_slices: int, devices_per_slice: int
) -> dict[int, list[jax.Device]]:
    """Slice index -> its devices: consecutive groups of `devices_per_slice`."""
    needed = num_slices * devices_per_slice
    if len(devices) < needed:
        raise RuntimeError(
            f"{num_slices} slices x {devices_per_slice} devices need {needed} JAX devices, found {len(devices)}"
            " (XLA_FLAGS=--xla_force_host_platform_device_count must be set before JAX starts)"
        )
    return {i: list(devices[i * devices_per_slice : (i + 1) * devices_per_slice]) for i in range(num_slices)}


def slice_down_error(lost: Set[int], detail: str = "") -> jax.errors.JaxRuntimeError:
    """The error a step raises when slices it runs on are gone: `DATA_LOSS`, as Pathways reports it."""
    suffix = f" {detail}" if detail else ""
    return jax.errors.JaxRuntimeError(
        f"DATA_LOSS: slice(s) {sorted(lost)} became unavailable during the computation.{suffix}"
    )


class SliceHealthChecker(pw_elastic.SliceHealthChecker):  # type: ignore[misc]
    """A pathwaysutils health checker that reports the slices a `SliceHealth` says are up."""

    def __init__(self, slice_to_devices: Mapping[int, Sequence[jax.Device]], health: SliceHealth) -> None:
        super().__init__(slice_to_devices)
        self._health = health
        self._active: frozenset[int] = frozenset()

    def dispatch(self) -> None:
        """Look at the slices now."""
        self._active = self._health.refresh()

    def validate(self) -> Set[int]:
        """The healthy slices among those asked about."""
        return frozenset(self._active & set(self.slice_to_devices))


@contextlib.contextmanager
def use_slice_health(health: SliceHealth) -> Iterator[None]:
    """Make pathwaysutils' health checks answer from `health` (process-wide, restored on exit).

    pathwaysutils 0.1.13 builds its checker inside `wait_for_slices` and the monitor thread without a
    way to pass one in, so the module's default checker is swapped for the duration.
    """
    original = pw_elastic.DefaultSliceHealthChecker
    pw_elastic.DefaultSliceHealthChecker = functools.partial(SliceHealthChecker, health=health)
    try:
        yield
    finally:
        pw_elastic.DefaultSliceHealthChecker = original


class LocalElasticManager(pw_manager.Manager):  # type: ignore[misc]
    """pathwaysutils' `Manager` over an explicit slice -> devices mapping (CPU devices have no slice index)."""

    def __init__(self, slice_to_devices: Mapping[int, Sequence[jax.Device]], health: SliceHealth) -> None:
        super().__init__(devices=[])
        self.slice_to_devices = {i: list(d) for i, d in slice_to_devices.items()}
        self.all_slice_indices = frozenset(self.slice_to_devices)
        self.health = health
        self.active_slice_indices = frozenset(health.refresh() & self.all_slice_indices)

    def devices_of(self, slices: Set[int]) -> list[jax.Device]:
        """The devices of `slices`, in slice order."""
        return [d for i in sorted(slices) for d in self.slice_to_devices[i]]
