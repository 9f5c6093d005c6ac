"""JobSet exclusive placement over HTTP: a multi-host slice in one node pool, one Job per pool."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from elastic_training.local.cluster.jobset_placement import LABEL_PRIORITY
from elastic_training.local.descriptions.cluster_description import parse_description
from elastic_training.operators.constants import ANNOTATION_EXCLUSIVE_TOPOLOGY, LABEL_JOB_KEY, LABEL_JOBSET_NAME
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

POOLS = ("a", "b", "c", "d")
# Four v5e 2x4 slices: four node pools of two hosts.
CLUSTER_DESCRIPTION = parse_description(
    {
        "cluster": "x",
        "nodePools": [
            {
                "name": f"tpu-{pool}",
                "machineType": "ct5lp-hightpu-4t",
                "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x4", "chipsPerNode": 4},
                "nodeCount": 2,
                "cpu": "112",
                "memory": "192Gi",
            }
            for pool in POOLS
        ],
    }
)
TPU_TOLERATION = {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
SELECTOR = {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice", "cloud.google.com/gke-tpu-topology": "2x4"}
NODEPOOL = "cloud.google.com/gke-nodepool"


def _slices_jobset(name: str, replicas: int, *, exclusive: bool) -> dict[str, Any]:
    """``replicas`` slices of two hosts each: Indexed Jobs of 2 pods, each taking a whole host's chips."""
    annotations = {ANNOTATION_EXCLUSIVE_TOPOLOGY: NODEPOOL} if exclusive else {}
    worker = {
        "restartPolicy": "OnFailure",
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": SELECTOR,
        "tolerations": [TPU_TOLERATION],
        "containers": [
            {
                "name": "w",
                "image": "local",
                "command": ["sleep", "60"],
                "resources": {"limits": {"google.com/tpu": "4"}},
            }
        ],
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "worker",
                    "replicas": replicas,
                    "template": {
                        "metadata": {"annotations": annotations},
                        "spec": {
                            "completionMode": "Indexed",
                            "parallelism": 2,
                            "completions": 2,
                            "backoffLimit": 4,
                            "template": {"spec": worker},
                        },
                    },
                }
            ]
        },
    }


def _blocker(k8s: K8s, name: str, node: str) -> None:
    """A pod holding all of ``node``'s chips (not a JobSet's: exclusive placement does not repel it)."""
    body = {
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [TPU_TOLERATION],
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "b",
                    "image": "local",
                    "command": ["sleep", "60"],
                    "resources": {"limits": {"google.com/tpu": "4"}},
                }
            ],
        },
    }
    k8s.core.create_namespaced_pod("default", body)
    wait_for(lambda: k8s.core.read_namespaced_pod(name, "default").spec.node_name == node)


def _pods(k8s: K8s, jobset: str) -> list[client.V1Pod]:
    return list(k8s.core.list_namespaced_pod("default", label_selector=f"{LABEL_JOBSET_NAME}={jobset}").items)


def _pool_of(k8s: K8s, node: str) -> str:
    return str(k8s.core.read_node(node).metadata.labels[NODEPOOL])


def _placement(k8s: K8s, jobset: str) -> dict[str, set[str]]:
    """Job name → node pools of its scheduled pods."""
    pools: dict[str, set[str]] = {}
    for pod in _pods(k8s, jobset):
        if pod.spec.node_name:
            job = pod.metadata.labels["batch.kubernetes.io/job-name"]
            pools.setdefault(job, set()).add(_pool_of(k8s, pod.spec.node_name))
    return pools


def _cleanup(k8s: K8s, jobset: str, *blockers: str) -> None:
    k8s.custom.delete_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", jobset, propagation_policy="Foreground"
    )
    for name in blockers:
        k8s.core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
    wait_for(lambda: not _pods(k8s, jobset) and not k8s.core.list_namespaced_pod("default").items)


def test_without_the_annotation_a_slice_can_straddle_two_pools(k8s: K8s) -> None:
    _blocker(k8s, "block-a", "gke-x-tpu-a-0")
    _blocker(k8s, "block-b", "gke-x-tpu-b-0")
    _blocker(k8s, "block-c", "gke-x-tpu-c-0")
    _blocker(k8s, "block-d", "gke-x-tpu-d-0")
    k8s.custom.create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", _slices_jobset("split", 1, exclusive=False)
    )
    wait_for(lambda: sum(1 for p in _pods(k8s, "split") if p.spec.node_name) == 2)
    (pools,) = _placement(k8s, "split").values()
    assert len(pools) == 2  # one host free per pool: the slice's two pods are in two pools
    _cleanup(k8s, "split", "block-a", "block-b", "block-c", "block-d")


def test_with_the_annotation_each_job_gets_a_pool_of_its_own(k8s: K8s) -> None:
    k8s.custom.create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", _slices_jobset("excl", 3, exclusive=True)
    )
    wait_for(lambda: sum(1 for p in _pods(k8s, "excl") if p.spec.node_name) == 6)
    placement = _placement(k8s, "excl")
    assert sorted(placement) == ["excl-worker-0", "excl-worker-1", "excl-worker-2"]
    assert all(len(pools) == 1 for pools in placement.values())  # never split
    assert len(set.union(*placement.values())) == 3  # no two Jobs share a pool
    for pod in _pods(k8s, "excl"):
        assert pod.metadata.annotations[ANNOTATION_EXCLUSIVE_TOPOLOGY] == NODEPOOL
        assert pod.metadata.labels[LABEL_PRIORITY] == "0"
        if pod.metadata.annotations["batch.kubernetes.io/job-completion-index"] == "0":
            (affinity,) = pod.spec.affinity.pod_affinity.required_during_scheduling_ignored_during_execution
            assert affinity.topology_key == NODEPOOL
            assert affinity.label_selector.match_expressions[0].key == LABEL_JOB_KEY
            assert pod.spec.affinity.pod_anti_affinity.required_during_scheduling_ignored_during_execution
        else:
            assert pod.spec.node_selector[NODEPOOL] == _pool_of(k8s, pod.spec.node_name)
    job = k8s.batch.read_namespaced_job("excl-worker-0", "default")
    assert job.metadata.annotations[ANNOTATION_EXCLUSIVE_TOPOLOGY] == NODEPOOL
    _cleanup(k8s, "excl")


def test_with_the_annotation_a_slice_waits_rather_than_straddle(k8s: K8s) -> None:
    _blocker(k8s, "block-a", "gke-x-tpu-a-0")
    _blocker(k8s, "block-b", "gke-x-tpu-b-0")
    _blocker(k8s, "block-c", "gke-x-tpu-c-0")
    _blocker(k8s, "block-d", "gke-x-tpu-d-0")
    k8s.custom.create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", _slices_jobset("waits", 1, exclusive=True)
    )
    wait_for(lambda: len(_pods(k8s, "waits")) == 2)

    def follower_message() -> str | None:
        for pod in _pods(k8s, "waits"):
            for condition in pod.status.conditions or []:
                if condition.type == "PodScheduled" and condition.status == "False":
                    return str(condition.message)
        return None

    message = wait_for(follower_message)
    assert "node(s) didn't match Pod's node affinity/selector" in message
    (pools,) = _placement(k8s, "waits").values()
    assert len(pools) == 1
    # A host of the leader's pool frees up: the follower joins the leader there, never elsewhere.
    leader = next(p for p in _pods(k8s, "waits") if p.spec.node_name)
    pool = _pool_of(k8s, leader.spec.node_name)
    k8s.core.delete_namespaced_pod(f"block-{pool[-1]}", "default", grace_period_seconds=0)
    wait_for(lambda: sum(1 for p in _pods(k8s, "waits") if p.spec.node_name) == 2)
    assert _placement(k8s, "waits") == {"waits-worker-0": {pool}}
    _cleanup(k8s, "waits", *(f"block-{p}" for p in POOLS if p != pool[-1]))


def _cpu_filler(k8s: K8s, name: str, node: str) -> None:
    """A pod taking a little of ``node``'s cpu and none of its chips: LeastAllocated then scores the node lower."""
    body = {
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [TPU_TOLERATION],
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "f", "image": "local", "command": ["sleep", "60"], "resources": {"requests": {"cpu": "8"}}}
            ],
        },
    }
    k8s.core.create_namespaced_pod("default", body)
    wait_for(lambda: k8s.core.read_namespaced_pod(name, "default").spec.node_name == node)


def _set_suspend(k8s: K8s, jobset: str, suspend: bool) -> None:
    k8s.custom.patch_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", jobset, {"spec": {"suspend": suspend}}
    )


def _leader_pools(k8s: K8s, jobset: str) -> dict[str, str]:
    """Job name → the node pool of its scheduled leader (completion index 0)."""
    return {
        pod.metadata.labels["batch.kubernetes.io/job-name"]: _pool_of(k8s, pod.spec.node_name)
        for pod in _pods(k8s, jobset)
        if pod.spec.node_name
        and not pod.metadata.deletion_timestamp
        and pod.metadata.annotations["batch.kubernetes.io/job-completion-index"] == "0"
    }


def test_slices_whose_pods_name_a_priority_class_keep_a_pool_each_when_resumed_and_resumed_again(k8s: K8s) -> None:
    """A JobSet behind Kueue, as xpk's are: its pods name a PriorityClass, it is created suspended and resumed at
    admission, suspended (its pods deleted) at a preemption and resumed again (new pods). A leader's anti-affinity
    repels only other Jobs' pods at *its* priority (the ``jobset.sigs.k8s.io/priority`` label the pod webhook copies
    from ``spec.priority``, which the API server's Priority admission plugin resolves from the class): a pod left
    without ``spec.priority`` gets no label, its term selects no pod, and nothing keeps the second leader out of the
    first's pool. Here pool a is the least allocated (cpu fillers on b, c, d), so that is where it would go: both
    leaders in one two-host pool, their followers pinned there with no host left, neither slice formed (what the
    end-to-end preemption test met after Kueue resumed its run)."""
    scheduling = client.SchedulingV1Api(k8s.api_client)
    scheduling.create_priority_class({"metadata": {"name": "placement-low"}, "value": 250})
    fillers = [f"fill-{pool}-{host}" for pool in POOLS[1:] for host in (0, 1)]
    try:
        for name in fillers:
            _cpu_filler(k8s, name, f"gke-x-tpu-{name[5]}-{name[7]}")
        manifest = _slices_jobset("queued", 2, exclusive=True)
        manifest["spec"]["suspend"] = True  # Kueue's JobSet webhook creates a queued JobSet suspended
        worker = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        worker["priorityClassName"] = "placement-low"
        k8s.custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "default", "jobsets", manifest)
        for admission in ("admitted", "re-admitted after a preemption"):
            _set_suspend(k8s, "queued", False)
            leaders = wait_for(lambda: (found := _leader_pools(k8s, "queued")) and len(found) == 2 and found)
            assert len(set(leaders.values())) == 2, f"{admission}: both slices' leaders in one pool: {leaders}"
            wait_for(lambda: sum(1 for p in _pods(k8s, "queued") if p.spec.node_name) == 4)
            placement = _placement(k8s, "queued")
            assert all(len(pools) == 1 for pools in placement.values()), placement
            assert len(set.union(*placement.values())) == 2, placement
            assert {p.metadata.labels[LABEL_PRIORITY] for p in _pods(k8s, "queued")} == {"250"}
            _set_suspend(k8s, "queued", True)  # Kueue's eviction: the Jobs suspended, their pods deleted
            wait_for(lambda: not _pods(k8s, "queued"))
    finally:
        _cleanup(k8s, "queued", *fillers)
        scheduling.delete_priority_class("placement-low")
