"""xpk's flex-start (DWS) Kueue objects, as AI-Hypercomputer/xpk renders them, for a local cluster to apply.

From xpk ``src/xpk/templates/kueue_config.yaml.j2`` and ``src/xpk/core/kueue_manager.py`` (2026-06-25): the
``dws-prov`` AdmissionCheck (controller ``kueue.x-k8s.io/provisioning-request``, parameters the
ProvisioningRequestConfig ``dws-config``: class ``queued-provisioning.gke.io``, ``managedResources`` the accelerator's
resource, ``podSetUpdates.nodeSelector`` ``autoscaling.gke.io/provisioning-request`` from the ``ResizeRequestName``
detail) and a ClusterQueue naming it (xpk writes v1beta1's ``admissionChecks: [dws-prov]``; v1beta2 stores it as
``admissionChecksStrategy``), ``preemption.withinClusterQueue: LowerPriority``, every namespace. xpk renders them only
for a queued cluster (``utils/kueue.py`` ``is_queued_cluster``: one GPU slice); the tests and the chaos harness put
them over TPU pools made queued-provisioning ones, which the local cluster can (``provision-on-demand`` with
``queued``).
"""

from __future__ import annotations

from typing import Any

from elastic_training.local.kube_objects import Obj

CHECK, CONFIG = "dws-prov", "dws-config"
QUEUED_PROVISIONING_CLASS = "queued-provisioning.gke.io"
LABEL_PROVISIONING_REQUEST = "autoscaling.gke.io/provisioning-request"


def provisioning_request_config(
    name: str = CONFIG, managed_resource: str = "google.com/tpu", retry: Obj | None = None
) -> Obj:
    spec: Obj = {
        "provisioningClassName": QUEUED_PROVISIONING_CLASS,
        "podSetUpdates": {
            "nodeSelector": [
                {"key": LABEL_PROVISIONING_REQUEST, "valueFromProvisioningClassDetail": "ResizeRequestName"}
            ]
        },
        "managedResources": [managed_resource],
    }
    if retry is not None:
        spec["retryStrategy"] = retry
    return {"metadata": {"name": name}, "spec": spec}


def admission_check(name: str = CHECK, config: str = CONFIG) -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {
            "controllerName": "kueue.x-k8s.io/provisioning-request",
            "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": config},
        },
    }


def cluster_queue(name: str, quotas: list[tuple[list[str], str, dict[str, Any]]], *checks: str) -> Obj:
    """A ClusterQueue with ``checks`` (default ``dws-prov``): per resource group, (covered resources, flavor, quota by
    resource)."""
    groups = [
        {
            "coveredResources": list(covered),
            "flavors": [{"name": flavor, "resources": [{"name": r, "nominalQuota": q} for r, q in quota.items()]}],
        }
        for covered, flavor, quota in quotas
    ]
    return {
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "admissionChecksStrategy": {"admissionChecks": [{"name": c} for c in checks or (CHECK,)]},
            "resourceGroups": groups,
        },
    }
