"""Object validation at the API: what the API server (and the JobSet webhook/CRD schema) reject with 422.

Each validator returns a list of :class:`Cause` naming the field path (``spec.replicatedJobs[1].name``)
and the problem; a non-empty list becomes a 422 ``Invalid`` Status and nothing is stored. Every
create is validated (by the store, for API requests and the in-process controllers alike);
updates are validated at the HTTP layer only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from elastic_training.local.cluster import kueue_api, pod_failure_policy, rbac_validation
from elastic_training.local.cluster.resources import (
    CONFIG_MAPS,
    EVENTS,
    JOBS,
    JOBSETS,
    NAMESPACES,
    NODES,
    PODS,
    Cause,
    ResourceType,
)

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")

RESTART_STRATEGIES = ("Recreate", "BlockingRecreate", "InPlaceRestart")
FAILURE_POLICY_ACTIONS = (
    "FailJobSet",
    "RestartJobSet",
    "RestartJobSetAndIgnoreMaxRestarts",
    "RestartJob",
    "RestartJobAndIgnoreMaxRestarts",
)
SUCCESS_OPERATORS = ("All", "Any")
POD_RESTART_POLICIES = ("Always", "OnFailure", "Never")
JOB_RESTART_POLICIES = ("OnFailure", "Never")
COMPLETION_MODES = ("NonIndexed", "Indexed")
_ANNOTATIONS_MAX_BYTES = 256 * 1024


def _required(path: str) -> Cause:
    return Cause(path, "Required value", "FieldValueRequired")


def _invalid(path: str, value: Any, why: str) -> Cause:
    return Cause(path, f"Invalid value: {value!r}: {why}")


def _unsupported(path: str, value: Any, allowed: tuple[str, ...]) -> Cause:
    choices = ", ".join(f'"{a}"' for a in allowed)
    return Cause(path, f"Unsupported value: {value!r}: supported values: {choices}", "FieldValueNotSupported")


def _is_dns_label(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 63 and bool(_DNS1123_LABEL.match(value))


def _is_dns_subdomain(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 253 and bool(_DNS1123_SUBDOMAIN.match(value))


def _dns_label_cause(path: str, value: Any) -> Cause:
    return _invalid(
        path,
        value,
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
        "start and end with an alphanumeric character, and be at most 63 characters",
    )


def _unique_label(name: Any, path: str, seen: set[str]) -> list[Cause]:
    """A required DNS-1123 label name, unique among ``seen`` (added to it when valid)."""
    if not name:
        return [_required(path)]
    if not _is_dns_label(name):
        return [_dns_label_cause(path, name)]
    if name in seen:
        return [Cause(path, f"Duplicate value: {name!r}", "FieldValueDuplicate")]
    seen.add(name)
    return []


def _qualified_key_problem(key: Any) -> str | None:
    if not isinstance(key, str) or not key:
        return "name part must be non-empty"
    prefix, _, name = key.rpartition("/")
    if "/" in key and not _is_dns_subdomain(prefix):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if len(name) > 63 or not _QUALIFIED_NAME.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', start and end "
            "with an alphanumeric character, and be at most 63 characters"
        )
    return None


def validate_metadata(
    meta: Any, *, namespaced: bool, name_check: Callable[[str], bool] = _is_dns_subdomain
) -> list[Cause]:
    """Name, labels and annotations syntax."""
    if not isinstance(meta, Mapping):
        return [_required("metadata")]
    causes: list[Cause] = []
    name = meta.get("name")
    if name and not name_check(name):
        causes.append(
            _invalid(
                "metadata.name",
                name,
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                "and must start and end with an alphanumeric character",
            )
        )
    labels = meta.get("labels") or {}
    if not isinstance(labels, Mapping):
        causes.append(_invalid("metadata.labels", labels, "must be a map of strings"))
        labels = {}
    for key, value in labels.items():
        if problem := _qualified_key_problem(key):
            causes.append(_invalid("metadata.labels", key, problem))
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            causes.append(
                _invalid(
                    f"metadata.labels.{key}",
                    value,
                    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
                    "or '.', start and end with an alphanumeric character, and be at most 63 characters",
                )
            )
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        causes.append(_invalid("metadata.annotations", annotations, "must be a map of strings"))
        annotations = {}
    total = 0
    for key, value in annotations.items():
        if problem := _qualified_key_problem(key):
            causes.append(_invalid("metadata.annotations", key, problem))
        if not isinstance(value, str):
            causes.append(_invalid(f"metadata.annotations.{key}", value, "must be a string"))
        else:
            total += len(key) + len(value)
    if total > _ANNOTATIONS_MAX_BYTES:
        causes.append(Cause("metadata.annotations", "Too long: must have at most 262144 bytes", "FieldValueTooLong"))
    return causes


def _validate_containers(
    containers: Any, path: str, seen: set[str], *, require_image: bool, required: bool
) -> list[Cause]:
    if containers is None or containers == []:
        return [_required(path)] if required else []
    if not isinstance(containers, list):
        return [_invalid(path, containers, "must be a list")]
    causes: list[Cause] = []
    for index, container in enumerate(containers):
        where = f"{path}[{index}]"
        if not isinstance(container, Mapping):
            causes.append(_invalid(where, container, "must be an object"))
            continue
        causes += _unique_label(container.get("name"), f"{where}.name", seen)
        if require_image and not container.get("image"):
            causes.append(_required(f"{where}.image"))
        for field_name in ("command", "args"):
            value = container.get(field_name)
            if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                causes.append(_invalid(f"{where}.{field_name}", value, "must be a list of strings"))
        for env_index, env in enumerate(container.get("env") or []):
            env_name = env.get("name") if isinstance(env, Mapping) else None
            if not env_name:
                causes.append(_required(f"{where}.env[{env_index}].name"))
            elif not _ENV_NAME.match(env_name):
                causes.append(
                    _invalid(
                        f"{where}.env[{env_index}].name",
                        env_name,
                        "a valid environment variable name must consist of alphabetic characters, digits, "
                        "'_', '-', or '.', and must not start with a digit",
                    )
                )
    return causes


def validate_pod_spec(
    spec: Any, path: str, *, restart_policies: tuple[str, ...] = POD_RESTART_POLICIES, require_image: bool = True
) -> list[Cause]:
    """A pod spec (also the one inside a Job or JobSet template)."""
    if not isinstance(spec, Mapping):
        return [_required(path)]
    seen: set[str] = set()
    causes = _validate_containers(
        spec.get("initContainers"), f"{path}.initContainers", seen, require_image=require_image, required=False
    )
    causes += _validate_containers(
        spec.get("containers"), f"{path}.containers", seen, require_image=require_image, required=True
    )
    policy = spec.get("restartPolicy", "Always")
    if policy not in restart_policies:
        causes.append(_unsupported(f"{path}.restartPolicy", policy, restart_policies))
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and (not isinstance(grace, int) or grace < 0):
        causes.append(_invalid(f"{path}.terminationGracePeriodSeconds", grace, "must be greater than or equal to 0"))
    return causes


def _non_negative(spec: Mapping[str, Any], key: str, path: str) -> list[Cause]:
    value = spec.get(key)
    if value is None:
        return []
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return [_invalid(f"{path}.{key}", value, "must be greater than or equal to 0")]
    return []


def validate_job_spec(spec: Any, path: str, *, require_image: bool = True) -> list[Cause]:
    """A Job spec (also a JobSet replicated job's template spec)."""
    if not isinstance(spec, Mapping):
        return [_required(path)]
    causes: list[Cause] = []
    for key in ("completions", "parallelism", "backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        causes += _non_negative(spec, key, path)
    mode = spec.get("completionMode", "NonIndexed")
    if mode not in COMPLETION_MODES:
        causes.append(_unsupported(f"{path}.completionMode", mode, COMPLETION_MODES))
    elif mode == "Indexed" and spec.get("completions") is None:
        causes.append(_required(f"{path}.completions"))
    template = spec.get("template")
    if not isinstance(template, Mapping):
        causes.append(_required(f"{path}.template"))
        return causes
    causes += validate_metadata(template.get("metadata") or {}, namespaced=True)
    pod_spec = template.get("spec")
    causes += validate_pod_spec(
        pod_spec, f"{path}.template.spec", restart_policies=JOB_RESTART_POLICIES, require_image=require_image
    )
    if spec.get("podFailurePolicy") is not None:
        restart_policy = pod_spec.get("restartPolicy") if isinstance(pod_spec, Mapping) else None
        names = frozenset(
            str(c.get("name"))
            for key in ("containers", "initContainers")
            for c in ((pod_spec.get(key) if isinstance(pod_spec, Mapping) else None) or [])
            if isinstance(c, Mapping)
        )
        causes += pod_failure_policy.validate(
            spec["podFailurePolicy"], f"{path}.podFailurePolicy", restart_policy, names
        )
    return causes


def _validate_failure_policy(policy: Any, rjob_names: set[str]) -> list[Cause]:
    path = "spec.failurePolicy"
    if policy is None:
        return []
    if not isinstance(policy, Mapping):
        return [_invalid(path, policy, "must be an object")]
    causes = _non_negative(policy, "maxRestarts", path)
    strategy = policy.get("restartStrategy", "Recreate")
    if strategy not in RESTART_STRATEGIES:
        causes.append(_unsupported(f"{path}.restartStrategy", strategy, RESTART_STRATEGIES))
    rule_names: set[str] = set()
    for index, rule in enumerate(policy.get("rules") or []):
        where = f"{path}.rules[{index}]"
        if not isinstance(rule, Mapping):
            causes.append(_invalid(where, rule, "must be an object"))
            continue
        name = rule.get("name")
        if not name:
            causes.append(_required(f"{where}.name"))
        elif name in rule_names:
            causes.append(Cause(f"{where}.name", f"Duplicate value: {name!r}", "FieldValueDuplicate"))
        rule_names.add(str(name))
        if rule.get("action") not in FAILURE_POLICY_ACTIONS:
            causes.append(_unsupported(f"{where}.action", rule.get("action"), FAILURE_POLICY_ACTIONS))
        for target_index, target in enumerate(rule.get("targetReplicatedJobs") or []):
            if target not in rjob_names:
                causes.append(
                    _invalid(
                        f"{where}.targetReplicatedJobs[{target_index}]", target, "not a replicated job of this JobSet"
                    )
                )
    return causes


def _validate_success_policy(policy: Any, rjob_names: set[str]) -> list[Cause]:
    path = "spec.successPolicy"
    if policy is None:
        return []
    if not isinstance(policy, Mapping):
        return [_invalid(path, policy, "must be an object")]
    causes: list[Cause] = []
    operator = policy.get("operator", "All")
    if operator not in SUCCESS_OPERATORS:
        causes.append(_unsupported(f"{path}.operator", operator, SUCCESS_OPERATORS))
    for index, target in enumerate(policy.get("targetReplicatedJobs") or []):
        if target not in rjob_names:
            causes.append(
                _invalid(f"{path}.targetReplicatedJobs[{index}]", target, "not a replicated job of this JobSet")
            )
    return causes


def validate_jobset(obj: Mapping[str, Any]) -> list[Cause]:
    """A JobSet: the CRD schema and the upstream validating webhook's checks."""
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    causes = validate_metadata(
        meta, namespaced=True, name_check=lambda n: len(n) <= 63 and bool(_DNS1035_LABEL.match(n))
    )
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return [*causes, _required("spec")]
    rjobs = spec.get("replicatedJobs")
    if not isinstance(rjobs, list) or not rjobs:
        causes.append(_required("spec.replicatedJobs"))
        rjobs = []
    names: set[str] = set()
    for index, rjob in enumerate(rjobs):
        where = f"spec.replicatedJobs[{index}]"
        if not isinstance(rjob, Mapping):
            causes.append(_invalid(where, rjob, "must be an object"))
            continue
        rjob_name = rjob.get("name")
        causes += _unique_label(rjob_name, f"{where}.name", names)
        replicas = rjob.get("replicas", 1)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            causes.append(_invalid(f"{where}.replicas", replicas, "must be greater than or equal to 0"))
        elif name and rjob_name:
            longest_job = f"{name}-{rjob_name}-{max(replicas - 1, 0)}"
            if len(longest_job) > 63 or not _DNS1035_LABEL.match(longest_job):
                causes.append(
                    _invalid(
                        "metadata.name",
                        name,
                        f"the child Job name {longest_job!r} must be a DNS-1035 label of at most 63 characters",
                    )
                )
        template = rjob.get("template")
        if not isinstance(template, Mapping):
            causes.append(_required(f"{where}.template"))
            continue
        causes += validate_job_spec(template.get("spec"), f"{where}.template.spec", require_image=False)
    causes += _validate_failure_policy(spec.get("failurePolicy"), names)
    causes += _validate_success_policy(spec.get("successPolicy"), names)
    coordinator = spec.get("coordinator")
    if isinstance(coordinator, Mapping) and coordinator.get("replicatedJob") not in names:
        causes.append(
            _invalid(
                "spec.coordinator.replicatedJob",
                coordinator.get("replicatedJob"),
                "not a replicated job of this JobSet",
            )
        )
    return causes


def validate_pod(obj: Mapping[str, Any]) -> list[Cause]:
    return validate_metadata(obj.get("metadata"), namespaced=True) + validate_pod_spec(obj.get("spec"), "spec")


def validate_job(obj: Mapping[str, Any]) -> list[Cause]:
    return validate_metadata(obj.get("metadata"), namespaced=True) + validate_job_spec(obj.get("spec"), "spec")


def validate_namespace(obj: Mapping[str, Any]) -> list[Cause]:
    return validate_metadata(obj.get("metadata"), namespaced=False, name_check=_is_dns_label)


def validate_event(obj: Mapping[str, Any]) -> list[Cause]:
    causes = validate_metadata(obj.get("metadata"), namespaced=True)
    if not isinstance(obj.get("involvedObject"), Mapping):
        causes.append(_required("involvedObject"))
    return causes


_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
MAX_CONFIG_MAP_BYTES = 1024 * 1024  # core/validation: "must have at most 1048576 bytes"


def validate_config_map(obj: Mapping[str, Any]) -> list[Cause]:
    """``ValidateConfigMap``: keys of alphanumerics, '-', '_' or '.', string values, at most 1 MiB in all."""
    causes = validate_metadata(obj.get("metadata"), namespaced=True)
    total = 0
    for field in ("data", "binaryData"):
        values = obj.get(field)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            causes.append(_invalid(field, values, "must be a map of string keys to string values"))
            continue
        for key, value in values.items():
            if not isinstance(key, str) or not _CONFIG_KEY.match(key) or len(key) > 253:
                causes.append(
                    _invalid(
                        f"{field}[{key}]",
                        key,
                        "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
                    )
                )
            if not isinstance(value, str):
                causes.append(_invalid(f"{field}[{key}]", value, "must be a string"))
            else:
                total += len(value.encode())
    if total > MAX_CONFIG_MAP_BYTES:
        causes.append(Cause("", f"Too long: must have at most {MAX_CONFIG_MAP_BYTES} bytes", "FieldValueTooLong"))
    return causes


def validate_node(obj: Mapping[str, Any]) -> list[Cause]:
    return validate_metadata(obj.get("metadata"), namespaced=False)


_VALIDATORS: dict[ResourceType, Callable[[Mapping[str, Any]], list[Cause]]] = {
    NODES: validate_node,
    PODS: validate_pod,
    JOBS: validate_job,
    JOBSETS: validate_jobset,
    NAMESPACES: validate_namespace,
    EVENTS: validate_event,
    CONFIG_MAPS: validate_config_map,
    **rbac_validation.VALIDATORS,
    **kueue_api.VALIDATORS,
}


def validate(rtype: ResourceType, obj: Mapping[str, Any]) -> list[Cause]:
    """Every problem with ``obj`` as a ``rtype`` (empty when valid)."""
    validator = _VALIDATORS.get(rtype)
    return validator(obj) if validator else []


# Pod template fields the JobSet webhook lets change while the JobSet is (or becomes) suspended (Kueue).
_SUSPENDED_MUTABLE_POD_FIELDS = (
    ("metadata", "labels"),
    ("metadata", "annotations"),
    ("spec", "nodeSelector"),
    ("spec", "tolerations"),
    ("spec", "schedulingGates"),
)


def _without_suspended_mutable(rjobs: Any) -> Any:
    if not isinstance(rjobs, list):
        return rjobs
    stripped = []
    for rjob in rjobs:
        rjob = dict(rjob) if isinstance(rjob, Mapping) else rjob
        try:
            template = dict(rjob["template"])
            job_spec = dict(template["spec"])
            pod_template = dict(job_spec["template"])
            for section, key in _SUSPENDED_MUTABLE_POD_FIELDS:
                part = dict(pod_template.get(section) or {})
                part.pop(key, None)
                pod_template[section] = part
            job_spec["template"] = pod_template
            template["spec"] = job_spec
            rjob["template"] = template
        except (KeyError, TypeError):
            pass
        stripped.append(rjob)
    return stripped


def validate_update(rtype: ResourceType, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Cause]:
    """Immutable-field checks on update (all: finalizers while deleting; JobSet: policies; bindings: roleRef)."""
    causes = _validate_finalizers_update(old, new) + kueue_api.validate_update(rtype, old, new)
    if rtype in rbac_validation.BINDING_TYPES:
        return causes + rbac_validation.validate_binding_update(old, new)
    if rtype == JOBS:
        return causes + _validate_job_template_update(old, new)
    if rtype != JOBSETS:
        return causes
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    for key in ("failurePolicy", "successPolicy", "managedBy"):
        if old_spec.get(key) != new_spec.get(key):
            causes.append(_invalid(f"spec.{key}", new_spec.get(key), "field is immutable"))
    old_rjobs, new_rjobs = old_spec.get("replicatedJobs"), new_spec.get("replicatedJobs")
    if old_spec.get("suspend") or new_spec.get("suspend"):
        old_rjobs, new_rjobs = _without_suspended_mutable(old_rjobs), _without_suspended_mutable(new_rjobs)
    if old_rjobs != new_rjobs:
        causes.append(Cause("spec.replicatedJobs", "Invalid value: field is immutable"))
    return causes


# A Job's pod template is immutable, but for its scheduling directives while the Job is suspended and has never
# started (``status.startTime`` unset): kubernetes/kubernetes pkg/registry/batch/job/strategy.go
# (validationOptionsForJob: AllowMutableSchedulingDirectives = suspended && notStarted) and
# pkg/apis/batch/validation/validation.go (validatePodTemplateUpdate). JobSet clears startTime before resuming a Job.
_JOB_SCHEDULING_DIRECTIVES = (
    ("metadata", "labels"),
    ("metadata", "annotations"),
    ("spec", "nodeSelector"),
    ("spec", "tolerations"),
    ("spec", "schedulingGates"),
)


def _without_scheduling_directives(template: Any) -> Any:
    if not isinstance(template, Mapping):
        return template
    stripped = {key: dict(value) if isinstance(value, Mapping) else value for key, value in template.items()}
    for section, key in _JOB_SCHEDULING_DIRECTIVES:
        part = stripped.get(section)
        if isinstance(part, dict):
            part.pop(key, None)
    pod_spec = stripped.get("spec")
    if isinstance(pod_spec, dict) and isinstance(pod_spec.get("affinity"), Mapping):
        affinity = {k: v for k, v in pod_spec["affinity"].items() if k != "nodeAffinity"}
        if affinity:
            pod_spec["affinity"] = affinity
        else:
            pod_spec.pop("affinity")
    return stripped


def _validate_job_template_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Cause]:
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    old_template, new_template = old_spec.get("template"), new_spec.get("template")
    if old_spec.get("suspend") and not (old.get("status") or {}).get("startTime"):
        old_template = _without_scheduling_directives(old_template)
        new_template = _without_scheduling_directives(new_template)
    if old_template != new_template:
        return [Cause("spec.template", "Invalid value: field is immutable")]
    return []


def _validate_finalizers_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Cause]:
    """apimachinery ValidateObjectMetaUpdate: an object being deleted may lose finalizers, never gain one."""
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    if not old_meta.get("deletionTimestamp"):
        return []
    added = set(new_meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
    if not added:
        return []
    return [
        Cause(
            "metadata.finalizers",
            f"Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers "
            f"{sorted(added)!r}",
            "FieldValueForbidden",
        )
    ]
