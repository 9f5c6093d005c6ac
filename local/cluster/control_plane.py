"""The local cluster's control plane: nodes, scheduler, JobSet/Job/namespace controllers, Kueue, GC, kubelet.

All of them run on the event loop that owns the :class:`~local.cluster.store.Store`; the
controllers are level-triggered reconcile loops woken by store events, never by polling.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from pathlib import Path

from elastic_training.local.cluster.garbage_collector import GarbageCollector
from elastic_training.local.cluster.job_controller import JobController
from elastic_training.local.cluster.jobset_controller import JobSetController
from elastic_training.local.cluster.jobset_placement import JobSetPodWebhook
from elastic_training.local.cluster.kubelet import Kubelet
from elastic_training.local.cluster.kueue_admission_checks import AdmissionCheckController
from elastic_training.local.cluster.kueue_jobset import KueueController, default_local_queue, suspend_on_create
from elastic_training.local.cluster.kueue_provisioning import ProvisioningController
from elastic_training.local.cluster.kueue_store import publish, register_queues
from elastic_training.local.cluster.namespace_controller import NamespaceController
from elastic_training.local.cluster.node_faults import NodeFaults
from elastic_training.local.cluster.nodes import register_nodes
from elastic_training.local.cluster.pod_priority import PodPriority
from elastic_training.local.cluster.provisioning import NodeProvisioner
from elastic_training.local.cluster.provisioning_requests import QueuedProvisioning
from elastic_training.local.cluster.scheduler import Scheduler
from elastic_training.local.cluster.store import Store
from elastic_training.local.descriptions.cluster_description import SINGLE_NODE, ClusterDescription
from elastic_training.local.descriptions.kueue_config import OFF
from elastic_training.local.nodeagent.logs import LogStore

SHUTDOWN_GRACE_CAP_SECONDS = 3.0


class ControlPlane:
    """Everything that acts on stored objects: controllers, garbage collector, kubelet."""

    def __init__(
        self,
        store: Store,
        logs: LogStore,
        workdir: Path,
        pod_env: Mapping[str, str],
        description: ClusterDescription = SINGLE_NODE,
    ) -> None:
        self.store = store
        self.description = description
        self.scheduler = Scheduler(store)
        self.pod_priority = PodPriority(store)
        self.pod_webhook = JobSetPodWebhook(store)
        self.jobsets = JobSetController(store)
        self.jobs = JobController(store)
        self.kueue = KueueController(store, description.kueue_configuration)
        self.admission_checks = AdmissionCheckController(store)
        self.kueue_provisioning = ProvisioningController(store)
        self.gc = GarbageCollector(store)
        self.namespaces = NamespaceController(store)
        self.kubelet = Kubelet(store, logs, workdir, pod_env)
        self.node_faults = NodeFaults(store, self.kubelet, description)
        self.provisioner = NodeProvisioner(store, description)
        self.provisioning_requests = QueuedProvisioning(store, self.provisioner, self.node_faults)
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Start the controllers, the garbage collector and the kubelet on the running loop."""
        if self._tasks:
            return
        register_nodes(self.store, self.description)
        register_queues(self.store, self.description.queue_objects)
        if self.description.queue_objects or self.description.kueue_configuration != OFF:
            publish(self.store, self.description.kueue_configuration)  # Kueue is installed: its ConfigMap
        self.store.add_admission(self.pod_priority.admit)  # built-in admission runs before webhooks
        self.store.add_admission(self.pod_webhook.admit)
        self.store.add_admission(default_local_queue(self.store))
        self.store.add_admission(suspend_on_create)
        controllers = (
            self.jobsets,
            self.jobs,
            self.kueue,
            self.admission_checks,
            self.kueue_provisioning,
            self.provisioning_requests,
            self.gc,
            self.namespaces,
        )
        for controller in controllers:
            controller.start()
            self._tasks.append(asyncio.create_task(controller.queue.run(), name=controller.queue.name))
        self.scheduler.start()
        self.provisioner.start()
        self.kubelet.start()

    async def stop(self) -> None:
        """Stop every pod process (SIGTERM, then SIGKILL within a few seconds) and cancel the tasks."""
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self.node_faults.cancel()
        self.provisioning_requests.cancel()
        self.provisioner.cancel()
        await self.kubelet.stop(SHUTDOWN_GRACE_CAP_SECONDS)

    async def signal_pod(self, namespace: str, name: str, sig: int, container: str | None = None) -> None:
        """Send ``sig`` to the process group of one container of a pod (default: every container)."""
        await self.kubelet.signal_pod(namespace, name, sig, container)

    async def delete_pod_now(self, namespace: str, name: str) -> None:
        """Like ``kubectl delete pod --grace-period=0 --force``: remove the pod and kill its processes."""
        await self.kubelet.delete_pod_now(namespace, name)

    def pod_pids(self, namespace: str, name: str) -> list[int]:
        """The pids of a running pod's container processes (for tests and fault injection)."""
        return self.kubelet.pids(namespace, name)
