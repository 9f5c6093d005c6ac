"""Kueue's ProvisioningRequest admission check on the local cluster (``kueue.x-k8s.io/provisioning-request``).

Checked against kubernetes-sigs/kueue v0.17.1 ``pkg/controller/admissionchecks/provisioning/`` (``controller.go``,
``provisioning.go``, ``admissioncheck_reconciler.go``, ``constants.go``; v0.19.2's differs only in cleaning up
requests on eviction behind a feature gate) and its tests ``controller_test.go``, ``admissioncheck_reconciler_test.go``:

- An AdmissionCheck with this controller is ``Active=True`` (``Active``, "The admission check is active") when its
  ``parameters`` name an existing ProvisioningRequestConfig, else ``Active=False`` (``BadParametersRef``).
- For a Workload holding quota (not finished, not evicted) whose checks include one of this controller's: a
  config that does not exist leaves the check ``Pending`` "the check is not active"; a Workload none of whose pod
  sets uses the config's ``managedResources`` gets ``Ready`` "the provisioning request is not needed"; otherwise
  a ProvisioningRequest ``<workload>-<check>-<attempt>`` is created (label ``kueue.x-k8s.io/managed: "true"``,
  owner the Workload; class and parameters from the config), one PodTemplate ``ppt-<request>-<podset>`` per pod
  set (the flavors' node labels merged into its node selector, their tolerations added, limits copied into
  missing requests; owned by the Workload, then by the request), Event ``ProvisioningRequestCreated``.
- The request's conditions decide the check (``syncCheckStates``): ``Failed`` → ``Retry`` "Retrying after
  failure: M" with ``requeueAfterSeconds`` from ``retryStrategy`` (base·2^(n-1), at most max) while the attempt
  is ≤ ``backoffLimitCount``, else ``Rejected`` with the request's message; ``CapacityRevoked`` → ``Rejected`` with
  its message (the Workload is deactivated, so its pods do not wait for nodes that are gone); ``BookingExpired``
  before admission → ``Retry`` "Retrying after booking expired: M" (or ``Rejected``), after admission ignored;
  ``Provisioned`` → ``Ready`` with the request's message and ``podSetUpdates`` (annotations
  ``autoscaling.x-k8s.io/consume-provisioning-request``, ``autoscaling.x-k8s.io/provisioning-class-name``; the
  config's ``podSetUpdates.nodeSelector`` filled from ``status.provisioningClassDetails``); ``Accepted`` with a
  ``Provisioned`` condition → its message (the ETA) while Pending. Each state change is an Event
  ``AdmissionCheckUpdated`` "Admission check C updated state from A to B with message: M". A failed attempt still
  Pending (after the eviction reset it) gets the next attempt's request; requests not the latest are deleted.

Not modelled: ``podSetMergePolicy`` (every pod set is its own), the Workload's ``provreq.kueue.x-k8s.io/``
annotations passed as parameters.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Callable, Mapping
from typing import Any

from elastic_training.local.cluster import kueue_admission_checks as ac
from elastic_training.local.cluster import kueue_workload as kw
from elastic_training.local.cluster.events import NORMAL, record_event
from elastic_training.local.cluster.owners import owner_reference
from elastic_training.local.cluster.resources import (
    ADMISSION_CHECKS,
    POD_TEMPLATES,
    PROVISIONING_REQUEST_CONFIGS,
    PROVISIONING_REQUESTS,
    RESOURCE_FLAVORS,
    WORKLOADS,
    ApiError,
)
from elastic_training.local.cluster.store import Obj, Store, WatchEvent
from elastic_training.local.cluster.workqueue import WorkQueue

CONTROLLER_NAME = "kueue.x-k8s.io/provisioning-request"
COMPONENT = "kueue-provisioning"
CHECK_INACTIVE = "the check is not active"
NO_REQUEST_NEEDED = "the provisioning request is not needed"
LABEL_MANAGED = "kueue.x-k8s.io/managed"
ANNOTATION_CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"
ANNOTATION_CLASS = "autoscaling.x-k8s.io/provisioning-class-name"
# ProvisioningRequest condition types (kubernetes/autoscaler autoscaling.x-k8s.io/v1 types.go).
ACCEPTED, PROVISIONED, FAILED = "Accepted", "Provisioned", "Failed"
BOOKING_EXPIRED, CAPACITY_REVOKED = "BookingExpired", "CapacityRevoked"
_NAME_HASH, _NAME_MAX_PREFIX = 5, 252 - 5
Key = tuple[str, str, str]  # ("ac", "", name) or ("wl", namespace, name)


def limit_name(full: str) -> str:
    """``limitObjectName``: a name over 247 characters is cut and given 5 hex of its sha1."""
    if len(full) <= _NAME_MAX_PREFIX:
        return full
    return f"{full[:_NAME_MAX_PREFIX]}-{hashlib.sha1(full.encode()).hexdigest()[:_NAME_HASH]}"


def request_name(workload: str, check: str, attempt: int) -> str:
    return limit_name(f"{workload}-{check}-{attempt}")


def template_name(request: str, pod_set: str) -> str:
    return limit_name(f"ppt-{request}-{pod_set}")


def attempt_of(request: Obj, workload: str, check: str) -> int | None:
    prefix = limit_name(f"{workload}-{check}-")
    found = re.fullmatch(re.escape(prefix) + r"([0-9]+)", str(request["metadata"]["name"]))
    return int(found.group(1)) if found else None


def condition(obj: Obj | None, kind: str) -> Obj | None:
    return kw.find(obj, kind)


def true(obj: Obj | None, kind: str) -> bool:
    return kw.is_true(obj, kind)


def backoff_seconds(retry_count: int, base: int, maximum: int) -> int:
    """``UpdateAdmissionCheckRequeueState``: about base·2^(n-1) for the n-th retry (jitter 0.01 %, left out)."""
    return int(min(float(maximum), float(base) * 2 ** max(0, retry_count)))


def _uses(pod_spec: Obj, resources: set[str]) -> bool:
    for container in [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]:
        found = container.get("resources") or {}
        if resources & {*(found.get("requests") or {}), *(found.get("limits") or {})}:
            return True
    return False


def required_pod_sets(wl: Obj, config: Obj) -> list[Obj]:
    """``requiredPodSets``: the pod sets using one of the config's ``managedResources`` (none listed: all)."""
    managed = set((config.get("spec") or {}).get("managedResources") or [])
    pod_sets = (wl.get("spec") or {}).get("podSets") or []
    return [p for p in pod_sets if not managed or _uses(((p.get("template") or {}).get("spec") or {}), managed)]


class ProvisioningController:
    """The admission check controller for ``kueue.x-k8s.io/provisioning-request``."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.queue: WorkQueue[Key] = WorkQueue("kueue-provisioning", self.reconcile)

    def start(self) -> None:
        self._store.add_listener(self._on_event)
        for check in self._store.list(ADMISSION_CHECKS)[0]:
            self.queue.enqueue(("ac", "", check["metadata"]["name"]))
        for wl in self._store.list(WORKLOADS)[0]:
            self.queue.enqueue(("wl", wl["metadata"]["namespace"], wl["metadata"]["name"]))

    def _on_event(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        if event.rtype == WORKLOADS and event.type != "DELETED":
            self.queue.enqueue(("wl", meta["namespace"], meta["name"]))
        elif event.rtype == PROVISIONING_REQUESTS:
            for ref in meta.get("ownerReferences") or []:
                if ref.get("kind") == "Workload":
                    self.queue.enqueue(("wl", meta["namespace"], str(ref.get("name"))))
        elif event.rtype in (ADMISSION_CHECKS, PROVISIONING_REQUEST_CONFIGS):
            for check in self._store.view(ADMISSION_CHECKS)[0]:
                self.queue.enqueue(("ac", "", check["metadata"]["name"]))
            for wl in self._store.view(WORKLOADS)[0]:
                if ac.checks_of(wl):
                    self.queue.enqueue(("wl", wl["metadata"]["namespace"], wl["metadata"]["name"]))

    def reconcile(self, key: Key) -> None:
        kind, namespace, name = key
        if kind == "ac":
            self._reconcile_check(name)
            return
        wl = self._store.find(WORKLOADS, namespace, name)
        if wl is None or not kw.is_true(wl, kw.QUOTA_RESERVED) or kw.is_true(wl, kw.FINISHED):
            return
        if kw.is_true(wl, kw.EVICTED):
            return
        self._reconcile_workload(wl)

    # -- the AdmissionCheck's Active condition ---------------------------------------------------

    def config_for(self, check: Obj | None) -> tuple[Obj | None, str]:
        """The check's ProvisioningRequestConfig, or None and why (``ConfigFromRef``)."""
        params = ((check or {}).get("spec") or {}).get("parameters") or {}
        if params.get("apiGroup") != "kueue.x-k8s.io" or params.get("kind") != "ProvisioningRequestConfig":
            return None, f"wrong kind in parameters reference: {params.get('apiGroup')}/{params.get('kind')}"
        name = str(params.get("name") or "")
        config = self._store.find(PROVISIONING_REQUEST_CONFIGS, "", name)
        if config is None:
            return None, f'provisioningrequestconfigs.kueue.x-k8s.io "{name}" not found'
        return config, ""

    def _reconcile_check(self, name: str) -> None:
        check = self._store.find(ADMISSION_CHECKS, "", name)
        if check is None or (check.get("spec") or {}).get("controllerName") != CONTROLLER_NAME:
            return
        _, why = self.config_for(check)
        current = kw.find(check, "Active")
        active = not why
        if current is not None and (current.get("status") == "True") == active:
            return
        reason, message = ("Active", "The admission check is active") if active else ("BadParametersRef", why)

        def change(o: Obj) -> None:
            kw.set_status_condition(o, "Active", active, reason, message)

        self._store.mutate(ADMISSION_CHECKS, "", name, change, subresource="status")

    # -- the Workload's checks -------------------------------------------------------------------

    def _ours(self, wl: Obj) -> dict[str, Obj | None]:
        """The Workload's checks this controller owns → their config (None: the check is not active)."""
        out: dict[str, Obj | None] = {}
        for state in ac.checks_of(wl):
            check = self._store.find(ADMISSION_CHECKS, "", str(state.get("name")))
            if check is not None and (check.get("spec") or {}).get("controllerName") == CONTROLLER_NAME:
                out[str(state["name"])] = self.config_for(check)[0]
        return out

    def _owned_requests(self, wl: Obj) -> list[Obj]:
        uid = wl["metadata"]["uid"]
        requests, _ = self._store.view(
            PROVISIONING_REQUESTS,
            wl["metadata"]["namespace"],
            lambda r: any(ref.get("uid") == uid for ref in r["metadata"].get("ownerReferences") or []),
        )
        return [copy.deepcopy(r) for r in requests]

    def _latest(self, wl: Obj, configs: Mapping[str, Obj | None], owned: list[Obj]) -> dict[str, Obj]:
        """``activeOrLastPRForChecks``: per check, its request of the highest attempt in step with the config."""
        name = str(wl["metadata"]["name"])
        latest: dict[str, Obj] = {}
        for check, config in configs.items():
            if config is None or not required_pod_sets(wl, config):
                continue
            spec = config.get("spec") or {}
            for request in owned:
                attempt = attempt_of(request, name, check)
                rspec = request.get("spec") or {}
                synced = rspec.get("provisioningClassName") == spec.get("provisioningClassName") and all(
                    (rspec.get("parameters") or {}).get(k) == v for k, v in (spec.get("parameters") or {}).items()
                )
                if attempt is None or not synced:
                    continue
                best = latest.get(check)
                if best is None or (attempt_of(best, name, check) or 0) < attempt:
                    latest[check] = request
        return latest

    def _reconcile_workload(self, wl: Obj) -> None:
        configs = self._ours(wl)
        if not configs:
            return
        owned = self._owned_requests(wl)
        latest = self._latest(wl, configs, owned)
        wl = self._sync_states(wl, configs, latest)
        keep = {r["metadata"]["name"] for r in latest.values()}
        for request in owned:
            if request["metadata"]["name"] not in keep:
                self._delete(PROVISIONING_REQUESTS, request)
        self._sync_requests(wl, configs, latest)

    def _sync_states(self, wl: Obj, configs: Mapping[str, Obj | None], latest: Mapping[str, Obj]) -> Obj:
        """``syncCheckStates``: each check's state from its request; an Event per state change."""
        name = str(wl["metadata"]["name"])
        admitted = kw.is_true(wl, kw.ADMITTED)
        active = (wl.get("spec") or {}).get("active") is not False
        states: dict[str, Obj] = {}
        for check, config in configs.items():
            state = copy.deepcopy(ac.find_check(wl, check) or {"name": check, "state": ac.PENDING})
            if config is None:
                state.update(state=ac.PENDING, message=CHECK_INACTIVE)
            elif not required_pod_sets(wl, config):
                if state.get("state") != ac.READY:
                    state.update(state=ac.READY, message=NO_REQUEST_NEEDED, podSetUpdates=None)
            else:
                request = latest.get(check)
                if request is None:
                    continue
                self._state_from_request(
                    state, request, config, attempt_of(request, name, check) or 1, admitted, active
                )
            states[check] = state
        if not states:
            return wl
        before = {c: (ac.find_check(wl, c) or {}).get("state") for c in states}

        def change(o: Obj) -> None:
            for state in states.values():
                ac.set_check_state(o, state)

        probe = copy.deepcopy(wl)
        change(probe)
        if ac.checks_of(probe) == ac.checks_of(wl):
            return wl
        updated = self._write(wl, change)
        if updated is None:
            return wl
        for check, state in states.items():
            old, new = before.get(check), state.get("state")
            if old is not None and old != new:
                message = f"Admission check {check} updated state from {old} to {new}"
                if state.get("message"):
                    message += f" with message: {state['message']}"
                record_event(self._store, updated, NORMAL, "AdmissionCheckUpdated", message, COMPONENT)
        return updated

    def _state_from_request(
        self, state: Obj, request: Obj, config: Obj, attempt: int, admitted: bool, active: bool
    ) -> None:
        retry = (config.get("spec") or {}).get("retryStrategy") or {}
        limit = int(retry.get("backoffLimitCount", 3))
        base, maximum = int(retry.get("backoffBaseSeconds", 60)), int(retry.get("backoffMaxSeconds", 1800))

        def retry_or_reject(kind: str, words: str) -> None:
            said = str((condition(request, kind) or {}).get("message") or "")
            if attempt <= limit:
                if said:
                    state["message"] = f"{words}: {said}"
                if attempt > int(state.get("retryCount") or 0):
                    state["state"] = ac.RETRY
                    state["requeueAfterSeconds"] = backoff_seconds(int(state.get("retryCount") or 0), base, maximum)
            else:
                state.update(state=ac.REJECTED, message=said)

        if true(request, FAILED):
            retry_or_reject(FAILED, "Retrying after failure")
        elif true(request, CAPACITY_REVOKED):
            if active:
                state.update(
                    state=ac.REJECTED, message=str((condition(request, CAPACITY_REVOKED) or {}).get("message") or "")
                )
        elif true(request, BOOKING_EXPIRED):
            if not admitted:
                retry_or_reject(BOOKING_EXPIRED, "Retrying after booking expired")
        elif true(request, PROVISIONED):
            if state.get("state") != ac.READY:
                state["state"] = ac.READY
                state["podSetUpdates"] = self._pod_set_updates(request, config)
                said = (condition(request, PROVISIONED) or {}).get("message")
                if said:
                    state["message"] = str(said)
        elif true(request, ACCEPTED):
            provisioned = condition(request, PROVISIONED)
            if provisioned is not None:
                if provisioned.get("message"):
                    state["message"] = str(provisioned["message"])
                state["state"] = ac.PENDING
        else:
            state["state"] = ac.PENDING

    def _pod_set_updates(self, request: Obj, config: Obj) -> list[Obj]:
        """``podSetUpdates``: the consume annotations, and node selectors from the class details."""
        details = (request.get("status") or {}).get("provisioningClassDetails") or {}
        selectors = ((config.get("spec") or {}).get("podSetUpdates") or {}).get("nodeSelector") or []
        wl_pod_sets = {}
        for ref in request["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == "Workload":
                wl = self._store.find(WORKLOADS, request["metadata"]["namespace"], str(ref.get("name")))
                for pod_set in ((wl or {}).get("spec") or {}).get("podSets") or []:
                    wl_pod_sets[template_name(request["metadata"]["name"], pod_set["name"])] = pod_set["name"]
        updates = []
        for pod_set in (request.get("spec") or {}).get("podSets") or []:
            update: Obj = {
                "name": wl_pod_sets.get(str((pod_set.get("podTemplateRef") or {}).get("name")), ""),
                "annotations": {
                    ANNOTATION_CONSUME: request["metadata"]["name"],
                    ANNOTATION_CLASS: (request.get("spec") or {}).get("provisioningClassName", ""),
                },
            }
            if selectors:
                update["nodeSelector"] = {
                    str(s["key"]): str(details[s["valueFromProvisioningClassDetail"]])
                    for s in selectors
                    if s.get("valueFromProvisioningClassDetail") in details
                }
            updates.append(update)
        return updates

    def _sync_requests(self, wl: Obj, configs: Mapping[str, Obj | None], latest: dict[str, Obj]) -> None:
        """``syncOwnedProvisionRequest``: a request for each check that has none, or whose attempt failed."""
        name = str(wl["metadata"]["name"])
        for check, config in configs.items():
            if config is None or not required_pod_sets(wl, config):
                continue
            state = ac.find_check(wl, check) or {}
            if state.get("state") == ac.READY:
                continue
            request = latest.get(check)
            attempt = 1
            if request is not None:
                retried = true(request, FAILED) or (true(request, BOOKING_EXPIRED) and not kw.is_true(wl, kw.ADMITTED))
                if not (retried and state.get("state") == ac.PENDING):
                    continue
                attempt = (attempt_of(request, name, check) or 1) + 1
            self._create_request(wl, check, config, attempt)

    def _create_request(self, wl: Obj, check: str, config: Obj, attempt: int) -> None:
        meta = wl["metadata"]
        namespace, name = meta["namespace"], request_name(str(meta["name"]), check, attempt)
        spec = config.get("spec") or {}
        assignments = {
            p["name"]: p for p in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []
        }
        pod_sets: list[Obj] = []
        for pod_set in required_pod_sets(wl, config):
            ptname = template_name(name, pod_set["name"])
            assignment = assignments.get(pod_set["name"]) or {}
            if self._store.find(POD_TEMPLATES, namespace, ptname) is None:
                self._store.create(
                    POD_TEMPLATES,
                    {
                        "metadata": {
                            "name": ptname,
                            "namespace": namespace,
                            "labels": {LABEL_MANAGED: "true"},
                            "ownerReferences": [owner_reference(wl)],
                        },
                        "template": self._template(pod_set, assignment),
                    },
                )
            pod_sets.append(
                {"podTemplateRef": {"name": ptname}, "count": int(assignment.get("count") or pod_set.get("count") or 1)}
            )
        body = {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {LABEL_MANAGED: "true"},
                "ownerReferences": [owner_reference(wl)],
            },
            "spec": {
                "provisioningClassName": spec.get("provisioningClassName"),
                "parameters": dict(spec.get("parameters") or {}),
                "podSets": pod_sets,
            },
        }
        try:
            created = self._store.create(PROVISIONING_REQUESTS, body)
        except ApiError as err:
            if err.code == 409:
                return
            raise
        owner = [owner_reference(created)]

        def owned(o: Obj) -> None:
            o["metadata"]["ownerReferences"] = owner

        for ref in pod_sets:  # the templates now belong to the request
            self._store.mutate(POD_TEMPLATES, namespace, str(ref["podTemplateRef"]["name"]), owned)
        record_event(
            self._store, wl, NORMAL, "ProvisioningRequestCreated", f'Created ProvisioningRequest: "{name}"', COMPONENT
        )

    def _template(self, pod_set: Obj, assignment: Obj) -> Obj:
        """The pod set's template with the admission's flavors merged in (``podset.Merge``) and limits as requests."""
        template = copy.deepcopy(pod_set.get("template") or {})
        spec = template.setdefault("spec", {})
        selector = dict(spec.get("nodeSelector") or {})
        tolerations = list(spec.get("tolerations") or [])
        for flavor_name in dict.fromkeys((assignment.get("flavors") or {}).values()):
            flavor = (self._store.find(RESOURCE_FLAVORS, "", str(flavor_name)) or {}).get("spec") or {}
            selector.update(flavor.get("nodeLabels") or {})
            tolerations += [t for t in flavor.get("tolerations") or [] if t not in tolerations]
        if selector:
            spec["nodeSelector"] = selector
        if tolerations:
            spec["tolerations"] = tolerations
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            resources = container.setdefault("resources", {})
            requests = resources.setdefault("requests", {})
            for resource, value in (resources.get("limits") or {}).items():
                requests.setdefault(resource, value)
        return template

    # -- writing -----------------------------------------------------------------------------

    def _write(self, wl: Obj, change: Callable[[Obj], Any]) -> Obj | None:
        meta = wl["metadata"]
        try:
            return self._store.mutate(WORKLOADS, meta["namespace"], meta["name"], change, subresource="status")
        except ApiError as err:
            if err.code in (404, 409):
                return None
            raise

    def _delete(self, rtype: Any, obj: Obj) -> None:
        try:
            self._store.delete(rtype, obj["metadata"]["namespace"], obj["metadata"]["name"])
        except ApiError as err:
            if err.code != 404:
                raise
