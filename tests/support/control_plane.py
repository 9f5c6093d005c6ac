"""Helpers for the control-plane tests: manifests, waiting on the cluster, and process checks."""

from __future__ import annotations

import functools
import os
import uuid
from typing import Any

import psutil
from kubernetes import client

from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION
from tests.support.waiting import wait_for

Obj = dict[str, Any]
NS = "default"
IMAGE = "local"
LOOP = "while :; do sleep 0.05; done"
ARMED = "trap-set"


def unique(prefix: str) -> str:
    """A DNS-safe name no other test in the module uses."""
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def container(name: str, script: str | None = None, **extra: Any) -> Obj:
    """A container running ``sh -c script`` (no command: the idle placeholder)."""
    spec: Obj = {"name": name, "image": IMAGE, **extra}
    if script is not None:
        spec["command"] = ["sh", "-c", script]
    return spec


def armed(trap: str, then: str = LOOP) -> str:
    """A shell script that sets ``trap`` (``trap '...' TERM``), prints :data:`ARMED`, then runs ``then``.

    A test that signals the shell waits for that line first (:func:`wait_armed`): a process reported running
    may not have set its trap yet, and a SIGTERM before it kills the shell outright (likely on a loaded machine).
    """
    return f"{trap}; echo {ARMED}; {then}"


def wait_armed(core: client.CoreV1Api, name: str, *containers: str, namespace: str = NS) -> None:
    """Wait until each container (``main`` by default) of pod ``name`` has printed :data:`ARMED`."""

    def printed(container_name: str) -> bool:
        try:
            response = core.read_namespaced_pod_log(name, namespace, container=container_name, _preload_content=False)
        except client.ApiException:
            return False  # not started yet
        return ARMED in response.data.decode()

    for container_name in containers or ("main",):
        wait_for(functools.partial(printed, container_name), 60)


def pod_manifest(name: str, *containers: Obj, restart_policy: str = "Never", **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": restart_policy, "containers": list(containers), **spec},
    }


def job_template(
    script: str | None,
    *,
    replicas: int = 1,
    completions: int = 1,
    backoff_limit: int = 0,
    restart_policy: str = "Never",
    container_name: str = "main",
    grace: int = 30,
    **pod_spec: Any,
) -> Obj:
    """A replicatedJob entry: an Indexed Job of ``completions`` pods running ``script``."""
    return {
        "replicas": replicas,
        "template": {
            "spec": {
                "completionMode": "Indexed",
                "completions": completions,
                "parallelism": completions,
                "backoffLimit": backoff_limit,
                "template": {
                    "spec": {
                        "restartPolicy": restart_policy,
                        "terminationGracePeriodSeconds": grace,
                        "containers": [container(container_name, script)],
                        **pod_spec,
                    }
                },
            }
        },
    }


def jobset_manifest(name: str, replicated_jobs: dict[str, Obj], **spec: Any) -> Obj:
    return {
        "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"replicatedJobs": [{"name": n, **rjob} for n, rjob in replicated_jobs.items()], **spec},
    }


class JobSets:
    """JobSet calls through the official client's CustomObjectsApi."""

    def __init__(self, custom: client.CustomObjectsApi) -> None:
        self._custom = custom

    def create(self, manifest: Obj) -> Obj:
        return self._call("create_namespaced_custom_object", body=manifest)

    def get(self, name: str) -> Obj:
        return self._call("get_namespaced_custom_object", name=name)

    def delete(self, name: str, propagation: str = "Foreground") -> None:
        self._custom.delete_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, NS, JOBSET_PLURAL, name, propagation_policy=propagation
        )

    def patch(self, name: str, body: Obj) -> Obj:
        return self._call("patch_namespaced_custom_object", name=name, body=body)

    def delete_all(self) -> None:
        """Delete every JobSet of the namespace not already being deleted (a test's cleanup)."""
        listed = self._custom.list_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NS, JOBSET_PLURAL)
        for jobset in listed["items"]:
            if not jobset["metadata"].get("deletionTimestamp"):
                try:
                    self.delete(jobset["metadata"]["name"])
                except client.ApiException as err:
                    if err.status != 404:
                        raise

    def exists(self, name: str) -> bool:
        try:
            self.get(name)
        except client.ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    def status(self, name: str) -> Obj:
        status: Obj = self.get(name).get("status") or {}
        return status

    def _call(self, method: str, **kwargs: Any) -> Obj:
        result: Obj = getattr(self._custom, method)(JOBSET_GROUP, JOBSET_VERSION, NS, JOBSET_PLURAL, **kwargs)
        return result


def condition(conditions: list[Any] | None, kind: str) -> Any:
    """A condition (dict or client model) of type ``kind`` whose status is True, or None."""
    for cond in conditions or []:
        ctype = cond["type"] if isinstance(cond, dict) else cond.type
        status = cond["status"] if isinstance(cond, dict) else cond.status
        if ctype == kind and status == "True":
            return cond
    return None


def pod_pids(pod: client.V1Pod) -> list[int]:
    """Pids of a pod's container runs, from the ``local://<pid>`` container IDs in its status."""
    statuses = [*(pod.status.init_container_statuses or []), *(pod.status.container_statuses or [])]
    pids = []
    for status in statuses:
        for state in (status.state, status.last_state):
            for detail in (state.running, state.terminated) if state else ():
                container_id = getattr(detail, "container_id", None) or status.container_id
                if container_id and container_id.startswith("local://"):
                    pids.append(int(container_id.removeprefix("local://")))
        if status.container_id and status.container_id.startswith("local://"):
            pids.append(int(status.container_id.removeprefix("local://")))
    return sorted(set(pids))


def process_alive(pid: int) -> bool:
    """Whether a process with this pid exists (zombies count as gone: they run nothing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_processes_gone(pids: list[int], timeout: float = 30.0) -> None:
    assert pids, "no container process was recorded"
    wait_for(lambda: not any(process_alive(pid) for pid in pids), timeout)


def pods_of(core: client.CoreV1Api, selector: str) -> list[client.V1Pod]:
    items: list[client.V1Pod] = core.list_namespaced_pod(NS, label_selector=selector).items
    return items


def control_plane_processes() -> set[int]:
    """The pids of this process's control-plane children (etcd, kube-*, the managers) still running."""
    names = {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "jobset-controller", "kueue"}
    children = psutil.Process().children(recursive=True)
    return {c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE and c.name() in names}
