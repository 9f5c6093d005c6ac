"""The resource types the local cluster serves, and the errors its API returns.

Errors carry what a Kubernetes `Status` body needs (code, reason, message, causes), so the
HTTP layer turns any of them into the response the real API server would send.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from elastic_training.operators.constants import (
    JOBSET_GROUP,
    JOBSET_KIND,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    KUEUE_GROUP,
    KUEUE_VERSION,
)


@dataclass(frozen=True)
class ResourceType:
    """One kind of object the API serves, e.g. ``pods`` in ``v1``."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    has_status: bool = True
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()  # `kubectl get all` lists the types in category "all"
    verbs: tuple[str, ...] = ("create", "delete", "get", "list", "patch", "update", "watch")

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


# Short names and categories as upstream's discovery lists them (the JobSet CRD declares neither).
PODS = ResourceType("", "v1", "pods", "Pod", singular="pod", short_names=("po",), categories=("all",))
EVENTS = ResourceType("", "v1", "events", "Event", has_status=False, singular="event", short_names=("ev",))
NAMESPACES = ResourceType(
    "", "v1", "namespaces", "Namespace", namespaced=False, singular="namespace", short_names=("ns",)
)
NODES = ResourceType("", "v1", "nodes", "Node", namespaced=False, singular="node", short_names=("no",))
JOBS = ResourceType("batch", "v1", "jobs", "Job", singular="job", categories=("all",))
JOBSETS = ResourceType(JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL, JOBSET_KIND, singular="jobset")
# Served for what reads configuration from one: Kueue's manager Configuration (kueue-system/kueue-manager-config).
CONFIG_MAPS = ResourceType(
    "", "v1", "configmaps", "ConfigMap", has_status=False, singular="configmap", short_names=("cm",)
)

# Access control (local/cluster/rbac.py): ServiceAccounts (with the TokenRequest subresource), the RBAC
# kinds, and the review kinds that are answered and never stored (create only).
RBAC_GROUP = "rbac.authorization.k8s.io"
SERVICE_ACCOUNTS = ResourceType(
    "", "v1", "serviceaccounts", "ServiceAccount", has_status=False, singular="serviceaccount", short_names=("sa",)
)
ROLES = ResourceType(RBAC_GROUP, "v1", "roles", "Role", has_status=False, singular="role")
ROLE_BINDINGS = ResourceType(RBAC_GROUP, "v1", "rolebindings", "RoleBinding", has_status=False, singular="rolebinding")
CLUSTER_ROLES = ResourceType(
    RBAC_GROUP, "v1", "clusterroles", "ClusterRole", namespaced=False, has_status=False, singular="clusterrole"
)
CLUSTER_ROLE_BINDINGS = ResourceType(
    RBAC_GROUP,
    "v1",
    "clusterrolebindings",
    "ClusterRoleBinding",
    namespaced=False,
    has_status=False,
    singular="clusterrolebinding",
)
SELF_SUBJECT_ACCESS_REVIEWS = ResourceType(
    "authorization.k8s.io",
    "v1",
    "selfsubjectaccessreviews",
    "SelfSubjectAccessReview",
    namespaced=False,
    has_status=False,
    verbs=("create",),
)
SELF_SUBJECT_REVIEWS = ResourceType(
    "authentication.k8s.io",
    "v1",
    "selfsubjectreviews",
    "SelfSubjectReview",
    namespaced=False,
    has_status=False,
    verbs=("create",),
)
ACCESS_TYPES: tuple[ResourceType, ...] = (
    SERVICE_ACCOUNTS,
    ROLES,
    ROLE_BINDINGS,
    CLUSTER_ROLES,
    CLUSTER_ROLE_BINDINGS,
    SELF_SUBJECT_ACCESS_REVIEWS,
    SELF_SUBJECT_REVIEWS,
)
REVIEW_TYPES = (SELF_SUBJECT_ACCESS_REVIEWS, SELF_SUBJECT_REVIEWS)

# Kueue (kubernetes-sigs/kueue apis/kueue/v1beta2/*_types.go, v0.17.1 as xpk pins it): scope, short names and
# the status subresource as each type's kubebuilder markers declare them; and the built-in PriorityClass.
RESOURCE_FLAVORS = ResourceType(
    KUEUE_GROUP,
    KUEUE_VERSION,
    "resourceflavors",
    "ResourceFlavor",
    namespaced=False,
    has_status=False,
    singular="resourceflavor",
    short_names=("flavor", "flavors", "rf"),
)
CLUSTER_QUEUES = ResourceType(
    KUEUE_GROUP,
    KUEUE_VERSION,
    "clusterqueues",
    "ClusterQueue",
    namespaced=False,
    singular="clusterqueue",
    short_names=("cq",),
)
LOCAL_QUEUES = ResourceType(
    KUEUE_GROUP,
    KUEUE_VERSION,
    "localqueues",
    "LocalQueue",
    singular="localqueue",
    short_names=("queue", "queues", "lq"),
)
WORKLOADS = ResourceType(
    KUEUE_GROUP,
    KUEUE_VERSION,
    "workloads",
    "Workload",
    singular="workload",
    short_names=("kwl", "kueueworkload", "kueueworkloads"),
)
WORKLOAD_PRIORITY_CLASSES = ResourceType(
    KUEUE_GROUP,
    KUEUE_VERSION,
    "workloadpriorityclasses",
    "WorkloadPriorityClass",
    namespaced=False,
    has_status=False,
    singular="workloadpriorityclass",
)
PRIORITY_CLASSES = ResourceType(
    "scheduling.k8s.io",
    "v1",
    "priorityclasses",
    "PriorityClass",
    namespaced=False,
    has_status=False,
    singular="priorityclass",
    short_names=("pc",),
)
# Admission checks (kueue apis/kueue/v1beta2/{admissioncheck,provisioningrequestconfig}_types.go, v0.17.1).
ADMISSION_CHECKS = ResourceType(
    KUEUE_GROUP, KUEUE_VERSION, "admissionchecks", "AdmissionCheck", namespaced=False, singular="admissioncheck"
)
PROVISIONING_REQUEST_CONFIGS = ResourceType(
    KUEUE_GROUP,
    KUEUE_VERSION,
    "provisioningrequestconfigs",
    "ProvisioningRequestConfig",
    namespaced=False,
    has_status=False,
    singular="provisioningrequestconfig",
)
KUEUE_TYPES: tuple[ResourceType, ...] = (
    RESOURCE_FLAVORS,
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    WORKLOADS,
    WORKLOAD_PRIORITY_CLASSES,
    ADMISSION_CHECKS,
    PROVISIONING_REQUEST_CONFIGS,
)
# The cluster autoscaler's ProvisioningRequest (kubernetes/autoscaler cluster-autoscaler/apis/provisioningrequest/
# autoscaling.x-k8s.io/v1/types.go: namespaced, status subresource, short names provreq/provreqs), and the core
# PodTemplate its pod sets refer to.
PROVISIONING_REQUESTS = ResourceType(
    "autoscaling.x-k8s.io",
    "v1",
    "provisioningrequests",
    "ProvisioningRequest",
    singular="provisioningrequest",
    short_names=("provreq", "provreqs"),
)
POD_TEMPLATES = ResourceType("", "v1", "podtemplates", "PodTemplate", has_status=False, singular="podtemplate")

RESOURCE_TYPES: tuple[ResourceType, ...] = (
    PODS,
    EVENTS,
    NAMESPACES,
    NODES,
    JOBS,
    JOBSETS,
    CONFIG_MAPS,
    *ACCESS_TYPES,
    PRIORITY_CLASSES,
    *KUEUE_TYPES,
    PROVISIONING_REQUESTS,
    POD_TEMPLATES,
)
# Served as a CustomResourceDefinition would be (no strategic merge patch, for one).
CUSTOM_RESOURCE_TYPES: tuple[ResourceType, ...] = (JOBSETS, *KUEUE_TYPES, PROVISIONING_REQUESTS)


def resource_type(group: str, version: str, plural: str) -> ResourceType | None:
    """The served type for an API path's group/version/plural, or None."""
    for candidate in RESOURCE_TYPES:
        if (candidate.group, candidate.version, candidate.plural) == (group, version, plural):
            return candidate
    return None


@dataclass(frozen=True)
class Cause:
    """One reason an object is invalid: the JSON path of the field and what is wrong with it."""

    field: str
    message: str
    reason: str = "FieldValueInvalid"


@dataclass
class ApiError(Exception):
    """An API failure with the fields of a Kubernetes ``Status``."""

    code: int
    reason: str
    message: str
    kind: str = ""
    name: str = ""
    group: str = ""
    causes: list[Cause] = field(default_factory=list)
    retry_after_seconds: int | None = None

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def status_body(self) -> dict[str, Any]:
        """The ``Status`` object the API server returns for this error."""
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = [_cause_body(c) for c in self.causes]
        if self.retry_after_seconds is not None:
            details["retryAfterSeconds"] = self.retry_after_seconds
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if details:
            body["details"] = details
        return body


def _cause_body(cause: Cause) -> dict[str, str]:
    body = {"reason": cause.reason, "message": cause.message}
    if cause.field:
        body["field"] = cause.field
    return body


def not_found(rtype: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rtype} "{name}" not found', rtype.plural, name, rtype.group)


def already_exists(rtype: ResourceType, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{rtype} "{name}" already exists', rtype.plural, name, rtype.group)


def conflict(rtype: ResourceType, name: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rtype} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        rtype.plural,
        name,
        rtype.group,
    )


def invalid(rtype: ResourceType, name: str, causes: list[Cause]) -> ApiError:
    summary = ", ".join(f"{c.field}: {c.message}" for c in causes)
    return ApiError(
        422, "Invalid", f'{rtype.kind} "{name}" is invalid: {summary}', rtype.kind, name, rtype.group, causes
    )


def gone(resource_version: int, oldest: int) -> ApiError:
    return ApiError(410, "Expired", f"too old resource version: {resource_version} ({oldest})")


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)
