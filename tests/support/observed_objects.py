"""Jobs and pods as the Kubernetes API returns them, at times relative to ``T0``, for the pure tests of what the
trigger observes (observations, failure history)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from elastic_training.operators.constants import LABEL_JOB_INDEX, LABEL_REPLICATED_JOB_NAME

T0 = 1_796_000_000.0  # 2026-11-30T...Z; every time below is a Kubernetes time relative to it


def stamp(at: float) -> str:
    """As the API server writes times: RFC 3339, whole seconds, UTC."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def job(uid: str, slice_index: int, failed: int = 0, *, size: int = 4, deleting: float | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "uid": uid,
        "creationTimestamp": stamp(T0),
        "labels": {LABEL_REPLICATED_JOB_NAME: "worker", LABEL_JOB_INDEX: str(slice_index)},
    }
    if deleting is not None:
        meta["deletionTimestamp"] = stamp(deleting)
    return {"metadata": meta, "spec": {"completions": size, "parallelism": size}, "status": {"failed": failed}}


def pod(
    uid: str,
    slice_index: int,
    restarts: int = 0,
    rjob: str = "worker",
    *,
    job_uid: str | None = None,
    created: float = T0,
    started: float | None = None,
    finished: float | None = None,
    deleting: float | None = None,
    disruption: tuple[str, float] | None = None,
    **status: Any,
) -> dict[str, Any]:
    """A worker pod as the API server shows it: running since ``started``, last terminated at ``finished``."""
    container: dict[str, Any] = {"name": "pathways-worker", "restartCount": restarts}
    container["state"] = {"running": {"startedAt": stamp(started if started is not None else created)}}
    if finished is not None:
        container["lastState"] = {"terminated": {"exitCode": 1, "finishedAt": stamp(finished)}}
    meta: dict[str, Any] = {
        "uid": uid,
        "name": f"p-{uid}",
        "creationTimestamp": stamp(created),
        "labels": {LABEL_REPLICATED_JOB_NAME: rjob, LABEL_JOB_INDEX: str(slice_index)},
        "ownerReferences": [{"kind": "Job", "uid": job_uid or f"j{slice_index}", "controller": True}],
    }
    if deleting is not None:
        meta["deletionTimestamp"] = stamp(deleting + 30)
        meta["deletionGracePeriodSeconds"] = 30
    conditions = []
    if disruption is not None:
        reason, at = disruption
        conditions.append(
            {"type": "DisruptionTarget", "status": "True", "reason": reason, "lastTransitionTime": stamp(at)}
        )
    body = {"phase": "Running", "conditions": conditions, "containerStatuses": [container]}
    return {"metadata": meta, "status": {**body, **status}}
