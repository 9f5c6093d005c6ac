"""The ``kueue`` section of a cluster description: xpk's objects as Kueue stores them, and Kueue's manager
Configuration (``waitForPodsReady``) handed to Kueue as written, which checks it when it starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic_training.local.controlplane import binaries, configs
from elastic_training.local.controlplane.cluster import KueueConfigurationError
from elastic_training.local.descriptions.cluster_description import parse_description
from elastic_training.local.descriptions.queue_description import (
    QueueDescriptionError,
    parse_kueue_configuration,
    parse_queues,
)
from elastic_training.local.upstream_cluster import UpstreamCluster
from tests.support.control_plane import control_plane_processes

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


def test_the_configuration_is_kept_as_written_with_the_integrations_the_cluster_needs(tmp_path: Path) -> None:
    written = {"waitForPodsReady": {"timeout": "5m"}, "integrations": {"frameworks": ["pod"]}}
    kept = parse_kueue_configuration({"configuration": written})
    assert kept == written and kept is not written  # not defaulted nor checked here: Kueue does, at its start
    assert parse_kueue_configuration({}) == parse_kueue_configuration(None) == {}  # absent: Kueue's defaults
    with pytest.raises(QueueDescriptionError, match=r"kueue\.configuration: must be a mapping"):
        parse_kueue_configuration({"configuration": ["waitForPodsReady"]})
    handed = configs.kueue_configuration(kept, 9443, tmp_path)
    assert (handed["apiVersion"], handed["kind"]) == ("config.kueue.x-k8s.io/v1beta2", "Configuration")
    assert handed["integrations"]["frameworks"] == ["pod", "batch/job", "jobset.x-k8s.io/jobset"]
    assert handed["waitForPodsReady"] == {"timeout": "5m"}
    v1beta1 = configs.kueue_configuration({"apiVersion": "config.kueue.x-k8s.io/v1beta1"}, 9443, tmp_path)
    assert v1beta1["apiVersion"] == "config.kueue.x-k8s.io/v1beta1"  # the user's version is Kueue's to read


def test_a_configuration_kueue_refuses_fails_the_start_with_its_message_and_leaves_nothing(tmp_path: Path) -> None:
    # Kueue's manager validates its Configuration at start (pkg/config/validation.go) and exits naming the field.
    if binaries.installed() is None:
        pytest.skip("the control plane's binaries are not built (make control-plane)")
    description = parse_description(
        {
            "nodePools": [
                {"name": "cpu", "machineType": "e2-standard-4", "nodeCount": 1, "cpu": "4", "memory": "16Gi"}
            ],
            "kueue": {
                "configuration": {"waitForPodsReady": {"timeout": "5m", "requeuingStrategy": {"timestamp": "Bogus"}}}
            },
        }
    )
    before = control_plane_processes()
    cluster = UpstreamCluster(tmp_path, description=description, run_nodes=False)
    with pytest.raises(KueueConfigurationError) as refused:
        cluster.start()
    assert str(refused.value) == (
        "Kueue refused its Configuration: waitForPodsReady.requeuingStrategy.timestamp: "
        'Unsupported value: "Bogus": supported values: "Creation", "Eviction"'
    )
    assert control_plane_processes() == before
    assert not cluster.kubeconfig_path.exists()
