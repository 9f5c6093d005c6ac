"""One upstream cluster per test process, shared by its modules: :func:`shared_cluster`.

An upstream control plane takes about 12 s to start and 900 MiB to run (benchmarks/RESULTS.md), so the suite does not
start one per module. Each xdist process keeps the cluster its last module asked for; a module that asks for the
same description gets it back, cleaned (:func:`reset`): Kueue's own configuration back (a module that restarted
Kueue with other settings has it restarted with the description's, as an operator edits the ConfigMap back: about 2 s
against a new cluster's 12), every workload object gone from every namespace the tests use, their pods gone from the
nodes, the nodes uncordoned and their hosts back, the API faults and provisioning rules cleared. A module that asks for
another description, or follows one that changed the cluster past what a reset undoes (:func:`spoil`: node pools
made queued-provisioning), gets a new cluster. The process stops the last one when it ends, or sooner when its
modules stop needing it (:func:`release_if_unused`: the suite's order puts the modules that use it first).
"""

from __future__ import annotations

import atexit
import copy
import time
import weakref
from pathlib import Path
from typing import Any

from kubernetes import client

from elastic_training.local.descriptions.cluster_description import ClusterDescription, load_description
from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.hooks import node_schedulable

SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease", "kueue-system", "jobset-system"})
RESET_SECONDS = 120.0
# What a module leaves behind that the next must not meet, deleted namespace by namespace (namespaced custom
# resources by group, version, plural). Kueue's Workloads go with their JobSets; ProvisioningRequests with theirs.
_CUSTOM = (
    ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
    ("kueue.x-k8s.io", "v1beta2", "workloads"),
)

# Measured alone (docs/testing.md, session 64): an idle v5e-small control plane costs 2.8 % of a core, a start 7.9
# CPU-s, so one idle about 280 s has cost a start. Stopping a little before that keeps the cost within twice the best
# choice made knowing the future (the ski-rental bound), on a loaded machine too, where idling costs more.
IDLE_STOP_SECONDS = 220.0

_current: tuple[str, UpstreamCluster] | None = None
_last_used = 0.0  # time.monotonic() when a test that uses the cluster last ran
_spoiled: weakref.WeakSet[UpstreamCluster] = weakref.WeakSet()  # changed past what a reset undoes
_NO_FINALIZERS = {"metadata": {"finalizers": None}}


def shared_cluster(description: ClusterDescription | str | Path | None, root: Path) -> UpstreamCluster:
    """The process's cluster for ``description`` (``v5e-small`` when None), reset for its next user."""
    global _current
    if isinstance(description, ClusterDescription):
        described = description
    else:
        described = load_description(description if description is not None else "v5e-small")
    key = repr(described)
    if _current is not None:
        current_key, running = _current
        if current_key == key and running not in _spoiled:
            reset(running)
            return running
        _current = None
        _spoiled.discard(running)
        running.stop()
    started = UpstreamCluster(root / f"cluster-{time.monotonic_ns()}", description=described)
    started.start()
    _current = (key, started)
    return started


def mark_used() -> None:
    """A test that uses the process's cluster runs now."""
    global _last_used
    _last_used = time.monotonic()


def release_if_unused(*, none_to_come: bool) -> bool:
    """Stop the process's cluster before a module that does not use it, when ``none_to_come`` (no module left for
    this process is known to need it) or it has been idle :data:`IDLE_STOP_SECONDS`; whether it stopped one. A
    later module that needs it starts a new one."""
    if _current is None or not (none_to_come or time.monotonic() - _last_used > IDLE_STOP_SECONDS):
        return False
    stop_shared_cluster()
    return True


def spoil(cluster: UpstreamCluster) -> None:
    """The next module gets a new cluster: this one was changed past what :func:`reset` undoes."""
    _spoiled.add(cluster)


def reset(cluster: UpstreamCluster) -> None:
    """Undo what a module did: Kueue's own configuration back, faults cleared, hosts back, nodes uncordoned,
    workloads deleted and their pods gone."""
    if cluster.kueue_reconfigured:  # a test restarted Kueue with its own Configuration
        cluster.configure_kueue(copy.deepcopy(dict(cluster.description.kueue_configuration)))
        cluster.kueue_reconfigured = False
    cluster.faults.repair_lost_slices()
    cluster.faults.cancel()
    if cluster.fault_server is not None:
        cluster.faults.clear_api_faults()
    if cluster.gke is not None:
        cluster.gke.clear_provisioning_rules()
    api = cluster.api
    core = client.CoreV1Api(api)
    if cluster.agent is not None:
        for node in cluster.agent.node_names:
            cluster.agent.restore_host(node)
    for node in core.list_node().items:
        if node.spec.unschedulable:
            core.patch_node(node.metadata.name, {"spec": {"unschedulable": None}})
    namespaces = [n.metadata.name for n in core.list_namespace().items if n.metadata.name not in SYSTEM_NAMESPACES]
    for namespace in namespaces:
        _delete_workloads(api, namespace)
    _wait_for_no_pods(core, namespaces)
    _wait_for_ready_nodes(core)


def _wait_for_ready_nodes(core: client.CoreV1Api) -> None:
    """Until every node is Ready and free of the node lifecycle controller's not-ready taints: a host repaired by the
    reset (or re-registered by a repair) keeps them until the controller's next pass, and a module that counts on every
    pool must not meet one still tainted. RuntimeError naming them after :data:`RESET_SECONDS`."""
    deadline = time.monotonic() + RESET_SECONDS
    while True:
        waiting = sorted(n.metadata.name for n in core.list_node().items if not node_schedulable(n))
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the shared cluster's reset left nodes not ready: {', '.join(waiting[:10])}")
        time.sleep(0.5)


def _delete_workloads(api: client.ApiClient, namespace: str) -> None:
    custom = client.CustomObjectsApi(api)
    for group, version, plural in _CUSTOM:
        _quietly(custom.delete_collection_namespaced_custom_object, group, version, namespace, plural)
    batch = client.BatchV1Api(api)
    _quietly(batch.delete_collection_namespaced_job, namespace, propagation_policy="Background")
    _quietly(client.CoreV1Api(api).delete_collection_namespaced_pod, namespace, grace_period_seconds=0)


def _quietly(call: Any, *args: Any, **kwargs: Any) -> None:
    try:
        call(*args, **kwargs)
    except client.ApiException as error:
        if error.status not in (404, 405):  # a CRD not installed, a collection that cannot be deleted
            raise


def _wait_for_no_pods(core: client.CoreV1Api, namespaces: list[str]) -> None:
    """Until no pod is left in ``namespaces`` (forced deletions; the Job-tracking finalizers of deleted pods released
    here, not waited for from the Job controller); RuntimeError naming what is left after :data:`RESET_SECONDS`."""
    deadline = time.monotonic() + RESET_SECONDS
    while True:
        pods = [p for ns in namespaces for p in core.list_namespaced_pod(ns).items]
        if not pods:
            return
        left = [f"{p.metadata.namespace}/{p.metadata.name}" for p in pods]
        for pod in pods:  # their Jobs are gone: release the Job-tracking finalizer, as the Job controller would
            if pod.metadata.deletion_timestamp is not None and pod.metadata.finalizers:
                _quietly(core.patch_namespaced_pod, pod.metadata.name, pod.metadata.namespace, _NO_FINALIZERS)
        if time.monotonic() > deadline:
            raise RuntimeError(f"the shared cluster's reset left pods: {', '.join(sorted(left)[:10])}")
        for ns in namespaces:
            _quietly(core.delete_collection_namespaced_pod, ns, grace_period_seconds=0)
        time.sleep(0.2)


def stop_shared_cluster() -> None:
    """Stop the process's cluster (the session's end)."""
    global _current
    if _current is not None:
        _current[1].stop()
        _current = None


atexit.register(stop_shared_cluster)
