"""The manifest lint: what the API server and the JobSet webhook would refuse in a JobSet, with field paths.

Every rendered JobSet passes it (`operators.manifests`), and so does a manifest a user passes instead of a spec.
Names are checked the way the upstream JobSet webhook checks them (`jobset: pkg/webhooks/jobset_webhook.go`):
every child Job `<jobset>-<replicatedJob>-<jobIndex>` and every pod `<jobset>-<replicatedJob>-<jobIndex>-
<podIndex>-<5 random>` must be a DNS-1035 label of at most 63 characters. With `pathways-head` that leaves
63 - len("-pathways-head-0-0-abcde") = 39 characters for the JobSet name, the limit `jobset_name` keeps.
Failure-policy rules follow `api/jobset/v1alpha2/jobset_types.go` (`FailurePolicyRule`, its actions). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_KIND, JOBSET_VERSION
from elastic_training.operators.kube_names import DNS1035_LABEL, NAME_MAX, POD_NAME_RANDOM_SUFFIX, check_labels
from elastic_training.operators.shown import shown
from elastic_training.operators.spec import INT32_MAX, SpecError

API_VERSION: Final = f"{JOBSET_GROUP}/{JOBSET_VERSION}"
FAILURE_POLICY_ACTIONS: Final = frozenset(
    {"FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts", "RestartJob", "RestartJobAndIgnoreMaxRestarts"}
)
_RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?\Z")


def is_int_in(value: object, low: int, high: int) -> bool:
    """Whether `value` is an integer (not a bool) from `low` to `high`."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def lint_manifest(manifest: Mapping[str, Any]) -> None:
    """Raise `SpecError` for a malformed JobSet manifest (e.g. one a user passes instead of a spec).

    Checks what the API server and the JobSet webhook would refuse, with field paths: apiVersion and kind,
    label keys and values, replicated job names (DNS-1035, unique), int32 counts, a pod template with named
    containers, policy targets and the coordinator naming replicated jobs, and, when the manifest is named,
    that every child Job and pod name fits 63 characters. Any document gives `SpecError` or passes.
    """
    if not isinstance(manifest, Mapping):
        raise SpecError("manifest", f"must be a mapping, got {type(manifest).__name__}")
    if manifest.get("apiVersion") != API_VERSION:
        raise SpecError("apiVersion", f"must be {API_VERSION}, got {shown(manifest.get('apiVersion'))}")
    if manifest.get("kind") != JOBSET_KIND:
        raise SpecError("kind", f"must be {JOBSET_KIND}, got {shown(manifest.get('kind'))}")
    metadata = manifest.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise SpecError("metadata", "must be a mapping")
    name = metadata.get("name")
    if name is not None and (not isinstance(name, str) or not DNS1035_LABEL.match(name) or len(name) > NAME_MAX):
        raise SpecError("metadata.name", f"{shown(name)} must be a DNS-1035 label (lowercase, starting with a letter)")
    check_labels(metadata.get("labels") or {}, "metadata.labels")
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        raise SpecError("spec", "is required")
    rjobs = spec.get("replicatedJobs")
    if not isinstance(rjobs, list) or not rjobs:
        raise SpecError("spec.replicatedJobs", "must be a non-empty list")
    seen: set[str] = set()
    for index, rjob in enumerate(rjobs):
        _lint_replicated_job(rjob, f"spec.replicatedJobs[{index}]", seen, name)
    _lint_policy_targets(spec, seen)
    _lint_failure_rules(spec.get("failurePolicy") or {}, seen)
    coordinator = spec.get("coordinator")
    if coordinator is not None:
        _lint_coordinator(coordinator, seen, name)


def _lint_policy_targets(spec: Mapping[str, Any], seen: set[str]) -> None:
    for policy_field in ("successPolicy", "failurePolicy"):
        policy = spec.get(policy_field) or {}
        if not isinstance(policy, Mapping):
            raise SpecError(f"spec.{policy_field}", "must be a mapping")
        targets = policy.get("targetReplicatedJobs") or []
        if not isinstance(targets, list):
            raise SpecError(f"spec.{policy_field}.targetReplicatedJobs", "must be a list of replicated job names")
        for target in targets:
            if not isinstance(target, str) or target not in seen:
                raise SpecError(f"spec.{policy_field}.targetReplicatedJobs", f"{shown(target)} is not a replicated job")
        if "maxRestarts" in policy and not is_int_in(policy["maxRestarts"], 0, INT32_MAX):
            raise SpecError(
                f"spec.{policy_field}.maxRestarts", f"must be an int32 >= 0, got {shown(policy['maxRestarts'])}"
            )


def _lint_coordinator(coordinator: object, seen: set[str], name: object) -> None:
    if not isinstance(coordinator, Mapping):
        raise SpecError("spec.coordinator", "must be a mapping")
    coordinator_job = coordinator.get("replicatedJob")
    if not isinstance(coordinator_job, str) or coordinator_job not in seen:
        raise SpecError("spec.coordinator.replicatedJob", f"{shown(coordinator_job)} is not a replicated job")
    for index_field in ("jobIndex", "podIndex"):
        if not is_int_in(coordinator.get(index_field, 0), 0, INT32_MAX):
            raise SpecError(
                f"spec.coordinator.{index_field}", f"must be an int32 >= 0, got {shown(coordinator[index_field])}"
            )
    if isinstance(name, str):
        endpoint = f"{name}-{coordinator_job}-{coordinator.get('jobIndex', 0)}-{coordinator.get('podIndex', 0)}.{name}"
        if len(endpoint) > NAME_MAX:
            raise SpecError(
                "metadata.name",
                f"{name!r} is too long for a coordinator: JobSet labels every Job and pod with the endpoint "
                f"{endpoint!r} ({len(endpoint)} characters, at most {NAME_MAX})",
            )


def _lint_failure_rules(policy: Mapping[str, Any], replicated_jobs: set[str]) -> None:
    """JobSet's `FailurePolicyRule` schema and webhook: a named rule, a known action, targets that exist."""
    rules = policy.get("rules") or []
    if not isinstance(rules, list):
        raise SpecError("spec.failurePolicy.rules", "must be a list of rules")
    names: set[str] = set()
    for index, rule in enumerate(rules):
        where = f"spec.failurePolicy.rules[{index}]"
        if not isinstance(rule, Mapping):
            raise SpecError(where, "must be a mapping")
        name = rule.get("name")
        if not isinstance(name, str) or len(name) > 128 or not _RULE_NAME.match(name) or name in names:
            raise SpecError(f"{where}.name", f"{shown(name)} must be a unique rule name such as 'headFailed'")
        names.add(name)
        action = rule.get("action")
        if not isinstance(action, str) or action not in FAILURE_POLICY_ACTIONS:
            raise SpecError(
                f"{where}.action",
                f"{shown(rule.get('action'))} is not one of {', '.join(sorted(FAILURE_POLICY_ACTIONS))}",
            )
        for list_field in ("onJobFailureReasons", "onJobFailureMessagePatterns", "targetReplicatedJobs"):
            values = rule.get(list_field) or []
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                raise SpecError(f"{where}.{list_field}", "must be a list of strings")
        for target in rule.get("targetReplicatedJobs") or []:
            if target not in replicated_jobs:
                raise SpecError(f"{where}.targetReplicatedJobs", f"{shown(target)} is not a replicated job")


def _lint_replicated_job(rjob: Any, where: str, seen: set[str], jobset: str | None) -> None:
    if not isinstance(rjob, Mapping):
        raise SpecError(where, "must be a mapping")
    rname = rjob.get("name")
    if not isinstance(rname, str) or not DNS1035_LABEL.match(rname) or len(rname) > NAME_MAX:
        raise SpecError(f"{where}.name", f"{shown(rname)} must be a DNS-1035 label")
    if rname in seen:
        raise SpecError(f"{where}.name", f"{rname!r} is used twice")
    seen.add(rname)
    replicas = rjob.get("replicas", 1)
    if not is_int_in(replicas, 1, INT32_MAX):
        raise SpecError(f"{where}.replicas", f"must be an integer from 1 to {INT32_MAX}, got {shown(replicas)}")
    template = rjob.get("template")
    job_spec = template.get("spec") if isinstance(template, Mapping) else None
    if not isinstance(job_spec, Mapping):
        raise SpecError(f"{where}.template.spec", "is required (a batch/v1 JobSpec)")
    for count in ("completions", "parallelism", "backoffLimit"):
        if count in job_spec and not is_int_in(job_spec[count], 0, INT32_MAX):
            raise SpecError(f"{where}.template.spec.{count}", f"must be an int32 >= 0, got {shown(job_spec[count])}")
    pod_template = job_spec.get("template")
    pod_spec = pod_template.get("spec") if isinstance(pod_template, Mapping) else None
    if not isinstance(pod_spec, Mapping):
        raise SpecError(f"{where}.template.spec.template.spec", "is required (a PodSpec)")
    pod_metadata = pod_template.get("metadata") if isinstance(pod_template, Mapping) else None
    if isinstance(pod_metadata, Mapping):
        check_labels(pod_metadata.get("labels") or {}, f"{where}.template.spec.template.metadata.labels")
    elif pod_metadata is not None:
        raise SpecError(f"{where}.template.spec.template.metadata", "must be a mapping")
    if "podFailurePolicy" in job_spec and pod_spec.get("restartPolicy") != "Never":
        # The API server refuses it only when the JobSet controller creates the Job: the JobSet would exist,
        # its child Jobs never.
        raise SpecError(
            f"{where}.template.spec.podFailurePolicy",
            'needs the pod\'s restartPolicy "Never" (Kubernetes refuses it with any other restartPolicy)',
        )
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise SpecError(f"{where}.template.spec.template.spec.containers", "must be a non-empty list")
    init_containers = pod_spec.get("initContainers") or []
    if not isinstance(init_containers, list):
        raise SpecError(f"{where}.template.spec.template.spec.initContainers", "must be a list")
    for kind, listed in (("containers", containers), ("initContainers", init_containers)):
        for cindex, container in enumerate(listed):
            _lint_container(container, f"{where}.template.spec.template.spec.{kind}[{cindex}]")
    if jobset:
        _check_child_names(jobset, rname, replicas, job_spec, where)


def _lint_container(container: Any, where: str) -> None:
    if not isinstance(container, Mapping) or not isinstance(container.get("name"), str) or not container["name"]:
        raise SpecError(f"{where}.name", "is required")
    if not isinstance(container.get("image"), str) or not container["image"]:
        raise SpecError(f"{where}.image", "is required")
    for argv_field in ("command", "args"):
        argv = container.get(argv_field, [])
        if not isinstance(argv, list) or not all(isinstance(item, str) for item in argv):
            raise SpecError(f"{where}.{argv_field}", "must be a list of strings (an argv, never a shell string)")


def _check_child_names(jobset: str, rname: str, replicas: int, job_spec: Mapping[str, Any], where: str) -> None:
    """The upstream webhook's rule: the longest child Job and pod names are DNS-1035 labels <= 63."""
    longest_job = f"{jobset}-{rname}-{replicas - 1}"
    if len(longest_job) > NAME_MAX:
        raise SpecError(
            "metadata.name",
            f"{jobset!r} is too long: the child Job name {longest_job!r} of {where} exceeds {NAME_MAX} characters",
        )
    completions = job_spec.get("completions")
    if job_spec.get("completionMode") == "Indexed" and isinstance(completions, int) and completions >= 1:
        longest_pod = f"{longest_job}-{completions - 1}{POD_NAME_RANDOM_SUFFIX}"
        if len(longest_pod) > NAME_MAX:
            raise SpecError(
                "metadata.name",
                f"{jobset!r} is too long: pod names of {where} such as {longest_pod!r} exceed {NAME_MAX} characters",
            )
