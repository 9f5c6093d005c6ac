"""The upstream control plane, as a user meets it: kubectl names the real release, the CRDs are JobSet's and
Kueue's own, the API port belongs to kube-apiserver, and stopping leaves no process behind."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from elastic_training.local.controlplane.processes import ProcessError
from elastic_training.local.descriptions.cluster_description import ClusterDescription, parse_description
from elastic_training.local.upstream_cluster import UpstreamCluster
from tests.support.control_plane import control_plane_processes


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamCluster]:
    with UpstreamCluster(tmp_path_factory.mktemp("upstream"), description="v5e-small", run_nodes=False) as running:
        yield running


def kubectl(cluster: UpstreamCluster, *args: str) -> str:
    return cluster.control_plane.kubectl(*args)


def test_kubectl_version_names_the_real_server_release(upstream: UpstreamCluster) -> None:
    version = json.loads(kubectl(upstream, "version", "-o", "json"))
    assert version["serverVersion"]["gitVersion"] == "v1.36.3"
    assert (version["serverVersion"]["major"], version["serverVersion"]["minor"]) == ("1", "36")


def test_the_api_port_belongs_to_a_kube_apiserver_process(upstream: UpstreamCluster) -> None:
    apiserver = psutil.Process(upstream.control_plane.components["kube-apiserver"].pid)
    assert apiserver.name() == "kube-apiserver"
    ports = {c.laddr.port for c in apiserver.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}
    assert upstream.port in ports


def test_api_resources_lists_jobset_and_kueue_kinds_from_their_crds(upstream: UpstreamCluster) -> None:
    kinds = {line.split()[-1] for line in kubectl(upstream, "api-resources", "--no-headers").splitlines()}
    assert {
        "JobSet",
        "Workload",
        "ClusterQueue",
        "LocalQueue",
        "ResourceFlavor",
        "AdmissionCheck",
        "ProvisioningRequest",
        "WorkloadPriorityClass",
    } <= kinds
    crds = json.loads(kubectl(upstream, "get", "crd", "jobsets.jobset.x-k8s.io", "-o", "json"))
    assert crds["status"]["conditions"][0]["status"] == "True"


def test_the_descriptions_kueue_objects_are_admitted_by_kueues_webhooks(upstream: UpstreamCluster) -> None:
    queues = json.loads(kubectl(upstream, "get", "clusterqueues", "-o", "json"))["items"]
    assert [q["metadata"]["name"] for q in queues] == ["cluster-queue"]
    # Kueue's defaulting webhook ran on it (it sets queueingStrategy when absent)
    assert queues[0]["spec"]["queueingStrategy"] == "BestEffortFIFO"
    local = json.loads(kubectl(upstream, "get", "localqueues", "-n", "default", "-o", "json"))["items"]
    assert [q["metadata"]["name"] for q in local] == ["multislice-queue"]


def test_a_jobset_is_validated_by_the_real_jobset_webhook(upstream: UpstreamCluster) -> None:
    # jobset pkg/webhooks/jobset_webhook.go: a coordinator must name one of the replicated jobs
    job = {
        "name": "worker",
        "replicas": 1,
        "template": {
            "spec": {
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "local"}]}}
            }
        },
    }
    bad = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "bad"},
        "spec": {"coordinator": {"replicatedJob": "head"}, "replicatedJobs": [job]},
    }
    with pytest.raises(ProcessError, match=r'admission webhook "vjobset.kb.io" denied.*coordinator replicatedJob head'):
        upstream.control_plane.apply([bad])


def test_the_audit_log_records_each_request_once(upstream: UpstreamCluster) -> None:
    since = upstream.audit_position()
    kubectl(upstream, "get", "pods", "-n", "kube-system")
    events = [e for e in upstream.audit_events(since) if e.resource == "pods" and e.user_agent.startswith("kubectl")]
    assert [(e.verb, e.namespace, e.username) for e in events] == [("list", "kube-system", "elastic-training-admin")]


def _description(queues: dict[str, Any]) -> ClusterDescription:
    return parse_description(
        {
            "nodePools": [
                {"name": "cpu", "machineType": "e2-standard-4", "nodeCount": 1, "cpu": "4", "memory": "16Gi"}
            ],
            "kueue": {"resourceFlavors": [{"name": "f"}], **queues},
        }
    )


def test_a_queue_object_kueue_refuses_fails_the_start_naming_the_field_and_leaves_nothing(tmp_path: Path) -> None:
    # The description parser checks the section's shape; the objects' own fields are checked where they are on GKE,
    # by kube-apiserver's CRD schema and Kueue's webhooks, when the cluster applies them.
    description = _description(
        {"clusterQueues": [{"name": "cq", "queueingStrategy": "Random", "namespaceSelector": {}}]}
    )
    before = control_plane_processes()
    cluster = UpstreamCluster(tmp_path, description=description, run_nodes=False)
    with pytest.raises(ProcessError, match=r"queueingStrategy.*Random|Random.*queueingStrategy"):
        cluster.start()
    assert control_plane_processes() == before
    assert not cluster.kubeconfig_path.exists()


def test_a_queue_object_field_the_schema_lacks_is_refused_naming_it(upstream: UpstreamCluster) -> None:
    # A field the object does not have: server-side apply, as the start applies the description's objects, refuses it
    # as on GKE. On the module's running cluster: what a refused start leaves behind is the test above's.
    description = _description(
        {
            "clusterQueues": [{"name": "cq", "namespaceSelector": {}}],
            "localQueues": [{"name": "lq", "clusterQueue": "cq", "queue": "cq"}],
        }
    )
    local = [o for o in description.queue_objects if o.rtype.kind == "LocalQueue"]
    documents = [{"apiVersion": o.rtype.api_version, "kind": o.rtype.kind, **dict(o.body)} for o in local]
    with pytest.raises(ProcessError, match=r"\.spec\.queue: field not declared in schema"):
        upstream.control_plane.apply(documents)
    local_queues = json.loads(kubectl(upstream, "get", "localqueues", "-A", "-o", "json"))["items"]
    assert [q["metadata"]["name"] for q in local_queues] == ["multislice-queue"]  # the description's, and no "lq"


def test_stopping_leaves_no_process_behind(upstream: UpstreamCluster) -> None:
    # The module's cluster, stopped by its last test (the fixture's own stop after it does nothing: stop is idempotent).
    pids = [c.pid for c in upstream.control_plane.components.values()]
    assert len(pids) == 6 and all(psutil.pid_exists(p) for p in pids if p)
    upstream.stop()
    assert not [p for p in pids if p and psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
