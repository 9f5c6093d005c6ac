"""Small builders and waits shared by the local cluster tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes import client

T = TypeVar("T")


def pod(
    name: str, *, labels: dict[str, str] | None = None, command: list[str] | None = None, **spec: Any
) -> client.V1Pod:
    """A one-container pod (``sleep 30`` unless told otherwise)."""
    container = client.V1Container(name="main", image="local", command=command or ["sleep", "30"])
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1PodSpec(containers=[container], termination_grace_period_seconds=1, **spec),
    )


def job_body(name: str, *, labels: dict[str, str] | None = None, suspend: bool = True) -> dict[str, Any]:
    """A Job manifest (suspended by default, so no controller acts on it)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "suspend": suspend,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "local", "command": ["true"]}],
                }
            },
        },
    }


def jobset_body(name: str, *, replicas: int = 1, suspend: bool = True, **spec: Any) -> dict[str, Any]:
    """A JobSet manifest with one replicated job ``workers`` (suspended by default)."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "suspend": suspend,
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "backoffLimit": 0,
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [{"name": "main", "image": "local", "command": ["true"]}],
                                }
                            },
                        }
                    },
                }
            ],
            **spec,
        },
    }


def wait_for(check: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.05) -> T:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds.

    The default is generous on purpose: a wait costs only as long as the condition takes, and CI runs
    the suite on a loaded 2-core machine.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)
