"""Invalid objects get 422 naming the bad field, and nothing is stored."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from elastic_training.local.cluster import LocalCluster
from elastic_training.local.cluster.resources import JOBS, JOBSETS, PODS
from elastic_training.local.cluster.validation import validate, validate_update
from tests.support.cluster_objects import job_body, jobset_body
from tests.support.local_cluster import K8s

Edit = Callable[[dict[str, Any]], None]


def _rjob(obj: dict[str, Any], index: int = 0) -> dict[str, Any]:
    rjob: dict[str, Any] = obj["spec"]["replicatedJobs"][index]
    return rjob


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = _rjob(obj)["template"]["spec"]["template"]["spec"]
    return spec


def _add_rjob(obj: dict[str, Any], name: str) -> None:
    extra = copy.deepcopy(_rjob(obj))
    extra["name"] = name
    obj["spec"]["replicatedJobs"].append(extra)


INVALID_JOBSETS: list[tuple[str, Edit, str]] = [
    ("no replicated jobs", lambda o: o["spec"].update(replicatedJobs=[]), "spec.replicatedJobs"),
    ("bad name", lambda o: o["metadata"].update(name="Bad_Name"), "metadata.name"),
    ("name starting with a digit", lambda o: o["metadata"].update(name="1abc"), "metadata.name"),
    ("child job name too long", lambda o: o["metadata"].update(name="j" * 60), "metadata.name"),
    ("negative replicas", lambda o: _rjob(o).update(replicas=-1), "spec.replicatedJobs[0].replicas"),
    ("bad rjob name", lambda o: _rjob(o).update(name="Workers!"), "spec.replicatedJobs[0].name"),
    ("duplicate rjob names", lambda o: _add_rjob(o, "workers"), "spec.replicatedJobs[1].name"),
    (
        "unknown restart strategy",
        lambda o: o["spec"].update(failurePolicy={"restartStrategy": "Sometimes"}),
        "spec.failurePolicy.restartStrategy",
    ),
    (
        "negative max restarts",
        lambda o: o["spec"].update(failurePolicy={"maxRestarts": -1}),
        "spec.failurePolicy.maxRestarts",
    ),
    (
        "unknown rule action",
        lambda o: o["spec"].update(failurePolicy={"rules": [{"name": "r", "action": "Explode"}]}),
        "spec.failurePolicy.rules[0].action",
    ),
    (
        "rule targeting an unknown rjob",
        lambda o: o["spec"].update(
            failurePolicy={"rules": [{"name": "r", "action": "FailJobSet", "targetReplicatedJobs": ["nope"]}]}
        ),
        "spec.failurePolicy.rules[0].targetReplicatedJobs[0]",
    ),
    (
        "unknown success operator",
        lambda o: o["spec"].update(successPolicy={"operator": "Most"}),
        "spec.successPolicy.operator",
    ),
    (
        "success target unknown",
        lambda o: o["spec"].update(successPolicy={"operator": "All", "targetReplicatedJobs": ["head"]}),
        "spec.successPolicy.targetReplicatedJobs[0]",
    ),
    (
        "no template containers",
        lambda o: _pod_spec(o).update(containers=[]),
        "spec.replicatedJobs[0].template.spec.template.spec.containers",
    ),
    (
        "negative backoff limit",
        lambda o: _rjob(o)["template"]["spec"].update(backoffLimit=-2),
        "spec.replicatedJobs[0].template.spec.backoffLimit",
    ),
    (
        "bad label value",
        lambda o: o["metadata"].update(labels={"run": "has space"}),
        "metadata.labels.run",
    ),
    (
        "coordinator names an unknown rjob",
        lambda o: o["spec"].update(coordinator={"replicatedJob": "head"}),
        "spec.coordinator.replicatedJob",
    ),
]


@pytest.mark.parametrize(("case", "edit", "field"), INVALID_JOBSETS, ids=[c[0] for c in INVALID_JOBSETS])
def test_invalid_jobsets(case: str, edit: Edit, field: str) -> None:
    obj = jobset_body("valid-name")
    edit(obj)
    assert field in [cause.field for cause in validate(JOBSETS, obj)]


def test_valid_jobset_has_no_causes() -> None:
    obj = jobset_body("pretrain", replicas=4)
    _add_rjob(obj, "pathways-head")
    obj["spec"]["failurePolicy"] = {
        "maxRestarts": 3,
        "restartStrategy": "BlockingRecreate",
        "rules": [{"name": "fail-head", "action": "FailJobSet", "targetReplicatedJobs": ["pathways-head"]}],
    }
    obj["spec"]["successPolicy"] = {"operator": "All", "targetReplicatedJobs": ["pathways-head"]}
    obj["spec"]["coordinator"] = {"replicatedJob": "pathways-head"}
    assert validate(JOBSETS, obj) == []


INVALID_JOBS: list[tuple[str, Edit, str]] = [
    ("negative completions", lambda o: o["spec"].update(completions=-1), "spec.completions"),
    ("negative parallelism", lambda o: o["spec"].update(parallelism=-1), "spec.parallelism"),
    ("unknown completion mode", lambda o: o["spec"].update(completionMode="Sorted"), "spec.completionMode"),
    (
        "restartPolicy Always",
        lambda o: o["spec"]["template"]["spec"].update(restartPolicy="Always"),
        "spec.template.spec.restartPolicy",
    ),
    (
        "container without a name",
        lambda o: o["spec"]["template"]["spec"]["containers"][0].pop("name"),
        "spec.template.spec.containers[0].name",
    ),
    (
        "duplicate container names",
        lambda o: o["spec"]["template"]["spec"].update(initContainers=[{"name": "main", "image": "local"}]),
        "spec.template.spec.containers[0].name",
    ),
]


@pytest.mark.parametrize(("case", "edit", "field"), INVALID_JOBS, ids=[c[0] for c in INVALID_JOBS])
def test_invalid_jobs(case: str, edit: Edit, field: str) -> None:
    obj = job_body("valid-job")
    edit(obj)
    assert field in [cause.field for cause in validate(JOBS, obj)]


def _pod(**spec: Any) -> dict[str, Any]:
    base = {"containers": [{"name": "main", "image": "local"}]}
    return {"metadata": {"name": "p"}, "spec": {**base, **spec}}


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (_pod(containers=[]), "spec.containers"),
        (_pod(restartPolicy="Sometimes"), "spec.restartPolicy"),
        (_pod(containers=[{"name": "main"}]), "spec.containers[0].image"),
        (
            _pod(containers=[{"name": "main", "image": "local", "env": [{"name": "1BAD", "value": "v"}]}]),
            "spec.containers[0].env[0].name",
        ),
        ({"metadata": {"name": "p", "annotations": {"bad key!": "v"}}, "spec": _pod()["spec"]}, "metadata.annotations"),
        ({"metadata": {"name": "UPPER"}, "spec": _pod()["spec"]}, "metadata.name"),
    ],
)
def test_invalid_pods(obj: dict[str, Any], field: str) -> None:
    assert field in [cause.field for cause in validate(PODS, obj)]


def test_jobset_spec_is_immutable_except_pod_template_metadata_while_suspended() -> None:
    old = jobset_body("immutable", suspend=False)
    changed_policy = copy.deepcopy(old)
    changed_policy["spec"]["failurePolicy"] = {"maxRestarts": 5}
    assert [c.field for c in validate_update(JOBSETS, old, changed_policy)] == ["spec.failurePolicy"]
    changed_replicas = copy.deepcopy(old)
    _rjob(changed_replicas)["replicas"] = 3
    assert [c.field for c in validate_update(JOBSETS, old, changed_replicas)] == ["spec.replicatedJobs"]
    resumed = copy.deepcopy(old)
    resumed["spec"]["suspend"] = True
    assert validate_update(JOBSETS, old, resumed) == []
    relabelled = copy.deepcopy(resumed)
    _rjob(relabelled)["template"]["spec"]["template"]["metadata"] = {"labels": {"queue": "a"}}
    assert validate_update(JOBSETS, resumed, relabelled) == []


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(workdir=tmp_path_factory.mktemp("validation"), run_control_plane=False) as running:
        yield running


API_CASES = [
    case
    for case in INVALID_JOBSETS
    if case[0] in ("no replicated jobs", "bad name", "negative replicas", "unknown restart strategy")
]


@pytest.mark.parametrize(("case", "edit", "field"), API_CASES, ids=[c[0] for c in API_CASES])
def test_invalid_jobset_over_http_is_422_and_creates_nothing(k8s: K8s, case: str, edit: Edit, field: str) -> None:
    obj = jobset_body("http-invalid")
    edit(obj)
    with pytest.raises(client.ApiException) as caught:
        k8s.custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "default", "jobsets", obj)
    status = json.loads(caught.value.body)
    assert (caught.value.status, status["reason"]) == (422, "Invalid")
    assert field in [cause["field"] for cause in status["details"]["causes"]]
    assert k8s.custom.list_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "default", "jobsets")["items"] == []


def test_immutable_update_over_http_is_422(k8s: K8s) -> None:
    k8s.custom.create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", jobset_body("http-immutable", suspend=False)
    )
    with pytest.raises(client.ApiException) as caught:
        k8s.custom.patch_namespaced_custom_object(
            "jobset.x-k8s.io",
            "v1alpha2",
            "default",
            "jobsets",
            "http-immutable",
            {"spec": {"successPolicy": {"operator": "Any"}}},
        )
    assert caught.value.status == 422
    assert json.loads(caught.value.body)["details"]["causes"][0]["field"] == "spec.successPolicy"
