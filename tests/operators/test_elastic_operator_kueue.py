"""`ElasticJobSetOperator` behind Kueue on the local cluster (``v5e-small``: xpk's ``cluster-queue`` of 64 v5e chips,
the LocalQueue ``multislice-queue``, preemption ``withinClusterQueue: LowerPriority``): waiting is not stalling.

A higher-priority JobSet (a "blocker", made here with the admin client as another team's run would be) holds or takes
the quota; the run under test is queued behind it, or preempted by it, and must come through with one JobSet, no full
restart and no slice restart, its queue time and preemptions in the report. Every wait is on a condition with a
deadline; the blocker is removed only once the run has provably waited (longer than its stall timeout).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.constants import (
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    KUEUE_GROUP,
    KUEUE_VERSION,
    LABEL_GKE_NODEPOOL,
    LABEL_GKE_TPU_ACCELERATOR,
    LABEL_GKE_TPU_TOPOLOGY,
    LABEL_KUEUE_JOB_UID,
    LABEL_KUEUE_QUEUE_NAME,
    TPU_RESOURCE,
)
from elastic_training.operators.observations import parse_time
from tests.support.airflow_dags import states, xcom
from tests.support.alert_notifier import told
from tests.support.control_plane import job_template, jobset_manifest
from tests.support.elastic_runs import elastic_dag, jobsets_of
from tests.support.flex import (
    CHECK,
    LABEL_PROVISIONING_REQUEST,
    cluster_queue,
    create_flex_check,
    provisioning_requests,
    typed,
)
from tests.support.kueue_objects import cond as condition
from tests.support.shared_cluster import spoil
from tests.support.step_faults import StepFaults

pytestmark = pytest.mark.slow

NS = "default"
QUEUE = "multislice-queue"
Obj = dict[str, Any]


class Cluster:
    """The admin's view of the cluster: JobSets and Workloads, read and waited on."""

    def __init__(self, cluster: UpstreamCluster) -> None:
        self._api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
        self.custom = client.CustomObjectsApi(self._api)
        self.core = client.CoreV1Api(self._api)

    def close(self) -> None:
        self._api.close()

    def jobset(self, name: str) -> Obj | None:
        try:
            found: Obj = self.custom.get_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NS, JOBSET_PLURAL, name)
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        return found

    def jobsets_of_run(self, run_name: str) -> list[Obj]:
        listed = self.custom.list_namespaced_custom_object(
            JOBSET_GROUP,
            JOBSET_VERSION,
            NS,
            JOBSET_PLURAL,
            label_selector=f"elastic-training.airflow.apache.org/run-name={run_name}",
        )
        return list(listed["items"])

    def workload_of(self, jobset: Obj) -> Obj | None:
        selector = f"{LABEL_KUEUE_JOB_UID}={jobset['metadata']['uid']}"
        items = self.custom.list_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, NS, "workloads", label_selector=selector
        )["items"]
        return items[0] if items else None

    def running_pods(self, jobset: str) -> int:
        pods = self.core.list_namespaced_pod(NS, label_selector=f"jobset.sigs.k8s.io/jobset-name={jobset}").items
        return sum(1 for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp)

    def create(self, manifest: Obj) -> Obj:
        created: Obj = self.custom.create_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, NS, JOBSET_PLURAL, manifest
        )
        return created

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, NS, JOBSET_PLURAL, name, propagation_policy="Foreground"
        )


def is_true(obj: Obj | None, kind: str) -> bool:
    """True when ``obj`` has the condition ``kind`` with status True."""
    found = condition(obj, kind) if obj is not None else None
    return found is not None and found["status"] == "True"


def wait_for(what: str, predicate: Callable[[], Any], timeout: float = 300.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def blocker(name: str, slices: int, priority: str = "very-high") -> Obj:
    """Another team's run in the same queue: a head on cpu-np and ``slices`` v5e-16 slices (16 chips each) idling."""
    head = job_template("sleep 3600", grace=2, nodeSelector={LABEL_GKE_NODEPOOL: "cpu-np"}, priorityClassName=priority)
    head["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"cpu": "8", "memory": "8G"}
    }
    worker = job_template(
        "sleep 3600",
        replicas=slices,
        completions=4,
        grace=2,
        nodeSelector={LABEL_GKE_TPU_ACCELERATOR: "tpu-v5-lite-podslice", LABEL_GKE_TPU_TOPOLOGY: "4x4"},
        tolerations=[{"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        priorityClassName=priority,
    )
    worker["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {TPU_RESOURCE: "4"}}
    manifest = jobset_manifest(name, {"pathways-head": head, "worker": worker})
    manifest["metadata"]["labels"] = {LABEL_KUEUE_QUEUE_NAME: QUEUE}
    return manifest


class Background:
    """One scripted actor beside ``dag.test()``: its failure fails the test, it never outlives it."""

    def __init__(self, act: Callable[[threading.Event], None]) -> None:
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(act,), daemon=True)

    def _run(self, act: Callable[[threading.Event], None]) -> None:
        try:
            act(self.stop)
        except BaseException as error:  # reported by __exit__
            self.error = error

    def __enter__(self) -> Background:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._thread.join(timeout=60)
        if self.error is not None and exc[0] is None:
            raise self.error


# The cluster whose Kueue runs the pods-ready test's configuration (the last test's, not put back after it).
_pods_ready_on: list[UpstreamCluster] = []


@pytest.fixture
def admin(cluster_connection: UpstreamCluster) -> Iterator[Cluster]:
    if any(c is cluster_connection for c in _pods_ready_on):  # a test run after the pods-ready one: Kueue's own back
        cluster_connection.faults.kueue_configuration({})  # off again, as v0.17 is
        _pods_ready_on.clear()
    found = Cluster(cluster_connection)
    yield found
    for jobset in found.custom.list_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NS, JOBSET_PLURAL)["items"]:
        if jobset["metadata"]["name"].startswith("blocker-") and not jobset["metadata"].get("deletionTimestamp"):
            found.delete(jobset["metadata"]["name"])
    found.close()


# MaxText's wait for slices, here for its first attempt too: a loaded 2-core machine starts the workers in ~30 s.
ELASTIC_TIMEOUT_SECONDS = 60
# Short, so a queue wait outlasts it; over the wait for slices, as the lint requires. It need not cover the
# start-up after the admission (JAX's start, the compilation): that runs on the start-up clock (startup_timeout).
STALL_SECONDS = ELASTIC_TIMEOUT_SECONDS + 5


def queued_dag(dag_id: str, base: Path, **overrides: Any) -> Any:
    """A short elastic run in ``multislice-queue`` at a low priority, its stall clock short."""
    arguments: dict[str, Any] = {
        "queue_name": QUEUE,
        "priority_class": "low",
        "stall_timeout": f"timedelta(seconds={STALL_SECONDS})",
        "elastic_timeout_seconds": ELASTIC_TIMEOUT_SECONDS,
        "max_full_restarts": 1,
    }
    return elastic_dag(dag_id, base, **{**arguments, **overrides})


def _told(inbox: Path, event: str) -> bool:
    """Whether the run's notifier has been told ``event`` (a line being written is read at the next look)."""
    try:
        return any(r["alert"]["event"] == event for r in told(inbox))
    except ValueError:
        return False


def _admitted(admin: Cluster, name: str) -> bool:
    found = admin.jobset(name)
    return found is not None and is_true(admin.workload_of(found), "Admitted")


def test_a_run_queued_longer_than_its_stall_timeout_is_admitted_later_and_succeeds(
    airflow_db: None, cluster_connection: UpstreamCluster, admin: Cluster, tmp_path: Path
) -> None:
    run_name = "kueue-queued"
    holder = admin.create(blocker("blocker-queued", slices=4))  # all 64 chips of the queue
    wait_for("the blocker admitted", lambda: _admitted(admin, "blocker-queued"))
    waited: dict[str, float] = {}

    def release_after_a_long_wait(stop: threading.Event) -> None:
        [jobset] = wait_for("the run's JobSet", lambda: admin.jobsets_of_run(run_name), timeout=120)
        name = jobset["metadata"]["name"]
        created = parse_time(jobset["metadata"]["creationTimestamp"]) or time.time()
        # Queued past its stall timeout (STALL_SECONDS) by a margin, and Kueue saying why: only then is the quota freed.
        workload = wait_for(
            "Kueue's reason",
            lambda: (w := admin.workload_of(admin.jobset(name) or jobset)) and condition(w, "QuotaReserved") and w,
        )
        assert not is_true(workload, "QuotaReserved")
        while time.time() < created + STALL_SECONDS + 10 and not stop.is_set():
            assert (admin.jobset(name) or {}).get("spec", {}).get("suspend") is True, "admitted while the blocker held"
            time.sleep(0.5)
        waited["released_at"] = time.time()
        admin.delete(holder["metadata"]["name"])

    inbox = tmp_path / "inbox.jsonl"
    with Background(release_after_a_long_wait):
        dag_run = queued_dag(
            "kueue_queued", tmp_path, alerts=f"Alerts((FileNotifier(path={str(inbox)!r}),), queued_after=10)"
        ).test()
    assert states(dag_run) == {"pretrain": "success"}
    report = xcom(dag_run, "pretrain")
    assert report["final_step"] == 59
    assert report["full_restarts"] == 0 and report["escalations"] == [] and report["slice_restarts"] == 0
    assert report["preemptions"] == []
    [jobset] = jobsets_of(cluster_connection, run_name)  # one JobSet, never recreated
    # queued_seconds is the JobSet's own: from its creation to its resume (Kubernetes' whole seconds).
    created = parse_time(jobset["metadata"]["creationTimestamp"])
    resumed = parse_time(condition(jobset, "Suspended")["lastTransitionTime"])  # type: ignore[index]
    assert created is not None and resumed is not None
    assert report["queued_seconds"] == pytest.approx(resumed - created, abs=1.0)
    assert report["queued_seconds"] >= STALL_SECONDS + 5  # longer than the stall timeout, and not a stall
    assert report["admission_to_first_step_seconds"] is not None and report["admission_to_first_step_seconds"] >= 0
    assert report["queue_spans"][0][1] is not None and report["tail_seconds"] is not None
    # Its notifier was told once, while it waited (the trigger woke the operator for it), with Kueue's reason.
    [told_queued] = [r["alert"] for r in told(inbox)]
    assert told_queued["event"] == "queued_too_long" and told_queued["details"]["queued_after"] == 10
    assert 10 <= told_queued["details"]["queued_seconds"] < report["queued_seconds"]
    assert told_queued["details"]["reason"], told_queued


def _release_once_preempted(
    admin: Cluster, run_name: str, seen: dict[str, Any], inbox: Path, stop: threading.Event
) -> None:
    """Once the blocker is made: the run suspended and its Workload evicted (``seen``), the blocker admitted and
    running; then the blocker goes, freeing the quota."""
    wait_for("the blocker", lambda: "blocker" in seen or stop.is_set(), timeout=600)
    if stop.is_set():
        return
    [jobset] = admin.jobsets_of_run(run_name)
    name = jobset["metadata"]["name"]
    wait_for("the run suspended", lambda: (admin.jobset(name) or {}).get("spec", {}).get("suspend") is True)
    workload = wait_for(
        "its Workload evicted", lambda: (w := admin.workload_of(jobset)) and is_true(w, "Evicted") and w
    )
    seen["evicted"] = condition(workload, "Evicted")
    seen["preempted"] = condition(workload, "Preempted")
    wait_for("the blocker admitted", lambda: _admitted(admin, "blocker-preempt"))
    # It runs (its pods on the nodes the run's pods left) until the operator has told of the preemption, then
    # finishes and frees the quota.
    wait_for("the blocker running", lambda: admin.running_pods("blocker-preempt") == 1 + 3 * 4)
    wait_for("the preemption told", lambda: _told(inbox, "preempted") or stop.is_set())
    admin.delete("blocker-preempt")


def test_a_run_preempted_mid_training_resumes_from_its_checkpoint_in_the_same_jobset(
    airflow_db: None, cluster_connection: UpstreamCluster, admin: Cluster, tmp_path: Path
) -> None:
    run_name = "kueue-preempted"
    seen: dict[str, Any] = {}
    inbox = tmp_path / "inbox.jsonl"

    def preempt(faults: StepFaults) -> None:
        # 3 slices (48 chips) more than the 32 free: Kueue preempts the lower-priority run to admit it.
        seen["blocker"] = admin.create(blocker("blocker-preempt", slices=3))

    with (
        Background(lambda stop: _release_once_preempted(admin, run_name, seen, inbox, stop)),
        StepFaults(cluster_connection, run_name).at(15, preempt) as faults,
    ):
        dag_run = queued_dag(
            "kueue_preempted",
            tmp_path,
            # 0.3 s a step: the 34 steps after the blocker's creation (at step 15, past the checkpoint of step 10)
            # outlast Kueue's preemption (blocker queued, run evicted, JobSet suspended, pods deleted). Stepping in
            # milliseconds, the old trainer could finish all its steps first under load (CI, stop 49), and the new
            # one had nothing to restore.
            steps=50,
            local_env={"LOCAL_STEP_SECONDS": "0.3"},
            stall_timeout="timedelta(minutes=6)",
            elastic_timeout_seconds=300,
            alerts=f"Alerts((FileNotifier(path={str(inbox)!r}),), queued_after=None)",
        ).test()
    assert faults.fired == [15]
    assert states(dag_run) == {"pretrain": "success"}
    assert (seen["evicted"]["reason"], seen["preempted"]["reason"]) == ("Preempted", "InClusterQueue")
    report = xcom(dag_run, "pretrain")
    assert report["final_step"] == 49
    assert not report.get("already_at_target"), "the trainer finished its 50 steps before the preemption took it"
    assert report["full_restarts"] == 0 and report["escalations"] == []
    assert report["slice_restarts"] == 0 and report["in_process_recoveries"] == 0
    [preemption] = report["preemptions"]
    assert preemption["step"] >= 15 and preemption["restored_step"] % 10 == 0
    assert 0 <= preemption["steps_lost"] <= 10  # at most one checkpoint period
    assert preemption["readmitted_at"] > preemption["at"]
    assert preemption["reason"].startswith("Preempted")
    assert report["queued_seconds"] > 0
    # The same JobSet resumes, whatever the trainer exited with on the preemption's SIGTERM (MaxText exits 0): the Job
    # controller counts none of the pods it deletes for a suspension (kubernetes/kubernetes job_controller.go
    # deleteJobPods takes their tracking finalizer off first), so the suspended head Job never completes by it.
    assert report["preemption_recreations"] == 0 and preemption["recreated"] is False
    assert len(jobsets_of(cluster_connection, run_name)) == 1
    [told_preempted] = [r["alert"] for r in told(inbox)]  # told once, no full restart or budget to tell
    assert told_preempted["event"] == "preempted" and told_preempted["details"]["preemptions"] == 1
    assert "no budget spent" in told_preempted["message"]


def test_a_stage_goes_through_the_same_queue_and_its_queue_timeout(
    airflow_db: None, cluster_connection: UpstreamCluster, admin: Cluster, tmp_path: Path
) -> None:
    """An evaluation stage (JobSetOperator) asking for 8 chips joins the queue (more than the 4 of the single-host
    flavor, and the v5e-16 flavor's 64 are held): it waits, never fails for it, and its queue_timeout deletes its
    JobSet and fails it. Its notifier is told the long wait (woken by the trigger's notice, the stage waits on)
    and then the budget spent."""
    from tests.support.jobset_dags import one_job_dag

    inbox = tmp_path / "inbox.jsonl"

    admin.create(blocker("blocker-stage", slices=4))
    wait_for("the blocker admitted", lambda: _admitted(admin, "blocker-stage"))
    dag = one_job_dag(
        "kueue_stage",
        ["python", "-c", "print('evaluated')"],
        container_resources={TPU_RESOURCE: "8"},
        queue_name=QUEUE,
        queue_timeout=15.0,
        alerts=f"Alerts((FileNotifier(path={str(inbox)!r}),), queued_after=5)",
    )
    seen: dict[str, Any] = {}

    def watch(stop: threading.Event) -> None:
        def found() -> Obj | None:
            items = admin.custom.list_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NS, JOBSET_PLURAL)["items"]
            mine = [j for j in items if j["metadata"]["name"].startswith("kueue-stage-")]
            return mine[0] if mine else None

        jobset = wait_for("the stage's JobSet", found, timeout=120)
        seen["labels"] = jobset["metadata"].get("labels") or {}
        seen["suspended"] = jobset["spec"].get("suspend")
        workload = wait_for("its Workload", lambda: admin.workload_of(jobset), timeout=60)
        seen["quota"] = wait_for(
            "Kueue's answer", lambda: condition(admin.workload_of(jobset) or workload, "QuotaReserved")
        )

    with Background(watch):
        dag_run = dag.test()
    assert states(dag_run) == {"job": "failed"}
    assert seen["labels"][LABEL_KUEUE_QUEUE_NAME] == QUEUE and seen["suspended"] is True
    assert (seen["quota"]["status"], seen["quota"]["reason"]) == ("False", "Pending")
    queued, spent = [r["alert"] for r in told(inbox)]
    assert (queued["event"], queued["task_id"], queued["details"]["queued_after"]) == ("queued_too_long", "job", 5)
    assert queued["details"]["queued_seconds"] >= 5 and queued["details"]["reason"], queued
    assert (spent["event"], spent["details"]["budget"]) == ("budget_spent", "queue_timeout")
    assert "not admitted after waiting" in spent["message"], spent
    wait_for(
        "the stage's JobSet deleted",
        lambda: (
            not [
                j
                for j in admin.custom.list_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NS, JOBSET_PLURAL)[
                    "items"
                ]
                if j["metadata"]["name"].startswith("kueue-stage-")
            ]
        ),
        timeout=120,
    )


def test_a_run_asking_more_than_its_queue_can_ever_hold_fails_at_once_and_leaves_nothing(
    airflow_db: None,
    cluster_connection: UpstreamCluster,
    admin: Cluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Five v5e-16 slices (80 chips) against a ClusterQueue of 64, then an evaluation stage asking one host for 80:
    Kueue says "> maximum capacity" for each flavor, so no wait can admit either. Each fails once the grace has
    passed (shortened here), naming Kueue's clause and what to change, not at its hour-long queue_timeout; its JobSet
    is deleted, nothing was spent."""
    from tests.support.jobset_dags import one_job_dag

    monkeypatch.setattr("elastic_training.operators.observations.NEVER_FITS_GRACE_SECONDS", 3.0)
    run_name = "kueue-never-fits"
    dag_run = queued_dag("kueue_never_fits", tmp_path, num_slices=5, queue_timeout=3600.0).test()
    assert states(dag_run) == {"pretrain": "failed"}
    report = xcom(dag_run, "pretrain", "report")
    assert report["failure"].startswith("Kueue can never admit the JobSet as its ClusterQueue stands (pod set ")
    assert "current podset request (80) > maximum capacity (64)" in report["failure"]
    assert report["full_restarts"] == 0 and report["slice_restarts"] == 0 and len(report["jobsets"]) == 1
    wait_for("the run's JobSet deleted", lambda: not admin.jobsets_of_run(run_name), timeout=120)

    stage = one_job_dag(
        "kueue_stage_never_fits",
        ["python", "-c", "print('evaluated')"],
        container_resources={TPU_RESOURCE: "80"},
        queue_name=QUEUE,
        queue_timeout=3600.0,
    )
    capfd.readouterr()
    assert states(stage.test()) == {"job": "failed"}
    logged = "".join(capfd.readouterr())  # the task's log: the Task SDK writes it to the process's output
    assert (
        "AirflowFailException: JobSet kueue-stage-" in logged and " deleted: Kueue can never admit the JobSet" in logged
    )
    assert "current podset request (80) > maximum capacity (64)" in logged
    [stage_jobset] = set(re.findall(r"AirflowFailException: JobSet (kueue-stage-\w+) deleted", logged))
    wait_for("the stage's JobSet deleted", lambda: admin.jobset(stage_jobset) is None, timeout=120)


# -- flex-start (xpk --flex: the dws-prov admission check and its ProvisioningRequest) -----------------------------
# After the tests on v5e-16 slices outside the flex queue: they make two of its cluster's v5e-16 pools
# queued-provisioning ones for good (only a ProvisioningRequest brings their nodes back), which a later run outside
# the flex queue could not schedule on (the pods-ready test after them takes the single-host pool).

FLEX_QUEUE = "flex-queue"
FLEX_POOLS = ("tpu-v5e-16-2", "tpu-v5e-16-3")  # made queued-provisioning pools: no nodes until a request takes them


def _flex(admin: Cluster, cluster: UpstreamCluster) -> None:
    """A second ClusterQueue with xpk's dws-prov check (2 slices of quota) over two queued-provisioning pools."""
    if admin.custom.list_cluster_custom_object(
        KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", field_selector=f"metadata.name={FLEX_QUEUE}"
    )["items"]:
        return

    def idle(pool: str) -> bool:
        nodes = {n.metadata.name for n in admin.core.list_node(label_selector=f"{LABEL_GKE_NODEPOOL}={pool}").items}
        return not any(p.spec.node_name in nodes for p in admin.core.list_pod_for_all_namespaces().items)

    # An earlier test's blocker may still be going (its foreground delete): only an idle pool can be taken away.
    wait_for("the flex pools idle", lambda: all(idle(pool) for pool in FLEX_POOLS), timeout=180)
    spoil(cluster)  # the pools stay queued-provisioning: the next module gets a new cluster
    for pool in FLEX_POOLS:
        cluster.faults.provision_on_demand(pool, 5.0, queued=True)
    create_flex_check(admin.custom, managed_resource=TPU_RESOURCE)
    quotas: list[tuple[list[str], str, dict[str, Any]]] = [
        ([TPU_RESOURCE], "4xv5litepod-16", {TPU_RESOURCE: 32}),
        (["cpu", "memory"], "cpu-user", {"cpu": 480, "memory": "2000G"}),
    ]
    admin.custom.create_cluster_custom_object(
        KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", typed("ClusterQueue", cluster_queue(FLEX_QUEUE, quotas))
    )
    admin.custom.create_namespaced_custom_object(
        KUEUE_GROUP,
        KUEUE_VERSION,
        NS,
        "localqueues",
        typed("LocalQueue", {"metadata": {"name": "flex"}, "spec": {"clusterQueue": FLEX_QUEUE}}),
    )


def test_a_flex_run_waits_for_provisioning_apart_from_quota_and_trains_on_the_new_slices(
    airflow_db: None, cluster_connection: UpstreamCluster, admin: Cluster, tmp_path: Path
) -> None:
    _flex(admin, cluster_connection)
    run_name = "kueue-flex"
    dag_run = queued_dag("kueue_flex", tmp_path, queue_name="flex").test()
    assert states(dag_run) == {"pretrain": "success"}
    report = xcom(dag_run, "pretrain")
    assert report["final_step"] == 59 and report["full_restarts"] == 0 and report["slice_restarts"] == 0
    assert report["provisioning_seconds"] > 0 and report["provisioning_spans"][0][1] is not None
    assert [said for _, said in report["provisioning_notes"]] == [
        f"admission check {CHECK} Ready: Capacity is found in the cluster"
    ]
    [jobset] = jobsets_of(cluster_connection, run_name)
    workers = [r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "worker"]
    selector = workers[0]["template"]["spec"]["template"]["spec"]["nodeSelector"]
    assert selector[LABEL_PROVISIONING_REQUEST].startswith("resize-")  # Kueue's podSetUpdates, from the request
    admin.delete(jobset["metadata"]["name"])  # its ProvisioningRequest goes with its Workload: the pools are free again
    wait_for(
        "the flex pools given back",
        lambda: (
            not [n for n in admin.core.list_node().items if n.metadata.labels.get(LABEL_GKE_NODEPOOL) in FLEX_POOLS]
        ),
        timeout=120,
    )


def test_a_flex_run_whose_capacity_is_revoked_mid_run_is_not_waited_on_forever(
    airflow_db: None, cluster_connection: UpstreamCluster, admin: Cluster, tmp_path: Path
) -> None:
    _flex(admin, cluster_connection)
    run_name = "kueue-flex-revoked"
    revoked: dict[str, Any] = {}

    def revoke(faults: StepFaults) -> None:
        [request] = provisioning_requests(admin.custom, NS)
        revoked.update(
            cluster_connection.faults.provisioning(
                "revoke", namespace=NS, name=request["metadata"]["name"], message="the flex-start VMs were reclaimed"
            )
        )
        [jobset] = admin.jobsets_of_run(run_name)
        revoked["workload"] = wait_for(
            "its Workload deactivated", lambda: (w := admin.workload_of(jobset)) and is_true(w, "Evicted") and w
        )

    with StepFaults(cluster_connection, run_name).at(6, revoke) as faults:
        # 0.3 s a step: the 34 steps after step 6 outlast the revocation (a ProvisioningRequest listed, its nodes
        # removed) by 10 s on a loaded machine, as the preemption test's must outlast Kueue's preemption.
        dag_run = queued_dag(
            "kueue_flex_revoked",
            tmp_path,
            steps=40,
            queue_name="flex",
            queue_timeout=15.0,
            local_env={"LOCAL_STEP_SECONDS": "0.3"},
        ).test()
    assert faults.fired == [6]
    assert len(revoked["nodes"]) == 8  # both slices' hosts
    assert states(dag_run) == {"pretrain": "failed"}
    workload = revoked["workload"]
    assert workload["spec"]["active"] is False
    evicted = condition(workload, "Evicted")
    assert evicted is not None and evicted["reason"] == "DeactivatedDueToAdmissionCheck"
    report = xcom(dag_run, "pretrain", "report")
    assert report["full_restarts"] == 0 and len(report["jobsets"]) == 1  # never recreated
    said = [note for _, note in report["provisioning_notes"]]
    assert said[-1] == f"admission check {CHECK} Rejected: the flex-start VMs were reclaimed"
    # Ended by the Deactivated rule at once (nothing admits it again), not by queue_timeout, naming the revocation.
    assert report["failure"].startswith("Kueue will not admit the JobSet again: it was deactivated")
    assert "queue_timeout" not in report["failure"]
    assert "Rejected: the flex-start VMs were reclaimed" in report["failure"]


# -- Kueue's waitForPodsReady (last in the module: Kueue restarted with a configuration of the test's own) ----------
# A slice not back within RECOVERY_TIMEOUT seconds gets the whole JobSet evicted (PodsReadyTimeout), requeued after a
# 5 s backoff. Kueue's own configuration is not put back after it: the cluster is marked reconfigured
# (UpstreamCluster.kueue_reconfigured), and a later module's reset restarts Kueue with its own (the flex tests have
# spoiled this cluster for the next module anyway); a test of this module run after it gets Kueue's own back first
# (the ``admin`` fixture).
RECOVERY_TIMEOUT = 10
REPAIR_SECONDS = 30.0  # GKE's auto-repair of the slice's node pool: longer than Kueue's recoveryTimeout
# The run's one slice is the cluster's single-host v5e pool (2x2: one host of 4 chips; the only pool of its shape, so
# the slice can come back only where it was). A drained 4-host v5e-16 slice would leave its worker Job 4 failed pods,
# and the Job controller's back-off (10 s, doubled for each) would hold its pods 80 s past the repair's start.
TPU_TYPE, TPU_TOPOLOGY, SINGLE_HOST_POOL = "v5e", "2x2", "tpu-v5e-4"


@pytest.fixture
def pods_ready(cluster_connection: UpstreamCluster) -> None:
    cluster_connection.faults.kueue_configuration(
        {
            "waitForPodsReady": {
                "timeout": "10m",
                "recoveryTimeout": f"{RECOVERY_TIMEOUT}s",
                "requeuingStrategy": {"backoffBaseSeconds": 5, "backoffMaxSeconds": 10},
            }
        }
    )
    _pods_ready_on[:] = [cluster_connection]


def _watch_the_pods_ready_eviction(admin: Cluster, run_name: str, seen: dict[str, Any], stop: threading.Event) -> None:
    """Kueue's PodsReady eviction of the run's Workload, as it was then (``seen``)."""
    found = wait_for("the run's JobSet", lambda: admin.jobsets_of_run(run_name) or stop.is_set(), timeout=300)
    if found is True:
        return
    [jobset] = found
    workload = wait_for(
        "Kueue's PodsReady timeout",
        lambda: (
            (
                (w := admin.workload_of(jobset))
                and (c := condition(w, "Evicted"))
                and c["status"] == "True"
                and c["reason"] == "PodsReadyTimeout"
                and w
            )
            or stop.is_set()
        ),
        timeout=600,
    )
    if workload is True:
        return
    seen["evicted"] = condition(workload, "Evicted")
    seen["evictions"] = ((workload.get("status") or {}).get("schedulingStats") or {}).get("evictions")
    seen["requeue_state"] = (workload.get("status") or {}).get("requeueState")


def test_a_slice_repair_outlasting_recovery_timeout_is_evicted_by_kueue_and_resumed_from_its_checkpoint(
    airflow_db: None, cluster_connection: UpstreamCluster, admin: Cluster, pods_ready: None, tmp_path: Path
) -> None:
    """GKE repairs the node pool of the run's slice for longer than Kueue's ``recoveryTimeout``, with no other pool
    for the slice to go to: Kueue evicts the whole JobSet (the Pathways head too) for a PodsReady timeout while
    Pathways waits for the slice in process. The run waits it out as a recovery of its own kind: the same JobSet,
    admitted again after Kueue's backoff, resumes from its last committed checkpoint; no full restart, no slice
    restart (a repair's drain is an eviction), the eviction named in the report and counted against
    max_pods_ready_evictions."""
    run_name = "kueue-pods-ready"
    seen: dict[str, Any] = {}

    def repair_the_slice(faults: StepFaults) -> None:
        selector = (
            f"elastic-training.airflow.apache.org/run-name={run_name},jobset.sigs.k8s.io/replicatedjob-name=worker"
        )
        pods = faults.core.list_namespaced_pod(NS, label_selector=selector).items
        node = next(p.spec.node_name for p in pods if p.status.phase == "Running" and p.spec.node_name)
        pool = (faults.core.read_node(node).metadata.labels or {})[LABEL_GKE_NODEPOOL]
        seen["repair"] = faults.cluster.faults.repair_node_pool(pool, REPAIR_SECONDS)

    with (
        Background(lambda stop: _watch_the_pods_ready_eviction(admin, run_name, seen, stop)),
        StepFaults(cluster_connection, run_name).at(15, repair_the_slice) as faults,
    ):
        dag_run = queued_dag(
            "kueue_pods_ready",
            tmp_path,
            steps=40,
            num_slices=1,
            tpu_type=TPU_TYPE,
            tpu_topology=TPU_TOPOLOGY,
            # 0.3 s a step: still training when the repair starts (its 25 steps after step 15 outlast the drain).
            local_env={"LOCAL_STEP_SECONDS": "0.3"},
            kueue_recovery_timeout=float(RECOVERY_TIMEOUT),  # the operator cannot read the ConfigMap here
            stall_timeout="timedelta(minutes=6)",
        ).test()
    assert faults.fired == [15], faults.errors
    assert seen["repair"]["nodePool"] == SINGLE_HOST_POOL and len(seen["repair"]["evictedPods"]) == 1
    assert states(dag_run) == {"pretrain": "success"}
    assert seen["evicted"]["message"].startswith("Exceeded the PodsReady timeout default/jobset-")
    # The slice failed after the pods were ready: Kueue's recoveryTimeout evicted it, not the start's timeout.
    assert seen["evictions"] == [{"reason": "PodsReadyTimeout", "underlyingCause": "WaitForRecovery", "count": 1}]
    assert seen["requeue_state"]["count"] == 1
    report = xcom(dag_run, "pretrain")
    assert report["final_step"] == 39
    # Nothing spent: no full restart, no slice restart (the repair's drain is an eviction), no preemption counted.
    assert report["full_restarts"] == 0 and report["escalations"] == [] and report["slice_restarts"] == 0
    assert (report["pods_ready_evictions"], report["evictions"], report["preemption_count"]) == (1, 1, 0)
    [eviction] = report["preemptions"]
    assert eviction["eviction"] == "pods_ready_timeout" and eviction["reason"].startswith("PodsReadyTimeout")
    assert eviction["step"] >= 15 and eviction["restored_step"] % 10 == 0
    assert 0 <= eviction["steps_lost"] <= 10  # resumed from its last committed checkpoint
    assert eviction["readmitted_at"] > eviction["at"] and eviction["recreated"] is False
    assert report["budgets"]["max_pods_ready_evictions"] == 3
    assert report["budgets"]["pods_ready_recovery_timeout_seconds"] == RECOVERY_TIMEOUT
    assert len(jobsets_of(cluster_connection, run_name)) == 1  # the same JobSet, resumed
