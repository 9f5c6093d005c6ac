"""A GCS outage while the elastic operator reads its checkpoints: "unknown", never "invalid".

The operator reaches the GCS emulator through a proxy that answers 503 for as long as the test says. During
the outage nothing is moved and the task fails for a retry (``AirflowException``, not ``AirflowFailException``);
once storage is back, the retry finishes: the run succeeds at completion, the escalation creates the next
incarnation without quarantining the committed newest step.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred
from kubernetes import client

from elastic_training.operators import kube_names
from elastic_training.operators.checkpoints import storage
from elastic_training.operators.elastic_operator import LABEL_FULL_RESTART
from elastic_training.operators.observations import MonitorState
from elastic_training.operators.policy import JobSetPhase
from elastic_training.operators.run_state import STATE_KEY
from tests.support.gcs_emulator import FlakyProxy, GCSEmulator
from tests.support.lifecycle_runs import DAG_ID, _delete_mine, _elastic, _one_pod_jobset, _stored, _TaskInstance

RUN = "outage"


@pytest.fixture
def run_base(
    gcs_emulator: GCSEmulator,
    gcs_bucket: str,
    flaky_gcs: FlakyProxy,
    orbax_runs: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[str]:
    """``gs://<bucket>/runs`` holding run ``outage`` (committed steps 0, 10, 20), read through the 503 proxy."""
    base = f"{gcs_bucket}/runs"
    gcs_emulator.upload_dir(orbax_runs["ocdbt"], f"{base}/{RUN}")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", flaky_gcs.endpoint)
    monkeypatch.setenv("TENSORSTORE_GCS_HTTP_URL", flaky_gcs.endpoint)
    real = storage.default_retry
    # The client's own retry rides out an outage for 120 s per call; the test's outage is longer than that anyway.
    monkeypatch.setattr(storage, "default_retry", lambda deadline=120.0, initial_delay=0.2: real(2.0, 0.1))
    yield base


def _objects(gcs_emulator: GCSEmulator, uri: str) -> list[str]:
    bucket, _, prefix = uri.removeprefix("gs://").partition("/")
    return sorted(b.name for b in gcs_emulator.client().list_blobs(bucket, prefix=prefix))


def test_an_outage_at_completion_retries_and_succeeds_once_storage_is_back(
    run_base: str, flaky_gcs: FlakyProxy, gcs_emulator: GCSEmulator
) -> None:
    ti = _TaskInstance("pretrain", "manual__outage-done")
    store = _stored("outage-done", "uid-1")
    state = MonitorState(jobset_uid="uid-1", started_at=1.0, phase=JobSetPhase.COMPLETED).to_json()
    event: dict[str, Any] = {"status": "decision", "name": "outage-done", "state": state}
    before = _objects(gcs_emulator, f"{run_base}/{RUN}")
    flaky_gcs.fail_for(600)
    with pytest.raises(AirflowException, match="could not be checked") as failed:
        _elastic(run_base, RUN, storage_retry_timeout=1.0).execute_complete(
            {"ti": ti, "task_state_store": store},  # type: ignore[arg-type]
            event,
        )
    assert not isinstance(failed.value, AirflowFailException), "an outage must leave the task its retries"
    flaky_gcs.clear()
    assert _objects(gcs_emulator, f"{run_base}/{RUN}") == before, "nothing moved"
    report = _elastic(run_base, RUN).execute_complete({"ti": ti, "task_state_store": store}, event)  # type: ignore[arg-type]
    assert report["final_step"] == 20 and report["target_step"] == 20


def test_an_outage_during_an_escalation_quarantines_nothing_and_the_retry_finishes_it(
    run_base: str, flaky_gcs: FlakyProxy, gcs_emulator: GCSEmulator, custom: client.CustomObjectsApi
) -> None:
    ti = _TaskInstance("pretrain", "manual__outage-escalation")
    identity = kube_names.identity_labels(dag_id=DAG_ID, task_id="pretrain", run_id=ti.run_id, map_index=-1)
    name = kube_names.jobset_name(
        dag_id=DAG_ID, task_id="pretrain", run_id=ti.run_id, map_index=-1, attempt=0, prefix=RUN
    )
    created = custom.create_namespaced_custom_object(
        "jobset.x-k8s.io",
        "v1alpha2",
        "default",
        "jobsets",
        _one_pod_jobset(name, {**identity, LABEL_FULL_RESTART: "0"}, ["sleep", "3600"]),
    )
    escalation = {"reason": "stalled", "message": "m", "at": 1.0, "jobset_name": name, "latest_step": 23}
    store = _stored(name, created["metadata"]["uid"], escalating=True, escalations=[escalation])
    before = _objects(gcs_emulator, f"{run_base}/{RUN}")
    try:
        flaky_gcs.fail_for(600)
        with pytest.raises(AirflowException, match="unknown, not invalid") as failed:
            _elastic(run_base, RUN, storage_retry_timeout=1.0).execute(
                {"ti": ti, "task_state_store": store}  # type: ignore[arg-type]
            )
        assert not isinstance(failed.value, AirflowFailException)
        flaky_gcs.clear()
        assert _objects(gcs_emulator, f"{run_base}/{RUN}") == before, "nothing moved during the outage"
        assert store[STATE_KEY]["escalating"], "the escalation is still to finish"

        with pytest.raises(TaskDeferred):  # the task's retry
            _elastic(run_base, RUN).execute({"ti": ti, "task_state_store": store})  # type: ignore[arg-type]
        state = store[STATE_KEY]
        assert not state["escalating"] and state["full_restarts"] == 1 and state["jobset_name"].endswith("-r1")
        [record] = state["escalations"]
        assert record["quarantined"] == [] and record["resumed_from_step"] == 20
        assert _objects(gcs_emulator, f"{run_base}/{RUN}") == before
    finally:
        _delete_mine(custom, identity)
