"""Kueue's admission checks on the local cluster: which checks a Workload needs, their states, and what follows.

Checked against kubernetes-sigs/kueue v0.17.1 (the release xpk installs; v0.19.2 reads the same for all of this):
- ``apis/kueue/v1beta2/clusterqueue_types.go``: a ClusterQueue names its checks in
  ``admissionChecksStrategy.admissionChecks[]`` (``name``, ``onFlavors``; v1beta1's plain ``admissionChecks`` list
  converts to rules without flavors, ``apis/kueue/v1beta1/clusterqueue_conversion.go``).
- ``pkg/workload/workload.go`` ``AdmissionChecksForWorkload``: with an admission, the checks whose flavors meet the
  assigned ones (no ``onFlavors``: every flavor); without, only those that apply to all the queue's flavors.
- ``pkg/controller/core/workload_controller.go``: ``syncAdmissionCheckConditions`` (a missing check is added
  ``Pending``, an unneeded one removed, sorted by name); ``SyncAdmittedCondition`` then an ``Admitted`` Event
  ("Admitted by ClusterQueue C, wait time since reservation was Ns"); ``reconcileCheckBasedEviction``: a
  ``Rejected`` check sets the ``DeactivationTarget`` condition (reason ``AdmissionCheck``, "Admission check(s): N,
  were rejected") and a Warning Event ``AdmissionCheckRejected``; a ``Retry`` check evicts (``Evicted`` reason
  ``AdmissionCheck``, "At least one admission check is false"); ``NeedsRequeueAtUpdate`` copies the latest
  ``Retry`` check's ``lastTransitionTime + requeueAfterSeconds`` into ``requeueState.requeueAt``. The rest of that
  controller's work, the same for every cause, is :mod:`local.cluster.kueue_workload_controller`'s: after the
  backoff ``Requeued=True`` (``BackoffFinished``); a ``DeactivationTarget`` turns ``spec.active`` false, and the
  inactive Workload is evicted ``DeactivatedDueTo<cause>`` "The workload is deactivated due to <message>"
  (``workload.Evict``, ``ReasonWithCause``), the target removed. Every eviction resets the checks (:func:`evict`).
- ``pkg/workload/admissionchecks.go``: ``SetAdmissionCheckState`` (the transition time moves only with the state),
  ``resetChecksOnEviction`` (each non-Pending check back to ``Pending``, "Reset to Pending after eviction.
  Previously: S", a ``Retry`` counting in ``retryCount``); the scheduler's ``prepareWorkload``
  (``pkg/scheduler/scheduler.go``) syncs Admitted at quota reservation only once the Workload lists every check
  its admission needs (:func:`reserve_quota` lists them in that same write: upstream's workload controller has
  already added the flavor-independent ones when the Workload was created, see :func:`initial_checks`).
- The ``AdmissionCheck``'s own ``Active`` condition is the check controller's (``kueue_provisioning.py`` for
  ``kueue.x-k8s.io/provisioning-request``); a check whose controller is not here stays ``Pending``, as upstream
  without that controller (GKE's ``accelerator.gke.io/slice`` super-slicing check, for one).

Upstream's tests: ``pkg/controller/core/workload_controller_test.go`` (``TestSyncCheckStates``,
``TestReconcile`` "admission check rejected"), ``pkg/workload/admissionchecks_test.go``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from elastic_training.local.cluster import kueue_workload as kw
from elastic_training.local.cluster.events import NORMAL, WARNING, record_event
from elastic_training.local.cluster.resources import CLUSTER_QUEUES, LOCAL_QUEUES, WORKLOADS, ApiError
from elastic_training.local.cluster.store import Obj, Store, WatchEvent, now_rfc3339
from elastic_training.local.cluster.workqueue import WorkQueue
from elastic_training.local.nodeagent.logs import parse_rfc3339

COMPONENT = "kueue-admission-checks"
PENDING, READY, RETRY, REJECTED = "Pending", "Ready", "Retry", "Rejected"
DEACTIVATION_TARGET = kw.DEACTIVATION_TARGET
REASON_ADMISSION_CHECK = kw.REASON_ADMISSION_CHECK  # WorkloadEvictedByAdmissionCheck
Key = tuple[str, str]  # (namespace, name) of a Workload


def strategy_rules(cq: Obj | None) -> dict[str, list[str]]:
    """The ClusterQueue's checks: name → ``onFlavors`` (empty: every flavor)."""
    spec = (cq or {}).get("spec") or {}
    rules = (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
    return {str(r["name"]): [str(f) for f in r.get("onFlavors") or []] for r in rules if r.get("name")}


def _queue_flavors(cq: Obj) -> set[str]:
    return {
        str(f.get("name"))
        for group in (cq.get("spec") or {}).get("resourceGroups") or []
        for f in group.get("flavors") or []
    }


def checks_for_workload(wl: Obj, cq: Obj | None) -> set[str]:
    """``AdmissionChecksForWorkload``."""
    if cq is None:
        return set()
    rules = strategy_rules(cq)
    every = _queue_flavors(cq)
    admission = (wl.get("status") or {}).get("admission")
    if admission:
        assigned = {
            str(flavor)
            for psa in admission.get("podSetAssignments") or []
            for flavor in (psa.get("flavors") or {}).values()
        }
        return {name for name, flavors in rules.items() if not assigned or set(flavors or every) & assigned}
    return {name for name, flavors in rules.items() if set(flavors or every) >= every}


def checks_of(wl: Obj | None) -> list[Obj]:
    return list(((wl or {}).get("status") or {}).get("admissionChecks") or [])


def find_check(wl: Obj | None, name: str) -> Obj | None:
    return next((c for c in checks_of(wl) if c.get("name") == name), None)


def sync_check_list(wl: Obj, required: set[str]) -> bool:
    """``syncAdmissionCheckConditions``: missing checks added Pending, extra ones dropped, sorted by name."""
    current = checks_of(wl)
    names = {str(c.get("name")) for c in current}
    kept = [c for c in current if c.get("name") in required]
    added = [
        {"name": name, "state": PENDING, "message": "", "lastTransitionTime": now_rfc3339()}
        for name in sorted(required - names)
    ]
    merged = sorted(kept + added, key=lambda c: str(c.get("name")))
    if merged == current:
        return False
    status = wl.setdefault("status", {})
    if merged:
        status["admissionChecks"] = merged
    else:
        status.pop("admissionChecks", None)
    return True


def set_check_state(wl: Obj, check: Mapping[str, object]) -> bool:
    """``SetAdmissionCheckState``: add or update; the transition time moves only with the state."""
    checks = wl.setdefault("status", {}).setdefault("admissionChecks", [])
    current = next((c for c in checks if c.get("name") == check["name"]), None)
    if current is None:
        checks.append({"lastTransitionTime": now_rfc3339(), **copy.deepcopy(dict(check))})
        return True
    before = copy.deepcopy(current)
    if current.get("state") != check["state"]:
        current["state"] = check["state"]
        current["lastTransitionTime"] = now_rfc3339()
    for key in ("message", "podSetUpdates", "requeueAfterSeconds", "retryCount"):
        if key in check and check[key] is not None:
            current[key] = copy.deepcopy(check[key])
        elif key in ("podSetUpdates", "requeueAfterSeconds") and key in current and key in check:
            current.pop(key)
    return bool(current != before)


def reset_checks_on_eviction(wl: Obj) -> None:
    """``resetChecksOnEviction``."""
    checks = checks_of(wl)
    out = []
    for check in checks:
        state = check.get("state")
        if state == PENDING:
            out.append(check)
            continue
        entry: Obj = {
            "name": check.get("name"),
            "state": PENDING,
            "message": f"Reset to Pending after eviction. Previously: {state}",
            "lastTransitionTime": now_rfc3339(),
        }
        if check.get("requeueAfterSeconds") is not None:
            entry["requeueAfterSeconds"] = check["requeueAfterSeconds"]
        retries = check.get("retryCount")
        if state == RETRY:
            retries = int(retries or 0) + 1
        if retries is not None:
            entry["retryCount"] = retries
        out.append(entry)
    if checks:
        wl["status"]["admissionChecks"] = out


def evict(wl: Obj, reason: str, message: str, cause: str = "") -> str:
    """``workload.Evict``'s status change (``prepareForEviction``): ``Evicted=True``, counted in
    ``schedulingStats``, and every check reset to Pending; the Event reason to record."""
    event = kw.set_evicted(wl, reason, message, cause)
    reset_checks_on_eviction(wl)
    return event


def initial_checks(store: Store, wl: Obj) -> bool:
    """List the checks a new Workload needs before any admission (the workload controller's first sync)."""
    return sync_check_list(wl, checks_for_workload(wl, cluster_queue_of(store, wl)))


def cluster_queue_of(store: Store, wl: Obj) -> Obj | None:
    """The ClusterQueue the Workload is admitted to, else the one its LocalQueue points at."""
    admitted = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue")
    if admitted:
        return store.find(CLUSTER_QUEUES, "", str(admitted))
    queue = str((wl.get("spec") or {}).get("queueName") or "")
    local = store.find(LOCAL_QUEUES, wl["metadata"]["namespace"], queue) if queue else None
    target = ((local or {}).get("spec") or {}).get("clusterQueue")
    return store.find(CLUSTER_QUEUES, "", str(target)) if target else None


def reserve_quota(store: Store, wl: Obj, admission: Obj) -> None:
    """The scheduler's ``prepareWorkload``: reserve the quota, list every check the admission needs, sync
    Admitted (which stays absent while a check is not Ready)."""
    wl.setdefault("status", {})["admission"] = admission
    cq = store.find(CLUSTER_QUEUES, "", str(admission["clusterQueue"]))
    required = checks_for_workload(wl, cq)
    present = {str(c.get("name")) for c in checks_of(wl)}
    if required - present:
        sync_check_list(wl, required | present)
    kw.set_quota_reservation(wl, admission)


def _requeue_at(wl: Obj) -> datetime | None:
    """``GetMaxRetryTime``: the latest Retry check's transition time plus its ``requeueAfterSeconds``."""
    latest: datetime | None = None
    for check in checks_of(wl):
        after, stamp = check.get("requeueAfterSeconds"), check.get("lastTransitionTime")
        if check.get("state") != RETRY or after is None or not stamp:
            continue
        at = parse_rfc3339(str(stamp)) + timedelta(seconds=int(after))
        latest = at if latest is None or at > latest else latest
    return latest


def _stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class AdmissionCheckController:
    """The workload controller's admission-check duties, on its own work queue."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.queue: WorkQueue[Key] = WorkQueue("kueue-admission-checks", self.reconcile)
        self._rules: dict[str, dict[str, list[str]] | None] = {}  # ClusterQueue → its checks, as last seen

    def start(self) -> None:
        self._store.add_listener(self._on_event)
        for wl in self._store.list(WORKLOADS)[0]:
            self.queue.enqueue((wl["metadata"]["namespace"], wl["metadata"]["name"]))

    def _on_event(self, event: WatchEvent) -> None:
        if event.rtype == WORKLOADS and event.type != "DELETED":
            meta = event.object["metadata"]
            self.queue.enqueue((meta["namespace"], meta["name"]))
        elif event.rtype == CLUSTER_QUEUES or (event.rtype == LOCAL_QUEUES and event.type == "ADDED"):
            # The scheduler rewrites the queues' status every pass: only a change of a ClusterQueue's checks (or a
            # new LocalQueue, whose target is immutable) changes which checks a Workload needs.
            name = str(event.object["metadata"]["name"])
            if event.rtype == CLUSTER_QUEUES:
                rules = None if event.type == "DELETED" else strategy_rules(event.object)
                if self._rules.get(name) == rules:
                    return
                self._rules[name] = rules
            for wl in self._store.view(WORKLOADS)[0]:
                self.queue.enqueue((wl["metadata"]["namespace"], wl["metadata"]["name"]))

    def reconcile(self, key: Key) -> None:
        wl = self._store.find(WORKLOADS, *key)
        if wl is None or wl["metadata"].get("deletionTimestamp") or kw.is_true(wl, kw.FINISHED):
            return
        if kw.is_true(wl, DEACTIVATION_TARGET) or self._requeue_at_update(wl):
            return  # a deactivation, and the end of the backoff, are the Workload controller's
        cq = cluster_queue_of(self._store, wl)
        if cq is None:
            return
        if sync_check_list(copy.deepcopy(wl), checks_for_workload(wl, cq)):
            self._write(wl, lambda o: sync_check_list(o, checks_for_workload(o, cq)))
            return
        if not kw.is_true(wl, kw.ADMITTED) and self._sync_admitted(wl):
            return
        if kw.is_true(wl, kw.QUOTA_RESERVED):
            self._check_based_eviction(wl)

    # -- the steps, in the workload controller's order ---------------------------------------

    def _requeue_at_update(self, wl: Obj) -> bool:
        """``NeedsRequeueAtUpdate``: copy a Retry check's time into ``requeueState.requeueAt`` (the Workload
        controller ends the backoff, :mod:`local.cluster.kueue_workload_controller`)."""
        at = _requeue_at(wl)
        state = (wl.get("status") or {}).get("requeueState") or {}
        if at is None or at <= datetime.now(UTC) or state.get("requeueAt") == _stamp(at):
            return False
        self._write(
            wl, lambda o: o.setdefault("status", {}).setdefault("requeueState", {}).update(requeueAt=_stamp(at))
        )
        return True

    def _sync_admitted(self, wl: Obj) -> bool:
        if not kw.is_true(wl, kw.QUOTA_RESERVED):
            return False
        probe = copy.deepcopy(wl)
        if not kw.sync_admitted(probe):
            return False
        updated = self._write(wl, kw.sync_admitted)
        if updated is not None and kw.is_true(updated, kw.ADMITTED):
            reserved = kw.find(updated, kw.QUOTA_RESERVED) or {}
            since = parse_rfc3339(str(reserved.get("lastTransitionTime") or now_rfc3339()))
            waited = max(0.0, (datetime.now(UTC) - since).total_seconds())
            queue = ((updated.get("status") or {}).get("admission") or {}).get("clusterQueue")
            record_event(
                self._store,
                updated,
                NORMAL,
                "Admitted",
                f"Admitted by ClusterQueue {queue}, wait time since reservation was {waited:.0f}s",
                COMPONENT,
            )
        return True

    def _check_based_eviction(self, wl: Obj) -> None:
        """``reconcileCheckBasedEviction``."""
        if kw.is_true(wl, kw.EVICTED):
            return
        checks = checks_of(wl)
        rejected = [c for c in checks if c.get("state") == REJECTED]
        if rejected:
            names = ",".join(str(c.get("name")) for c in rejected)
            text = f"Admission check(s): {names}, were rejected"
            updated = self._write(
                wl, lambda o: kw.set_status_condition(o, DEACTIVATION_TARGET, True, REASON_ADMISSION_CHECK, text)
            )
            if updated is not None:
                first = rejected[0]
                record_event(
                    self._store,
                    updated,
                    WARNING,
                    "AdmissionCheckRejected",
                    f"Deactivating workload because AdmissionCheck for {first.get('name')} was Rejected: "
                    f"{first.get('message', '')}",
                    COMPONENT,
                )
            return
        if any(c.get("state") == RETRY for c in checks):
            message = "At least one admission check is false"
            event: list[str] = []
            updated = self._write(wl, lambda o: event.append(evict(o, REASON_ADMISSION_CHECK, message)))
            if updated is not None and event:
                record_event(self._store, updated, NORMAL, event[0], message, COMPONENT)

    # -- writing -----------------------------------------------------------------------------

    def _write(self, wl: Obj, change: Callable[[Obj], Any]) -> Obj | None:
        meta = wl["metadata"]
        try:
            return self._store.mutate(
                WORKLOADS, meta["namespace"], meta["name"], lambda o: _ignore(change(o)), subresource="status"
            )
        except ApiError as err:
            if err.code in (404, 409):
                return None
            raise


def _ignore(_: Any) -> None:
    return None
