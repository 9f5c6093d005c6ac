"""The local cluster's control plane: JobSet and Job controllers, garbage collector and kubelet.

All of them run as tasks on the event loop that owns the :class:`~local.cluster.store.Store`;
they are woken by store events, never by polling.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from local.cluster.logs import LogStore
from local.cluster.store import Store


class ControlPlane:
    """Everything that acts on stored objects: controllers, garbage collector, kubelet."""

    def __init__(self, store: Store, logs: LogStore, workdir: Path, pod_env: Mapping[str, str]) -> None:
        self._store = store
        self._logs = logs
        self._workdir = workdir
        self._pod_env = dict(pod_env)

    async def start(self) -> None:
        """Start the controllers, the garbage collector and the kubelet on the running loop."""

    async def stop(self) -> None:
        """Stop every pod process (SIGTERM, then SIGKILL) and cancel the control-plane tasks."""

    async def signal_pod(self, namespace: str, name: str, sig: int, container: str | None = None) -> None:
        """Send ``sig`` to the process group of one container of a pod (default: every container)."""

    async def delete_pod_now(self, namespace: str, name: str) -> None:
        """Like ``kubectl delete pod --grace-period=0 --force``: remove the pod and kill its processes."""
