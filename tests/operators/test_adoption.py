"""Neither operator adopts a JobSet that is being deleted, nor creates one beside it: it waits, then creates."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators import ElasticJobSetOperator, JobSetOperator, kube_names
from elastic_training.operators.constants import (
    HEAD_MAIN_CONTAINER,
    HEAD_REPLICATED_JOB,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
)
from elastic_training.operators.elastic_operator import LABEL_FULL_RESTART
from elastic_training.operators.hooks import JobSetHook
from elastic_training.operators.run_history import ANNOTATION_RUN_HISTORY
from elastic_training.operators.run_state import STATE_KEY
from tests.support.control_plane import armed, wait_armed

DAG_ID, TASK_ID, RUN_ID = "adopt_dag", "pretrain", "manual__dying"


class _TaskInstance:
    dag_id, task_id, run_id, map_index = DAG_ID, TASK_ID, RUN_ID, -1

    def __init__(self) -> None:
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def _slow_to_die(
    name: str, labels: dict[str, str], stop_seconds: int = 4, release: Path | None = None
) -> dict[str, Any]:
    """A one-pod JobSet whose container takes `stop_seconds` to stop on SIGTERM (a trainer saving on the way out),
    or with `release` until that file exists (the grace period, 30 s, bounds it)."""
    on_term = f"sleep {stop_seconds}" if release is None else f"until [ -e {release} ]; do sleep 0.1; done"
    pod = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "containers": [
            {
                "name": HEAD_MAIN_CONTAINER,
                "image": "local",
                "command": [
                    "sh",
                    "-c",
                    armed(f"trap '{on_term}; exit 0' TERM", "sleep 3600 & wait; sleep 4"),
                ],
            }
        ],
    }
    job = {"completionMode": "Indexed", "completions": 1, "parallelism": 1, "template": {"spec": pod}}
    return {
        "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicatedJobs": [{"name": HEAD_REPLICATED_JOB, "replicas": 1, "template": {"spec": job}}]},
    }


def _wait_running(core: client.CoreV1Api, name: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pods = core.list_namespaced_pod("default", label_selector=f"jobset.sigs.k8s.io/jobset-name={name}").items
        if pods and all(p.status.phase == "Running" for p in pods):
            for pod in pods:  # running is not enough: a SIGTERM before the trap stops the pod at once
                wait_armed(core, pod.metadata.name, HEAD_MAIN_CONTAINER)
            return
        time.sleep(0.2)
    raise AssertionError(f"the pods of {name} never ran")


def _start_deleting(
    api: client.ApiClient, name: str, labels: dict[str, str], stop_seconds: int = 4, release: Path | None = None
) -> dict[str, Any]:
    """Create the slow-to-die JobSet, wait until it runs, delete it in the foreground; it is still there."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    created: dict[str, Any] = custom.create_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, _slow_to_die(name, labels, stop_seconds, release)
    )
    _wait_running(core, name)
    custom.delete_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, name, propagation_policy="Foreground"
    )
    being_deleted = custom.get_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, name)
    assert being_deleted["metadata"].get("deletionTimestamp"), "the JobSet must still be terminating"
    return created


@contextlib.contextmanager
def _released_once_waited_on(cluster: UpstreamCluster, name: str, release: Path) -> Iterator[None]:
    """Release the dying JobSet's pod (`release`) once someone watches for that JobSet to go (the operator's wait:
    a watch on ``metadata.name=<name>`` in the API server's audit log): it is still there when the operator
    comes, however slow the machine, and the test does not wait out a fixed stop."""
    since, done = cluster.audit_position(), threading.Event()

    def waited_on() -> bool:
        return any(
            e.resource == JOBSET_PLURAL and e.verb == "watch" and e.query("fieldSelector") == f"metadata.name={name}"
            for e in cluster.audit_events(since)
        )

    def release_when_waited_on() -> None:
        while not done.wait(0.1):
            if waited_on():
                release.touch()
                return

    releaser = threading.Thread(target=release_when_waited_on, daemon=True)
    releaser.start()
    try:
        yield
    finally:
        done.set()
        releaser.join()
        release.touch()  # whatever happened, the pod may stop now


def _assert_created_again(
    custom: client.CustomObjectsApi, identity: dict[str, str], name: str, dying: dict[str, Any]
) -> None:
    """One JobSet of the task now: the same name, a new uid, alive."""
    [created] = custom.list_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, label_selector=kube_names.label_selector(identity)
    )["items"]
    assert created["metadata"]["name"] == name
    assert created["metadata"]["uid"] != dying["metadata"]["uid"]
    assert not created["metadata"].get("deletionTimestamp")


def _delete_all(custom: client.CustomObjectsApi, selector: str) -> None:
    for found in custom.list_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, label_selector=selector
    )["items"]:
        custom.delete_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, found["metadata"]["name"]
        )


def test_a_jobset_being_deleted_is_waited_out_then_created_again(
    cluster_connection: UpstreamCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task cleared while its JobSet is being deleted (no state store): one JobSet at a time, a fresh uid."""
    identity = kube_names.identity_labels(dag_id=DAG_ID, task_id=TASK_ID, run_id=RUN_ID, map_index=-1)
    name = kube_names.jobset_name(
        dag_id=DAG_ID, task_id=TASK_ID, run_id=RUN_ID, map_index=-1, attempt=0, prefix="dying"
    )
    api = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    custom = client.CustomObjectsApi(api)
    try:
        release = tmp_path / "release"
        dying = _start_deleting(api, name, {**identity, LABEL_FULL_RESTART: "0"}, release=release)

        operator = ElasticJobSetOperator(
            task_id=TASK_ID,
            run_name="dying",
            base_output_directory=str(tmp_path),
            steps=10,
            checkpoint_period=5,
            num_slices=1,
            runtime="local",
        )
        ti = _TaskInstance()
        monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__DEFER_SETTLE_SECONDS", "7")
        with pytest.raises(TaskDeferred) as deferred, _released_once_waited_on(cluster_connection, name, release):
            operator.execute({"ti": ti})  # type: ignore[arg-type]
        assert deferred.value.trigger.settle_seconds == 7.0  # the Airflow 3.3 race workaround reaches the trigger
        assert ti.xcom["jobset_name"] == name
        [created] = custom.list_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, label_selector=kube_names.label_selector(identity)
        )["items"]
        assert created["metadata"]["uid"] != dying["metadata"]["uid"]
        assert not created["metadata"].get("deletionTimestamp")
    finally:
        for found in custom.list_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, label_selector=f"{LABEL_FULL_RESTART}"
        )["items"]:
            custom.delete_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, found["metadata"]["name"]
            )
        api.close()


def test_a_plain_jobset_being_deleted_is_waited_out_then_created_again(
    cluster_connection: UpstreamCluster, tmp_path: Path
) -> None:
    """`JobSetOperator`: a stage cleared while its killed JobSet still stops runs again, not 'deleted outside'."""
    run_id = "manual__plain-dying"
    identity = kube_names.identity_labels(dag_id=DAG_ID, task_id="evaluate", run_id=run_id, map_index=-1)
    name = kube_names.jobset_name(
        dag_id=DAG_ID, task_id="evaluate", run_id=run_id, map_index=-1, attempt=0, prefix="ev"
    )
    api = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    custom = client.CustomObjectsApi(api)
    try:
        release = tmp_path / "release"
        dying = _start_deleting(api, name, identity, release=release)
        operator = JobSetOperator(task_id="evaluate", name="ev", image="local", command=["true"], runtime="local")
        ti = _TaskInstance()
        ti.task_id, ti.run_id = "evaluate", run_id
        with pytest.raises(TaskDeferred), _released_once_waited_on(cluster_connection, name, release):
            operator.execute({"ti": ti})  # type: ignore[arg-type]
        _assert_created_again(custom, identity, name, dying)
    finally:
        _delete_all(custom, kube_names.label_selector(identity))
        api.close()


def _elastic(tmp_path: Path, run_name: str) -> ElasticJobSetOperator:
    return ElasticJobSetOperator(
        task_id=TASK_ID,
        run_name=run_name,
        base_output_directory=str(tmp_path),
        steps=10,
        checkpoint_period=5,
        num_slices=1,
        runtime="local",
    )


def test_a_name_taken_by_a_foreign_jobset_fails_and_leaves_it_alone(
    cluster_connection: UpstreamCluster, tmp_path: Path
) -> None:
    run_id = "manual__foreign"
    name = kube_names.jobset_name(
        dag_id=DAG_ID, task_id=TASK_ID, run_id=run_id, map_index=-1, attempt=0, prefix="taken"
    )
    api = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    custom = client.CustomObjectsApi(api)
    try:
        foreign = custom.create_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, _slow_to_die(name, {"team": "someone-else"})
        )
        ti = _TaskInstance()
        ti.run_id = run_id
        with pytest.raises(AirflowFailException, match=f"a JobSet named {name} already exists in default and was not"):
            _elastic(tmp_path, "taken").execute({"ti": ti})  # type: ignore[arg-type]
        still = custom.get_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, name)
        assert still["metadata"]["uid"] == foreign["metadata"]["uid"]
        assert not still["metadata"].get("deletionTimestamp")
    finally:
        custom.delete_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, name)
        api.close()


def test_a_create_that_meets_its_own_jobset_being_deleted_waits_then_creates(
    cluster_connection: UpstreamCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race: the adoption's list ran before this task's JobSet of that name appeared, then it was deleted."""
    run_id = "manual__race"
    identity = kube_names.identity_labels(dag_id=DAG_ID, task_id=TASK_ID, run_id=run_id, map_index=-1)
    name = kube_names.jobset_name(dag_id=DAG_ID, task_id=TASK_ID, run_id=run_id, map_index=-1, attempt=0, prefix="race")
    api = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    custom = client.CustomObjectsApi(api)
    try:
        # Still there when the create comes, however slow the machine: its pod stops once the create met it.
        release = tmp_path / "release"
        dying = _start_deleting(api, name, {**identity, LABEL_FULL_RESTART: "0"}, release=release)
        lists: list[str] = []
        real_list, real_create = JobSetHook.list_jobsets, JobSetHook.create_jobset
        refused: list[int] = []

        def list_jobsets(self: JobSetHook, namespace: str, label_selector: str) -> list[dict[str, Any]]:
            lists.append(label_selector)
            return [] if len(lists) == 1 else real_list(self, namespace, label_selector)

        def create_jobset(self: JobSetHook, body: dict[str, Any], namespace: str) -> dict[str, Any]:
            try:
                return real_create(self, body, namespace)
            except ApiException as error:
                refused.append(error.status)
                release.touch()
                raise

        monkeypatch.setattr(JobSetHook, "list_jobsets", list_jobsets)
        monkeypatch.setattr(JobSetHook, "create_jobset", create_jobset)
        ti = _TaskInstance()
        ti.run_id = run_id
        with pytest.raises(TaskDeferred):
            _elastic(tmp_path, "race").execute({"ti": ti})  # type: ignore[arg-type]
        assert lists, "the adoption must have listed (and been answered from before the JobSet existed)"
        assert refused == [409], "the first create must have met the dying JobSet"
        _assert_created_again(custom, identity, name, dying)
    finally:
        _delete_all(custom, kube_names.label_selector(identity))
        api.close()


class _StateStore(dict[str, Any]):
    """The task state store's two calls the operator makes, in memory."""

    def set(self, key: str, value: Any) -> None:
        self[key] = value


ESCALATION = {
    "reason": "stalled",
    "message": "no progress for 300 s",
    "at": 1.0,
    "jobset_name": "hist-old",
    "latest_step": 23,
    "resumed_from_step": 20,
    "steps_lost": 3,
    "seconds_to_recreate": 4.5,
}
HOSTILE_HISTORY = '{"escalations": [{"reason": "stalled", "at": 1, "steps_lost": Infinity}], "history": []}'
INCARNATION = {"jobset_name": "hist-old", "slice_restarts": 2, "jobset_restarts": 1, "digest": None}


def test_a_rerun_with_an_empty_task_state_gets_the_run_history_from_its_jobset(
    cluster_connection: UpstreamCluster, tmp_path: Path
) -> None:
    """A cleared task (or a recreated DAG run) adopts by labels and still reports the earlier incarnations."""
    run_id = "manual__history"
    identity = kube_names.identity_labels(dag_id=DAG_ID, task_id=TASK_ID, run_id=run_id, map_index=-1)
    api = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    custom = client.CustomObjectsApi(api)
    try:
        ti = _TaskInstance()
        ti.run_id = run_id
        before = _StateStore({STATE_KEY: {"full_restarts": 1, "escalations": [ESCALATION], "history": [INCARNATION]}})
        with pytest.raises(TaskDeferred):
            _elastic(tmp_path, "hist").execute({"ti": ti, "task_state_store": before})  # type: ignore[arg-type]
        [created] = custom.list_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, label_selector=kube_names.label_selector(identity)
        )["items"]
        assert created["metadata"]["name"].endswith("-r1")

        cleared = _StateStore()
        with pytest.raises(TaskDeferred):
            _elastic(tmp_path, "hist").execute({"ti": ti, "task_state_store": cleared})  # type: ignore[arg-type]
        state = cleared[STATE_KEY]
        assert state["jobset_uid"] == created["metadata"]["uid"]  # adopted, not created again
        assert state["full_restarts"] == 1
        assert state["escalations"] == [ESCALATION] and state["history"] == [INCARNATION]

        # Someone with edit rights wrote nonsense into the annotation: ignored, the run goes on.
        custom.patch_namespaced_custom_object(
            JOBSET_GROUP,
            JOBSET_VERSION,
            "default",
            JOBSET_PLURAL,
            created["metadata"]["name"],
            {"metadata": {"annotations": {ANNOTATION_RUN_HISTORY: HOSTILE_HISTORY}}},
        )
        hostile = _StateStore()
        with pytest.raises(TaskDeferred):
            _elastic(tmp_path, "hist").execute({"ti": ti, "task_state_store": hostile})  # type: ignore[arg-type]
        assert hostile[STATE_KEY]["escalations"] == [] and hostile[STATE_KEY]["full_restarts"] == 1
    finally:
        _delete_all(custom, kube_names.label_selector(identity))
        api.close()


def test_finding_its_jobset_rides_out_a_throttling_burst(cluster_connection: UpstreamCluster, tmp_path: Path) -> None:
    """Found by the chaos harness: a rerun met the rest of a 429 burst while it listed its JobSets and failed."""
    run_id = "manual__throttled"
    identity = kube_names.identity_labels(dag_id=DAG_ID, task_id=TASK_ID, run_id=run_id, map_index=-1)
    api = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    custom = client.CustomObjectsApi(api)
    # More than the hook's five attempts at the label search, each of which urllib3 already tries four times
    # (it honours Retry-After on 429 itself). `Retry-After: 0`: the burst's length is the point, not its waits
    # (tests/local/cluster/test_faults.py has the client honour a `Retry-After: 1`).
    cluster_connection.faults.fail_requests(
        429, count=24, path="namespaces/default/jobsets$", method="GET", retry_after=0
    )
    try:
        ti = _TaskInstance()
        ti.run_id = run_id
        with pytest.raises(TaskDeferred):
            _elastic(tmp_path, "throttled").execute({"ti": ti})  # type: ignore[arg-type]
        [created] = custom.list_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, label_selector=kube_names.label_selector(identity)
        )["items"]
        assert created["metadata"]["name"] == ti.xcom["jobset_name"]
    finally:
        cluster_connection.faults.clear_api_faults()
        _delete_all(custom, kube_names.label_selector(identity))
        api.close()
