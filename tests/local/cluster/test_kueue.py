"""The local Kueue through the official client, against upstream's words (kubernetes-sigs/kueue v0.17.1).

Each test makes its own ResourceFlavor, ClusterQueue and LocalQueue (quota in ``cpu``, which the single
local node has plenty of), so the tests share the cluster but no quota.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from elastic_training.operators.constants import (
    LABEL_HOSTNAME,
    LABEL_JOBSET_NAME,
    LABEL_KUEUE_JOB_UID,
    LABEL_KUEUE_PRIORITY_CLASS,
    LABEL_KUEUE_QUEUE_NAME,
)
from tests.support.control_plane import NS, JobSets, condition, job_template, jobset_manifest, pods_of, unique
from tests.support.kueue_objects import KUEUE, V, cond, running_pods, workload_of, workload_when, workloads
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

Obj = dict[str, Any]
HOLD = "sleep 300"  # holds its quota for as long as any test needs


@pytest.fixture(autouse=True)
def _no_jobset_left_running(k8s: K8s) -> Iterator[None]:
    yield
    JobSets(k8s.custom).delete_all()


# -- helpers ------------------------------------------------------------------------------------


def create_cluster_scoped(k8s: K8s, plural: str, body: Obj, group: str = KUEUE, version: str = V) -> Obj:
    created: Obj = k8s.custom.create_cluster_custom_object(group, version, plural, body)
    return created


def queues(
    k8s: K8s,
    cpu: str,
    *,
    strategy: str = "BestEffortFIFO",
    preemption: str = "Never",
    node_labels: dict[str, str] | None = None,
    tolerations: list[Obj] | None = None,
    all_namespaces: bool = True,
) -> tuple[str, str, str]:
    """A flavor, a ClusterQueue with ``cpu`` of it (every namespace), and a LocalQueue in ``default``."""
    flavor, cq, lq = unique("flavor"), unique("cq"), unique("lq")
    flavor_spec: Obj = {}
    if node_labels:
        flavor_spec["nodeLabels"] = node_labels
    if tolerations:
        flavor_spec["tolerations"] = tolerations
    create_cluster_scoped(k8s, "resourceflavors", {"metadata": {"name": flavor}, "spec": flavor_spec})
    create_cluster_scoped(
        k8s,
        "clusterqueues",
        {
            "metadata": {"name": cq},
            "spec": {
                **({"namespaceSelector": {}} if all_namespaces else {}),
                "queueingStrategy": strategy,
                "preemption": {"withinClusterQueue": preemption},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": flavor, "resources": [{"name": "cpu", "nominalQuota": cpu}]}],
                    }
                ],
            },
        },
    )
    k8s.custom.create_namespaced_custom_object(
        KUEUE, V, NS, "localqueues", {"metadata": {"name": lq}, "spec": {"clusterQueue": cq}}
    )
    return flavor, cq, lq


def priority_class(k8s: K8s, value: int) -> str:
    name = unique("wpc")
    create_cluster_scoped(k8s, "workloadpriorityclasses", {"metadata": {"name": name}, "value": value})
    return name


def queued_jobset(
    name: str,
    queue: str,
    script: str,
    *,
    cpu: str = "1",
    replicas: int = 1,
    pods: int = 1,
    labels: dict[str, str] | None = None,
) -> Obj:
    rjob = job_template(script, replicas=replicas, completions=pods, grace=5)
    rjob["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
    manifest = jobset_manifest(name, {"workers": rjob})
    manifest["metadata"]["labels"] = {LABEL_KUEUE_QUEUE_NAME: queue, **(labels or {})}
    return manifest


def reserved(k8s: K8s, jobset: str) -> bool:
    found = cond(workload_of(k8s, jobset), "QuotaReserved")
    return found is not None and found["status"] == "True"


def _message(err: client.ApiException) -> str:
    return str(json.loads(err.body)["message"])


def events_of(k8s: K8s, name: str) -> list[client.CoreV1Event]:
    items: list[client.CoreV1Event] = k8s.core.list_namespaced_event(
        NS, field_selector=f"involvedObject.name={name}"
    ).items
    return items


# -- tests --------------------------------------------------------------------------------------


def test_queued_jobset_is_suspended_at_create_and_gets_one_workload(k8s: K8s) -> None:
    jobsets = JobSets(k8s.custom)
    name = unique("queued")
    missing = unique("no-such-queue")
    created = jobsets.create(queued_jobset(name, missing, HOLD, cpu="500m", replicas=2, pods=3))
    assert created["spec"]["suspend"] is True  # the webhook's default, seen in the create response
    wl = workload_when(k8s, name, "QuotaReserved", "False")
    uid = created["metadata"]["uid"]
    digest = hashlib.sha1(f"JobSet\njobset.x-k8s.io\n{name}\n{uid}".encode()).hexdigest()[:5]
    assert wl["metadata"]["name"] == f"jobset-{name}-{digest}"
    owner = wl["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("JobSet", name, uid, True)
    assert wl["metadata"]["labels"][LABEL_KUEUE_JOB_UID] == uid
    assert wl["spec"]["queueName"] == missing
    assert wl["spec"]["priority"] == 0 and "priorityClassRef" not in wl["spec"]
    [pod_set] = wl["spec"]["podSets"]
    assert (pod_set["name"], pod_set["count"]) == ("workers", 6)  # replicas x parallelism
    assert pod_set["template"]["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "500m"}
    pending = cond(wl, "QuotaReserved")
    assert pending is not None
    assert (pending["reason"], pending["message"]) == ("Inadmissible", f"LocalQueue {missing} doesn't exist")
    assert jobsets.get(name)["spec"]["suspend"] is True
    assert not pods_of(k8s.core, f"{LABEL_JOBSET_NAME}={name}")
    assert any(e.reason == "CreatedWorkload" for e in events_of(k8s, name))


def test_unlabelled_jobset_is_untouched(k8s: K8s) -> None:
    jobsets = JobSets(k8s.custom)
    name = unique("plain")
    manifest = jobset_manifest(name, {"workers": job_template("true")})
    assert jobsets.create(manifest)["spec"].get("suspend") in (None, False)
    wait_for(lambda: jobsets.status(name).get("terminalState") == "Completed", 60)
    assert not any(r.get("name") == name for wl in workloads(k8s) for r in wl["metadata"].get("ownerReferences") or [])


def test_admission_reserves_quota_injects_the_flavor_and_unsuspends(k8s: K8s) -> None:
    toleration = {"key": "example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}
    flavor, cq, lq = queues(k8s, "2", node_labels={LABEL_HOSTNAME: "local-node"}, tolerations=[toleration])
    jobsets = JobSets(k8s.custom)
    name = unique("admit")
    jobsets.create(queued_jobset(name, lq, HOLD, cpu="1", pods=2))
    wl = workload_when(k8s, name, "Admitted")
    reserved_condition, admitted = cond(wl, "QuotaReserved"), cond(wl, "Admitted")
    assert reserved_condition is not None and admitted is not None
    assert (reserved_condition["reason"], reserved_condition["message"]) == (
        "QuotaReserved",
        f"Quota reserved in ClusterQueue {cq}",
    )
    assert (admitted["reason"], admitted["message"]) == ("Admitted", "The workload is admitted")
    assert wl["status"]["admission"] == {
        "clusterQueue": cq,
        "podSetAssignments": [
            {"name": "workers", "flavors": {"cpu": flavor}, "resourceUsage": {"cpu": "2"}, "count": 2}
        ],
    }
    wait_for(lambda: not jobsets.get(name)["spec"]["suspend"], 30)
    js = jobsets.get(name)
    pod_spec = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"] == {LABEL_HOSTNAME: "local-node"}
    assert toleration in pod_spec["tolerations"]
    for pod in running_pods(k8s, name, 2):
        assert pod.spec.node_selector == {LABEL_HOSTNAME: "local-node"}
    reasons = {e.reason for e in events_of(k8s, wl["metadata"]["name"])}
    assert {"QuotaReserved", "Admitted"} <= reasons
    assert "Started" in {e.reason for e in events_of(k8s, name)}

    def cq_status() -> Obj:
        status: Obj = k8s.custom.get_cluster_custom_object(KUEUE, V, "clusterqueues", cq).get("status") or {}
        return status

    status = wait_for(lambda: (s := cq_status()).get("admittedWorkloads") == 1 and s, 30)
    assert (status["pendingWorkloads"], status["reservingWorkloads"]) == (0, 1)
    assert status["flavorsReservation"] == [
        {"name": flavor, "resources": [{"name": "cpu", "total": "2", "borrowed": "0"}]}
    ]
    lq_status = k8s.custom.get_namespaced_custom_object(KUEUE, V, NS, "localqueues", lq)["status"]
    assert (lq_status["admittedWorkloads"], lq_status["pendingWorkloads"]) == (1, 0)
    assert lq_status["flavorsUsage"] == [{"name": flavor, "resources": [{"name": "cpu", "total": "2"}]}]


def test_a_workload_that_does_not_fit_is_pending_with_upstreams_message(k8s: K8s) -> None:
    flavor, _, lq = queues(k8s, "2")
    name = unique("toobig")
    JobSets(k8s.custom).create(queued_jobset(name, lq, HOLD, cpu="3"))
    wl = workload_when(k8s, name, "QuotaReserved", "False")
    pending = cond(wl, "QuotaReserved")
    assert pending is not None
    assert pending["reason"] == "Pending"
    assert pending["message"] == (
        f"couldn't assign flavors to pod set workers: insufficient quota for cpu in flavor {flavor}, "
        "previously considered podsets requests (0) + current podset request (3) > maximum capacity (2)"
    )
    assert cond(wl, "Admitted") is None  # never admitted: SyncAdmittedCondition has nothing to flip
    warning = wait_for(lambda: [e for e in events_of(k8s, wl["metadata"]["name"]) if e.reason == "Pending"], 30)
    assert warning[0].type == "Warning" and warning[0].message == pending["message"]


def test_finished_jobset_finishes_its_workload_and_releases_quota(k8s: K8s) -> None:
    _, cq, lq = queues(k8s, "1")
    first, second = unique("first"), unique("second")
    jobsets = JobSets(k8s.custom)
    jobsets.create(queued_jobset(first, lq, "sleep 1"))
    workload_when(k8s, first, "Admitted")
    jobsets.create(queued_jobset(second, lq, "true"))
    wl = workload_when(k8s, second, "QuotaReserved", "False")
    pending = cond(wl, "QuotaReserved")
    assert pending is not None and "insufficient unused quota for cpu in flavor" in pending["message"]
    assert pending["message"].endswith("1 more needed")
    done = workload_when(k8s, first, "Finished")
    finished = cond(done, "Finished")
    assert finished is not None
    assert (finished["reason"], finished["message"]) == ("Succeeded", "jobset completed successfully")
    workload_when(k8s, second, "Admitted")
    workload_when(k8s, second, "Finished")
    status = k8s.custom.get_cluster_custom_object(KUEUE, V, "clusterqueues", cq)["status"]
    wait_for(
        lambda: (
            (s := k8s.custom.get_cluster_custom_object(KUEUE, V, "clusterqueues", cq)["status"])
            and s["reservingWorkloads"] == 0
        ),
        30,
    )
    assert status["pendingWorkloads"] == 0


@pytest.mark.parametrize("strategy", ["BestEffortFIFO", "StrictFIFO"])
def test_queue_order_priority_first_and_fifo_strategy(k8s: K8s, strategy: str) -> None:
    _, cq, lq = queues(k8s, "3", strategy=strategy)
    high = priority_class(k8s, 1000)
    jobsets = JobSets(k8s.custom)
    holder, low, urgent, small = (unique(p) for p in ("holder", "low", "urgent", "small"))
    jobsets.create(queued_jobset(holder, lq, HOLD, cpu="2"))
    workload_when(k8s, holder, "Admitted")
    jobsets.create(queued_jobset(low, lq, HOLD, cpu="2"))
    workload_when(k8s, low, "QuotaReserved", "False")
    jobsets.create(queued_jobset(urgent, lq, HOLD, cpu="2", labels={LABEL_KUEUE_PRIORITY_CLASS: high}))
    urgent_wl = workload_when(k8s, urgent, "QuotaReserved", "False")
    assert urgent_wl["spec"]["priority"] == 1000
    assert urgent_wl["spec"]["priorityClassRef"] == {"group": KUEUE, "kind": "WorkloadPriorityClass", "name": high}
    jobsets.create(queued_jobset(small, lq, HOLD, cpu="1"))
    if strategy == "BestEffortFIFO":
        workload_when(k8s, small, "Admitted")  # the heads that do not fit do not block it
    else:
        workload_of(k8s, small)
    jobsets.delete(holder)
    workload_when(k8s, urgent, "Admitted")  # priority first: the later, higher-priority one
    # One scheduling pass admitted `urgent` and considered everything behind it: `low` (2 cpu) does not fit
    # the 1 cpu left; under StrictFIFO it blocks `small` (1 cpu), which would.
    assert not reserved(k8s, low)
    if strategy == "StrictFIFO":
        assert cond(workload_of(k8s, small), "QuotaReserved") is None  # never the head: never tried
    status = wait_for(
        lambda: (
            (s := k8s.custom.get_cluster_custom_object(KUEUE, V, "clusterqueues", cq)["status"])
            and s["reservingWorkloads"] == (2 if strategy == "BestEffortFIFO" else 1)
            and s
        ),
        30,
    )
    assert status["pendingWorkloads"] == (1 if strategy == "BestEffortFIFO" else 2)


def test_preemption_evicts_by_suspension_then_requeues_and_readmits(k8s: K8s, tmp_path: Path) -> None:
    _, cq, lq = queues(k8s, "2", preemption="LowerPriority")
    high = priority_class(k8s, 1000)
    jobsets = JobSets(k8s.custom)
    victim, preemptor = unique("victim"), unique("preemptor")
    flag = tmp_path / "sigterm"
    trap = f"trap 'echo term > {flag}; exit 0' TERM; while true; do sleep 0.05; done"
    jobsets.create(queued_jobset(victim, lq, trap, cpu="2"))
    workload_when(k8s, victim, "Admitted")
    wait_for(lambda: [p for p in pods_of(k8s.core, f"{LABEL_JOBSET_NAME}={victim}") if p.status.phase == "Running"], 60)
    release = tmp_path / "release"
    jobsets.create(
        queued_jobset(
            preemptor,
            lq,
            f"while [ ! -e {release} ]; do sleep 0.05; done",
            cpu="2",
            labels={LABEL_KUEUE_PRIORITY_CLASS: high},
        )
    )
    preemptor_wl = workload_of(k8s, preemptor)
    evicted_wl = workload_when(k8s, victim, "Evicted")
    evicted, preempted = cond(evicted_wl, "Evicted"), cond(evicted_wl, "Preempted")
    assert evicted is not None and preempted is not None
    expected = (
        f"Preempted to accommodate a workload (UID: {preemptor_wl['metadata']['uid']}, JobUID: "
        f"{preemptor_wl['metadata']['labels'][LABEL_KUEUE_JOB_UID]}) due to prioritization in the ClusterQueue; "
        f"preemptor path: /{cq}; preemptee path: /{cq}"
    )
    assert (evicted["reason"], evicted["message"]) == ("Preempted", expected)
    assert (preempted["reason"], preempted["message"]) == ("InClusterQueue", expected)
    # Eviction by suspension: the JobSet is suspended, its pods get SIGTERM and stop gracefully.
    suspended = wait_for(lambda: condition(jobsets.status(victim).get("conditions"), "Suspended"), 30)
    assert suspended["reason"] == "SuspendedJobs"
    assert jobsets.get(victim)["spec"]["suspend"] is True
    wait_for(flag.exists, 30)
    requeued_wl = workload_when(k8s, victim, "Requeued")
    requeued, quota = cond(requeued_wl, "Requeued"), cond(requeued_wl, "QuotaReserved")
    assert requeued is not None and quota is not None
    assert (requeued["reason"], requeued["message"]) == ("Preempted", expected)
    assert (quota["status"], quota["reason"]) == ("False", "Pending")
    workload_when(k8s, preemptor, "Admitted")
    assert "Stopped" in {e.reason for e in events_of(k8s, victim)}
    assert "Preempted" in {e.reason for e in events_of(k8s, evicted_wl["metadata"]["name"])}
    # The preemptor finishes; the victim is admitted again, the same JobSet resumed.
    release.touch()
    workload_when(k8s, preemptor, "Finished")
    readmitted = workload_when(k8s, victim, "Admitted")
    evicted_again = cond(readmitted, "Evicted")
    assert evicted_again is not None
    assert (evicted_again["status"], evicted_again["reason"]) == ("False", "QuotaReserved")
    assert evicted_again["message"] == f"Previously: {expected}"
    wait_for(lambda: not jobsets.get(victim)["spec"]["suspend"], 30)
    # Its pod exited 0 on SIGTERM, yet a pod terminated by a suspension is no completion: the Job runs again.
    running_pods(k8s, victim, 1)
    assert jobsets.status(victim).get("terminalState") is None


def test_kueue_objects_get_the_crds_defaults_and_bad_ones_are_refused(k8s: K8s) -> None:
    name = unique("cq")
    created = create_cluster_scoped(k8s, "clusterqueues", {"metadata": {"name": name}, "spec": {}})
    assert created["spec"]["queueingStrategy"] == "BestEffortFIFO"
    assert created["spec"]["preemption"] == {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never"}
    assert "namespaceSelector" not in created["spec"]  # null: selects no namespace
    with pytest.raises(client.ApiException) as caught:
        create_cluster_scoped(
            k8s, "clusterqueues", {"metadata": {"name": unique("cq")}, "spec": {"queueingStrategy": "Random"}}
        )
    assert caught.value.status == 422
    assert 'spec.queueingStrategy: Unsupported value: "Random"' in _message(caught.value)
    with pytest.raises(client.ApiException) as caught:
        k8s.custom.create_namespaced_custom_object(
            KUEUE, V, NS, "localqueues", {"metadata": {"name": "lq"}, "spec": {}}
        )
    assert caught.value.status == 422 and "spec.clusterQueue: Required value" in _message(caught.value)
    lq = unique("lq")
    k8s.custom.create_namespaced_custom_object(
        KUEUE, V, NS, "localqueues", {"metadata": {"name": lq}, "spec": {"clusterQueue": name}}
    )
    with pytest.raises(client.ApiException) as caught:
        k8s.custom.patch_namespaced_custom_object(KUEUE, V, NS, "localqueues", lq, {"spec": {"clusterQueue": "x"}})
    assert caught.value.status == 422 and "field is immutable" in _message(caught.value)
    with pytest.raises(client.ApiException) as caught:
        create_cluster_scoped(k8s, "workloadpriorityclasses", {"metadata": {"name": unique("wpc")}})
    assert caught.value.status == 422 and "value: Required value" in _message(caught.value)


def test_a_null_namespace_selector_admits_nothing(k8s: K8s) -> None:
    _, cq, lq = queues(k8s, "4", all_namespaces=False)
    name = unique("unselected")
    JobSets(k8s.custom).create(queued_jobset(name, lq, HOLD))
    pending = cond(workload_when(k8s, name, "QuotaReserved", "False"), "QuotaReserved")
    assert pending is not None
    assert (pending["reason"], pending["message"]) == (
        "Pending",
        "Workload namespace doesn't match ClusterQueue selector",
    )
    k8s.custom.patch_cluster_custom_object(KUEUE, V, "clusterqueues", cq, {"spec": {"namespaceSelector": {}}})
    workload_when(k8s, name, "Admitted")


def test_the_priority_admission_plugin_resolves_a_pods_class(k8s: K8s) -> None:
    with pytest.raises(client.ApiException) as caught:
        k8s.core.create_namespaced_pod(
            NS,
            {
                "metadata": {"name": "no-class"},
                "spec": {"priorityClassName": "nope", "containers": [{"name": "m", "image": "local"}]},
            },
        )
    assert caught.value.status == 403
    assert _message(caught.value) == 'pods "no-class" is forbidden: no PriorityClass with name nope was found'
    name = unique("pc")
    client.SchedulingV1Api(k8s.api_client).create_priority_class(
        client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=321, preemption_policy="Never")
    )
    pod = k8s.core.create_namespaced_pod(
        NS,
        {
            "metadata": {"name": unique("with-class")},
            "spec": {"priorityClassName": name, "containers": [{"name": "m", "image": "local"}]},
        },
    )
    assert (pod.spec.priority, pod.spec.preemption_policy) == (321, "Never")
    k8s.core.delete_namespaced_pod(pod.metadata.name, NS, grace_period_seconds=0)
