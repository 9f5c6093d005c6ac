"""Kueue's waitForPodsReady as the operator reads it (its ConfigMap, else the task's options), and the launch warnings
when MaxText's wait for slices or a slice repair cannot fit inside its recoveryTimeout."""

from __future__ import annotations

from typing import Any

import pytest

from elastic_training.operators.kueue_config import (
    CONFIG_MAP_KEY,
    KueueConfigError,
    PodsReadyTimeouts,
    from_config_map,
    from_options,
    go_duration_seconds,
    pods_ready_warnings,
)

WHERE = "the ConfigMap kueue-system/kueue-manager-config"
UPSTREAM = """apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
health:
  healthProbeBindAddress: :8081
waitForPodsReady:
  timeout: 10m
  recoveryTimeout: 3m
  blockAdmission: false
  requeuingStrategy:
    timestamp: Eviction
    backoffLimitCount: 5
    backoffBaseSeconds: 60
    backoffMaxSeconds: 3600
integrations:
  frameworks: ["batch/job", "jobset.x-k8s.io/jobset"]
"""


def config_map(text: str) -> dict[str, Any]:
    return {CONFIG_MAP_KEY: text}


@pytest.mark.parametrize(
    ("text", "seconds"), [("5m", 300.0), ("1h30m", 5400.0), ("90s", 90.0), ("1.5h", 5400.0), ("500ms", 0.5), ("0", 0.0)]
)
def test_go_durations(text: str, seconds: float) -> None:
    assert go_duration_seconds(text, "t") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["5 minutes", "", "m5", 300, None, "5m" * 40])
def test_bad_durations_are_refused_naming_the_field(text: Any) -> None:
    with pytest.raises(KueueConfigError, match=r"^where"):
        go_duration_seconds(text, "where")


def test_upstreams_configuration_is_read() -> None:
    found = from_config_map(config_map(UPSTREAM), WHERE)
    assert found == PodsReadyTimeouts(
        source=WHERE, enabled=True, timeout_seconds=600.0, recovery_timeout_seconds=180.0, backoff_limit_count=5
    )
    assert PodsReadyTimeouts.from_json(found.to_json()) == found


@pytest.mark.parametrize(
    ("section", "enabled", "timeout", "recovery"),
    [
        ("", None, None, None),  # absent: off on v0.17, on from v0.19: unknown
        ("waitForPodsReady: {}\n", True, 1800.0, 1800.0),  # v0.19's defaults
        ("waitForPodsReady: {timeout: 5m}\n", True, 300.0, 300.0),  # recoveryTimeout defaults to the timeout
        ("waitForPodsReady: {timeout: 5m, recoveryTimeout: 0s}\n", True, 300.0, None),  # no recovery check
        ("waitForPodsReady: {enable: false, timeout: 5m}\n", False, None, None),  # v1beta1's switch
    ],
)
def test_defaults_as_kueue_applies_them(
    section: str, enabled: bool | None, timeout: float | None, recovery: float | None
) -> None:
    found = from_config_map(config_map(f"kind: Configuration\n{section}"), WHERE)
    assert (found.enabled, found.timeout_seconds, found.recovery_timeout_seconds) == (enabled, timeout, recovery)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "has no key controller_manager_config.yaml"),
        (config_map("kind: [unclosed"), "is not YAML"),
        (config_map("- a list"), "is not a Kueue Configuration"),
        (config_map("waitForPodsReady: 5m"), "waitForPodsReady is not a mapping"),
        (config_map("waitForPodsReady: {timeout: soon}"), "waitForPodsReady.timeout is not a duration"),
        (config_map("waitForPodsReady: {requeuingStrategy: {backoffLimitCount: -2}}"), "backoffLimitCount"),
        (config_map("x: " + "y" * 300_000), "at most 256 KiB"),
        (config_map("!!python/object:os.system {}"), "is not YAML"),
    ],
)
def test_a_bad_configuration_is_refused_saying_why(data: dict[str, Any], message: str) -> None:
    with pytest.raises(KueueConfigError, match=message):
        from_config_map(data, WHERE)


def test_the_options_stand_in_when_the_config_map_cannot_be_read() -> None:
    assert from_options(None, None) is None
    found = from_options(600.0, None)
    assert found is not None and (found.timeout_seconds, found.recovery_timeout_seconds) == (600.0, 600.0)
    off = from_options(600.0, 0.0)
    assert off is not None and off.recovery_timeout_seconds is None
    assert PodsReadyTimeouts.from_json({"source": 3}) is None and PodsReadyTimeouts.from_json(None) is None
    assert PodsReadyTimeouts.from_json({"source": "x", "timeout_seconds": "long"}) is None


def test_a_wait_longer_than_recovery_timeout_is_warned_about() -> None:
    kueue = PodsReadyTimeouts(source=WHERE, enabled=True, timeout_seconds=600.0, recovery_timeout_seconds=180.0)
    warnings = pods_ready_warnings(
        kueue, elastic_timeout_seconds=300, slice_repair_seconds=1200.0, max_pods_ready_evictions=3
    )
    assert len(warnings) == 2
    assert warnings[0].startswith("elastic_timeout_seconds=300 lets MaxText wait for a lost slice longer than")
    assert "recoveryTimeout (3 min, from the ConfigMap kueue-system/kueue-manager-config)" in warnings[0]
    assert "evicts the whole JobSet (PodsReadyTimeout)" in warnings[0] and "max_pods_ready_evictions=3" in warnings[0]
    assert warnings[1].startswith("a lost TPU host takes about 20 min to repair on GKE")
    assert not pods_ready_warnings(
        kueue, elastic_timeout_seconds=120, slice_repair_seconds=None, max_pods_ready_evictions=None
    )


def test_no_warning_where_nothing_can_be_said() -> None:
    off = PodsReadyTimeouts(source=WHERE, enabled=False)
    unchecked = PodsReadyTimeouts(source=WHERE, enabled=True, timeout_seconds=600.0, recovery_timeout_seconds=None)
    unknown = PodsReadyTimeouts(source=WHERE)  # v0.19 would use 30 min: a 20-minute repair fits
    for timeouts in (off, unchecked, unknown):
        assert not pods_ready_warnings(
            timeouts, elastic_timeout_seconds=1200, slice_repair_seconds=1200.0, max_pods_ready_evictions=3
        )
    [warning] = pods_ready_warnings(
        unknown, elastic_timeout_seconds=3600, slice_repair_seconds=None, max_pods_ready_evictions=None
    )
    assert "30 min if this Kueue is v0.19 or newer, off on v0.17" in warning and "unlimited" in warning
