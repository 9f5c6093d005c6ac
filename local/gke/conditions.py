"""A ProvisioningRequest's conditions, as the cluster autoscaler writes them.

From kubernetes/autoscaler ``cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1/types.go`` (the
condition types, ``provisioningClassDetails``) and ``cluster-autoscaler/provisioningrequest/conditions/conditions.go``
(reasons and messages). They are ``metav1.Condition``s, set as ``apimeta.SetStatusCondition`` does: the transition
time moves only when the status flips. Kueue reads only those whose status is True
(``pkg/controller/admissionchecks/provisioning/``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from elastic_training.local.kube_objects import Obj

ACCEPTED: Final = "Accepted"
PROVISIONED: Final = "Provisioned"
FAILED: Final = "Failed"
BOOKING_EXPIRED: Final = "BookingExpired"
CAPACITY_REVOKED: Final = "CapacityRevoked"

ACCEPTED_REASON = ("Accepted", "ProvisioningRequest is accepted by ClusterAutoscaler")
PENDING_REASON = ("Pending", "Waiting for the capacity to be provisioned")
PROVISIONED_REASON = ("CapacityIsProvisioned", "Capacity is found in the cluster")
NOT_FOUND_REASON = "CapacityIsNotFound"
BOOKING_EXPIRED_REASON = ("CapacityReservationTimeExpired", "Capacity reservation time is expired")
FAILED_DEFAULT = ("FailedToBookCapacity", "Flex-start capacity could not be obtained in the zone (local fault)")
REVOKED_DEFAULT = ("CapacityRevoked", "The VMs of this request were reclaimed (local fault)")
MAX_MESSAGE = 32768


def find(request: Obj, kind: str) -> Obj | None:
    """The condition ``kind`` of ``request``, if set."""
    conditions = (request.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), None)


def is_true(request: Obj, kind: str) -> bool:
    """Whether the condition ``kind`` is set and True."""
    found = find(request, kind)
    return found is not None and found.get("status") == "True"


def set_condition(request: Obj, kind: str, status: bool, reason: str, message: str) -> bool:
    """Set the condition on ``request`` (in place); whether anything changed."""
    conditions: list[Obj] = request.setdefault("status", {}).setdefault("conditions", [])
    value = "True" if status else "False"
    wanted = {
        "type": kind,
        "status": value,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "observedGeneration": int((request.get("metadata") or {}).get("generation") or 1),
    }
    current = find(request, kind)
    if current is None:
        conditions.append({**wanted, "lastTransitionTime": _now()})
        return True
    if all(current.get(k) == v for k, v in wanted.items()):
        return False
    if current.get("status") != value:
        current["lastTransitionTime"] = _now()
    current.update(wanted)
    return True


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
