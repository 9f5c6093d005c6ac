"""Kueue's manager ``Configuration`` on the local cluster: ``waitForPodsReady``, read and defaulted as upstream does.

Checked against kubernetes-sigs/kueue v0.17.1 (the release xpk installs) and v0.19.0:

- ``apis/config/v1beta2/configuration_types.go``: ``waitForPodsReady`` holds ``timeout``, ``blockAdmission``,
  ``recoveryTimeout`` and ``requeuingStrategy`` (``timestamp`` ``Eviction`` | ``Creation``, ``backoffLimitCount``,
  ``backoffBaseSeconds``, ``backoffMaxSeconds``); durations are Go duration strings (``metav1.Duration``: "5m",
  "90s", "1h30m").
- ``apis/config/v1beta2/defaults.go`` (``SetDefaults_Configuration``): ``recoveryTimeout`` defaults to ``timeout``,
  ``timestamp`` to ``Eviction``, the backoff to 60 s base and 3,600 s cap, ``backoffLimitCount`` to null (requeue
  forever). v0.17.1 leaves ``waitForPodsReady`` off when the section is absent and refuses a zero ``timeout``
  (``pkg/config/validation.go`` "must be specified"); v0.19.0 defaults the ``timeout`` to 30 minutes
  (``DefaultWaitForPodsReadyTimeout``) and turns the feature on when the section is absent. Here the section absent is
  v0.17.1's *off*, and a section without ``timeout`` takes v0.19.0's defaults: ``waitForPodsReady: {}`` is the
  v0.19 behaviour as a cluster description option.
- ``pkg/controller/core/core.go`` ``waitForPodsReady``: a ``recoveryTimeout`` of ``0s`` turns the recovery check off.
- ``pkg/workload/workload.go`` ``UpdateRequeueState`` with ``pkg/util/wait/backoff.go``: the n-th requeue waits
  ``base * 2^(n-1)``, at most the cap (upstream adds a 0.01 % jitter, below the one-second resolution of the
  ``requeueAt`` it is written to; none here).
- ``config/components/manager/controller_manager_config.yaml``: installed as the ConfigMap
  ``kueue-system/kueue-manager-config``, key ``controller_manager_config.yaml``, which is where an operator reads it.

``blockAdmission: true`` (hold every other admission until the admitted Workload's pods are ready) is not modelled
and is refused, so that a description never asks for what the local Kueue would silently not do.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_TIMEOUT_SECONDS = 30 * 60.0  # v0.19's DefaultWaitForPodsReadyTimeout
DEFAULT_BACKOFF_BASE_SECONDS = 60
DEFAULT_BACKOFF_MAX_SECONDS = 3600
EVICTION_TIMESTAMP, CREATION_TIMESTAMP = "Eviction", "Creation"
CONFIG_NAMESPACE, CONFIG_MAP, CONFIG_KEY = "kueue-system", "kueue-manager-config", "controller_manager_config.yaml"

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_MAX_INT32 = 2**31 - 1


class ConfigurationError(ValueError):
    """A Kueue Configuration that cannot be used; the message names the field."""


def parse_duration(value: Any, where: str) -> float:
    """A Go duration string (``time.ParseDuration``, as ``metav1.Duration`` reads it) in seconds."""
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{where}: must be a duration such as '5m' or '90s', got {value!r}")
    text, sign = value, 1.0
    if text[0] in "+-":
        sign, text = (-1.0 if text[0] == "-" else 1.0), text[1:]
    if text == "0":
        return 0.0
    total, position = 0.0, 0
    while position < len(text):
        match = _DURATION_PART.match(text, position)
        if match is None:
            raise ConfigurationError(f"{where}: invalid duration {value!r} (units: h, m, s, ms, us, ns)")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    return sign * total


def duration_string(seconds: float) -> str:
    """Seconds as ``metav1.Duration`` writes them (``time.Duration.String``: "1h0m0s", "5m0s", "1.5s")."""
    whole = int(seconds)
    if whole != seconds:
        return f"{seconds:g}s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


@dataclass(frozen=True)
class RequeuingStrategy:
    """``waitForPodsReady.requeuingStrategy``, defaulted."""

    timestamp: str = EVICTION_TIMESTAMP
    backoff_limit_count: int | None = None  # None: requeued forever
    backoff_base_seconds: int = DEFAULT_BACKOFF_BASE_SECONDS
    backoff_max_seconds: int = DEFAULT_BACKOFF_MAX_SECONDS

    def backoff_seconds(self, count: int) -> float:
        """The wait before the ``count``-th requeue (``UpdateRequeueState``): base * 2^(count-1), capped."""
        if count < 1:
            return 0.0
        return float(min(self.backoff_base_seconds * 2.0 ** min(count - 1, 64), float(self.backoff_max_seconds)))


@dataclass(frozen=True)
class WaitForPodsReady:
    """``waitForPodsReady``, defaulted: seconds for the durations; ``recovery_timeout_seconds`` None when off."""

    timeout_seconds: float
    recovery_timeout_seconds: float | None
    requeuing: RequeuingStrategy = field(default_factory=RequeuingStrategy)

    def to_yaml(self) -> dict[str, Any]:
        """As the Configuration writes it (for the ConfigMap)."""
        strategy: dict[str, Any] = {
            "timestamp": self.requeuing.timestamp,
            "backoffBaseSeconds": self.requeuing.backoff_base_seconds,
            "backoffMaxSeconds": self.requeuing.backoff_max_seconds,
        }
        if self.requeuing.backoff_limit_count is not None:
            strategy["backoffLimitCount"] = self.requeuing.backoff_limit_count
        return {
            "timeout": duration_string(self.timeout_seconds),
            "recoveryTimeout": duration_string(self.recovery_timeout_seconds or 0.0),
            "blockAdmission": False,
            "requeuingStrategy": strategy,
        }


@dataclass(frozen=True)
class KueueConfiguration:
    """The parts of Kueue's Configuration the local Kueue acts on."""

    wait_for_pods_ready: WaitForPodsReady | None = None

    def manifest(self) -> dict[str, Any]:
        """The Configuration document as the ConfigMap's ``controller_manager_config.yaml`` holds it."""
        body: dict[str, Any] = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset"]},
        }
        if self.wait_for_pods_ready is not None:
            body["waitForPodsReady"] = self.wait_for_pods_ready.to_yaml()
        return body


OFF = KueueConfiguration()


def _int32(value: Any, where: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= _MAX_INT32:
        raise ConfigurationError(f"{where}: must be an integer from {minimum} to {_MAX_INT32}, got {value!r}")
    return value


def _known(raw: Mapping[str, Any], fields: tuple[str, ...], where: str) -> None:
    for key in raw:
        if key not in fields:
            raise ConfigurationError(f"{where}.{key}: unknown field (known: {', '.join(fields)})")


def _strategy(raw: Any, where: str) -> RequeuingStrategy:
    if raw is None:
        return RequeuingStrategy()
    if not isinstance(raw, Mapping):
        raise ConfigurationError(f"{where}: must be a mapping")
    _known(raw, ("timestamp", "backoffLimitCount", "backoffBaseSeconds", "backoffMaxSeconds"), where)
    timestamp = raw.get("timestamp", EVICTION_TIMESTAMP)
    if timestamp not in (EVICTION_TIMESTAMP, CREATION_TIMESTAMP):
        raise ConfigurationError(
            f'{where}.timestamp: Unsupported value: "{timestamp}": supported values: "Creation", "Eviction"'
        )
    limit = raw.get("backoffLimitCount")
    return RequeuingStrategy(
        timestamp=str(timestamp),
        backoff_limit_count=None if limit is None else _int32(limit, f"{where}.backoffLimitCount"),
        backoff_base_seconds=_int32(
            raw.get("backoffBaseSeconds", DEFAULT_BACKOFF_BASE_SECONDS), f"{where}.backoffBaseSeconds"
        ),
        backoff_max_seconds=_int32(
            raw.get("backoffMaxSeconds", DEFAULT_BACKOFF_MAX_SECONDS), f"{where}.backoffMaxSeconds"
        ),
    )


def parse_wait_for_pods_ready(raw: Any, where: str = "waitForPodsReady") -> WaitForPodsReady | None:
    """``waitForPodsReady`` checked and defaulted (``None``: the section is absent, the feature off)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigurationError(f"{where}: must be a mapping")
    _known(raw, ("enable", "timeout", "blockAdmission", "recoveryTimeout", "requeuingStrategy"), where)
    if raw.get("enable") is False:  # the v1beta1 Configuration's switch
        return None
    if raw.get("blockAdmission") not in (None, False):
        raise ConfigurationError(f"{where}.blockAdmission: true is not modelled by the local Kueue (only false)")
    timeout = DEFAULT_TIMEOUT_SECONDS
    if raw.get("timeout") is not None:
        timeout = parse_duration(raw["timeout"], f"{where}.timeout")
    if timeout <= 0:
        raise ConfigurationError(f"{where}.timeout: must be positive, got {raw.get('timeout')!r}")
    recovery = timeout
    if raw.get("recoveryTimeout") is not None:
        recovery = parse_duration(raw["recoveryTimeout"], f"{where}.recoveryTimeout")
        if recovery < 0:
            raise ConfigurationError(f"{where}.recoveryTimeout: must be greater than or equal to 0")
    return WaitForPodsReady(
        timeout_seconds=timeout,
        recovery_timeout_seconds=recovery if recovery > 0 else None,
        requeuing=_strategy(raw.get("requeuingStrategy"), f"{where}.requeuingStrategy"),
    )


def parse_configuration(raw: Any, where: str = "configuration") -> KueueConfiguration:
    """A Configuration document (or a description's ``kueue.configuration``): the parts acted on, checked.

    Other Configuration fields (``integrations``, ``controller``, ...) are accepted and ignored, as the local Kueue
    has nothing to configure for them."""
    if raw is None:
        return OFF
    if not isinstance(raw, Mapping):
        raise ConfigurationError(f"{where}: must be a mapping (a Kueue Configuration)")
    return KueueConfiguration(parse_wait_for_pods_ready(raw.get("waitForPodsReady"), f"{where}.waitForPodsReady"))
