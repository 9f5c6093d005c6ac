"""Pods the scheduler could not place, read from what kube-scheduler writes on them. Pure.

kube-scheduler's ``handleSchedulingFailure`` (kubernetes ``pkg/scheduler/schedule_one.go``, v1.32) records a
``FailedScheduling`` Warning event and sets the pod's condition ``PodScheduled=False`` with reason
``Unschedulable`` (``v1.PodReasonUnschedulable``: a filter or PreFilter plugin rejected every node) and the
``FitError`` message (``0/18 nodes are available: ...``), or reason ``SchedulerError`` for an error of its own. The
condition's ``lastTransitionTime`` moves only when its status flips (``podutil.UpdatePodCondition``), so it says,
on Kubernetes' clock, since when the pod has waited for a node: a trigger rebuilt later reads the same time from
the pod, with nothing of its own to persist. The event is the same news for people (``kubectl describe``); the
condition is the one fact to read, since events are deduplicated and expire.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from elastic_training.operators.slice_failures import parse_time

POD_SCHEDULED = "PodScheduled"
UNSCHEDULABLE = "Unschedulable"  # v1.PodReasonUnschedulable
MAX_MESSAGE = 600  # of the scheduler's message, in a report or a log line (cut with " ...", as upstream cuts)


@dataclass(frozen=True)
class Unschedulable:
    """A pod kube-scheduler found no node for: since when (Unix seconds, the condition's transition), and why."""

    pod: str
    since: float
    message: str

    def waited(self, now: float) -> float:
        return max(0.0, now - self.since)


def unschedulable(pod: Mapping[str, Any]) -> Unschedulable | None:
    """``pod``'s ``PodScheduled=False``/``Unschedulable`` condition, if it is pending, unbound and not deleting."""
    meta, spec, status = (_part(pod, key) for key in ("metadata", "spec", "status"))
    if spec.get("nodeName") or meta.get("deletionTimestamp") or status.get("phase", "Pending") != "Pending":
        return None
    for condition in status.get("conditions") or []:
        if not isinstance(condition, Mapping) or condition.get("type") != POD_SCHEDULED:
            continue
        if str(condition.get("status")) != "False" or condition.get("reason") != UNSCHEDULABLE:
            return None
        since = parse_time(condition.get("lastTransitionTime"))
        if since is None:
            return None
        message = str(condition.get("message") or "")
        if len(message) > MAX_MESSAGE:
            message = message[: MAX_MESSAGE - 4] + " ..."
        return Unschedulable(str(meta.get("name") or "")[:253], since, message)
    return None


def _part(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def stranded(pods: Iterable[Mapping[str, Any]], *, now: float, after: float) -> list[Unschedulable]:
    """The pods of ``pods`` unschedulable for at least ``after`` seconds, longest waiting first."""
    found = [u for u in map(unschedulable, pods) if u is not None and u.waited(now) >= after]
    return sorted(found, key=lambda u: (u.since, u.pod))


def describe(found: list[Unschedulable], now: float) -> str:
    """One sentence for the log and the report: how many pods, for how long, and the scheduler's words."""
    if not found:
        return "no pod is unschedulable"
    first = found[0]
    return (
        f"{len(found)} worker pod(s) unschedulable (PodScheduled=False, {UNSCHEDULABLE}), {first.pod} for "
        f"{first.waited(now):.0f} s: {first.message or 'no message'}"
    )
