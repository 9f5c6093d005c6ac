"""The slice-failure drill against the local cluster over HTTP: a stand-in head pod logs MaxText's step lines,
the drill force-deletes the chosen slice's worker pod once the step is logged (a deletion, which counts against no
node pool), and gives up when the run ends."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config, watch

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.constants import (
    HEAD_MAIN_CONTAINER,
    HEAD_REPLICATED_JOB,
    LABEL_JOB_INDEX,
    LABEL_REPLICATED_JOB_NAME,
    LABEL_RUN_NAME,
    WORKER_REPLICATED_JOB,
)
from elastic_training.operators.failure_history import HEALTH_KINDS, FailureKind
from elastic_training.operators.observations import MonitorState
from elastic_training.operators.slice_drill import RESULT_PREFIX, drill_command, parse_result, run_drill
from elastic_training.operators.slice_failures import disruption

STEPS_SCRIPT = (
    "import sys, time\n"
    "for step in range({steps}):\n"
    "    print(f'I1130 completed step: {{step}}, seconds: 0.1, loss: 1.0', flush=True)\n"
    "    time.sleep(0.2)\n"
    "time.sleep({linger})\n"
)


@pytest.fixture
def core(cluster_connection: UpstreamCluster) -> Iterator[Any]:
    api = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    yield client.CoreV1Api(api)
    api.close()


def make_pod(core: Any, name: str, labels: dict[str, str], container: str, command: list[str]) -> None:
    body = client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1PodSpec(
            restart_policy="Never",
            termination_grace_period_seconds=30,
            containers=[client.V1Container(name=container, image="local", command=command)],
        ),
    )
    core.create_namespaced_pod("default", body)


def fake_run(core: Any, run_name: str, *, steps: int, linger: float) -> None:
    head = {LABEL_RUN_NAME: run_name, LABEL_REPLICATED_JOB_NAME: HEAD_REPLICATED_JOB}
    make_pod(
        core,
        f"{run_name}-head",
        head,
        HEAD_MAIN_CONTAINER,
        ["python", "-c", STEPS_SCRIPT.format(steps=steps, linger=linger)],
    )
    for index in (0, 1):
        labels = {
            LABEL_RUN_NAME: run_name,
            LABEL_REPLICATED_JOB_NAME: WORKER_REPLICATED_JOB,
            LABEL_JOB_INDEX: str(index),
        }
        make_pod(core, f"{run_name}-worker-{index}", labels, "pathways-worker", ["sleep", "300"])


def pod_names(core: Any, run_name: str) -> set[str]:
    return {
        p.metadata.name
        for p in core.list_namespaced_pod("default", label_selector=f"{LABEL_RUN_NAME}={run_name}").items
    }


def test_the_worker_pod_of_the_slice_is_gone_at_once_after_the_step(core: Any) -> None:
    fake_run(core, "drill-fires", steps=40, linger=30)
    deleted: list[dict[str, Any]] = []
    seen = threading.Thread(target=watch_deletions, args=(core, "drill-fires", deleted), daemon=True)
    seen.start()
    result = run_drill(core, namespace="default", run_name="drill-fires", at_step=10, slice_index=1, timeout=120)
    assert result["fired"] and result["pod"] == "drill-fires-worker-1" and result["step_seen"] >= 10
    # Force deletion: no graceful stop (the worker would hold for its 30 s grace period otherwise).
    assert pod_names(core, "drill-fires") == {"drill-fires-head", "drill-fires-worker-0"}
    assert time.time() - result["deleted_at"] < 30
    # The pod leaves with no DisruptionTarget reason (a plain DELETE sets none, upstream as here): the slice failure
    # it makes is a deletion, which the failure history holds against no node pool.
    seen.join(timeout=30)
    [gone] = [p for p in deleted if p["metadata"]["name"] == "drill-fires-worker-1"]
    assert disruption(gone) is None
    state = MonitorState(started_at=time.time() - 60)
    state.on_pod(gone, deleted=True, now=time.time())
    assert [f.kind for f in state.slice_failures()] == [FailureKind.DELETED]
    assert FailureKind.DELETED not in HEALTH_KINDS


def watch_deletions(core: Any, run_name: str, into: list[dict[str, Any]]) -> None:
    """The DELETED watch events of the run's pods (their last state, as a trigger receives it), until one comes."""
    stream = watch.Watch().stream(
        core.list_namespaced_pod, "default", label_selector=f"{LABEL_RUN_NAME}={run_name}", timeout_seconds=120
    )
    for event in stream:
        if event["type"] == "DELETED":
            into.append(core.api_client.sanitize_for_serialization(event["object"]))
            return


def test_a_run_that_ends_before_the_step_is_reported_and_nothing_is_deleted(core: Any) -> None:
    fake_run(core, "drill-late", steps=5, linger=0)
    result = run_drill(core, namespace="default", run_name="drill-late", at_step=50, slice_index=0, timeout=120)
    assert not result["fired"] and result["reason"] == "the run ended before the step"
    assert {"drill-late-worker-0", "drill-late-worker-1"} <= pod_names(core, "drill-late")


def test_no_run_at_all_times_out(core: Any) -> None:
    result = run_drill(core, namespace="default", run_name="drill-none", at_step=1, slice_index=0, timeout=1)
    assert not result["fired"] and "not reached within 1 s" in result["reason"]


def test_result_lines_and_command() -> None:
    log = f'noise\n{RESULT_PREFIX}{{broken\n{RESULT_PREFIX}{{"fired": true, "pod": "p"}}\n'
    assert parse_result(log) == {"fired": True, "pod": "p"}
    assert parse_result("nothing here") is None
    assert drill_command(run_name="r", at_step=3, slice_index=1, namespace="ns", timeout=9) == [
        "python",
        "-m",
        "elastic_training.operators.slice_drill",
        "--run-name=r",
        "--at-step=3",
        "--slice=1",
        "--namespace=ns",
        "--timeout=9",
    ]
