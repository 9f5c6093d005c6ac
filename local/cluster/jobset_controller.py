"""The JobSet controller of the local cluster, following kubernetes-sigs/jobset ``pkg/controllers``.

One reconcile per JobSet, in upstream's order: classify child Jobs (previous attempt, active,
succeeded, failed) → ``replicatedJobsStatus`` → if finished, delete active children → delete
the previous attempt's Jobs (foreground) → failure policy → success policy → create missing
Jobs (Recreate: each as soon as its predecessor is gone; BlockingRecreate: once all are gone)
→ suspend/resume. Conditions, reasons, messages and Warning Events are upstream's.

Not implemented: ``RestartJob*`` actions (feature-gated off upstream; treated as
``RestartJobSet``), ``InPlaceRestart``, ``dependsOn``, headless Services, volume claim policies,
exclusive placement, ``onJobFailureMessagePatterns`` beyond Python ``re`` syntax.
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from elastic_training.local.cluster.conditions import find_condition, is_true, set_condition
from elastic_training.local.cluster.events import NORMAL, WARNING, record_event
from elastic_training.local.cluster.jobset_placement import ANNOTATION_NODE_SELECTOR_STRATEGY
from elastic_training.local.cluster.owners import controller_ref, delete_all, owned_by, owner_reference
from elastic_training.local.cluster.resources import JOBS, JOBSETS, ApiError
from elastic_training.local.cluster.store import Obj, Store, WatchEvent
from elastic_training.local.cluster.workqueue import WorkQueue
from elastic_training.local.nodeagent.logs import parse_rfc3339
from elastic_training.operators.constants import (
    ANNOTATION_COORDINATOR,
    ANNOTATION_EXCLUSIVE_TOPOLOGY,
    LABEL_GLOBAL_REPLICAS,
    LABEL_GROUP_NAME,
    LABEL_GROUP_REPLICAS,
    LABEL_JOB_GLOBAL_INDEX,
    LABEL_JOB_GROUP_INDEX,
    LABEL_JOB_INDEX,
    LABEL_JOB_KEY,
    LABEL_JOBSET_NAME,
    LABEL_JOBSET_UID,
    LABEL_REPLICATED_JOB_NAME,
    LABEL_REPLICATED_JOB_REPLICAS,
    LABEL_RESTART_ATTEMPT,
)

COMPONENT = "jobset-controller"
CONTROLLER_NAME = "jobset.sigs.k8s.io/jobset-controller"

# Condition types, reasons and messages (jobset pkg/constants).
COMPLETED, FAILED, SUSPENDED, RESTARTING = "Completed", "Failed", "Suspended", "RestartingJobSet"
STARTUP_IN_PROGRESS, STARTUP_COMPLETED = "StartupPolicyInProgress", "StartupPolicyCompleted"
ALL_JOBS_COMPLETED = ("AllJobsCompleted", "jobset completed successfully")
FAILED_JOBS = ("FailedJobs", "jobset failed due to one or more job failures")
REACHED_MAX_RESTARTS = ("ReachedMaxRestarts", "jobset failed due to reaching max number of restarts")
FAIL_JOBSET_ACTION = ("FailJobSetFailurePolicyAction", "applying FailJobSet failure policy action")
RESTART_ACTION = ("RestartJobSetFailurePolicyAction", "applying RestartJobSet failure policy action")
RESTART_IGNORE_MAX_ACTION = (
    "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction",
    "applying RestartJobSetAndIgnoreMaxRestarts failure policy action",
)
SUSPENDED_JOBS = ("SuspendedJobs", "jobset is suspended")
RESUMED_JOBS = ("ResumeJobs", "jobset is resumed")
STARTUP_IN_PROGRESS_REASON = ("InOrderStartupPolicyInProgress", "in order startup policy is in progress")
STARTUP_COMPLETED_REASON = ("InOrderStartupPolicyCompleted", "in order startup policy has completed")

JobSetKey = tuple[str, str]


@dataclass
class ChildJobs:
    """The JobSet's Jobs, bucketed as upstream's ``getChildJobs`` does."""

    previous: list[Obj] = field(default_factory=list)
    active: list[Obj] = field(default_factory=list)
    successful: list[Obj] = field(default_factory=list)
    failed: list[Obj] = field(default_factory=list)

    def names(self) -> set[str]:
        return {j["metadata"]["name"] for j in [*self.previous, *self.active, *self.successful, *self.failed]}


@dataclass
class _Pass:
    """What one reconcile decided: the new status and the Events to record after writing it."""

    status: Obj
    events: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def conditions(self) -> list[Obj]:
        conditions: list[Obj] = self.status.setdefault("conditions", [])
        return conditions

    def condition(self, kind: str, status: bool, reason_message: tuple[str, str], event_type: str = NORMAL) -> None:
        reason, message = reason_message
        if set_condition(self.conditions, kind, status, reason, message):
            self.events.append((event_type, reason, message))

    def fail(self, reason_message: tuple[str, str]) -> None:
        self.condition(FAILED, True, reason_message, WARNING)
        self.condition(RESTARTING, False, ("JobSetFailed", "jobset failed"))
        self.status["terminalState"] = FAILED

    def complete(self) -> None:
        self.condition(COMPLETED, True, ALL_JOBS_COMPLETED)
        self.condition(RESTARTING, False, ("JobSetCompleted", ALL_JOBS_COMPLETED[1]))
        self.status["terminalState"] = COMPLETED


def job_name(jobset: str, rjob: str, index: int) -> str:
    return f"{jobset}-{rjob}-{index}"


def with_first_failed_job(message: str, job: str) -> str:
    return f"{message} (first failed job: {job})"


def job_finished(job: Obj) -> str:
    """``Complete``, ``Failed`` or ``""`` (still active)."""
    conditions = job.get("status", {}).get("conditions") or []
    for kind in ("Complete", "Failed"):
        if is_true(conditions, kind):
            return kind
    return ""


def _failure_time(job: Obj) -> datetime:
    found = find_condition(job.get("status", {}).get("conditions") or [], "Failed")
    stamp = (found or {}).get("lastTransitionTime")
    return parse_rfc3339(stamp) if stamp else datetime.max.replace(tzinfo=UTC)


def _failure(job: Obj) -> tuple[str, str]:
    found = find_condition(job.get("status", {}).get("conditions") or [], "Failed") or {}
    return str(found.get("reason", "")), str(found.get("message", ""))


def first_failed(jobs: list[Obj]) -> Obj:
    return min(jobs, key=lambda j: (_failure_time(j), j["metadata"]["name"]))


def rule_applies(rule: Obj, job: Obj) -> bool:
    reason, message = _failure(job)
    reasons = rule.get("onJobFailureReasons") or []
    if reasons and reason not in reasons:
        return False
    patterns = rule.get("onJobFailureMessagePatterns") or []
    if patterns and not any(_search(p, message) for p in patterns):
        return False
    targets = rule.get("targetReplicatedJobs") or []
    parent = (job["metadata"].get("labels") or {}).get(LABEL_REPLICATED_JOB_NAME)
    if parent is None:
        return False
    return not targets or parent in targets


def _search(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return False


class JobSetController:
    """Reconciles JobSets into child Jobs and JobSet status."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.queue: WorkQueue[JobSetKey] = WorkQueue(COMPONENT, self.reconcile)

    def start(self) -> None:
        """Subscribe to store events and queue every stored JobSet."""
        self._store.add_listener(self._on_event)
        for jobset in self._store.list(JOBSETS)[0]:
            self.queue.enqueue((jobset["metadata"]["namespace"], jobset["metadata"]["name"]))

    def _on_event(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        if event.rtype == JOBSETS and event.type != "DELETED":
            self.queue.enqueue((meta["namespace"], meta["name"]))
        elif event.rtype == JOBS:
            ref = controller_ref(event.object)
            if ref is not None and ref.get("kind") == "JobSet":
                self.queue.enqueue((meta["namespace"], str(ref["name"])))

    # -- reconcile ---------------------------------------------------------------------------

    def reconcile(self, key: JobSetKey) -> None:
        namespace, name = key
        js = self._store.find(JOBSETS, namespace, name)
        if js is None or js["metadata"].get("deletionTimestamp"):
            return
        spec = js.get("spec", {})
        if spec.get("managedBy") not in (None, "", CONTROLLER_NAME):
            return
        step = _Pass(copy.deepcopy(js.get("status") or {}))
        step.status.setdefault("restarts", 0)
        step.status.setdefault("restartsCountTowardsMax", 0)
        jobs = self._child_jobs(js, int(step.status["restarts"]))
        step.status["replicatedJobsStatus"] = replicated_jobs_status(js, jobs)
        self._decide(js, jobs, step)
        if not step.conditions:
            step.status.pop("conditions")
        status = step.status
        self._store.mutate(JOBSETS, namespace, name, lambda o: o.__setitem__("status", status), subresource="status")
        for event_type, reason, message in step.events:
            record_event(self._store, js, event_type, reason, message, COMPONENT)

    def _decide(self, js: Obj, jobs: ChildJobs, step: _Pass) -> None:
        conditions = step.conditions
        if is_true(conditions, COMPLETED) or is_true(conditions, FAILED):
            delete_all(self._store, JOBS, jobs.active, "Foreground")
            self._expire_if_due(js, conditions)
            return
        delete_all(self._store, JOBS, jobs.previous, "Foreground")
        suspended = bool(js.get("spec", {}).get("suspend"))
        if not suspended and all_jobs_ready(js, step.status["replicatedJobsStatus"]):
            step.condition(RESTARTING, False, ("JobsReady", "all jobs are ready"))
        if jobs.failed:
            self._apply_failure_policy(js, jobs, step)
            return
        if jobs.successful and success_policy_met(js, jobs.successful):
            step.complete()
            return
        self._create_jobs(js, jobs, step)
        if suspended:
            for job in jobs.active:
                self._set_job_suspend(job, True)
            step.condition(SUSPENDED, True, SUSPENDED_JOBS)
            step.condition(RESTARTING, False, ("JobSetSuspended", SUSPENDED_JOBS[1]))
        else:
            templates = {r["name"]: r.get("template") or {} for r in js.get("spec", {}).get("replicatedJobs") or []}
            for job in jobs.active:
                parent = (job["metadata"].get("labels") or {}).get(LABEL_REPLICATED_JOB_NAME, "")
                self._set_job_suspend(job, False, templates.get(parent))
            step.condition(SUSPENDED, False, RESUMED_JOBS)

    def _child_jobs(self, js: Obj, restarts: int) -> ChildJobs:
        uid = str(js["metadata"]["uid"])
        jobs = ChildJobs()
        # Only the JobSet's own Jobs are copied (upstream lists them through a field index on the owner).
        for job in self._store.list(JOBS, js["metadata"]["namespace"], lambda job: owned_by(job, uid))[0]:
            try:
                attempt = int((job["metadata"].get("labels") or {}).get(LABEL_RESTART_ATTEMPT, ""))
            except ValueError:
                attempt = -1
            if attempt < restarts:
                jobs.previous.append(job)
                continue
            bucket = {"": jobs.active, "Complete": jobs.successful, "Failed": jobs.failed}[job_finished(job)]
            bucket.append(job)
        return jobs

    # -- failure policy ----------------------------------------------------------------------

    def _apply_failure_policy(self, js: Obj, jobs: ChildJobs, step: _Pass) -> None:
        policy = js.get("spec", {}).get("failurePolicy")
        if policy is None:
            failed = first_failed(jobs.failed)
            step.fail((FAILED_JOBS[0], with_first_failed_job(FAILED_JOBS[1], failed["metadata"]["name"])))
            return
        rule, job = None, None
        for candidate in policy.get("rules") or []:
            matching = [j for j in jobs.failed if rule_applies(candidate, j)]
            if matching:
                rule, job = candidate, first_failed(matching)
                break
        if job is None:
            job = first_failed(jobs.failed)
        action = str(rule.get("action", "RestartJobSet")) if rule else "RestartJobSet"
        failed_name = job["metadata"]["name"]
        if action == "FailJobSet":
            step.fail((FAIL_JOBSET_ACTION[0], with_first_failed_job(FAIL_JOBSET_ACTION[1], failed_name)))
            return
        counts = action not in ("RestartJobSetAndIgnoreMaxRestarts", "RestartJobAndIgnoreMaxRestarts")
        if counts and int(step.status["restartsCountTowardsMax"]) >= int(policy.get("maxRestarts", 0)):
            step.fail((REACHED_MAX_RESTARTS[0], with_first_failed_job(REACHED_MAX_RESTARTS[1], failed_name)))
            return
        event_reason, base = RESTART_ACTION if counts else RESTART_IGNORE_MAX_ACTION
        message = with_first_failed_job(base, failed_name)
        step.status["restarts"] = int(step.status["restarts"]) + 1
        if counts:
            step.status["restartsCountTowardsMax"] = int(step.status["restartsCountTowardsMax"]) + 1
        reason = f"FailurePolicy_{rule.get('name', '')}" if rule else "DefaultFailurePolicy"
        step.condition(RESTARTING, True, (reason, message), WARNING)
        step.events.append((WARNING, event_reason, message))

    # -- creating, suspending, deleting Jobs -------------------------------------------------

    def _create_jobs(self, js: Obj, jobs: ChildJobs, step: _Pass) -> None:
        spec = js.get("spec", {})
        blocking = (spec.get("failurePolicy") or {}).get("restartStrategy") == "BlockingRecreate"
        if jobs.previous and blocking:
            return
        in_order = (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
        suspended = bool(spec.get("suspend"))
        existing = jobs.names()
        statuses = {s["name"]: s for s in step.status["replicatedJobsStatus"]}
        for rjob in spec.get("replicatedJobs") or []:
            replicas = int(rjob.get("replicas", 1))
            if in_order and not suspended:
                rstatus = statuses.get(rjob["name"], {})
                if rstatus.get("ready", 0) + rstatus.get("succeeded", 0) + rstatus.get("failed", 0) >= replicas:
                    continue
            for index in range(replicas):
                if job_name(js["metadata"]["name"], rjob["name"], index) in existing:
                    continue
                try:
                    self._store.create(JOBS, build_job(js, rjob, index, int(step.status["restarts"])))
                except ApiError as err:
                    if err.code != 409:  # still being deleted: its DELETED event brings us back
                        step.events.append((WARNING, "JobCreationFailed", err.message))
            if in_order and not suspended:
                step.condition(STARTUP_IN_PROGRESS, True, STARTUP_IN_PROGRESS_REASON)
                return
        if in_order and not suspended:
            step.condition(STARTUP_IN_PROGRESS, False, STARTUP_IN_PROGRESS_REASON)
            step.condition(STARTUP_COMPLETED, True, STARTUP_COMPLETED_REASON)

    def _set_job_suspend(self, job: Obj, suspend: bool, template: Obj | None = None) -> None:
        if bool(job.get("spec", {}).get("suspend")) == suspend or job["metadata"].get("deletionTimestamp"):
            return
        meta = job["metadata"]
        if not suspend and (job.get("status") or {}).get("startTime"):
            # Upstream resumeJob: the API lets a suspended Job's scheduling directives change only while it has no
            # startTime (the Job controller keeps it across a suspension), so JobSet clears it first.
            self._store.mutate(
                JOBS,
                meta["namespace"],
                meta["name"],
                lambda o: o["status"].pop("startTime", None),
                subresource="status",
            )

        def change(obj: Obj) -> None:
            obj["spec"]["suspend"] = suspend
            if not suspend and template is not None:
                merge_suspended_mutable_fields(obj, template)

        self._store.mutate(JOBS, meta["namespace"], meta["name"], change)

    def _expire_if_due(self, js: Obj, conditions: list[Obj]) -> None:
        ttl = js.get("spec", {}).get("ttlSecondsAfterFinished")
        if ttl is None:
            return
        finished = find_condition(conditions, COMPLETED) if is_true(conditions, COMPLETED) else None
        finished = finished or find_condition(conditions, FAILED) or {}
        stamp = finished.get("lastTransitionTime")
        elapsed = (datetime.now(UTC) - parse_rfc3339(stamp)).total_seconds() if stamp else 0.0
        meta = js["metadata"]
        if elapsed >= float(ttl):
            self._store.delete(JOBSETS, meta["namespace"], meta["name"], propagation_policy="Foreground")
        else:
            self.queue.enqueue_after((meta["namespace"], meta["name"]), float(ttl) - elapsed + 0.05)


# -- pure helpers ------------------------------------------------------------------------------


def replicated_jobs_status(js: Obj, jobs: ChildJobs) -> list[Obj]:
    """``status.replicatedJobsStatus`` in spec order (upstream ``calculateReplicatedJobStatuses``)."""
    counts: dict[str, dict[str, Any]] = {}
    for rjob in js.get("spec", {}).get("replicatedJobs") or []:
        counts[rjob["name"]] = {"name": rjob["name"], "ready": 0, "succeeded": 0, "failed": 0, "active": 0}
        counts[rjob["name"]]["suspended"] = 0

    def entry(job: Obj) -> dict[str, Any] | None:
        return counts.get((job["metadata"].get("labels") or {}).get(LABEL_REPLICATED_JOB_NAME, ""))

    for job in jobs.active:
        found = entry(job)
        if found is None:
            continue
        jspec, jstatus = job.get("spec", {}), job.get("status", {})
        pods = int(jspec.get("parallelism", 1))
        if jspec.get("completions") is not None:
            pods = min(pods, int(jspec["completions"]))
        if int(jstatus.get("succeeded", 0)) + int(jstatus.get("ready", 0)) >= pods:
            found["ready"] += 1
        if int(jstatus.get("active", 0)) > 0:
            found["active"] += 1
        if jspec.get("suspend"):
            found["suspended"] += 1
    for bucket, kind in ((jobs.successful, "succeeded"), (jobs.failed, "failed")):
        for job in bucket:
            found = entry(job)
            if found is not None:
                found[kind] += 1
    return list(counts.values())


def all_jobs_ready(js: Obj, statuses: list[Obj]) -> bool:
    total = sum(int(r.get("replicas", 1)) for r in js.get("spec", {}).get("replicatedJobs") or [])
    return total == sum(int(s["ready"]) + int(s["succeeded"]) for s in statuses)


def success_policy_met(js: Obj, successful: list[Obj]) -> bool:
    """Upstream ``executeSuccessPolicy``: All → every targeted Job succeeded; Any → one did."""
    policy = js.get("spec", {}).get("successPolicy") or {}
    targets = policy.get("targetReplicatedJobs") or []

    def targeted(rjob_name: str) -> bool:
        return not targets or rjob_name in targets

    matching = sum(
        1 for job in successful if targeted((job["metadata"].get("labels") or {}).get(LABEL_REPLICATED_JOB_NAME, ""))
    )
    if policy.get("operator", "All") == "Any":
        return matching >= 1
    expected = sum(
        int(r.get("replicas", 1)) for r in js.get("spec", {}).get("replicatedJobs") or [] if targeted(r["name"])
    )
    return matching >= expected


def merge_suspended_mutable_fields(job: Obj, rjob_template: Obj) -> None:
    """Upstream ``resumeJob``: the pod template fields Kueue may change while the JobSet is suspended (labels,
    annotations, node selector, tolerations, scheduling gates) are merged into the child Job on resume."""
    source = ((rjob_template.get("spec") or {}).get("template")) or {}
    target = job.setdefault("spec", {}).setdefault("template", {})
    source_meta, target_meta = source.get("metadata") or {}, target.setdefault("metadata", {})
    for key in ("labels", "annotations"):
        merged = {**(target_meta.get(key) or {}), **(source_meta.get(key) or {})}
        if merged:
            target_meta[key] = merged
    source_spec, target_spec = source.get("spec") or {}, target.setdefault("spec", {})
    selector = {**(target_spec.get("nodeSelector") or {}), **(source_spec.get("nodeSelector") or {})}
    if selector:
        target_spec["nodeSelector"] = selector
    for key in ("tolerations", "schedulingGates"):
        merged_list = list(target_spec.get(key) or [])
        for item in source_spec.get(key) or []:
            if item not in merged_list:
                merged_list.append(copy.deepcopy(item))
        if merged_list:
            target_spec[key] = merged_list


def subdomain(js: Obj) -> str:
    network = js.get("spec", {}).get("network") or {}
    return str(network.get("subdomain") or js["metadata"]["name"])


def coordinator_endpoint(js: Obj) -> str | None:
    coordinator = js.get("spec", {}).get("coordinator")
    if not coordinator:
        return None
    return (
        f"{js['metadata']['name']}-{coordinator['replicatedJob']}-{int(coordinator.get('jobIndex', 0))}-"
        f"{int(coordinator.get('podIndex', 0))}.{subdomain(js)}"
    )


def jobset_labels(js: Obj, rjob: Obj, index: int, restarts: int) -> dict[str, str]:
    """The labels (and, identically, annotations) upstream's ``labelAndAnnotateObject`` stamps."""
    name = js["metadata"]["name"]
    namespace = js["metadata"].get("namespace", "default")
    rjobs = js.get("spec", {}).get("replicatedJobs") or []
    group = str(rjob.get("groupName") or "default")
    global_index = group_index = 0
    for other in rjobs:
        if other["name"] == rjob["name"]:
            break
        global_index += int(other.get("replicas", 1))
        if str(other.get("groupName") or "default") == group:
            group_index += int(other.get("replicas", 1))
    child = job_name(name, rjob["name"], index)
    labels = {
        LABEL_JOBSET_NAME: name,
        LABEL_JOBSET_UID: str(js["metadata"]["uid"]),
        LABEL_REPLICATED_JOB_NAME: rjob["name"],
        LABEL_RESTART_ATTEMPT: str(restarts),
        LABEL_REPLICATED_JOB_REPLICAS: str(int(rjob.get("replicas", 1))),
        LABEL_GLOBAL_REPLICAS: str(sum(int(r.get("replicas", 1)) for r in rjobs)),
        LABEL_JOB_INDEX: str(index),
        LABEL_JOB_KEY: hashlib.sha1(f"{namespace}/{child}".encode()).hexdigest(),
        LABEL_JOB_GLOBAL_INDEX: str(global_index + index),
        LABEL_GROUP_NAME: group,
        LABEL_GROUP_REPLICAS: str(
            sum(int(r.get("replicas", 1)) for r in rjobs if str(r.get("groupName") or "default") == group)
        ),
        LABEL_JOB_GROUP_INDEX: str(group_index + index),
    }
    endpoint = coordinator_endpoint(js)
    if endpoint is not None:
        labels[ANNOTATION_COORDINATOR] = endpoint
    return labels


def placement_annotations(js: Obj, rjob: Obj) -> dict[str, str]:
    """Exclusive placement's annotations, from the JobSet, overridden by the replicated job's template
    (upstream ``labelAndAnnotateObject``); the pod webhook (:mod:`local.cluster.jobset_placement`) acts on them."""
    out: dict[str, str] = {}
    for source in (
        js.get("metadata", {}).get("annotations") or {},
        (rjob.get("template") or {}).get("metadata", {}).get("annotations") or {},
    ):
        if ANNOTATION_EXCLUSIVE_TOPOLOGY in source:
            out[ANNOTATION_EXCLUSIVE_TOPOLOGY] = str(source[ANNOTATION_EXCLUSIVE_TOPOLOGY])
            if ANNOTATION_NODE_SELECTOR_STRATEGY in source:
                out[ANNOTATION_NODE_SELECTOR_STRATEGY] = str(source[ANNOTATION_NODE_SELECTOR_STRATEGY])
    return out


def build_job(js: Obj, rjob: Obj, index: int, restarts: int) -> Obj:
    """The child Job ``<jobset>-<replicatedJob>-<index>`` for one restart attempt."""
    template = copy.deepcopy(rjob.get("template") or {})
    stamped = jobset_labels(js, rjob, index, restarts)
    annotated = {**stamped, **placement_annotations(js, rjob)}
    meta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    pod_template = spec.setdefault("template", {})
    pod_meta = pod_template.setdefault("metadata", {})
    pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **stamped}
    pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}), **annotated}
    network = js.get("spec", {}).get("network") or {}
    if network.get("enableDNSHostnames"):
        pod_template.setdefault("spec", {})["subdomain"] = subdomain(js)
    spec["suspend"] = bool(js.get("spec", {}).get("suspend"))
    return {
        "metadata": {
            "name": job_name(js["metadata"]["name"], rjob["name"], index),
            "namespace": js["metadata"]["namespace"],
            "labels": {**(meta.get("labels") or {}), **stamped},
            "annotations": {**(meta.get("annotations") or {}), **annotated},
            "ownerReferences": [owner_reference(js)],
        },
        "spec": spec,
    }
