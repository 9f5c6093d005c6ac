"""The chaos harness's Kueue dimensions: another team's higher-priority JobSet (a blocker) meets the run.

On ``v5e-small`` (xpk's ``cluster-queue``: 64 v5e chips in ``4xv5litepod-16``, preemption ``withinClusterQueue:
LowerPriority``) the run is submitted to ``multislice-queue`` at PriorityClass ``low`` and the blocker, made with the
admin's client as another team's run would be, at ``very-high``: a head on ``cpu-np`` and ``slices`` v5e-16 slices
(4 hosts of 4 chips each) running ``sleep``, as ``tests/operators/test_elastic_operator_kueue.py`` makes them.

- **preempt**: when the run's log shows the scheduled step, the blocker is created; it needs more chips than the run
  leaves free, so Kueue preempts the run (Workload ``Evicted`` reason ``Preempted``, ``Preempted`` reason
  ``InClusterQueue``; the JobSet suspended). Once the blocker's pods all run it holds the chips for the fault's
  ``seconds`` (sometimes past the run's stall timeout), then it is deleted and the run is admitted again.
- **queue-wait**: the blocker takes all 64 chips before the run's task starts; the run's JobSet waits suspended
  ("insufficient unused quota") until it has existed for its stall timeout plus the fault's ``seconds``; then the
  blocker is deleted.
- **pods-ready**: Kueue's ``waitForPodsReady`` is switched on (``recoveryTimeout`` 12 s, a 5 s requeue backoff: the
  cluster's ``kueue_configuration`` fault edits ``kueue-manager-config`` and restarts the manager) and the blocker
  takes every v5e-16 pool the run does not use, one slice per pool, before the run's task starts. At the scheduled
  step GKE auto-repairs the node pool of one of the run's slices for the fault's ``seconds`` (``repair-node-pool``:
  its pods evicted, the pool cordoned): the slice cannot come back inside ``recoveryTimeout``, so Kueue evicts the
  whole JobSet (``Evicted`` reason ``PodsReadyTimeout``, cause ``WaitForRecovery``) and requeues it after its
  backoff; the run is admitted again once the pool is back. Kueue's configuration is switched off at the run's end.
- **provisioning** (``--kueue provisioning``): the run goes to a flex-start queue, ``flex`` (the ClusterQueue
  ``flex-queue`` with xpk's ``dws-prov`` admission check and 3 slices of quota, as many as a run asks for) over
  three of ``v5e-small``'s v5e-16 pools made queued-provisioning ones (``provision-on-demand`` with ``queued``: no
  nodes until a ProvisioningRequest takes them). Its request then takes the fault's ``seconds`` (``delay``), or fails
  once and Kueue's retry provisions it in ``seconds`` (``fail``; the config's ``retryStrategy`` is 1 retry after 1 s),
  or is provisioned and, at the fault's step, its capacity is revoked (``revoke``: ``CapacityRevoked``, the VMs gone;
  Kueue deactivates the Workload). An outcome no request took is dropped at the run's end, and breaks a promise.

The actor notes what it saw (times on the harness's clock, Kueue's words), and :func:`broken_promises` judges the run
by it and by the operator's report.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.chaos_schedule import (
    PODS_READY,
    PODS_READY_BACKOFF_SECONDS,
    PODS_READY_RECOVERY_TIMEOUT_SECONDS,
    PREEMPT,
    PROVISION,
    PROVISION_DELAY,
    PROVISION_FAIL,
    PROVISION_REVOKE,
    QUEUE_CHIPS,
    QUEUE_WAIT,
    SLICE_CHIPS,
    Fault,
    Schedule,
)

NAMESPACE = "default"
QUEUE = "multislice-queue"
RUN_PRIORITY = "low"
BLOCKER_PRIORITY = "very-high"
# A blocker whose pods do not all run within this is deleted anyway (the note says how many ran, and why not).
BLOCKER_RUNNING_BOUND_SECONDS = 180.0
STEP_WAIT_SECONDS = 300.0  # every other wait on the cluster (suspension, eviction, admission)
POLL_SECONDS = 0.3
QUEUED_SECONDS_TOLERANCE = 1.5  # Kubernetes stamps whole seconds
FLEX_QUEUE, FLEX_CLUSTER_QUEUE = "flex", "flex-queue"
FLEX_POOLS = ("tpu-v5e-16-1", "tpu-v5e-16-2", "tpu-v5e-16-3")  # one per slice a run may ask for (2 or 3)
FLEX_CHECK, FLEX_CONFIG = "dws-prov", "dws-config"
FLEX_PROVISION_SECONDS = 5.0  # a queued pool's own delay (a delay fault sets the request's instead)
REVOKED_MESSAGE = "chaos: the flex-start VMs were reclaimed"

Obj = dict[str, Any]


def queue_for(plan: Schedule) -> str:
    """The LocalQueue a Kueue dimension's run goes to."""
    return FLEX_QUEUE if plan.kueue == "provisioning" else QUEUE


def flex_objects() -> list[tuple[str, Obj]]:
    """xpk's flex-start Kueue objects for ``flex-queue`` (one retry after 1 s): (plural, body)."""
    from elastic_training.local.gke import xpk_flex
    from elastic_training.operators.constants import TPU_RESOURCE

    retry = {"backoffLimitCount": 1, "backoffBaseSeconds": 1, "backoffMaxSeconds": 1}
    quotas: list[tuple[list[str], str, dict[str, Any]]] = [
        ([TPU_RESOURCE], "4xv5litepod-16", {TPU_RESOURCE: len(FLEX_POOLS) * SLICE_CHIPS}),
        (["cpu", "memory"], "cpu-user", {"cpu": 480, "memory": "2000G"}),
    ]
    return [
        ("provisioningrequestconfigs", xpk_flex.provisioning_request_config(FLEX_CONFIG, TPU_RESOURCE, retry)),
        ("admissionchecks", xpk_flex.admission_check(FLEX_CHECK, FLEX_CONFIG)),
        ("clusterqueues", xpk_flex.cluster_queue(FLEX_CLUSTER_QUEUE, quotas, FLEX_CHECK)),
    ]


def pods_ready_configuration() -> Obj:
    """Kueue's waitForPodsReady for the pods-ready dimension (the cluster's ``kueue-configuration`` fault)."""
    return {
        "waitForPodsReady": {
            "timeout": "10m",
            "recoveryTimeout": f"{PODS_READY_RECOVERY_TIMEOUT_SECONDS}s",
            "requeuingStrategy": {
                "backoffBaseSeconds": PODS_READY_BACKOFF_SECONDS,
                "backoffMaxSeconds": 2 * PODS_READY_BACKOFF_SECONDS,
            },
        }
    }


def blocker_manifest(name: str, slices: int, *, exclusive: bool = False) -> Obj:
    """Another team's run in the run's queue: a head on ``cpu-np`` and ``slices`` v5e-16 slices, idling
    (``exclusive``: one slice per node pool, as the run's own JobSet places them)."""
    from elastic_training.operators.constants import (
        ANNOTATION_EXCLUSIVE_TOPOLOGY,
        JOBSET_GROUP,
        JOBSET_VERSION,
        LABEL_GKE_NODEPOOL,
        LABEL_GKE_TPU_ACCELERATOR,
        LABEL_GKE_TPU_TOPOLOGY,
        LABEL_KUEUE_QUEUE_NAME,
        TPU_RESOURCE,
    )

    def rjob(name: str, replicas: int, hosts: int, limits: dict[str, str], **pod: Any) -> Obj:
        container = {"name": "main", "image": "local", "command": ["sleep", "3600"], "resources": {"limits": limits}}
        spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 2, "containers": [container], **pod}
        job = {"completionMode": "Indexed", "completions": hosts, "parallelism": hosts, "backoffLimit": 0}
        return {"name": name, "replicas": replicas, "template": {"spec": {**job, "template": {"spec": spec}}}}

    head = rjob(
        "pathways-head",
        1,
        1,
        {"cpu": "8", "memory": "8G"},
        nodeSelector={LABEL_GKE_NODEPOOL: "cpu-np"},
        priorityClassName=BLOCKER_PRIORITY,
    )
    worker = rjob(
        "worker",
        slices,
        4,
        {TPU_RESOURCE: "4"},
        nodeSelector={LABEL_GKE_TPU_ACCELERATOR: "tpu-v5-lite-podslice", LABEL_GKE_TPU_TOPOLOGY: "4x4"},
        tolerations=[{"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        priorityClassName=BLOCKER_PRIORITY,
    )
    metadata: Obj = {"name": name, "labels": {LABEL_KUEUE_QUEUE_NAME: QUEUE}}
    if exclusive:
        metadata["annotations"] = {ANNOTATION_EXCLUSIVE_TOPOLOGY: LABEL_GKE_NODEPOOL}
    return {
        "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}",
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {"replicatedJobs": [head, worker]},
    }


def condition(obj: Obj | None, kind: str) -> Obj | None:
    for found in ((obj or {}).get("status") or {}).get("conditions") or []:
        if found.get("type") == kind:
            return dict(found)
    return None


def is_true(obj: Obj | None, kind: str) -> bool:
    found = condition(obj, kind)
    return found is not None and found.get("status") == "True"


class KueueActor:
    """The blocker of one run: created, watched and deleted on the schedule's Kueue fault (a thread of its own)."""

    def __init__(self, kubeconfig: Path, plan: Schedule, faults: Any = None) -> None:
        from kubernetes import client, config

        fault = plan.kueue_fault
        if fault is None:
            raise ValueError(f"{plan.run_name} has no Kueue fault")
        if fault.kind == PODS_READY and faults is None:
            raise ValueError("the pods-ready dimension needs the cluster's faults (its Kueue configuration, repairs)")
        self.plan, self.fault = plan, fault
        self.blocker = f"blocker-{plan.run_name}"
        self._api = config.new_client_from_config(config_file=str(kubeconfig))
        self.custom, self.core = client.CustomObjectsApi(self._api), client.CoreV1Api(self._api)
        slices = QUEUE_CHIPS // SLICE_CHIPS - plan.num_slices if fault.kind == PODS_READY else len(fault.slices)
        self.notes: dict[str, Any] = {"blocker": self.blocker, "blocker_slices": slices}
        self.errors: list[str] = []
        # the cluster's faults (UpstreamCluster.faults): provisioning outcomes, Kueue's configuration, repairs
        self._faults = faults
        self._go = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"kueue-{plan.run_name}", daemon=True)

    # -- the cluster, as the admin reads it --------------------------------------------------

    def _jobset(self, name: str) -> Obj | None:
        from kubernetes import client

        from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION

        try:
            found: Obj = self.custom.get_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, name
            )
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        return found

    def _run_jobset(self) -> Obj | None:
        from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION, LABEL_RUN_NAME

        items = self.custom.list_namespaced_custom_object(
            JOBSET_GROUP,
            JOBSET_VERSION,
            NAMESPACE,
            JOBSET_PLURAL,
            label_selector=f"{LABEL_RUN_NAME}={self.plan.run_name}",
        )["items"]
        alive = [j for j in items if not j["metadata"].get("deletionTimestamp")]
        return dict(alive[-1]) if alive else None

    def _workload_of(self, jobset: Obj) -> Obj | None:
        from elastic_training.operators.constants import KUEUE_GROUP, KUEUE_VERSION, LABEL_KUEUE_JOB_UID

        items = self.custom.list_namespaced_custom_object(
            KUEUE_GROUP,
            KUEUE_VERSION,
            NAMESPACE,
            "workloads",
            label_selector=f"{LABEL_KUEUE_JOB_UID}={jobset['metadata']['uid']}",
        )["items"]
        return dict(items[0]) if items else None

    def _admitted(self, name: str) -> bool:
        found = self._jobset(name)
        return found is not None and is_true(self._workload_of(found), "Admitted")

    def _blocker_pods(self) -> tuple[int, list[str]]:
        """The blocker's running pods, and what the scheduler said of the others."""
        pods = self.core.list_namespaced_pod(
            NAMESPACE, label_selector=f"jobset.sigs.k8s.io/jobset-name={self.blocker}"
        ).items
        running = sum(1 for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp)
        said = sorted(
            {
                f"{c.reason}: {c.message}"
                for p in pods
                if p.status.phase == "Pending"
                for c in p.status.conditions or []
                if c.type == "PodScheduled" and c.status == "False"
            }
        )
        return running, said

    def _wait(self, what: str, predicate: Any, timeout: float = STEP_WAIT_SECONDS) -> Any:
        deadline = time.monotonic() + timeout
        while not self._stop.is_set():
            found = predicate()
            if found:
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
            self._stop.wait(POLL_SECONDS)
        raise InterruptedError(f"stopped while waiting for {what}")

    # -- acting --------------------------------------------------------------------------------

    def _create_blocker(self) -> None:
        from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION

        exclusive = self.fault.kind == PODS_READY
        self.custom.create_namespaced_custom_object(
            JOBSET_GROUP,
            JOBSET_VERSION,
            NAMESPACE,
            JOBSET_PLURAL,
            blocker_manifest(self.blocker, int(self.notes["blocker_slices"]), exclusive=exclusive),
        )
        self.notes["blocker_created_at"] = time.time()

    def delete_blocker(self) -> None:
        """Delete the blocker if it is there (also at the run's end, whatever happened)."""
        from kubernetes import client

        from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION

        try:
            self.custom.delete_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, self.blocker, propagation_policy="Foreground"
            )
        except client.ApiException as error:
            if error.status != 404:
                raise

    def hold_queue(self) -> None:
        """queue-wait, before the run's task starts: the blocker takes all the chips and is admitted."""
        self._create_blocker()
        self._wait("the blocker admitted", lambda: self._admitted(self.blocker))
        self.notes["blocker_admitted_at"] = time.time()

    def hold_other_pools(self) -> None:
        """pods-ready, before the run's task starts: Kueue's waitForPodsReady on, and the blocker admitted on every
        v5e-16 pool the run will not use (so a repaired slice can only come back where it was)."""
        self.notes["kueue_configuration"] = self._faults.kueue_configuration(pods_ready_configuration())
        if int(self.notes["blocker_slices"]) > 0:
            self.hold_queue()

    def repair_slice(self, pods: list[Obj], jobset: str) -> str:
        """pods-ready, at the scheduled step: GKE repairs the node pool of the fault's slice; what was done."""
        from elastic_training.operators.constants import LABEL_GKE_NODEPOOL, LABEL_JOB_INDEX, LABEL_REPLICATED_JOB_NAME

        index = str(self.fault.slices[0])
        nodes = [
            str(p["spec"].get("nodeName"))
            for p in pods
            if (p["metadata"].get("labels") or {}).get("jobset.sigs.k8s.io/jobset-name") == jobset
            and (p["metadata"].get("labels") or {}).get(LABEL_REPLICATED_JOB_NAME) == "worker"
            and (p["metadata"].get("labels") or {}).get(LABEL_JOB_INDEX) == index
            and p["spec"].get("nodeName")
        ]
        if not nodes:
            raise RuntimeError(f"slice {index} of {jobset} runs on no node")
        pool = str((self.core.read_node(nodes[0]).metadata.labels or {})[LABEL_GKE_NODEPOOL])
        repaired = self._faults.repair_node_pool(pool, self.fault.seconds)
        self.notes["repaired_pool"], self.notes["repaired_at"] = pool, time.time()
        self.notes["repair_evicted"] = len(repaired.get("evictedPods") or [])
        self._go.set()
        return f"node pool {pool} repaired for {self.fault.seconds:.0f}s"

    def preempt(self) -> None:
        """preempt, at the scheduled step: the blocker arrives (the thread follows what Kueue does with it)."""
        self._create_blocker()
        self._go.set()

    # -- provisioning ----------------------------------------------------------------------

    def prepare_provisioning(self) -> None:
        """provisioning, before the run's task starts: the flex queue (once per cluster) and the request's fault."""
        from kubernetes import client

        from elastic_training.operators.constants import KUEUE_GROUP, KUEUE_VERSION, LABEL_GKE_NODEPOOL

        if self._faults is None:
            raise ValueError("the provisioning dimension needs the cluster's faults")
        found = self.custom.list_cluster_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", field_selector=f"metadata.name={FLEX_CLUSTER_QUEUE}"
        )["items"]
        if not found:

            def idle() -> bool:
                nodes = {
                    n.metadata.name
                    for pool in FLEX_POOLS
                    for n in self.core.list_node(label_selector=f"{LABEL_GKE_NODEPOOL}={pool}").items
                }
                return not any(p.spec.node_name in nodes for p in self.core.list_pod_for_all_namespaces().items)

            self._wait("the flex pools idle", idle)
            for pool in FLEX_POOLS:
                self._faults.provision_on_demand(pool, FLEX_PROVISION_SECONDS, queued=True)
            kinds = {
                "provisioningrequestconfigs": "ProvisioningRequestConfig",
                "admissionchecks": "AdmissionCheck",
                "clusterqueues": "ClusterQueue",
            }
            for plural, body in flex_objects():
                # kube-apiserver refuses a custom object without its apiVersion and kind
                typed = {"apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", "kind": kinds[plural], **body}
                try:
                    self.custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, typed)
                except client.ApiException as error:
                    if error.status != 409:
                        raise
            self.custom.create_namespaced_custom_object(
                KUEUE_GROUP,
                KUEUE_VERSION,
                NAMESPACE,
                "localqueues",
                {
                    "apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}",
                    "kind": "LocalQueue",
                    "metadata": {"name": FLEX_QUEUE},
                    "spec": {"clusterQueue": FLEX_CLUSTER_QUEUE},
                },
            )
        outcome = self.fault.outcome
        if outcome == PROVISION_FAIL:
            self._faults.provisioning("fail", message="chaos: flex-start capacity is out in the zone")
        if outcome in (PROVISION_DELAY, PROVISION_FAIL):
            self._faults.provisioning("delay", seconds=self.fault.seconds)
        self.notes["provisioning"] = outcome
        self.notes["prepared_at"] = time.time()

    def revoke(self) -> None:
        """provisioning's revoke, at the scheduled step: the run's request loses its capacity."""
        if self._faults is None:
            raise ValueError("the provisioning dimension needs the cluster's faults")
        jobset = self._run_jobset()
        workload = self._workload_of(jobset) if jobset is not None else None
        if workload is None:
            raise RuntimeError("the run has no Workload: nothing to revoke")
        request = f"{workload['metadata']['name']}-{FLEX_CHECK}-1"
        # Follow from now: deleting 12 nodes can outlast the run, which the operator ends on Kueue's deactivation.
        self._go.set()
        revoked = self._faults.provisioning("revoke", namespace=NAMESPACE, name=request, message=REVOKED_MESSAGE)
        self.notes["revoked_at"] = time.time()
        self.notes["revoked_nodes"] = len(revoked.get("nodes") or [])

    def _follow_revocation(self) -> None:
        from elastic_training.operators.queueing import DEACTIVATION_TARGET, EVICTED

        # Kueue writes DeactivationTarget (reason AdmissionCheck) first, then evicts (Evicted, reason
        # DeactivatedDueToAdmissionCheck). The operator ends the run on the first, often before the second exists.
        jobset = self._wait("the run's JobSet", self._run_jobset)

        def deactivated() -> Obj | None:
            found = self._workload_of(jobset)
            return found if found and (is_true(found, EVICTED) or is_true(found, DEACTIVATION_TARGET)) else None

        workload = self._wait("its Workload deactivated", deactivated)
        self.notes["evicted"] = _reason(condition(workload, EVICTED)) if is_true(workload, EVICTED) else None
        self.notes["deactivation_target"] = _reason(condition(workload, DEACTIVATION_TARGET))

    def start(self) -> None:
        if self.fault.kind == QUEUE_WAIT:
            self._go.set()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._go.set()
        self._thread.join(timeout=30)
        try:
            self.delete_blocker()
        except Exception as error:
            self.errors.append(f"deleting the blocker: {type(error).__name__}: {error}")
        if self.fault.kind == PODS_READY and self._faults is not None:
            # Off again: the description's configuration (Kueue v0.17's defaults), so the next run starts clean.
            self._faults.kueue_configuration({})
        if self.fault.kind == PROVISION and self._faults is not None:
            # An outcome no request took (the run never reached provisioning) would otherwise hit the lane's next run.
            try:
                self.notes["untaken_outcomes"] = [r.get("outcome") for r in self._faults.clear_provisioning_rules()]
            except Exception as error:
                self.errors.append(f"clearing the provisioning outcomes: {type(error).__name__}: {error}")
        self._api.close()

    def _run(self) -> None:
        self._go.wait()
        if self._stop.is_set():
            return
        try:
            if self.fault.kind == QUEUE_WAIT:
                self._follow_queue_wait()
            elif self.fault.kind == PREEMPT:
                self._follow_preemption()
            elif self.fault.kind == PROVISION and self.fault.outcome == PROVISION_REVOKE:
                self._follow_revocation()
            elif self.fault.kind == PODS_READY:
                self._follow_pods_ready_eviction()
        except InterruptedError:
            pass
        except Exception as error:
            self.errors.append(f"{type(error).__name__}: {error}")

    def _follow_queue_wait(self) -> None:
        jobset = self._wait("the run's JobSet", self._run_jobset)
        name = jobset["metadata"]["name"]
        self.notes["run_jobset_seen_at"] = time.time()
        workload = self._wait(
            "Kueue's answer",
            lambda: (w := self._workload_of(self._jobset(name) or jobset)) and condition(w, "QuotaReserved") and w,
        )
        self.notes["pending_reason"] = _said(condition(workload, "QuotaReserved"))
        # Kubernetes' creation time (whole seconds), on this machine's clock: the wait runs from it.
        created = _stamp(jobset["metadata"]["creationTimestamp"])
        release_at = created + self.plan.stall_timeout_seconds + self.fault.seconds
        admitted_early = False
        while time.time() < release_at and not self._stop.is_set():
            current = self._jobset(name)
            if current is None or current["spec"].get("suspend") is not True:
                admitted_early = True
                break
            self._stop.wait(POLL_SECONDS)
        self.notes["admitted_before_release"] = admitted_early
        self.notes["released_at"] = time.time()
        self.delete_blocker()
        self._wait("the run resumed", lambda: (self._jobset(name) or {}).get("spec", {}).get("suspend") is False)
        self.notes["resumed_seen_at"] = time.time()

    def _follow_preemption(self) -> None:
        jobset = self._wait("the run's JobSet", self._run_jobset)
        name = jobset["metadata"]["name"]
        self.notes["preempted_jobset"] = name
        self._wait("the run suspended", lambda: (self._jobset(name) or {}).get("spec", {}).get("suspend") is True)
        self.notes["suspended_seen_at"] = time.time()
        workload = self._wait(
            "its Workload evicted", lambda: (w := self._workload_of(jobset)) and is_true(w, "Evicted") and w
        )
        self.notes["evicted"] = _reason(condition(workload, "Evicted"))
        self.notes["preempted"] = _reason(condition(workload, "Preempted"))
        self._wait("the blocker admitted", lambda: self._admitted(self.blocker))
        self.notes["blocker_admitted_at"] = time.time()
        wanted = 1 + 4 * len(self.fault.slices)
        deadline = time.monotonic() + BLOCKER_RUNNING_BOUND_SECONDS
        running, said = self._blocker_pods()
        while running < wanted and time.monotonic() < deadline and not self._stop.is_set():
            self._stop.wait(POLL_SECONDS)
            running, said = self._blocker_pods()
        self.notes["blocker_running"] = f"{running} of {wanted}"
        if running < wanted:
            self.notes["blocker_unschedulable"] = said[:3]
        self.notes["blocker_running_at"] = time.time()
        self._stop.wait(self.fault.seconds)
        if self._stop.is_set():
            return
        self.notes["released_at"] = time.time()
        self.delete_blocker()
        self._wait("the run resumed", lambda: (self._jobset(name) or {}).get("spec", {}).get("suspend") is False)
        self.notes["resumed_seen_at"] = time.time()

    def _follow_pods_ready_eviction(self) -> None:
        jobset = self._wait("the run's JobSet", self._run_jobset)
        name = jobset["metadata"]["name"]
        workload = self._wait(
            "Kueue's PodsReady timeout",
            lambda: (
                (w := self._workload_of(jobset))
                and (c := condition(w, "Evicted"))
                and c.get("status") == "True"
                and c.get("reason") != "Preempted"
                and w
            ),
        )
        self.notes["evicted"] = _reason(condition(workload, "Evicted"))
        self.notes["evicted_at"] = time.time()
        stats = ((workload.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []
        self.notes["eviction_causes"] = sorted(str(e.get("underlyingCause")) for e in stats)
        self._wait("the run suspended", lambda: (self._jobset(name) or {}).get("spec", {}).get("suspend") is True)
        self._wait("the run resumed", lambda: (self._jobset(name) or {}).get("spec", {}).get("suspend") is False)
        self.notes["resumed_seen_at"] = time.time()


def _said(found: Obj | None) -> str:
    if found is None:
        return ""
    return ": ".join(str(p) for p in (found.get("status"), found.get("reason"), found.get("message")) if p)[:400]


def _reason(found: Obj | None) -> str:
    return "" if found is None else f"{found.get('status')}/{found.get('reason')}"


def _stamp(text: str) -> float:
    from elastic_training.operators.observations import parse_time

    parsed = parse_time(text)
    if parsed is None:
        raise ValueError(f"not a Kubernetes time: {text!r}")
    return parsed


def broken_promises(
    plan: Schedule,
    notes: dict[str, Any],
    report: dict[str, Any],
    outcome: str,
    jobsets: list[Obj],
) -> list[str]:
    """The Kueue promises the run broke (empty: all kept).

    Both: success; no full restart, no slice restart, no in-process recovery, no escalation the preemption does not
    explain. preempt: Kueue evicted it (``Preempted``/``InClusterQueue``), one preemption in the report, resumed from
    a committed step (a multiple of the period) with at most one period lost, and one JobSet unless the operator says
    it recreated it for the preemption (``preemption_recreations``: the trainer exited 0 on the SIGTERM, so its Job
    completed). queue-wait: never admitted while the blocker held, one JobSet, no preemption, ``queued_seconds`` the
    JobSet's own (creation to resume) and longer than the stall timeout.
    """
    fault = plan.kueue_fault
    broken: list[str] = []
    if fault is None:
        return broken
    if fault.kind == PROVISION:
        return _broken_provisioning(fault, notes, report, outcome, jobsets)
    if outcome != "success":
        broken.append(f"outcome {outcome}")
    # pods-ready: the repair's slice loss opens an in-process recovery that Kueue's eviction cuts short.
    allowed = {"in_process_recoveries": 1} if fault.kind == PODS_READY else {}
    for key in ("full_restarts", "slice_restarts", "in_process_recoveries"):
        if int(report.get(key) or 0) > allowed.get(key, 0):
            broken.append(f"{key}={report.get(key)}")
    preemptions = report.get("preemptions") or []
    recreated = int(report.get("preemption_recreations") or 0)
    unexplained = [e for e in report.get("escalations") or [] if not e.get("preemption")]
    if unexplained:
        broken.append("escalations " + ", ".join(str(e.get("reason")) for e in unexplained))
    if fault.kind == PODS_READY:
        return broken + _pods_ready_broken(plan, notes, report, jobsets, recreated)
    if fault.kind == PREEMPT:
        if notes.get("evicted") != "True/Preempted" or notes.get("preempted") != "True/InClusterQueue":
            broken.append(f"eviction {notes.get('evicted')!r}, {notes.get('preempted')!r}")
        if len(preemptions) != 1:
            broken.append(f"{len(preemptions)} preemptions in the report")
        broken += _resumed_within_a_period(plan, preemptions)
        if len(jobsets) != 1 + recreated:
            broken.append(f"{len(jobsets)} JobSets, {recreated} recreated for the preemption")
    else:
        if notes.get("admitted_before_release"):
            broken.append("admitted while the blocker held the quota")
        if preemptions:
            broken.append(f"{len(preemptions)} preemptions")
        if len(jobsets) != 1:
            broken.append(f"{len(jobsets)} JobSets")
        queued = report.get("queued_seconds")
        jobset = jobsets[0] if jobsets else None
        suspended = condition(jobset, "Suspended")
        if queued is None or queued < plan.stall_timeout_seconds:
            broken.append(f"queued_seconds {queued}, not past the stall timeout")
        elif jobset is not None and suspended is not None and suspended.get("status") == "False":
            own = _stamp(suspended["lastTransitionTime"]) - _stamp(jobset["metadata"]["creationTimestamp"])
            if abs(float(queued) - own) > QUEUED_SECONDS_TOLERANCE:
                broken.append(f"queued_seconds {queued} but the JobSet waited {own:.0f} s")
        else:
            broken.append("no resume on the JobSet to check queued_seconds against")
    return broken


def _broken_provisioning(
    fault: Fault, notes: dict[str, Any], report: dict[str, Any], outcome: str, jobsets: list[Obj]
) -> list[str]:
    """provisioning: one JobSet, no full restart, slice restart or escalation (a capacity event spends no budget), the
    wait told apart as provisioning with each outcome named in the report. delay: success, provisioning at least the
    fault's seconds. fail: success, a ``Retry`` and then a ``Ready`` note. revoke: Kueue deactivated the Workload
    (``DeactivatedDueToAdmissionCheck``); the run fails at once on the deactivation (nothing admits it again) naming
    the revocation, and lost no committed step (it never resumed)."""
    from elastic_training.operators.queueing import EVICTION_WORDS, EvictionKind

    broken: list[str] = []
    for key in ("full_restarts", "slice_restarts", "in_process_recoveries"):
        if report.get(key):
            broken.append(f"{key}={report.get(key)}")
    if report.get("escalations"):
        broken.append("escalations " + ", ".join(str(e.get("reason")) for e in report["escalations"]))
    if len(jobsets) != 1:
        broken.append(f"{len(jobsets)} JobSets")
    if notes.get("untaken_outcomes"):
        broken.append(f"no request took the fault ({', '.join(map(str, notes['untaken_outcomes']))})")
    said = [
        str(note[1])
        for note in report.get("provisioning_notes") or []
        if isinstance(note, list | tuple) and len(note) == 2
    ]
    ready = f"admission check {FLEX_CHECK} Ready"
    if fault.outcome == PROVISION_REVOKE:
        if outcome != "failed":
            broken.append(f"outcome {outcome}, not failed naming the revocation")
        deactivated = ("True/DeactivatedDueToAdmissionCheck", "True/AdmissionCheck")
        if notes.get("evicted") not in deactivated and notes.get("deactivation_target") not in deactivated:
            broken.append(
                f"eviction {notes.get('evicted')!r}, deactivation target {notes.get('deactivation_target')!r}"
            )
        if not any(REVOKED_MESSAGE in s and " Rejected" in s for s in said):
            broken.append("the revocation is not in the report's provisioning notes")
        failure = str(report.get("failure") or "")
        if REVOKED_MESSAGE not in failure:
            broken.append("the failure does not name the revocation")
        if f"it was {EVICTION_WORDS[EvictionKind.DEACTIVATED]}" not in failure:
            broken.append("the run did not end on its Workload's deactivation (queue_timeout ended it?)")
        return broken
    if outcome != "success":
        broken.append(f"outcome {outcome}")
    if not any(s.startswith(ready) for s in said):
        broken.append("no Ready admission check in the report")
    # The Retry as Kueue showed it, or (when the operator read the Workload only after Kueue reset the check) its count.
    retried = (" Retry: Retrying after failure", " Retry: retried ")
    if fault.outcome == PROVISION_FAIL and not any(r in s for s in said for r in retried):
        broken.append("the failed request's retry is not in the report")
    waited = float(report.get("provisioning_seconds") or 0.0)
    if fault.outcome == PROVISION_DELAY and waited + QUEUED_SECONDS_TOLERANCE < fault.seconds:
        broken.append(f"provisioning_seconds {waited}, the request took {fault.seconds:.0f} s")
    return broken


def _pods_ready_broken(
    plan: Schedule, notes: dict[str, Any], report: dict[str, Any], jobsets: list[Obj], recreated: int
) -> list[str]:
    """pods-ready: Kueue evicted the run for its recoveryTimeout (``PodsReadyTimeout``, ``WaitForRecovery``), the
    report names that eviction and no preemption, it resumed from a committed step with at most one period lost,
    and one JobSet unless the operator recreated it for the eviction."""
    broken = []
    if notes.get("evicted") != "True/PodsReadyTimeout" or notes.get("eviction_causes") != ["WaitForRecovery"]:
        broken.append(f"eviction {notes.get('evicted')!r}, causes {notes.get('eviction_causes')!r}")
    if notes.get("repair_evicted", 0) < 1:
        broken.append("the repair evicted no pod")
    entries = report.get("preemptions") or []
    kinds = [e.get("eviction") for e in entries]
    if kinds != ["pods_ready_timeout"] or report.get("pods_ready_evictions") != 1:
        broken.append(f"evictions in the report {kinds}, pods_ready_evictions={report.get('pods_ready_evictions')}")
    if report.get("preemption_count"):
        broken.append(f"preemption_count={report.get('preemption_count')}: a PodsReady timeout is no preemption")
    broken += _resumed_within_a_period(plan, entries)
    if len(jobsets) != 1 + recreated:
        broken.append(f"{len(jobsets)} JobSets, {recreated} recreated for the eviction")
    return broken


def _resumed_within_a_period(plan: Schedule, entries: list[Obj]) -> list[str]:
    """The first eviction resumed from a committed step (a multiple of the period, or the final step: an eviction
    after its commit resumes there), at most one period lost."""
    broken = []
    for entry in entries[:1]:
        restored, lost = entry.get("restored_step"), entry.get("steps_lost")
        if restored is not None and restored % plan.checkpoint_period != 0 and restored != plan.steps - 1:
            broken.append(f"restored step {restored}, not a checkpoint")
        if lost is None or not 0 <= int(lost) <= plan.checkpoint_period:
            broken.append(f"steps lost {lost}")
    return broken
