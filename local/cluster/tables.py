"""Server-side printing: ``meta.k8s.io/v1`` ``Table`` responses, the columns ``kubectl get`` shows.

Follows the API server's content negotiation (``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``,
``includeObject=None|Metadata|Object``, Metadata by default) and the printers of
``pkg/printers/internalversion/printers.go`` for the built-in types (pods, jobs, events, namespaces),
whose cells are computed on the server the same way: pod STATUS from the phase, the pod's reason
and the container states; RESTARTS with the time of the last restart; job STATUS from its
conditions; ages as ``duration.HumanDuration`` writes them. JobSets follow the CRD table
convertor (``apiextensions-apiserver/pkg/registry/customresource/tableconvertor``) with the
upstream CRD's ``additionalPrinterColumns``: string columns printed from a JSONPath, ``date``
columns as an age, a missing value as ``null``; so do Kueue's Workloads, ClusterQueues, LocalQueues and
WorkloadPriorityClasses (kubernetes-sigs/kueue ``apis/kueue/v1beta2/*_types.go`` ``+kubebuilder:printcolumn``
markers; integer columns as JSON numbers) and ResourceFlavors (no printer columns: Name and Age).
PriorityClasses follow ``printPriorityClass``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from elastic_training.local.cluster.resources import (
    CLUSTER_QUEUES,
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    CONFIG_MAPS,
    EVENTS,
    JOBS,
    JOBSETS,
    LOCAL_QUEUES,
    NAMESPACES,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    ROLE_BINDINGS,
    ROLES,
    SERVICE_ACCOUNTS,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
    ResourceType,
    bad_request,
)

Obj = dict[str, Any]
IncludeObject = Literal["None", "Metadata", "Object"]
TABLE_GROUP = "meta.k8s.io"
_TABLE_VERSIONS = ("v1", "v1beta1")

_NAME_DOC = (
    "Name must be unique within a namespace. Is required when creating resources, although some resources may "
    "allow a client to request the generation of an appropriate name automatically. Name is primarily intended "
    "for creation idempotence and configuration definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_AGE_DOC = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. It is not "
    "guaranteed to be set in happens-before order across separate operations. Clients may not set this value. "
    "It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. "
    "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)


@dataclass(frozen=True)
class Column:
    """One ``TableColumnDefinition`` and how to compute its cell from an object."""

    name: str
    type: str
    description: str
    cell: Callable[[Obj, datetime], Any]
    format: str = ""
    priority: int = 0

    def definition(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        }


@dataclass(frozen=True)
class TableRequest:
    """What the client asked for: the Table's API version and how much of each object to embed."""

    version: str
    include_object: IncludeObject


def negotiate(accept: str | None, include_object: str | None) -> TableRequest | None:
    """The Table the ``Accept`` header asks for, or None when the first acceptable type is plain JSON."""
    if not accept:
        return None
    for media_range in accept.split(","):
        kind, *raw_params = (part.strip() for part in media_range.split(";"))
        params = dict(p.split("=", 1) for p in raw_params if "=" in p)
        if kind not in ("application/json", "*/*", "application/*"):
            continue
        if params.get("as") != "Table":
            if "as" in params:
                continue  # PartialObjectMetadata and other conversions are not served; try the next range
            return None
        if params.get("g") == TABLE_GROUP and params.get("v") in _TABLE_VERSIONS:
            include = include_object or "Metadata"
            if include not in ("None", "Metadata", "Object"):
                raise bad_request(f"includeObject: unsupported value {include!r}, must be None, Metadata or Object")
            return TableRequest(params["v"], include)  # type: ignore[arg-type]
    return None


# -- values --------------------------------------------------------------------------------------


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """``k8s.io/apimachinery/pkg/util/duration.HumanDuration``: 45s, 3m20s, 2h5m, 3d4h, 2y10d."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        rest = whole % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        rest = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if rest == 0 else f"{hours // 24 // 365}y{rest}d"
    return f"{hours // 24 // 365}y"


def _since(value: Any, now: datetime) -> str:
    moment = _parse_time(value)
    if moment is None:
        return "<unknown>"
    return human_duration((now - moment).total_seconds())


def _age(obj: Obj, now: datetime) -> str:
    return _since(obj.get("metadata", {}).get("creationTimestamp"), now)


def _name(obj: Obj, now: datetime) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def _none(value: Any) -> str:
    return str(value) if value not in (None, "") else "<none>"


# -- nodes (printNode) ---------------------------------------------------------------------------


def _node_status(node: Obj, now: datetime) -> str:
    conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    parts = ["Unknown"] if "Ready" not in conditions else ["Ready" if conditions["Ready"] == "True" else "NotReady"]
    if (node.get("spec") or {}).get("unschedulable"):
        parts.append("SchedulingDisabled")
    return ",".join(parts)


def _node_roles(node: Obj, now: datetime) -> str:
    prefix = "node-role.kubernetes.io/"
    roles = sorted(k[len(prefix) :] for k in (node.get("metadata") or {}).get("labels") or {} if k.startswith(prefix))
    return ",".join(roles) or "<none>"


def _node_address(kind: str) -> Callable[[Obj, datetime], str]:
    def cell(node: Obj, now: datetime) -> str:
        for address in (node.get("status") or {}).get("addresses") or []:
            if address.get("type") == kind:
                return str(address.get("address", ""))
        return "<none>"

    return cell


def _node_info(key: str) -> Callable[[Obj, datetime], str]:
    def cell(node: Obj, now: datetime) -> str:
        return _none((node.get("status") or {}).get("nodeInfo", {}).get(key))

    return cell


# -- pods (printPod) -----------------------------------------------------------------------------


def _pod_status(pod: Obj) -> tuple[str, int, int, int, datetime | None]:
    """STATUS, ready containers, total containers, restarts, the last container termination."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    total = len(spec.get("containers") or [])
    reason = status.get("reason") or status.get("phase") or ""
    restarts, ready = 0, 0
    last_restart: datetime | None = None
    initializing = False
    init_specs = spec.get("initContainers") or []
    for index, container in enumerate(status.get("initContainerStatuses") or []):
        restarts += int(container.get("restartCount") or 0)
        state = container.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and terminated.get("exitCode") == 0:
            continue
        if terminated:
            if terminated.get("reason"):
                reason = f"Init:{terminated['reason']}"
            elif terminated.get("signal"):
                reason = f"Init:Signal:{terminated['signal']}"
            else:
                reason = f"Init:ExitCode:{terminated.get('exitCode')}"
        elif waiting and waiting.get("reason") and waiting.get("reason") != "PodInitializing":
            reason = f"Init:{waiting['reason']}"
        else:
            reason = f"Init:{index}/{len(init_specs)}"
        initializing = True
        break
    if not initializing:
        running = False
        for container in reversed(status.get("containerStatuses") or []):
            restarts += int(container.get("restartCount") or 0)
            finished = _parse_time(((container.get("lastState") or {}).get("terminated") or {}).get("finishedAt"))
            if finished is not None and (last_restart is None or finished > last_restart):
                last_restart = finished
            state = container.get("state") or {}
            waiting, terminated = state.get("waiting"), state.get("terminated")
            if waiting and waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated and terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated:
                reason = (
                    f"Signal:{terminated['signal']}"
                    if terminated.get("signal")
                    else f"ExitCode:{terminated.get('exitCode')}"
                )
            elif container.get("ready") and state.get("running") is not None:
                running = True
                ready += 1
        if reason == "Completed" and running:
            conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
            reason = "Running" if conditions.get("Ready") == "True" else "NotReady"
    if pod.get("metadata", {}).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason, ready, total, restarts, last_restart


def _pod_ready(pod: Obj, now: datetime) -> str:
    _, ready, total, _, _ = _pod_status(pod)
    return f"{ready}/{total}"


def _pod_phase(pod: Obj, now: datetime) -> str:
    return _pod_status(pod)[0]


def _pod_restarts(pod: Obj, now: datetime) -> str:
    _, _, _, restarts, last = _pod_status(pod)
    if last is None:
        return str(restarts)
    return f"{restarts} ({human_duration((now - last).total_seconds())} ago)"


def _pod_ip(pod: Obj, now: datetime) -> str:
    return _none((pod.get("status") or {}).get("podIP"))


def _pod_node(pod: Obj, now: datetime) -> str:
    return _none((pod.get("spec") or {}).get("nodeName"))


def _pod_nominated(pod: Obj, now: datetime) -> str:
    return _none((pod.get("status") or {}).get("nominatedNodeName"))


def _pod_gates(pod: Obj, now: datetime) -> str:
    gates = (pod.get("spec") or {}).get("readinessGates") or []
    if not gates:
        return "<none>"
    conditions = {c.get("type"): c.get("status") for c in (pod.get("status") or {}).get("conditions") or []}
    passed = sum(1 for gate in gates if conditions.get(gate.get("conditionType")) == "True")
    return f"{passed}/{len(gates)}"


# -- jobs (printJob) -----------------------------------------------------------------------------


def _true_conditions(obj: Obj) -> set[str]:
    return {str(c.get("type")) for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}


def _job_status(job: Obj, now: datetime) -> str:
    conditions = _true_conditions(job)
    if "Complete" in conditions:
        return "Complete"
    if "Failed" in conditions:
        return "Failed"
    if job.get("metadata", {}).get("deletionTimestamp"):
        return "Terminating"
    for condition in ("Suspended", "FailureTarget", "SuccessCriteriaMet"):
        if condition in conditions:
            return condition
    return "Running"


def _job_completions(job: Obj, now: datetime) -> str:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    succeeded = int(status.get("succeeded") or 0)
    if spec.get("completions") is not None:
        return f"{succeeded}/{spec['completions']}"
    parallelism = int(spec.get("parallelism") or 0)
    return f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"


def _job_duration(job: Obj, now: datetime) -> str:
    status = job.get("status") or {}
    started = _parse_time(status.get("startTime"))
    if started is None:
        return ""
    finished = _parse_time(status.get("completionTime")) or now
    return human_duration((finished - started).total_seconds())


def _template_containers(job: Obj) -> list[Obj]:
    return list((((job.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or [])


def _job_containers(job: Obj, now: datetime) -> str:
    return ",".join(str(c.get("name", "")) for c in _template_containers(job))


def _job_images(job: Obj, now: datetime) -> str:
    return ",".join(str(c.get("image", "")) for c in _template_containers(job))


def _job_selector(job: Obj, now: datetime) -> str:
    selector = (job.get("spec") or {}).get("selector") or {}
    labels = selector.get("matchLabels") or {}
    terms = [f"{key}={value}" for key, value in sorted(labels.items())]
    for expression in selector.get("matchExpressions") or []:
        values = ",".join(expression.get("values") or [])
        terms.append(f"{expression.get('key')} {str(expression.get('operator', '')).lower()} ({values})")
    return ",".join(terms) if terms else "<none>"


# -- events (printEvent) -------------------------------------------------------------------------


def _event_last_seen(event: Obj, now: datetime) -> str:
    series = event.get("series") or {}
    if series.get("lastObservedTime"):
        return _since(series["lastObservedTime"], now)
    last = event.get("lastTimestamp") or event.get("eventTime")
    count = int(event.get("count") or 0)
    if count > 1:
        first = event.get("firstTimestamp") or event.get("eventTime")
        first_time, last_time = _parse_time(first), _parse_time(last)
        over = human_duration((last_time - first_time).total_seconds()) if first_time and last_time else "<unknown>"
        return f"{_since(last, now)} (x{count} over {over})"
    return _since(last, now)


def _event_first_seen(event: Obj, now: datetime) -> str:
    return _since(event.get("firstTimestamp") or event.get("eventTime"), now)


def _event_object(event: Obj, now: datetime) -> str:
    involved = event.get("involvedObject") or {}
    return f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"


def _event_subobject(event: Obj, now: datetime) -> str:
    return str((event.get("involvedObject") or {}).get("fieldPath") or "")


def _event_source(event: Obj, now: datetime) -> str:
    source = event.get("source") or {}
    component = source.get("component") or event.get("reportingComponent") or ""
    host = source.get("host") or ""
    return f"{component}, {host}" if host else str(component)


def _field(*path: str) -> Callable[[Obj, datetime], str]:
    def cell(obj: Obj, now: datetime) -> str:
        value: Any = obj
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        return "" if value is None else str(value)

    return cell


# -- JobSets (the CRD's additionalPrinterColumns) ------------------------------------------------


def _json_string(value: Any) -> str:
    """What ``kubectl``'s JSONPath printer writes for a scalar: Go's formatting of the decoded JSON value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _jobset_terminal_state(jobset: Obj, now: datetime) -> str | None:
    value = (jobset.get("status") or {}).get("terminalState")
    return None if value is None else _json_string(value)


def _jobset_restarts(jobset: Obj, now: datetime) -> str | None:
    value = (jobset.get("status") or {}).get("restarts")
    return None if value is None else _json_string(value)


def _jobset_completed(jobset: Obj, now: datetime) -> str | None:
    for condition in (jobset.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Completed":
            return _json_string(condition.get("status"))
    return None


def _jobset_suspended(jobset: Obj, now: datetime) -> str | None:
    value = (jobset.get("spec") or {}).get("suspend")
    return None if value is None else _json_string(value)


# -- Kueue (the CRDs' additionalPrinterColumns, kueue apis/kueue/v1beta2/*_types.go) and PriorityClass ----


def _path(*path: str) -> Callable[[Obj, datetime], Any]:
    """A CRD column's JSONPath cell: the value (integers as numbers, others as kubectl prints them), or null."""

    def cell(obj: Obj, now: datetime) -> Any:
        value: Any = obj
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            return value
        return _json_string(value)

    return cell


def _condition_status(kind: str) -> Callable[[Obj, datetime], str | None]:
    """``.status.conditions[?(@.type=='<kind>')].status``."""

    def cell(obj: Obj, now: datetime) -> str | None:
        for condition in (obj.get("status") or {}).get("conditions") or []:
            if condition.get("type") == kind:
                return _json_string(condition.get("status"))
        return None

    return cell


def _priority_class_default(obj: Obj, now: datetime) -> bool:
    return bool(obj.get("globalDefault"))


def _priority_class_policy(obj: Obj, now: datetime) -> str:
    return str(obj.get("preemptionPolicy") or "PreemptLowerPriority")


# -- access control (printServiceAccount, printRole, printRoleBinding) ---------------------------


def _secrets(account: Obj, now: datetime) -> str:
    return str(len(account.get("secrets") or []))


def _data_count(config_map: Obj, now: datetime) -> int:
    """printConfigMap: the number of ``data`` and ``binaryData`` keys."""
    return len(config_map.get("data") or {}) + len(config_map.get("binaryData") or {})


def _created_at(obj: Obj, now: datetime) -> str:
    return str(obj.get("metadata", {}).get("creationTimestamp", ""))


def _role_ref(binding: Obj, now: datetime) -> str:
    ref = binding.get("roleRef") or {}
    return f"{ref.get('kind', '')}/{ref.get('name', '')}"


def _subjects(kind: str) -> Callable[[Obj, datetime], str]:
    def cell(binding: Obj, now: datetime) -> str:
        names = []
        for subject in binding.get("subjects") or []:
            if subject.get("kind") != kind:
                continue
            if kind == "ServiceAccount":
                names.append(f"{subject.get('namespace', '')}/{subject.get('name', '')}")
            else:
                names.append(str(subject.get("name", "")))
        return ", ".join(names)

    return cell


_NAME = Column("Name", "string", _NAME_DOC, _name, format="name")
_AGE = Column("Age", "string", _AGE_DOC, _age)

_BINDING_COLUMNS = (
    _NAME,
    Column("Role", "string", "RoleRef can reference a Role or a ClusterRole.", _role_ref),
    _AGE,
    Column("Users", "string", "Users in the binding", _subjects("User"), priority=1),
    Column("Groups", "string", "Groups in the binding", _subjects("Group"), priority=1),
    Column("ServiceAccounts", "string", "ServiceAccounts in the binding", _subjects("ServiceAccount"), priority=1),
)

COLUMNS: dict[ResourceType, tuple[Column, ...]] = {
    PODS: (
        _NAME,
        Column("Ready", "string", "The aggregate readiness state of this pod for accepting traffic.", _pod_ready),
        Column("Status", "string", "The aggregate status of the containers in this pod.", _pod_phase),
        Column(
            "Restarts",
            "string",
            "The number of times the containers in this pod have been restarted and when the last container in "
            "this pod has restarted.",
            _pod_restarts,
        ),
        _AGE,
        Column("IP", "string", "IP address assigned to the pod", _pod_ip, priority=1),
        Column("Node", "string", "Name of the node where the pod is running", _pod_node, priority=1),
        Column(
            "Nominated Node",
            "string",
            "Name of the node where the pod is nominated to run, once preemption makes room for it",
            _pod_nominated,
            priority=1,
        ),
        Column("Readiness Gates", "string", "The readiness gates of the pod and how many pass", _pod_gates, priority=1),
    ),
    JOBS: (
        _NAME,
        Column("Status", "string", "Status of the job.", _job_status),
        Column("Completions", "string", "The completion status of the job.", _job_completions),
        Column("Duration", "string", "Time required to complete the job.", _job_duration),
        _AGE,
        Column("Containers", "string", "Names of each container in the template.", _job_containers, priority=1),
        Column("Images", "string", "Images referenced by each container in the template.", _job_images, priority=1),
        Column("Selector", "string", "The label selector of the job's pods.", _job_selector, priority=1),
    ),
    EVENTS: (
        Column("Last Seen", "string", "The last time the event was observed.", _event_last_seen),
        Column("Type", "string", "Type of this event (Normal, Warning).", _field("type")),
        Column("Reason", "string", "Why the action was taken, in CamelCase.", _field("reason")),
        Column("Object", "string", "The object this event is about, kind/name.", _event_object),
        Column("Subobject", "string", "The field of the object this event is about.", _event_subobject, priority=1),
        Column("Source", "string", "The component reporting this event.", _event_source, priority=1),
        Column("Message", "string", "A human-readable description of the status of this operation.", _field("message")),
        Column("First Seen", "string", "The first time the event was observed.", _event_first_seen, priority=1),
        Column("Count", "string", "The number of times this event has occurred.", _field("count"), priority=1),
        Column("Name", "string", _NAME_DOC, _name, format="name", priority=1),
    ),
    NODES: (
        _NAME,
        Column("Status", "string", "The status of the node", _node_status),
        Column("Roles", "string", "The roles of the node", _node_roles),
        _AGE,
        Column("Version", "string", "Kubelet Version reported by the node.", _node_info("kubeletVersion")),
        Column(
            "Internal-IP", "string", "List of addresses reachable to the node.", _node_address("InternalIP"), priority=1
        ),
        Column(
            "External-IP", "string", "List of addresses reachable to the node.", _node_address("ExternalIP"), priority=1
        ),
        Column("OS-Image", "string", "OS Image reported by the node.", _node_info("osImage"), priority=1),
        Column(
            "Kernel-Version", "string", "Kernel Version reported by the node.", _node_info("kernelVersion"), priority=1
        ),
        Column(
            "Container-Runtime",
            "string",
            "Container Runtime Version reported by the node.",
            _node_info("containerRuntimeVersion"),
            priority=1,
        ),
    ),
    NAMESPACES: (
        _NAME,
        Column("Status", "string", "The status of the namespace", _field("status", "phase")),
        _AGE,
    ),
    SERVICE_ACCOUNTS: (_NAME, Column("Secrets", "string", "Secrets is the list of secrets.", _secrets), _AGE),
    CONFIG_MAPS: (_NAME, Column("Data", "integer", "Data contains the configuration data.", _data_count), _AGE),
    ROLES: (_NAME, Column("Created At", "date", _AGE_DOC, _created_at)),
    CLUSTER_ROLES: (_NAME, Column("Created At", "date", _AGE_DOC, _created_at)),
    ROLE_BINDINGS: _BINDING_COLUMNS,
    CLUSTER_ROLE_BINDINGS: _BINDING_COLUMNS,
    WORKLOADS: (
        _NAME,
        Column("Queue", "string", "Name of the queue this workload was submitted to", _path("spec", "queueName")),
        Column(
            "Reserved in",
            "string",
            "Name of the ClusterQueue where the workload is reserving quota",
            _path("status", "admission", "clusterQueue"),
        ),
        Column("Admitted", "string", "Admission status", _condition_status("Admitted")),
        Column("Finished", "string", "Workload finished", _condition_status("Finished")),
        Column("Age", "date", "Time this workload was created", _age),
    ),
    CLUSTER_QUEUES: (
        _NAME,
        Column("Cohort", "string", "Cohort that this ClusterQueue belongs to", _path("spec", "cohortName")),
        Column(
            "Strategy",
            "string",
            "The queueing strategy used to prioritize workloads",
            _path("spec", "queueingStrategy"),
            priority=1,
        ),
        Column("Pending Workloads", "integer", "Number of pending workloads", _path("status", "pendingWorkloads")),
        Column(
            "Admitted Workloads",
            "integer",
            "Number of admitted workloads that haven't finished yet",
            _path("status", "admittedWorkloads"),
            priority=1,
        ),
    ),
    LOCAL_QUEUES: (
        _NAME,
        Column("ClusterQueue", "string", "Backing ClusterQueue", _path("spec", "clusterQueue")),
        Column("Pending Workloads", "integer", "Number of pending workloads", _path("status", "pendingWorkloads")),
        Column(
            "Admitted Workloads",
            "integer",
            "Number of admitted workloads that haven't finished yet.",
            _path("status", "admittedWorkloads"),
        ),
    ),
    WORKLOAD_PRIORITY_CLASSES: (
        _NAME,
        Column("Value", "integer", "Value of workloadPriorityClass's Priority", _path("value")),
    ),
    PRIORITY_CLASSES: (
        _NAME,
        Column("Value", "integer", "Value is the integer value of this priority class.", _path("value")),
        Column(
            "Global-Default",
            "boolean",
            "GlobalDefault specifies whether this PriorityClass should be considered as the default priority.",
            _priority_class_default,
        ),
        _AGE,
        Column(
            "PreemptionPolicy",
            "string",
            "PreemptionPolicy is the Policy for preempting pods with lower priority.",
            _priority_class_policy,
        ),
    ),
    JOBSETS: (
        _NAME,
        Column("TerminalState", "string", "Final state of JobSet", _jobset_terminal_state),
        Column("Restarts", "string", "Number of restarts", _jobset_restarts),
        Column("Completed", "string", "", _jobset_completed),
        Column("Suspended", "string", "JobSet suspended", _jobset_suspended),
        Column("Age", "date", "Time this JobSet was created", _age),
    ),
}


def _row_object(rtype: ResourceType, obj: Obj, include: IncludeObject) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": f"{TABLE_GROUP}/v1", "metadata": obj.get("metadata", {})}


def to_table(
    rtype: ResourceType,
    items: list[Obj],
    request: TableRequest,
    list_metadata: Obj | None = None,
    now: datetime | None = None,
) -> Obj:
    """The ``Table`` of ``items`` (one object for a GET or a watch event, many for a list)."""
    moment = now or datetime.now(UTC)
    columns = COLUMNS.get(rtype, (_NAME, _AGE))
    rows = []
    for obj in items:
        row: Obj = {"cells": [column.cell(obj, moment) for column in columns]}
        embedded = _row_object(rtype, obj, request.include_object)
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": f"{TABLE_GROUP}/{request.version}",
        "metadata": dict(list_metadata or {}),
        "columnDefinitions": [column.definition() for column in columns],
        "rows": rows,
    }
