"""OpenAPI v3 schemas of Kueue's kinds (``kueue.x-k8s.io/v1beta2``) and of ``scheduling.k8s.io/v1`` PriorityClass.

Written from kubernetes-sigs/kueue ``apis/kueue/v1beta2/{resourceflavor,clusterqueue,localqueue,workload,
workloadpriorityclass,admissioncheck,provisioningrequestconfig}_types.go`` (v0.17.1, the release xpk installs),
and kubernetes/autoscaler ``cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1/types.go``
(the ProvisioningRequest Kueue's provisioning admission check creates, with the core PodTemplate it refers
to): the fields the local Kueue reads or writes are declared with the types' enums and defaults, so strict
field validation rejects a misspelt field where the CRD would; the fields it does not implement (fair
sharing, topology, flavor fungibility, stop policies) are declared open so a manifest written for upstream
still applies.
Pod templates inside a Workload's podSets are left open, as JobSet's Job templates are.
"""

from __future__ import annotations

from typing import Any

from elastic_training.local.cluster.openapi_schemas import (
    CONDITION,
    Schema,
    _top_level,
    array,
    integer,
    obj,
    open_object,
    ref,
    string,
)
from elastic_training.operators.constants import KUEUE_GROUP, KUEUE_VERSION

_QUANTITY: Schema = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
    "pattern": (
        r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
        r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
    ),
}
_RESOURCE_LIST: Schema = {"type": "object", "additionalProperties": _QUANTITY}
_CONDITIONS = array(
    "conditions hold the latest available observations of the object's current state.",
    ref(CONDITION, "Condition contains details for one aspect of the current state of this API Resource."),
    **{"x-kubernetes-list-map-keys": ["type"], "x-kubernetes-list-type": "map"},
)
# The CRDs' ``self == oldSelf`` CEL rules are checked by kueue_api.validate_update; here they are documented.
_IMMUTABLE_RULE: dict[str, Any] = {
    "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "field is immutable"}]
}
_PREEMPTION_POLICY = ("Never", "LowerPriority", "LowerOrNewerEqualPriority", "Any")

RESOURCE_FLAVOR = _top_level(
    "ResourceFlavor is the Schema for the resourceflavors API.",
    {
        "spec": obj(
            "spec defines the desired state of the ResourceFlavor.",
            {
                "nodeLabels": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "description": "nodeLabels are labels that associate the ResourceFlavor with Nodes that have the "
                    "same labels. When a Workload is admitted, its podsets can only get assigned ResourceFlavors "
                    "whose nodeLabels match the nodeSelector and nodeAffinity fields.",
                },
                "nodeTaints": array(
                    "nodeTaints are taints that the nodes associated with this ResourceFlavor have.",
                    open_object(
                        "The node this Taint is attached to has the effect on any pod that does not tolerate the Taint."
                    ),
                ),
                "tolerations": array(
                    "tolerations are extra tolerations that will be added to the pods admitted in "
                    "the quota associated with this resource flavor.",
                    open_object(
                        "The pod this Toleration is attached to tolerates any taint that "
                        "matches the triple <key,value,effect>."
                    ),
                ),
                "topologyName": string("topologyName indicates topology for the TAS ResourceFlavor."),
            },
        )
    },
    KUEUE_GROUP,
    KUEUE_VERSION,
    "ResourceFlavor",
)

_RESOURCE_QUOTA = obj(
    "ResourceQuota",
    {
        "name": string("name of this resource."),
        "nominalQuota": {
            **_QUANTITY,
            "description": "nominalQuota is the quantity of this resource that is "
            "available for Workloads admitted by this ClusterQueue at a point in time.",
        },
        "borrowingLimit": {
            **_QUANTITY,
            "description": "borrowingLimit is the maximum amount of quota for the "
            "[flavor, resource] combination that this ClusterQueue is allowed to borrow.",
        },
        "lendingLimit": {
            **_QUANTITY,
            "description": "lendingLimit is the maximum amount of unused quota for the "
            "[flavor, resource] combination that this ClusterQueue can lend to other ClusterQueues.",
        },
    },
    ("name", "nominalQuota"),
)
_FLAVOR_QUOTAS = obj(
    "FlavorQuotas",
    {
        "name": string("name of this flavor. The name should match the .metadata.name of a ResourceFlavor."),
        "resources": array(
            "resources is the list of quotas for this flavor per resource.",
            _RESOURCE_QUOTA,
            maxItems=64,
            **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        ),
    },
    ("name", "resources"),
)
_RESOURCE_GROUP = obj(
    "ResourceGroup",
    {
        "coveredResources": array(
            "coveredResources is the list of resources covered by the flavors in this group.",
            {"type": "string"},
            maxItems=64,
        ),
        "flavors": array(
            "flavors is the list of flavors that provide the resources of this group.",
            _FLAVOR_QUOTAS,
            maxItems=64,
            **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        ),
    },
    ("coveredResources", "flavors"),
)
_FLAVOR_USAGE = obj(
    "FlavorUsage",
    {
        "name": string("name of the flavor."),
        "resources": array(
            "resources lists the quota usage for the resources in this flavor.",
            obj(
                "ResourceUsage",
                {
                    "name": string("name of the resource"),
                    "total": {**_QUANTITY, "description": "total is the total quantity of used quota."},
                    "borrowed": {
                        **_QUANTITY,
                        "description": "borrowed is quantity of quota that is borrowed from the cohort.",
                    },
                },
            ),
        ),
    },
)

CLUSTER_QUEUE = _top_level(
    "ClusterQueue is the Schema for the clusterQueue API.",
    {
        "spec": obj(
            "spec is the specification of the ClusterQueue.",
            {
                "resourceGroups": array(
                    "resourceGroups describes groups of resources.",
                    _RESOURCE_GROUP,
                    maxItems=16,
                    **{"x-kubernetes-list-type": "atomic"},
                ),
                "cohortName": string("cohortName that this ClusterQueue belongs to."),
                "queueingStrategy": string(
                    "queueingStrategy indicates the queueing strategy of the workloads across the queues in this "
                    "ClusterQueue.",
                    enum=("StrictFIFO", "BestEffortFIFO"),
                    default="BestEffortFIFO",
                ),
                "namespaceSelector": open_object(
                    "namespaceSelector defines which namespaces are allowed to submit workloads to this "
                    "clusterQueue. Beyond this basic support for policy, a policy agent like Gatekeeper should be "
                    "used to enforce more advanced policies. Defaults to null which is a nothing selector (no "
                    "namespaces eligible). If set to an empty selector `{}`, then all namespaces are eligible."
                ),
                "flavorFungibility": open_object(
                    "flavorFungibility defines whether a workload should try the next "
                    "flavor before borrowing or preempting in the flavor being "
                    "evaluated."
                ),
                "preemption": obj(
                    "preemption defines the preemption policies.",
                    {
                        "reclaimWithinCohort": string(
                            "reclaimWithinCohort determines whether a pending Workload "
                            "can preempt Workloads from other ClusterQueues in the cohort "
                            "that are using more than their nominal quota.",
                            enum=("Never", "LowerPriority", "Any"),
                            default="Never",
                        ),
                        "borrowWithinCohort": open_object(
                            "borrowWithinCohort determines whether a pending Workload "
                            "can preempt Workloads from other ClusterQueues if the "
                            "workload requires borrowing."
                        ),
                        "withinClusterQueue": string(
                            "withinClusterQueue determines whether a pending Workload that doesn't fit within the "
                            "nominal quota for its ClusterQueue, can preempt active Workloads in the ClusterQueue.",
                            enum=("Never", "LowerPriority", "LowerOrNewerEqualPriority"),
                            default="Never",
                        ),
                    },
                ),
                "admissionChecksStrategy": obj(
                    "admissionChecksStrategy defines a list of strategies to "
                    "determine which ResourceFlavors require AdmissionChecks.",
                    {
                        "admissionChecks": array(
                            "admissionChecks is a list of strategies for AdmissionChecks",
                            obj(
                                "AdmissionCheckStrategyRule defines rules for a single AdmissionCheck",
                                {
                                    "name": string("name is an AdmissionCheck's name."),
                                    "onFlavors": array(
                                        "onFlavors is a list of ResourceFlavors' names that this AdmissionCheck "
                                        "should run for. If empty, the AdmissionCheck will run for all workloads "
                                        "submitted to the ClusterQueue.",
                                        string(""),
                                        maxItems=64,
                                        **{"x-kubernetes-list-type": "set"},
                                    ),
                                },
                                ("name",),
                            ),
                            minItems=1,
                            maxItems=64,
                            **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
                        ),
                    },
                    ("admissionChecks",),
                ),
                "stopPolicy": string(
                    "stopPolicy - if set to a value different from None, the ClusterQueue is "
                    "considered Inactive, no new reservation being made.",
                    enum=("None", "Hold", "HoldAndDrain"),
                    default="None",
                ),
                "fairSharing": open_object(
                    "fairSharing defines the properties of the ClusterQueue when participating in FairSharing."
                ),
                "admissionScope": open_object(
                    "admissionScope indicates whether ClusterQueue uses the Admission Fair Sharing"
                ),
            },
        ),
        "status": obj(
            "status is the status of the ClusterQueue.",
            {
                "conditions": _CONDITIONS,
                "flavorsReservation": array(
                    "flavorsReservation are the reserved quotas, by flavor, currently in "
                    "use by the workloads assigned to this ClusterQueue.",
                    _FLAVOR_USAGE,
                ),
                "flavorsUsage": array(
                    "flavorsUsage are the used quotas, by flavor, currently in use by the "
                    "workloads admitted in this ClusterQueue.",
                    _FLAVOR_USAGE,
                ),
                "pendingWorkloads": integer(
                    "pendingWorkloads is the number of workloads currently waiting to be admitted to this clusterQueue."
                ),
                "reservingWorkloads": integer(
                    "reservingWorkloads is the number of workloads currently reserving quota in this clusterQueue."
                ),
                "admittedWorkloads": integer(
                    "admittedWorkloads is the number of workloads currently admitted to "
                    "this clusterQueue and haven't finished yet."
                ),
                "fairSharing": open_object(
                    "fairSharing contains the current state for this ClusterQueue when participating in Fair Sharing."
                ),
            },
        ),
    },
    KUEUE_GROUP,
    KUEUE_VERSION,
    "ClusterQueue",
)

LOCAL_QUEUE = _top_level(
    "LocalQueue is the Schema for the localQueues API",
    {
        "spec": obj(
            "spec holds the specification of the LocalQueue.",
            {
                "clusterQueue": {
                    **string("clusterQueue is a reference to a clusterQueue that backs this localQueue."),
                    "x-kubernetes-validations": [{"message": "field is immutable", "rule": "self == oldSelf"}],
                },
                "stopPolicy": string(
                    "stopPolicy - if set to a value different from None, the LocalQueue is "
                    "considered Inactive, no new reservation being made.",
                    enum=("None", "Hold", "HoldAndDrain"),
                    default="None",
                ),
                "fairSharing": open_object(
                    "fairSharing defines the properties of the LocalQueue when participating in AdmissionFairSharing."
                ),
            },
        ),
        "status": obj(
            "status holds the status of the LocalQueue.",
            {
                "conditions": _CONDITIONS,
                "pendingWorkloads": integer(
                    "pendingWorkloads is the number of Workloads in the LocalQueue not yet admitted to a ClusterQueue"
                ),
                "reservingWorkloads": integer(
                    "reservingWorkloads is the number of workloads in this LocalQueue "
                    "reserving quota in a ClusterQueue and that haven't finished yet."
                ),
                "admittedWorkloads": integer(
                    "admittedWorkloads is the number of workloads in this LocalQueue "
                    "admitted to a ClusterQueue and that haven't finished yet."
                ),
                "flavorsReservation": array(
                    "flavorsReservation are the reserved quotas, by flavor currently in use "
                    "by the workloads assigned to this LocalQueue.",
                    _FLAVOR_USAGE,
                ),
                "flavorsUsage": array(
                    "flavorsUsage are the used quotas, by flavor currently in use by the "
                    "workloads assigned to this LocalQueue.",
                    _FLAVOR_USAGE,
                ),
                "fairSharing": open_object(
                    "fairSharing contains the information about the current status of fair sharing."
                ),
            },
        ),
    },
    KUEUE_GROUP,
    KUEUE_VERSION,
    "LocalQueue",
)

_POD_SET = obj(
    "PodSet is a set of pods with the same template.",
    {
        "name": string("name is the PodSet name.", default="main"),
        "template": open_object("template is the Pod template."),
        "count": integer("count is the number of pods for the spec."),
        "minCount": integer(
            "minCount is the minimum number of pods for the spec acceptable if the workload supports partial admission."
        ),
        "topologyRequest": open_object("topologyRequest defines the topology request for the PodSet."),
    },
    ("count", "template"),
)
_ADMISSION = obj(
    "admission holds the parameters of the admission of the workload by a ClusterQueue.",
    {
        "clusterQueue": string("clusterQueue is the name of the ClusterQueue that admitted this workload."),
        "podSetAssignments": array(
            "podSetAssignments hold the admission results for each of the .spec.podSets entries.",
            obj(
                "PodSetAssignment",
                {
                    "name": string(
                        "name is the name of the podSet. It should match one of the names in .spec.podSets."
                    ),
                    "flavors": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                        "description": "flavors are the flavors assigned to the workload for each resource.",
                    },
                    "resourceUsage": {
                        **_RESOURCE_LIST,
                        "description": "resourceUsage keeps "
                        "track of the total resources all the pods in the podset "
                        "need to run.",
                    },
                    "count": integer("count is the number of pods taken into account at admission time."),
                    "topologyAssignment": open_object(
                        "topologyAssignment indicates the topology assignment divided into topology domains."
                    ),
                    "delayedTopologyRequest": string(
                        "delayedTopologyRequest indicates the topology assignment is delayed."
                    ),
                },
                ("name",),
            ),
            **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        ),
    },
    ("clusterQueue", "podSetAssignments"),
)

_ADMISSION_CHECK_STATE = obj(
    "AdmissionCheckState is the state of an admission check on a Workload (workload_types.go).",
    {
        "name": string("name identifies the admission check."),
        "state": string(
            "state of the admissionCheck, one of Pending, Ready, Retry, Rejected",
            enum=("Pending", "Ready", "Retry", "Rejected"),
        ),
        "lastTransitionTime": string(
            "lastTransitionTime is the last time the condition transitioned from one status to another.",
            format="date-time",
        ),
        "message": string("message is a human readable message indicating details about the transition."),
        "retryCount": integer("retryCount is the number of times an admission check has been retried."),
        "requeueAfterSeconds": integer(
            "requeueAfterSeconds indicates how long to wait at least before retrying to admit the workload."
        ),
        "podSetUpdates": array(
            "podSetUpdates contains a list of pod set modifications suggested by AdmissionChecks.",
            obj(
                "PodSetUpdate contains a list of pod set modifications suggested by AdmissionChecks.",
                {
                    "name": string("name of the PodSet to modify. Should match to one of the Workload's PodSets."),
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                    "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"}},
                    "tolerations": open_object("tolerations of the PodSet to modify."),
                },
                ("name",),
            ),
            **{"x-kubernetes-list-type": "atomic"},
        ),
    },
    ("lastTransitionTime", "name", "state"),
)
_ADMISSION_CHECK_STATE["properties"]["podSetUpdates"]["items"]["properties"]["tolerations"] = {
    "type": "array",
    "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
}

WORKLOAD = _top_level(
    "Workload is the Schema for the workloads API",
    {
        "spec": obj(
            "spec is the specification of the Workload.",
            {
                "podSets": array(
                    "podSets is a list of sets of homogeneous pods, each described by a Pod spec and a count.",
                    _POD_SET,
                    minItems=1,
                    maxItems=8,
                    **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
                ),
                "queueName": string("queueName is the name of the LocalQueue the Workload is associated with."),
                "priorityClassRef": obj(
                    "priorityClassRef references a PriorityClass object that defines the workload's priority.",
                    {
                        "group": string(
                            "group is the API group of the PriorityClass object.",
                            enum=("scheduling.k8s.io", "kueue.x-k8s.io"),
                        ),
                        "kind": string(
                            "kind is the kind of the PriorityClass object.",
                            enum=("PriorityClass", "WorkloadPriorityClass"),
                        ),
                        "name": string("name is the name of the PriorityClass the Workload is associated with."),
                    },
                    ("group", "kind", "name"),
                ),
                "priority": integer(
                    "priority determines the order of access to the resources managed by the "
                    "ClusterQueue where the workload is queued."
                ),
                "active": {
                    "type": "boolean",
                    "default": True,
                    "description": "Active determines if a workload can be admitted into a queue.",
                },
                "maximumExecutionTimeSeconds": integer(
                    "maximumExecutionTimeSeconds if provided, determines the "
                    "maximum time, in seconds, the workload can be admitted "
                    "before it's automatically deactivated."
                ),
                "preemptionGates": open_object("preemptionGates"),
            },
            ("podSets",),
        ),
        "status": obj(
            "status is the status of the Workload.",
            {
                "conditions": _CONDITIONS,
                "admission": _ADMISSION,
                "requeueState": obj(
                    "requeueState holds the re-queue state when a workload meets Eviction with PodsReadyTimeout "
                    "reason.",
                    {
                        "count": integer("count records the number of times a workload has been re-queued."),
                        "requeueAt": string(
                            "requeueAt records the time when a workload will be re-queued.", format="date-time"
                        ),
                    },
                ),
                "reclaimablePods": open_object(
                    "reclaimablePods keeps track of the number pods within a podset for "
                    "which the resource reservation is no longer needed."
                ),
                "admissionChecks": array(
                    "admissionChecks list all the admission checks required by the workload and the current status",
                    _ADMISSION_CHECK_STATE,
                    maxItems=8,
                    **{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
                ),
                "resourceRequests": open_object(
                    "resourceRequests provides a detailed view of the resources that "
                    "were requested by a non-admitted workload when it was considered "
                    "for admission."
                ),
                "accumulatedPastExecutionTimeSeconds": integer(
                    "accumulatedPastExecutionTimeSeconds holds the total "
                    "time, in seconds, the workload spent in Admitted "
                    "state, in the previous `Admit` - `Evict` cycles."
                ),
                "schedulingStats": open_object("schedulingStats tracks scheduling statistics"),
            },
        ),
    },
    KUEUE_GROUP,
    KUEUE_VERSION,
    "Workload",
)
# The tables/clients also see status fields not listed above only if the server writes them; none are.
WORKLOAD["properties"]["status"]["x-kubernetes-preserve-unknown-fields"] = True

WORKLOAD_PRIORITY_CLASS = _top_level(
    "WorkloadPriorityClass is the Schema for the workloadPriorityClass API",
    {
        "value": integer(
            "value represents the integer value of this workloadPriorityClass. This is the actual "
            "priority that workloads receive when jobs have the name of this class in their "
            "workloadPriorityClass label."
        ),
        "description": string(
            "description is an arbitrary string that usually provides guidelines on when this "
            "workloadPriorityClass should be used."
        ),
    },
    KUEUE_GROUP,
    KUEUE_VERSION,
    "WorkloadPriorityClass",
)
WORKLOAD_PRIORITY_CLASS["required"] = ["value"]

PRIORITY_CLASS = _top_level(
    "PriorityClass defines mapping from a priority class name to the priority integer value. The value can be any "
    "valid integer.",
    {
        "value": integer(
            "value represents the integer value of this priority class. This is the actual priority "
            "that pods receive when they have the name of this class in their pod spec."
        ),
        "globalDefault": {
            "type": "boolean",
            "description": "globalDefault specifies whether this PriorityClass "
            "should be considered as the default priority for pods that do not have any priority "
            "class.",
        },
        "description": string(
            "description is an arbitrary string that usually provides guidelines on when this "
            "priority class should be used."
        ),
        "preemptionPolicy": string(
            "preemptionPolicy is the Policy for preempting pods with lower priority.",
            enum=("Never", "PreemptLowerPriority"),
        ),
    },
    "scheduling.k8s.io",
    "v1",
    "PriorityClass",
)
PRIORITY_CLASS["required"] = ["value"]

# -- admission checks (apis/kueue/v1beta2/{admissioncheck,provisioningrequestconfig}_types.go) and the cluster
# autoscaler's ProvisioningRequest (kubernetes/autoscaler apis/provisioningrequest/autoscaling.x-k8s.io/v1/types.go)

_PARAMETERS: Schema = {
    "type": "object",
    "description": "Parameters contains all other parameters classes may require.",
    "additionalProperties": {"type": "string", "maxLength": 255},
    "maxProperties": 100,
}
_PARAMETERS_REF = obj(
    "parameters identifies a configuration with additional parameters for the check.",
    {
        "apiGroup": string("ApiGroup is the group for the resource being referenced."),
        "kind": string("Kind is the type of the resource being referenced."),
        "name": string("Name is the name of the resource being referenced."),
    },
    ("apiGroup", "kind", "name"),
)
ADMISSION_CHECK = _top_level(
    "AdmissionCheck is the Schema for the admissionchecks API",
    {
        "spec": obj(
            "spec is the specification of the AdmissionCheck.",
            {
                "controllerName": string(
                    "controllerName identifies the controller that processes the AdmissionCheck, not necessarily a "
                    "Kubernetes Pod or Deployment name. Cannot be empty.",
                    **_IMMUTABLE_RULE,
                ),
                "parameters": _PARAMETERS_REF,
            },
            ("controllerName",),
        ),
        "status": obj("status is the status of the AdmissionCheck.", {"conditions": _CONDITIONS}),
    },
    KUEUE_GROUP,
    KUEUE_VERSION,
    "AdmissionCheck",
)
PROVISIONING_REQUEST_CONFIG = _top_level(
    "ProvisioningRequestConfig is the Schema for the provisioningrequestconfig API",
    {
        "spec": obj(
            "ProvisioningRequestConfigSpec defines the desired state of ProvisioningRequestConfig",
            {
                "provisioningClassName": string(
                    "ProvisioningClassName describes the different modes of provisioning the resources.",
                    maxLength=253,
                ),
                "parameters": _PARAMETERS,
                "managedResources": array(
                    "managedResources contains the list of resources managed by the autoscaling.",
                    string(""),
                    maxItems=100,
                    **{"x-kubernetes-list-type": "set"},
                ),
                "retryStrategy": obj(
                    "retryStrategy defines strategy for retrying ProvisioningRequest.",
                    {
                        "backoffLimitCount": integer(
                            "BackoffLimitCount defines the maximum number of re-queuing retries.", default=3
                        ),
                        "backoffBaseSeconds": integer(
                            "BackoffBaseSeconds defines the base for the exponential backoff.", default=60
                        ),
                        "backoffMaxSeconds": integer(
                            "BackoffMaxSeconds defines the maximum backoff time.", default=1800
                        ),
                    },
                ),
                "podSetUpdates": obj(
                    "podSetUpdates specifies the update of the workload's PodSetUpdates which are used to target "
                    "the provisioned nodes.",
                    {
                        "nodeSelector": array(
                            "nodeSelector specifies the list of updates for the NodeSelector.",
                            obj(
                                "ProvisioningRequestPodSetUpdatesNodeSelector",
                                {
                                    "key": string("key specifies the key for the NodeSelector."),
                                    "valueFromProvisioningClassDetail": string(
                                        "valueFromProvisioningClassDetail specifies the key of the "
                                        "ProvisioningRequest.status.provisioningClassDetails from which the value "
                                        "is used for the update."
                                    ),
                                },
                                ("key", "valueFromProvisioningClassDetail"),
                            ),
                            maxItems=8,
                        ),
                    },
                ),
                "podSetMergePolicy": string(
                    "podSetMergePolicy specifies the policy for merging PodSets before being passed to the "
                    "cluster autoscaler.",
                    enum=("IdenticalPodTemplates", "IdenticalWorkloadSchedulingRequirements"),
                ),
            },
            ("provisioningClassName",),
        ),
    },
    KUEUE_GROUP,
    KUEUE_VERSION,
    "ProvisioningRequestConfig",
)
PROVISIONING_REQUEST = _top_level(
    "ProvisioningRequest is a way to express additional capacity that we would like to provision in the cluster.",
    {
        "spec": obj(
            "Spec contains specification of the ProvisioningRequest object.",
            {
                "podSets": array(
                    "PodSets lists groups of pods for which we would like to provision resources.",
                    obj(
                        "PodSet represents one group of pods for Provisioning Request to provision capacity.",
                        {
                            "podTemplateRef": obj(
                                "PodTemplateRef is a reference to a PodTemplate object that is representing pods "
                                "that will consume this reservation (must be within the same namespace).",
                                {"name": string("Name of the referenced object.", maxLength=253)},
                            ),
                            "count": integer(
                                "Count contains the number of pods that will be created with a given template.",
                                minimum=1,
                            ),
                        },
                        ("count", "podTemplateRef"),
                    ),
                    minItems=1,
                    maxItems=32,
                    **_IMMUTABLE_RULE,
                ),
                "provisioningClassName": string(
                    "ProvisioningClassName describes the different modes of provisioning the resources.",
                    maxLength=253,
                    **_IMMUTABLE_RULE,
                ),
                "parameters": {**_PARAMETERS, **_IMMUTABLE_RULE},
            },
            ("podSets", "provisioningClassName"),
        ),
        "status": obj(
            "Status of the ProvisioningRequest. CA constantly reconciles this field.",
            {
                "conditions": _CONDITIONS,
                "provisioningClassDetails": {
                    "type": "object",
                    "description": "ProvisioningClassDetails contains all other values custom provisioning classes "
                    "may want to pass to end users.",
                    "additionalProperties": {"type": "string", "maxLength": 32768},
                    "maxProperties": 64,
                },
            },
        ),
    },
    "autoscaling.x-k8s.io",
    "v1",
    "ProvisioningRequest",
)
PROVISIONING_REQUEST["required"] = ["spec"]
POD_TEMPLATE = _top_level(
    "PodTemplate describes a template for creating copies of a predefined pod.",
    {"template": open_object("Template defines the pods that will be created from this pod template.")},
    "",
    "v1",
    "PodTemplate",
)

KUEUE_KIND_SCHEMAS: dict[tuple[str, str, str], tuple[str, Schema]] = {
    (KUEUE_GROUP, KUEUE_VERSION, "ResourceFlavor"): ("io.x-k8s.kueue.v1beta2.ResourceFlavor", RESOURCE_FLAVOR),
    (KUEUE_GROUP, KUEUE_VERSION, "ClusterQueue"): ("io.x-k8s.kueue.v1beta2.ClusterQueue", CLUSTER_QUEUE),
    (KUEUE_GROUP, KUEUE_VERSION, "LocalQueue"): ("io.x-k8s.kueue.v1beta2.LocalQueue", LOCAL_QUEUE),
    (KUEUE_GROUP, KUEUE_VERSION, "Workload"): ("io.x-k8s.kueue.v1beta2.Workload", WORKLOAD),
    (KUEUE_GROUP, KUEUE_VERSION, "WorkloadPriorityClass"): (
        "io.x-k8s.kueue.v1beta2.WorkloadPriorityClass",
        WORKLOAD_PRIORITY_CLASS,
    ),
    ("scheduling.k8s.io", "v1", "PriorityClass"): ("io.k8s.api.scheduling.v1.PriorityClass", PRIORITY_CLASS),
    (KUEUE_GROUP, KUEUE_VERSION, "AdmissionCheck"): ("io.x-k8s.kueue.v1beta2.AdmissionCheck", ADMISSION_CHECK),
    (KUEUE_GROUP, KUEUE_VERSION, "ProvisioningRequestConfig"): (
        "io.x-k8s.kueue.v1beta2.ProvisioningRequestConfig",
        PROVISIONING_REQUEST_CONFIG,
    ),
    ("autoscaling.x-k8s.io", "v1", "ProvisioningRequest"): (
        "io.x-k8s.autoscaling.v1.ProvisioningRequest",
        PROVISIONING_REQUEST,
    ),
    ("", "v1", "PodTemplate"): ("io.k8s.api.core.v1.PodTemplate", POD_TEMPLATE),
}
