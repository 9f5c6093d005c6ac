"""What the trigger sees of one JobSet incarnation, folded into a small serialisable state. Pure.

The cluster is the source of truth; this module turns its objects into the facts the policy needs
(docs/architecture.md §4):

- the JobSet's phase from ``status.terminalState`` and its ``Completed``/``Failed`` conditions
  (kubernetes-sigs/jobset sets both; the reason of ``Failed`` is ``FailedJobs``,
  ``ReachedMaxRestarts`` or ``FailJobSetFailurePolicyAction``), and ``status.restarts``;
- slice restarts by ``job-index``, from the counters the worker Job's ``backoffLimit`` is checked
  against: the child Job's ``status.failed`` (a slice pod that failed or was deleted before it
  finished) plus its live pods' container ``restartCount`` (``restartPolicy: OnFailure``). Slice
  restarts stay invisible at JobSet level while they are within the ``backoffLimit``;
- the head pod (``pathways-head``), whose log the trigger follows, and whether its trainer refused
  its configuration (exit code 2: a restart cannot help);
- the trainer's log, folded by :class:`operators.recovery.LogDigest`.

Counting compares those monotonic counters with the last persisted state, so a trigger rebuilt
from its serialized kwargs neither loses nor double-counts a restart (in-place restarts of a pod
that was deleted while no trigger ran are the one thing such a gap can hide).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from operators.constants import (
    HEAD_MAIN_CONTAINER,
    HEAD_REPLICATED_JOB,
    LABEL_JOB_INDEX,
    LABEL_REPLICATED_JOB_NAME,
    WORKER_REPLICATED_JOB,
)
from operators.policy import JobSetPhase, Observation
from operators.recovery import LogDigest

Obj = Mapping[str, Any]

# Trainer exit codes a restart cannot mend: 2 is an invalid configuration (MaxText's argument
# errors and the local trainer's `Invalid config`).
PERMANENT_EXIT_CODES = frozenset({2})
MAX_RESTART_TIMES_KEPT = 1000


def parse_time(value: str | None) -> float | None:
    """An RFC 3339 timestamp (seconds or nanoseconds, ``Z`` or offset) as Unix seconds."""
    if not value:
        return None
    text = value.strip().replace("Z", "+00:00")
    if "." in text:
        head, _, rest = text.partition(".")
        digits = "".join(c for c in rest if c.isdigit())
        zone = rest[len(digits) :]
        text = f"{head}.{digits[:6].ljust(6, '0')}{zone}"
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


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
    """The JobSet's phase and, when it ended, the reason and message of its terminal condition."""
    if jobset is None:
        return JobSetPhase.MISSING, ""
    status = _status(jobset)
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    true = {str(c.get("type")): c for c in conditions if str(c.get("status")) == "True"}
    terminal = str(status.get("terminalState") or "")
    for phase, kind in ((JobSetPhase.FAILED, "Failed"), (JobSetPhase.COMPLETED, "Completed")):
        if terminal == kind or kind in true:
            condition = true.get(kind, {})
            detail = ": ".join(str(p) for p in (condition.get("reason"), condition.get("message")) if p)
            return phase, detail
    return JobSetPhase.ACTIVE, ""


def _slice_index(labels: Mapping[str, Any]) -> int | None:
    try:
        return int(str(labels.get(LABEL_JOB_INDEX, "")))
    except ValueError:
        return None


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


@dataclass
class MonitorState:
    """Everything the trigger knows about one incarnation; JSON round-trips through kwargs and events."""

    jobset_uid: str | None = None
    started_at: float = 0.0
    phase: JobSetPhase = JobSetPhase.ACTIVE
    failure_detail: str = ""
    permanent: bool = False
    jobset_restarts: int = 0
    # uid -> [slice index, counter already counted]: worker Jobs (status.failed) and pods (restartCount)
    worker_jobs: dict[str, list[int]] = field(default_factory=dict)
    worker_pods: dict[str, list[int]] = field(default_factory=dict)
    slice_restart_times: list[float] = field(default_factory=list)
    slice_restarts: int = 0
    slice_restarts_by_slice: dict[str, int] = field(default_factory=dict)
    head_pod: str | None = None
    head_pod_uid: str | None = None
    log_cursor: str | None = None  # RFC 3339 time of the last head-pod log line folded
    log_cursor_pod_uid: str | None = None
    digest: LogDigest = field(default_factory=LogDigest)

    # -- folding cluster objects -------------------------------------------------------------

    def on_jobset(self, jobset: Obj | None) -> None:
        """Fold the JobSet as last seen (``None``: it is gone)."""
        if jobset is not None:
            uid = _meta(jobset).get("uid")
            if uid and self.jobset_uid is None:
                self.jobset_uid = str(uid)
            self.jobset_restarts = int(_status(jobset).get("restarts") or 0)
        phase, detail = jobset_phase(jobset)
        self.phase = phase
        if detail:
            self.failure_detail = detail[:1000]

    def on_job(self, job: Obj, *, deleted: bool, now: float) -> list[int]:
        """Fold one child Job; returns the slices whose restarts its ``status.failed`` reveals.

        A worker Job counts every pod that failed or was deleted before finishing in
        ``status.failed`` (upstream's pod-tracking finalizers), so the replacement of a dead slice
        shows here as a counter going up, whoever saw the old pod.
        """
        labels = _meta(job).get("labels") or {}
        uid = str(_meta(job).get("uid") or "")
        index = _slice_index(labels)
        if labels.get(LABEL_REPLICATED_JOB_NAME) != WORKER_REPLICATED_JOB or not uid or index is None:
            return []
        failed = int(_status(job).get("failed") or 0)
        restarted = self._advance(self.worker_jobs, uid, index, failed, now)
        if deleted:
            self.worker_jobs.pop(uid, None)
        return restarted

    def on_pod(self, pod: Obj, *, deleted: bool, now: float) -> list[int]:
        """Fold one pod of the JobSet; returns the slices whose in-place container restarts it reveals."""
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
        restarted = self._advance(self.worker_pods, uid, index, _restart_count(pod), now)
        if deleted:
            self.worker_pods.pop(uid, None)
        return restarted

    def forget_missing(self, alive_jobs: set[str] | None = None, alive_pods: set[str] | None = None) -> None:
        """After a relist: drop Jobs and pods that are gone (what they counted stays counted)."""
        if alive_jobs is not None:
            self.worker_jobs = {u: v for u, v in self.worker_jobs.items() if u in alive_jobs}
        if alive_pods is not None:
            self.worker_pods = {u: v for u, v in self.worker_pods.items() if u in alive_pods}

    def _advance(self, seen: dict[str, list[int]], uid: str, index: int, count: int, now: float) -> list[int]:
        previous = seen.get(uid, [index, 0])[1]
        seen[uid] = [index, max(previous, count)]
        new = max(0, count - previous)
        for _ in range(new):
            self._count(index, now)
        return [index] * new

    def _on_head_pod(self, pod: Obj, uid: str, *, deleted: bool) -> None:
        meta = _meta(pod)
        if deleted:
            if uid == self.head_pod_uid:
                self.head_pod, self.head_pod_uid = None, None
            return
        if meta.get("deletionTimestamp") is None and uid != self.head_pod_uid:
            self.head_pod, self.head_pod_uid = str(meta.get("name")), uid
        code = _exit_code(pod, HEAD_MAIN_CONTAINER)
        if code in PERMANENT_EXIT_CODES:
            self.permanent = True
            self.failure_detail = f"the trainer container {HEAD_MAIN_CONTAINER} exited {code} (invalid configuration)"

    def _count(self, index: int, at: float) -> None:
        self.slice_restarts += 1
        key = str(index)
        self.slice_restarts_by_slice[key] = self.slice_restarts_by_slice.get(key, 0) + 1
        self.slice_restart_times.append(at)
        del self.slice_restart_times[:-MAX_RESTART_TIMES_KEPT]

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

    def observation(self, *, now: float, target_step: int, full_restarts_used: int) -> Observation:
        progress = max(self.started_at, self.digest.progress_at or 0.0)
        return Observation(
            now=now,
            phase=self.phase,
            target_step=target_step,
            full_restarts_used=full_restarts_used,
            progress_at=progress,
            slice_restart_times=tuple(self.slice_restart_times),
            latest_step=self.digest.latest_step,
            failure_detail=self.failure_detail,
            permanent=self.permanent and self.phase is JobSetPhase.FAILED,
        )

    # -- serialisation -----------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["phase"] = self.phase.value
        data["digest"] = self.digest.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> MonitorState:
        if not data:
            return cls()
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: copy.deepcopy(v) for k, v in data.items() if k in known}  # never alias the caller's data
        values["phase"] = JobSetPhase(values.get("phase", JobSetPhase.ACTIVE))
        values["digest"] = LogDigest.from_json(values.get("digest"))
        for key in ("worker_jobs", "worker_pods"):
            values[key] = {str(k): [int(v[0]), int(v[1])] for k, v in (values.get(key) or {}).items()}
        return cls(**values)
