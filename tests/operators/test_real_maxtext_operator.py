"""The operators on real MaxText (0.2.5, from ``.venv-maxtext``) run by the local cluster: what its refusals and its
checkpoints mean to them.

The local cluster runs real MaxText for the MaxText image's training command when ``elastic_enabled`` is not set
(local/cluster/images.py ``real_maxtext_train``); an elastic run needs the Pathways proxy and gets the stand-in, so
the elastic operator's view of a refusal is checked on a JobSet of the elastic head's shape (``pathways-head``,
container ``jax-tpu``) that the test creates and the operator adopts. Each real MaxText start costs its imports
(about a minute on 2 loaded cores): the tests start it as few times as they can.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from kubernetes import client

from elastic_training.local import maxtext_env
from elastic_training.local.cluster.images import MAXTEXT_TRAIN_COMMAND
from elastic_training.operators import manifests
from elastic_training.operators.constants import (
    HEAD_MAIN_CONTAINER,
    HEAD_REPLICATED_JOB,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
)
from elastic_training.operators.elastic_operator import LABEL_FULL_RESTART, STATE_KEY
from elastic_training.operators.lifecycle import first_event
from elastic_training.operators.spec import LOCAL_MAXTEXT_IMAGE
from tests.operators.test_lifecycle import DAG_ID, _delete_mine, _elastic, _get, _stored, _TaskInstance, custom
from tests.support.real_maxtext import UNKNOWN_KEY, maxtext_python, model_args

__all__ = ["custom"]  # the fixture, used here

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

IMAGE_CONFIG = "src/maxtext/configs/base.yml"
# Importing MaxText's trainer takes about a minute on a loaded 2-core machine; the trigger's own deadline.
RUN_TIMEOUT_S = 600.0


@pytest.fixture(autouse=True)
def _real_maxtext(monkeypatch: pytest.MonkeyPatch) -> None:
    # The kubelet runs in this process: the catalogue finds MaxText where the fixture built it.
    monkeypatch.setenv(maxtext_env.PYTHON_ENV, str(maxtext_python()))
    monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__DEFER_SETTLE_SECONDS", "0")


def _head_jobset(name: str, labels: dict[str, str], args: list[str]) -> dict[str, Any]:
    """One ``pathways-head`` pod whose ``jax-tpu`` container is the MaxText image's trainer, not elastic."""
    pod = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": HEAD_MAIN_CONTAINER,
                "image": LOCAL_MAXTEXT_IMAGE,
                "command": list(MAXTEXT_TRAIN_COMMAND),
                "args": args,
            }
        ],
    }
    job = {
        "completionMode": "Indexed",
        "completions": 1,
        "parallelism": 1,
        "backoffLimit": 0,
        "template": {"spec": pod},
    }
    return {
        "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [{"name": HEAD_REPLICATED_JOB, "replicas": 1, "template": {"spec": job}}],
        },
    }


def test_real_maxtexts_config_refusal_is_a_permanent_failure(custom: client.CustomObjectsApi, tmp_path: Path) -> None:
    """MaxText refuses an unknown key with exit 1, like a crash; its ``MAXTEXT CONFIG ERROR:`` line says it is no
    crash: the task fails at once, spending none of its full-restart budget and creating no next incarnation."""
    run = "refused"
    ti = _TaskInstance("pretrain", "manual__real-refused")
    identity = manifests.identity_labels(dag_id=DAG_ID, task_id="pretrain", run_id=ti.run_id, map_index=-1)
    name = manifests.jobset_name(
        dag_id=DAG_ID, task_id="pretrain", run_id=ti.run_id, map_index=-1, attempt=0, prefix=run
    )
    args = [IMAGE_CONFIG, *model_args(tmp_path, run_name=run, steps=21), f"{UNKNOWN_KEY}=1"]
    created = custom.create_namespaced_custom_object(
        JOBSET_GROUP,
        JOBSET_VERSION,
        "default",
        JOBSET_PLURAL,
        _head_jobset(name, {**identity, LABEL_FULL_RESTART: "0"}, args),
    )
    try:
        store = _stored(name, created["metadata"]["uid"])
        operator = _elastic(tmp_path, run, max_full_restarts=2)
        with pytest.raises(TaskDeferred) as deferred:
            operator.execute({"ti": ti, "task_state_store": store})  # type: ignore[arg-type]
        event = asyncio.run(asyncio.wait_for(first_event(deferred.value.trigger), timeout=RUN_TIMEOUT_S))
        with pytest.raises(AirflowFailException, match="a restart cannot help") as failed:
            _elastic(tmp_path, run, max_full_restarts=2).execute_complete(
                {"ti": ti, "task_state_store": store},  # type: ignore[arg-type]
                event,
            )
        message = str(failed.value)
        assert f"MAXTEXT CONFIG ERROR: '{UNKNOWN_KEY}' not in '" in message, message[-3000:]
        assert "Local stand-in" not in message and f"ValueError: '{UNKNOWN_KEY}' not in '" in message  # its exit 1
        state = store[STATE_KEY]
        assert state["escalations"] == [] and state["full_restarts"] == 0 and state["jobset_name"] == name
        assert ti.xcom["report"]["full_restarts"] == 0
        assert (
            _get(
                custom,
                manifests.jobset_name(
                    dag_id=DAG_ID, task_id="pretrain", run_id=ti.run_id, map_index=-1, attempt=1, prefix=run
                ),
            )
            is None
        ), "no next incarnation"
    finally:
        _delete_mine(custom, identity)
