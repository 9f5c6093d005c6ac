"""Slice health: which slices of the trainer's allocation are up.

On Pathways the resource manager knows when a TPU slice dies. Here a slice is one `job-index` of the
head's JobSet's `worker` replicated job, and it is healthy when every one of its pods is Running, ready
and not being deleted. `KubernetesSliceHealth` reads that from the cluster the trainer runs in;
`StaticSliceHealth` stands in when there is no cluster (all slices healthy unless a test marks one down).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from operators.constants import LABEL_JOB_INDEX, LABEL_JOBSET_NAME, LABEL_REPLICATED_JOB_NAME, WORKER_REPLICATED_JOB

if TYPE_CHECKING:  # the kubernetes client takes a second to import; only the cluster path needs it
    from kubernetes import client

_logger = logging.getLogger(__name__)

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


class SliceHealth(Protocol):
    """The set of healthy slice indices, refreshed on demand or in the background."""

    @property
    def num_slices(self) -> int:
        """Slices in the allocation (indices 0..num_slices-1)."""
        ...

    def healthy_slices(self) -> frozenset[int]:
        """The latest known healthy slices (cheap; may be up to one poll interval old)."""
        ...

    def refresh(self) -> frozenset[int]:
        """Look again now and return the healthy slices."""
        ...

    def close(self) -> None:
        """Stop any background work."""
        ...


class StaticSliceHealth:
    """All slices healthy, except those marked down with `set_down` (fault injection without a cluster)."""

    def __init__(self, num_slices: int) -> None:
        self._num_slices = num_slices
        self._down: set[int] = set()
        self._lock = threading.Lock()

    @property
    def num_slices(self) -> int:
        """Slices in the allocation."""
        return self._num_slices

    def set_down(self, index: int) -> None:
        """Mark slice `index` as lost."""
        with self._lock:
            self._down.add(index)

    def set_up(self, index: int) -> None:
        """Mark slice `index` as healthy again."""
        with self._lock:
            self._down.discard(index)

    def healthy_slices(self) -> frozenset[int]:
        """Every slice not marked down."""
        with self._lock:
            return frozenset(range(self._num_slices)) - self._down

    def refresh(self) -> frozenset[int]:
        """Same as `healthy_slices`: nothing to poll."""
        return self.healthy_slices()

    def close(self) -> None:
        """Nothing to stop."""


def pod_is_healthy(pod: client.V1Pod) -> bool:
    """Running, not being deleted, and every reported container ready."""
    if pod.metadata is not None and pod.metadata.deletion_timestamp is not None:
        return False
    status = pod.status
    if status is None or status.phase != "Running":
        return False
    return all(bool(c.ready) for c in status.container_statuses or [])


def healthy_slices_from_pods(
    pods: Iterable[client.V1Pod], num_slices: int, expected_pods: Mapping[int, int] | None = None
) -> frozenset[int]:
    """Slices (by `job-index`) whose live pods are all healthy and at least `expected_pods[slice]` in number.

    Pods in a terminal phase are ignored: a Job replaces them, and the replacement decides.
    """
    live: dict[int, list[client.V1Pod]] = defaultdict(list)
    for pod in pods:
        labels = (pod.metadata.labels if pod.metadata is not None else None) or {}
        index_label = labels.get(LABEL_JOB_INDEX)
        if index_label is None or not index_label.isdigit():
            continue
        if pod.status is not None and pod.status.phase in _TERMINAL_PHASES:
            continue
        live[int(index_label)].append(pod)
    expected = expected_pods or {}
    return frozenset(
        index
        for index in range(num_slices)
        if live.get(index)
        and len(live[index]) >= expected.get(index, 1)
        and all(pod_is_healthy(p) for p in live[index])
    )


class KubernetesSliceHealth:
    """Slice health of the JobSet `jobset_name`, from its `worker` pods, polled in a background thread.

    The number of pods a slice should have is the most ever seen at once for that slice, so a multi-VM
    slice that lost one pod (and has no replacement yet) is not mistaken for a healthy one.
    """

    def __init__(
        self,
        api: client.CoreV1Api,
        namespace: str,
        jobset_name: str,
        num_slices: int,
        poll_interval: float = 0.25,
    ) -> None:
        self._api = api
        self._namespace = namespace
        self._selector = f"{LABEL_JOBSET_NAME}={jobset_name},{LABEL_REPLICATED_JOB_NAME}={WORKER_REPLICATED_JOB}"
        self._num_slices = num_slices
        self._poll_interval = poll_interval
        self._expected: dict[int, int] = {}
        self._healthy: frozenset[int] = frozenset()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.refresh()
        self._thread = threading.Thread(target=self._poll, name="slice-health", daemon=True)
        self._thread.start()

    @classmethod
    def from_environment(cls, num_slices: int, poll_interval: float = 0.25) -> KubernetesSliceHealth | None:
        """Build from `KUBECONFIG`, `JOBSET_NAME` and `POD_NAMESPACE`; None when not running in a JobSet."""
        jobset_name = os.environ.get("JOBSET_NAME")
        kubeconfig = os.environ.get("KUBECONFIG")
        if not jobset_name or not kubeconfig:
            return None
        from kubernetes import client, config

        api_client = config.new_client_from_config(config_file=kubeconfig)
        namespace = os.environ.get("POD_NAMESPACE", "default")
        return cls(client.CoreV1Api(api_client), namespace, jobset_name, num_slices, poll_interval)

    @property
    def num_slices(self) -> int:
        """Slices in the allocation."""
        return self._num_slices

    def healthy_slices(self) -> frozenset[int]:
        """The result of the latest poll."""
        with self._lock:
            return self._healthy

    def refresh(self) -> frozenset[int]:
        """List the worker pods now. On an API error the previous answer stands (and is returned)."""
        try:
            pods = self._api.list_namespaced_pod(self._namespace, label_selector=self._selector).items
        except Exception as error:  # the API being briefly unreachable is not a slice failure
            _logger.warning("Slice health: listing worker pods failed: %s", error)
            return self.healthy_slices()
        counts: dict[int, int] = defaultdict(int)
        for pod in pods:
            labels: dict[str, Any] = (pod.metadata.labels if pod.metadata else None) or {}
            index = labels.get(LABEL_JOB_INDEX, "")
            if index.isdigit() and not (pod.status and pod.status.phase in _TERMINAL_PHASES):
                counts[int(index)] += 1
        with self._lock:
            for index, count in counts.items():
                self._expected[index] = max(self._expected.get(index, 0), count)
            healthy = healthy_slices_from_pods(pods, self._num_slices, self._expected)
            if healthy != self._healthy:
                _logger.info("Slice health: healthy slices %s of %d", sorted(healthy), self._num_slices)
            self._healthy = healthy
        return healthy

    def close(self) -> None:
        """Stop the poller."""
        self._stop.set()
        self._thread.join(timeout=5)

    def _poll(self) -> None:
        while not self._stop.wait(self._poll_interval):
            self.refresh()
