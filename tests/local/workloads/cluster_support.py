"""A Pathways-shaped JobSet running the local workloads, and waits on the local cluster."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client

from operators.constants import (
    HEAD_MAIN_CONTAINER,
    HEAD_REPLICATED_JOB,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    LABEL_JOB_INDEX,
    LABEL_JOBSET_NAME,
    LABEL_REPLICATED_JOB_NAME,
    RECOVERY_RECORDS_FILE,
    WORKER_CONTAINER,
    WORKER_REPLICATED_JOB,
)
from tests.local.workloads.conftest import COMPILATION_CACHE

NS = "default"
T = TypeVar("T")


def _field(path: str) -> dict[str, Any]:
    return {"valueFrom": {"fieldRef": {"fieldPath": path}}}


def elastic_jobset(
    name: str, train_keys: Sequence[str], *, slices: int, hold_file: Path | None = None
) -> dict[str, Any]:
    """A JobSet shaped like xpk's Pathways one: a `pathways-head` trainer and `slices` worker slices."""
    worker_args = ["--hold-file", str(hold_file)] if hold_file else []
    env = [
        {"name": "JOBSET_NAME", **_field(f"metadata.labels['{LABEL_JOBSET_NAME}']")},
        {"name": "POD_NAMESPACE", **_field("metadata.namespace")},
        {"name": "POD_NAME", **_field("metadata.name")},
        {"name": "JAX_PLATFORMS", "value": "cpu"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "JAX_COMPILATION_CACHE_DIR", "value": str(COMPILATION_CACHE)},
        {"name": "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "value": "0"},
        {"name": "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "value": "0"},
    ]

    def job(replicas: int, restart: str, backoff: int, container: dict[str, Any]) -> dict[str, Any]:
        return {
            "replicas": replicas,
            "template": {
                "spec": {
                    "completionMode": "Indexed",
                    "completions": 1,
                    "parallelism": 1,
                    "backoffLimit": backoff,
                    "template": {
                        "spec": {
                            "restartPolicy": restart,
                            "terminationGracePeriodSeconds": 5,
                            "containers": [container],
                        }
                    },
                }
            },
        }

    head = {
        "name": HEAD_MAIN_CONTAINER,
        "image": "local",
        "command": ["python", "-m", "local.workloads.train"],
        "args": list(train_keys),
        "env": env,
    }
    worker = {
        "name": WORKER_CONTAINER,
        "image": "local",
        "command": ["python", "-m", "local.workloads.slice_worker", *worker_args],
        "env": env[2:],
    }
    return {
        "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [HEAD_REPLICATED_JOB]},
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [
                {"name": HEAD_REPLICATED_JOB, **job(1, "Never", 0, head)},
                {"name": WORKER_REPLICATED_JOB, **job(slices, "OnFailure", 100, worker)},
            ],
        },
    }


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 90, interval: float = 0.05) -> T:
    """Poll `probe` until it returns something other than None (or False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def pods(core: client.CoreV1Api, jobset: str, replicated_job: str) -> list[client.V1Pod]:
    """Pods of one replicated job of `jobset`."""
    selector = f"{LABEL_JOBSET_NAME}={jobset},{LABEL_REPLICATED_JOB_NAME}={replicated_job}"
    items: list[client.V1Pod] = core.list_namespaced_pod(NS, label_selector=selector).items
    return items


def worker_pod(core: client.CoreV1Api, jobset: str, slice_index: int) -> client.V1Pod | None:
    """The running worker pod of slice `slice_index`, if any."""
    for pod in pods(core, jobset, WORKER_REPLICATED_JOB):
        if pod.metadata.labels.get(LABEL_JOB_INDEX) == str(slice_index) and pod.status.phase == "Running":
            return pod
    return None


def head_log(core: client.CoreV1Api, pod_name: str) -> str:
    """The trainer container's log."""
    response = core.read_namespaced_pod_log(pod_name, NS, container=HEAD_MAIN_CONTAINER, _preload_content=False)
    return str(response.data.decode())


def jobset_condition(custom: client.CustomObjectsApi, name: str) -> str | None:
    """`Completed` or `Failed` once the JobSet has finished."""
    jobset = custom.get_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NS, JOBSET_PLURAL, name)
    for condition in (jobset.get("status") or {}).get("conditions") or []:
        if condition.get("type") in {"Completed", "Failed"} and condition.get("status") == "True":
            return str(condition["type"])
    return None


def recovery_records(run_directory: Path) -> list[dict[str, Any]]:
    """The trainer's recovery records."""
    path = run_directory / RECOVERY_RECORDS_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
