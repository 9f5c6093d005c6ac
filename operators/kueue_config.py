"""Kueue's ``waitForPodsReady`` as the operator learns it, and how the run's own waits sit against it. Pure.

Kueue reads its manager ``Configuration`` from the ConfigMap ``kueue-system/kueue-manager-config``, key
``controller_manager_config.yaml`` (kubernetes-sigs/kueue ``config/components/manager``, v0.17.1 and v0.19.0). Its
``waitForPodsReady`` (``apis/config/v1beta2/configuration_types.go``) evicts an admitted Workload whose pods are not
all ready within ``timeout`` of its admission, or not back to ready within ``recoveryTimeout`` (default: the
``timeout``; ``0s``: no such check) after one failed, and requeues it after a backoff; ``backoffLimitCount`` requeues
later it deactivates it. v0.17.1 leaves the feature off when the section is absent; v0.19.0 turns it on with a 30-minute
timeout (``apis/config/v1beta2/defaults.go``), so an absent section is read as "unknown", never as "off".

For an elastic run the ``recoveryTimeout`` is the one that matters: a slice lost and waiting for its repair, or
MaxText waiting for slices (``elastic_timeout_seconds``) longer than it, gets the *whole* JobSet evicted by Kueue
while Pathways still recovers in process. :func:`pods_ready_warnings` says so at launch.

The ConfigMap is untrusted input: bounded in size, parsed as YAML without tags, every value checked; anything else is
a :class:`KueueConfigError` the operator reports and falls back from (to its ``kueue_*`` options), never a failed run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import yaml

CONFIG_MAP_NAMESPACE = "kueue-system"
CONFIG_MAP_NAME = "kueue-manager-config"
CONFIG_MAP_KEY = "controller_manager_config.yaml"
MAX_CONFIG_CHARS = 256 * 1024
V019_DEFAULT_TIMEOUT_SECONDS = 1800.0
_GO_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns))+$")
_GO_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)")
_GO_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


class KueueConfigError(ValueError):
    """Kueue's configuration could not be read; the message says where and why."""


@dataclass(frozen=True)
class PodsReadyTimeouts:
    """Kueue's ``waitForPodsReady`` as far as it is known, and where it was learnt.

    ``enabled``: ``True``/``False`` when the source says, ``None`` when it does not (the ConfigMap has no
    ``waitForPodsReady``: off on Kueue v0.17, on with 30-minute timeouts from v0.19). Seconds; a ``None``
    ``recovery_timeout_seconds`` with the feature on is no recovery check (``0s``).
    """

    source: str
    enabled: bool | None = None
    timeout_seconds: float | None = None
    recovery_timeout_seconds: float | None = None
    backoff_limit_count: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> PodsReadyTimeouts | None:
        """What :meth:`to_json` wrote (the run's plan); ``None`` for anything else."""
        if not isinstance(data, Mapping) or not isinstance(data.get("source"), str):
            return None
        known = {k: data.get(k) for k in ("enabled", "timeout_seconds", "recovery_timeout_seconds")}
        try:
            return cls(
                source=str(data["source"])[:300],
                enabled=known["enabled"] if isinstance(known["enabled"], bool) else None,
                timeout_seconds=_number_or_none(known["timeout_seconds"]),
                recovery_timeout_seconds=_number_or_none(known["recovery_timeout_seconds"]),
                backoff_limit_count=_count_or_none(data.get("backoff_limit_count")),
            )
        except (TypeError, ValueError):
            return None

    @property
    def recovery_bound_seconds(self) -> float | None:
        """The recovery bound to plan against: the known one, or v0.19's default when the source says nothing."""
        if self.enabled is False:
            return None
        if self.enabled is None:
            return V019_DEFAULT_TIMEOUT_SECONDS
        return self.recovery_timeout_seconds


def _number_or_none(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 10**9:
        raise ValueError(value)
    return float(value)


def _count_or_none(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
        raise ValueError(value)
    return value


def go_duration_seconds(text: Any, where: str) -> float:
    """A Go duration (``metav1.Duration``: "5m", "1h30m", "90s") in seconds; ``KueueConfigError`` otherwise."""
    if not isinstance(text, str) or len(text) > 64:
        raise KueueConfigError(f"{where} must be a duration such as '5m', got {text!r}")
    if text == "0":
        return 0.0
    if not _GO_DURATION.match(text):
        raise KueueConfigError(f"{where} is not a duration Kueue reads ({text!r}: units h, m, s, ms)")
    return sum(float(n) * _GO_UNIT_SECONDS[unit] for n, unit in _GO_PART.findall(text))


def from_config_map(data: Mapping[str, Any] | None, where: str) -> PodsReadyTimeouts:
    """``waitForPodsReady`` from the ConfigMap's ``data`` (``None``: there is none); ``KueueConfigError`` when
    it is unreadable."""
    text = (data or {}).get(CONFIG_MAP_KEY)
    if text is None:
        raise KueueConfigError(f"{where} has no key {CONFIG_MAP_KEY}")
    if not isinstance(text, str) or len(text) > MAX_CONFIG_CHARS:
        raise KueueConfigError(f"{where} key {CONFIG_MAP_KEY} is not a YAML document of at most 256 KiB")
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise KueueConfigError(f"{where} key {CONFIG_MAP_KEY} is not YAML ({type(error).__name__})") from None
    if not isinstance(document, Mapping):
        raise KueueConfigError(f"{where} key {CONFIG_MAP_KEY} is not a Kueue Configuration")
    section = document.get("waitForPodsReady")
    if section is None:
        return PodsReadyTimeouts(source=where)
    if not isinstance(section, Mapping):
        raise KueueConfigError(f"{where}: waitForPodsReady is not a mapping")
    if section.get("enable") is False:  # the v1beta1 Configuration's switch
        return PodsReadyTimeouts(source=where, enabled=False)
    timeout = V019_DEFAULT_TIMEOUT_SECONDS
    if section.get("timeout") is not None:
        timeout = go_duration_seconds(section["timeout"], f"{where}: waitForPodsReady.timeout")
    recovery = timeout
    if section.get("recoveryTimeout") is not None:
        recovery = go_duration_seconds(section["recoveryTimeout"], f"{where}: waitForPodsReady.recoveryTimeout")
    strategy = section.get("requeuingStrategy")
    limit = strategy.get("backoffLimitCount") if isinstance(strategy, Mapping) else None
    try:
        count = _count_or_none(limit)
    except ValueError:
        raise KueueConfigError(f"{where}: waitForPodsReady.requeuingStrategy.backoffLimitCount {limit!r}") from None
    return PodsReadyTimeouts(
        source=where,
        enabled=True,
        timeout_seconds=timeout,
        recovery_timeout_seconds=recovery if recovery > 0 else None,
        backoff_limit_count=count,
    )


def from_options(timeout_seconds: float | None, recovery_timeout_seconds: float | None) -> PodsReadyTimeouts | None:
    """The task's ``kueue_pods_ready_timeout`` / ``kueue_recovery_timeout`` (``None`` when neither is set; the
    recovery bound defaults to the timeout, as Kueue's does)."""
    if timeout_seconds is None and recovery_timeout_seconds is None:
        return None
    recovery = recovery_timeout_seconds if recovery_timeout_seconds is not None else timeout_seconds
    return PodsReadyTimeouts(
        source="the task's kueue_pods_ready_timeout / kueue_recovery_timeout",
        enabled=True,
        timeout_seconds=timeout_seconds,
        recovery_timeout_seconds=recovery or None,  # 0: no recovery check, as Kueue's "0s"
    )


def pods_ready_warnings(
    timeouts: PodsReadyTimeouts,
    *,
    elastic_timeout_seconds: float,
    slice_repair_seconds: float | None,
    max_pods_ready_evictions: int | None,
) -> list[str]:
    """What cannot fit inside Kueue's ``recoveryTimeout``: MaxText's wait for slices, a lost host's repair."""
    bound = timeouts.recovery_bound_seconds
    if bound is None:
        return []
    said = f"Kueue's waitForPodsReady.recoveryTimeout ({_minutes(bound)}, {_from(timeouts)})"
    then = (
        "Kueue then evicts the whole JobSet (PodsReadyTimeout) while Pathways still recovers in process; the run "
        "resumes from its last committed checkpoint once Kueue requeues it after its backoff, counted toward "
        f"max_pods_ready_evictions={'unlimited' if max_pods_ready_evictions is None else max_pods_ready_evictions}"
    )
    warnings = []
    if elastic_timeout_seconds > bound:
        warnings.append(
            f"elastic_timeout_seconds={elastic_timeout_seconds:.0f} lets MaxText wait for a lost slice longer than "
            f"{said}: {then}. Lower elastic_timeout_seconds below it, or raise Kueue's recoveryTimeout."
        )
    if slice_repair_seconds is not None and slice_repair_seconds > bound:
        warnings.append(
            f"a lost TPU host takes about {_minutes(slice_repair_seconds)} to repair on GKE, longer than {said}: "
            f"{then}. Raise Kueue's recoveryTimeout above the repair time to ride repairs out in process."
        )
    return warnings


def _from(timeouts: PodsReadyTimeouts) -> str:
    if timeouts.enabled is None:
        return f"not set in {timeouts.source}: 30 min if this Kueue is v0.19 or newer, off on v0.17"
    return f"from {timeouts.source}"


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
