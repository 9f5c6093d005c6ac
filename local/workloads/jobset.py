"""A demo JobSet that runs the local workloads on the local cluster, shaped like xpk's Pathways JobSet. The operators
render the real manifest (operators/manifests.py); this one is for the workloads' own tests, benchmark and demos.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from elastic_training.operators.constants import (
    HEAD_MAIN_CONTAINER,
    HEAD_REPLICATED_JOB,
    JOBSET_GROUP,
    JOBSET_VERSION,
    LABEL_JOBSET_NAME,
    WORKER_CONTAINER,
    WORKER_REPLICATED_JOB,
)


def _field(path: str) -> dict[str, Any]:
    return {"valueFrom": {"fieldRef": {"fieldPath": path}}}


def _replicated_job(name: str, replicas: int, restart: str, backoff: int, container: dict[str, Any]) -> dict[str, Any]:
    pod = {"restartPolicy": restart, "terminationGracePeriodSeconds": 5, "containers": [container]}
    job = {"completionMode": "Indexed", "completions": 1, "parallelism": 1, "backoffLimit": backoff}
    return {"name": name, "replicas": replicas, "template": {"spec": {**job, "template": {"spec": pod}}}}


def elastic_jobset(
    name: str,
    train_keys: Sequence[str],
    *,
    slices: int,
    hold_file: Path | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A JobSet shaped like xpk's Pathways one: a `pathways-head` trainer and `slices` worker slices. The head runs
    `python -m elastic_training.local.workloads.train <train_keys>` with `JOBSET_NAME` and `POD_NAMESPACE` from the
    downward API; each worker slice (one pod, `restartPolicy: OnFailure`) runs the slice worker, or with `hold_file`
    exits 3 while that file exists."""
    argv = ["python", "-m", "elastic_training.local.workloads.slice_worker"]
    if hold_file:  # held in the shell: under load Python's start outlasted the trainer's 1 s of a slice looking whole
        held = 'if [ -e "$0" ]; then echo "Slice worker $POD_NAME: held down by $0, exiting 3"; exit 3; fi; exec "$@"'
        argv = ["sh", "-c", held, str(hold_file), *argv, "--hold-file", str(hold_file)]
    env = [
        {"name": "JOBSET_NAME", **_field(f"metadata.labels['{LABEL_JOBSET_NAME}']")},
        {"name": "POD_NAMESPACE", **_field("metadata.namespace")},
        {"name": "POD_NAME", **_field("metadata.name")},
        {"name": "JAX_PLATFORMS", "value": "cpu"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        *({"name": k, "value": v} for k, v in (extra_env or {}).items()),
    ]

    train = ["python", "-m", "elastic_training.local.workloads.train"]
    head = {"name": HEAD_MAIN_CONTAINER, "image": "local", "command": train, "args": list(train_keys), "env": env}
    worker = {"name": WORKER_CONTAINER, "image": "local", "command": argv, "env": env[2:]}
    return {
        "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [HEAD_REPLICATED_JOB]},
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [
                _replicated_job(HEAD_REPLICATED_JOB, 1, "Never", 0, head),
                _replicated_job(WORKER_REPLICATED_JOB, slices, "OnFailure", 100, worker),
            ],
        },
    }
