"""GKE's stand-ins under the real control plane: one :class:`UpstreamCluster` per test module, with the nodes of
``flex.yaml`` (queued-provisioning pools, a pool provisioned on demand) and xpk's flex-start Kueue objects.

Its own cluster, not the process's shared one (tests/support/shared_cluster.py): no other module asks for ``flex.yaml``,
so taking the shared one would stop the process's cluster and make its next module start it again. The flex tests
are one module (test_provisioning_requests.py), so they start it once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from elastic_training.local.controlplane import binaries
from elastic_training.local.upstream_cluster import UpstreamCluster
from tests.support.local_cluster import K8s

DESCRIPTION = Path(__file__).parent / "flex.yaml"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamCluster]:
    if binaries.installed() is None:
        pytest.skip("the control plane's binaries are not built (make control-plane)")
    with UpstreamCluster(tmp_path_factory.mktemp("gke"), description=DESCRIPTION) as running:
        yield running


@pytest.fixture(scope="module")
def k8s(cluster: UpstreamCluster) -> Iterator[K8s]:
    api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        core = client.CoreV1Api(api_client)  # default/default exists: UpstreamCluster.start waited for it
        yield K8s(
            api_client,
            core,
            client.BatchV1Api(api_client),
            client.CustomObjectsApi(api_client),
            cluster.kubeconfig_path,
        )
    finally:
        api_client.close()
