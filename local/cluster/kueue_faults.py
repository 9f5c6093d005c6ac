"""Kueue's own faults, as a cluster admin causes them: a queue stopped, a Workload deactivated, a new configuration.

Each is what an admin does with ``kubectl`` on a real cluster, reachable over the fault endpoint
(:mod:`local.cluster.faults`) so a benchmark or the CLI can do it to a cluster in another process:

- **stop-queue**: ``kubectl patch clusterqueue C --type merge -p '{"spec":{"stopPolicy":"HoldAndDrain"}}'`` (or a
  LocalQueue, or ``Hold``, or ``None`` to start it again); kubernetes-sigs/kueue ``apis/kueue/v1beta2/
  clusterqueue_types.go`` ``StopPolicy``: ``Hold`` admits nothing new, ``HoldAndDrain`` also evicts the admitted.
- **deactivate-workload**: ``kubectl patch workload W --type merge -p '{"spec":{"active":false}}'`` on the Workload
  of a JobSet (``active: true`` reactivates it); ``workload_types.go`` ``spec.active``.
- **kueue-configuration**: the ``kueue-manager-config`` ConfigMap edited and the ``kueue-controller-manager``
  restarted, which is how a real Kueue takes a new Configuration (here at once, no restart).
"""

from __future__ import annotations

from elastic_training.local.cluster import kueue_workload as kw
from elastic_training.local.cluster.kueue_api import STOP_POLICIES
from elastic_training.local.cluster.owners import controller_ref
from elastic_training.local.cluster.resources import CLUSTER_QUEUES, JOBSETS, LOCAL_QUEUES, WORKLOADS, bad_request
from elastic_training.local.cluster.store import Obj, Store


def stop_queue(store: Store, *, cluster_queue: str | None, local_queue: str | None, policy: str) -> Obj:
    """Set ``stopPolicy`` on a ClusterQueue (by name) or a LocalQueue (``namespace/name``); the queue as written."""
    if policy not in STOP_POLICIES:
        raise bad_request(f"stopPolicy: must be one of {', '.join(STOP_POLICIES)}, got {policy!r}")
    if (cluster_queue is None) == (local_queue is None):
        raise bad_request("give clusterQueue or localQueue (namespace/name), not both")

    def change(queue: Obj) -> None:
        queue.setdefault("spec", {})["stopPolicy"] = policy

    if cluster_queue is not None:
        return store.mutate(CLUSTER_QUEUES, "", cluster_queue, change)
    namespace, _, name = str(local_queue).rpartition("/")
    return store.mutate(LOCAL_QUEUES, namespace or "default", name, change)


def workload_of_jobset(store: Store, namespace: str, jobset: str) -> Obj:
    """The Workload the JobSet ``namespace/jobset`` owns (404 for an unknown JobSet, 409 when it has none yet)."""
    owner = store.get(JOBSETS, namespace, jobset)
    wl = store.find(WORKLOADS, namespace, kw.workload_name(owner))
    ref = controller_ref(wl) if wl is not None else None
    if wl is None or ref is None or ref.get("uid") != owner["metadata"]["uid"]:
        raise bad_request(f"JobSet {namespace}/{jobset} has no Workload yet (is it in a Kueue queue?)")
    return wl


def set_workload_active(store: Store, namespace: str, jobset: str, active: bool) -> Obj:
    """``spec.active`` of the JobSet's Workload; the Workload as written."""
    wl = workload_of_jobset(store, namespace, jobset)

    def change(o: Obj) -> None:
        o.setdefault("spec", {})["active"] = active

    return store.mutate(WORKLOADS, namespace, wl["metadata"]["name"], change)
