"""Slice health from worker pods: a table of pod states, and the static stand-in."""

from __future__ import annotations

import datetime

import pytest
from kubernetes import client

from elastic_training.local.workloads.slices import (
    StaticSliceHealth,
    hosts_in_use,
    lost_slices,
    pod_is_healthy,
    slice_generations_from_pods,
)
from elastic_training.operators.constants import LABEL_JOB_INDEX


def _pod(
    index: int | None,
    phase: str = "Running",
    *,
    uid: str = "u",
    ready: bool = True,
    deleting: bool = False,
    restarts: int = 0,
) -> client.V1Pod:
    labels = {} if index is None else {LABEL_JOB_INDEX: str(index)}
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            uid=uid,
            labels=labels,
            deletion_timestamp=datetime.datetime.now(datetime.UTC) if deleting else None,
        ),
        status=client.V1PodStatus(
            phase=phase,
            container_statuses=[
                client.V1ContainerStatus(
                    name="pathways-worker", image="i", image_id="", ready=ready, restart_count=restarts
                )
            ],
        ),
    )


@pytest.mark.parametrize(
    ("pod", "healthy"),
    [
        (_pod(0), True),
        (_pod(0, "Pending"), False),
        (_pod(0, ready=False), False),
        (_pod(0, deleting=True), False),
        (_pod(0, "Failed"), False),
    ],
)
def test_pod_health(pod: client.V1Pod, healthy: bool) -> None:
    assert pod_is_healthy(pod) is healthy


@pytest.mark.parametrize(
    ("pods", "expected", "healthy"),
    [
        ([_pod(0), _pod(1)], {}, {0, 1}),
        ([_pod(0), _pod(1, "Pending")], {}, {0}),
        ([_pod(0), _pod(1, "Failed", uid="old"), _pod(1, uid="new")], {}, {0, 1}),  # replaced pod
        ([_pod(0), _pod(1, "Failed")], {}, {0}),  # no replacement yet
        ([_pod(0, uid="a"), _pod(0, uid="b", deleting=True)], {}, set()),  # one VM of a slice going away
        ([_pod(0, uid="a")], {0: 2}, set()),  # a two-VM slice with one pod
        ([_pod(0), _pod(None), _pod(3)], {}, {0}),  # unlabelled or out-of-range pods ignored
    ],
)
def test_slices_from_pods(pods: list[client.V1Pod], expected: dict[int, int], healthy: set[int]) -> None:
    assert set(slice_generations_from_pods(pods, 2, expected)) == healthy


def test_a_replaced_or_restarted_worker_is_a_lost_slice() -> None:
    before = slice_generations_from_pods([_pod(0, uid="a"), _pod(1, uid="b")], 2)
    assert lost_slices(before, before) == frozenset()
    replaced = slice_generations_from_pods([_pod(0, uid="a"), _pod(1, uid="c")], 2)
    restarted = slice_generations_from_pods([_pod(0, uid="a", restarts=1), _pod(1, uid="b")], 2)
    assert lost_slices(before, replaced) == {1}
    assert lost_slices(before, restarted) == {0}
    assert lost_slices(before, {}) == {0, 1}


def test_a_drained_host_does_not_raise_the_pods_a_slice_needs() -> None:
    # Evicted gracefully: the old pod terminates for its grace period while the Job's replacement already exists.
    during = [_pod(0, uid="a"), _pod(0, uid="b", deleting=True), _pod(0, "Pending", uid="c")]
    assert hosts_in_use(during) == 2
    after = [_pod(0, uid="a"), _pod(0, uid="c")]
    assert set(slice_generations_from_pods(after, 1, {0: max(2, hosts_in_use(during))})) == {0}
    # Had the pod being deleted counted, the slice would want 3 pods of its 2 hosts, and never be healthy again.
    assert set(slice_generations_from_pods(after, 1, {0: len(during)})) == set()


def test_static_health() -> None:
    health = StaticSliceHealth(3)
    before = health.generations()
    assert health.refresh() == {0, 1, 2}
    health.set_down(1)
    assert health.healthy_slices() == {0, 2}
    health.set_up(1)
    assert health.healthy_slices() == {0, 1, 2}
    assert lost_slices(before, health.generations()) == {1}
    health.close()
