"""The ``batch/v1`` Job controller of the local cluster (upstream semantics, trimmed).

Implemented: ``completions``, ``parallelism``, ``completionMode: Indexed`` (index annotation and
label, ``JOB_COMPLETION_INDEX`` env, hostname ``<job>-<index>``, pod names
``<job>-<index>-<5 random>``), ``backoffLimit`` counting failed pods *and*, for
``restartPolicy: OnFailure``, container restarts of running pods (as upstream), a pod deleted
before it finished counts as failed and is replaced at once (upstream's default
``podReplacementPolicy`` without a ``podFailurePolicy``), ``suspend``, ``activeDeadlineSeconds``.
Terminal pods are counted as the store reports them (listener), standing in for upstream's
pod-tracking finalizers. Unlike Kubernetes >= 1.31 the ``Failed`` condition is set at once
(no ``FailureTarget`` phase) and the running pods are then deleted.

``suspend``, as kubernetes/kubernetes ``pkg/controller/job/job_controller.go`` has it (``syncJob``, ``manageJob``,
``deleteJobPods``, ``trackJobStatusAndRemoveFinalizers``, ``getValidPodsWithFilter``):

- A suspended Job's active pods are deleted gracefully (``manageJob``). ``deleteJobPods`` removes a pod's
  ``batch.kubernetes.io/job-tracking`` finalizer *before* deleting it, and the counting skips pods without that
  finalizer: a pod terminated by the suspension counts neither as failed nor as succeeded, whatever its exit code
  (a pod that exits 0 on the SIGTERM is not a completion). Here the ledger's ``ignored`` set plays the finalizer's
  part. A pod that was already terminating (deleted by someone else: an eviction, a drain) is not active, keeps its
  finalizer and is counted as any terminated pod is, suspended or not.
- The counts, the failure rules (``backoffLimit``; not ``activeDeadlineSeconds``, which ``pastActiveDeadline``
  skips while suspended) and the completion check run while suspended too: a suspended Job whose counted pods
  reach its completions is ``Complete`` ("Job can be in the suspended state only if it is NOT completed").
- Otherwise the ``Suspended`` condition is ``True`` with reason ``JobSuspended``, message ``Job suspended`` (Normal
  Event ``Suspended``); on resume it turns ``False`` with ``JobResumed``/``Job resumed`` (Event ``Resumed``). A Job
  never suspended has no ``Suspended`` condition (``ensureJobConditionStatus`` does not add a False one).
- ``status.startTime`` is set at the first sync while not suspended, is *kept* on suspension, and is reset to now
  when the Job resumes (the ``JobResumed`` transition). JobSet clears it before resuming a child Job
  (kubernetes-sigs/jobset ``pkg/controllers/jobset_controller.go`` ``resumeJob``) because the API server lets a
  suspended Job's scheduling directives change only while ``startTime`` is unset (``validation.py``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import UTC, datetime

from elastic_training.local.cluster import pod_failure_policy
from elastic_training.local.cluster.conditions import is_true, set_condition
from elastic_training.local.cluster.events import NORMAL, WARNING, record_event
from elastic_training.local.cluster.owners import controller_ref, delete_all, owned_by, owner_reference
from elastic_training.local.cluster.resources import JOBS, PODS, ApiError
from elastic_training.local.cluster.store import Obj, Store, WatchEvent, now_rfc3339
from elastic_training.local.cluster.workqueue import WorkQueue
from elastic_training.local.nodeagent.logs import parse_rfc3339
from elastic_training.operators.constants import (
    ANNOTATION_JOB_COMPLETION_INDEX,
    LABEL_JOB_COMPLETION_INDEX,
)

COMPONENT = "job-controller"
DEFAULT_BACKOFF_LIMIT = 6
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
DEADLINE_EXCEEDED = "DeadlineExceeded"
_FAILURE_MESSAGES = {
    BACKOFF_LIMIT_EXCEEDED: "Job has reached the specified backoff limit",
    DEADLINE_EXCEEDED: "Job was active longer than specified deadline",
}

JobKey = tuple[str, str]


@dataclass
class _Ledger:
    """Terminal pods of one Job, recorded as the store reports them (pods may be removed later)."""

    failed: set[str] = field(default_factory=set)
    succeeded: dict[str, int | None] = field(default_factory=dict)
    ignored: set[str] = field(default_factory=set)  # deleted by this controller on suspend
    disregarded: set[str] = field(default_factory=set)  # failed, but a podFailurePolicy Ignore rule matched
    fail_job: str = ""  # the message of the first podFailurePolicy FailJob match

    def record(self, pod: Obj, removed: bool = False, policy: Obj | None = None) -> None:
        uid = str(pod["metadata"]["uid"])
        if uid in self.failed or uid in self.succeeded or uid in self.disregarded:
            return
        phase = pod.get("status", {}).get("phase")
        if uid in self.ignored:
            return  # terminated by a suspension: neither a failure nor a completion, however it exited
        if phase == "Succeeded":
            self.succeeded[uid] = completion_index(pod)
        elif policy is not None:
            # With a podFailurePolicy a pod counts once it is terminal (upstream's isPodFailed), by its rules.
            if phase == "Failed" or removed:
                action, message = pod_failure_policy.match(policy, pod)
                if action == pod_failure_policy.Action.IGNORE:
                    self.disregarded.add(uid)
                    return
                self.failed.add(uid)
                if action == pod_failure_policy.Action.FAIL_JOB and not self.fail_job:
                    self.fail_job = message
        elif phase == "Failed" or removed or pod["metadata"].get("deletionTimestamp"):
            self.failed.add(uid)


def completion_index(pod: Obj) -> int | None:
    value = (pod.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_JOB_COMPLETION_INDEX)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _is_active(pod: Obj) -> bool:
    return pod.get("status", {}).get("phase") not in ("Succeeded", "Failed") and not pod["metadata"].get(
        "deletionTimestamp"
    )


def _is_ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in pod.get("status", {}).get("conditions", [])
    )


def format_indexes(indexes: set[int]) -> str:
    """``0-2,4``: the interval notation of ``status.completedIndexes``."""
    parts: list[str] = []
    ordered = sorted(indexes)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


class JobController:
    """Creates and counts the pods of every Job; sets Job status and conditions."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._ledgers: dict[str, _Ledger] = {}
        self.queue: WorkQueue[JobKey] = WorkQueue(COMPONENT, self.reconcile)

    def start(self) -> None:
        """Subscribe to store events and queue every stored Job."""
        self._store.add_listener(self._on_event)
        for job in self._store.list(JOBS)[0]:
            self._ledgers.setdefault(str(job["metadata"]["uid"]), _Ledger())
            self.queue.enqueue((job["metadata"]["namespace"], job["metadata"]["name"]))

    def _on_event(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        if event.rtype == JOBS:
            if event.type == "DELETED":
                self._ledgers.pop(str(meta["uid"]), None)
            else:
                self._ledgers.setdefault(str(meta["uid"]), _Ledger())
                self.queue.enqueue((meta["namespace"], meta["name"]))
        elif event.rtype == PODS:
            self._observe_pod(event.object, removed=event.type == "DELETED")

    def _observe_pod(self, pod: Obj, *, removed: bool) -> None:
        ref = controller_ref(pod)
        if ref is None or ref.get("kind") != "Job":
            return
        ledger = self._ledgers.get(str(ref["uid"]))
        if ledger is None:
            return  # its Job is gone: nothing to count for
        job = self._store.find(JOBS, pod["metadata"]["namespace"], str(ref["name"]))
        ledger.record(pod, removed, _policy(job))
        self.queue.enqueue((pod["metadata"]["namespace"], str(ref["name"])))

    # -- reconcile ---------------------------------------------------------------------------

    def reconcile(self, key: JobKey) -> None:
        namespace, name = key
        job = self._store.find(JOBS, namespace, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return  # the garbage collector takes its pods
        uid = str(job["metadata"]["uid"])
        spec = job.get("spec", {})
        status = copy.deepcopy(job.get("status") or {})
        conditions: list[Obj] = status.setdefault("conditions", [])
        pods = self._store.list(PODS, namespace, lambda p: owned_by(p, uid))[0]  # copies of its own pods only
        ledger = self._ledgers.setdefault(uid, _Ledger())  # pods are only made after this
        for pod in pods:
            ledger.record(pod, policy=_policy(job))
        active = [p for p in pods if _is_active(p)]
        indexed = spec.get("completionMode") == "Indexed"
        events: list[tuple[str, str, str]] = []

        if is_true(conditions, "Complete") or is_true(conditions, "Failed"):
            delete_all(self._store, PODS, active)
            active = []
        else:
            suspended = bool(spec.get("suspend"))
            if not status.get("startTime") and not suspended:
                status["startTime"] = now_rfc3339()  # the first start; a Job created suspended has none yet
            active = self._sync_unfinished(job, status, conditions, pods, active, ledger, indexed, events, suspended)

        succeeded_indexes = {i for i in ledger.succeeded.values() if i is not None}
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if _is_ready(p))
        status["terminating"] = sum(1 for p in pods if p["metadata"].get("deletionTimestamp") and not _is_done(p))
        status["failed"] = len(ledger.failed)
        status["succeeded"] = len(succeeded_indexes) if indexed else len(ledger.succeeded)
        if indexed:
            status["completedIndexes"] = format_indexes(succeeded_indexes)
        status.setdefault("uncountedTerminatedPods", {})
        if not conditions:
            status.pop("conditions")
        self._store.mutate(JOBS, namespace, name, lambda o: o.__setitem__("status", status), subresource="status")
        for event_type, reason, message in events:
            record_event(self._store, job, event_type, reason, message, COMPONENT)

    def _sync_unfinished(
        self,
        job: Obj,
        status: Obj,
        conditions: list[Obj],
        pods: list[Obj],
        active: list[Obj],
        ledger: _Ledger,
        indexed: bool,
        events: list[tuple[str, str, str]],
        suspended: bool,
    ) -> list[Obj]:
        """An unfinished Job: fail it, complete it, suspend it, or create the pods it lacks. Returns the active pods."""
        spec = job.get("spec", {})
        failure = self._failure_reason(job, status, active, ledger, suspended)
        if failure is not None:
            message = (
                ledger.fail_job
                if failure == pod_failure_policy.POD_FAILURE_POLICY_REASON
                else _FAILURE_MESSAGES[failure]
            )
            set_condition(conditions, "Failed", True, failure, message, probe_time=True)
            events.append((WARNING, failure, message))
            delete_all(self._store, PODS, active)
            return []
        if suspended:
            # Upstream deleteJobPods takes the tracking finalizer off first: these pods are never counted.
            for pod in active:
                ledger.ignored.add(str(pod["metadata"]["uid"]))
            delete_all(self._store, PODS, active)
            active = []
        occupying = list(active)
        if _policy(job) is not None:
            # podReplacementPolicy Failed (the default with a podFailurePolicy): a terminating pod is
            # replaced only once it is terminal.
            occupying += [p for p in pods if p["metadata"].get("deletionTimestamp") and not _is_done(p)]
        parallelism = int(spec.get("parallelism", 1))
        completions = spec.get("completions")
        if completions is None and "parallelism" not in spec:
            completions = 1
        if indexed:
            done = {i for i in ledger.succeeded.values() if i is not None}
            total = int(completions or 0)
            complete = len(done & set(range(total))) >= total
            running = {completion_index(p) for p in occupying}
            missing = [i for i in range(total) if i not in done and i not in running]
            to_create: list[int | None] = list(missing[: max(parallelism - len(occupying), 0)])
        else:
            succeeded = len(ledger.succeeded)
            if completions is not None:
                complete = succeeded >= int(completions)
                want = min(parallelism, int(completions) - succeeded)
            else:
                complete = succeeded > 0 and not active
                want = 0 if succeeded > 0 else parallelism
            to_create = [None] * max(want - len(occupying), 0)
        if complete:
            message = "Reached expected number of succeeded pods"
            set_condition(conditions, "SuccessCriteriaMet", True, "CompletionsReached", message, probe_time=True)
            set_condition(conditions, "Complete", True, "CompletionsReached", message, probe_time=True)
            status["completionTime"] = now_rfc3339()
            events.append((NORMAL, "Completed", "Job completed"))
            delete_all(self._store, PODS, active)
            return []
        if suspended:
            if set_condition(conditions, "Suspended", True, "JobSuspended", "Job suspended", probe_time=True):
                events.append((NORMAL, "Suspended", "Job suspended"))
            return []
        if set_condition(conditions, "Suspended", False, "JobResumed", "Job resumed", probe_time=True):
            events.append((NORMAL, "Resumed", "Job resumed"))
            # Upstream: a resumed Job's activeDeadlineSeconds counts from its resume, as for one created suspended.
            status["startTime"] = now_rfc3339()
        for index in to_create:
            try:
                pod = self._store.create(PODS, self._pod_for(job, index))
            except ApiError as err:
                if err.code != 403:
                    raise
                # An admission webhook refused it (JobSet's, while a leader pod is unscheduled): upstream
                # records FailedCreate and tries again; the refusing condition clears on a pod event here.
                events.append((WARNING, "FailedCreate", f"Error creating: {err.message}"))
                break
            active.append(pod)
            events.append((NORMAL, "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}"))
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None and status.get("startTime"):
            left = float(deadline) - _seconds_since(str(status["startTime"]))
            self.queue.enqueue_after((job["metadata"]["namespace"], job["metadata"]["name"]), left + 0.05)
        return active

    def _failure_reason(self, job: Obj, status: Obj, active: list[Obj], ledger: _Ledger, suspended: bool) -> str | None:
        spec = job.get("spec", {})
        if ledger.fail_job:
            return pod_failure_policy.POD_FAILURE_POLICY_REASON
        limit = int(spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT))
        if len(ledger.failed) > limit:
            return BACKOFF_LIMIT_EXCEEDED
        if spec.get("template", {}).get("spec", {}).get("restartPolicy") == "OnFailure":
            restarts = sum(
                int(cs.get("restartCount", 0))
                for pod in active
                if pod.get("status", {}).get("phase") in ("Pending", "Running")
                for cs in [*pod["status"].get("initContainerStatuses", []), *pod["status"].get("containerStatuses", [])]
            )
            if (restarts > 0) if limit == 0 else (restarts >= limit):
                return BACKOFF_LIMIT_EXCEEDED
        deadline = spec.get("activeDeadlineSeconds")
        started = status.get("startTime")
        if deadline is not None and started and not suspended and _seconds_since(str(started)) >= float(deadline):
            return DEADLINE_EXCEEDED
        return None

    # -- pods --------------------------------------------------------------------------------

    def _pod_for(self, job: Obj, index: int | None) -> Obj:
        name = str(job["metadata"]["name"])
        template = copy.deepcopy(job.get("spec", {}).get("template", {}))
        meta = template.get("metadata") or {}
        labels = dict(meta.get("labels") or {})
        annotations = dict(meta.get("annotations") or {})
        spec = template.get("spec") or {}
        if index is None:
            prefix = f"{name}-"
        else:
            labels[LABEL_JOB_COMPLETION_INDEX] = str(index)
            annotations[ANNOTATION_JOB_COMPLETION_INDEX] = str(index)
            prefix = f"{name[: 58 - len(str(index)) - 2]}-{index}-"  # generateName keeps 58 characters
            if not spec.get("hostname"):
                spec["hostname"] = f"{name}-{index}"[:63]
            index_env = {
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION_JOB_COMPLETION_INDEX}']"}},
            }
            for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
                env = container.setdefault("env", [])
                if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in env):
                    env.append(copy.deepcopy(index_env))
        return {
            "metadata": {
                "generateName": prefix,
                "namespace": job["metadata"]["namespace"],
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [owner_reference(job)],
            },
            "spec": spec,
        }


def _policy(job: Obj | None) -> Obj | None:
    policy = (job or {}).get("spec", {}).get("podFailurePolicy")
    return policy if isinstance(policy, dict) else None


def _is_done(pod: Obj) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def _seconds_since(stamp: str) -> float:
    return (datetime.now(UTC) - parse_rfc3339(stamp)).total_seconds()
