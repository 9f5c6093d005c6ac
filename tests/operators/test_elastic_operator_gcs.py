"""`ElasticJobSetOperator` on a ``gs://`` run directory: a slice killed and GCS answering 503 in bursts.

The trainer pods and the operator reach the GCS emulator through a proxy that fails the next requests with
503 on demand: Orbax's saves (tensorstore and gcsfs) and the operator's checkpoint reads (google-cloud-storage)
must ride the bursts out in process, and the run must end with its final step committed and valid on GCS.
"""

from __future__ import annotations

from typing import Any

import pytest

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.checkpoints import ValidationOptions, validate_checkpoints
from tests.support.airflow_dags import states, xcom
from tests.support.elastic_runs import elastic_dag, jobsets_of
from tests.support.gcs_emulator import FlakyProxy, GCSEmulator
from tests.support.step_faults import StepFaults

pytestmark = pytest.mark.slow

# Requests answered 503 in a row, twice in the run. gcsfs (Orbax's file I/O) tries a request 6 times, so a
# burst of 5 is ridden out whichever requests it lands on; a longer outage fails a save and the trainer exits
# (one full restart): the chaos matrix's `--gcs` runs cover that.
BURST = 5


def test_a_gcs_run_rides_out_503_bursts_and_a_killed_slice(
    airflow_db: None,
    cluster_connection: UpstreamCluster,
    gcs_emulator: GCSEmulator,
    gcs_bucket: str,
    flaky_gcs: FlakyProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    through_proxy = {**gcs_emulator.env, "STORAGE_EMULATOR_HOST": flaky_gcs.endpoint}
    through_proxy["TENSORSTORE_GCS_HTTP_URL"] = flaky_gcs.endpoint
    for key, value in through_proxy.items():
        monkeypatch.setenv(key, value)
    base = f"{gcs_bucket}/runs"
    dag = elastic_dag(
        "elastic_gcs",
        base,  # type: ignore[arg-type]
        stall_timeout="timedelta(minutes=6)",
        # 0.3 s a step leaves the 34 steps after the kill over 10 s for it to reach a training trainer on a loaded
        # machine (the tiny model steps in milliseconds).
        local_env={**through_proxy, "LOCAL_STEP_SECONDS": "0.3"},
    )

    def burst(faults: StepFaults) -> None:
        flaky_gcs.fail_next(BURST)

    def kill_and_burst(faults: StepFaults) -> None:
        faults.kill_worker(1)
        flaky_gcs.fail_next(BURST)

    with StepFaults(cluster_connection, "elastic-gcs").at(12, burst).at(25, kill_and_burst) as faults:
        dag_run = dag.test()
    assert faults.fired == [12, 25]
    assert flaky_gcs.failed == 2 * BURST, "both bursts must have hit requests"
    assert states(dag_run) == {"pretrain": "success"}
    report: dict[str, Any] = xcom(dag_run, "pretrain")
    assert report["final_step"] == 59 and report["slice_restarts"] == 1
    # Recovered in process: the kill met a training trainer, not one done with its steps and making its last save.
    assert report["in_process_recoveries"] == 1, report["recoveries"]
    assert report["full_restarts"] == 0 and report["escalations"] == []
    validation = validate_checkpoints(
        f"{base}/elastic-gcs/checkpoints", options=ValidationOptions(require_commit_marker=True)
    )
    assert validation.latest_valid_step == 59
    assert len(jobsets_of(cluster_connection, "elastic-gcs")) == 1
