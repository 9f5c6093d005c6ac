"""OpenAPI v3 schemas of the served kinds, as ``/openapi/v3/<group-version>`` publishes them.

The JobSet schema is written from the upstream API types (kubernetes-sigs/jobset,
``api/jobset/v1alpha2/jobset_types.go``): the same fields, enums, defaults, minimums and list
types that controller-gen puts in the CRD's ``openAPIV3Schema``, with the types' doc comments as
descriptions. As in the CRD, nested types are inlined; the Job template inside a replicated job is
left open (``x-kubernetes-preserve-unknown-fields``) where the CRD inlines all of ``batch/v1``.
The built-in kinds carry their top-level fields with upstream's descriptions and leave ``spec`` and
``status`` open: enough for ``kubectl explain pod`` and for strict field validation at the top level.
"""

from __future__ import annotations

from typing import Any

from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_KIND, JOBSET_VERSION

Schema = dict[str, Any]


def string(description: str, *, enum: tuple[str, ...] = (), default: str | None = None, **extra: Any) -> Schema:
    schema: Schema = {"type": "string", "description": description, **extra}
    if enum:
        schema["enum"] = list(enum)
    if default is not None:
        schema["default"] = default
    return schema


def integer(description: str, *, fmt: str = "int32", **extra: Any) -> Schema:
    """An integer; ``fmt=""`` for a Go ``int``, which controller-gen writes without a format."""
    schema: Schema = {"type": "integer", "description": description, **extra}
    if fmt:
        schema["format"] = fmt
    return schema


def boolean(description: str) -> Schema:
    return {"type": "boolean", "description": description}


def array(description: str, items: Schema, **extra: Any) -> Schema:
    return {"type": "array", "description": description, "items": items, **extra}


def obj(description: str, properties: dict[str, Schema], required: tuple[str, ...] = (), **extra: Any) -> Schema:
    """An object with declared ``properties``; ``extra`` adds ``x-kubernetes-*`` extensions and limits."""
    schema: Schema = {"type": "object", "description": description, "properties": properties, **extra}
    if required:
        schema["required"] = list(required)
    return schema


def open_object(description: str) -> Schema:
    """An object whose fields this server does not describe (and therefore does not check)."""
    return {"type": "object", "description": description, "x-kubernetes-preserve-unknown-fields": True}


def ref(name: str, description: str) -> Schema:
    """A reference carrying its own description, the way the API server writes them in v3."""
    return {"description": description, "allOf": [{"$ref": f"#/components/schemas/{name}"}]}


# The CEL rule controller-gen writes for ``+kubebuilder:validation:XValidation:rule="self == oldSelf"``.
_IMMUTABLE: dict[str, Any] = {
    "x-kubernetes-validations": [{"message": "Value is immutable", "rule": "self == oldSelf"}]
}

OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
CONDITION = "io.k8s.apimachinery.pkg.apis.meta.v1.Condition"

_API_VERSION = string(
    "APIVersion defines the versioned schema of this representation of an object. Servers should convert "
    "recognized schemas to the latest internal value, and may reject unrecognized values. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"
)
_KIND = string(
    "Kind is a string value representing the REST resource this object represents. Servers may infer this from "
    "the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"
)
_STANDARD_META = (
    "Standard object's metadata. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)

_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string", "default": ""}}

OBJECT_META_SCHEMA = obj(
    "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.",
    {
        "annotations": {
            **_STRING_MAP,
            "description": "Annotations is an unstructured key value map stored with a resource that may be set by "
            "external tools to store and retrieve arbitrary metadata. They are not queryable and should be "
            "preserved when modifying objects. More info: "
            "https://kubernetes.io/docs/concepts/overview/working-with-objects/annotations",
        },
        "creationTimestamp": string(
            "CreationTimestamp is a timestamp representing the server time when this object was created.",
            format="date-time",
        ),
        "deletionGracePeriodSeconds": integer(
            "Number of seconds allowed for this object to gracefully terminate before it will be removed from the "
            "system. Only set when deletionTimestamp is also set. May only be shortened. Read-only.",
            fmt="int64",
        ),
        "deletionTimestamp": string(
            "DeletionTimestamp is RFC 3339 date and time at which this resource will be deleted.", format="date-time"
        ),
        "finalizers": array(
            "Must be empty before the object is deleted from the registry. Each entry is an identifier for the "
            "responsible component that will remove the entry from the list.",
            {"type": "string", "default": ""},
            **{"x-kubernetes-list-type": "set"},
        ),
        "generateName": string(
            "GenerateName is an optional prefix, used by the server, to generate a unique name ONLY IF the Name "
            "field has not been provided."
        ),
        "generation": integer(
            "A sequence number representing a specific generation of the desired state. Populated by the system. "
            "Read-only.",
            fmt="int64",
        ),
        "labels": {
            **_STRING_MAP,
            "description": "Map of string keys and values that can be used to organize and categorize (scope and "
            "select) objects. May match selectors of replication controllers and services. More info: "
            "https://kubernetes.io/docs/concepts/overview/working-with-objects/labels",
        },
        "managedFields": {
            "type": "array",
            "description": "ManagedFields maps workflow-id and version to the set of fields that are managed by "
            "that workflow.",
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
        "name": string(
            "Name must be unique within a namespace. Is required when creating resources, although some resources "
            "may allow a client to request the generation of an appropriate name automatically. Cannot be updated. "
            "More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
        ),
        "namespace": string(
            "Namespace defines the space within which each name must be unique. An empty namespace is equivalent "
            'to the "default" namespace, but "default" is the canonical representation. Cannot be updated. More '
            "info: https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces"
        ),
        "ownerReferences": {
            "type": "array",
            "description": "List of objects depended by this object. If ALL objects in the list have been deleted, "
            "this object will be garbage collected.",
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
        "resourceVersion": string(
            "An opaque value that represents the internal version of this object that can be used by clients to "
            "determine when objects have changed. Read-only."
        ),
        "selfLink": string("Deprecated: selfLink is a legacy read-only field that is no longer populated."),
        "uid": string(
            "UID is the unique in time and space value for this object. It is typically generated by the server on "
            "successful creation of a resource and is not allowed to change on PUT operations. Read-only."
        ),
    },
)

CONDITION_SCHEMA = obj(
    "Condition contains details for one aspect of the current state of this API Resource.",
    {
        "lastTransitionTime": string(
            "lastTransitionTime is the last time the condition transitioned from one status to another.",
            format="date-time",
        ),
        "message": string("message is a human readable message indicating details about the transition."),
        "observedGeneration": integer(
            "observedGeneration represents the .metadata.generation that the condition was set based upon.",
            fmt="int64",
            minimum=0,
        ),
        "reason": string(
            "reason contains a programmatic identifier indicating the reason for the condition's last transition."
        ),
        "status": string("status of the condition, one of True, False, Unknown.", enum=("True", "False", "Unknown")),
        "type": string("type of condition in CamelCase or in foo.example.com/CamelCase."),
    },
    required=("lastTransitionTime", "message", "reason", "status", "type"),
)


def _top_level(description: str, properties: dict[str, Schema], group: str, version: str, kind: str) -> Schema:
    schema = obj(
        description,
        {"apiVersion": _API_VERSION, "kind": _KIND, "metadata": ref(OBJECT_META, _STANDARD_META), **properties},
    )
    schema["x-kubernetes-group-version-kind"] = [{"group": group, "version": version, "kind": kind}]
    return schema


# -- JobSet (jobset.x-k8s.io/v1alpha2) -----------------------------------------------------------

_TARGET_REPLICATED_JOBS = "targetReplicatedJobs are the names of the replicated jobs the operator applies to.\n" + (
    "An empty list will apply to all replicatedJobs."
)

FAILURE_POLICY_RULE = obj(
    "FailurePolicyRule defines a FailurePolicyAction to be executed if a child job\nfails due to a reason listed "
    "in OnJobFailureReasons and a message pattern\nlisted in OnJobFailureMessagePatterns. The rule must match both "
    "the job\nfailure reason and the job failure message. The rules are evaluated in\norder and the first matching "
    "rule is executed.",
    {
        "action": string(
            "action to take if the rule is matched.\nValid values are FailJobSet, RestartJobSet, "
            "RestartJobSetAndIgnoreMaxRestarts, RestartJob, RestartJobAndIgnoreMaxRestarts.",
            enum=(
                "FailJobSet",
                "RestartJobSet",
                "RestartJobSetAndIgnoreMaxRestarts",
                "RestartJob",
                "RestartJobAndIgnoreMaxRestarts",
            ),
        ),
        "name": string(
            "name of the failure policy rule.\nThe name is defaulted to 'failurePolicyRuleN' where N is the index of "
            'the failure policy rule.\nThe name must match the regular expression "^[A-Za-z]([A-Za-z0-9_,:]*'
            '[A-Za-z0-9_])?$".'
        ),
        "onJobFailureMessagePatterns": array(
            "onJobFailureMessagePatterns is a requirement on the job failure messages.\nThe requirement is satisfied\n"
            "if at least one pattern (regex) matches the job failure message. An\nempty list matches any job failure "
            "message.\nThe syntax of the regular expressions accepted is the same general\nsyntax used by Perl, "
            "Python, and other languages. More precisely, it is\nthe syntax accepted by RE2 and described at "
            "https://golang.org/s/re2syntax,\nexcept for \\C. For an overview of the syntax, see\n"
            "https://pkg.go.dev/regexp/syntax.",
            {"type": "string"},
        ),
        "onJobFailureReasons": array(
            "onJobFailureReasons is a list of job failures reasons.\nThe requirement is satisfied\nif at least one "
            "reason matches the list. An empty list matches any job\nfailure reason.",
            {"type": "string"},
        ),
        "targetReplicatedJobs": array(
            _TARGET_REPLICATED_JOBS, {"type": "string"}, **{"x-kubernetes-list-type": "atomic"}
        ),
    },
    required=("action", "name"),
)

FAILURE_POLICY = obj(
    "failurePolicy configures when to declare the JobSet as\nfailed.\nThe JobSet is always declared failed if any "
    "job in the set\nfinished with status failed.",
    {
        "maxRestarts": integer(
            "maxRestarts defines the limit on the number of JobSet restarts.\nIf the restart strategy "
            '"InPlaceRestart" is used, this field\nalso defines the limit on the number of container restarts of\n'
            "any child container. This is required to handle the edge case\nin which a container keeps failing too "
            "fast to complete a JobSet\nrestart."
        ),
        "restartStrategy": string(
            "restartStrategy defines the strategy to use when restarting the JobSet.\nDefaults to Recreate.",
            enum=("Recreate", "BlockingRecreate", "InPlaceRestart"),
            default="Recreate",
        ),
        "rules": array(
            "rules is a list of failure policy rules for this JobSet.\nFor a given Job failure, the rules will be "
            "evaluated in order,\nand only the first matching rule will be executed.\nIf no matching rule is found, "
            "the RestartJobSet action is applied.",
            FAILURE_POLICY_RULE,
        ),
    },
    **_IMMUTABLE,
)

SUCCESS_POLICY = obj(
    "successPolicy configures when to declare the JobSet as\nsucceeded.\nThe JobSet is always declared succeeded if "
    "all jobs in the set\nfinished with status complete.",
    {
        "operator": string(
            "operator determines either All or Any of the selected jobs should succeed to consider the JobSet "
            "successful",
            enum=("All", "Any"),
        ),
        "targetReplicatedJobs": array(
            "targetReplicatedJobs are the names of the replicated jobs the operator will apply to.\nA null or empty "
            "list will apply to all replicatedJobs.",
            {"type": "string"},
            **{"x-kubernetes-list-type": "atomic"},
        ),
    },
    required=("operator",),
    **_IMMUTABLE,
)

REPLICATED_JOB = obj(
    "",
    {
        "dependsOn": array(
            "dependsOn is an optional list that specifies the preceding ReplicatedJobs upon which\nthe current "
            "ReplicatedJob depends. If specified, the ReplicatedJob will be created\nonly after the referenced "
            "ReplicatedJobs reach their desired state.\nThe Order of ReplicatedJobs is defined by their enumeration "
            "in the slice.\nNote, that the first ReplicatedJob in the slice cannot use the DependsOn API.\nCurrently, "
            "only a single item is supported in the DependsOn list.\nIf JobSet is suspended the all active "
            "ReplicatedJobs will be suspended. When JobSet is\nresumed the Job sequence starts again.\nThis API is "
            "mutually exclusive with the StartupPolicy API.",
            obj(
                "DependsOn defines the dependency on the previous ReplicatedJob status.",
                {
                    "name": string("name of the previous ReplicatedJob."),
                    "status": string(
                        "status defines the condition for the ReplicatedJob. Only Ready or Complete status can be set.",
                        enum=("Ready", "Complete"),
                    ),
                },
                required=("name", "status"),
            ),
            maxItems=5,
            **{
                "x-kubernetes-list-map-keys": ["name"],
                "x-kubernetes-list-type": "map",
                "x-kubernetes-validations": [{"message": "Value is immutable", "rule": "self == oldSelf"}],
            },
        ),
        "groupName": string(
            'groupName defines the name of the group this ReplicatedJob belongs to. Defaults to "default"',
            default="default",
        ),
        "name": string("name is the name of the entry and will be used as a suffix\nfor the Job name."),
        "replicas": integer(
            "replicas is the number of jobs that will be created from this ReplicatedJob's template.\nJobs names will "
            "be in the format: <jobSet.name>-<spec.replicatedJob.name>-<job-index>",
            default=1,
            minimum=0,
        ),
        "template": obj(
            "template defines the template of the Job that will be created.",
            {
                "metadata": open_object(
                    "Standard object's metadata of the jobs created from this template.\nMore info: "
                    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
                ),
                "spec": open_object(
                    "Specification of the desired behavior of the job.\nMore info: "
                    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"
                    "#spec-and-status"
                ),
            },
        ),
    },
    required=("name", "template"),
)

_EXCLUSIVE_STARTUP: dict[str, Any] = {
    "x-kubernetes-validations": [
        {
            "message": "StartupPolicy and DependsOn APIs are mutually exclusive",
            "rule": "!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' && "
            "self.replicatedJobs.exists(x, has(x.dependsOn)))",
        }
    ]
}

JOBSET_SPEC = obj(
    "spec is the specification for jobset",
    {
        "coordinator": obj(
            "coordinator can be used to assign a specific pod as the coordinator for\nthe JobSet. If defined, an "
            "annotation will be added to all Jobs and pods with\ncoordinator pod, which contains the stable network "
            "endpoint where the\ncoordinator pod can be reached.\njobset.sigs.k8s.io/coordinator=<pod hostname>."
            "<headless service>",
            {
                "jobIndex": integer(
                    "jobIndex is the index of Job which contains the coordinator pod\n(i.e., for a ReplicatedJob with "
                    "N replicas, there are Job indexes 0 to N-1).",
                    fmt="",
                ),
                "podIndex": integer("podIndex is the Job completion index of the coordinator pod.", fmt=""),
                "replicatedJob": string(
                    "replicatedJob is the name of the ReplicatedJob which contains\nthe coordinator pod."
                ),
            },
            required=("replicatedJob",),
        ),
        "failurePolicy": FAILURE_POLICY,
        "managedBy": string(
            "managedBy is used to indicate the controller or entity that manages a JobSet.\nThe built-in JobSet "
            "controller reconciles JobSets which don't have this\nfield at all or the field value is the reserved "
            "string\n`jobset.sigs.k8s.io/jobset-controller`, but skips reconciling JobSets\nwith a custom value for "
            "this field.\n\nThe value must be a valid domain-prefixed path (e.g. acme.io/foo) -\nall characters before "
            'the first "/" must be a valid subdomain as defined\nby RFC 1123. All characters trailing the first "/" '
            "must be valid HTTP Path\ncharacters as defined by RFC 3986. The value cannot exceed 63 characters.\nThe "
            "field is immutable."
        ),
        "network": obj(
            "network defines the networking options for the jobset.",
            {
                "enableDNSHostnames": boolean(
                    "enableDNSHostnames allows pods to be reached via their hostnames.\nPods will be reachable using "
                    "the fully qualified pod hostname:\n<jobSet.name>-<spec.replicatedJob.name>-<job-index>-"
                    "<pod-index>.<subdomain>"
                ),
                "publishNotReadyAddresses": boolean(
                    "publishNotReadyAddresses indicates if DNS records of pods should be published before the pods "
                    "are ready.\nDefaults to True."
                ),
                "subdomain": string(
                    "subdomain is an explicit choice for a network subdomain name\nWhen set, any replicated job in "
                    "the set is added to this network.\nDefaults to <jobSet.name> if not set."
                ),
            },
            **_IMMUTABLE,
        ),
        "replicatedJobs": array(
            "replicatedJobs is the group of jobs that will form the set.",
            REPLICATED_JOB,
            **{"x-kubernetes-list-map-keys": ["name"], "x-kubernetes-list-type": "map"},
        ),
        "startupPolicy": obj(
            "startupPolicy configures in what order jobs must be started\nDeprecated: StartupPolicy is deprecated, "
            "please use the DependsOn API.",
            {
                "startupPolicyOrder": string(
                    "startupPolicyOrder determines the startup order of the ReplicatedJobs.\nAnyOrder means to start "
                    "replicated jobs in any order.\nInOrder means to start them as they are listed in the JobSet. A "
                    "ReplicatedJob is started only\nwhen all the jobs of the previous one are ready.",
                    enum=("AnyOrder", "InOrder"),
                )
            },
            required=("startupPolicyOrder",),
            **_IMMUTABLE,
        ),
        "successPolicy": SUCCESS_POLICY,
        "suspend": boolean("suspend suspends all running child Jobs when set to true."),
        "ttlSecondsAfterFinished": integer(
            "ttlSecondsAfterFinished limits the lifetime of a JobSet that has finished\nexecution (either Complete or "
            "Failed). If this field is set,\nTTLSecondsAfterFinished after the JobSet finishes, it is eligible to be\n"
            "automatically deleted. When the JobSet is being deleted, its lifecycle\nguarantees (e.g. finalizers) will "
            "be honored. If this field is unset,\nthe JobSet won't be automatically deleted. If this field is set to "
            "zero,\nthe JobSet becomes eligible to be deleted immediately after it finishes.",
            minimum=0,
        ),
        "volumeClaimPolicies": array(
            "volumeClaimPolicies is a list of policies for persistent volume claims that pods are allowed\nto "
            "reference. JobSet controller automatically adds the required volume claims to the\npod template. Every "
            "claim in this list must have at least one matching (by name)\nvolumeMount in one container in the "
            "template.",
            obj(
                "volumeClaimPolicy defines volume claim templates and lifecycle management for shared PVCs.",
                {
                    "retentionPolicy": obj(
                        "retentionPolicy describes the lifecycle of persistent volume claims created from the "
                        "template.\nBy default, all persistent volume claims are deleted once JobSet is deleted.",
                        {
                            "whenDeleted": string(
                                "whenDeleted specifies what happens to PVCs when JobSet is deleted.",
                                enum=("Delete", "Retain"),
                                default="Delete",
                            )
                        },
                    ),
                    "templates": array(
                        "templates is a list of shared PVC claims that ReplicatedJobs are allowed to reference.",
                        open_object("PersistentVolumeClaim is a user's request for and claim to a persistent volume"),
                        maxItems=50,
                        **{"x-kubernetes-list-type": "atomic"},
                    ),
                },
            ),
            maxItems=50,
            **{
                "x-kubernetes-list-type": "atomic",
                "x-kubernetes-validations": [{"message": "Value is immutable", "rule": "self == oldSelf"}],
            },
        ),
    },
    **_EXCLUSIVE_STARTUP,
)

_RESTART_COUNTS = {"type": "integer", "format": "int32"}

JOBSET_STATUS = obj(
    "status is the status of the jobset",
    {
        "conditions": array(
            "conditions track status",
            ref(CONDITION, "Condition contains details for one aspect of the current state of this API Resource."),
            **{"x-kubernetes-list-map-keys": ["type"], "x-kubernetes-list-type": "map"},
        ),
        "currentInPlaceRestartAttempt": integer(
            "currentInPlaceRestartAttempt tracks the current in-place restart attempt\nof the JobSet. It is read by "
            "the agent. If the in-place restart\nattempt of the Pod is equal to currentInPlaceRestartAttempt, the "
            "agent\nshould lift its barrier to allow the worker container to\nstart running.",
            minimum=0,
        ),
        "previousInPlaceRestartAttempt": integer(
            "previousInPlaceRestartAttempt tracks the previous in-place restart attempt\nof the JobSet. It is read by "
            "the agent. If the in-place restart\nattempt of the Pod is smaller than or equal to "
            "previousInPlaceRestartAttempt,\nthe agent should restart its Pod in-place.",
            minimum=0,
        ),
        "replicatedJobsStatus": array(
            "replicatedJobsStatus tracks the number of JobsReady for each replicatedJob.",
            obj(
                "ReplicatedJobStatus defines the observed ReplicatedJobs Readiness.",
                {
                    "active": integer(
                        "active is the number of child Jobs with at least 1 pod in a running or pending state\nwhich "
                        "are not marked for deletion."
                    ),
                    "failed": integer("failed is the number of failed child Jobs."),
                    "jobRestarts": array(
                        "jobRestarts tracks the number of times the Jobs have been individually restarted.",
                        _RESTART_COUNTS,
                        maxItems=1024,
                        **{"x-kubernetes-list-type": "atomic"},
                    ),
                    "jobRestartsCountTowardsMax": array(
                        "jobRestartsCountTowardsMax tracks the number of times the Jobs have been individually "
                        "restarted that count towards the maximum allowed number of restarts.",
                        _RESTART_COUNTS,
                        maxItems=1024,
                        **{"x-kubernetes-list-type": "atomic"},
                    ),
                    "name": string("name of the ReplicatedJob."),
                    "ready": integer(
                        "ready is the number of child Jobs where the number of ready pods and completed pods\nis "
                        "greater than or equal to the total expected pod count for the Job (i.e., the minimum\nof "
                        "job.spec.parallelism and job.spec.completions)."
                    ),
                    "succeeded": integer("succeeded is the number of successfully completed child Jobs."),
                    "suspended": integer("suspended is the number of child Jobs which are in a suspended state."),
                },
                required=("active", "failed", "name", "ready", "succeeded", "suspended"),
            ),
            **{"x-kubernetes-list-map-keys": ["name"], "x-kubernetes-list-type": "map"},
        ),
        "restarts": integer(
            "restarts tracks the number of times the JobSet has been globally restarted.\nThat is, restarts is the "
            "number of times the restart action RestartJobSet or RestartJobSetAndIgnoreMaxRestarts have been "
            "executed and led to the recreation of all Jobs."
        ),
        "restartsCountTowardsMax": integer(
            "restartsCountTowardsMax tracks the number of times the JobSet has been globally restarted that counts "
            "towards the maximum allowed number of restarts.\nThat is, restartsCountTowardsMax is the number of times "
            "the restart action RestartJobSet has been executed and led to the recreation of all Jobs."
        ),
        "terminalState": string(
            "terminalState tracks the state of the JobSet when it finishes execution.\nIt can be either Completed or "
            "Failed. Otherwise, it is empty by default."
        ),
    },
)

JOBSET = _top_level(
    "JobSet is the Schema for the jobsets API",
    {"spec": JOBSET_SPEC, "status": JOBSET_STATUS},
    JOBSET_GROUP,
    JOBSET_VERSION,
    JOBSET_KIND,
)

# -- built-in kinds ------------------------------------------------------------------------------

_SPEC_AND_STATUS = "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#spec-and-status"

POD = _top_level(
    "Pod is a collection of containers that can run on a host. This resource is created by clients and scheduled "
    "onto hosts.",
    {
        "spec": open_object(f"Specification of the desired behavior of the pod. More info: {_SPEC_AND_STATUS}"),
        "status": open_object(
            "Most recently observed status of the pod. This data may not be up to date. Populated by the system. "
            f"Read-only. More info: {_SPEC_AND_STATUS}"
        ),
    },
    "",
    "v1",
    "Pod",
)
NAMESPACE = _top_level(
    "Namespace provides a scope for Names. Use of multiple namespaces is optional.",
    {
        "spec": open_object(f"Spec defines the behavior of the Namespace. More info: {_SPEC_AND_STATUS}"),
        "status": open_object(f"Status describes the current status of a Namespace. More info: {_SPEC_AND_STATUS}"),
    },
    "",
    "v1",
    "Namespace",
)
NODE = _top_level(
    "Node is a worker node in Kubernetes. Each node will have a unique identifier in the cache (i.e. in etcd).",
    {
        "spec": open_object(f"Spec defines the behavior of a node. More info: {_SPEC_AND_STATUS}"),
        "status": open_object(f"Most recently observed status of the node. More info: {_SPEC_AND_STATUS}"),
    },
    "",
    "v1",
    "Node",
)
EVENT = _top_level(
    "Event is a report of an event somewhere in the cluster.",
    {
        "action": string("What action was taken/failed regarding to the Regarding object."),
        "count": integer("The number of times this event has occurred."),
        "eventTime": string("Time when this Event was first observed.", format="date-time"),
        "firstTimestamp": string(
            "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
            format="date-time",
        ),
        "involvedObject": open_object("The object that this event is about."),
        "lastTimestamp": string(
            "The time at which the most recent occurrence of this event was recorded.", format="date-time"
        ),
        "message": string("A human-readable description of the status of this operation."),
        "reason": string(
            "This should be a short, machine understandable string that gives the reason for the transition into "
            "the object's current status."
        ),
        "related": open_object("Optional secondary object for more complex actions."),
        "reportingComponent": string("Name of the controller that emitted this Event, e.g. `kubernetes.io/kubelet`."),
        "reportingInstance": string("ID of the controller instance, e.g. `kubelet-xyzf`."),
        "series": open_object("Data about the Event series this event represents or nil if it's a singleton Event."),
        "source": open_object("The component reporting this event. Should be a short machine understandable string."),
        "type": string("Type of this event (Normal, Warning), new types could be added in the future"),
    },
    "",
    "v1",
    "Event",
)
CONFIG_MAP = _top_level(
    "ConfigMap holds configuration data for pods to consume.",
    {
        "data": {
            **_STRING_MAP,
            "description": "Data contains the configuration data. Each key must consist of alphanumeric characters, "
            "'-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field.",
        },
        "binaryData": {
            **_STRING_MAP,
            "description": "BinaryData contains the binary data. Each key must consist of alphanumeric characters, "
            "'-', '_' or '.'.",
        },
        "immutable": boolean(
            "Immutable, if set to true, ensures that data stored in the ConfigMap cannot be updated (only object "
            "metadata can be modified)."
        ),
    },
    "",
    "v1",
    "ConfigMap",
)
JOB = _top_level(
    "Job represents the configuration of a single job.",
    {
        "spec": open_object(f"Specification of the desired behavior of a job. More info: {_SPEC_AND_STATUS}"),
        "status": open_object(f"Current status of a job. More info: {_SPEC_AND_STATUS}"),
    },
    "batch",
    "v1",
    "Job",
)

# Component names as the API server publishes them (``io.k8s.api.core.v1.Pod``; CRDs reversed-domain).
KIND_SCHEMAS: dict[tuple[str, str, str], tuple[str, Schema]] = {
    ("", "v1", "Pod"): ("io.k8s.api.core.v1.Pod", POD),
    ("", "v1", "Namespace"): ("io.k8s.api.core.v1.Namespace", NAMESPACE),
    ("", "v1", "Event"): ("io.k8s.api.core.v1.Event", EVENT),
    ("", "v1", "Node"): ("io.k8s.api.core.v1.Node", NODE),
    ("", "v1", "ConfigMap"): ("io.k8s.api.core.v1.ConfigMap", CONFIG_MAP),
    ("batch", "v1", "Job"): ("io.k8s.api.batch.v1.Job", JOB),
    (JOBSET_GROUP, JOBSET_VERSION, JOBSET_KIND): ("io.x-k8s.jobset.v1alpha2.JobSet", JOBSET),
}
SHARED_SCHEMAS: dict[str, Schema] = {OBJECT_META: OBJECT_META_SCHEMA, CONDITION: CONDITION_SCHEMA}

# -- access control (rbac.authorization.k8s.io/v1, ServiceAccounts, reviews) ---------------------

_POLICY_RULE = obj(
    "PolicyRule holds information that describes a policy rule, but does not contain information about who the "
    "rule applies to or which namespace the rule applies to.",
    {
        "apiGroups": array(
            "APIGroups is the name of the APIGroup that contains the resources.  If multiple API groups are "
            "specified, any action requested against one of the enumerated resources in any API group will be "
            'allowed. "" represents the core API group and "*" represents all API groups.',
            {"type": "string", "default": ""},
            **{"x-kubernetes-list-type": "atomic"},
        ),
        "nonResourceURLs": array(
            "NonResourceURLs is a set of partial urls that a user should have access to.  *s are allowed, but only "
            'as the full, final step in the path. Rules can either apply to API resources (such as "pods" or '
            '"secrets") or non-resource URL paths (such as "/api"),  but not both.',
            {"type": "string", "default": ""},
            **{"x-kubernetes-list-type": "atomic"},
        ),
        "resourceNames": array(
            "ResourceNames is an optional white list of names that the rule applies to.  An empty set means that "
            "everything is allowed.",
            {"type": "string", "default": ""},
            **{"x-kubernetes-list-type": "atomic"},
        ),
        "resources": array(
            "Resources is a list of resources this rule applies to. '*' represents all resources.",
            {"type": "string", "default": ""},
            **{"x-kubernetes-list-type": "atomic"},
        ),
        "verbs": array(
            "Verbs is a list of Verbs that apply to ALL the ResourceKinds contained in this rule. '*' represents all "
            "verbs.",
            {"type": "string", "default": ""},
            **{"x-kubernetes-list-type": "atomic"},
        ),
    },
    required=("verbs",),
)
_RULES = array("Rules holds all the PolicyRules for this Role", _POLICY_RULE, **{"x-kubernetes-list-type": "atomic"})
_ROLE_REF = obj(
    "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace. If the "
    "RoleRef cannot be resolved, the Authorizer must return an error. This field is immutable.",
    {
        "apiGroup": string("APIGroup is the group for the resource being referenced"),
        "kind": string("Kind is the type of resource being referenced"),
        "name": string("Name is the name of resource being referenced"),
    },
    required=("apiGroup", "kind", "name"),
    **{"x-kubernetes-map-type": "atomic"},
)
_SUBJECTS = array(
    "Subjects holds references to the objects the role applies to.",
    obj(
        "Subject contains a reference to the object or user identities a role binding applies to.  This can either "
        "hold a direct API object reference, or a value for non-objects such as user and group names.",
        {
            "apiGroup": string(
                'APIGroup holds the API group of the referenced subject. Defaults to "" for ServiceAccount '
                'subjects. Defaults to "rbac.authorization.k8s.io" for User and Group subjects.'
            ),
            "kind": string(
                'Kind of object being referenced. Values defined by this API group are "User", "Group", and '
                '"ServiceAccount". If the Authorizer does not recognized the kind value, the Authorizer should '
                "report an error."
            ),
            "name": string("Name of the object being referenced."),
            "namespace": string(
                'Namespace of the referenced object.  If the object kind is non-namespace, such as "User" or '
                '"Group", and this value is not empty the Authorizer should report an error.'
            ),
        },
        required=("kind", "name"),
        **{"x-kubernetes-map-type": "atomic"},
    ),
    **{"x-kubernetes-list-type": "atomic"},
)
RBAC_GROUP = "rbac.authorization.k8s.io"
ROLE = _top_level(
    "Role is a namespaced, logical grouping of PolicyRules that can be referenced as a unit by a RoleBinding.",
    {"rules": _RULES},
    RBAC_GROUP,
    "v1",
    "Role",
)
CLUSTER_ROLE = _top_level(
    "ClusterRole is a cluster level, logical grouping of PolicyRules that can be referenced as a unit by a "
    "RoleBinding or ClusterRoleBinding.",
    {
        "rules": _RULES,
        "aggregationRule": open_object(
            "AggregationRule is an optional field that describes how to build the Rules for this ClusterRole."
        ),
    },
    RBAC_GROUP,
    "v1",
    "ClusterRole",
)
ROLE_BINDING = _top_level(
    "RoleBinding references a role, but does not contain it.  It can reference a Role in the same namespace or a "
    "ClusterRole in the global namespace. It adds who information via Subjects and namespace information by which "
    "namespace it exists in.  RoleBindings in a given namespace only have effect in that namespace.",
    {"roleRef": _ROLE_REF, "subjects": _SUBJECTS},
    RBAC_GROUP,
    "v1",
    "RoleBinding",
)
CLUSTER_ROLE_BINDING = _top_level(
    "ClusterRoleBinding references a ClusterRole, but not contain it.  It can reference a ClusterRole in the "
    "global namespace, and adds who information via Subject.",
    {"roleRef": _ROLE_REF, "subjects": _SUBJECTS},
    RBAC_GROUP,
    "v1",
    "ClusterRoleBinding",
)
SERVICE_ACCOUNT = _top_level(
    "ServiceAccount binds together: * a name, understood by users, and perhaps by peripheral systems, for an "
    "identity * a principal that can be authenticated and authorized * a set of secrets",
    {
        "automountServiceAccountToken": boolean(
            "AutomountServiceAccountToken indicates whether pods running as this service account should have an "
            "API token automatically mounted. Can be overridden at the pod level."
        ),
        "imagePullSecrets": array(
            "ImagePullSecrets is a list of references to secrets in the same namespace to use for pulling any "
            "images in pods that reference this ServiceAccount.",
            open_object("LocalObjectReference contains enough information to let you locate the referenced object."),
        ),
        "secrets": array(
            "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount "
            "are allowed to use.",
            open_object("ObjectReference contains enough information to let you inspect or modify the object."),
        ),
    },
    "",
    "v1",
    "ServiceAccount",
)
SELF_SUBJECT_ACCESS_REVIEW = _top_level(
    "SelfSubjectAccessReview checks whether or the current user can perform an action.  Not filling in a "
    'spec.namespace means "in all namespaces".  Self is a special case, because users should always be able to '
    "check whether they can perform an action",
    {
        "spec": open_object("Spec holds information about the request being evaluated.  user and groups must be empty"),
        "status": open_object("Status is filled in by the server and indicates whether the request is allowed or not"),
    },
    "authorization.k8s.io",
    "v1",
    "SelfSubjectAccessReview",
)
SELF_SUBJECT_REVIEW = _top_level(
    "SelfSubjectReview contains the user information that the kube-apiserver has about the user making this request.",
    {"status": open_object("Status is filled in by the server with the user attributes.")},
    "authentication.k8s.io",
    "v1",
    "SelfSubjectReview",
)
KIND_SCHEMAS.update(
    {
        ("", "v1", "ServiceAccount"): ("io.k8s.api.core.v1.ServiceAccount", SERVICE_ACCOUNT),
        (RBAC_GROUP, "v1", "Role"): ("io.k8s.api.rbac.v1.Role", ROLE),
        (RBAC_GROUP, "v1", "ClusterRole"): ("io.k8s.api.rbac.v1.ClusterRole", CLUSTER_ROLE),
        (RBAC_GROUP, "v1", "RoleBinding"): ("io.k8s.api.rbac.v1.RoleBinding", ROLE_BINDING),
        (RBAC_GROUP, "v1", "ClusterRoleBinding"): ("io.k8s.api.rbac.v1.ClusterRoleBinding", CLUSTER_ROLE_BINDING),
        ("authorization.k8s.io", "v1", "SelfSubjectAccessReview"): (
            "io.k8s.api.authorization.v1.SelfSubjectAccessReview",
            SELF_SUBJECT_ACCESS_REVIEW,
        ),
        ("authentication.k8s.io", "v1", "SelfSubjectReview"): (
            "io.k8s.api.authentication.v1.SelfSubjectReview",
            SELF_SUBJECT_REVIEW,
        ),
    }
)
