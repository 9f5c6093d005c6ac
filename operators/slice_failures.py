"""Slice failures: which pod failures are one slice restart, and when it happened by Kubernetes' clock. Pure.

A multi-host TPU slice is one unit. GKE documents that a host event on one VM of a slice interrupts and
reschedules the whole slice ("Multi-host TPU slices require all instances in the slice to be recovered or
rescheduled together", docs.cloud.google.com/tpu/docs/failure-recovery; GKE's "handle disruption" page for
TPUs), and Pathways uses a slice only when every worker of it is up: pathwaysutils' elastic manager waits
for whole slices (``wait_for_slices``, "Sufficient slices active") and its slice-down errors name slices,
not hosts (AI-Hypercomputer/pathways-utils, ``pathwaysutils/elastic/manager.py``). xpk and
google/pathways-job size the worker Job's ``backoffLimit`` as ``vms_per_slice * max_slice_restarts`` for
that reason (AI-Hypercomputer/xpk ``src/xpk/commands/workload.py``; google/pathways-job
``internal/controller/pathwaysjob_controller.go``, ``MakeWorkerJob``): one slice failure may fail every pod
of the slice.

So the budget counts **episodes**, not pods. Pod failures of one slice (``job-index``) are one episode when
each falls within :data:`SLICE_EPISODE_SECONDS` of the episode's first failure and the slice did not come back
in between. A failure is *healed* when the slice is next seen whole after it (all its pods running), at the
latest ``startedAt`` of their containers; a failure more than :data:`SLICE_SETTLE_SECONDS` after that is a new
slice failure, as it is for Pathways (a new slice-down event, a new elastic attempt). Healing is noted on the
failure as it is seen, so that a replacement started in the very second of the failure still counts as after
it (Kubernetes' times are whole seconds; the local cluster brings a slice back within one).
A slice that keeps failing without ever coming back is a new episode every window: its Job's ``backoffLimit``
(pods) ends it anyway.

Every time is a Kubernetes time, never the moment a trigger first sees the object (a trigger rebuilt after a
triggerer restart would otherwise re-date old failures to "now"):

- an in-place container restart (``restartPolicy: OnFailure``): the container's
  ``lastState.terminated.finishedAt``, else its ``state.running.startedAt`` (it restarted after failing); the
  kubelet keeps only the last termination, so restarts a trigger missed are dated at the newest one it can see;
- a pod that failed or was deleted before it finished (what the Job's ``status.failed`` counts): its
  ``DisruptionTarget`` condition's ``lastTransitionTime``, else (phase ``Failed``) its containers'
  ``terminated.finishedAt``, else the deletion request time (``deletionTimestamp - deletionGracePeriodSeconds``,
  as the API server sets them in ``pkg/registry/rest/delete.go``), else its ``Ready=False`` condition's
  ``lastTransitionTime``; a pod removed at once (grace period 0) may carry none of these: its ``DELETED``
  watch event is then dated when it arrives, which is sound because a watch delivers events as they happen
  and a relist never shows a deleted pod (an old deletion is known only from its Job's counter, below);
- a Job failure no seen pod explains (the pod went while no trigger watched): the creation time of that Job's
  newest known pod (the Job controller creates the replacement right after a failure, so this is at or just after
  the failure), else the Job's ``creationTimestamp`` (see :mod:`operators.observations`).

When an object carries none of these (an API server always sets ``creationTimestamp``; only a hand-built object
lacks every time) the caller's ``now`` is used, so the failure is counted rather than lost.

**Evictions** do not spend the slice budget: a pod whose ``DisruptionTarget`` condition is ``True`` with a reason
in :data:`EVICTION_REASONS` was taken on purpose by the platform (a drain or maintenance through the Eviction API,
a preemption by the scheduler, the kubelet terminating pods for node pressure or an imminent node shutdown, as for
Spot VMs); it says nothing about the run's health. Upstream sets these reasons in kubernetes/kubernetes
``pkg/registry/core/pod/storage/eviction.go`` (``EvictionByEvictionAPI``),
``pkg/scheduler/framework/preemption`` (``PreemptionByScheduler``) and ``pkg/kubelet/eviction``,
``pkg/kubelet/nodeshutdown`` (``TerminationByKubelet``); the constants live in
``staging/src/k8s.io/api/core/v1/types.go``. The two other reasons upstream sets, ``DeletionByTaintManager`` (the
node went NotReady or unreachable, ``pkg/controller/tainteviction``) and ``DeletionByPodGC`` (the node is gone,
``pkg/controller/podgc``), are what a lost TPU host looks like, so they count. An episode with any eviction in it
is an eviction episode: the slice's other pods fail *because* one was evicted. Evictions are counted separately.
JobSet's own treatment (``failurePolicy.rules`` with ``onJobFailureReasons``, kubernetes-sigs/jobset
``site/static/examples/failure-policy/host-maintenance-event-model.yaml``) is the manifest's business.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

Obj = Mapping[str, Any]

SLICE_EPISODE_SECONDS = 60.0
# The pods of a slice lost together go within this of each other; the local cluster replaces a pod faster.
SLICE_SETTLE_SECONDS = 0.25
DISRUPTION_TARGET = "DisruptionTarget"
EVICTION_REASONS = frozenset({"EvictionByEvictionAPI", "PreemptionByScheduler", "TerminationByKubelet"})


class FailureKind(StrEnum):
    """Whether a pod failure spends the slice budget."""

    FAILURE = "failure"
    EVICTION = "eviction"


@dataclass(frozen=True)
class PodFailure:
    """One pod failure of a slice at a Kubernetes time.

    ``gone``: the pod failed or was deleted (the Job's ``status.failed`` counts it); otherwise a container
    restarted in place. ``job`` is the owning Job's uid (``""`` when unknown).
    """

    slice: int
    at: float
    kind: FailureKind = FailureKind.FAILURE
    job: str = ""
    gone: bool = False
    healed_at: float | None = None  # the slice was next seen whole then (Kubernetes' time)
    host: str = ""  # the node the pod ran on (``spec.nodeName``), for the failure history
    reason: str = ""  # its DisruptionTarget reason, "Deleted" (none, deleted early) or "" (its container failed)
    pool: str = ""  # the node pool its nodeSelector named (JobSet sets it on a slice's followers), if any

    def to_json(self) -> list[Any]:
        return [
            self.slice,
            self.at,
            self.kind.value,
            self.job,
            self.gone,
            self.healed_at,
            self.host,
            self.reason,
            self.pool,
        ]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> PodFailure:
        healed = data[5] if len(data) > 5 else None
        return cls(
            int(data[0]),
            float(data[1]),
            FailureKind(data[2]),
            str(data[3]),
            bool(data[4]),
            None if healed is None else float(healed),
            str(data[6]) if len(data) > 6 else "",
            str(data[7]) if len(data) > 7 else "",
            str(data[8]) if len(data) > 8 else "",
        )


@dataclass(frozen=True)
class SliceEpisode:
    """One slice failure: its first failure's time, its last, how many pod failures, and whether evicted."""

    slice: int
    start: float
    end: float
    pod_failures: int
    evicted: bool


def parse_time(value: object) -> float | None:
    """An RFC 3339 timestamp (seconds or nanoseconds, ``Z`` or offset) as Unix seconds."""
    if not isinstance(value, str) or not value:
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


def _mapping(value: object) -> Obj:
    return value if isinstance(value, Mapping) else {}


def _containers(pod: Obj) -> list[Obj]:
    status = _mapping(pod.get("status"))
    return [c for c in status.get("containerStatuses") or [] if isinstance(c, Mapping)]


def _condition(pod: Obj, kind: str) -> Obj | None:
    for condition in _mapping(pod.get("status")).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return None


def disruption(pod: Obj) -> tuple[str, float | None] | None:
    """The reason and time of a pod's ``DisruptionTarget=True`` condition, or ``None`` without one."""
    condition = _condition(pod, DISRUPTION_TARGET)
    if condition is None or str(condition.get("status")) != "True":
        return None
    return str(condition.get("reason") or ""), parse_time(condition.get("lastTransitionTime"))


def lost_containers(pod: Obj) -> bool:
    """Whether the kubelet reports a container of the pod terminated ``ContainerStatusUnknown``: it could not be
    located when the pod was terminated (``convertToAPIContainerStatuses``, kubernetes ``pkg/kubelet/kubelet_pods.go``),
    as when its host went down and came back without it."""
    return any(
        _mapping(_mapping(c.get("state")).get("terminated")).get("reason") == "ContainerStatusUnknown"
        for c in _containers(pod)
    )


def is_eviction(pod: Obj) -> bool:
    """Whether the platform took the pod on purpose (see :data:`EVICTION_REASONS`)."""
    found = disruption(pod)
    return found is not None and found[0] in EVICTION_REASONS


def _latest(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def restart_time(pod: Obj) -> float | None:
    """When the newest in-place container restart of a pod happened (Kubernetes' time), if it says."""
    return _latest(
        parse_time(_mapping(_mapping(c.get("lastState")).get("terminated")).get("finishedAt"))
        or parse_time(_mapping(_mapping(c.get("state")).get("running")).get("startedAt"))
        for c in _containers(pod)
        if int(c.get("restartCount") or 0) > 0
    )


def gone_time(pod: Obj) -> float | None:
    """When a pod failed or its deletion was asked for (Kubernetes' time), if it says."""
    found = disruption(pod)
    if found is not None and found[1] is not None:
        return found[1]
    meta, status = _mapping(pod.get("metadata")), _mapping(pod.get("status"))
    finished = _latest(
        parse_time(_mapping(_mapping(c.get("state")).get("terminated")).get("finishedAt")) for c in _containers(pod)
    )
    if status.get("phase") == "Failed" and finished is not None:
        return finished
    deleting = parse_time(meta.get("deletionTimestamp"))
    if deleting is not None:
        return deleting - float(meta.get("deletionGracePeriodSeconds") or 0)
    if finished is not None:
        return finished
    ready = _condition(pod, "Ready")
    if ready is not None and str(ready.get("status")) == "False":
        return parse_time(ready.get("lastTransitionTime"))
    return None


def running_since(pod: Obj) -> float | None:
    """When the last of a live pod's containers started, while all of them run; ``None`` otherwise."""
    meta, status = _mapping(pod.get("metadata")), _mapping(pod.get("status"))
    containers = _containers(pod)
    if meta.get("deletionTimestamp") is not None or status.get("phase") != "Running" or not containers:
        return None
    started = [parse_time(_mapping(_mapping(c.get("state")).get("running")).get("startedAt")) for c in containers]
    if any(s is None for s in started):
        return None
    return _latest(started)


def group_episodes(
    failures: Iterable[PodFailure], *, window_seconds: float = SLICE_EPISODE_SECONDS
) -> list[SliceEpisode]:
    """Group pod failures into slice failures (see the module docstring), oldest first.

    The result depends on the failures (their times and healing) only, never on the order they are given in.
    """
    by_slice: dict[int, list[PodFailure]] = {}
    for failure in failures:
        by_slice.setdefault(failure.slice, []).append(failure)
    found: list[SliceEpisode] = []
    for items in by_slice.values():
        current: list[PodFailure] = []
        for failure in sorted(items, key=lambda f: (f.at, f.kind.value, f.healed_at or 0.0)):
            if current and _same_episode(current, failure, window_seconds):
                current.append(failure)
                continue
            if current:
                found.append(_episode(current))
            current = [failure]
        if current:
            found.append(_episode(current))
    return sorted(found, key=lambda e: (e.start, e.slice))


def _same_episode(current: list[PodFailure], failure: PodFailure, window: float) -> bool:
    if failure.at - current[0].at > window:
        return False
    return not any(f.healed_at is not None and failure.at - f.healed_at > SLICE_SETTLE_SECONDS for f in current)


def _episode(failures: list[PodFailure]) -> SliceEpisode:
    return SliceEpisode(
        slice=failures[0].slice,
        start=failures[0].at,
        end=failures[-1].at,
        pod_failures=len(failures),
        evicted=any(f.kind is FailureKind.EVICTION for f in failures),
    )
