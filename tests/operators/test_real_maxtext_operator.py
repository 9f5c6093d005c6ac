"""The operators on real MaxText (0.2.5, from ``.venv-maxtext``) run by the local cluster: what its refusals and its
checkpoints mean to them, and a `JobSetOperator` training with it through a killed pod and a cleared task.

The local cluster runs real MaxText for the MaxText image's training command when ``elastic_enabled`` is not set
(local/nodeagent/images.py ``real_maxtext_train``); an elastic run needs the Pathways proxy and gets the stand-in, so
the elastic operator's view of a refusal is checked on a JobSet of the elastic head's shape (``pathways-head``,
container ``jax-tpu``) that the test creates and the operator adopts. Each real MaxText start costs its imports
(about a minute on 2 loaded cores): the tests start it as few times as they can.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from kubernetes import client
from kubernetes import config as kube_config

from elastic_training.local import maxtext_env
from elastic_training.local.nodeagent.images import MAXTEXT_TRAIN_COMMAND
from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators import kube_names, manifests
from elastic_training.operators.checkpoints import validate_checkpoints
from elastic_training.operators.constants import (
    COMPLETED_STEP_RE,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    LABEL_STAGE,
    NO_CHECKPOINT_RE,
    RESTORING_STEP_RE,
)
from elastic_training.operators.elastic_operator import LABEL_FULL_RESTART
from elastic_training.operators.lifecycle import first_event
from elastic_training.operators.run_state import STATE_KEY
from elastic_training.operators.spec import LOCAL_MAXTEXT_IMAGE
from tests.support.airflow_dags import NAMESPACE, dag_from_source, states, xcom
from tests.support.lifecycle_runs import DAG_ID, _delete_mine, _elastic, _get, _one_pod_jobset, _stored, _TaskInstance
from tests.support.real_maxtext import CHECKPOINT_PERIOD, UNKNOWN_KEY, maxtext_python, model_args

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

IMAGE_CONFIG = "src/maxtext/configs/base.yml"
# Importing MaxText's trainer takes about a minute on a loaded 2-core machine; the trigger's own deadline.
RUN_TIMEOUT_S = 600.0


@pytest.fixture(autouse=True)
def _real_maxtext(monkeypatch: pytest.MonkeyPatch) -> None:
    # The kubelet runs in this process: the catalogue finds MaxText where the fixture built it.
    monkeypatch.setenv(maxtext_env.PYTHON_ENV, str(maxtext_python()))


def _head_jobset(name: str, labels: dict[str, str], args: list[str]) -> dict[str, Any]:
    """One ``pathways-head`` pod whose ``jax-tpu`` container is the MaxText image's trainer, not elastic."""
    return _one_pod_jobset(name, labels, list(MAXTEXT_TRAIN_COMMAND), image=LOCAL_MAXTEXT_IMAGE, args=args)


def test_real_maxtexts_config_refusal_is_a_permanent_failure(
    custom: client.CustomObjectsApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MaxText refuses an unknown key with exit 1, like a crash; its ``MAXTEXT CONFIG ERROR:`` line says it is no
    crash: the task fails at once, spending none of its full-restart budget and creating no next incarnation."""
    # Driven by hand, not by Airflow's task runner: no race for the trigger's settle time to wait out.
    monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__DEFER_SETTLE_SECONDS", "0")
    run = "refused"
    ti = _TaskInstance("pretrain", "manual__real-refused")
    identity = kube_names.identity_labels(dag_id=DAG_ID, task_id="pretrain", run_id=ti.run_id, map_index=-1)
    name = kube_names.jobset_name(
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
                kube_names.jobset_name(
                    dag_id=DAG_ID, task_id="pretrain", run_id=ti.run_id, map_index=-1, attempt=1, prefix=run
                ),
            )
            is None
        ), "no next incarnation"
    finally:
        _delete_mine(custom, identity)


# The end-to-end run: enough steps after the first committed checkpoint that a kill there lands mid-run (real
# MaxText runs this tiny model's steps in milliseconds; its saves, one every CHECKPOINT_PERIOD steps, set the pace).
E2E_STEPS = 200
E2E_STAGE = "real-maxtext-e2e"
KILL_AFTER_STEP = CHECKPOINT_PERIOD + 2
E2E_HEADER = "from airflow.sdk import DAG\nfrom elastic_training.operators import JobSetOperator"


class _KillMidRun:
    """Force-deletes the training pod once it has completed `KILL_AFTER_STEP` and committed a step past 0 (grace 0:
    the pod and its processes go at once, as a node lost would take them)."""

    def __init__(self, cluster: UpstreamCluster, run_directory: Path) -> None:
        self.cluster, self.run_directory = cluster, run_directory
        self._api = kube_config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
        self.core = client.CoreV1Api(self._api)
        self.killed: dict[str, Any] = {}
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kill-mid-run", daemon=True)

    def pods(self) -> list[Any]:
        listed = self.core.list_namespaced_pod(NAMESPACE, label_selector=f"{LABEL_STAGE}={E2E_STAGE}").items
        return sorted(listed, key=lambda p: p.metadata.creation_timestamp)

    def log(self, pod: str, tail_lines: int | None = None) -> str:
        # Unparsed: the client's own reading of a log turns it into the repr of its bytes (as hooks.py reads it).
        response = self.core.read_namespaced_pod_log(
            pod, NAMESPACE, container=manifests.PLAIN_CONTAINER, tail_lines=tail_lines, _preload_content=False
        )
        return bytes(response.data).decode("utf-8", errors="replace")

    def _run(self) -> None:
        try:
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while not self._stop.is_set() and time.monotonic() < deadline:
                running = [p for p in self.pods() if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
                if running:
                    pod = running[0].metadata.name
                    steps = [int(m[1]) for m in COMPLETED_STEP_RE.finditer(self.log(pod, tail_lines=40))]
                    committed = validate_checkpoints(str(self.run_directory)).latest_valid_step
                    if steps and steps[-1] >= KILL_AFTER_STEP and (committed or 0) >= CHECKPOINT_PERIOD:
                        self.killed = {"pod": pod, "uid": running[0].metadata.uid, "step": steps[-1]}
                        self.killed["committed"] = committed
                        # Forced (grace 0): a graceful deletion's SIGTERM lets MaxText exit 0, its pod Succeed
                        # and its Job complete, as kubectl delete would; a lost node gives it no such chance.
                        self.core.delete_namespaced_pod(pod, NAMESPACE, grace_period_seconds=0)
                        # The trainer ran on while the reads above took their time (32 steps once, on a loaded CI
                        # machine); its processes are dead now, so this is the newest step it committed.
                        final = validate_checkpoints(str(self.run_directory)).latest_valid_step
                        self.killed["committed_at_kill"] = final
                        return
                self._stop.wait(0.3)
        except BaseException as error:  # reported by the test
            self.error = error

    def __enter__(self) -> _KillMidRun:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def close(self) -> None:
        self._api.close()


def test_a_jobset_operator_trains_real_maxtext_through_a_killed_pod_and_a_cleared_task(
    airflow_db: None, cluster_connection: UpstreamCluster, tmp_path: Path
) -> None:
    """Real MaxText in the GKE JobSet `JobSetOperator` renders (the MaxText image, its training command): its pod
    is killed mid-run, the Job's retry resumes from MaxText's own checkpoint and reaches the target; the task
    cleared and run again succeeds on that JobSet, launching nothing."""
    run = "e2e"
    args = [IMAGE_CONFIG, *model_args(tmp_path, run_name=run, steps=E2E_STEPS)]
    body = f"""
    with DAG("real_maxtext_e2e", schedule=None) as dag:
        JobSetOperator(
            task_id="pretrain", name="real-maxtext", image={LOCAL_MAXTEXT_IMAGE!r},
            command={list(MAXTEXT_TRAIN_COMMAND)!r}, args={args!r}, runtime="gke", stage={E2E_STAGE!r},
            backoff_limit=1, deferrable=True, poll_interval=1.0,
        )
    """
    dag = dag_from_source("real_maxtext_e2e", body, E2E_HEADER)
    when = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)
    kill = _KillMidRun(cluster_connection, tmp_path / run)
    try:
        with kill:
            dag_run = dag.test(logical_date=when, run_after=when)
        assert kill.error is None, kill.error
        assert states(dag_run) == {"pretrain": "success"}
        first = xcom(dag_run, "pretrain")
        killed = kill.killed
        assert killed and killed["committed_at_kill"] < E2E_STEPS - 1, ("the pod was killed mid-run", killed)

        [resumed] = kill.pods()  # the killed pod is gone; the Job's retry replaced it
        assert resumed.metadata.uid != killed["uid"] and resumed.status.phase == "Succeeded"
        log = kill.log(resumed.metadata.name)
        assert "Local stand-in" not in log and not NO_CHECKPOINT_RE.search(log), log[-3000:]
        [restored] = [int(m[1]) for m in RESTORING_STEP_RE.finditer(log)] or [None]
        assert restored is not None and killed["committed"] <= restored <= killed["committed_at_kill"], (
            restored,
            killed,
            log[-3000:],
        )
        steps = [int(m[1]) for m in COMPLETED_STEP_RE.finditer(log)]
        assert steps == list(range(restored + 1, E2E_STEPS)), steps[:5]
        assert validate_checkpoints(str(tmp_path / run)).latest_valid_step == E2E_STEPS - 1

        # Cleared (dag.test clears the task instances of its logical date) and run again: the completed JobSet
        # is this task's own, adopted; no JobSet and no pod is created, MaxText is not started again.
        [jobset] = _jobsets(cluster_connection)
        again = dag.test(logical_date=when, run_after=when)
        assert states(again) == {"pretrain": "success"}
        assert xcom(again, "pretrain")["jobset_name"] == first["jobset_name"] == jobset["metadata"]["name"]
        [same] = _jobsets(cluster_connection)
        assert same["metadata"]["uid"] == jobset["metadata"]["uid"]
        assert [p.metadata.uid for p in kill.pods()] == [resumed.metadata.uid]
    finally:
        kill.close()
        api = kube_config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
        try:
            for found in _jobsets(cluster_connection):
                client.CustomObjectsApi(api).delete_namespaced_custom_object(
                    JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, found["metadata"]["name"]
                )
        finally:
            api.close()


def _jobsets(cluster: UpstreamCluster) -> list[dict[str, Any]]:
    api = kube_config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, label_selector=f"{LABEL_STAGE}={E2E_STAGE}"
        )
        return list(listed["items"])
    finally:
        api.close()
