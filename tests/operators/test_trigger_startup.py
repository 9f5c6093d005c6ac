"""`JobSetTrigger` on a real head pod: the trainer's start-up runs on its own clock, never on the stall clock.

The head pod (``jax-tpu``) is a shell that logs as a starting trainer does (MaxText's restore line), and only later
its first step: a start-up longer than the stall timeout. On the stall clock of an earlier release (it ran from
the container's start) the first decision was a stall with "no step yet", the start-up still under way.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kubernetes import client

from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION
from elastic_training.operators.observations import MonitorState
from elastic_training.operators.triggers import JobSetTrigger
from tests.support.airflow_dags import NAMESPACE
from tests.support.lifecycle_runs import _one_pod_jobset

RESTORE = 'echo "restoring from this run\'s directory step 3"'


async def _first_decision(
    custom: client.CustomObjectsApi, name: str, script: str, *, stall: float, startup: float
) -> dict[str, Any]:
    created: dict[str, Any] = custom.create_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, _one_pod_jobset(name, {}, ["sh", "-c", script])
    )
    uid = created["metadata"]["uid"]
    budgets = {
        "max_slice_restarts": 1,
        "slice_restart_window_seconds": 3600.0,
        "stall_timeout_seconds": stall,
        "startup_timeout_seconds": startup,
        "max_full_restarts": 1,
    }
    trigger = JobSetTrigger(
        name=name,
        namespace=NAMESPACE,
        uid=uid,
        target_step=10_000,
        budgets=budgets,
        state=MonitorState(jobset_uid=uid, started_at=time.time()).to_json(),
        poll_interval=0.5,
    )
    try:
        event = (await asyncio.wait_for(trigger.run().__anext__(), timeout=240)).payload
        assert event["status"] == "decision", f"expected a decision, got {event['status']}: {event['message']}"
        return dict(event)
    finally:
        custom.delete_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, name)


async def test_a_start_up_longer_than_the_stall_timeout_is_no_stall(custom: client.CustomObjectsApi) -> None:
    # 8 s of start-up (restore, compilation) against a 3 s stall timeout; then one step and a hang: that is a stall.
    script = f"{RESTORE}; sleep 8; echo 'completed step: 4, seconds: 8.0'; sleep 3600"
    event = await _first_decision(custom, "startup-long", script, stall=3.0, startup=300.0)
    assert event["reason"] == "stalled", event["message"]
    assert "last completed step 4" in event["message"]  # judged after its first step, not during its start-up
    state = MonitorState.from_json(event["state"])
    assert state.trainer_up_since is not None and state.digest.latest_step_at is not None
    assert state.digest.latest_step_at - state.trainer_up_since >= 8.0 - 1.0  # startedAt is whole seconds


async def test_a_start_up_that_never_trains_times_out_saying_what_it_was_doing(
    custom: client.CustomObjectsApi,
) -> None:
    event = await _first_decision(custom, "startup-hung", f"{RESTORE}; sleep 3600", stall=3600.0, startup=4.0)
    assert event["reason"] == "startup_timed_out", event["message"]
    assert "not trained since its container started" in event["message"]
    assert "startup_timeout=4 s; restoring step 3, then compiling its first step" in event["message"]
