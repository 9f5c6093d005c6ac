"""On the local cluster: deleting a worker pod makes the same trainer process recover and finish.

The JobSet is shaped like xpk's Pathways one: the trainer in `pathways-head` watches the `worker` pods
of its own JobSet (found from its labels through the downward API) through the cluster's API.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from local.cluster import LocalCluster
from operators.constants import (
    COMMIT_SUCCESS_FILE,
    COMPLETED_STEP_RE,
    ELASTIC_ATTEMPT_RE,
    HEAD_REPLICATED_JOB,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    SUFFICIENT_SLICES_RE,
)
from tests.local.workloads.cluster_support import (
    NS,
    head_log,
    jobset_condition,
    jobset_for_tests,
    pods,
    recovery_records,
    wait_for,
    worker_pod,
)

pytestmark = pytest.mark.slow

_LIVE = re.compile(r"completed step: (\d+), .*live slice count: (\d+)")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(workdir=tmp_path_factory.mktemp("cluster")) as running:
        yield running


@pytest.fixture(scope="module")
def api(cluster: LocalCluster) -> Iterator[tuple[client.CoreV1Api, client.CustomObjectsApi]]:
    api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        yield client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    finally:
        api_client.close()


def _run_and_kill_slice_1(
    cluster: LocalCluster,
    api: tuple[client.CoreV1Api, client.CustomObjectsApi],
    tmp_path: Path,
    name: str,
    *keys: str,
    hold_file: Path | None = None,
) -> tuple[str, float, list[dict[str, object]]]:
    core, custom = api
    train_keys = [
        f"base_output_directory={tmp_path}",
        f"run_name={name}",
        "steps=300",
        "checkpoint_period=20",
        "num_slices=2",
        "elastic_enabled=true",
        "enable_single_controller=true",
        "elastic_timeout_seconds=60",
        "elastic_poll_interval_seconds=0.2",
        *keys,
    ]
    manifest = jobset_for_tests(name, train_keys, slices=2, hold_file=hold_file)
    custom.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NS, JOBSET_PLURAL, manifest)
    head = wait_for("the head pod", lambda: pods(core, name, HEAD_REPLICATED_JOB), timeout=30)[0]
    head_name, head_uid = head.metadata.name, head.metadata.uid

    def progressed() -> bool:
        steps = [int(m[1]) for m in COMPLETED_STEP_RE.finditer(head_log(core, head_name))]
        return bool(steps) and max(steps) >= 30

    wait_for("30 completed steps", progressed, timeout=60, interval=0.1)
    victim = wait_for("worker pod of slice 1", lambda: worker_pod(core, name, 1), timeout=10)
    if hold_file is not None:
        hold_file.touch()
    killed_at = time.time()
    cluster.faults.delete_pod(NS, victim.metadata.name)
    assert wait_for("the JobSet to finish", lambda: jobset_condition(custom, name), timeout=120) == "Completed"

    [head_after] = pods(core, name, HEAD_REPLICATED_JOB)
    assert (head_after.metadata.name, head_after.metadata.uid) == (head_name, head_uid)
    assert all(s.restart_count == 0 for s in head_after.status.container_statuses or [])
    log = head_log(core, head_name)
    (tmp_path / "head.log").write_text(log + f"\nKILLED_AT {killed_at} {victim.metadata.name}\n")
    assert (tmp_path / name / "checkpoints" / "299" / COMMIT_SUCCESS_FILE).exists()
    return log, killed_at, recovery_records(tmp_path / name)


def test_deleting_a_worker_pod_recovers_in_the_same_trainer_process(
    cluster: LocalCluster, api: tuple[client.CoreV1Api, client.CustomObjectsApi], tmp_path: Path
) -> None:
    log, killed_at, records = _run_and_kill_slice_1(cluster, api, tmp_path, "pause-resume")
    assert [m[1] for m in ELASTIC_ATTEMPT_RE.finditer(log)] == ["1", "2"]
    assert SUFFICIENT_SLICES_RE.findall(log) == [("2", "2"), ("2", "2")]
    [record] = records
    assert record["outcome"] == "recovered" and record["lost_slices"] == [1]
    assert record["failure_detected_at"] >= killed_at  # type: ignore[operator]
    assert record["active_slices"] == [0, 1]
    step_at_failure, restored = record["step_at_failure"], record["step_restored"]
    assert isinstance(step_at_failure, int) and isinstance(restored, int)
    assert restored % 20 == 0 and 0 <= step_at_failure - restored <= 20 + 20
    assert record["steps_lost"] == step_at_failure - restored
    assert record["first_step_after_recovery"] == restored + 1
    steps = [int(m[1]) for m in COMPLETED_STEP_RE.finditer(log)]
    rerun = 2 if step_at_failure > restored else 1  # the rewind (none when the failure hit right after a save)
    assert steps.count(restored + 1) == rerun and steps[-1] == 299


def test_replica_resize_finishes_on_fewer_slices(
    cluster: LocalCluster, api: tuple[client.CoreV1Api, client.CustomObjectsApi], tmp_path: Path
) -> None:
    hold = tmp_path / "slice-1-stays-down"
    log, _, records = _run_and_kill_slice_1(
        cluster, api, tmp_path, "replica-resize", "elastic_min_slice_count=1", hold_file=hold
    )
    assert SUFFICIENT_SLICES_RE.findall(log)[-1] == ("1", "1")
    [record] = records
    assert record["active_slices"] == [0] and record["slices_before"] == [0, 1]
    live = _LIVE.findall(log)
    assert live[0][1] == "2" and live[-1] == ("299", "1")
