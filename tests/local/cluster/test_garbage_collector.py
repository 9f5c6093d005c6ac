"""The garbage collector through the real client: foreground, background and orphan propagation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client

from elastic_training.operators.constants import LABEL_JOB_NAME
from tests.support.control_plane import (
    NS,
    armed,
    container,
    pod_manifest,
    pod_pids,
    pods_of,
    unique,
    wait_armed,
    wait_processes_gone,
)
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for


def _job(name: str, parallelism: int = 2, grace: int = 5, on_term: str = "sleep 0.3") -> dict[str, Any]:
    """A Job whose pods run until SIGTERM, then run ``on_term`` and exit 0."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": grace,
                    "containers": [container("main", armed(f"trap '{on_term}; exit 0' TERM"))],
                }
            },
        },
    }


def _running(k8s: K8s, job: str, count: int) -> list[client.V1Pod]:
    def probe() -> list[client.V1Pod] | None:
        pods = [p for p in pods_of(k8s.core, f"{LABEL_JOB_NAME}={job}") if p.status and p.status.phase == "Running"]
        return pods if len(pods) == count and all(pod_pids(p) for p in pods) else None

    pods = wait_for(probe, 30)
    for pod in pods:  # a SIGTERM before the trap would stop a pod at once, not after its handler
        wait_armed(k8s.core, pod.metadata.name)
    return pods


def _job_exists(k8s: K8s, name: str) -> client.V1Job | None:
    try:
        job: client.V1Job = k8s.batch.read_namespaced_job(name, NS)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise
    return job


def test_foreground_deletion_keeps_the_owner_until_its_pods_are_gone(k8s: K8s, tmp_path: Path) -> None:
    may_stop = tmp_path / "may-stop"  # the pods stop on SIGTERM only once the test has seen the Job waiting
    name = unique("fg")
    k8s.batch.create_namespaced_job(NS, _job(name, grace=60, on_term=f"until [ -e {may_stop} ]; do sleep 0.05; done"))
    pods = _running(k8s, name, 2)
    k8s.batch.delete_namespaced_job(name, NS, propagation_policy="Foreground")
    job = _job_exists(k8s, name)
    assert job is not None and job.metadata.deletion_timestamp is not None
    assert "foregroundDeletion" in (job.metadata.finalizers or [])
    assert len(pods_of(k8s.core, f"{LABEL_JOB_NAME}={name}")) == 2  # terminating, not gone
    may_stop.touch()
    wait_for(lambda: _job_exists(k8s, name) is None, 30)
    assert not pods_of(k8s.core, f"{LABEL_JOB_NAME}={name}")
    wait_processes_gone([pid for pod in pods for pid in pod_pids(pod)])


def test_background_deletion_removes_the_owner_and_collects_its_pods(k8s: K8s) -> None:
    name = unique("bg")
    k8s.batch.create_namespaced_job(NS, _job(name))
    pods = _running(k8s, name, 2)
    k8s.batch.delete_namespaced_job(name, NS, propagation_policy="Background")
    assert _job_exists(k8s, name) is None
    wait_for(lambda: not pods_of(k8s.core, f"{LABEL_JOB_NAME}={name}"), 30)
    wait_processes_gone([pid for pod in pods for pid in pod_pids(pod)])


def test_orphan_propagation_leaves_the_pods_running(k8s: K8s) -> None:
    name = unique("orphan")
    k8s.batch.create_namespaced_job(NS, _job(name, parallelism=1))
    pod = _running(k8s, name, 1)[0]
    k8s.batch.delete_namespaced_job(name, NS, propagation_policy="Orphan")
    wait_for(lambda: _job_exists(k8s, name) is None, 30)
    kept = k8s.core.read_namespaced_pod(pod.metadata.name, NS)
    assert kept.status.phase == "Running" and not kept.metadata.owner_references
    k8s.core.delete_namespaced_pod(pod.metadata.name, NS, grace_period_seconds=0)
    wait_processes_gone(pod_pids(pod))


def test_a_dependent_whose_owner_never_existed_is_collected(k8s: K8s) -> None:
    name = unique("stray")
    manifest = pod_manifest(name, container("main", "sleep 30"), terminationGracePeriodSeconds=1)
    manifest["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "gone", "uid": "00000000-0000-0000-0000-000000000000"}
    ]
    k8s.core.create_namespaced_pod(NS, manifest)

    def gone() -> bool:
        try:
            k8s.core.read_namespaced_pod(name, NS)
        except client.ApiException as err:
            return bool(err.status == 404)
        return False

    wait_for(gone, 30)
