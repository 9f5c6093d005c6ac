"""`JobSetTrigger` run against the local cluster: a JobSet of sleeping slices, a trigger rebuilt as the triggerer
rebuilds it, its first event, and an async wait with a deadline. Moved from tests/operators/test_triggers.py."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from airflow.triggers.base import TriggerEvent

from elastic_training.operators.constants import (
    HEAD_MAIN_CONTAINER,
    HEAD_REPLICATED_JOB,
    JOBSET_GROUP,
    JOBSET_VERSION,
    WORKER_CONTAINER,
    WORKER_REPLICATED_JOB,
)
from elastic_training.operators.observations import MonitorState
from elastic_training.operators.triggers import JobSetTrigger

BUDGETS = {
    "max_slice_restarts": 1,
    "slice_restart_window_seconds": 3600.0,
    "stall_timeout_seconds": 3600.0,
    "max_full_restarts": 1,
}


def sleeping_jobset(name: str, slices: int, hosts: int = 1) -> dict[str, Any]:
    """A JobSet shaped like ours whose containers only sleep: cheap enough to kill slices at will.

    Each slice is a worker Job of ``hosts`` pods (completions = parallelism), as a multi-host slice is.
    """

    def rjob(rname: str, replicas: int, restart: str, container: str, pods: int = 1) -> dict[str, Any]:
        pod = {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": container, "image": "local", "command": ["sleep", "3600"]}],
        }
        job = {
            "completionMode": "Indexed",
            "completions": pods,
            "parallelism": pods,
            "backoffLimit": 10 * pods,
            "template": {"spec": pod},
        }
        return {"name": rname, "replicas": replicas, "template": {"spec": job}}

    return {
        "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [HEAD_REPLICATED_JOB]},
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [
                rjob(HEAD_REPLICATED_JOB, 1, "Never", HEAD_MAIN_CONTAINER),
                rjob(WORKER_REPLICATED_JOB, slices, "OnFailure", WORKER_CONTAINER, hosts),
            ],
        },
    }


def fresh_trigger(name: str, uid: str, budgets: dict[str, Any] = BUDGETS) -> JobSetTrigger:
    """The trigger an operator defers with when it has just created JobSet `name` (`uid`): a fresh state."""
    return JobSetTrigger(
        name=name,
        namespace="default",
        uid=uid,
        target_step=10,
        budgets=budgets,
        state=MonitorState(jobset_uid=uid, started_at=time.time()).to_json(),
        poll_interval=0.5,
    )


async def first_event(trigger: JobSetTrigger) -> TriggerEvent:
    """The trigger's one event (a task of its own, so the test can act while it watches)."""
    return await anext(trigger.run())


async def wait_for(what: str, probe: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        await asyncio.sleep(0.2)
    raise TimeoutError(what)
