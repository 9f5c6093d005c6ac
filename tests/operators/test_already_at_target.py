"""A run already at its target, met by MaxText rather than by the operator's pre-launch look: its refusal to train
(``RuntimeError: Requested training up to step N, but a checkpoint already exists at step M``, exit 1) is read as
done, not as a trainer failure.

The operator launches such a run when it cannot know beforehand: a full restart already under way (a trainer
that hung after saving its final step, the escalation recorded before a worker crash) creates the next
incarnation without looking again. The stand-in refuses as MaxText 0.2.5 does (same line, same exit code:
tests/local/workloads/test_maxtext_contract.py::test_a_finished_run_rerun_exits_1); driven the way the task
runner drives the operator, against the local cluster.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

import pytest
from airflow.sdk.exceptions import TaskDeferred
from kubernetes import client

from elastic_training.operators import kube_names
from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION
from elastic_training.operators.elastic_operator import LABEL_FULL_RESTART
from elastic_training.operators.lifecycle import first_event
from elastic_training.operators.run_state import STATE_KEY
from tests.support.lifecycle_runs import (
    DAG_ID,
    _delete_mine,
    _elastic,
    _get,
    _one_pod_jobset,
    _StateStore,
    _stored,
    _TaskInstance,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

RUN = "at-target"
EVENT_TIMEOUT_S = 300.0


@pytest.fixture(autouse=True)
def _no_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__DEFER_SETTLE_SECONDS", "0")


def test_maxtexts_already_at_target_exit_after_a_full_restart_is_success(
    custom: client.CustomObjectsApi, orbax_runs: dict[str, Path], tmp_path: Path
) -> None:
    """The trainer hung after committing its final step (20 of 21 steps); the stall's full restart launched the next
    incarnation, whose trainer found step 20 and refused to train: the task succeeds, its report says so."""
    shutil.copytree(orbax_runs["ocdbt"], tmp_path / RUN)  # committed steps 0, 10, 20
    ti = _TaskInstance("pretrain", "manual__at-target")
    identity = kube_names.identity_labels(dag_id=DAG_ID, task_id="pretrain", run_id=ti.run_id, map_index=-1)
    name = kube_names.jobset_name(
        dag_id=DAG_ID, task_id="pretrain", run_id=ti.run_id, map_index=-1, attempt=0, prefix=RUN
    )
    hung = custom.create_namespaced_custom_object(
        JOBSET_GROUP,
        JOBSET_VERSION,
        "default",
        JOBSET_PLURAL,
        _one_pod_jobset(name, {**identity, LABEL_FULL_RESTART: "0"}, ["sleep", "3600"]),
    )
    escalation = {"reason": "stalled", "message": "no progress", "at": 1.0, "jobset_name": name, "latest_step": 20}
    store = _stored(name, hung["metadata"]["uid"], escalating=True, escalations=[escalation])
    try:
        operator = _elastic(tmp_path, RUN, steps=21, max_full_restarts=1)
        with pytest.raises(TaskDeferred) as deferred:
            operator.execute({"ti": ti, "task_state_store": store})  # type: ignore[arg-type]
        state = store[STATE_KEY]
        assert state["jobset_name"].endswith("-r1") and state["full_restarts"] == 1
        event = asyncio.run(asyncio.wait_for(first_event(deferred.value.trigger), timeout=EVENT_TIMEOUT_S))
        assert event["state"]["phase"] == "failed", event["message"]
        assert event["state"]["digest"]["already_at_target"] == [21, 20], event["message"]

        report = _elastic(tmp_path, RUN, steps=21, max_full_restarts=1).execute_complete(
            {"ti": ti, "task_state_store": store},  # type: ignore[arg-type]
            event,
        )
        assert report["already_at_target"] is True
        assert report["final_step"] == 20 and report["target_step"] == 20
        assert report["full_restarts"] == 1 and len(report["escalations"]) == 1  # the stall's, nothing more
        assert _get(custom, state["jobset_name"].replace("-r1", "-r2")) is None, "no further incarnation"
    finally:
        _delete_mine(custom, identity)


@pytest.mark.parametrize("provider", ["installed", "blocked"])
def test_a_run_without_the_openlineage_provider_runs_the_same_and_has_no_facets(
    custom: client.CustomObjectsApi,
    orbax_runs: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    provider: str,
) -> None:
    """The operator's pre-launch look finds the run done (steps 0, 10, 20 committed, 21 steps) and succeeds without
    a JobSet. With the OpenLineage provider's imports blocked, as where the ``[lineage]`` extra is not installed, it
    runs the same and its facets are ``None`` (the provider's extractor: no facets); with it, the checkpoint
    directory and the report's facet."""
    if provider == "blocked":
        for module in ("airflow.providers.openlineage", "airflow.providers.openlineage.extractors", "openlineage"):
            monkeypatch.setitem(sys.modules, module, None)
    shutil.copytree(orbax_runs["ocdbt"], tmp_path / RUN)
    ti = _TaskInstance("pretrain", f"manual__lineage-{provider}")
    operator = _elastic(tmp_path, RUN, steps=21, maxtext_args={"dataset_path": "gs://corpus/tfds"})
    report = operator.execute({"ti": ti, "task_state_store": _StateStore()})  # type: ignore[arg-type]
    assert report["already_at_target"] is True and report["final_step"] == 20
    identity = kube_names.identity_labels(dag_id=DAG_ID, task_id="pretrain", run_id=ti.run_id, map_index=-1)
    selector = kube_names.label_selector(identity)
    assert (
        custom.list_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, label_selector=selector
        )["items"]
        == []
    )
    lineage = operator.get_openlineage_facets_on_complete(ti)
    if provider == "blocked":
        assert lineage is None and operator.get_openlineage_facets_on_failure(ti) is None
        return
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("gs://corpus", "tfds")]
    assert [(d.namespace, d.name) for d in lineage.outputs] == [("file", f"{tmp_path}/{RUN}/checkpoints")]
    facet = lineage.run_facets["elasticTraining"]
    assert (facet.finalStep, facet.targetStep, facet.fullRestarts) == (20, 20, 0)
