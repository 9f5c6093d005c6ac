"""A Job's ``podFailurePolicy``: which rule a failed pod matches, and its validation.

Follows kubernetes/kubernetes ``pkg/controller/job/pod_failure_policy.go`` (``matchPodFailurePolicy``, read
at 2b02db1) and ``pkg/apis/batch/validation/validation.go`` (``validateJobSpec``'s restartPolicy rule,
``validatePodFailurePolicy`` and its rule validators, with their messages). Rules are tried in
order; a rule matches by ``onExitCodes`` (a terminated container, then init containers, with a
non-zero exit code ``In``/``NotIn`` the values, optionally only ``containerName``) or by
``onPodConditions`` (a pod condition of that type and status, default ``True``). The first match
decides: ``FailJob`` fails the Job (reason ``PodFailurePolicy``), ``Ignore`` leaves the pod out of
``status.failed`` (so off ``backoffLimit``), ``Count`` counts it; no match counts it. A policy needs
the pod template's ``restartPolicy: Never`` (the API refuses it otherwise), which is why an
``OnFailure`` worker's evictions always count. ``FailIndex`` needs ``backoffLimitPerIndex``, which is not
supported here, so it is refused with upstream's message for a Job without one.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from elastic_training.local.cluster.resources import Cause

Obj = dict[str, Any]

POD_FAILURE_POLICY_REASON = "PodFailurePolicy"
MAX_RULES = 20
MAX_EXIT_CODES = 255


class Action(StrEnum):
    """``PodFailurePolicyAction``."""

    FAIL_JOB = "FailJob"
    IGNORE = "Ignore"
    COUNT = "Count"


ACTIONS = tuple(a.value for a in Action)


def match(policy: Mapping[str, Any], pod: Obj) -> tuple[Action, str]:
    """The action for a failed ``pod`` and, for ``FailJob``, upstream's message."""
    meta = pod["metadata"]
    status = pod.get("status") or {}
    where = f"{meta.get('namespace', '')}/{meta['name']}"
    for index, rule in enumerate(policy.get("rules") or []):
        action = Action(rule.get("action", Action.COUNT))
        codes = rule.get("onExitCodes")
        if codes:
            terminated = [
                (str(cs.get("name", "")), int(cs["state"]["terminated"].get("exitCode", 0)))
                for cs in [*(status.get("containerStatuses") or []), *(status.get("initContainerStatuses") or [])]
                if (cs.get("state") or {}).get("terminated")
            ]
            values = {int(v) for v in codes.get("values") or []}
            for name, code in terminated:
                if code == 0 or (codes.get("containerName") and codes["containerName"] != name):
                    continue
                if (code in values) == (codes.get("operator") == "In"):
                    return action, (
                        f"Container {name} for pod {where} failed with exit code {code} matching {action} rule at "
                        f"index {index}"
                    )
        for pattern in rule.get("onPodConditions") or []:
            wanted = str(pattern.get("status") or "True")
            for condition in status.get("conditions") or []:
                if condition.get("type") == pattern.get("type") and condition.get("status") == wanted:
                    return (
                        action,
                        f"Pod {where} has condition {pattern.get('type')} matching {action} rule at index {index}",
                    )
    return Action.COUNT, ""


def validate(policy: Any, path: str, restart_policy: Any, container_names: frozenset[str] = frozenset()) -> list[Cause]:
    """``validatePodFailurePolicy``: rules, actions, exit codes, conditions; ``restartPolicy`` Never.

    ``container_names``: the pod template's containers and init containers (``onExitCodes.containerName``).
    """
    if not isinstance(policy, Mapping):
        return [Cause(path, "Invalid value: must be an object")]
    causes: list[Cause] = []
    if restart_policy == "OnFailure":  # any other value than Never is refused by the pod spec's own check
        causes.append(
            Cause(
                f"{path.rsplit('.', 1)[0]}.template.spec.restartPolicy",
                f'Invalid value: "{restart_policy}": only "Never" is supported when podFailurePolicy is specified',
            )
        )
    rules = policy.get("rules")
    if not isinstance(rules, list):
        return [*causes, Cause(f"{path}.rules", "Required value", "FieldValueRequired")]
    if len(rules) > MAX_RULES:
        causes.append(
            Cause(f"{path}.rules", f"Too many: {len(rules)}: must have at most {MAX_RULES} items", "FieldValueTooMany")
        )
    for index, rule in enumerate(rules):
        where = f"{path}.rules[{index}]"
        if not isinstance(rule, Mapping):
            causes.append(Cause(where, "Invalid value: must be an object"))
            continue
        action = rule.get("action")
        if not action:
            allowed = " ".join(f'"{a}"' for a in sorted([*ACTIONS, "FailIndex"]))
            causes.append(Cause(f"{where}.action", f"Required value: valid values: [{allowed}]", "FieldValueRequired"))
        elif action == "FailIndex":
            # Upstream accepts it with backoffLimitPerIndex, which the local Job controller does not implement.
            causes.append(
                Cause(f"{where}.action", 'Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set')
            )
        elif action not in ACTIONS:
            allowed = ", ".join(f'"{a}"' for a in ACTIONS)
            causes.append(
                Cause(
                    f"{where}.action",
                    f"Unsupported value: {action!r}: supported values: {allowed}",
                    "FieldValueNotSupported",
                )
            )
        codes, conditions = rule.get("onExitCodes"), rule.get("onPodConditions")
        if codes and conditions:
            causes.append(
                Cause(where, "Invalid value: specifying both OnExitCodes and OnPodConditions is not supported")
            )
        elif not codes and not conditions:
            causes.append(Cause(where, "Invalid value: specifying one of OnExitCodes and OnPodConditions is required"))
        named = codes.get("containerName") if isinstance(codes, Mapping) else None
        if named is not None and named not in container_names:
            causes.append(
                Cause(
                    f"{where}.onExitCodes.containerName",
                    f"Invalid value: {named!r}: must be one of the container or initContainer "
                    "names in the pod template",
                )
            )
        if codes:
            causes += _exit_codes(codes, f"{where}.onExitCodes")
        for i, pattern in enumerate(conditions or []):
            if not isinstance(pattern, Mapping) or not pattern.get("type"):
                causes.append(Cause(f"{where}.onPodConditions[{i}].type", "Required value", "FieldValueRequired"))
            elif pattern.get("status", "True") not in ("True", "False", "Unknown"):
                causes.append(
                    Cause(
                        f"{where}.onPodConditions[{i}].status",
                        f'Unsupported value: {pattern.get("status")!r}: supported values: "True", "False", "Unknown"',
                        "FieldValueNotSupported",
                    )
                )
    return causes


def _exit_codes(codes: Any, where: str) -> list[Cause]:
    if not isinstance(codes, Mapping):
        return [Cause(where, "Invalid value: must be an object")]
    causes: list[Cause] = []
    if codes.get("operator") not in ("In", "NotIn"):
        causes.append(
            Cause(
                f"{where}.operator",
                f'Unsupported value: {codes.get("operator")!r}: supported values: "In", "NotIn"',
                "FieldValueNotSupported",
            )
        )
    values = codes.get("values")
    if (
        not isinstance(values, list)
        or not values
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in values)
    ):
        why = (
            "at least one value is required"
            if isinstance(values, list) and not values
            else "must be a list of integers"
        )
        return [*causes, Cause(f"{where}.values", f"Invalid value: {values!r}: {why}")]
    if len(values) > MAX_EXIT_CODES:
        causes.append(
            Cause(
                f"{where}.values",
                f"Too many: {len(values)}: must have at most {MAX_EXIT_CODES} items",
                "FieldValueTooMany",
            )
        )
    if len(set(values)) != len(values):
        causes.append(Cause(f"{where}.values", "Duplicate value: must be unique", "FieldValueDuplicate"))
    if values != sorted(values):
        causes.append(Cause(f"{where}.values", "Invalid value: must be ordered", "FieldValueInvalid"))
    if codes.get("operator") == "In" and 0 in values:
        causes.append(
            Cause(
                f"{where}.values[{values.index(0)}]",
                "Invalid value: 0: must not be 0 for the In operator",
                "FieldValueInvalid",
            )
        )
    return causes
