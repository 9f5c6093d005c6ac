"""A Job's podFailurePolicy over HTTP: validation as upstream's, FailJob / Ignore / Count, and the GKE head rule."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from elastic_training.local.cluster import LocalCluster
from elastic_training.local.cluster.pod_failure_policy import Action, match
from elastic_training.operators.manifests import HEAD_POD_FAILURE_POLICY
from tests.support.cluster_faults import _control
from tests.support.control_plane import armed, wait_armed
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for


def _job(name: str, rules: list[dict[str, Any]], command: list[str], *, backoff: int = 0, **pod: Any) -> dict[str, Any]:
    spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, **pod}
    spec.setdefault("containers", [{"name": "main", "image": "local", "command": command}])
    return {
        "metadata": {"name": name},
        "spec": {"backoffLimit": backoff, "podFailurePolicy": {"rules": rules}, "template": {"spec": spec}},
    }


def _failed(k8s: K8s, name: str) -> client.V1JobCondition | None:
    job = k8s.batch.read_namespaced_job(name, "default")
    return next((c for c in job.status.conditions or [] if c.type == "Failed" and c.status == "True"), None)


def _pods(k8s: K8s, job: str) -> list[client.V1Pod]:
    return list(k8s.core.list_namespaced_pod("default", label_selector=f"job-name={job}").items)


def _exit(code: int) -> list[str]:
    return ["sh", "-c", f"exit {code}"]


# -- validation (kubernetes pkg/apis/batch/validation/validation.go) -----------------------------------------------

EXIT_42 = {"operator": "In", "values": [42]}
DISRUPTED = [{"type": "DisruptionTarget", "status": "True"}]


@pytest.mark.parametrize(
    ("rules", "pod", "field", "message"),
    [
        (
            [{"action": "FailJob", "onPodConditions": DISRUPTED}],
            {"restartPolicy": "OnFailure"},
            "spec.template.spec.restartPolicy",
            'only "Never" is supported when podFailurePolicy is specified',
        ),
        ([{"action": "Explode", "onExitCodes": EXIT_42}], {}, "spec.podFailurePolicy.rules[0].action", "Unsupported"),
        ([{"onExitCodes": EXIT_42}], {}, "spec.podFailurePolicy.rules[0].action", "Required value"),
        (
            [{"action": "FailIndex", "onExitCodes": EXIT_42}],
            {},
            "spec.podFailurePolicy.rules[0].action",
            "requires the backoffLimitPerIndex to be set",
        ),
        (
            [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [1, 0]}}],
            {},
            "spec.podFailurePolicy.rules[0].onExitCodes.values[1]",
            "must not be 0 for the In operator",
        ),
        (
            [{"action": "Ignore", "onExitCodes": {"operator": "NotIn", "values": [3, 2]}}],
            {},
            "spec.podFailurePolicy.rules[0].onExitCodes.values",
            "must be ordered",
        ),
        (
            [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": []}}],
            {},
            "spec.podFailurePolicy.rules[0].onExitCodes.values",
            "at least one value is required",
        ),
        (
            [{"action": "Ignore", "onExitCodes": {"operator": "Is", "values": [1]}}],
            {},
            "spec.podFailurePolicy.rules[0].onExitCodes.operator",
            "Unsupported",
        ),
        (
            [{"action": "Count", "onExitCodes": {"operator": "In", "values": [1], "containerName": "nope"}}],
            {},
            "spec.podFailurePolicy.rules[0].onExitCodes.containerName",
            "must be one of the container or initContainer names in the pod template",
        ),
        (
            [{"action": "Count", "onPodConditions": [{"type": "DisruptionTarget", "status": "Maybe"}]}],
            {},
            "spec.podFailurePolicy.rules[0].onPodConditions[0].status",
            "Unsupported",
        ),
        (
            [{"action": "Count", "onExitCodes": EXIT_42, "onPodConditions": DISRUPTED}],
            {},
            "spec.podFailurePolicy.rules[0]",
            "specifying both OnExitCodes and OnPodConditions is not supported",
        ),
        (
            [{"action": "Count"}],
            {},
            "spec.podFailurePolicy.rules[0]",
            "specifying one of OnExitCodes and OnPodConditions is required",
        ),
    ],
)
def test_an_invalid_pod_failure_policy_is_refused_naming_the_field(
    k8s: K8s, rules: list[dict[str, Any]], pod: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(ApiException) as refused:
        k8s.batch.create_namespaced_job("default", _job("refused", rules, ["true"], **pod))
    assert refused.value.status == 422
    causes = json.loads(refused.value.body)["details"]["causes"]
    assert any(c["field"] == field and message in c["message"] for c in causes), causes
    assert not [j for j in k8s.batch.list_namespaced_job("default").items if j.metadata.name == "refused"]


def test_the_gke_head_policy_and_an_on_exit_codes_rule_are_accepted(k8s: K8s) -> None:
    rules = [
        *HEAD_POD_FAILURE_POLICY["rules"],
        {"action": "Ignore", "onExitCodes": {"operator": "NotIn", "values": [0, 1]}},
    ]
    body = _job("accepted", rules, ["true"])
    body["spec"]["suspend"] = True
    created = k8s.batch.create_namespaced_job("default", body)
    assert created.spec.pod_failure_policy.rules[0].on_pod_conditions[0].type == "DisruptionTarget"
    k8s.batch.delete_namespaced_job("accepted", "default")


# -- the controller ------------------------------------------------------------------------------------------------


def test_fail_job_on_an_exit_code_fails_the_job_with_upstreams_reason_and_message(k8s: K8s) -> None:
    rules = [
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}},
        {"action": "FailJob", "onExitCodes": EXIT_42},
    ]
    k8s.batch.create_namespaced_job("default", _job("exit42", rules, _exit(42), backoff=6))

    condition = wait_for(lambda: _failed(k8s, "exit42"))

    (pod,) = _pods(k8s, "exit42")  # backoffLimit 6 left, yet no second pod: FailJob ends the Job at once
    assert condition.reason == "PodFailurePolicy"
    assert condition.message == (
        f"Container main for pod default/{pod.metadata.name} failed with exit code 42 matching FailJob rule at index 1"
    )
    assert k8s.batch.read_namespaced_job("exit42", "default").status.failed == 1


def test_ignore_keeps_a_failure_off_the_backoff_limit_and_the_pod_is_replaced(k8s: K8s, tmp_path: Any) -> None:
    marker = tmp_path / "failed-once"
    script = f"test -f {marker} && exit 0; touch {marker}; exit 3"
    rules = [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}}]
    k8s.batch.create_namespaced_job("default", _job("ignored", rules, ["sh", "-c", script], backoff=0))

    job = wait_for(
        lambda: (
            (j := k8s.batch.read_namespaced_job("ignored", "default")).status.conditions
            and any(c.type in ("Complete", "Failed") and c.status == "True" for c in j.status.conditions)
            and j
        )
    )

    assert [c.type for c in job.status.conditions if c.status == "True"][-1] == "Complete"
    assert (job.status.failed or 0) == 0 and job.status.succeeded == 1
    assert sorted(p.status.phase for p in _pods(k8s, "ignored")) == ["Failed", "Succeeded"]


def test_count_and_an_unmatched_failure_spend_the_backoff_limit(k8s: K8s) -> None:
    rules = [{"action": "Count", "onExitCodes": {"operator": "In", "values": [5]}}]
    k8s.batch.create_namespaced_job("default", _job("counted", rules, _exit(5), backoff=0))
    k8s.batch.create_namespaced_job("default", _job("unmatched", rules, _exit(7), backoff=0))

    for name in ("counted", "unmatched"):
        condition = wait_for(lambda name=name: _failed(k8s, name))  # type: ignore[misc]
        assert condition.reason == "BackoffLimitExceeded"
        assert k8s.batch.read_namespaced_job(name, "default").status.failed == 1


def test_an_evicted_pod_is_matched_once_failed_and_not_replaced_while_it_terminates(
    cluster: LocalCluster, k8s: K8s
) -> None:
    # The container ignores SIGTERM: it is killed after its 2 s grace period, and only then is it Failed.
    trap = ["sh", "-c", armed("trap '' TERM")]
    rules = [{"action": "Ignore", "onPodConditions": DISRUPTED}]
    k8s.batch.create_namespaced_job("default", _job("drained", rules, trap, backoff=0, terminationGracePeriodSeconds=2))
    (first,) = wait_for(lambda: [p for p in _pods(k8s, "drained") if p.status.phase == "Running"])
    wait_armed(k8s.core, first.metadata.name)  # a SIGTERM before the trap would fail it at once

    _control(cluster, "evict-pod", {"namespace": "default", "name": first.metadata.name})

    terminating = wait_for(lambda: [p for p in _pods(k8s, "drained") if p.metadata.deletion_timestamp])
    assert [p.metadata.name for p in _pods(k8s, "drained")] == [terminating[0].metadata.name]
    second = wait_for(lambda: [p for p in _pods(k8s, "drained") if p.metadata.name != first.metadata.name], timeout=30)
    assert len(second) == 1
    job = k8s.batch.read_namespaced_job("drained", "default")
    assert (job.status.failed or 0) == 0 and _failed(k8s, "drained") is None
    k8s.batch.delete_namespaced_job("drained", "default", propagation_policy="Background")


def test_rules_match_in_order_and_the_first_wins() -> None:
    """The pure matcher: conditions and exit codes, container names, and no match at all."""
    pod = {
        "metadata": {"namespace": "ns", "name": "p"},
        "status": {
            "phase": "Failed",
            "conditions": [{"type": "DisruptionTarget", "status": "True"}],
            "containerStatuses": [
                {"name": "side", "state": {"terminated": {"exitCode": 0}}},
                {"name": "main", "state": {"terminated": {"exitCode": 9}}},
            ],
        },
    }
    ignore_9 = {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [9]}}
    fail_disrupted = {"action": "FailJob", "onPodConditions": DISRUPTED}
    assert match({"rules": [ignore_9, fail_disrupted]}, pod)[0] == Action.IGNORE
    assert match({"rules": [fail_disrupted, ignore_9]}, pod) == (
        Action.FAIL_JOB,
        "Pod ns/p has condition DisruptionTarget matching FailJob rule at index 0",
    )
    only_side = {"action": "Ignore", "onExitCodes": {"operator": "NotIn", "values": [1], "containerName": "side"}}
    assert match({"rules": [only_side]}, pod) == (Action.COUNT, "")
    not_in = {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [1, 2]}}
    assert match({"rules": [not_in]}, pod)[1] == (
        "Container main for pod ns/p failed with exit code 9 matching FailJob rule at index 0"
    )
    # Containers are looked at before init containers, as upstream's matchOnExitCodes does.
    pod["status"]["initContainerStatuses"] = [{"name": "init", "state": {"terminated": {"exitCode": 9}}}]
    assert "Container main " in match({"rules": [not_in]}, pod)[1]
