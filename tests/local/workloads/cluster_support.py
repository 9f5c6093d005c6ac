"""Waits on the local cluster, and the workloads' demo JobSet with the tests' compilation cache."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client

from local.workloads.jobset import elastic_jobset
from operators.constants import (
    HEAD_MAIN_CONTAINER,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    LABEL_JOB_INDEX,
    LABEL_JOBSET_NAME,
    LABEL_REPLICATED_JOB_NAME,
    RECOVERY_RECORDS_FILE,
    WORKER_REPLICATED_JOB,
)
from tests.local.workloads.conftest import COMPILATION_CACHE

NS = "default"
T = TypeVar("T")


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


def jobset_for_tests(
    name: str, train_keys: Sequence[str], *, slices: int, hold_file: Path | None = None
) -> dict[str, Any]:
    """`elastic_jobset` sharing the tests' persistent XLA compilation cache."""
    env = {
        "JAX_COMPILATION_CACHE_DIR": str(COMPILATION_CACHE),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }
    return elastic_jobset(name, train_keys, slices=slices, hold_file=hold_file, extra_env=env)
