"""Kueue's JobSet integration on the local cluster: suspend at create, one Workload per JobSet, start and stop.

Checked against kubernetes-sigs/kueue v0.17.1 (the release xpk installs):
- ``pkg/controller/jobs/jobset/jobset_webhook.go`` with ``jobframework.ApplyDefaultForSuspend``: a JobSet
  created with the ``kueue.x-k8s.io/queue-name`` label is created with ``spec.suspend: true`` (here an
  admission step of the store, as the local cluster applies other webhooks). Without the label the JobSet is
  not Kueue's (``manageJobsWithoutQueueName: false``, the default) and nothing here touches it.
- ``pkg/controller/jobs/jobset/jobset_controller.go``: a pod set per replicated job, named after it, with
  the Job's pod template and ``count = replicas * min(parallelism, completions)`` (``podsCount``); finished
  when the JobSet's ``Completed`` or ``Failed`` condition is True (its message becomes the Workload's
  ``Finished`` message); active while any replicated job has active Jobs (``IsActive``).
- ``pkg/controller/jobframework/reconciler.go`` ``ReconcileGenericJob``, in its order: no Workload → create
  ``jobset-<name>-<hash5>`` (controller owner reference to the JobSet, label ``kueue.x-k8s.io/job-uid``,
  ``queueName``, ``priorityClassRef``/``priority`` from ``ExtractPriority``; Event ``CreatedWorkload``);
  JobSet finished → Workload ``Finished`` (reason ``Succeeded``/``Failed``; Event ``FinishedWorkload``);
  Workload ``Evicted`` → stop the JobSet (``spec.suspend: true``, the pod templates' ``nodeSelector`` and
  ``tolerations`` restored to the Workload's; Event ``Stopped`` with the eviction message), and once it is no
  longer active ``Requeued=True`` (reason ``Preempted``) and ``QuotaReserved=False`` reason ``Pending``
  (quota released); suspended and admitted → start it (``startJob``: the flavors' ``nodeLabels`` merged into
  each pod template's ``nodeSelector``, their ``tolerations`` appended, ``spec.suspend: false``; Event
  ``Started`` "Admitted by clusterQueue C"); running but not admitted → stop it ("Not admitted by cluster
  queue").

With ``waitForPodsReady`` configured, the Workload's ``PodsReady`` condition is kept current first (step 5 of
``ReconcileGenericJob``; :func:`local.cluster.kueue_workload_controller.pods_ready_condition`), and an eviction
other than ``Preempted``/``NodeFailures`` leaves ``Requeued=False`` with its reason until the Workload controller
(:mod:`local.cluster.kueue_workload_controller`) requeues it.

The JobSet controller (``local/cluster/jobset_controller.py``) then suspends or resumes the child Jobs, and
copies the pod templates' node selectors and tolerations to them on resume, as kubernetes-sigs/jobset does.
"""

from __future__ import annotations

import copy
from typing import Any

from elastic_training.local.cluster import kueue_admission_checks as ac
from elastic_training.local.cluster import kueue_workload as kw
from elastic_training.local.cluster.conditions import find_condition
from elastic_training.local.cluster.events import NORMAL, record_event
from elastic_training.local.cluster.kueue_scheduler import KueueScheduler
from elastic_training.local.cluster.kueue_store import publish
from elastic_training.local.cluster.kueue_workload_controller import WorkloadController, sync_pods_ready
from elastic_training.local.cluster.owners import controller_ref, owner_reference
from elastic_training.local.cluster.resources import (
    CLUSTER_QUEUES,
    JOBSETS,
    LOCAL_QUEUES,
    NAMESPACES,
    RESOURCE_FLAVORS,
    WORKLOADS,
    ApiError,
    ResourceType,
)
from elastic_training.local.cluster.store import Obj, Store, WatchEvent
from elastic_training.local.cluster.workqueue import WorkQueue
from elastic_training.local.descriptions.kueue_config import OFF, KueueConfiguration
from elastic_training.operators.constants import LABEL_KUEUE_JOB_UID, LABEL_KUEUE_QUEUE_NAME

COMPONENT = "kueue-jobset-controller"
FINALIZER = "kueue.x-k8s.io/resource-in-use"  # apis/kueue/v1beta2/constants.go ResourceInUseFinalizerName
LABEL_PODSET = "kueue.x-k8s.io/podset"  # pkg/constants PodSetLabel, on each started pod template
DEFAULT_LOCAL_QUEUE = "default"  # pkg/controller/constants DefaultLocalQueueName
SCHEDULE = ("", "", "")  # the scheduler's key in the shared work queue
Key = tuple[str, str, str]  # ("jobset" or "workload", namespace, name) or SCHEDULE
_SCHEDULER_INPUTS = (CLUSTER_QUEUES, LOCAL_QUEUES, RESOURCE_FLAVORS, NAMESPACES)


def queue_name(jobset: Obj) -> str:
    return str((jobset.get("metadata", {}).get("labels") or {}).get(LABEL_KUEUE_QUEUE_NAME) or "")


def suspend_on_create(rtype: ResourceType, obj: Obj) -> None:
    """The JobSet webhook's ``Default``: a JobSet with a queue label is created suspended."""
    if rtype == JOBSETS and queue_name(obj) and isinstance(obj.get("spec"), dict):
        obj["spec"]["suspend"] = True


def default_local_queue(store: Store) -> Any:
    """The JobSet webhook's ``ApplyDefaultLocalQueue`` (LocalQueueDefaulting, GA and locked on in v0.17): a JobSet
    without a queue label, created in a namespace that has a LocalQueue named ``default``, gets
    ``kueue.x-k8s.io/queue-name: default`` (then :func:`suspend_on_create` suspends it). Registered before it."""

    def admit(rtype: ResourceType, obj: Obj) -> None:
        if rtype != JOBSETS or queue_name(obj):
            return
        meta = obj.setdefault("metadata", {})
        if any(ref.get("controller") for ref in meta.get("ownerReferences") or []):
            return  # IsOwnerManagedByKueueForObject: a child of a managed job keeps its owner's queue
        if store.find(LOCAL_QUEUES, str(meta.get("namespace") or "default"), DEFAULT_LOCAL_QUEUE) is None:
            return
        meta.setdefault("labels", {})[LABEL_KUEUE_QUEUE_NAME] = DEFAULT_LOCAL_QUEUE

    return admit


def _pod_template(rjob: Obj) -> Obj:
    template: Obj = rjob.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})
    return template


def pod_sets(jobset: Obj) -> list[Obj]:
    """``JobSet.PodSets``: one per replicated job."""
    out = []
    for rjob in jobset.get("spec", {}).get("replicatedJobs") or []:
        job_spec = (rjob.get("template") or {}).get("spec") or {}
        parallelism = int(job_spec.get("parallelism", 1))
        completions = int(job_spec.get("completions", parallelism))
        per_replica = min(parallelism, completions)
        template = copy.deepcopy(job_spec.get("template") or {})
        out.append({"name": rjob["name"], "template": template, "count": int(rjob.get("replicas", 1)) * per_replica})
    return out


def finished(jobset: Obj) -> tuple[str, bool, bool]:
    """``JobSet.Finished``: (message, success, finished)."""
    conditions = (jobset.get("status") or {}).get("conditions") or []
    for kind, success in (("Completed", True), ("Failed", False)):
        found = find_condition(conditions, kind)
        if found is not None and found.get("status") == "True":
            return str(found.get("message", "")), success, True
    return "", False, False


def is_active(jobset: Obj) -> bool:
    return any(int(s.get("active", 0)) > 0 for s in (jobset.get("status") or {}).get("replicatedJobsStatus") or [])


class PodSetMergeError(ValueError):
    """A flavor's node label contradicts the pod template's node selector (``podset.Merge``'s conflict)."""


class KueueController:
    """The local Kueue: the JobSet integration and the scheduler, on one work queue."""

    def __init__(self, store: Store, configuration: KueueConfiguration = OFF) -> None:
        self._store = store
        self.scheduler = KueueScheduler(store, configuration)
        self.workloads = WorkloadController(store, configuration)
        self.configuration = configuration
        self.queue: WorkQueue[Key] = WorkQueue("kueue-controller-manager", self.reconcile)

    def configure(self, configuration: KueueConfiguration) -> None:
        """Take a new manager Configuration (upstream: the ConfigMap edited and the manager restarted)."""
        self.configuration = self.scheduler.configuration = self.workloads.configuration = configuration
        publish(self._store, configuration)
        for wl in self._store.view(WORKLOADS)[0]:
            self.queue.enqueue(("workload", wl["metadata"]["namespace"], wl["metadata"]["name"]))
        for jobset in self._store.view(JOBSETS)[0]:
            if queue_name(jobset):
                self.queue.enqueue(("jobset", jobset["metadata"]["namespace"], jobset["metadata"]["name"]))
        self.queue.enqueue(SCHEDULE)

    def start(self) -> None:
        """Subscribe to store events; the JobSet webhook is registered by the control plane."""
        self._store.add_listener(self._on_event)
        for jobset in self._store.list(JOBSETS)[0]:
            self.queue.enqueue(("jobset", jobset["metadata"]["namespace"], jobset["metadata"]["name"]))
        self.queue.enqueue(SCHEDULE)

    def _on_event(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        if event.rtype == JOBSETS:
            if event.type != "DELETED" and queue_name(event.object):
                self.queue.enqueue(("jobset", meta["namespace"], meta["name"]))
            if event.type == "DELETED" or meta.get("deletionTimestamp"):
                if meta.get("uid"):
                    self.queue.enqueue(("workload", meta["namespace"], kw.workload_name(event.object)))
                self.queue.enqueue(SCHEDULE)
        elif event.rtype == WORKLOADS:
            if event.type != "DELETED":
                self.queue.enqueue(("workload", meta["namespace"], meta["name"]))
            ref = controller_ref(event.object)
            if ref is not None and ref.get("kind") == "JobSet":
                self.queue.enqueue(("jobset", meta["namespace"], str(ref["name"])))
            self.queue.enqueue(SCHEDULE)
        elif event.rtype in _SCHEDULER_INPUTS:
            self.queue.enqueue(SCHEDULE)
            old = event.old_object
            if event.rtype in (CLUSTER_QUEUES, LOCAL_QUEUES) and (old or {}).get("spec") != event.object.get("spec"):
                # A queue's stopPolicy moved: its Workloads are reconciled (upstream's workloadQueueHandler).
                for wl in self._store.view(WORKLOADS)[0]:
                    self.queue.enqueue(("workload", wl["metadata"]["namespace"], wl["metadata"]["name"]))

    def reconcile(self, key: Key) -> None:
        if key == SCHEDULE:
            self.scheduler.schedule()
            return
        kind, namespace, name = key
        if kind == "workload":
            self._finalize(namespace, name)
            self.workloads.reconcile(namespace, name, lambda delay: self.queue.enqueue_after(key, delay))
            return
        jobset = self._store.find(JOBSETS, namespace, name)
        if jobset is None or jobset["metadata"].get("deletionTimestamp") or not queue_name(jobset):
            return
        self._reconcile_jobset(jobset)

    # -- ReconcileGenericJob -----------------------------------------------------------------

    def _workload_of(self, jobset: Obj) -> Obj | None:
        """The JobSet's Workload: the one its name derives to, if the JobSet owns it (an O(1) lookup, as
        upstream's owner index is)."""
        wl = self._store.find(WORKLOADS, jobset["metadata"]["namespace"], kw.workload_name(jobset))
        if wl is None:
            return None
        ref = controller_ref(wl)
        return wl if ref is not None and ref.get("uid") == jobset["metadata"]["uid"] else None

    def _reconcile_jobset(self, jobset: Obj) -> None:
        wl = self._workload_of(jobset)
        message, success, done = finished(jobset)
        if wl is None:
            if done:
                return
            if not jobset["spec"].get("suspend"):
                self._stop(jobset, None, "Not admitted by cluster queue")
            self._create_workload(jobset)
            return
        if done:
            if not kw.is_true(wl, kw.FINISHED):
                reason = kw.REASON_SUCCEEDED if success else kw.REASON_FAILED
                self._write_workload(wl, lambda o: kw.set_status_condition(o, kw.FINISHED, True, reason, message))
                record_event(
                    self._store,
                    jobset,
                    NORMAL,
                    "FinishedWorkload",
                    f"Workload '{wl['metadata']['namespace']}/{wl['metadata']['name']}' is declared finished",
                    COMPONENT,
                )
            self._finalize(wl["metadata"]["namespace"], wl["metadata"]["name"])
            return
        if kw.is_true(wl, kw.FINISHED):
            return
        if self.configuration.wait_for_pods_ready is not None and sync_pods_ready(self._store, jobset, wl):
            return  # upstream returns after writing PodsReady; the Workload's event brings the JobSet back
        evicted = kw.find(wl, kw.EVICTED)
        if evicted is not None and evicted.get("status") == "True":
            self._stop(jobset, wl, str(evicted.get("message", "")))
            current = self._store.find(JOBSETS, jobset["metadata"]["namespace"], jobset["metadata"]["name"])
            if kw.is_true(wl, kw.QUOTA_RESERVED) and current is not None and not is_active(current):
                reason, text = str(evicted.get("reason", "")), str(evicted.get("message", ""))
                requeue = reason in (kw.REASON_EVICTED_BY_PREEMPTION, kw.REASON_NODE_FAILURES)

                def release(o: Obj) -> None:
                    kw.set_status_condition(o, kw.REQUEUED, requeue, reason, text)
                    kw.unset_quota_reservation(o, kw.REASON_PENDING, text)

                self._write_workload(wl, release)
            return
        if jobset["spec"].get("suspend"):
            if kw.is_true(wl, kw.ADMITTED):
                self._start(jobset, wl)
            return
        if not kw.is_true(wl, kw.ADMITTED):
            self._stop(jobset, wl, "Not admitted by cluster queue")

    def _finalize(self, namespace: str, name: str) -> None:
        """Drop the ``resource-in-use`` finalizer once Kueue no longer needs the Workload (``ReconcileGenericJob``
        and the workload controller): it is being deleted (its JobSet stopped first, if it still runs), it
        finished, or its JobSet is gone or being deleted (a foreground delete waits for this)."""
        wl = self._store.find(WORKLOADS, namespace, name)
        if wl is None or FINALIZER not in (wl["metadata"].get("finalizers") or []):
            return
        ref = controller_ref(wl)
        jobset = self._store.find(JOBSETS, namespace, str(ref["name"])) if ref is not None else None
        if jobset is not None and ref is not None and jobset["metadata"].get("uid") != ref.get("uid"):
            jobset = None  # a JobSet of the same name, not this Workload's
        owner_going = jobset is None or bool(jobset["metadata"].get("deletionTimestamp"))
        deleting = bool(wl["metadata"].get("deletionTimestamp"))
        if not (deleting or owner_going or kw.is_true(wl, kw.FINISHED)):
            return
        if deleting and jobset is not None and not owner_going:
            self._stop(jobset, wl, "Workload is deleted")

        def drop(o: Obj) -> None:
            o["metadata"]["finalizers"] = [f for f in o["metadata"].get("finalizers") or [] if f != FINALIZER]

        try:
            self._store.mutate(WORKLOADS, namespace, name, drop)
        except ApiError as err:
            if err.code != 404:
                raise

    def _create_workload(self, jobset: Obj) -> None:
        meta = jobset["metadata"]
        try:
            ref, value = kw.priority_of(self._store, jobset)
        except ApiError as err:
            if err.code == 404:  # upstream: the reconcile fails and is retried until the class exists
                raise RuntimeError(f"JobSet {meta['namespace']}/{meta['name']}: {err.message}") from err
            raise
        spec: Obj = {"podSets": pod_sets(jobset), "queueName": queue_name(jobset), "priority": value, "active": True}
        if ref is not None:
            spec["priorityClassRef"] = ref
        body = {
            "metadata": {
                "name": kw.workload_name(jobset),
                "namespace": meta["namespace"],
                "labels": {LABEL_KUEUE_JOB_UID: str(meta["uid"])},
                "ownerReferences": [owner_reference(jobset)],
                "finalizers": [FINALIZER],
            },
            "spec": spec,
        }
        try:
            created = self._store.create(WORKLOADS, body)
        except ApiError as err:
            if err.code == 409:
                return
            raise
        if ac.initial_checks(self._store, copy.deepcopy(created)):  # the workload controller's first sync

            def listed(o: Obj) -> None:
                ac.initial_checks(self._store, o)

            created = self._store.mutate(
                WORKLOADS, meta["namespace"], created["metadata"]["name"], listed, subresource="status"
            )
        record_event(
            self._store,
            jobset,
            NORMAL,
            "CreatedWorkload",
            f"Created Workload: {created['metadata']['namespace']}/{created['metadata']['name']}",
            COMPONENT,
        )

    def _start(self, jobset: Obj, wl: Obj) -> None:
        admission = (wl.get("status") or {}).get("admission") or {}
        by_name = {a["name"]: a for a in admission.get("podSetAssignments") or []}
        flavors = {f["metadata"]["name"]: f for f in self._store.list(RESOURCE_FLAVORS)[0]}

        updates = _pod_set_updates(wl)

        def start(js: Obj) -> None:
            for rjob in js["spec"].get("replicatedJobs") or []:
                assignment = by_name.get(rjob["name"]) or {}
                template = _pod_template(rjob)
                pod_spec = template.setdefault("spec", {})
                for flavor_name in dict.fromkeys((assignment.get("flavors") or {}).values()):
                    flavor = (flavors.get(flavor_name) or {}).get("spec") or {}
                    _merge(pod_spec, flavor.get("nodeLabels") or {}, flavor.get("tolerations") or [])
                template_meta = template.setdefault("metadata", {})
                template_meta.setdefault("labels", {})[LABEL_PODSET] = rjob["name"]
                for update in updates.get(rjob["name"], []):
                    _merge(pod_spec, update.get("nodeSelector") or {}, update.get("tolerations") or [])
                    for field in ("labels", "annotations"):
                        _merge_map(template_meta, field, update.get(field) or {})
            js["spec"]["suspend"] = False

        meta = jobset["metadata"]
        try:
            self._store.mutate(JOBSETS, meta["namespace"], meta["name"], start)
        except PodSetMergeError as err:
            failure = str(err)
            self._write_workload(wl, lambda o: kw.set_status_condition(o, kw.FINISHED, True, "FailedToStart", failure))
            return
        record_event(
            self._store,
            jobset,
            NORMAL,
            "Started",
            f"Admitted by clusterQueue {admission.get('clusterQueue')}",
            COMPONENT,
        )

    def _stop(self, jobset: Obj, wl: Obj | None, message: str) -> None:
        if jobset["spec"].get("suspend"):
            return
        originals = {p["name"]: p for p in ((wl or {}).get("spec") or {}).get("podSets") or []}

        def stop(js: Obj) -> None:
            js["spec"]["suspend"] = True
            for rjob in js["spec"].get("replicatedJobs") or []:
                original = originals.get(rjob["name"])
                if original is None:
                    continue
                saved = (original.get("template") or {}).get("spec") or {}
                template = _pod_template(rjob)
                pod_spec = template.setdefault("spec", {})
                for field in ("nodeSelector", "tolerations"):
                    if field in saved:
                        pod_spec[field] = copy.deepcopy(saved[field])
                    else:
                        pod_spec.pop(field, None)
                saved_meta = (original.get("template") or {}).get("metadata") or {}
                template_meta = template.setdefault("metadata", {})
                for field in ("labels", "annotations"):  # RestorePodSetsInfo
                    if field in saved_meta:
                        template_meta[field] = copy.deepcopy(saved_meta[field])
                    else:
                        template_meta.pop(field, None)

        meta = jobset["metadata"]
        self._store.mutate(JOBSETS, meta["namespace"], meta["name"], stop)
        record_event(self._store, jobset, NORMAL, "Stopped", message, COMPONENT)

    def _write_workload(self, wl: Obj, change: Any) -> None:
        meta = wl["metadata"]
        try:
            self._store.mutate(WORKLOADS, meta["namespace"], meta["name"], change, subresource="status")
        except ApiError as err:
            if err.code != 404:
                raise


def _pod_set_updates(wl: Obj) -> dict[str, list[Obj]]:
    """The admission checks' ``podSetUpdates`` by pod set (``getPodSetsInfoFromStatus``)."""
    out: dict[str, list[Obj]] = {}
    for check in ac.checks_of(wl):
        for update in check.get("podSetUpdates") or []:
            out.setdefault(str(update.get("name")), []).append(update)
    return out


def _merge_map(meta: Obj, field: str, values: dict[str, str]) -> None:
    """``PodSetInfo.Merge`` of labels or annotations: a different value for a key is a conflict."""
    current = dict(meta.get(field) or {})
    for key, value in values.items():
        if key in current and current[key] != value:
            raise PodSetMergeError(f"conflict for {field} {key}: {current[key]!r} vs {value!r}")
        current[key] = value
    if current:
        meta[field] = current


def _merge(pod_spec: Obj, node_labels: dict[str, str], tolerations: list[Obj]) -> None:
    """``podset.Merge``: node labels join the node selector (a different value for a key is a conflict);
    tolerations are appended unless already there."""
    selector = dict(pod_spec.get("nodeSelector") or {})
    for key, value in node_labels.items():
        if key in selector and selector[key] != value:
            raise PodSetMergeError(f"conflict for nodeSelector {key}: {selector[key]!r} vs {value!r}")
        selector[key] = value
    if selector:
        pod_spec["nodeSelector"] = selector
    existing = list(pod_spec.get("tolerations") or [])
    for toleration in tolerations:
        if toleration not in existing:
            existing.append(copy.deepcopy(toleration))
    if existing:
        pod_spec["tolerations"] = existing
