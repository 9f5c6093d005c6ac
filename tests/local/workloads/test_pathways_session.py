"""The operator's JobSet on the local cluster: Pathways stand-ins, multi-host slices, what the trainer learns.

The manifest is `elastic_jobset`'s, byte for byte, except the head's trainer container, which sleeps here
(the trainer itself is exercised end to end in tests/operators): the Pathways sidecars and the 2 slices of
4 hosts (v5e 4x4, on the `v5e-small` node pools) run through the image catalogue, and the slice health and
the Pathways session are read over HTTP as the trainer reads them.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from elastic_training.local.kubeconfig import FAULTS_CONTEXT, read_endpoint, write_kubeconfig
from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.local.workloads.pathways_session import Allocation, PathwaysSession, api_client_from_kubeconfig
from elastic_training.local.workloads.slices import Generation, KubernetesSliceHealth, lost_slices
from elastic_training.operators.constants import (
    HEAD_REPLICATED_JOB,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    LABEL_JOB_INDEX,
    LABEL_JOBSET_NAME,
    LABEL_REPLICATED_JOB_NAME,
    WORKER_REPLICATED_JOB,
)
from elastic_training.operators.manifests import elastic_jobset
from elastic_training.operators.spec import ElasticRunSpec, lint
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

CLUSTER_DESCRIPTION = "v5e-small"
NAMESPACE = "default"
NAME = "multihost-abcdef"


@pytest.fixture(scope="module")
def running(k8s: K8s, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    spec = ElasticRunSpec(
        run_name="multihost",
        base_output_directory=str(tmp_path_factory.mktemp("runs")),
        steps=20,
        checkpoint_period=5,
        num_slices=2,
        runtime="local",
        tpu_type="v5e",
        tpu_topology="4x4",
    )
    lint(spec)
    manifest: dict[str, Any] = elastic_jobset(spec, name=NAME, namespace=NAMESPACE, labels={})
    head = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    head["containers"][0] |= {"image": "local", "command": ["sleep", "600"], "args": []}
    k8s.custom.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, manifest)
    wait_for(lambda: len(_running_workers(k8s)) == 8 or None, timeout=60)
    try:
        yield NAME
    finally:
        k8s.custom.delete_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, NAME, propagation_policy="Foreground"
        )


@pytest.fixture(scope="module")
def proxied(cluster: UpstreamCluster) -> Iterator[client.ApiClient]:
    """The admin's client through the API fault proxy (the kubeconfig's ``elastic-training-local-faults`` context):
    it meets ``cluster.faults.fail_requests`` and ``expire_watches``."""
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path), context=FAULTS_CONTEXT)
    try:
        yield api
    finally:
        api.close()


def _faults_kubeconfig(cluster: UpstreamCluster, path: Any) -> str:
    """A kubeconfig whose current context is the fault proxy, as a trainer pod's would be read."""
    endpoint = read_endpoint(cluster.kubeconfig_path)
    assert endpoint.token
    return str(write_kubeconfig(path, cluster.faults_url, endpoint.token, ca_pem=cluster.ca_pem))


def _running_workers(k8s: K8s) -> list[client.V1Pod]:
    selector = f"{LABEL_JOBSET_NAME}={NAME},{LABEL_REPLICATED_JOB_NAME}={WORKER_REPLICATED_JOB}"
    pods = k8s.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
    return [p for p in pods if p.status and p.status.phase == "Running"]


def _head(k8s: K8s) -> client.V1Pod:
    selector = f"{LABEL_JOBSET_NAME}={NAME},{LABEL_REPLICATED_JOB_NAME}={HEAD_REPLICATED_JOB}"
    [head] = k8s.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
    return head


def test_the_trainer_learns_slices_from_the_resource_manager_and_hosts_from_the_worker_jobs(
    running: str, k8s: K8s
) -> None:
    session = PathwaysSession(k8s.api_client, NAMESPACE, _head(k8s).metadata.name)
    assert session.allocation() == Allocation(running, NAMESPACE, num_slices=2, hosts_per_slice=4)


def test_the_trainer_start_up_reads_ride_out_a_burst_of_api_errors(
    running: str, k8s: K8s, cluster: UpstreamCluster, proxied: client.ApiClient, tmp_path: Any
) -> None:
    """A burst of 500s while the head starts does not fail it: its client retries, as the operator's do."""
    head = _head(k8s).metadata.name
    plain = PathwaysSession(proxied, NAMESPACE, head)
    cluster.faults.fail_requests(500, count=3)
    try:
        with pytest.raises(client.ApiException) as refused:
            plain.allocation()  # without retries, the first 500 ends it
        assert refused.value.status == 500
    finally:
        cluster.faults.clear_api_faults()
    retrying_client = api_client_from_kubeconfig(_faults_kubeconfig(cluster, tmp_path / "kubeconfig"))
    retrying = PathwaysSession(retrying_client, NAMESPACE, head)
    # More than urllib3's default three retries (which never retry a 500 anyway); each more doubles the wait
    # (0.5, 1, 2, 4, 8 s): the burst's length, not the backoff's, is the point.
    cluster.faults.fail_requests(500, count=4)
    try:
        assert retrying.allocation() == Allocation(running, NAMESPACE, num_slices=2, hosts_per_slice=4)
    finally:
        cluster.faults.clear_api_faults()
        retrying.api_client.close()


def test_one_lost_host_loses_its_slice_and_only_that_slice(running: str, k8s: K8s, cluster: UpstreamCluster) -> None:
    health = KubernetesSliceHealth(k8s.core, NAMESPACE, running, 2, min_ready_seconds=0.2, hosts_per_slice=4)

    def when(check: Any) -> dict[int, Generation]:
        def poll() -> dict[int, Generation] | None:
            now = dict(health.generations())
            return now if check(now) else None

        return wait_for(poll, timeout=30)

    try:
        before = when(lambda now: len(now) == 2)
        assert all(len(generation) == 4 for generation in before.values())  # four hosts each
        [victim] = [
            p
            for p in _running_workers(k8s)
            if p.metadata.labels[LABEL_JOB_INDEX] == "1" and p.metadata.name.split("-")[-2] == "1"
        ]
        cluster.faults.signal_pod(NAMESPACE, victim.metadata.name, signal.SIGKILL)
        after = when(lambda now: lost_slices(before, now))
        assert lost_slices(before, after) == {1}
        assert after.get(0) == before[0]
        back = when(lambda now: len(now) == 2)
        assert back[1] != before[1]  # a new incarnation: its worker restarted (OnFailure)
    finally:
        health.close()


def test_the_slice_health_watch_resumes_after_the_server_ends_it(
    running: str, k8s: K8s, cluster: UpstreamCluster, proxied: client.ApiClient
) -> None:
    """The worker pods are watched, not polled: a watch the server ends (its timeout, a restart) is resumed
    from the last version seen, so the next lost host is still heard."""
    core = client.CoreV1Api(proxied)  # its watch through the fault proxy, which ends it
    health = KubernetesSliceHealth(core, NAMESPACE, running, 2, min_ready_seconds=0.2, hosts_per_slice=4)
    try:
        before = wait_for(lambda: dict(health.generations()) if len(health.generations()) == 2 else None, timeout=30)
        assert cluster.faults.expire_watches()["expired"] >= 1
        [victim] = [
            p
            for p in _running_workers(k8s)
            if p.metadata.labels[LABEL_JOB_INDEX] == "0" and p.metadata.name.split("-")[-2] == "0"
        ]
        cluster.faults.signal_pod(NAMESPACE, victim.metadata.name, signal.SIGKILL)
        after = wait_for(lambda: dict(health.generations()) if lost_slices(before, health.generations()) else None)
        assert lost_slices(before, after) == {0}
        back = wait_for(lambda: dict(health.generations()) if len(health.generations()) == 2 else None, timeout=30)
        assert back[0] != before[0] and back[1] == before[1]
    finally:
        health.close()


def test_a_restarted_pathways_sidecar_ends_the_session(running: str, k8s: K8s, cluster: UpstreamCluster) -> None:
    head = _head(k8s).metadata.name
    session = PathwaysSession(k8s.api_client, NAMESPACE, head)
    lost: list[str] = []
    called = threading.Event()

    def on_lost(message: str) -> None:
        lost.append(message)
        called.set()

    session.watch_sidecars(on_lost)
    try:
        cluster.faults.signal_pod(NAMESPACE, head, signal.SIGKILL, container="pathways-proxy")
        assert called.wait(30)
        assert lost[0].startswith("UNAVAILABLE: the Pathways backend is gone: sidecar pathways-proxy")
    finally:
        session.close()


def test_pathways_flags_in_the_rendered_manifest_are_all_accepted(running: str, k8s: K8s) -> None:
    """Every Pathways container of the operator's manifest is up: no flag was refused."""
    head = _head(k8s)
    sidecars = {s.name: s for s in head.status.init_container_statuses}
    assert set(sidecars) == {"pathways-proxy", "pathways-rm"}
    assert all(s.restart_count == 0 or s.name == "pathways-proxy" for s in sidecars.values())
    assert all(s.state.running for p in _running_workers(k8s) for s in p.status.container_statuses)
