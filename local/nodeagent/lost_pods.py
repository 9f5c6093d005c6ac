"""The status the agent reports for a pod whose processes died with its host, once the host is back.

Follows the kubelet's ``convertToAPIContainerStatuses`` (``pkg/kubelet/kubelet_pods.go``): a container the status
showed running (or waiting after a run) that the runtime can no longer find is reported terminated, reason
``ContainerStatusUnknown``, exit code 137, message "The container could not be located when the pod was
terminated". The pod's phase is then ``Failed``, and its readiness conditions False.

It does not decide whether the pod runs again: :mod:`elastic_training.local.nodeagent.pod_sync` says why it does not.
"""

from __future__ import annotations

from elastic_training.local.kube_objects import now_rfc3339
from elastic_training.local.nodeagent.api import Obj

UNKNOWN_REASON = "ContainerStatusUnknown"
UNKNOWN_MESSAGE = "The container could not be located when the pod was terminated"
UNKNOWN_EXIT_CODE = 137


def _lost_container(status: Obj, now: str) -> Obj:
    state = status.get("state") or {}
    if "terminated" in state:
        return status
    terminated = {
        "exitCode": UNKNOWN_EXIT_CODE,
        "reason": UNKNOWN_REASON,
        "message": UNKNOWN_MESSAGE,
        "startedAt": (state.get("running") or {}).get("startedAt"),
        "finishedAt": now,
    }
    return {**status, "ready": False, "started": False, "state": {"terminated": terminated}}


def lost_pod_status(pod: Obj) -> Obj:
    """``pod``'s status as the kubelet reports it when none of its containers can be found: ``Failed``."""
    now = now_rfc3339()
    status: Obj = dict(pod.get("status") or {})
    for key in ("containerStatuses", "initContainerStatuses"):
        if key in status:
            status[key] = [_lost_container(s, now) for s in status[key]]
    conditions = []
    for condition in status.get("conditions") or []:
        if condition.get("type") in ("Ready", "ContainersReady", "PodReadyToStartContainers"):
            condition = {**condition, "status": "False", "reason": "PodFailed", "lastTransitionTime": now}
        conditions.append(condition)
    status["conditions"] = conditions
    status["phase"] = "Failed"
    return status
