"""xpk's flex-start (DWS) Kueue objects (``local/gke/xpk_flex.py``) set up through the official client.

xpk (AI-Hypercomputer/xpk ``src/xpk/core/kueue_manager.py``) adds the ``dws-prov`` AdmissionCheck (controller
``kueue.x-k8s.io/provisioning-request``, parameters the ProvisioningRequestConfig ``dws-config``: class
``queued-provisioning.gke.io``, ``managedResources`` the accelerator's resource, ``podSetUpdates.nodeSelector``
``autoscaling.gke.io/provisioning-request`` from the ``ResizeRequestName`` detail) to its ClusterQueue's
``admissionChecks`` (v1beta1; ``admissionChecksStrategy`` in v1beta2) when the cluster is queued; workloads on a
flex node pool select ``cloud.google.com/gke-queued: "true"`` (``core/capacity.py``).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from elastic_training.local.gke.xpk_flex import (
    CHECK,
    CONFIG,
    LABEL_PROVISIONING_REQUEST,
    admission_check,
    cluster_queue,
    provisioning_request_config,
)

__all__ = ["CHECK", "CONFIG", "LABEL_PROVISIONING_REQUEST", "cluster_queue", "typed"]

KUEUE, V1BETA2 = "kueue.x-k8s.io", "v1beta2"
LABEL_GKE_QUEUED = "cloud.google.com/gke-queued"
FLEX_NODE_SELECTOR = {LABEL_GKE_QUEUED: "true"}
Obj = dict[str, Any]


def create_flex_check(
    custom: client.CustomObjectsApi,
    check: str = CHECK,
    config: str = CONFIG,
    *,
    managed_resource: str = "google.com/tpu",
    retry: Obj | None = None,
) -> None:
    """Create the ProvisioningRequestConfig and the AdmissionCheck (a 409 for either is left as it is)."""
    for kind, body in (
        ("ProvisioningRequestConfig", provisioning_request_config(config, managed_resource, retry)),
        ("AdmissionCheck", admission_check(check, config)),
    ):
        try:
            custom.create_cluster_custom_object(KUEUE, V1BETA2, kind.lower() + "s", typed(kind, body))
        except client.ApiException as err:
            if err.status != 409:
                raise


def typed(kind: str, body: Obj) -> Obj:
    """``body`` as a ``kueue.x-k8s.io/v1beta2`` object of ``kind``: kube-apiserver refuses a custom object's body
    without its apiVersion and kind."""
    return {"apiVersion": f"{KUEUE}/{V1BETA2}", "kind": kind, **body}


def provisioning_requests(custom: client.CustomObjectsApi, namespace: str) -> list[Obj]:
    listed: list[Obj] = custom.list_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", namespace, "provisioningrequests"
    )["items"]
    return listed
