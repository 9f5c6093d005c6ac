"""Status conditions, set the way the upstream controllers set them."""

from __future__ import annotations

from typing import Any

from elastic_training.local.cluster.store import now_rfc3339

Condition = dict[str, Any]


def find_condition(conditions: list[Condition], kind: str) -> Condition | None:
    return next((c for c in conditions if c.get("type") == kind), None)


def is_true(conditions: list[Condition], kind: str) -> bool:
    found = find_condition(conditions, kind)
    return found is not None and found.get("status") == "True"


def set_condition(
    conditions: list[Condition], kind: str, status: bool, reason: str, message: str, *, probe_time: bool = False
) -> bool:
    """Add or change one condition in place; returns whether anything changed.

    As upstream: a status flip moves ``lastTransitionTime``; a new reason or message alone keeps
    it; a condition that does not exist yet is only added when it is True.
    """
    value = "True" if status else "False"
    stamp = now_rfc3339()
    current = find_condition(conditions, kind)
    if current is None:
        if not status:
            return False
        new: Condition = {"type": kind, "status": value, "reason": reason, "message": message}
        new["lastTransitionTime"] = stamp
        if probe_time:
            new["lastProbeTime"] = stamp
        conditions.append(new)
        return True
    if current.get("status") != value:
        current.update(status=value, reason=reason, message=message, lastTransitionTime=stamp)
    elif current.get("reason") != reason or current.get("message") != message:
        current.update(reason=reason, message=message)
    else:
        return False
    if probe_time:
        current["lastProbeTime"] = stamp
    return True
