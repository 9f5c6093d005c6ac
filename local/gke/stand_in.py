"""GKE's stand-ins together: one event loop on a thread of its own, with the node pools, the on-demand scaler and
the ProvisioningRequest responder on it, and the fault calls made from other threads.

All their state lives on that loop, so they need no locks: the informers hand it their objects, timers run on it,
and :meth:`GkeStandIn.provision_on_demand` / :meth:`GkeStandIn.provisioning` run there and wait for the answer. The
stand-ins talk to kube-apiserver as the client ``api`` is (the cluster's admin here, where GKE's autoscaler has an
identity of its own) and create and delete nodes through the node agent.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import TypeVar

from kubernetes import client

from elastic_training.local.descriptions.cluster_description import ClusterDescription
from elastic_training.local.gke.matching import Obj
from elastic_training.local.gke.node_pools import NodePools, ProvisioningError
from elastic_training.local.gke.on_demand import OnDemandScaler
from elastic_training.local.gke.provisioning_requests import QueuedProvisioning, Rule
from elastic_training.local.nodeagent import NodeAgent

T = TypeVar("T")
CALL_TIMEOUT_SECONDS = 60.0

__all__ = ["GkeStandIn", "ProvisioningError"]


class GkeStandIn:
    """GKE's node provisioning for ``description``'s pools, answering through the API ``api`` reaches."""

    def __init__(self, description: ClusterDescription, agent: NodeAgent, api: client.ApiClient) -> None:
        self._description = description
        self._agent = agent
        self._api = api
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="gke-stand-in", daemon=True)
        self._pools: NodePools | None = None
        self._scaler: OnDemandScaler | None = None
        self._requests: QueuedProvisioning | None = None

    def start(self) -> None:
        """Start the loop, then watch pods and ProvisioningRequests."""
        self._thread.start()

        def build() -> None:
            self._pools = NodePools(self._description, self._agent, self._api)
            self._scaler = OnDemandScaler(self._pools, self._api, self._loop)
            self._requests = QueuedProvisioning(self._pools, self._api, self._loop)

        self._call(build)
        if self._scaler is not None and self._requests is not None:
            self._scaler.start()
            self._requests.start()

    def stop(self) -> None:
        """Stop watching, cancel the provisioning under way, stop the loop. The nodes registered stay."""
        if not self._thread.is_alive():
            return
        for part in (self._scaler, self._requests):
            if part is not None:
                part.stop()

        def cancel() -> None:
            if self._pools is not None:
                self._pools.cancel()

        self._call(cancel)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10.0)
        if not self._thread.is_alive():
            self._loop.close()

    # -- faults (from any thread) --------------------------------------------------------------

    def provision_on_demand(self, pool: str, seconds: float, *, queued: bool = False) -> Obj:
        """An idle pool's nodes go; they come back ``seconds`` after a pending pod asks (``queued``: only for a
        ProvisioningRequest)."""

        def run() -> Obj:
            answer = self._parts()[0].make_on_demand(pool, seconds, queued=queued)
            self._parts()[1].reconsider()
            return answer

        return self._call(run)

    def provisioning(self, rule: Rule, namespace: str | None = None, name: str | None = None) -> Obj:
        """A ProvisioningRequest's outcome: now for ``namespace/name``, else for the next ``rule.count`` requests."""
        requests = self._parts()[2]
        if name:
            return self._call(lambda: requests.act(namespace or "default", name, rule))
        return self._call(lambda: requests.add_rule(rule))

    def clear_provisioning_rules(self) -> list[Obj]:
        """Drop the outcomes set for requests not yet made (what they were)."""
        requests = self._parts()[2]
        return self._call(requests.clear_rules)

    # -- plumbing ------------------------------------------------------------------------------

    def _parts(self) -> tuple[NodePools, OnDemandScaler, QueuedProvisioning]:
        if self._pools is None or self._scaler is None or self._requests is None:
            raise RuntimeError("GKE's stand-ins are not started")
        return self._pools, self._scaler, self._requests

    def _call(self, action: Callable[[], T]) -> T:
        """Run ``action`` on the loop and wait for its result (its exception raised here)."""

        async def run() -> T:
            return action()

        future = asyncio.run_coroutine_threadsafe(run(), self._loop)
        try:
            return future.result(CALL_TIMEOUT_SECONDS)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise
