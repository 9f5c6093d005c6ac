"""Slice failures: the Kubernetes time of each kind of pod failure, evictions by upstream's reasons, episodes."""

from __future__ import annotations

from typing import Any

import pytest

from elastic_training.operators.slice_failures import (
    EVICTION_REASONS,
    FailureKind,
    PodFailure,
    SliceEpisode,
    disruption,
    gone_time,
    group_episodes,
    is_eviction,
    parse_time,
    restart_time,
    running_since,
)

T = parse_time("2026-11-30T12:00:00Z") or 0.0


def container(**fields: Any) -> dict[str, Any]:
    return {"name": "pathways-worker", "restartCount": 0, **fields}


def pod(*containers: dict[str, Any], phase: str = "Running", meta: Any = None, conditions: Any = ()) -> dict[str, Any]:
    return {
        "metadata": {"uid": "u", **(meta or {})},
        "status": {"phase": phase, "containerStatuses": list(containers), "conditions": list(conditions)},
    }


def terminated(at: str) -> dict[str, Any]:
    return {"terminated": {"exitCode": 1, "finishedAt": at}}


def running(at: str) -> dict[str, Any]:
    return {"running": {"startedAt": at}}


def target(reason: str, at: str = "2026-11-30T12:00:03Z", status: str = "True") -> dict[str, Any]:
    return {"type": "DisruptionTarget", "status": status, "reason": reason, "lastTransitionTime": at}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (pod(container(restartCount=1, lastState=terminated("2026-11-30T12:00:07Z"))), T + 7),
        (pod(container(restartCount=2, state=running("2026-11-30T12:00:09Z"))), T + 9),  # no lastState: the restart
        (pod(container(lastState=terminated("2026-11-30T12:00:07Z"))), None),  # never restarted
        (
            pod(
                container(restartCount=1, lastState=terminated("2026-11-30T12:00:07Z")),
                container(name="b", restartCount=1, lastState=terminated("2026-11-30T12:00:08.5Z")),
            ),
            T + 8.5,
        ),
    ],
)
def test_restart_time_is_the_kubelets(obj: dict[str, Any], expected: float | None) -> None:
    assert restart_time(obj) == expected


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        # the DisruptionTarget condition first: when the platform decided
        (
            pod(
                container(state=running("2026-11-30T12:00:00Z")),
                meta={"deletionTimestamp": "2026-11-30T12:00:40Z", "deletionGracePeriodSeconds": 30},
                conditions=[target("EvictionByEvictionAPI")],
            ),
            T + 3,
        ),
        # a deletion: when it was asked for (deletionTimestamp is that plus the grace period)
        (
            pod(
                container(state=running("2026-11-30T12:00:00Z")),
                meta={"deletionTimestamp": "2026-11-30T12:00:40Z", "deletionGracePeriodSeconds": 30},
            ),
            T + 10,
        ),
        (pod(meta={"deletionTimestamp": "2026-11-30T12:00:05Z", "deletionGracePeriodSeconds": 0}), T + 5),
        # a failed pod: when its containers ended
        (pod(container(state=terminated("2026-11-30T12:00:06Z")), phase="Failed"), T + 6),
        (pod(conditions=[{"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-30T12:00:02Z"}]), T + 2),
        # Ready=True dates when it became ready, not the failure
        (pod(conditions=[{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T12:00:02Z"}]), None),
        (pod(), None),  # nothing to go by: the caller's clock, documented
    ],
)
def test_gone_time_is_kubernetes(obj: dict[str, Any], expected: float | None) -> None:
    assert gone_time(obj) == expected


@pytest.mark.parametrize(
    ("reason", "evicted"),
    [
        ("EvictionByEvictionAPI", True),  # a drain, GKE maintenance
        ("PreemptionByScheduler", True),
        ("TerminationByKubelet", True),  # node pressure, an imminent node shutdown (Spot)
        ("DeletionByTaintManager", False),  # the node went NotReady: a lost host
        ("DeletionByPodGC", False),  # the node is gone: a lost host
        ("SomethingNew", False),
    ],
)
def test_evictions_by_upstreams_reasons(reason: str, evicted: bool) -> None:
    obj = pod(conditions=[target(reason)])
    assert disruption(obj) == (reason, T + 3)
    assert is_eviction(obj) is evicted
    assert (reason in EVICTION_REASONS) is evicted


def test_a_false_disruption_target_is_none() -> None:
    obj = pod(conditions=[target("EvictionByEvictionAPI", status="False")])
    assert disruption(obj) is None and not is_eviction(obj)


def test_running_since_needs_every_container_running() -> None:
    both = pod(
        container(state=running("2026-11-30T12:00:01Z")), container(name="b", state=running("2026-11-30T12:00:04Z"))
    )
    assert running_since(both) == T + 4
    one_down = pod(container(state=running("2026-11-30T12:00:01Z")), container(name="b", state=terminated("x")))
    assert running_since(one_down) is None
    deleting = pod(container(state=running("2026-11-30T12:00:01Z")), meta={"deletionTimestamp": "2026-11-30T12:00:09Z"})
    assert running_since(deleting) is None
    assert running_since(pod(phase="Pending")) is None


def f(slice_index: int, at: float, kind: FailureKind = FailureKind.FAILURE, healed: float | None = None) -> PodFailure:
    return PodFailure(slice_index, T + at, kind, healed_at=None if healed is None else T + healed)


@pytest.mark.parametrize(
    ("failures", "expected"),
    [
        ([f(0, 0), f(0, 1), f(0, 1), f(0, 2)], [(0, 0, 2, 4, False)]),  # 4 hosts of one slice
        ([f(0, 0), f(1, 0)], [(0, 0, 0, 1, False), (1, 0, 0, 1, False)]),  # two slices
        ([f(0, 0), f(0, 180)], [(0, 0, 0, 1, False), (0, 180, 180, 1, False)]),  # minutes apart
        ([f(0, 0), f(0, 60)], [(0, 0, 60, 2, False)]),  # the window's edge is in
        ([f(0, 0, healed=5), f(0, 30)], [(0, 0, 0, 1, False), (0, 30, 30, 1, False)]),  # back in between
        ([f(0, 0, healed=0), f(0, 2)], [(0, 0, 0, 1, False), (0, 2, 2, 1, False)]),  # back in its own second
        ([f(0, 0, healed=5), f(0, 5)], [(0, 0, 5, 2, False)]),  # in the second it came back: the same
        ([f(0, 0, healed=30), f(0, 3, healed=30)], [(0, 0, 3, 2, False)]),  # healed together
        ([f(0, 0, FailureKind.EVICTION), f(0, 3)], [(0, 0, 3, 2, True)]),  # an evicted slice's pods
        ([f(0, 30), f(0, 0)], [(0, 0, 30, 2, False)]),  # learnt out of order
    ],
)
def test_episodes(failures: list[PodFailure], expected: list[tuple[Any, ...]]) -> None:
    assert group_episodes(failures) == [
        SliceEpisode(slice=s, start=T + a, end=T + b, pod_failures=n, evicted=e) for s, a, b, n, e in expected
    ]
    assert group_episodes(list(reversed(failures))) == group_episodes(failures)


def test_failures_are_json_values() -> None:
    failure = PodFailure(3, T + 0.5, FailureKind.EVICTION, "job-uid", gone=True, healed_at=T + 2)
    assert PodFailure.from_json(failure.to_json()) == failure
    assert PodFailure.from_json([3, T, "failure", "", False]) == PodFailure(3, T)  # written before healing
