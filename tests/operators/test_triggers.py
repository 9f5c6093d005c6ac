"""`JobSetTrigger`: its serialized form, and a trigger torn down and rebuilt from it against the local cluster."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from typing import Any

import pytest
from kubernetes import client, config

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.constants import (
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    LABEL_JOB_INDEX,
    LABEL_JOBSET_NAME,
    LABEL_REPLICATED_JOB_NAME,
    WORKER_REPLICATED_JOB,
)
from elastic_training.operators.observations import MonitorState, jobset_phase
from elastic_training.operators.policy import JobSetPhase
from elastic_training.operators.shared_watches import WatchKind, shared_watches
from elastic_training.operators.triggers import JobSetTrigger
from tests.support.trigger_runs import BUDGETS, first_event, fresh_trigger, sleeping_jobset, wait_for


def test_serialize() -> None:
    trigger = JobSetTrigger(
        name="run-abc123", namespace="ml", uid="u-1", target_step=99, budgets=BUDGETS, state={"started_at": 5.0}
    )
    assert trigger.serialize() == (
        "elastic_training.operators.triggers.JobSetTrigger",
        {
            "name": "run-abc123",
            "namespace": "ml",
            "uid": "u-1",
            "target_step": 99,
            "budgets": BUDGETS,
            "full_restarts_used": 0,
            "state": {"started_at": 5.0},
            "kubernetes_conn_id": "kubernetes_default",
            "deadline": None,
            "poll_interval": 10.0,
            "delete_on_kill": True,
            "settle_seconds": 0.0,
            "relax_after_seconds": None,
            "relax_not_before": 0.0,
            "alerts": None,
            "replan": None,
        },
    )
    rebuilt = JobSetTrigger(**trigger.serialize()[1])
    assert rebuilt.serialize() == trigger.serialize()


CHILD_KINDS = (WatchKind.JOBSETS, WatchKind.JOBS, WatchKind.PODS)  # watched by a running JobSet's trigger


async def synced(*kinds: WatchKind) -> None:
    """Until the test's loop (the triggerer's) watches ``kinds`` with their lists done: every subscription, the
    trigger's, has been given what the cluster held (ahead of any later change), so no change from now on is
    missed; true too of a trigger that joined watches another one had opened (no new request reaches the API
    server, so its audit log cannot tell)."""

    def done() -> bool:
        watches = shared_watches()
        return set(kinds) <= {key.kind for key in watches.synced() if watches.subscribers().get(key)}

    await wait_for(f"the {', '.join(kinds)} watches synced", done)


async def test_rebuilt_trigger_neither_loses_nor_double_counts(cluster_connection: UpstreamCluster) -> None:
    api = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    core = client.CoreV1Api(api)
    created = client.CustomObjectsApi(api).create_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, sleeping_jobset("rebuild", 2)
    )
    name, uid = "rebuild", created["metadata"]["uid"]

    def running_worker(index: int, not_uid: str | None = None) -> Any:
        pods = core.list_namespaced_pod(
            "default", label_selector=f"{LABEL_JOBSET_NAME}={name},{LABEL_JOB_INDEX}={index}"
        ).items
        return next(
            (
                p
                for p in pods
                if "worker" in p.metadata.name
                and p.status.phase == "Running"
                and p.metadata.deletion_timestamp is None
                and p.metadata.uid != not_uid
            ),
            None,
        )

    try:
        first = [await wait_for(f"slice {i} running", lambda i=i: running_worker(i)) for i in (0, 1)]
        original = fresh_trigger(name, uid)
        watching = asyncio.create_task(first_event(original))
        await synced(*CHILD_KINDS)
        cluster_connection.faults.delete_pod("default", first[0].metadata.name)  # restart 1: within budget
        await wait_for("slice 0 replaced", lambda: running_worker(0, first[0].metadata.uid))
        await asyncio.sleep(2)  # a negative window: no decision on one restart; load only shortens it
        assert not watching.done(), "one restart is within the budget"
        watching.cancel()  # the triggerer dies, and its watches with it (the last subscriber closes each)
        with contextlib.suppress(asyncio.CancelledError):
            await watching
        assert shared_watches().subscribers() == {}

        rebuilt = JobSetTrigger(**original.serialize()[1])  # a new triggerer: the kwargs saved at defer time
        watching = asyncio.create_task(first_event(rebuilt))
        # Ready once it holds what the cluster holds (the restart seen before the failover among it): a double
        # count would decide on it, and shows in the final state below whenever it did.
        await synced(*CHILD_KINDS)
        assert not watching.done(), "the restart seen before the failover is not counted twice"
        cluster_connection.faults.delete_pod("default", first[1].metadata.name)  # restart 2: over budget
        event = (await asyncio.wait_for(watching, timeout=60)).payload
        assert event["status"] == "decision" and event["reason"] == "slice_restart_budget_spent"
        state = MonitorState.from_json(event["state"])
        assert state.slice_restarts == 2
        assert state.slice_restarts_by_slice == {"0": 1, "1": 1}
    finally:
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, name, propagation_policy="Foreground"
        )
        api.close()


# A multi-host slice's hosts (each a worker pod of its Job): two, not four. The Job controller's pod failure back-off
# doubles with each pod failed at once (10 s for the first): four deleted pods were 80 s of waiting for their
# replacements, two are 20 s; that a slice's failed hosts count once does not depend on how many there are.
HOSTS = 2


async def test_a_slice_whose_hosts_all_fail_is_one_slice_restart(cluster_connection: UpstreamCluster) -> None:
    """Two multi-host slices; all pods of slice 0 deleted (a lost host takes its slice), then all of slice 1
    killed in place: one slice restart each, so a budget of 1 is spent only by the second."""
    api = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    name = "hosts"
    created = custom.create_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, sleeping_jobset(name, 2, hosts=HOSTS)
    )
    uid = created["metadata"]["uid"]

    def workers(index: int, *, restarts: int = 0, not_uids: frozenset[str] = frozenset()) -> list[Any]:
        pods = core.list_namespaced_pod(
            "default", label_selector=f"{LABEL_JOBSET_NAME}={name},{LABEL_JOB_INDEX}={index}"
        ).items
        ready = [
            p
            for p in pods
            if "worker" in p.metadata.name
            and p.status.phase == "Running"
            and p.metadata.deletion_timestamp is None
            and p.metadata.uid not in not_uids
            and all(c.state.running and c.restart_count >= restarts for c in p.status.container_statuses or [])
        ]
        return ready if len(ready) == HOSTS else []

    try:
        first = [await wait_for(f"slice {i} running", lambda i=i: workers(i)) for i in (0, 1)]
        trigger = fresh_trigger(name, uid)
        watching = asyncio.create_task(first_event(trigger))
        await synced(*CHILD_KINDS)
        # All pods of slice 0 at once, as a host event takes its slice: one call, no grace period.
        core.delete_collection_namespaced_pod(
            "default",
            label_selector=f"{LABEL_JOBSET_NAME}={name},{LABEL_JOB_INDEX}=0,{LABEL_REPLICATED_JOB_NAME}={WORKER_REPLICATED_JOB}",
            grace_period_seconds=0,
        )
        gone = frozenset(p.metadata.uid for p in first[0])
        # The Job controller creates the replacements after its pod failure back-off, 10 s doubled per failure
        # since the Job's last success: 20 s for 2 failed pods at once (80 s for 4: measured 80-90).
        await wait_for("slice 0 replaced", lambda: workers(0, not_uids=gone), timeout=180)
        await asyncio.sleep(2)  # a negative window: no decision on one slice restart; load only shortens it
        assert not watching.done(), f"{HOSTS} pods of one slice are one slice restart, within the budget of 1"
        for pod in first[1]:  # all of slice 1 killed: restarted in place
            cluster_connection.faults.signal_pod("default", pod.metadata.name, signal.SIGKILL)
        event = (await asyncio.wait_for(watching, timeout=60)).payload
        assert event["status"] == "decision" and event["reason"] == "slice_restart_budget_spent"
        state = MonitorState.from_json(event["state"])
        assert state.slice_restarts == 2
        assert state.slice_restarts_by_slice == {"0": 1, "1": 1}
        assert state.slice_evictions == 0
    finally:
        custom.delete_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, name, propagation_policy="Foreground"
        )
        api.close()


async def test_a_triggerer_restart_after_old_restarts_does_not_escalate(cluster_connection: UpstreamCluster) -> None:
    """Issue 17 point 1, over HTTP: a slice restart older than the window, then a trigger rebuilt from the kwargs
    saved before it. The old code re-dated the restart to the rebuild and escalated; it is dated when it was."""
    api = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    name = "old-restarts"
    # One host a slice: its replacement comes after the Job's back-off for one failed pod (10 s; 20 s for two).
    created = custom.create_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, sleeping_jobset(name, 2)
    )
    uid = created["metadata"]["uid"]
    window = 6.0
    budgets = BUDGETS | {"max_slice_restarts": 0, "slice_restart_window_seconds": window}

    def workers(index: int) -> list[Any]:
        pods = core.list_namespaced_pod(
            "default", label_selector=f"{LABEL_JOBSET_NAME}={name},{LABEL_JOB_INDEX}={index}"
        ).items
        ready = [
            p
            for p in pods
            if "worker" in p.metadata.name
            and p.status.phase == "Running"
            and p.metadata.deletion_timestamp is None
            and all(c.state.running for c in p.status.container_statuses or [])
        ]
        return ready if len(ready) == 1 else []

    try:
        first = [await wait_for(f"slice {i} running", lambda i=i: workers(i)) for i in (0, 1)]
        # the kwargs saved when the task deferred, before any restart
        deferred = fresh_trigger(name, uid, budgets=budgets).serialize()[1]
        for pod in first[0]:  # slice 0 lost while the first trigger ran (it died with the triggerer)
            cluster_connection.faults.delete_pod("default", pod.metadata.name)
        await wait_for("slice 0 replaced", lambda: workers(0), timeout=120)  # after the Job's back-off (10 s)
        # Kubernetes dated the loss by now, however long a loaded cluster took to act on it: once this is more
        # than a window ago, the restart is out of the window.
        replaced_at = time.time()
        await asyncio.sleep(max(0.0, replaced_at + window + 2 - time.time()))  # time passing is the point

        watching = asyncio.create_task(first_event(JobSetTrigger(**deferred)))
        await synced(*CHILD_KINDS)
        await asyncio.sleep(3)  # a window for a wrong decision on the old restart; load only shortens it
        assert not watching.done(), "a restart older than the window does not spend the budget after a rebuild"
        cluster_connection.faults.delete_pod("default", first[1][0].metadata.name)  # a new restart does
        event = (await asyncio.wait_for(watching, timeout=60)).payload
        assert event["reason"] == "slice_restart_budget_spent"
        state = MonitorState.from_json(event["state"])
        assert state.slice_restarts_by_slice == {"0": 1, "1": 1}
        old, new = state.slice_restart_times
        # Dated when it happened (the old code dated it at the rebuild, after replaced_at); whole seconds.
        assert old <= replaced_at and new > old + window
    finally:
        custom.delete_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, name, propagation_policy="Foreground"
        )
        api.close()


async def test_an_evicted_slice_spends_no_budget(cluster_connection: UpstreamCluster) -> None:
    """Both pods of slice 0 evicted (the Eviction API's DisruptionTarget, then a graceful deletion): a slice
    eviction, not a restart, so a budget of 0 is spent only by slice 1's failure after it."""
    api = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    name = "evicted"
    created = custom.create_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, sleeping_jobset(name, 2, hosts=2)
    )
    uid = created["metadata"]["uid"]

    def workers(index: int, not_uids: frozenset[str] = frozenset()) -> list[Any]:
        pods = core.list_namespaced_pod(
            "default", label_selector=f"{LABEL_JOBSET_NAME}={name},{LABEL_JOB_INDEX}={index}"
        ).items
        ready = [
            p
            for p in pods
            if "worker" in p.metadata.name
            and p.status.phase == "Running"
            and p.metadata.deletion_timestamp is None
            and p.metadata.uid not in not_uids
        ]
        return ready if len(ready) == 2 else []

    try:
        first = [await wait_for(f"slice {i} running", lambda i=i: workers(i)) for i in (0, 1)]
        trigger = fresh_trigger(name, uid, budgets=BUDGETS | {"max_slice_restarts": 0})
        watching = asyncio.create_task(first_event(trigger))
        await synced(*CHILD_KINDS)
        for pod in first[0]:
            cluster_connection.faults.evict_pod("default", pod.metadata.name)
        gone = frozenset(p.metadata.uid for p in first[0])
        await wait_for("slice 0 replaced", lambda: workers(0, gone), timeout=120)  # after the Job's back-off
        await asyncio.sleep(2)  # a negative window: no decision on an eviction; load only shortens it
        assert not watching.done(), "an eviction spends no slice budget"
        cluster_connection.faults.delete_pod("default", first[1][0].metadata.name)
        event = (await asyncio.wait_for(watching, timeout=60)).payload
        assert event["reason"] == "slice_restart_budget_spent"
        state = MonitorState.from_json(event["state"])
        assert (state.slice_restarts_by_slice, state.slice_evictions_by_slice) == ({"1": 1}, {"0": 1})
    finally:
        custom.delete_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, name, propagation_policy="Foreground"
        )
        api.close()


@pytest.mark.parametrize("deleted", [True, False])
async def test_a_jobset_gone_or_replaced_is_missing(cluster_connection: UpstreamCluster, deleted: bool) -> None:
    api = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    custom = client.CustomObjectsApi(api)
    name = f"gone-{str(deleted).lower()}"
    custom.create_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, sleeping_jobset(name, 1)
    )
    uid = (
        "not-this-one"
        if not deleted
        else custom.get_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, name)[
            "metadata"
        ]["uid"]
    )
    trigger = JobSetTrigger(name=name, namespace="default", uid=uid, target_step=1, budgets=BUDGETS, poll_interval=0.5)
    try:
        watching = asyncio.create_task(first_event(trigger))
        if deleted:  # once it holds the JobSet, so that the deletion is a change it is told of, not a list
            await synced(WatchKind.JOBSETS)
            custom.delete_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, name)
        event = (await asyncio.wait_for(watching, timeout=60)).payload
        assert event["reason"] == "jobset_missing"
    finally:
        if not deleted:
            custom.delete_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, name)
        api.close()


async def test_a_jobset_that_ended_before_its_trigger_started_is_read_from_its_head_log(
    cluster_connection: UpstreamCluster,
) -> None:
    """Found by the chaos matrix on the real controllers: a task killed mid-run was run again after its JobSet had
    completed. The adopting trigger decided at once, before the pods' first list named the head pod, so it read no
    log, and the report said that no step had run and nothing had recovered."""
    api = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    custom = client.CustomObjectsApi(api)
    name = "ended-before"
    body = sleeping_jobset(name, 1)
    [head] = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    lines = ["completed step: 0, seconds: 0.5", "Elastic event detected", "completed step: 1, seconds: 0.1"]
    head["command"] = ["sh", "-c", "; ".join(f"echo '{line}'" for line in lines)]
    custom.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, body)
    try:
        uid = custom.get_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, name)[
            "metadata"
        ]["uid"]

        def completed() -> bool:
            jobset = custom.get_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, name)
            return jobset_phase(jobset)[0] is JobSetPhase.COMPLETED

        await wait_for("the JobSet completed", completed)
        event = (await asyncio.wait_for(first_event(fresh_trigger(name, uid)), timeout=60)).payload
        digest = MonitorState.from_json(event["state"]).digest
        assert digest.steps_executed == 2 and digest.latest_step == 1
    finally:
        custom.delete_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, name, propagation_policy="Foreground"
        )
        api.close()


async def test_a_final_decision_waits_out_the_settle_time(cluster_connection: UpstreamCluster) -> None:
    """A trigger that would fire at once (no such JobSet) decides again only once its settle time is over."""
    trigger = JobSetTrigger(
        name="never-created",
        namespace="default",
        uid="u-none",
        target_step=1,
        budgets=BUDGETS,
        poll_interval=0.5,
        settle_seconds=3.0,
    )
    started = time.monotonic()
    event = (await asyncio.wait_for(trigger.run().__anext__(), timeout=60)).payload
    assert event["reason"] == "jobset_missing"
    assert time.monotonic() - started >= 3.0


async def test_a_cluster_without_v1beta2_workloads_is_said_once_instead_of_a_reasonless_queued(
    cluster_connection: UpstreamCluster,
) -> None:
    """Kueue older than v0.15 serves no ``kueue.x-k8s.io/v1beta2`` (the Workload list answers 404): the trigger's
    Workload watch ends, and the wait, read from the JobSet's suspension alone, says why it has no Kueue reason."""
    from elastic_training.operators.constants import LABEL_KUEUE_QUEUE_NAME
    from elastic_training.operators.observations import KUEUE_UNSERVED

    api = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    custom = client.CustomObjectsApi(api)
    name = "old-kueue"
    manifest = sleeping_jobset(name, 1)
    manifest["metadata"]["labels"] = {LABEL_KUEUE_QUEUE_NAME: "no-such-queue"}  # Kueue holds it suspended
    cluster_connection.faults.fail_requests(404, path=r"/apis/kueue\.x-k8s\.io/v1beta2/.*workloads")
    created = custom.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, manifest)
    budgets = {**BUDGETS, "queue_timeout_seconds": 3.0}
    trigger = fresh_trigger(name, created["metadata"]["uid"], budgets)
    try:
        event = (await asyncio.wait_for(first_event(trigger), timeout=60)).payload
        assert event["reason"] == "queue_timeout"
        assert KUEUE_UNSERVED in event["message"]
    finally:
        cluster_connection.faults.clear_api_faults()
        custom.delete_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, name)
        api.close()


async def test_a_worker_left_unschedulable_wakes_the_operator_only_when_asked(
    cluster_connection: UpstreamCluster,
) -> None:
    """A slice whose worker no node takes (its node affinity excludes every node, as an avoidance left without
    capacity does): the local kube-scheduler leaves it ``PodScheduled=False``/``Unschedulable`` with the FitError
    message and a ``FailedScheduling`` event; a trigger asked to (``relax_after_seconds``) wakes the operator once
    it has waited that long, by the condition's own time, and one not asked does not."""
    api = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    name = "stranded"
    body = sleeping_jobset(name, 1)
    worker = next(r for r in body["spec"]["replicatedJobs"] if r["name"] == WORKER_REPLICATED_JOB)
    nowhere = {
        "key": "kubernetes.io/hostname",
        "operator": "NotIn",
        "values": [n.metadata.name for n in core.list_node().items],
    }
    worker["template"]["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [nowhere]}]}
        }
    }
    uid = custom.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, body)[
        "metadata"
    ]["uid"]
    selector = f"{LABEL_JOBSET_NAME}={name},{LABEL_REPLICATED_JOB_NAME}={WORKER_REPLICATED_JOB}"

    def waiting() -> Any:
        pods = core.list_namespaced_pod("default", label_selector=selector).items
        return next(
            (
                p
                for p in pods
                if any(c.type == "PodScheduled" and c.status == "False" for c in p.status.conditions or [])
            ),
            None,
        )

    try:
        pod = await wait_for("the worker marked unschedulable", waiting)
        [condition] = [c for c in pod.status.conditions if c.type == "PodScheduled"]
        assert condition.reason == "Unschedulable" and "didn't match Pod's node affinity/selector" in condition.message
        events = core.list_namespaced_event("default", field_selector=f"involvedObject.name={pod.metadata.name}").items
        failed = [e for e in events if e.reason == "FailedScheduling"]
        assert failed and failed[0].type == "Warning" and failed[0].message == condition.message
        assert failed[0].action == "Scheduling" and failed[0].reporting_component == "default-scheduler"

        # Not asked: the budgets never run out, so nothing wakes it.
        quiet = asyncio.create_task(first_event(fresh_trigger(name, uid)))
        asked = fresh_trigger(name, uid)
        asked.relax_after_seconds = 1.0
        event = (await asyncio.wait_for(first_event(asked), timeout=60)).payload
        assert event["status"] == "unschedulable", event
        assert pod.metadata.name in event["message"] and "node affinity/selector" in event["message"]
        assert not quiet.done()
        quiet.cancel()
        # Told to look again later: not before that time, whatever the pod's age.
        not_before = time.time() + 3
        later = JobSetTrigger(**{**asked.serialize()[1], "relax_not_before": not_before})
        again = (await asyncio.wait_for(first_event(later), timeout=60)).payload
        assert again["status"] == "unschedulable" and time.time() >= not_before
    finally:
        custom.delete_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, name, propagation_policy="Foreground"
        )
        api.close()
