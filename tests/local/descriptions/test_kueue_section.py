"""The ``kueue`` section of a cluster description: xpk's objects as Kueue stores them, and Kueue's manager
Configuration (``waitForPodsReady``) checked as Kueue checks it."""

from __future__ import annotations

import pytest

from elastic_training.local.descriptions.kueue_config import ConfigurationError, parse_configuration
from elastic_training.local.descriptions.queue_description import (
    QueueDescriptionError,
    parse_kueue_configuration,
    parse_queues,
)

KUEUE = "kueue.x-k8s.io"


def test_a_description_keeps_cohort_name_and_converts_xpks_admission_checks() -> None:
    flavor = {"name": "f"}
    queue = {
        "name": "cq",
        "resourceGroups": [
            {"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": 1}]}]}
        ],
    }
    (cohort,) = [
        o
        for o in parse_queues({"resourceFlavors": [flavor], "clusterQueues": [{**queue, "cohortName": "team"}]})
        if o.rtype.kind == "ClusterQueue"
    ]
    assert cohort.body["spec"]["cohortName"] == "team"  # the real Kueue borrows and lends within it
    objects = parse_queues(
        {
            "resourceFlavors": [flavor],
            "clusterQueues": [{**queue, "admissionChecks": ["dws-prov"]}],
            "admissionChecks": [
                {
                    "name": "dws-prov",
                    "controllerName": "kueue.x-k8s.io/provisioning-request",
                    "parameters": {"apiGroup": KUEUE, "kind": "ProvisioningRequestConfig", "name": "dws-config"},
                }
            ],
            "provisioningRequestConfigs": [
                {"name": "dws-config", "provisioningClassName": "queued-provisioning.gke.io"}
            ],
        }
    )
    by_kind = {o.rtype.kind: o.body for o in objects}
    assert by_kind["ClusterQueue"]["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": "dws-prov"}]}
    assert "admissionChecks" not in by_kind["ClusterQueue"]["spec"]
    assert "retryStrategy" not in by_kind["ProvisioningRequestConfig"]["spec"]  # defaulted by kube-apiserver


def test_wait_for_pods_ready_takes_upstreams_defaults_and_refuses_what_it_cannot_do() -> None:
    assert parse_configuration(None).wait_for_pods_ready is None  # v0.17.1: off unless configured
    v019 = parse_configuration({"waitForPodsReady": {}}).wait_for_pods_ready  # v0.19's defaults
    assert v019 is not None
    assert (v019.timeout_seconds, v019.recovery_timeout_seconds) == (1800.0, 1800.0)
    strategy = v019.requeuing
    assert (strategy.timestamp, strategy.backoff_limit_count) == ("Eviction", None)
    assert [strategy.backoff_seconds(n) for n in (1, 2, 3, 7, 8)] == [60, 120, 240, 3600, 3600]
    given = parse_configuration(
        {
            "waitForPodsReady": {
                "timeout": "5m",
                "recoveryTimeout": "1m30s",
                "requeuingStrategy": {"backoffLimitCount": 3},
            }
        }
    ).wait_for_pods_ready
    assert given is not None and (given.timeout_seconds, given.recovery_timeout_seconds) == (300.0, 90.0)
    off = parse_configuration({"waitForPodsReady": {"timeout": "10m", "recoveryTimeout": "0s"}}).wait_for_pods_ready
    assert off is not None and off.recovery_timeout_seconds is None  # "0s" turns the recovery check off
    assert parse_configuration({"waitForPodsReady": {"enable": False, "timeout": "5m"}}).wait_for_pods_ready is None
    for bad, message in (
        ({"timeout": 300}, "waitForPodsReady.timeout: must be a duration"),
        ({"timeout": "5 minutes"}, "invalid duration"),
        ({"blockAdmission": True}, "blockAdmission: true is not modelled"),
        ({"requeuingStrategy": {"timestamp": "Now"}}, 'Unsupported value: "Now"'),
        ({"requeuingStrategy": {"backoffLimitCount": -1}}, "backoffLimitCount: must be an integer from 0"),
        ({"retries": 3}, "waitForPodsReady.retries: unknown field"),
    ):
        with pytest.raises(ConfigurationError, match=message):
            parse_configuration({"waitForPodsReady": bad})
    with pytest.raises(QueueDescriptionError, match=r"kueue\.configuration\.waitForPodsReady\.timeout"):
        parse_kueue_configuration({"configuration": {"waitForPodsReady": {"timeout": "-1s"}}})
