"""On the local cluster: deleting a worker pod makes the same trainer process recover and finish.

The JobSet is shaped like xpk's Pathways one: the trainer in `pathways-head` watches the `worker` pods
of its own JobSet (found from its labels through the downward API) through the cluster's API.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.local.workloads.drill import DrillObservation, DrillPlan, SliceKillDrill
from elastic_training.operators.constants import COMMIT_SUCCESS_FILE, ELASTIC_ATTEMPT_RE, SUFFICIENT_SLICES_RE
from tests.support.workload_processes import COMPILATION_CACHE_ENV

pytestmark = pytest.mark.slow

_LIVE = re.compile(r"completed step: (\d+), .*live slice count: (\d+)")


# The suite's usual nodes (the drill's pods ask for no TPU: they run on the CPU pool), so the process's shared
# cluster is reused.
CLUSTER_DESCRIPTION = "v5e-small"


def _plan(base: Path, name: str, *keys: str, hold_file: Path | None = None) -> DrillPlan:
    return DrillPlan(
        name=name,
        base_output_directory=base,
        train_keys=[
            "steps=300",
            "checkpoint_period=20",
            "num_slices=2",
            "elastic_enabled=true",
            "enable_single_controller=true",
            "elastic_timeout_seconds=60",
            "elastic_poll_interval_seconds=0.2",
            *keys,
        ],
        slices=2,
        kill_slice=1,
        kill_after_step=30,
        timeout=180,
        hold_file=hold_file,
        # 0.05 s a step: the 270 steps after the kill outlast the trainer's watch seeing it on a loaded machine (at
        # 12 ms a step a run finished them all in 4.6 s, before it saw the lost slice).
        extra_env={**COMPILATION_CACHE_ENV, "LOCAL_STEP_SECONDS": "0.05"},
    )


def _drill(cluster: UpstreamCluster, plan: DrillPlan) -> DrillObservation:
    with SliceKillDrill(cluster) as drill:  # its own API client: the two drills run on two threads
        seen = drill.run(plan)
    (plan.base_output_directory / "head.log").write_text(
        seen.head_log + f"\nKILLED_AT {seen.killed_at} {seen.killed_pod}\n"
    )
    return seen


@pytest.fixture(scope="module")
def drills(
    cluster: UpstreamCluster, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[DrillPlan, DrillObservation]]:
    """Both drills at once, each its own JobSet (they ask for no TPU and fit the CPU pool together): the module waits
    for the longer one, not for one after the other."""
    pause = tmp_path_factory.mktemp("pause-resume")
    resize = tmp_path_factory.mktemp("replica-resize")
    plans = {
        "pause-resume": _plan(pause, "pause-resume"),
        "replica-resize": _plan(
            resize, "replica-resize", "elastic_min_slice_count=1", hold_file=resize / "slice-1-stays-down"
        ),
    }
    with ThreadPoolExecutor(max_workers=len(plans)) as pool:
        futures = {name: pool.submit(_drill, cluster, plan) for name, plan in plans.items()}
        return {name: (plans[name], future.result()) for name, future in futures.items()}


def _finished_in_the_same_process(plan: DrillPlan, seen: DrillObservation) -> DrillObservation:
    assert seen.terminal_state == "Completed"
    assert seen.head_pod_kept and seen.head_restarts == 0  # the same trainer process throughout
    assert seen.jobset_status.get("restarts", 0) == 0
    assert (plan.run_directory / "checkpoints" / "299" / COMMIT_SUCCESS_FILE).exists()
    return seen


def test_deleting_a_worker_pod_recovers_in_the_same_trainer_process(
    drills: dict[str, tuple[DrillPlan, DrillObservation]],
) -> None:
    seen = _finished_in_the_same_process(*drills["pause-resume"])
    assert [m[1] for m in ELASTIC_ATTEMPT_RE.finditer(seen.head_log)] == ["1", "2"]
    assert SUFFICIENT_SLICES_RE.findall(seen.head_log) == [("2", "2"), ("2", "2")]
    assert len(seen.worker_pods[1]) == 2 and len(seen.worker_pods[0]) == 1  # slice 1 was replaced
    [record] = seen.records
    assert record["outcome"] == "recovered" and record["lost_slices"] == [1]
    assert record["failure_detected_at"] >= seen.killed_at
    assert record["active_slices"] == [0, 1]
    step_at_failure, restored = record["step_at_failure"], record["step_restored"]
    assert isinstance(step_at_failure, int) and isinstance(restored, int)
    assert restored % 20 == 0 and 0 <= step_at_failure - restored <= 20 + 20
    assert record["steps_lost"] == step_at_failure - restored
    assert record["first_step_after_recovery"] == restored + 1
    steps = seen.steps
    # Steps after the restored checkpoint run twice (the rewind); none when the slice died right after a save.
    rerun = range(restored + 1, step_at_failure + 1)
    assert all(steps.count(step) == 2 for step in rerun) and steps.count(step_at_failure + 1) == 1
    assert steps[-1] == 299


def test_replica_resize_finishes_on_fewer_slices(drills: dict[str, tuple[DrillPlan, DrillObservation]]) -> None:
    seen = _finished_in_the_same_process(*drills["replica-resize"])
    assert SUFFICIENT_SLICES_RE.findall(seen.head_log)[-1] == ("1", "1")
    [record] = seen.records
    assert record["active_slices"] == [0] and record["slices_before"] == [0, 1]
    live = _LIVE.findall(seen.head_log)
    assert live[0][1] == "2" and live[-1] == ("299", "1")
