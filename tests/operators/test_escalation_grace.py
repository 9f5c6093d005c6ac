"""A full restart's short grace period, over HTTP against the local cluster, as the operators' ServiceAccount.

`JobSetLifecycle.retire` with ``pod_grace_seconds`` stops the old JobSet's pods with that grace period once its Jobs
are being deleted: pods that ignore SIGTERM (a hung trainer) are gone in seconds, not after their own
``terminationGracePeriodSeconds``. A Role from before ``delete`` on pods was granted only loses the shortening.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from kubernetes import client

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.constants import (
    HEAD_MAIN_CONTAINER,
    HEAD_REPLICATED_JOB,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    LABEL_JOBSET_UID,
)
from elastic_training.operators.hooks import JobSetHook
from elastic_training.operators.lifecycle import Handle, JobSetLifecycle
from tests.support.airflow_dags import NAMESPACE, operators_role_without
from tests.support.control_plane import ARMED
from tests.support.waiting import wait_for

OWN_GRACE_SECONDS = 600  # what the pods would hold the restart for without the shortening
LOG = logging.getLogger("test_escalation_grace")


def _hung_jobset(name: str, grace: int) -> dict[str, Any]:
    """A head and two workers whose containers ignore SIGTERM (as a hung trainer cannot answer it)."""
    script = f"trap '' TERM; echo {ARMED}; while :; do sleep 0.05; done"

    def replicated(replicated_name: str, pods: int) -> dict[str, Any]:
        container = {"name": HEAD_MAIN_CONTAINER, "image": "local", "command": ["sh", "-c", script]}
        pod = {"restartPolicy": "Never", "terminationGracePeriodSeconds": grace, "containers": [container]}
        job = {"completionMode": "Indexed", "completions": pods, "parallelism": pods, "backoffLimit": 0}
        return {"name": replicated_name, "replicas": 1, "template": {"spec": {**job, "template": {"spec": pod}}}}

    return {
        "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [replicated(HEAD_REPLICATED_JOB, 1), replicated("worker", 2)],
        },
    }


def _running_and_armed(admin: client.ApiClient, name: str, uid: str) -> list[str]:
    """Wait until the JobSet's three pods run and have set their trap; their names."""
    core = client.CoreV1Api(admin)

    def armed() -> list[str] | None:
        pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"{LABEL_JOBSET_UID}={uid}").items
        if len(pods) != 3 or any(p.status.phase != "Running" for p in pods):
            return None
        for pod in pods:
            log = core.read_namespaced_pod_log(pod.metadata.name, NAMESPACE, container=HEAD_MAIN_CONTAINER)
            if ARMED not in log:
                return None
        return [p.metadata.name for p in pods]

    return list(wait_for(armed, 120))


def _launch(admin: client.ApiClient, name: str, grace: int) -> tuple[Handle, list[str]]:
    created = client.CustomObjectsApi(admin).create_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, _hung_jobset(name, grace)
    )
    uid = str(created["metadata"]["uid"])
    return Handle(name, uid), _running_and_armed(admin, name, uid)


def test_a_short_grace_stops_pods_that_ignore_sigterm_long_before_their_own(
    admin: client.ApiClient, cluster_connection: UpstreamCluster
) -> None:
    handle, pods = _launch(admin, "grace-hung", OWN_GRACE_SECONDS)
    lifecycle = JobSetLifecycle(JobSetHook(), namespace=NAMESPACE, identity={}, log=LOG)
    since = cluster_connection.audit_position()
    began = time.monotonic()
    lifecycle.retire(handle, pod_grace_seconds=1)
    # Half the pods' own grace period: a 1 s kill is far inside it on any load, and its absence far outside.
    assert time.monotonic() - began < OWN_GRACE_SECONDS / 2
    # The operators' own deletes: the garbage collector, the Job controller and the node agent delete the pods too
    # (the foreground deletion's dependents, the finished pods' final delete), under their own users.
    operators = f"system:serviceaccount:{NAMESPACE}:elastic-training"
    deletes = [
        e
        for e in cluster_connection.audit_events(since)
        if e.verb == "delete" and e.resource == "pods" and e.username == operators
    ]
    assert sorted(str(e.name) for e in deletes) == sorted(pods)
    assert {e.query("gracePeriodSeconds") for e in deletes} == {"1"}


def test_a_role_without_delete_on_pods_keeps_their_grace_and_says_so(
    admin: client.ApiClient, cluster_connection: UpstreamCluster, caplog: pytest.LogCaptureFixture
) -> None:
    with operators_role_without(admin, "pods", "delete"):
        handle, _ = _launch(admin, "grace-older-role", 3)  # their own grace: short, so the retirement ends anyway
        lifecycle = JobSetLifecycle(JobSetHook(), namespace=NAMESPACE, identity={}, log=LOG)
        with caplog.at_level(logging.WARNING, logger=LOG.name):
            lifecycle.retire(handle, pod_grace_seconds=1)
    assert (
        client.CustomObjectsApi(admin).list_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, field_selector="metadata.name=grace-older-role"
        )["items"]
        == []
    )
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "not allowed to delete pods in default" in warning and "re-apply deploy/rbac.yaml" in warning
    assert "grace-older-role keep their own grace period" in warning
