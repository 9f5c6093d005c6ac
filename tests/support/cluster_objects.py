"""Small builders of pods, Jobs and JobSets for the tests against the local cluster."""

from __future__ import annotations

from typing import Any

from kubernetes import client


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
