"""Slice health: which slices of the trainer's allocation are up.

On Pathways the resource manager knows when a TPU slice dies. Here a slice is one `job-index` of the head's JobSet's
`worker` replicated job: `hosts_per_slice` pods (the worker Job's `completions`, one per TPU VM, as xpk renders a
multi-host slice), and it is healthy only when all of them are Running, ready and not being deleted. One lost host loses
its slice: a missing, failed or restarted pod changes or breaks the slice's incarnation, as a host event interrupts the
whole multi-host slice on GKE. `KubernetesSliceHealth` reads that from the cluster the trainer runs in;
`StaticSliceHealth` stands in when there is no cluster (all slices healthy unless a test marks one down).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

from elastic_training.operators.constants import (
    LABEL_JOB_INDEX,
    LABEL_JOBSET_NAME,
    LABEL_REPLICATED_JOB_NAME,
    WORKER_REPLICATED_JOB,
)

if TYPE_CHECKING:  # the kubernetes client takes a second to import; only the cluster path needs it
    from kubernetes import client

_logger = logging.getLogger(__name__)

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


# Identifies one incarnation of a slice: it changes whenever a pod of the slice is replaced or restarted,
# because the slice's devices lost their state then, even if the slice looks healthy again.
Generation = tuple[tuple[str, int], ...]


class SliceHealth(Protocol):
    """Which slices are healthy, and which incarnation of each, refreshed on demand or in the background."""

    @property
    def num_slices(self) -> int:
        """Slices in the allocation (indices 0..num_slices-1)."""
        ...

    def generations(self) -> Mapping[int, Generation]:
        """The latest known healthy slices with their incarnation (cheap: no API call)."""
        ...

    def healthy_slices(self) -> frozenset[int]:
        """The latest known healthy slices."""
        ...

    def refresh(self) -> frozenset[int]:
        """Look again now and return the healthy slices."""
        ...

    def close(self) -> None:
        """Stop any background work."""
        ...


def lost_slices(active: Mapping[int, Generation], now: Mapping[int, Generation]) -> frozenset[int]:
    """Slices of `active` that are down now or came back as a new incarnation."""
    return frozenset(index for index, generation in active.items() if now.get(index) != generation)


class StaticSliceHealth:
    """All slices healthy, except those marked down with `set_down` (fault injection without a cluster)."""

    def __init__(self, num_slices: int) -> None:
        self._num_slices = num_slices
        self._down: set[int] = set()
        self._incarnation = dict.fromkeys(range(num_slices), 0)
        self._lock = threading.Lock()

    @property
    def num_slices(self) -> int:
        """Slices in the allocation."""
        return self._num_slices

    def set_down(self, index: int) -> None:
        """Mark slice `index` as lost."""
        with self._lock:
            self._down.add(index)
            self._incarnation[index] += 1

    def set_up(self, index: int) -> None:
        """Mark slice `index` as healthy again (a new incarnation)."""
        with self._lock:
            self._down.discard(index)

    def generations(self) -> Mapping[int, Generation]:
        """Every slice not marked down."""
        with self._lock:
            return {i: (("static", self._incarnation[i]),) for i in range(self._num_slices) if i not in self._down}

    def healthy_slices(self) -> frozenset[int]:
        """Every slice not marked down."""
        return frozenset(self.generations())

    def refresh(self) -> frozenset[int]:
        """Same as `healthy_slices`: nothing to poll."""
        return self.healthy_slices()

    def close(self) -> None:
        """Nothing to stop."""


def pod_is_healthy(pod: client.V1Pod) -> bool:
    """Running, not being deleted, not marked not-ready, and every reported container ready.

    The pod's ``Ready`` condition counts on its own: when a node stops reporting, kube-controller-manager's node
    lifecycle controller sets it False on the node's pods (``MarkPodsNotReady``) and leaves their phase and
    container statuses as the lost kubelet last wrote them.
    """
    if pod.metadata is not None and pod.metadata.deletion_timestamp is not None:
        return False
    status = pod.status
    if status is None or status.phase != "Running":
        return False
    if any(c.type == "Ready" and c.status == "False" for c in status.conditions or []):
        return False
    return all(bool(c.ready) for c in status.container_statuses or [])


def _live_pods_by_slice(pods: Iterable[client.V1Pod]) -> dict[int, list[client.V1Pod]]:
    """Pods by `job-index`, without terminal ones (a Job replaces them; the replacement decides)."""
    live: dict[int, list[client.V1Pod]] = defaultdict(list)
    for pod in pods:
        labels = (pod.metadata.labels if pod.metadata is not None else None) or {}
        index_label = labels.get(LABEL_JOB_INDEX)
        if index_label is None or not index_label.isdigit():
            continue
        if pod.status is not None and pod.status.phase in _TERMINAL_PHASES:
            continue
        live[int(index_label)].append(pod)
    return live


def hosts_in_use(pods: Iterable[client.V1Pod]) -> int:
    """Pods of one slice that are not being deleted: what "the most ever seen at once" may count.

    A pod evicted gracefully (a drain, ``DisruptionTarget``) stays live for its grace period while the Job's
    replacement already exists: counting both would make the slice want one pod more than it has hosts, and
    it would never be healthy again.
    """
    return sum(1 for p in pods if p.metadata is None or p.metadata.deletion_timestamp is None)


def _generation(pods: list[client.V1Pod]) -> Generation:
    def restarts(pod: client.V1Pod) -> int:
        return sum(c.restart_count or 0 for c in (pod.status.container_statuses if pod.status else None) or [])

    return tuple(sorted((str(p.metadata.uid if p.metadata else ""), restarts(p)) for p in pods))


def slice_generations_from_pods(
    pods: Iterable[client.V1Pod], num_slices: int, expected_pods: Mapping[int, int] | None = None
) -> dict[int, Generation]:
    """Healthy slices (by `job-index`) and their incarnation.

    A slice is healthy when it has at least `expected_pods[slice]` live pods (default 1) and all are healthy.
    """
    live = _live_pods_by_slice(pods)
    expected = expected_pods or {}
    return {
        index: _generation(live[index])
        for index in range(num_slices)
        if live.get(index)
        and len(live[index]) >= expected.get(index, 1)
        and all(pod_is_healthy(p) for p in live[index])
    }


class KubernetesSliceHealth:
    """Slice health of the JobSet `jobset_name`, from its `worker` pods, watched in a background thread.

    The number of pods a slice should have is `hosts_per_slice` (or the most ever seen at once for that slice, if
    more), so a multi-VM slice that lost one pod (and has no replacement yet) is not mistaken for a healthy one. A
    slice counts only once the same incarnation has looked healthy for `min_ready_seconds` (Kubernetes'
    minReadySeconds idea): a crash-looping worker is Running for a moment between restarts, and that is no slice.

    The pods are listed once and then watched (local/workloads/pod_watch.py), as the resource manager hears of a
    lost host when it happens rather than by asking: a change reaches `generations()` as soon as the API server
    sends it, and nothing is spent while the pods do not change.
    """

    def __init__(
        self,
        api: client.CoreV1Api,
        namespace: str,
        jobset_name: str,
        num_slices: int,
        min_ready_seconds: float = 1.0,
        hosts_per_slice: int = 1,
    ) -> None:
        from elastic_training.local.workloads.pod_watch import PodWatch

        self._num_slices = num_slices
        self._min_ready = min_ready_seconds
        self._first_seen: dict[int, tuple[Generation, float]] = {}
        self._expected: dict[int, int] = dict.fromkeys(range(num_slices), hosts_per_slice)
        self._logged: dict[int, Generation] = {}
        self._lock = threading.Lock()
        selector = f"{LABEL_JOBSET_NAME}={jobset_name},{LABEL_REPLICATED_JOB_NAME}={WORKER_REPLICATED_JOB}"
        self._watch = PodWatch(api, namespace, self._observe, label_selector=selector, name="slice-health")

    @classmethod
    def from_environment(cls, num_slices: int) -> KubernetesSliceHealth | None:
        """Build from `KUBECONFIG`, `JOBSET_NAME` and `POD_NAMESPACE`; None when not running in a JobSet."""
        jobset_name = os.environ.get("JOBSET_NAME")
        kubeconfig = os.environ.get("KUBECONFIG")
        if not jobset_name or not kubeconfig:
            return None
        from kubernetes import client

        from elastic_training.local.workloads.pathways_session import api_client_from_kubeconfig

        api_client = api_client_from_kubeconfig(kubeconfig)
        namespace = os.environ.get("POD_NAMESPACE", "default")
        return cls(client.CoreV1Api(api_client), namespace, jobset_name, num_slices)

    @property
    def num_slices(self) -> int:
        """Slices in the allocation."""
        return self._num_slices

    def generations(self) -> Mapping[int, Generation]:
        """The healthy slices as the latest watch event left them (and `min_ready_seconds` allows now)."""
        now = time.monotonic()
        with self._lock:
            ready = {
                index: generation
                for index, (generation, since) in self._first_seen.items()
                if now - since >= self._min_ready
            }
            if ready != self._logged:
                _logger.info("Slice health: healthy slices %s of %d", sorted(ready), self._num_slices)
                self._logged = ready
        return ready

    def healthy_slices(self) -> frozenset[int]:
        """The healthy slices now."""
        return frozenset(self.generations())

    def refresh(self) -> frozenset[int]:
        """The healthy slices now: the watch keeps them current, so there is nothing to look up again."""
        return self.healthy_slices()

    def _observe(self, pods: Mapping[str, client.V1Pod]) -> None:
        """A change in the worker pods: note when each slice's incarnation was first seen healthy."""
        now = time.monotonic()
        live = _live_pods_by_slice(pods.values())
        with self._lock:
            for index, slice_pods in live.items():
                self._expected[index] = max(self._expected.get(index, 0), hosts_in_use(slice_pods))
            observed = slice_generations_from_pods(pods.values(), self._num_slices, self._expected)
            for index in set(self._first_seen) - set(observed):
                del self._first_seen[index]
            for index, generation in observed.items():
                seen = self._first_seen.get(index)
                if seen is None or seen[0] != generation:
                    self._first_seen[index] = (generation, now)

    def close(self) -> None:
        """Stop watching."""
        self._watch.close()
