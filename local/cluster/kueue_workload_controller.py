"""Kueue's Workload controller on the local cluster: every eviction that is not a preemption, and its requeue.

Checked against kubernetes-sigs/kueue v0.17.1 (the release xpk installs), ``pkg/controller/core/
workload_controller.go`` ``Reconcile``, in its order, with the helpers of ``pkg/workload/workload.go``:

- *Deactivation.* An active Workload with ``DeactivationTarget=True`` is set ``spec.active: false``. An inactive
  one not yet evicted is evicted: ``Evicted=True`` reason ``Deactivated`` ("The workload is deactivated"), or, when
  Kueue itself deactivated it, ``DeactivatedDueTo<cause>`` ("The workload is deactivated due to <cause's
  message>"); ``DeactivationTarget`` is removed and ``requeueState`` cleared. Set active again, a Workload whose
  ``Requeued`` is False for ``Deactivated`` gets ``Requeued=True`` reason ``Reactivated`` ("The workload was
  reactivated").
- *Backoff.* While ``requeueState.requeueAt`` is in the future the Workload waits (the scheduler leaves it alone:
  ``pkg/cache/queue/cluster_queue.go`` ``backoffWaitingTimeExpired``); once it passes, ``requeueAt`` is cleared
  (``count`` kept) and ``Requeued=True`` reason ``BackoffFinished`` ("The workload backoff was finished").
- *Stopped queues* (``stopPolicy``, ``reconcileOn{LocalQueue,ClusterQueue}ActiveState``): an admitted Workload of a
  LocalQueue or ClusterQueue with ``HoldAndDrain`` is evicted, reason ``LocalQueueStopped`` ("The LocalQueue is
  stopped") or ``ClusterQueueStopped`` ("The ClusterQueue is stopped"); ``Hold`` lets admitted ones run. Started
  again (``None``), a Workload whose ``Requeued`` is False for that reason gets ``Requeued=True``,
  ``LocalQueueRestarted`` / ``ClusterQueueRestarted`` ("The LocalQueue was restarted after being stopped", "The
  ClusterQueue was restarted after being stopped").
- *PodsReady timeouts* (``reconcileNotReadyTimeout``, ``admittedNotReadyWorkload``, ``triggerDeactivation``), with
  ``waitForPodsReady`` configured (:mod:`local.cluster.kueue_config`): an admitted Workload whose ``PodsReady`` is not
  True is evicted when ``timeout`` has passed since its ``Admitted`` transition (``PodsReady`` absent or reason
  ``WaitForStart``), or ``recoveryTimeout`` since ``PodsReady`` turned False for ``WaitForRecovery``: reason
  ``PodsReadyTimeout``, "Exceeded the PodsReady timeout <namespace>/<name>", underlying cause ``WaitForStart`` /
  ``WaitForRecovery``, ``requeueState.count`` + 1 and ``requeueAt`` after the backoff (``UpdateRequeueState``).
  When that count would exceed ``backoffLimitCount`` it is not evicted but given ``DeactivationTarget=True`` reason
  ``RequeuingLimitExceeded`` ("exceeding the maximum number of re-queuing retries"), which deactivates it (above).
  A timeout not reached yet is checked again when it would be (``RequeueAfter``).

The JobSet integration (:mod:`local.cluster.kueue_jobset`) then stops the JobSet and releases the quota with
``Requeued`` True only for ``Preempted`` and ``NodeFailures`` (``pkg/controller/jobframework/reconciler.go``), and
keeps ``PodsReady`` current (:func:`pods_ready_condition`: upstream's ``generatePodsReadyCondition`` over
``pkg/controller/jobs/jobset/jobset_controller.go`` ``PodsReady``: every replicated job's ``ready + succeeded``
reaching its replicas). Upstream tests matching these: ``test/integration/singlecluster/scheduler/podsready/
scheduler_test.go`` ("Should re-admit a timed out workload and deactivate a workload exceeded the re-queue count
limit"), ``test/integration/singlecluster/controller/core/workload_controller_test.go``,
``pkg/controller/core/workload_controller_test.go``.

The ``AdmissionCheck`` eviction (a ``Retry`` check) and the ``DeactivationTarget`` of a ``Rejected`` one are
:mod:`local.cluster.kueue_admission_checks`'; the deactivation and backoff that follow are this controller's, as for
every other cause.

Not modelled: ``NodeFailures`` (Kueue v0.17 sets it only with topology-aware scheduling's failed-node replacement,
which the local Kueue does not do), ``maximumExecutionTimeSeconds``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from elastic_training.local.cluster import kueue_admission_checks as ac
from elastic_training.local.cluster import kueue_workload as kw
from elastic_training.local.cluster.events import NORMAL, record_event
from elastic_training.local.cluster.resources import CLUSTER_QUEUES, LOCAL_QUEUES, WORKLOADS, ApiError
from elastic_training.local.cluster.store import Obj, Store
from elastic_training.local.descriptions.kueue_config import OFF, KueueConfiguration
from elastic_training.local.nodeagent.logs import parse_rfc3339

COMPONENT = "kueue-workload-controller"
HOLD_AND_DRAIN = "HoldAndDrain"
NOT_READY = "Not all pods are ready or succeeded"
WAITING_FOR_RECOVERY = "At least one pod has failed, waiting for recovery"
READY = "All pods reached readiness and the workload is running"
Recheck = Callable[[float], None]  # ask for this Workload to be reconciled again after N seconds


def stop_policy(queue: Obj | None) -> str:
    return str(((queue or {}).get("spec") or {}).get("stopPolicy") or "None")


def pods_ready(jobset: Obj) -> bool:
    """``JobSet.PodsReady``: the ready and succeeded Jobs of every replicated job add up to its replicas."""
    replicas = sum(int(r.get("replicas", 1)) for r in (jobset.get("spec") or {}).get("replicatedJobs") or [])
    statuses = (jobset.get("status") or {}).get("replicatedJobsStatus") or []
    return replicas == sum(int(s.get("ready", 0)) + int(s.get("succeeded", 0)) for s in statuses)


def pods_ready_condition(jobset: Obj, wl: Obj) -> tuple[bool, str, str]:
    """``generatePodsReadyCondition``: (status, reason, message) of the Workload's ``PodsReady``."""
    if not kw.is_true(wl, kw.ADMITTED):
        return False, kw.WAIT_FOR_START, NOT_READY
    current = kw.find(wl, kw.PODS_READY)
    if pods_ready(jobset):
        recovered = current is not None and current.get("reason") in (kw.WAIT_FOR_RECOVERY, kw.RECOVERED)
        return True, kw.RECOVERED if recovered else kw.STARTED, READY
    if current is not None and (current.get("status") == "True" or current.get("reason") == kw.WAIT_FOR_RECOVERY):
        return False, kw.WAIT_FOR_RECOVERY, WAITING_FOR_RECOVERY
    return False, kw.WAIT_FOR_START, NOT_READY


def sync_pods_ready(store: Store, jobset: Obj, wl: Obj) -> bool:
    """Write the Workload's ``PodsReady`` when its status or reason changed (``HasConditionWithTypeAndReason``);
    whether it wrote."""
    status, reason, message = pods_ready_condition(jobset, wl)
    current = kw.find(wl, kw.PODS_READY)
    if current is not None and (current.get("status") == "True") == status and current.get("reason") == reason:
        return False
    kw.write_status(store, wl, lambda o: kw.set_status_condition(o, kw.PODS_READY, status, reason, message))
    return True


def _since(condition: Obj | None) -> float:
    stamp = (condition or {}).get("lastTransitionTime")
    try:
        return (datetime.now(UTC) - parse_rfc3339(str(stamp))).total_seconds() if stamp else 0.0
    except ValueError:
        return 0.0


class WorkloadController:
    """``WorkloadReconciler`` for the evictions and requeues above; ``recheck`` schedules a later reconcile."""

    def __init__(self, store: Store, configuration: KueueConfiguration = OFF) -> None:
        self._store = store
        self.configuration = configuration

    def reconcile(self, namespace: str, name: str, recheck: Recheck) -> None:
        wl = self._store.find(WORKLOADS, namespace, name)
        if wl is None or wl["metadata"].get("deletionTimestamp") or kw.is_true(wl, kw.FINISHED):
            return
        if kw.is_active(wl):
            if self._reconcile_active(wl, recheck):
                return
        else:
            self._deactivate(wl)
            return
        local = self._store.find(LOCAL_QUEUES, namespace, str((wl.get("spec") or {}).get("queueName") or ""))
        cluster_queue = None
        if local is not None:
            cluster_queue = self._store.find(CLUSTER_QUEUES, "", str((local.get("spec") or {}).get("clusterQueue")))
        held = kw.find(wl, kw.REQUEUED)
        held_for = str(held.get("reason")) if held is not None and held.get("status") == "False" else ""
        for queue, stopped, restarted, kind in (
            (local, kw.REASON_LOCAL_QUEUE_STOPPED, kw.REASON_LOCAL_QUEUE_RESTARTED, "LocalQueue"),
            (cluster_queue, kw.REASON_CLUSTER_QUEUE_STOPPED, kw.REASON_CLUSTER_QUEUE_RESTARTED, "ClusterQueue"),
        ):
            if queue is not None and stop_policy(queue) == "None" and held_for == stopped:
                self._requeue(wl, restarted, f"The {kind} was restarted after being stopped")
                return
        if not kw.is_true(wl, kw.QUOTA_RESERVED):
            return
        admitted, evicted = kw.is_true(wl, kw.ADMITTED), kw.is_true(wl, kw.EVICTED)
        if admitted and not evicted and stop_policy(local) == HOLD_AND_DRAIN:
            self._evict(wl, kw.REASON_LOCAL_QUEUE_STOPPED, "The LocalQueue is stopped")
            return
        if admitted and not evicted and stop_policy(cluster_queue) == HOLD_AND_DRAIN:
            self._evict(wl, kw.REASON_CLUSTER_QUEUE_STOPPED, "The ClusterQueue is stopped")
            return
        self._not_ready_timeout(wl, recheck)

    # -- the steps ---------------------------------------------------------------------------

    def _reconcile_active(self, wl: Obj, recheck: Recheck) -> bool:
        """Deactivation target, backoff, reactivation; whether the reconcile ends here."""
        if kw.is_true(wl, kw.DEACTIVATION_TARGET):
            self._set_inactive(wl)
            return True
        at = kw.requeue_at(wl)
        if at is not None:
            remaining = (at - datetime.now(UTC)).total_seconds()
            if remaining > 0:
                recheck(remaining)
                return True
            if not kw.is_true(wl, kw.QUOTA_RESERVED):
                self._write(wl, lambda o: o["status"]["requeueState"].pop("requeueAt", None))
                return True
        requeued = kw.find(wl, kw.REQUEUED)
        if requeued is None or requeued.get("status") != "False":
            return False
        if requeued.get("reason") == kw.REASON_DEACTIVATED:
            self._requeue(wl, kw.REASON_REACTIVATED, "The workload was reactivated")
            return True
        if requeued.get("reason") in (kw.REASON_PODS_READY_TIMEOUT, kw.REASON_ADMISSION_CHECK):

            def finished(o: Obj) -> None:
                (o["status"].get("requeueState") or {}).pop("requeueAt", None)
                kw.set_requeued(o, kw.REASON_BACKOFF_FINISHED, "The workload backoff was finished", True)

            self._write(wl, finished)
            return True
        return False

    def _set_inactive(self, wl: Obj) -> None:
        meta = wl["metadata"]

        def deactivate(o: Obj) -> None:
            o.setdefault("spec", {})["active"] = False

        try:
            self._store.mutate(WORKLOADS, meta["namespace"], meta["name"], deactivate)
        except ApiError as err:
            if err.code != 404:
                raise

    def _deactivate(self, wl: Obj) -> None:
        """An inactive Workload: evicted (``Deactivated``, with Kueue's own cause) once; ``requeueState`` cleared."""
        target = kw.find(wl, kw.DEACTIVATION_TARGET)
        if kw.is_true(wl, kw.EVICTED):
            if (wl.get("status") or {}).get("requeueState") is not None:
                self._write(wl, lambda o: o["status"].pop("requeueState", None))
            return
        cause, message = "", "The workload is deactivated"
        if target is not None:
            cause, message = str(target.get("reason") or ""), f"{message} due to {target.get('message', '')}"

        def prepare(o: Obj) -> None:
            kw.remove_condition(o, kw.DEACTIVATION_TARGET)
            o.setdefault("status", {}).pop("requeueState", None)

        self._evict(wl, kw.REASON_DEACTIVATED, message, cause=cause, prepare=prepare)

    def _not_ready_timeout(self, wl: Obj, recheck: Recheck) -> None:
        pods_ready_config = self.configuration.wait_for_pods_ready
        if pods_ready_config is None or kw.is_true(wl, kw.EVICTED) or not kw.is_true(wl, kw.ADMITTED):
            return
        condition = kw.find(wl, kw.PODS_READY)
        if condition is not None and condition.get("status") == "True":
            return
        if condition is None or condition.get("reason") in (kw.WAIT_FOR_START, "PodsReady"):
            cause, remaining = kw.WAIT_FOR_START, pods_ready_config.timeout_seconds - _since(kw.find(wl, kw.ADMITTED))
        elif condition.get("reason") == kw.WAIT_FOR_RECOVERY and pods_ready_config.recovery_timeout_seconds:
            cause, remaining = kw.WAIT_FOR_RECOVERY, pods_ready_config.recovery_timeout_seconds - _since(condition)
        else:
            return
        if remaining > 0:
            recheck(remaining)
            return
        strategy = pods_ready_config.requeuing
        limit = strategy.backoff_limit_count
        if limit is not None and kw.requeue_count(wl) + 1 > limit:
            message = "exceeding the maximum number of re-queuing retries"
            self._write(
                wl,
                lambda o: kw.set_status_condition(
                    o, kw.DEACTIVATION_TARGET, True, kw.REASON_REQUEUING_LIMIT_EXCEEDED, message
                ),
            )
            return
        meta = wl["metadata"]
        wait = strategy.backoff_seconds(kw.requeue_count(wl) + 1)
        self._evict(
            wl,
            kw.REASON_PODS_READY_TIMEOUT,
            f"Exceeded the PodsReady timeout {meta['namespace']}/{meta['name']}",
            cause=cause,
            prepare=lambda o: kw.update_requeue_state(o, wait),
        )

    # -- writing -----------------------------------------------------------------------------

    def _evict(
        self, wl: Obj, reason: str, message: str, *, cause: str = "", prepare: Callable[[Obj], Any] | None = None
    ) -> None:
        """``workload.Evict``: the custom preparation, ``Evicted=True`` with the admission checks reset
        (``prepareForEviction``), and (for a Workload that held an admission) the Event ``EvictedDueTo<reason>``."""
        had_admission = (wl.get("status") or {}).get("admission") is not None
        event: list[str] = []

        def change(o: Obj) -> None:
            if prepare is not None:
                prepare(o)
            event.append(ac.evict(o, reason, message, cause))

        updated = self._write(wl, change)
        if updated is not None and had_admission and event:
            record_event(self._store, updated, NORMAL, event[0], message, COMPONENT)

    def _requeue(self, wl: Obj, reason: str, message: str) -> None:
        self._write(wl, lambda o: kw.set_requeued(o, reason, message, True))

    def _write(self, wl: Obj, change: Callable[[Obj], Any]) -> Obj | None:
        return kw.write_status(self._store, wl, change)
