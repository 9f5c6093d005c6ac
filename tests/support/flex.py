"""xpk's flex-start (DWS) Kueue objects, as ``xpk/templates/kueue_config.yaml.j2`` renders them, and their setup.

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

KUEUE, V1BETA2 = "kueue.x-k8s.io", "v1beta2"
CHECK = "dws-prov"
CONFIG = "dws-config"
QUEUED_CLASS = "queued-provisioning.gke.io"
LABEL_GKE_QUEUED = "cloud.google.com/gke-queued"
LABEL_PROVISIONING_REQUEST = "autoscaling.gke.io/provisioning-request"
FLEX_NODE_SELECTOR = {LABEL_GKE_QUEUED: "true"}
Obj = dict[str, Any]


def admission_check(name: str = CHECK, config: str = CONFIG) -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {
            "controllerName": "kueue.x-k8s.io/provisioning-request",
            "parameters": {"apiGroup": KUEUE, "kind": "ProvisioningRequestConfig", "name": config},
        },
    }


def provisioning_request_config(
    name: str = CONFIG, managed_resource: str = "google.com/tpu", retry: Obj | None = None
) -> Obj:
    spec: Obj = {
        "provisioningClassName": QUEUED_CLASS,
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


def create_flex_check(
    custom: client.CustomObjectsApi,
    check: str = CHECK,
    config: str = CONFIG,
    *,
    managed_resource: str = "google.com/tpu",
    retry: Obj | None = None,
) -> None:
    """Create the ProvisioningRequestConfig and the AdmissionCheck (a 409 for either is left as it is)."""
    for plural, body in (
        ("provisioningrequestconfigs", provisioning_request_config(config, managed_resource, retry)),
        ("admissionchecks", admission_check(check, config)),
    ):
        try:
            custom.create_cluster_custom_object(KUEUE, V1BETA2, plural, body)
        except client.ApiException as err:
            if err.status != 409:
                raise


def checks_strategy(*checks: str) -> Obj:
    """A v1beta2 ClusterQueue's ``admissionChecksStrategy`` for xpk's v1beta1 ``admissionChecks: [...]``."""
    return {"admissionChecks": [{"name": name} for name in checks]}


def provisioning_requests(custom: client.CustomObjectsApi, namespace: str) -> list[Obj]:
    listed: list[Obj] = custom.list_namespaced_custom_object(
        "autoscaling.x-k8s.io", "v1", namespace, "provisioningrequests"
    )["items"]
    return listed
