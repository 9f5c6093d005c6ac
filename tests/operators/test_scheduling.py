"""Which worker pods kube-scheduler left unschedulable, and since when (operators/scheduling.py). Pure."""

from __future__ import annotations

from typing import Any

import pytest

from elastic_training.operators.scheduling import describe, stranded, unschedulable
from tests.support.observed_objects import T0, stamp

MESSAGE = (
    "0/16 nodes are available: 4 node(s) didn't match Pod's node affinity/selector, 12 Insufficient google.com/tpu."
)


def pending(
    name: str, *, since: float = T0, reason: str = "Unschedulable", status: str = "False", **extra: Any
) -> dict[str, Any]:
    condition = {
        "type": "PodScheduled",
        "status": status,
        "reason": reason,
        "message": MESSAGE,
        "lastTransitionTime": stamp(since),
    }
    body: dict[str, Any] = {
        "metadata": {"name": name},
        "spec": {},
        "status": {"phase": "Pending", "conditions": [condition]},
    }
    for key, value in extra.items():
        part, _, field = key.partition("__")
        body[part][field] = value
    return body


@pytest.mark.parametrize(
    ("pod", "waiting"),
    [
        (pending("p"), True),
        (pending("p", reason="SchedulerError"), False),  # the scheduler's own error: no node was refused
        (pending("p", status="True", reason=""), False),
        (pending("p", spec__nodeName="n-1"), False),  # bound since
        (pending("p", metadata__deletionTimestamp=stamp(T0)), False),
        (pending("p", status__phase="Failed"), False),
        ({"metadata": {"name": "p"}, "status": {"phase": "Pending"}}, False),  # not looked at yet
        ({"metadata": None, "spec": [], "status": "x"}, False),  # hostile shapes read as nothing
    ],
)
def test_a_pod_is_unschedulable_only_by_kube_schedulers_condition(pod: dict[str, Any], waiting: bool) -> None:
    assert (unschedulable(pod) is not None) is waiting


def test_stranded_pods_are_those_waiting_long_enough_by_the_conditions_clock() -> None:
    pods = [pending("late", since=T0 + 50), pending("early", since=T0), pending("bound", spec__nodeName="n")]
    found = stranded(pods, now=T0 + 60, after=60)
    assert [u.pod for u in found] == ["early"] and found[0].since == T0
    assert [u.pod for u in stranded(pods, now=T0 + 110, after=60)] == ["early", "late"]
    assert stranded(pods, now=T0 + 59, after=60) == []
    text = describe(found, T0 + 61)
    assert text.startswith("1 worker pod(s) unschedulable (PodScheduled=False, Unschedulable), early for 61 s: ")
    assert "node affinity/selector" in text
