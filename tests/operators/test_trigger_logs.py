"""`JobSetTrigger`'s log follow when the log cannot be read: an error naming the permission, never a false stall.

The local cluster authorizes every request with RBAC: the operators' ServiceAccount loses ``get pods/log``
from its Role (as on a cluster whose Role was bound from an older deploy/rbac.yaml) while its watches still work.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION
from elastic_training.operators.observations import MonitorState
from elastic_training.operators.triggers import JobSetTrigger
from tests.support.airflow_dags import NAMESPACE, operators_role_without
from tests.support.lifecycle_runs import _one_pod_jobset


@pytest.fixture
def no_pods_log(admin: client.ApiClient) -> Iterator[None]:
    """The operators' Role without its ``pods/log`` rule, for the test; restored after."""
    with operators_role_without(admin, "pods/log"):
        yield


async def test_a_refused_log_read_is_an_error_naming_the_permission_not_a_stall(
    admin: client.ApiClient, no_pods_log: None
) -> None:
    custom = client.CustomObjectsApi(admin)
    name = "log-refused"
    printing = ["sh", "-c", "i=0; while true; do echo completed step: $i; i=$((i+1)); sleep 0.5; done"]
    created: dict[str, Any] = custom.create_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, _one_pod_jobset(name, {}, printing)
    )
    uid = created["metadata"]["uid"]
    budgets = {
        "max_slice_restarts": 1,
        "slice_restart_window_seconds": 3600.0,
        "stall_timeout_seconds": 90.0,  # the trainer prints a step every half second: only an unread log stalls
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
        event = (await asyncio.wait_for(trigger.run().__anext__(), timeout=180)).payload
        assert event["status"] == "error", f"expected an error, got {event['status']}: {event['message']}"
        assert "may not get pods/log" in event["message"] and "HTTP 403" in event["message"]
        assert "deploy/rbac.yaml" in event["message"]
    finally:
        custom.delete_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, name)
