"""Each fault of the local cluster has its observable effect through the real controllers (issue 51, item 4).

One :class:`UpstreamCluster` for the module: kube-apiserver, kube-controller-manager, kube-scheduler, JobSet and
Kueue from their releases, the node agent for two v5e-8 pools and a CPU pool, and a Kueue queue on the CPU pool.
Each fault goes in through ``cluster.faults`` (the Python API) and, for some, through ``elastic-training cluster
fault`` (the CLI, over the fault endpoint); what is asserted is what the upstream components then did.
"""

from __future__ import annotations

import base64
import json
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client, config, watch

from elastic_training.cli.main import main
from elastic_training.local.controlplane import binaries
from elastic_training.local.controlplane.cluster import KueueConfigurationError
from elastic_training.local.descriptions.cluster_description import parse_description
from elastic_training.local.faults import kube_faults
from elastic_training.local.kubeconfig import FAULTS_CONTEXT
from elastic_training.local.upstream_cluster import KUEUE_CONFIG_KEY, KUEUE_CONFIG_MAP, UpstreamCluster
from tests.support.control_plane import (
    LOOP,
    NS,
    JobSets,
    armed,
    condition,
    container,
    job_template,
    jobset_manifest,
    pod_manifest,
    pod_pids,
    unique,
    wait_armed,
    wait_processes_gone,
)
from tests.support.waiting import wait_for

POOL_LABEL = "cloud.google.com/gke-nodepool"
QUEUE, CLUSTER_QUEUE = "faults-lq", "faults-queue"
TPU = {"accelerator": "tpu-v5-lite-podslice", "topology": "2x4", "chipsPerNode": 4}
DESCRIPTION = parse_description(
    {
        "cluster": "faults",
        "nodePools": [
            *(
                {
                    "name": name,
                    "machineType": "ct5lp-hightpu-4t",
                    "tpu": TPU,
                    "nodeCount": 2,
                    "cpu": "112",
                    "memory": "192Gi",
                }
                for name in ("tpu-a", "tpu-b")
            ),
            {"name": "cpu-np", "machineType": "n2-standard-8", "nodeCount": 2, "cpu": "8", "memory": "32Gi"},
        ],
        "kueue": {
            "resourceFlavors": [{"name": "cpu-user", "nodeLabels": {POOL_LABEL: "cpu-np"}}],
            "clusterQueues": [
                {
                    "name": CLUSTER_QUEUE,
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory"],
                            "flavors": [
                                {
                                    "name": "cpu-user",
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": 16},
                                        {"name": "memory", "nominalQuota": "64Gi"},
                                    ],
                                }
                            ],
                        }
                    ],
                }
            ],
            "localQueues": [{"name": QUEUE, "namespace": NS, "clusterQueue": CLUSTER_QUEUE}],
        },
    }
)
# kube-controller-manager's --node-monitor-grace-period here (GKE's, the default, is 50 s): lose-host's promise is
# what the node lifecycle controller, GKE and pod GC do in turn, not how long the controller waits; 25 s still lets a
# node's lease (renewed every 10 s) miss a renewal without the node being marked.
GRACE_SECONDS = 25
LOST_SECONDS = 300  # lose-host's scenario: the grace period, then pod GC's 40 to 80 s
TPU_TOLERATION = {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
REQUESTS = {"requests": {"cpu": "1", "memory": "1Gi"}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamCluster]:
    if binaries.installed() is None:
        pytest.skip("the control plane's binaries are not built (make control-plane)")
    workdir = tmp_path_factory.mktemp("faults")
    with UpstreamCluster(workdir, description=DESCRIPTION, node_monitor_grace_seconds=GRACE_SECONDS) as running:
        yield running  # ready: default/default made (UpstreamCluster.start waits for it)


@pytest.fixture(scope="module")
def core(cluster: UpstreamCluster) -> client.CoreV1Api:
    return client.CoreV1Api(cluster.api)


@pytest.fixture(scope="module")
def custom(cluster: UpstreamCluster) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(cluster.api)


@pytest.fixture(scope="module")
def proxied(cluster: UpstreamCluster) -> Iterator[client.CoreV1Api]:
    """The same API through the fault proxy: the kubeconfig's second context."""
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path), context=FAULTS_CONTEXT)
    try:
        yield client.CoreV1Api(api)
    finally:
        api.close()


@pytest.fixture
def cli(cluster: UpstreamCluster, capsys: pytest.CaptureFixture[str]) -> Any:
    """``elastic-training cluster fault ARGS`` in this process: its exit status and the JSON it printed."""

    def run(*args: str) -> tuple[int, dict[str, Any]]:
        capsys.readouterr()
        code = main(["cluster", "fault", "--kubeconfig", str(cluster.kubeconfig_path), *args])
        return code, json.loads(capsys.readouterr().out)

    return run


# -- helpers ----------------------------------------------------------------------------------------------------


def _exists(read: Any) -> bool:
    try:
        read()
    except client.ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def _running(core: client.CoreV1Api, name: str, timeout: float = 60.0) -> client.V1Pod:
    def probe() -> client.V1Pod | None:
        pod = core.read_namespaced_pod(name, NS)
        statuses = pod.status.container_statuses or []
        return pod if statuses and all(s.state.running for s in statuses) else None

    return wait_for(probe, timeout)


def _start_pod(core: client.CoreV1Api, name: str, script: str = LOOP, **spec: Any) -> client.V1Pod:
    spec.setdefault("nodeSelector", {POOL_LABEL: "cpu-np"})
    core.create_namespaced_pod(NS, pod_manifest(name, container("main", script), **spec))
    return _running(core, name)


def _on_tpu_node(node: str) -> dict[str, Any]:
    return {"nodeName": node, "nodeSelector": {}, "tolerations": [TPU_TOLERATION]}


def _until_deleted(core: client.CoreV1Api, name: str, since: str, timeout: int = 90) -> list[client.V1Pod]:
    """The pod's versions from resourceVersion ``since`` until its DELETED event (a real watch)."""
    seen, stream = [], watch.Watch()
    for event in stream.stream(
        core.list_namespaced_pod,
        NS,
        field_selector=f"metadata.name={name}",
        resource_version=since,
        timeout_seconds=timeout,
    ):
        seen.append(event["object"])
        if event["type"] == "DELETED":
            stream.stop()
            return seen
    raise AssertionError(f"pod {name} was not deleted within {timeout} s")


def _disruption(pods: list[client.V1Pod]) -> str | None:
    """The reason of the first DisruptionTarget condition the pod carried."""
    for pod in pods:
        if found := condition(pod.status.conditions, "DisruptionTarget"):
            return str(found.reason)
    return None


def _job_pods(core: client.CoreV1Api, job: str) -> list[client.V1Pod]:
    return list(core.list_namespaced_pod(NS, label_selector=f"job-name={job}").items)


def _queued_jobset(cluster: UpstreamCluster, name: str) -> None:
    """A JobSet of one CPU pod in the Kueue queue, admitted by Kueue and running."""
    template = job_template(LOOP, grace=5, nodeSelector={POOL_LABEL: "cpu-np"})
    template["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] = REQUESTS
    manifest = jobset_manifest(name, {"workers": template})
    manifest["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": QUEUE}
    JobSets(client.CustomObjectsApi(cluster.api)).create(manifest)
    wait_for(lambda: _admitted(cluster, name), 90)


def _workload(cluster: UpstreamCluster, jobset: str) -> dict[str, Any] | None:
    try:
        return kube_faults.workload_of_jobset(cluster.api, NS, jobset)
    except kube_faults.FaultError:
        return None


def _admitted(cluster: UpstreamCluster, jobset: str) -> bool:
    workload = _workload(cluster, jobset)
    conditions = (workload or {}).get("status", {}).get("conditions")
    return bool(condition(conditions, "Admitted")) and not condition(conditions, "Evicted")


def _evicted(cluster: UpstreamCluster, jobset: str) -> dict[str, Any] | None:
    """The Workload's ``Evicted`` condition, once Kueue has written it."""
    workload = _workload(cluster, jobset) or {}
    found: dict[str, Any] | None = condition(workload.get("status", {}).get("conditions"), "Evicted")
    return found


def _suspended(cluster: UpstreamCluster, jobset: str) -> bool:
    return bool(JobSets(client.CustomObjectsApi(cluster.api)).get(jobset)["spec"].get("suspend"))


def _delete_jobset(cluster: UpstreamCluster, name: str) -> None:
    JobSets(client.CustomObjectsApi(cluster.api)).delete(name, propagation="Background")


# -- delete-pod, evict-pod, signal-pod -------------------------------------------------------------------------


def test_delete_pod_deletes_it_and_the_job_controller_makes_a_replacement(
    cluster: UpstreamCluster, core: client.CoreV1Api, cli: Any
) -> None:
    name = unique("deleted")
    batch = client.BatchV1Api(cluster.api)
    template = {
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {POOL_LABEL: "cpu-np"},
            "containers": [container("main", LOOP)],
        }
    }
    batch.create_namespaced_job(
        NS,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {"backoffLimit": 3, "template": template},
        },
    )
    first = wait_for(lambda: [p for p in _job_pods(core, name) if p.status.phase == "Running"], 60)[0]
    pids = pod_pids(first)

    assert cli("delete-pod", NS, first.metadata.name) == (0, {"deleted": f"{NS}/{first.metadata.name}"})

    wait_for(lambda: not _exists(lambda: core.read_namespaced_pod(first.metadata.name, NS)), 60)
    wait_processes_gone(pids)
    replacement = wait_for(
        lambda: [
            p for p in _job_pods(core, name) if p.metadata.uid != first.metadata.uid and p.status.phase == "Running"
        ],
        90,  # the Job controller's back-off after a failed pod: 10 s, then doubling
    )[0]
    assert replacement.metadata.owner_references[0].name == name
    batch.delete_namespaced_job(name, NS, propagation_policy="Background")


def test_evict_pod_goes_through_the_eviction_api(cluster: UpstreamCluster, core: client.CoreV1Api) -> None:
    name = unique("evicted")
    started = _start_pod(core, name)
    pids = pod_pids(started)

    assert cluster.faults.evict_pod(NS, name) == {"evicted": f"{NS}/{name}", "reason": "EvictionByEvictionAPI"}

    versions = _until_deleted(core, name, started.metadata.resource_version)
    assert _disruption(versions) == "EvictionByEvictionAPI"  # written by kube-apiserver's eviction handler
    assert versions[-1].metadata.deletion_timestamp is not None
    wait_processes_gone(pids)


def test_signal_pod_kills_a_process_and_the_container_restarts_under_on_failure(
    cluster: UpstreamCluster, core: client.CoreV1Api
) -> None:
    name = unique("killed")
    started = _start_pod(core, name, restart_policy="OnFailure")

    assert cluster.faults.signal_pod(NS, name, signal.SIGKILL) == 1

    def restarted() -> client.V1ContainerStatus | None:
        status = core.read_namespaced_pod(name, NS).status.container_statuses[0]
        return status if status.restart_count == 1 and status.state.running else None

    status = wait_for(restarted, 60)
    assert status.last_state.terminated.exit_code == 137  # 128 + SIGKILL, as the kubelet reports a signal's death
    assert not set(pod_pids(started)) & {int(status.container_id.removeprefix("local://"))}
    core.delete_namespaced_pod(name, NS, grace_period_seconds=0)


def test_signal_pod_from_the_cli_fails_the_pod_under_never(core: client.CoreV1Api, cli: Any) -> None:
    name = unique("termed")
    _start_pod(core, name, armed("trap 'exit 7' TERM"))
    wait_armed(core, name)  # running is not enough: a SIGTERM before the trap kills the shell outright

    code, answer = cli("signal-pod", NS, name, "--signal", "TERM", "--container", "main")

    assert (code, answer["signal"], answer["processes"]) == (0, "SIGTERM", 1)
    failed = wait_for(lambda: (p := core.read_namespaced_pod(name, NS)).status.phase == "Failed" and p, 60)
    assert failed.status.container_statuses[0].state.terminated.exit_code == 7  # its TERM trap ran
    core.delete_namespaced_pod(name, NS)


# -- node faults: repair-node-pool, lose-host ------------------------------------------------------------------


def _node_unschedulable(core: client.CoreV1Api, node: str) -> bool:
    return bool(core.read_node(node).spec.unschedulable)


def test_repair_node_pool_cordons_drains_and_uncordons_after_its_seconds(
    cluster: UpstreamCluster, core: client.CoreV1Api
) -> None:
    name, nodes = unique("drained"), ["gke-faults-tpu-a-0", "gke-faults-tpu-a-1"]
    started = _start_pod(core, name, **_on_tpu_node(nodes[0]))

    repaired = cluster.faults.repair_node_pool("tpu-a", 8.0)

    assert (repaired["nodes"], repaired["evictedPods"]) == (nodes, [f"{NS}/{name}"])
    assert all(_node_unschedulable(core, node) for node in nodes)  # cordoned through the API
    versions = _until_deleted(core, name, started.metadata.resource_version)
    assert _disruption(versions) == "EvictionByEvictionAPI"  # drained through the Eviction API
    wait_processes_gone(pod_pids(started))
    wait_for(lambda: not any(_node_unschedulable(core, node) for node in nodes), 60)  # back, uncordoned


def _node_ready(core: client.CoreV1Api, node: str) -> bool:
    try:
        conditions = core.read_node(node).status.conditions or []
    except client.ApiException as error:
        if error.status == 404:
            return False
        raise
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


# -- Kueue's faults: stop-queue, deactivate-workload, kueue-configuration --------------------------------------


def test_stop_queue_hold_and_drain_makes_kueue_evict_its_workloads(cluster: UpstreamCluster, cli: Any) -> None:
    name = unique("held")
    _queued_jobset(cluster, name)
    try:
        stopped = cluster.faults.stop_queue(cluster_queue=CLUSTER_QUEUE, policy="HoldAndDrain")
        assert stopped["spec"]["stopPolicy"] == "HoldAndDrain"
        evicted = wait_for(lambda: _evicted(cluster, name), 60)
        assert evicted["reason"] == "ClusterQueueStopped"  # kueue WorkloadEvictedByClusterQueueStopped
        wait_for(lambda: _suspended(cluster, name), 60)  # the JobSet integration suspends the JobSet
        cluster.faults.stop_queue(cluster_queue=CLUSTER_QUEUE, policy="None")
        wait_for(lambda: _admitted(cluster, name), 90)  # admitted again

        assert cli("stop-queue", "--local-queue", f"{NS}/{QUEUE}", "--policy", "HoldAndDrain")[0] == 0
        evicted = wait_for(lambda: _evicted(cluster, name), 60)
        assert evicted["reason"] == "LocalQueueStopped"
    finally:
        cluster.faults.stop_queue(local_queue=f"{NS}/{QUEUE}", policy="None")
        cluster.faults.stop_queue(cluster_queue=CLUSTER_QUEUE, policy="None")
        _delete_jobset(cluster, name)


def test_deactivate_workload_makes_kueue_evict_it_and_activate_requeues_it(cluster: UpstreamCluster, cli: Any) -> None:
    name = unique("inactive")
    _queued_jobset(cluster, name)
    try:
        written = cluster.faults.deactivate_workload(NS, name)
        assert written["spec"]["active"] is False
        evicted = wait_for(lambda: _evicted(cluster, name), 60)
        assert evicted["reason"] == "Deactivated"  # kueue WorkloadDeactivated
        wait_for(lambda: _suspended(cluster, name), 60)

        code, activated = cli("deactivate-workload", NS, name, "--activate")
        assert (code, activated["spec"]["active"]) == (0, True)
        wait_for(lambda: _admitted(cluster, name) and not _suspended(cluster, name), 90)
    finally:
        _delete_jobset(cluster, name)


def _kueue_configmap(core: client.CoreV1Api) -> str:
    return str(core.read_namespaced_config_map(KUEUE_CONFIG_MAP, "kueue-system").data[KUEUE_CONFIG_KEY])


def test_kueue_configuration_edits_the_configmap_and_restarts_the_manager_with_it(
    cluster: UpstreamCluster, core: client.CoreV1Api, cli: Any, tmp_path: Path
) -> None:
    before = cluster.control_plane.components["kueue"].pid

    applied = cluster.faults.kueue_configuration({"waitForPodsReady": {"timeout": "5m"}})

    assert applied["waitForPodsReady"] == {"timeout": "5m"}  # as written: Kueue defaults it in its own memory
    assert "jobset.x-k8s.io/jobset" in applied["integrations"]["frameworks"]  # the rest of it kept
    assert "waitForPodsReady" in _kueue_configmap(core)
    assert cluster.control_plane.components["kueue"].pid != before  # a new manager process
    name = unique("ready")
    try:
        _queued_jobset(cluster, name)  # the restarted Kueue admits (its webhooks serve again) ...
        workload = wait_for(
            lambda: condition((_workload(cluster, name) or {}).get("status", {}).get("conditions"), "PodsReady"), 60
        )
        assert workload["status"] == "True"  # ... and, waiting for pods to be ready, writes PodsReady
    finally:
        _delete_jobset(cluster, name)
        code, off = cli("kueue-configuration", "-")
    assert code == 0 and "waitForPodsReady" not in off
    assert "waitForPodsReady" not in _kueue_configmap(core)


def test_a_kueue_configuration_kueue_refuses_fails_with_its_message_and_the_previous_one_runs_again(
    cluster: UpstreamCluster, core: client.CoreV1Api, cli: Any, tmp_path: Path
) -> None:
    # Kueue's manager reads its Configuration at start and exits on a bad one; the refusal is its own message.
    running, published = cluster.control_plane.kueue_configuration_path().read_text(), _kueue_configmap(core)
    with pytest.raises(
        KueueConfigurationError, match=r'^Kueue refused its Configuration: time: invalid duration "abc"$'
    ):
        cluster.faults.kueue_configuration({"waitForPodsReady": {"timeout": "abc"}})
    bad = tmp_path / "kueue-config.yaml"
    bad.write_text("waitForPodsReady: {timeout: 5m, recoveryTimeout: -1m}\n")
    code, refused = cli("kueue-configuration", str(bad))  # the fault endpoint: 400, Kueue's message
    assert (code, refused["code"]) == (1, 400)
    assert "waitForPodsReady.recoveryTimeout: Invalid value" in refused["message"]
    assert cluster.control_plane.components["kueue"].running()
    assert cluster.control_plane.kueue_configuration_path().read_text() == running
    assert _kueue_configmap(core) == published
    name = unique("after-refusal")
    try:
        _queued_jobset(cluster, name)  # the manager back with its previous configuration admits
        wait_for(lambda: _admitted(cluster, name), 60)
    finally:
        _delete_jobset(cluster, name)


# -- the API's faults, in the proxy ---------------------------------------------------------------------------


def test_fail_requests_and_latency_meet_only_the_proxy_context(
    cluster: UpstreamCluster, core: client.CoreV1Api, proxied: client.CoreV1Api, cli: Any
) -> None:
    rule = cluster.faults.fail_requests(503, count=1, path="configmaps$", method="GET")
    assert (rule["code"], rule["count"]) == (503, 1)
    core.list_namespaced_config_map(NS)  # the default context talks to kube-apiserver itself
    with pytest.raises(client.ApiException) as caught:
        proxied.list_namespaced_config_map(NS)
    assert caught.value.status == 503
    proxied.list_namespaced_config_map(NS)  # its one failure spent

    # A POST: on a GET, the client's urllib3 honours a 429's Retry-After and retries, unseen by the caller.
    code, burst = cli("fail-requests", "--code", "429", "--count", "1", "--retry-after", "2", "--method", "POST")
    assert (code, burst["code"], burst["retry_after"], burst["method"]) == (0, 429, 2, "POST")
    with pytest.raises(client.ApiException) as caught:
        proxied.create_namespaced_config_map(NS, {"metadata": {"name": unique("throttled")}})
    assert (caught.value.status, caught.value.headers["Retry-After"]) == (429, "2")

    cluster.faults.latency(1.5, path="configmaps$")
    began = time.monotonic()
    proxied.list_namespaced_config_map(NS)
    assert time.monotonic() - began >= 1.5
    began = time.monotonic()
    core.list_namespaced_config_map(NS)
    assert time.monotonic() - began < 1.5
    assert cluster.faults.clear_api_faults() == {"failures": [], "latencies": [], "injected": 2}


def _watch_in_thread(core: client.CoreV1Api, timeout: int) -> tuple[threading.Thread, list[str]]:
    ended: list[str] = []

    def run() -> None:
        try:
            for _ in watch.Watch().stream(core.list_namespaced_config_map, NS, timeout_seconds=timeout):
                pass
        except urllib3.exceptions.ProtocolError:  # the connection closed mid-stream, as a restart closes it
            pass
        ended.append("ended")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, ended


def test_expire_watches_ends_the_watches_open_through_the_proxy(
    cluster: UpstreamCluster, core: client.CoreV1Api, proxied: client.CoreV1Api
) -> None:
    through_proxy, ended = _watch_in_thread(proxied, 300)
    direct, _ = _watch_in_thread(core, 30)

    wait_for(lambda: cluster.faults.expire_watches()["expired"] >= 1, 30)  # once the proxy holds the watch

    through_proxy.join(timeout=30)
    assert ended == ["ended"]  # long before its 300 s
    assert direct.is_alive()  # the default context's watch is kube-apiserver's own


def _etcd_range_at(cluster: UpstreamCluster, revision: int) -> dict[str, Any]:
    """A read straight from etcd (its gRPC gateway) at ``revision``: the answer, or the error etcd gave."""
    url = f"http://127.0.0.1:{cluster.control_plane.ports.etcd_client}/v3/kv/range"
    body = json.dumps({"key": base64.b64encode(b"/registry/configmaps/").decode(), "revision": revision}).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=10) as response:
            answer: dict[str, Any] = json.loads(response.read())
    except urllib.error.HTTPError as error:
        answer = json.loads(error.read())
    return answer


def test_expire_watches_compact_compacts_etcd_past_an_older_resource_version(
    cluster: UpstreamCluster, core: client.CoreV1Api, cli: Any
) -> None:
    name = unique("compacted")
    created = core.create_namespaced_config_map(NS, {"metadata": {"name": name}, "data": {"n": "0"}})
    old = int(created.metadata.resource_version)  # kube-apiserver's resourceVersion is etcd's revision
    for step in range(3):
        core.patch_namespaced_config_map(name, NS, {"data": {"n": str(step + 1)}})
    assert "header" in _etcd_range_at(cluster, old)  # etcd still has it

    code, answer = cli("expire-watches", "--compact")

    assert (code, answer["compacted"]) == (0, True)
    compacted = _etcd_range_at(cluster, old)
    assert "required revision has been compacted" in str(compacted.get("error") or compacted.get("message")), compacted
    # kube-apiserver's watch cache still holds the older events: a watch from `old` is served from it, not 410.
    # It answers 410 once its cache has dropped them, or after a restart re-lists at the compacted revision.


@dataclass(frozen=True)
class _LostHost:
    """lose-host's scenario under way: the pod started on the lost host, the fault's answer, and the thread that
    collects the pod's versions from its running one until its DELETED event (a real watch, kube-apiserver's own)."""

    started: client.V1Pod
    answer: dict[str, Any]
    versions: list[client.V1Pod]
    watching: threading.Thread


@pytest.fixture(scope="module", autouse=True)
def lost_host(request: pytest.FixtureRequest, cluster: UpstreamCluster) -> Iterator[_LostHost | None]:
    """When the lose-host test is to run, its host is lost as the module begins: the controllers' waits (the node
    lifecycle controller's grace period, pod GC's 40 s quarantine and 20 s passes) go by while the other tests run
    on the other pools (tpu-b is this scenario's alone), and the test, the module's last, checks what they did."""
    if not any(item.name.startswith("test_lose_host_") for item in request.session.items):
        yield None
        return
    core, nodes = client.CoreV1Api(cluster.api), ["gke-faults-tpu-b-0", "gke-faults-tpu-b-1"]
    started = _start_pod(core, unique("lost"), **_on_tpu_node(nodes[0]))
    watcher = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))  # the test's own connection
    versions: list[client.V1Pod] = []

    def watch_until_deleted() -> None:
        since = started.metadata.resource_version
        versions.extend(_until_deleted(client.CoreV1Api(watcher), started.metadata.name, since, timeout=LOST_SECONDS))

    watching = threading.Thread(target=watch_until_deleted, name="lost-host-watch", daemon=True)
    watching.start()
    try:
        yield _LostHost(started, cluster.faults.lose_host(nodes[0], repair_seconds=3600), versions, watching)
    finally:
        watching.join(timeout=LOST_SECONDS)
        watcher.close()


@pytest.mark.slow
def test_lose_host_the_slice_is_marked_then_deleted_by_gke_its_pods_collected_and_it_comes_back(
    cluster: UpstreamCluster, core: client.CoreV1Api, lost_host: _LostHost | None
) -> None:
    assert lost_host is not None
    nodes = ["gke-faults-tpu-b-0", "gke-faults-tpu-b-1"]
    assert (lost_host.answer["nodePool"], lost_host.answer["nodes"]) == ("tpu-b", nodes)
    wait_processes_gone(pod_pids(lost_host.started))  # they died with the host
    # The node lifecycle controller marks the nodes (after --node-monitor-grace-period, GRACE_SECONDS); GKE deletes
    # the gone VMs' Nodes, and pod GC fails and deletes the pod bound to one (after its 40 s quarantine).
    lost_host.watching.join(timeout=LOST_SECONDS)
    versions = lost_host.versions
    assert versions and versions[-1].metadata.deletion_timestamp is not None, "the pod was not deleted"
    assert _disruption(versions) == "DeletionByPodGC"
    assert versions[-1].status.phase == "Failed"
    marked = core.list_event_for_all_namespaces(field_selector=f"involvedObject.name={nodes[0]},reason=NodeNotReady")
    assert marked.items, "the node lifecycle controller recorded no NodeNotReady for the lost node"
    assert not any(_exists(lambda n=node: core.read_node(n)) for node in nodes)

    # The repair, now rather than in an hour: the recreated VMs register their nodes again, Ready.
    cluster.faults.repair_lost_slices()
    wait_for(lambda: all(_node_ready(core, node) for node in nodes), 60)
