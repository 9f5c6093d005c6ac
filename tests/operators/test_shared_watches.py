"""The triggerer's shared watches, over HTTP against the local cluster, counted in kube-apiserver's audit log.

Triggers of one event loop (one triggerer process) share one list+watch per namespace and kind; each gets its own
JobSet's objects; a queued JobSet's trigger watches no pods or Jobs until Kueue admits it; a subscriber that leaves
does not stop the others; a relist after ``410 Gone`` reaches every subscriber; a reopened watch resumes from the
last resourceVersion, a bookmark's included.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from kubernetes import client, config

from elastic_training.local.controlplane.audit import AuditEvent
from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators import hooks
from elastic_training.operators.constants import (
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    KUEUE_GROUP,
    KUEUE_VERSION,
    LABEL_JOB_INDEX,
    LABEL_JOBSET_NAME,
    LABEL_KUEUE_JOB_UID,
    LABEL_KUEUE_QUEUE_NAME,
    LABEL_REPLICATED_JOB_NAME,
    WORKER_REPLICATED_JOB,
)
from elastic_training.operators.observations import MonitorState
from elastic_training.operators.rbac import DEFAULT_SERVICE_ACCOUNT
from elastic_training.operators.shared_watches import SharedWatches, WatchKey, WatchKind, shared_watches
from elastic_training.operators.triggers import _Monitor
from tests.support.airflow_dags import NAMESPACE
from tests.support.flex import typed
from tests.support.trigger_runs import BUDGETS, first_event, fresh_trigger, sleeping_jobset, wait_for

OPERATORS = f"system:serviceaccount:{NAMESPACE}:{DEFAULT_SERVICE_ACCOUNT}"
Obj = dict[str, Any]


def operators_requests(cluster: UpstreamCluster, since: int, *resources: str) -> Counter[tuple[str, str]]:
    """(resource, verb) of the operators' list, watch and log requests the cluster received after ``since``."""
    return counted(cluster.audit_events(since), *resources)


def counted(found: list[AuditEvent], *resources: str) -> Counter[tuple[str, str]]:
    """(resource, verb) of the operators' requests among ``found``."""
    return Counter(
        (e.resource if e.subresource is None else f"{e.resource}/{e.subresource}", e.verb)
        for e in found
        if e.username == OPERATORS and e.resource in resources
    )


def create(admin: client.ApiClient, manifest: Obj) -> str:
    created = client.CustomObjectsApi(admin).create_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, manifest
    )
    return str(created["metadata"]["uid"])


def delete(admin: client.ApiClient, *names: str) -> None:
    for name in names:
        with contextlib.suppress(client.ApiException):
            client.CustomObjectsApi(admin).delete_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, name, propagation_policy="Foreground"
            )


def running_worker(admin: client.ApiClient, name: str) -> str | None:
    pods = (
        client.CoreV1Api(admin)
        .list_namespaced_pod(
            NAMESPACE,
            label_selector=f"{LABEL_JOBSET_NAME}={name},{LABEL_REPLICATED_JOB_NAME}={WORKER_REPLICATED_JOB},"
            f"{LABEL_JOB_INDEX}=0",
        )
        .items
    )
    running = [p for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]
    return str(running[0].metadata.name) if running else None


async def test_two_triggers_in_one_loop_share_one_watch_per_kind(
    cluster_connection: UpstreamCluster, admin: client.ApiClient
) -> None:
    names = ("share-a", "share-b")
    uids = {name: create(admin, sleeping_jobset(name, 1)) for name in names}
    watching: dict[str, asyncio.Task[Any]] = {}
    try:
        for name in names:
            await wait_for(f"{name}'s worker running", lambda name=name: running_worker(admin, name))
        since = cluster_connection.audit_position()
        budgets = BUDGETS | {"max_slice_restarts": 0}
        for name in names:
            watching[name] = asyncio.create_task(first_event(fresh_trigger(name, uids[name], budgets)))
        opened = {(kind, verb): 1 for kind in ("jobsets", "jobs", "pods") for verb in ("list", "watch")}

        def all_open() -> bool:
            seen = operators_requests(cluster_connection, since, "jobsets", "jobs", "pods")
            return all(seen[key] >= 1 for key in opened) and seen["pods/log", "get"] >= 2

        await wait_for("the watches open and both head logs followed", all_open)
        seen = operators_requests(cluster_connection, since, "jobsets", "jobs", "pods")
        del seen["pods/log", "get"]  # a log follow per head pod (retried while its container starts)
        assert seen == Counter(opened), "one list and one watch per kind, for both triggers"
        subscribed = {key.kind: count for key, count in shared_watches().subscribers().items()}
        assert subscribed == {WatchKind.JOBSETS: 2, WatchKind.JOBS: 2, WatchKind.PODS: 2}

        for index, name in enumerate(names):  # each trigger sees its own JobSet's slice restart, and only that
            worker = running_worker(admin, name)
            assert worker is not None
            cluster_connection.faults.delete_pod(NAMESPACE, worker)
            event = (await asyncio.wait_for(watching[name], timeout=60)).payload
            assert event["reason"] == "slice_restart_budget_spent"
            assert MonitorState.from_json(event["state"]).slice_restarts == 1
            if index == 0:
                assert not watching[names[1]].done(), "the other JobSet had no restart"
        assert shared_watches().subscribers() == {}, "the last trigger to leave closed the watches"
    finally:
        for task in watching.values():
            task.cancel()
        delete(admin, *names)


def cpu_quota(flavor: str, cpu: str) -> list[Obj]:
    """A ClusterQueue's resource groups: ``cpu`` of ``flavor``."""
    return [
        {
            "coveredResources": ["cpu"],
            "flavors": [{"name": flavor, "resources": [{"name": "cpu", "nominalQuota": cpu}]}],
        }
    ]


@pytest.fixture
def closed_queue(admin: client.ApiClient) -> Iterator[str]:
    """A LocalQueue whose ClusterQueue has no cpu quota: every JobSet in it waits, until the quota is raised."""
    custom = client.CustomObjectsApi(admin)
    name = "trigger-queue"
    flavor = typed("ResourceFlavor", {"metadata": {"name": name}, "spec": {}})
    spec = {"namespaceSelector": {}, "resourceGroups": cpu_quota(name, "0")}
    queue = typed("ClusterQueue", {"metadata": {"name": name}, "spec": spec})
    custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", flavor)
    custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", queue)
    local = typed("LocalQueue", {"metadata": {"name": name}, "spec": {"clusterQueue": name}})
    custom.create_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, NAMESPACE, "localqueues", local)
    try:
        yield name
    finally:
        with contextlib.suppress(client.ApiException):
            custom.delete_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, NAMESPACE, "localqueues", name)
        for plural in ("clusterqueues", "resourceflavors"):
            with contextlib.suppress(client.ApiException):
                custom.delete_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, name)


def pending_workload(admin: client.ApiClient, uid: str) -> Obj | None:
    listed = client.CustomObjectsApi(admin).list_namespaced_custom_object(
        KUEUE_GROUP, KUEUE_VERSION, NAMESPACE, "workloads", label_selector=f"{LABEL_KUEUE_JOB_UID}={uid}"
    )["items"]
    for workload in listed:
        for condition in (workload.get("status") or {}).get("conditions") or []:
            if condition["type"] == "QuotaReserved" and condition["status"] == "False":
                return dict(workload)
    return None


async def test_a_queued_jobset_opens_no_pod_watch_until_it_is_admitted(
    cluster_connection: UpstreamCluster, admin: client.ApiClient, closed_queue: str
) -> None:
    name = "queued-watch"
    manifest = sleeping_jobset(name, 1)
    manifest["metadata"]["labels"] = {LABEL_KUEUE_QUEUE_NAME: closed_queue}
    for rjob in manifest["spec"]["replicatedJobs"]:
        for container in rjob["template"]["spec"]["template"]["spec"]["containers"]:
            container["resources"] = {"requests": {"cpu": "10m"}}
    uid = create(admin, manifest)
    running: asyncio.Task[Any] | None = None
    try:
        await wait_for("its Workload pending", lambda: pending_workload(admin, uid))
        since = cluster_connection.audit_position()
        trigger = fresh_trigger(name, uid)
        monitor = _Monitor(trigger, MonitorState.from_json(trigger.state), await trigger._hook())
        running = asyncio.create_task(monitor.run())
        await wait_for("the trigger read its Workload as pending", lambda: monitor.state.queue_state == "pending")
        assert {key.kind for key in shared_watches().subscribers()} == {WatchKind.JOBSETS, WatchKind.WORKLOADS}
        assert not operators_requests(cluster_connection, since, "pods", "jobs"), "no pod or Job request while queued"

        admitted = time.time()  # the audit log's clock (kube-apiserver runs on this machine)
        client.CustomObjectsApi(admin).patch_cluster_custom_object(
            KUEUE_GROUP,
            KUEUE_VERSION,
            "clusterqueues",
            closed_queue,
            {"spec": {"resourceGroups": cpu_quota(closed_queue, "1")}},
        )
        await wait_for("its head pod seen once admitted", lambda: monitor.state.head_pod is not None)
        # The head pod can come from the pod watch before the Job watch has sent its list (a CI run found it).
        both = {WatchKind.PODS, WatchKind.JOBS}
        await wait_for("its pod and Job watches listed", lambda: both <= {k.kind for k in shared_watches().synced()})
        # One read of the audit log, split at the admission: the watches open as it is read (two reads differed).
        found = cluster_connection.audit_events(since)
        assert not counted([e for e in found if e.received_at < admitted], "pods", "jobs"), "none before admission"
        after = counted([e for e in found if e.received_at >= admitted], "pods", "jobs")
        assert after["pods", "list"] == 1 and after["jobs", "list"] == 1
        kinds = {key.kind for key in shared_watches().subscribers()}
        assert kinds == {WatchKind.JOBSETS, WatchKind.WORKLOADS, WatchKind.PODS, WatchKind.JOBS}
    finally:
        if running is not None:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
        delete(admin, name)
    assert shared_watches().subscribers() == {}


async def test_a_trigger_cancelled_as_a_change_wakes_it_ends(admin: client.ApiClient) -> None:
    """The triggerer cancels a trigger (its task cleared, its deferral timed out) at any moment, also as a change
    wakes its decision loop. Python 3.11's ``asyncio.wait_for`` returns the result of what it waits on when both
    come in one turn of the loop, and drops the cancellation (CPython gh-86296, fixed in 3.12): the loop then ran
    on, holding its watches, until the JobSet ended (a suite run found it: 300 s, then pytest's timeout)."""
    name = "cancelled-watch"
    uid = create(admin, sleeping_jobset(name, 1))
    try:
        trigger = fresh_trigger(name, uid)
        monitor = _Monitor(trigger, MonitorState.from_json(trigger.state), await trigger._hook())
        running = asyncio.create_task(monitor.run())
        await wait_for("its head pod seen", lambda: monitor.state.head_pod is not None)
        monitor.changed.set()  # a change wakes the loop, and the cancellation comes in the same turn
        running.cancel()
        done, _ = await asyncio.wait({running}, timeout=30)
        assert running in done and running.cancelled()
    finally:
        delete(admin, name)
    assert shared_watches().subscribers() == {}


async def collect(subscription: AsyncIterator[tuple[str, Obj]], into: list[tuple[str, Obj]]) -> None:
    async for item in subscription:
        into.append(item)


def suspended_jobset(name: str) -> Obj:
    """A JobSet no one runs (``spec.suspend``): an object to watch, without pods."""
    manifest = sleeping_jobset(name, 1)
    manifest["spec"]["suspend"] = True
    return manifest


def names_in(item: tuple[str, Obj]) -> list[str]:
    kind, obj = item
    found = obj.get("items") if kind == "SYNC" else [obj]
    return [str(o["metadata"]["name"]) for o in found or []]


def touch(admin: client.ApiClient, name: str, value: str) -> None:
    client.CustomObjectsApi(admin).patch_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, name, {"metadata": {"labels": {"probe": value}}}
    )


def probed(items: list[tuple[str, Obj]], value: str) -> bool:
    return any(kind == "MODIFIED" and obj["metadata"].get("labels", {}).get("probe") == value for kind, obj in items)


async def test_a_subscriber_that_leaves_does_not_stop_the_others(
    cluster_connection: UpstreamCluster, admin: client.ApiClient
) -> None:
    names = ("leave-a", "leave-b")
    for name in names:
        create(admin, suspended_jobset(name))
    registry = SharedWatches()
    key = WatchKey("kubernetes_default", NAMESPACE, WatchKind.JOBSETS)
    seen: dict[str, list[tuple[str, Obj]]] = {name: [] for name in names}
    started = cluster_connection.audit_position()
    tasks = {name: asyncio.create_task(collect(registry.subscribe(key, name), seen[name])) for name in names}
    try:

        def watching() -> bool:
            return operators_requests(cluster_connection, started, "jobsets")["jobsets", "watch"] >= 1

        await wait_for("both synced", lambda: watching() and all(seen[n] and seen[n][0][0] == "SYNC" for n in names))
        assert [names_in(seen[n][0]) for n in names] == [["leave-a"], ["leave-b"]], "each its own JobSet only"
        assert operators_requests(cluster_connection, started, "jobsets") == {
            ("jobsets", "list"): 1,
            ("jobsets", "watch"): 1,
        }
        since = cluster_connection.audit_position()
        tasks["leave-a"].cancel()  # a trigger ends mid-stream
        with contextlib.suppress(asyncio.CancelledError):
            await tasks["leave-a"]
        assert registry.subscribers() == {key: 1}
        touch(admin, "leave-b", "1")
        touch(admin, "leave-a", "1")
        await wait_for("the other still served", lambda: probed(seen["leave-b"], "1"))
        assert not probed(seen["leave-a"], "1")
        assert not operators_requests(cluster_connection, since, "jobsets"), "the shared watch was not reopened"
    finally:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        delete(admin, *names)
    assert registry.subscribers() == {}, "the last subscriber to leave closed the watch"


async def test_a_watch_is_synced_only_once_its_list_is_answered(
    cluster_connection: UpstreamCluster, admin: client.ApiClient
) -> None:
    """``SharedWatches.synced()``, what a caller waits on before it acts on the cluster: not while the API server
    refuses the list (503: retried, never given up), and once it answers, with the subscription given the list."""
    create(admin, suspended_jobset("synced-a"))
    registry = SharedWatches()
    key = WatchKey("kubernetes_default", NAMESPACE, WatchKind.JOBSETS)
    seen: list[tuple[str, Obj]] = []
    cluster_connection.faults.fail_requests(503, path=rf"/namespaces/{NAMESPACE}/{JOBSET_PLURAL}$")
    task = asyncio.create_task(collect(registry.subscribe(key, "synced-a"), seen))
    try:
        await wait_for("subscribed", lambda: registry.subscribers() == {key: 1})
        await asyncio.sleep(1)  # a negative window: a refused list syncs nothing; load only shortens it
        assert registry.synced() == set() and seen == []
        cluster_connection.faults.clear_api_faults()
        await wait_for("synced", lambda: registry.synced() == {key} and seen)
        assert seen[0][0] == "SYNC" and names_in(seen[0]) == ["synced-a"]
    finally:
        cluster_connection.faults.clear_api_faults()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        delete(admin, "synced-a")
    assert registry.synced() == set(), "a closed watch is not synced"


JOBSETS_PATH = rf"/namespaces/{NAMESPACE}/{JOBSET_PLURAL}$"  # the list's and the watch's, not one JobSet's


async def test_a_relist_after_410_reaches_every_subscriber(
    cluster_connection: UpstreamCluster, admin: client.ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kube-apiserver ends each watch at its ``timeoutSeconds`` (2 s here) and the watch is reopened from the last
    resourceVersion; that reopen is answered ``410 Gone`` by the cluster's API fault proxy, as kube-apiserver
    answers a version its watch cache no longer holds (a compaction alone gives none at once: the watch cache
    still serves the compacted versions, local/faults/server.py). One relist then serves both subscribers."""
    monkeypatch.setattr(hooks, "WATCH_TIMEOUT_SECONDS", 2)
    names = ("relist-a", "relist-b")
    for name in names:
        create(admin, suspended_jobset(name))
    registry = SharedWatches()
    key = WatchKey("kubernetes_default", NAMESPACE, WatchKind.JOBSETS)
    seen: dict[str, list[tuple[str, Obj]]] = {name: [] for name in names}
    since = cluster_connection.audit_position()
    tasks = {name: asyncio.create_task(collect(registry.subscribe(key, name), seen[name])) for name in names}
    try:

        def requests(after: int) -> Counter[tuple[str, str]]:
            return operators_requests(cluster_connection, after, "jobsets")

        await wait_for("listed and watching", lambda: requests(since)["jobsets", "watch"] >= 1 and all(seen.values()))
        touch(admin, "relist-b", "1")  # before the 410, so the relist after it must carry it
        expired = cluster_connection.audit_position()
        cluster_connection.faults.fail_requests(410, count=1, path=JOBSETS_PATH, method="GET")

        def relisted(name: str) -> bool:
            return [kind for kind, _ in seen[name]].count("SYNC") == 2

        await wait_for("both subscribers relisted", lambda: all(relisted(n) for n in names))
        for name in names:
            assert names_in(seen[name][-1]) == [name]
        (relisted_b,) = seen["relist-b"][-1][1]["items"]
        assert relisted_b["metadata"]["labels"]["probe"] == "1", "the relist carries the change"
        await wait_for("watching again after the relist", lambda: requests(expired)["jobsets", "watch"] >= 1)
        # The proxy answered the reopen itself: kube-apiserver saw only the relist, once for both.
        assert requests(expired)["jobsets", "list"] == 1, "one relist served both"
        touch(admin, "relist-a", "2")
        await wait_for("a change after the relist reaches its subscriber", lambda: probed(seen["relist-a"], "2"))
        assert not probed(seen["relist-b"], "2")
    finally:
        cluster_connection.faults.clear_api_faults()
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        delete(admin, *names)


def ensure_namespace(core: client.CoreV1Api, name: str) -> None:
    try:
        core.create_namespace({"metadata": {"name": name}})
    except client.ApiException as error:
        if error.status != 409:  # the shared cluster keeps namespaces between modules
            raise


async def test_a_reopened_watch_resumes_from_the_last_version_a_bookmark_included(
    cluster_connection: UpstreamCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pods watch of a namespace where nothing happens, with bookmarks asked for: kube-apiserver's watch cache
    sends a BOOKMARK with its own resourceVersion (about every minute, and shortly before the watch's
    ``timeoutSeconds`` ends it: 5 s here), and the watch is reopened from that version, not relisted. No timing is
    asserted: only that a reopen, within the test's bound, resumes from past a version the watch never carried."""
    monkeypatch.setattr(hooks, "WATCH_TIMEOUT_SECONDS", 5)
    quiet, busy = "bookmark-quiet", "bookmark-busy"
    extra = {"kube_config_path": str(cluster_connection.kubeconfig_path), "namespace": quiet}
    monkeypatch.setenv("AIRFLOW_CONN_K8S_BOOKMARKS", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    api = config.new_client_from_config(config_file=str(cluster_connection.kubeconfig_path))
    core = client.CoreV1Api(api)
    for namespace in (quiet, busy):
        ensure_namespace(core, namespace)
    registry = SharedWatches()
    seen: list[tuple[str, Obj]] = []
    since = cluster_connection.audit_position()
    task = asyncio.create_task(
        collect(registry.subscribe(WatchKey("k8s_bookmarks", quiet, WatchKind.PODS), "nothing"), seen)
    )

    def requests(verb: str) -> list[AuditEvent]:
        found = cluster_connection.audit_events(since)
        return [e for e in found if e.resource == "pods" and e.namespace == quiet and e.verb == verb]

    try:
        await wait_for("listed and watching", lambda: seen and requests("watch"))
        listed_version = int(str(requests("watch")[0].query("resourceVersion")))
        # A pod in another namespace moves the pods cache's resourceVersion on; the watch carries nothing of it,
        # only a bookmark tells the watcher. (It selects no node: it stays pending.)
        pod = {
            "metadata": {"name": "moves-the-version"},
            "spec": {"nodeSelector": {"nowhere": "true"}, "containers": [{"name": "c", "image": "local"}]},
        }
        moved = int(core.create_namespaced_pod(busy, pod).metadata.resource_version)
        assert moved > listed_version

        def resumed_past_it() -> bool:
            return any(int(str(e.query("resourceVersion"))) >= moved for e in requests("watch"))

        await wait_for("a reopen from a bookmark's version", resumed_past_it, timeout=180)
        assert len(requests("list")) == 1, "resumed, never relisted"
        assert seen == [("SYNC", {"items": []})], "a bookmark is not an event"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        with contextlib.suppress(client.ApiException):
            core.delete_namespaced_pod("moves-the-version", busy, grace_period_seconds=0)
        api.close()
