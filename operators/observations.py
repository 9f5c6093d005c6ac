"""What the trigger sees of one JobSet incarnation, folded into a small serialisable state. Pure.

The cluster is the source of truth; this module turns its objects into the facts the policy needs
(docs/architecture.md §4):

- the JobSet's phase from ``status.terminalState`` and its ``Completed``/``Failed`` conditions
  (kubernetes-sigs/jobset sets both; the reason of ``Failed`` is ``FailedJobs``,
  ``ReachedMaxRestarts`` or ``FailJobSetFailurePolicyAction``), its suspension (``spec.suspend`` and the
  ``Suspended`` condition: Kueue holds it, :mod:`operators.queueing`), and ``status.restarts``;
- the Kueue Workload of a JobSet with a queue label: pending (and Kueue's reason), admitted, evicted, deactivated, or
  in no queue. A suspension before any admission is queue time; one after an admission is a preemption, or another
  kind of eviction (:class:`operators.queueing.EvictionKind`, from the Workload's ``Evicted`` reason: a PodsReady
  timeout, a stopped queue, ...), which the policy judges by its kind and which
  :meth:`MonitorState.pods_ready_evictions` counts over the run. None is a failure: the pods Kueue's suspension
  deletes (they terminate normally) are no slice failures, nor are the failures a suspended worker Job counts;
- slice restarts by ``job-index``, counted in slices, not pods, and dated by Kubernetes' own clock
  (:mod:`operators.slice_failures` says how): every worker pod failure is one record, keyed by what it
  is (the pod's uid and its ``restartCount`` for an in-place restart under ``restartPolicy: OnFailure``;
  the pod's uid for a pod that failed or was deleted before it finished). A worker Job's ``status.failed``
  (what its ``backoffLimit`` is checked against; upstream's pod-tracking finalizers count a deleted pod too)
  above the records of its pods means pods went while no trigger watched: each such failure is dated at the
  creation of that Job's newest known pod (its replacement), or when the Job failed (its ``FailureTarget``
  or ``Failed`` condition's ``lastTransitionTime``) if later, else at the Job's creation. Pods of a Job
  deleted after its ``deletionTimestamp`` (a JobSet restart or teardown deletes Jobs in the foreground) are
  no failures; its ``status.failed`` is frozen once deletion started (a finished Job's counters no longer
  move upstream), and of the pods gone in that same second (the failure that failed the Job, and teardown)
  only as many as that counter holds count. Slice restarts stay
  invisible at JobSet level while they are within the ``backoffLimit``;
- the head pod (``pathways-head``), whose log the trigger follows, and whether its trainer refused
  its configuration (exit code 2, or MaxText's ``MAXTEXT CONFIG ERROR:`` line in its log, since real MaxText
  exits 1 on it: a restart cannot help);
- the trainer's log, folded by :class:`operators.recovery.LogDigest`.

Records are keyed, and the counts are recomputed from them after every change, so a trigger rebuilt from
its serialized kwargs (the state as of its deferral) and a fresh look at the cluster neither loses, nor
double-counts, nor re-dates a restart, whatever order the watches deliver objects in. The state is versioned
(:data:`STATE_VERSION`); a state written before versions existed (counters per Job and pod, restart times
stamped when first seen) is read as it was counted: its restarts stay as they were, and only failures above
its counters are new.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from elastic_training.operators.constants import (
    HEAD_MAIN_CONTAINER,
    HEAD_REPLICATED_JOB,
    LABEL_GKE_NODEPOOL,
    LABEL_JOB_INDEX,
    LABEL_REPLICATED_JOB_NAME,
    WORKER_REPLICATED_JOB,
)
from elastic_training.operators.failure_history import CONTAINER_STATUS_UNKNOWN, DELETED, SliceFailure, kind_of
from elastic_training.operators.failure_history import FailureKind as HistoryKind
from elastic_training.operators.policy import JobSetPhase, Observation, QueueWait, RunPhase
from elastic_training.operators.queueing import (
    EvictionKind,
    QueueState,
    WorkloadStatus,
    is_queued_jobset,
    jobset_suspension,
    workload_status,
)
from elastic_training.operators.recovery import PREEMPTION, LogDigest
from elastic_training.operators.slice_failures import (
    FailureKind,
    PodFailure,
    SliceEpisode,
    disruption,
    gone_time,
    group_episodes,
    is_eviction,
    lost_containers,
    parse_time,
    restart_time,
    running_since,
)

Obj = Mapping[str, Any]

__all__ = ["MonitorState", "jobset_phase", "normalize_timestamp", "parse_time"]

# Trainer exit codes a restart cannot mend: 2 is an invalid configuration (the local trainer's `Invalid config`,
# and MaxText's only when no test framework is loaded; MaxText 0.2.5's trainer always loads unittest and exits 1,
# so its refusal is read from its log: LogDigest.config_error).
PERMANENT_EXIT_CODES = frozenset({2})
STATE_VERSION = 2
MAX_RESTART_TIMES_KEPT = 1000
MAX_FAILURES_KEPT = 512  # pod failure records; older episodes fold into totals past this
MAX_POOLS_SEEN = 256
# A suspended JobSet whose Workload is missing (or neither pending nor admitted) this long is in no queue: Kueue
# creates the Workload within moments of the JobSet, so a shorter absence is the watches' order, not kueue #14811.
NOT_QUEUED_GRACE_SECONDS = 30.0
# A Workload pending with words no wait can change (queueing.never_fits) this long can never be admitted as asked: the
# grace lets an admin's edit of the ClusterQueue being applied (or a flavor being created) reach Kueue's next pass.
NEVER_FITS_GRACE_SECONDS = 30.0
KUEUE_UNSERVED = (
    "the cluster serves no kueue.x-k8s.io/v1beta2 Workloads (404: Kueue older than v0.15, or none installed): "
    "admission is read from the JobSet's suspension alone, without Kueue's reason (docs/deploy.md, Kueue versions)"
)


def normalize_timestamp(value: str) -> str | None:
    """An RFC 3339 UTC timestamp with exactly nine fraction digits, so that strings order as times.

    The kubelet writes ``RFC3339Nano``, which drops trailing zeros (``…:05.1Z`` after ``…:05.123Z``).
    """
    text = value.strip()
    if not text.endswith("Z"):
        return None
    head, dot, fraction = text[:-1].partition(".")
    if len(head) != 19 or (dot and not fraction.isdigit()) or len(fraction) > 9:
        return None
    return f"{head}.{fraction.ljust(9, '0')}Z"


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _status(obj: Obj) -> Obj:
    status = obj.get("status")
    return status if isinstance(status, Mapping) else {}


def jobset_phase(jobset: Obj | None) -> tuple[JobSetPhase, str]:
    """The JobSet's phase and, when it ended, the reason and message of its terminal condition.

    Not ended and suspended (``spec.suspend``, or its ``Suspended`` condition true): ``SUSPENDED``.
    """
    if jobset is None:
        return JobSetPhase.MISSING, ""
    status = _status(jobset)
    true = _true_conditions(jobset)
    terminal = str(status.get("terminalState") or "")
    for phase, kind in ((JobSetPhase.FAILED, "Failed"), (JobSetPhase.COMPLETED, "Completed")):
        if terminal == kind or kind in true:
            condition = true.get(kind, {})
            detail = ": ".join(str(p) for p in (condition.get("reason"), condition.get("message")) if p)
            return phase, detail
    if jobset_suspension(jobset)[0]:
        return JobSetPhase.SUSPENDED, ""
    return JobSetPhase.ACTIVE, ""


def jobset_ended_at(jobset: Obj | None) -> float | None:
    """When the JobSet ended, as Kubernetes stamps it: its true ``Completed`` or ``Failed`` condition's
    ``lastTransitionTime`` (whole seconds); ``None`` while it has not ended or carries no such time."""
    true = _true_conditions(jobset or {})
    ended = true.get("Failed") or true.get("Completed")  # as jobset_phase: Failed first
    return None if ended is None else parse_time(ended.get("lastTransitionTime"))


def _true_conditions(obj: Obj) -> dict[str, Obj]:
    """``obj``'s conditions whose status is ``True``, by type."""
    conditions = [c for c in _status(obj).get("conditions") or [] if isinstance(c, Mapping)]
    return {str(c.get("type")): c for c in conditions if str(c.get("status")) == "True"}


def _slice_index(labels: Mapping[str, Any]) -> int | None:
    try:
        return int(str(labels.get(LABEL_JOB_INDEX, "")))
    except ValueError:
        return None


def _undisrupted_reason(pod: Obj, phase: object) -> str:
    """A gone pod's reason when it has no ``DisruptionTarget``: its containers lost with their host, deleted
    before it finished, or ``""`` (its container failed)."""
    if phase != "Failed":
        return DELETED
    return CONTAINER_STATUS_UNKNOWN if lost_containers(pod) else ""


def _restart_count(pod: Obj) -> int:
    statuses = _status(pod).get("containerStatuses") or []
    return sum(int(s.get("restartCount") or 0) for s in statuses if isinstance(s, Mapping))


def _exit_code(pod: Obj, container: str) -> int | None:
    for status in _status(pod).get("containerStatuses") or []:
        if isinstance(status, Mapping) and status.get("name") == container:
            terminated = (status.get("state") or {}).get("terminated") or {}
            code = terminated.get("exitCode")
            return int(code) if code is not None else None
    return None


def _owner_uid(meta: Obj) -> str:
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") == "Job" and ref.get("controller", True):
            return str(ref.get("uid") or "")
    return ""


@dataclass
class WorkerJob:
    """One worker Job (one slice of one JobSet attempt) as last seen.

    ``failed``: its ``status.failed``, frozen once its deletion started; ``counted_before``: failures a
    state written before :data:`STATE_VERSION` had already counted; ``folded``: failures of its pods whose
    records were folded into the totals; ``size``: ``spec.completions``, the pods of a whole slice.
    """

    slice: int
    failed: int = 0
    counted_before: int = 0
    folded: int = 0
    size: int = 1
    created: float | None = None
    deleting_at: float | None = None
    gone: bool = False  # missing from a relist
    failed_at: float | None = None  # its FailureTarget or Failed condition's lastTransitionTime
    suspended_failed: int = 0  # of `failed`, those counted while it (or its JobSet) was suspended: no failures


@dataclass
class WorkerPod:
    """One worker pod as last seen: its Job, the restarts recorded, and since when all its containers run."""

    slice: int
    job: str = ""
    restarts: int = 0
    created: float | None = None
    running_since: float | None = None


@dataclass
class MonitorState:
    """Everything the trigger knows about one incarnation; JSON round-trips through kwargs and events.

    ``slice_restarts``, ``slice_restarts_by_slice``, ``slice_restart_times`` (episode starts, Kubernetes
    time), ``slice_evictions`` and ``slice_evictions_by_slice`` are derived from the records after every
    change; they are serialised for readers and recomputed on load.
    """

    version: int = STATE_VERSION
    jobset_uid: str | None = None
    started_at: float = 0.0
    phase: JobSetPhase = JobSetPhase.ACTIVE
    failure_detail: str = ""
    permanent: bool = False
    jobset_restarts: int = 0
    jobs: dict[str, WorkerJob] = field(default_factory=dict)
    pods: dict[str, WorkerPod] = field(default_factory=dict)
    failures: dict[str, PodFailure] = field(default_factory=dict)
    # restarts and evictions no longer held as records: counted by an older state, or folded past the bound
    earlier_restarts: int = 0
    earlier_restart_times: list[float] = field(default_factory=list)
    earlier_restarts_by_slice: dict[str, int] = field(default_factory=dict)
    earlier_evictions: int = 0
    earlier_evictions_by_slice: dict[str, int] = field(default_factory=dict)
    slice_restart_times: list[float] = field(default_factory=list)
    slice_restarts: int = 0
    slice_restarts_by_slice: dict[str, int] = field(default_factory=dict)
    slice_evictions: int = 0
    slice_evictions_by_slice: dict[str, int] = field(default_factory=dict)
    head_pod: str | None = None
    head_pod_uid: str | None = None
    log_cursor: str | None = None  # RFC 3339 time of the last head-pod log line folded
    log_cursor_pod_uid: str | None = None
    digest: LogDigest = field(default_factory=LogDigest)
    queue_managed: bool = False  # the JobSet carries the kueue.x-k8s.io/queue-name label
    queue_state: str = QueueState.NONE.value
    queue_state_since: float | None = None
    queue_reason: str = ""  # Kueue's words on the Workload (QuotaReserved=False, Evicted, ...)
    provisioning_said: str = ""  # the last admission check outcome: "admission check dws-prov Rejected: ..."
    kueue_unserved: bool = False  # the cluster answers 404 for kueue.x-k8s.io/v1beta2 Workloads
    queue_eviction: str = ""  # the kind of the Workload's eviction in force (EvictionKind), "" when none
    queue_evicted: str = ""  # its Evicted condition's reason and message, while it holds
    queue_requeue_at: float | None = None  # the end of Kueue's requeuing backoff (requeueState.requeueAt)
    queue_never_fits: str = ""  # the pod set Kueue can never admit as its ClusterQueue stands, and Kueue's words
    queue_never_fits_since: float | None = None  # since when Kueue has said so without a break
    # PodsReady-timeout evictions of the run's earlier incarnations (set by the operator before each wait), so the
    # limit max_pods_ready_evictions spans the run, not one JobSet.
    earlier_pods_ready_evictions: int = 0
    trainer_up_since: float | None = None  # the head's trainer container runs since (Kubernetes' time)
    # worker Job uid -> the GKE node pool its pods run on now: a follower pod's nodeSelector, which JobSet's
    # exclusive placement sets to the leader's pool (a Job's pods may move to another pool after a failure)
    job_pools: dict[str, str] = field(default_factory=dict)
    pools_seen: list[str] = field(default_factory=list)  # every pool this incarnation's slices ran on
    # when the JobSet ended (its terminal condition's time, Kubernetes' whole seconds): the run held no capacity after
    ended_at: float | None = None

    # -- folding cluster objects -------------------------------------------------------------

    def on_jobset(self, jobset: Obj | None, *, now: float | None = None) -> None:
        """Fold the JobSet as last seen (``None``: it is gone); ``now`` dates a suspension with no time of its own."""
        if jobset is not None:
            uid = _meta(jobset).get("uid")
            if uid and self.jobset_uid is None:
                self.jobset_uid = str(uid)
            self.jobset_restarts = int(_status(jobset).get("restarts") or 0)
            self.queue_managed = is_queued_jobset(jobset)
        phase, detail = jobset_phase(jobset)
        self.phase = phase
        if detail:
            self.failure_detail = detail[:1000]
        if phase in (JobSetPhase.COMPLETED, JobSetPhase.FAILED) and self.ended_at is None:
            self.ended_at = jobset_ended_at(jobset)
        if jobset is not None and phase in (JobSetPhase.ACTIVE, JobSetPhase.SUSPENDED):
            self._on_suspension(jobset, now)

    def _on_suspension(self, jobset: Obj, now: float | None) -> None:
        suspended, since = jobset_suspension(jobset)
        created = parse_time(_meta(jobset).get("creationTimestamp"))
        digest = self.digest
        if suspended and not digest.suspended:
            first = digest.first_admitted_at is None
            # Seen now, it happened a moment before; Kubernetes stamps whole seconds: the span opens a second earlier.
            seen = math.floor(now) - 1.0 if now is not None else None
            start = since or (created if first else None) or seen or self.started_at
            evicted = self.queue_state == QueueState.EVICTED.value
            said = self.queue_evicted or (self.queue_reason if evicted else "")
            digest.queued(start, preempted=not first, reason=said, eviction=self.queue_eviction)
            self.trainer_up_since = None
        elif not suspended and (digest.suspended or digest.first_admitted_at is None):
            resumed = since if digest.queue_spans else (created or since)
            digest.admitted(resumed or now or self.started_at)

    def on_workload(self, workload: Obj | None, *, now: float) -> None:
        """Fold the JobSet's Kueue Workload as last seen (``None``: there is none)."""
        status = workload_status(workload)
        if status.state.value != self.queue_state:
            self.queue_state, self.queue_state_since = status.state.value, now
        self.queue_reason = status.reason
        self.queue_eviction, self.queue_requeue_at = status.eviction, status.requeue_at
        self.queue_evicted = ""
        if status.never_fits and self.queue_never_fits_since is None:
            self.queue_never_fits_since = now
        elif not status.never_fits:
            self.queue_never_fits_since = None
        self.queue_never_fits = status.never_fits
        self._on_admission_checks(status, now)
        if status.state is QueueState.PENDING:
            self.digest.note_queue(now, status.reason)
        if status.evicted_reason:
            said = ": ".join(p for p in (status.evicted_reason, status.evicted_message) if p)
            self.queue_evicted = said[:1000]
            self.digest.note_preemption_reason(said, status.eviction)

    def _on_admission_checks(self, status: WorkloadStatus, now: float) -> None:
        """Provisioning (quota reserved, checks pending) opens a span of its own; each check's outcome is noted
        (the ProvisioningRequest's words: provisioned, failed and retried, rejected, capacity revoked)."""
        if status.state is QueueState.PROVISIONING:
            spans = self.digest.provisioning_spans
            if not spans or spans[-1][1] is not None:
                self.provisioning_said = ""  # a new provisioning: its checks' words are its own, even if the same
            self.digest.provisioning(now)
        else:
            self.digest.provisioned(now)
        for check in status.checks:
            if check.retry_count:
                retried = f"admission check {check.name} Retry: retried {check.retry_count} time(s), Kueue requeued it"
                if all(note[1] != retried for note in self.digest.provisioning_notes):
                    self.digest.note_provisioning(now, retried)
            if check.state in ("Ready", "Retry", "Rejected") and check.message:
                said = check.said()
                if said != self.provisioning_said:
                    self.provisioning_said = said
                    self.digest.note_provisioning(now, said)

    def on_workloads_unserved(self, now: float) -> None:
        """The cluster serves no ``kueue.x-k8s.io/v1beta2`` Workloads (404): Kueue older than v0.15, or none. The
        wait is read from the JobSet's suspension alone, and said so once, instead of a reason-less "queued"."""
        self.kueue_unserved = True
        if self.queue_state == QueueState.NONE.value:
            self.queue_state_since = now
        self.queue_reason = KUEUE_UNSERVED

    def run_phase(self, now: float) -> RunPhase:
        """Where the run stands: queued, provisioning, starting, training, recovering, preempted, evicted otherwise,
        deactivated, in no queue, or ended."""
        if self.phase is JobSetPhase.SUSPENDED:
            if self.queue_state == QueueState.DEACTIVATED.value:
                return RunPhase.DEACTIVATED
            if self._not_queued(now):
                return RunPhase.NOT_QUEUED
            if self.queue_state == QueueState.PROVISIONING.value:
                return RunPhase.PROVISIONING
            if self.digest.first_admitted_at is None:
                return RunPhase.QUEUED
            return RunPhase.PREEMPTED if self._wait_eviction() in ("", EvictionKind.PREEMPTED) else RunPhase.EVICTED
        if self.phase is not JobSetPhase.ACTIVE:
            return RunPhase.ENDED
        digest = self.digest
        if self.trainer_up_since is None or (self.starting_since() is not None and digest.open_recovery is None):
            return RunPhase.STARTING
        opened = digest.open_recovery
        if digest.waiting_for_slices or (opened is not None and opened.first_step_at is None):
            return RunPhase.RECOVERING
        return RunPhase.TRAINING

    def _deactivated(self) -> bool:
        return self.queue_state == QueueState.DEACTIVATED.value

    def _never_fits(self, now: float) -> str:
        """Kueue's words on why it can never admit the JobSet as asked, once said for the grace without a break."""
        since = self.queue_never_fits_since
        if not self.queue_never_fits or since is None or now - since < NEVER_FITS_GRACE_SECONDS:
            return ""
        return self.queue_never_fits

    def _not_queued(self, now: float) -> bool:
        if not self.queue_managed:
            return True  # suspended, and no queue label: nothing admits it
        if self.queue_state != QueueState.NOT_QUEUED.value:
            return False
        return now - (self.queue_state_since or now) >= NOT_QUEUED_GRACE_SECONDS

    def _wait_eviction(self) -> str:
        """The kind of the eviction the JobSet waits out: its Workload's deactivation, else the open preemption's
        (or the Workload's eviction in force when the recovery has not learnt it); "" when unknown."""
        if self.queue_state == QueueState.DEACTIVATED.value:
            return self.queue_eviction
        opened = self.digest.open_recovery
        found = opened.eviction if opened is not None and opened.kind == PREEMPTION else ""
        return found or self.queue_eviction

    def pods_ready_evictions(self) -> int:
        """Kueue's evictions for a PodsReady timeout in the run so far: the earlier incarnations' and this one's."""
        return self.earlier_pods_ready_evictions + self.digest.evictions(EvictionKind.PODS_READY_TIMEOUT.value)

    def _in_queue_span(self, at: float) -> bool:
        return any(float(start or 0.0) <= at and (end is None or at <= end) for start, end in self.digest.queue_spans)

    def on_job(self, job: Obj, *, deleted: bool, now: float) -> list[int]:
        """Fold one child Job; returns the slices whose newly counted restarts it reveals.

        ``now`` (the caller's clock) dates only what carries no Kubernetes time at all, and the deletion
        of a Job that vanished without a ``deletionTimestamp``.
        """
        meta = _meta(job)
        labels = meta.get("labels") or {}
        uid = str(meta.get("uid") or "")
        index = _slice_index(labels)
        if labels.get(LABEL_REPLICATED_JOB_NAME) != WORKER_REPLICATED_JOB or not uid or index is None:
            return []
        before = dict(self.slice_restarts_by_slice)
        record = self.jobs.setdefault(uid, WorkerJob(slice=index))
        record.gone = deleted
        if record.created is None:
            record.created = parse_time(meta.get("creationTimestamp")) or now
        spec = job.get("spec")
        spec = spec if isinstance(spec, Mapping) else {}
        record.size = max(1, int(spec.get("completions") or spec.get("parallelism") or record.size))
        if record.deleting_at is None:
            failed = int(_status(job).get("failed") or 0)
            if failed > record.failed and (bool(spec.get("suspend")) or self.phase is JobSetPhase.SUSPENDED):
                record.suspended_failed += failed - record.failed  # Kueue's suspension deleted its pods
            record.failed = max(record.failed, failed)
            record.failed_at = record.failed_at or _failed_at(job)
            deleting = parse_time(meta.get("deletionTimestamp"))
            if deleting is not None or deleted:
                record.deleting_at = deleting if deleting is not None else now
        self._recount()
        return _newly_counted(before, self.slice_restarts_by_slice)

    def on_pod(self, pod: Obj, *, deleted: bool, now: float) -> list[int]:
        """Fold one pod of the JobSet; returns the slices whose newly counted restarts it reveals."""
        meta = _meta(pod)
        labels = meta.get("labels") or {}
        uid = str(meta.get("uid") or "")
        rjob = labels.get(LABEL_REPLICATED_JOB_NAME)
        if rjob == HEAD_REPLICATED_JOB:
            self._on_head_pod(pod, uid, deleted=deleted)
            return []
        index = _slice_index(labels)
        if rjob != WORKER_REPLICATED_JOB or not uid or index is None:
            return []
        before = dict(self.slice_restarts_by_slice)
        record = self.pods.setdefault(uid, WorkerPod(slice=index, job=_owner_uid(meta)))
        record.created = record.created or parse_time(meta.get("creationTimestamp"))
        kind = FailureKind.EVICTION if is_eviction(pod) else FailureKind.FAILURE
        spec = pod.get("spec")
        spec = spec if isinstance(spec, Mapping) else {}
        host = str(spec.get("nodeName") or "")
        selector = spec.get("nodeSelector")
        pool = selector.get(LABEL_GKE_NODEPOOL) if isinstance(selector, Mapping) else None
        pool = pool if isinstance(pool, str) else ""
        if pool and record.job:
            self.job_pools[record.job] = pool
        if pool and pool not in self.pools_seen and len(self.pools_seen) < MAX_POOLS_SEEN:
            self.pools_seen.append(pool)
        restarts = _restart_count(pod)
        if restarts > record.restarts:
            # The kubelet keeps only the newest termination: restarts no trigger saw merge with it.
            at = restart_time(pod) or now
            for n in range(record.restarts + 1, restarts + 1):
                self.failures[f"{uid}/restart/{n}"] = PodFailure(
                    index, at, FailureKind.FAILURE, record.job, host=host, pool=pool
                )
            record.restarts = restarts
        phase = _status(pod).get("phase")
        gone = phase == "Failed" or (phase != "Succeeded" and (deleted or meta.get("deletionTimestamp") is not None))
        if gone and f"{uid}/gone" not in self.failures:
            disrupted = disruption(pod)
            reason = disrupted[0] if disrupted is not None else _undisrupted_reason(pod, phase)
            self.failures[f"{uid}/gone"] = PodFailure(
                index, gone_time(pod) or now, kind, record.job, gone=True, host=host, reason=reason, pool=pool
            )
        record.running_since = None if gone else running_since(pod)
        if deleted:
            self.pods.pop(uid, None)
        self._recount()
        return _newly_counted(before, self.slice_restarts_by_slice)

    def forget_missing(self, alive_jobs: set[str] | None = None, alive_pods: set[str] | None = None) -> None:
        """After a relist: drop pods that are gone, and note Jobs that are (what they counted stays counted).

        A Job gone while no trigger watched keeps its record (its failures are dated from it); one that
        shows no deletion time is taken as deleted after everything it counted.
        """
        if alive_jobs is not None:
            for uid, job in self.jobs.items():
                job.gone = uid not in alive_jobs
        if alive_pods is not None:
            self.pods = {u: p for u, p in self.pods.items() if u in alive_pods}
        self._recount()

    # -- counting ----------------------------------------------------------------------------

    def episodes(self) -> list[SliceEpisode]:
        """The slice failures the records make (pod failures grouped by slice; evictions included)."""
        return group_episodes(self._counted_failures())

    def slice_failures(self, jobset: str = "") -> list[SliceFailure]:
        """The slice failures of this incarnation for the failure history: each episode with its pool, hosts, kind,
        and each Kueue preemption of the whole JobSet (no pool), oldest first."""
        counted = self._counted_failures()
        found: list[SliceFailure] = []
        for episode in group_episodes(counted):
            members = [f for f in counted if f.slice == episode.slice and episode.start <= f.at <= episode.end]
            # The pool its followers named when they failed; a leader failing alone: where its Job ran last.
            named = sorted(f.pool for f in members if f.pool)
            pool = max(named, key=named.count) if named else ""
            if not pool:
                pool = next((self.job_pools[f.job] for f in members if f.job in self.job_pools), "")
            found.append(
                SliceFailure(
                    at=episode.start,
                    kind=kind_of(f.reason for f in members),
                    pool=pool,
                    hosts=tuple(sorted({f.host for f in members if f.host})),
                    slice=episode.slice,
                    jobset=jobset,
                )
            )
        found += [
            SliceFailure(at=r.detected_at, kind=HistoryKind.PREEMPTION, jobset=jobset)
            for r in self.digest.all_recoveries
            if r.kind == PREEMPTION
        ]
        return sorted(found, key=lambda f: (f.at, f.slice))

    def node_pools(self) -> list[str]:
        """The GKE node pools this incarnation's slices ran on (as far as its pods said)."""
        return sorted(set(self.pools_seen) | set(self.job_pools.values()))

    def _counted_failures(self) -> list[PodFailure]:
        counted: list[PodFailure] = []
        gone_per_job: dict[str, int] = {}
        deleting: dict[str, list[PodFailure]] = {}
        for failure in self.failures.values():
            if self._in_queue_span(failure.at):
                continue  # Kueue suspended the JobSet (queued, preempted): its pods went, none of them failed
            job = self.jobs.get(failure.job)
            if job is not None and job.deleting_at is not None:
                if failure.at > job.deleting_at:
                    continue  # after its Job's deletion began: a JobSet restart or teardown, not a failure
                if failure.gone:
                    deleting.setdefault(failure.job, []).append(failure)
                    continue
            if failure.gone:
                gone_per_job[failure.job] = gone_per_job.get(failure.job, 0) + 1
            counted.append(failure)
        for uid, items in deleting.items():
            # In the second its deletion began (times are whole seconds): the pod that failed the Job, or the
            # teardown of a pod the Job never counted. The Job's failed counter, frozen then, says how many failed.
            job = self.jobs[uid]
            allowed = max(0, job.failed - job.counted_before - job.folded - job.suspended_failed)
            kept = sorted(items, key=lambda f: f.at)[:allowed]
            gone_per_job[uid] = gone_per_job.get(uid, 0) + len(kept)
            counted.extend(kept)
        for uid, job in self.jobs.items():
            unseen = job.failed - job.counted_before - job.folded - job.suspended_failed - gone_per_job.get(uid, 0)
            if unseen <= 0:
                continue
            # Pods that went while no trigger watched (or whose deletion the pod watch has yet to bring): the
            # Job controller replaced them at once, so the newest pod of this Job dates the newest of them, and
            # a Job that failed dates its last; older ones merge with it.
            replacements = [p.created for p in self.pods.values() if p.job == uid and p.created is not None]
            at = max([*replacements, job.created or 0.0, job.failed_at or 0.0])
            counted.extend(PodFailure(job.slice, at, FailureKind.FAILURE, uid, gone=True) for _ in range(unseen))
        return counted

    def _recount(self) -> None:
        self._note_whole_slices()
        found = self.episodes()
        if len(self.failures) > MAX_FAILURES_KEPT:
            found = self._fold(found)
        restarts = [e for e in found if not e.evicted]
        evictions = [e for e in found if e.evicted]
        self.slice_restarts = self.earlier_restarts + len(restarts)
        self.slice_restarts_by_slice = _by_slice(self.earlier_restarts_by_slice, restarts)
        self.slice_restart_times = sorted([*self.earlier_restart_times, *(e.start for e in restarts)])[
            -MAX_RESTART_TIMES_KEPT:
        ]
        self.slice_evictions = self.earlier_evictions + len(evictions)
        self.slice_evictions_by_slice = _by_slice(self.earlier_evictions_by_slice, evictions)

    def _note_whole_slices(self) -> None:
        """Heal the failures of each slice whose current Job has all its pods running (Kubernetes' time)."""
        for uid, job in self.jobs.items():
            if job.deleting_at is not None or job.gone:
                continue
            starts = [p.running_since for p in self.pods.values() if p.job == uid and p.running_since is not None]
            if len(starts) < job.size:
                continue
            # Every failure recorded so far is behind this: its pod is gone, or runs again past that restart.
            # Its time may be later than the pods' whole-second startedAt (a deletion dated on arrival).
            whole = max(starts)
            for key, failure in self.failures.items():
                if failure.slice == job.slice and failure.healed_at is None:
                    self.failures[key] = dataclasses.replace(failure, healed_at=max(whole, failure.at))

    def _fold(self, found: list[SliceEpisode]) -> list[SliceEpisode]:
        """Keep at most :data:`MAX_FAILURES_KEPT` records: the oldest episodes become plain totals."""
        keep = list(found)
        while keep and len(self.failures) > MAX_FAILURES_KEPT // 2:
            oldest = keep.pop(0)
            for key, failure in list(self.failures.items()):
                if failure.slice == oldest.slice and oldest.start <= failure.at <= oldest.end:
                    del self.failures[key]
                    if failure.gone and failure.job in self.jobs:
                        self.jobs[failure.job].folded += 1
            slice_key = str(oldest.slice)
            if oldest.evicted:
                self.earlier_evictions += 1
                self.earlier_evictions_by_slice[slice_key] = self.earlier_evictions_by_slice.get(slice_key, 0) + 1
            else:
                self.earlier_restarts += 1
                self.earlier_restart_times = [*self.earlier_restart_times, oldest.start][-MAX_RESTART_TIMES_KEPT:]
                self.earlier_restarts_by_slice[slice_key] = self.earlier_restarts_by_slice.get(slice_key, 0) + 1
        return self.episodes()

    def _on_head_pod(self, pod: Obj, uid: str, *, deleted: bool) -> None:
        meta = _meta(pod)
        if deleted:
            if uid == self.head_pod_uid:
                self.head_pod, self.head_pod_uid = None, None
                self.trainer_up_since = None
            return
        if meta.get("deletionTimestamp") is None and uid != self.head_pod_uid:
            self.head_pod, self.head_pod_uid = str(meta.get("name")), uid
        if uid == self.head_pod_uid:
            self.trainer_up_since = None if meta.get("deletionTimestamp") else _running_at(pod, HEAD_MAIN_CONTAINER)
        code = _exit_code(pod, HEAD_MAIN_CONTAINER)
        if code in PERMANENT_EXIT_CODES:
            self.permanent = True
            self.failure_detail = f"the trainer container {HEAD_MAIN_CONTAINER} exited {code} (invalid configuration)"

    def on_log_line(self, timestamp: str, text: str, pod_uid: str) -> bool:
        """Fold one timestamped head-pod log line unless already folded; returns whether it was new."""
        normalized = normalize_timestamp(timestamp)
        at = parse_time(timestamp)
        if normalized is None or at is None:
            return False
        if pod_uid == self.log_cursor_pod_uid and self.log_cursor is not None and normalized <= self.log_cursor:
            return False
        self.log_cursor, self.log_cursor_pod_uid = normalized, pod_uid
        self.digest.feed(at, text)
        return True

    # -- what the policy sees ----------------------------------------------------------------

    def starting_since(self) -> float | None:
        """Since when the trainer starts up: its container runs (the JobSet admitted) and has not trained since it
        started (:attr:`operators.recovery.LogDigest.trained_at`); ``None`` when it is not up, or trains.

        Every new trainer container starts up: after a JobSet restart, a preemption or a full restart too, each
        restoring the run's checkpoint and compiling again."""
        up = self.trainer_up_since
        if self.phase is JobSetPhase.SUSPENDED or up is None:
            return None
        trained = self.digest.trained_at
        # startedAt is whole seconds, cut down: a line of this container is never stamped before it.
        return up if trained is None or trained < up else None

    def observation(
        self, *, now: float, target_step: int, full_restarts_used: int, elastic_timeout_seconds: float | None = None
    ) -> Observation:
        """What the policy judges. No clock runs while the JobSet is suspended or its trainer is not up. From the
        trainer container's start until it trains, the start-up clock runs (``starting_since``); from its first
        step on, the stall clock: from its last progress (pathwaysutils' wait for slices counts, for at most
        ``elastic_timeout_seconds`` from its start)."""
        digest = self.digest
        progress: float | None = None
        starting = self.starting_since()
        if starting is None and self.phase is not JobSetPhase.SUSPENDED and self.trainer_up_since is not None:
            waited = digest.slice_wait_progress(elastic_timeout_seconds)
            progress = max(self.trainer_up_since, digest.progress_at or 0.0, waited or 0.0)
        waiting = None
        if self.phase is JobSetPhase.SUSPENDED:
            open_span = digest.queue_spans[-1] if digest.suspended else None
            reason = self.queue_reason
            if not self.queue_managed:
                reason = (
                    "the JobSet carries no kueue.x-k8s.io/queue-name label (and its namespace had no LocalQueue "
                    "named default to give it one): nothing will admit it"
                )
            elif self._deactivated() and " Rejected" in self.provisioning_said:
                reason = f"{reason}; {self.provisioning_said}" if reason else self.provisioning_said
            waiting = QueueWait(
                since=float(open_span[0] or now) if open_span else now,
                preempted=digest.first_admitted_at is not None,
                not_queued=self._not_queued(now),
                reason=reason,
                provisioning=self.queue_state == QueueState.PROVISIONING.value,
                eviction=self._wait_eviction() if digest.first_admitted_at is not None or self._deactivated() else "",
                pods_ready_evictions=self.pods_ready_evictions(),
                requeue_at=self.queue_requeue_at,
                never_fits=self._never_fits(now),
            )
        return Observation(
            now=now,
            phase=self.phase,
            target_step=target_step,
            full_restarts_used=full_restarts_used,
            progress_at=progress,
            waiting=waiting,
            preempted=any(r.kind == PREEMPTION and r.restored_at is None for r in digest.all_recoveries),
            slice_restart_times=tuple(self.slice_restart_times),
            latest_step=self.digest.latest_step,
            failure_detail=self._failure_detail(),
            permanent=(self.permanent or digest.config_error is not None) and self.phase is JobSetPhase.FAILED,
            already_at_target=digest.already_at_target is not None,
            starting_since=starting,
            startup_detail="" if starting is None else _startup_detail(digest, starting),
            recovering=self.run_phase(now) is RunPhase.RECOVERING,
        )

    def _failure_detail(self) -> str:
        refused = self.digest.config_error
        if refused is None or self.permanent:
            return self.failure_detail
        said = f"the trainer refused its configuration: MAXTEXT CONFIG ERROR: {refused}"
        return f"{said} ({self.failure_detail})" if self.failure_detail else said

    # -- serialisation -----------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["phase"] = self.phase.value
        data["digest"] = self.digest.to_json()
        data["failures"] = {k: f.to_json() for k, f in self.failures.items()}
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> MonitorState:
        """Read a state written by :meth:`to_json`, of this version or of the unversioned first one."""
        if not data:
            return cls()
        data = copy.deepcopy(dict(data))  # never alias the caller's data
        if "version" not in data:
            data = _from_unversioned(data)
        elif int(data["version"]) > STATE_VERSION:
            raise ValueError(f"monitor state version {data['version']} is newer than this code ({STATE_VERSION})")
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["version"] = STATE_VERSION
        values["phase"] = JobSetPhase(values.get("phase", JobSetPhase.ACTIVE))
        values["digest"] = LogDigest.from_json(values.get("digest"))
        values["ended_at"] = _stored_time(values.get("ended_at"))
        values["jobs"] = {str(k): WorkerJob(**v) for k, v in (values.get("jobs") or {}).items()}
        values["pods"] = {str(k): WorkerPod(**v) for k, v in (values.get("pods") or {}).items()}
        values["failures"] = {str(k): PodFailure.from_json(v) for k, v in (values.get("failures") or {}).items()}
        state = cls(**values)
        state._recount()
        return state


def _stored_time(value: object) -> float | None:
    """A stored Unix time as a float; ``None`` for anything else (stored state is untrusted; a time it cannot
    read only loses the report its end stamp)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)  # an integer too large for a float raises
    except OverflowError:
        return None
    return number if math.isfinite(number) and number > 0 else None


def _startup_detail(digest: LogDigest, up: float) -> str:
    """What a starting trainer was last seen doing, from its lines since its container started at ``up``."""
    if digest.slice_wait_since is not None and digest.slice_wait_since >= up:
        return "waiting for its slices (pathwaysutils)"
    if digest.last_restore_at is not None and digest.last_restore_at >= up:
        step = digest.last_restored_step
        if step is None:
            return "found no checkpoint (training from scratch); compiling its first step"
        return f"restoring step {step}, then compiling its first step"
    if digest.progress_at is not None and digest.progress_at >= up:
        return "its slices are ready; restoring the newest checkpoint"
    return "nothing logged yet: importing, starting JAX, connecting to Pathways"


def _running_at(pod: Obj, container: str) -> float | None:
    """Since when ``container`` of ``pod`` runs (its ``state.running.startedAt``); ``None`` when it does not."""
    for status in _status(pod).get("containerStatuses") or []:
        if isinstance(status, Mapping) and status.get("name") == container:
            running = (status.get("state") or {}).get("running")
            if isinstance(running, Mapping):
                return parse_time(running.get("startedAt"))
    return None


def _failed_at(job: Obj) -> float | None:
    """When a Job failed: its ``FailureTarget`` condition (set first, upstream), else its ``Failed`` one."""
    conditions = _true_conditions(job)
    for kind in ("FailureTarget", "Failed"):
        if kind in conditions:
            return parse_time(conditions[kind].get("lastTransitionTime"))
    return None


def _newly_counted(before: Mapping[str, int], after: Mapping[str, int]) -> list[int]:
    return [int(k) for k, n in sorted(after.items()) for _ in range(max(0, n - before.get(k, 0)))]


def _by_slice(earlier: Mapping[str, int], found: list[SliceEpisode]) -> dict[str, int]:
    counts = dict(earlier)
    for episode in found:
        counts[str(episode.slice)] = counts.get(str(episode.slice), 0) + 1
    return counts


def _from_unversioned(data: dict[str, Any]) -> dict[str, Any]:
    """The first state format: ``uid -> [slice, counter counted]`` per worker Job and pod, and restart
    times stamped when first seen. Its counts stay as counted; failures above its counters are new."""
    jobs = {
        str(uid): {"slice": int(v[0]), "failed": int(v[1]), "counted_before": int(v[1])}
        for uid, v in (data.pop("worker_jobs", None) or {}).items()
    }
    pods = {
        str(uid): {"slice": int(v[0]), "restarts": int(v[1])}
        for uid, v in (data.pop("worker_pods", None) or {}).items()
    }
    times = [float(t) for t in data.get("slice_restart_times") or []]
    data.update(
        jobs=jobs,
        pods=pods,
        earlier_restarts=int(data.get("slice_restarts") or len(times)),
        earlier_restart_times=times,
        earlier_restarts_by_slice={str(k): int(v) for k, v in (data.get("slice_restarts_by_slice") or {}).items()},
    )
    return data
