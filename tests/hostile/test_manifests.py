"""Hostile manifests and job specs: `lint_manifest` and `lint_job` raise `SpecError` or pass, never anything else,
and whatever renders is a JobSet with valid names and labels."""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastic_training.operators.kube_names import JOBSET_NAME_MAX, identity_labels, jobset_name
from elastic_training.operators.manifest_lint import lint_manifest
from elastic_training.operators.manifests import JobSpec, elastic_jobset, lint_job, plain_jobset
from elastic_training.operators.spec import ElasticRunSpec, SpecError
from tests.support.hostile_strategies import HOSTILE, anything, nasty_text, numbers_ish

LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?)?\Z")
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
SPEC = ElasticRunSpec(
    run_name="demo", base_output_directory="/tmp/runs", steps=40, checkpoint_period=10, num_slices=2, runtime="local"
)
LABELS = identity_labels(dag_id="d", task_id="t", run_id="r", map_index=-1)
VALID = elastic_jobset(SPEC, name="demo-abcdef", namespace="default", labels=LABELS)
GKE_SPEC = dataclasses.replace(
    SPEC,
    runtime="gke",
    image="us-docker.pkg.dev/p/r/maxtext:1",
    tpu_type="v5e",
    tpu_topology="4x4",
    service_account="ksa",
    priority_class="high",
    queue_name="q",
    image_pull_policy="Always",
    trainer_env={"ENABLE_PATHWAYS_PERSISTENCE": "1"},
    worker_env={"X": "1"},
)
GKE_VALID = elastic_jobset(GKE_SPEC, name="demo-abcdef", namespace="default", labels=LABELS)
JOB = JobSpec(image="us-docker.pkg.dev/p/r/eval:1", command=["python3", "-m", "eval"], args=["--x=1"])


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON document (dict keys and list indexes)."""
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


PATHS = [p for p in _paths(VALID) if p]
GKE_PATHS = [p for p in _paths(GKE_VALID) if p]


def _set(document: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    node: Any = changed
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return changed


def lint_or_field(manifest: Any) -> str | None:
    try:
        lint_manifest(manifest)
    except SpecError as error:
        assert error.field and error.message
        return error.field
    return None


@HOSTILE
@given(path=st.sampled_from(PATHS), value=anything())
def test_any_part_of_a_manifest_replaced(path: tuple[Any, ...], value: Any) -> None:
    lint_or_field(_set(VALID, path, value))


@HOSTILE
@given(path=st.sampled_from(GKE_PATHS), value=anything())
def test_any_part_of_a_gke_manifest_replaced(path: tuple[Any, ...], value: Any) -> None:
    lint_or_field(_set(GKE_VALID, path, value))


RULES = ("spec", "failurePolicy", "rules")


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (RULES, {"name": "x"}, "spec.failurePolicy.rules"),
        ((*RULES, 0), "headDisrupted", "spec.failurePolicy.rules[0]"),
        ((*RULES, 0, "action"), ["FailJobSet"], "spec.failurePolicy.rules[0].action"),  # unhashable
        ((*RULES, 0, "action"), "Restart", "spec.failurePolicy.rules[0].action"),
        ((*RULES, 1, "name"), "headDisrupted", "spec.failurePolicy.rules[1].name"),  # twice
        ((*RULES, 1, "name"), "1st", "spec.failurePolicy.rules[1].name"),
        ((*RULES, 1, "targetReplicatedJobs"), ["workers"], "spec.failurePolicy.rules[1].targetReplicatedJobs"),
        ((*RULES, 0, "onJobFailureReasons"), "PodFailurePolicy", "spec.failurePolicy.rules[0].onJobFailureReasons"),
        (
            ("spec", "replicatedJobs", 0, "template", "spec", "template", "spec", "restartPolicy"),
            "OnFailure",
            "spec.replicatedJobs[0].template.spec.podFailurePolicy",
        ),
    ],
)
def test_failure_rules_are_checked(path: tuple[Any, ...], value: Any, field: str) -> None:
    assert lint_or_field(GKE_VALID) is None
    assert lint_or_field(_set(GKE_VALID, path, value)) == field


@HOSTILE
@given(manifest=anything())
def test_any_document_as_a_manifest(manifest: Any) -> None:
    assert lint_or_field(manifest) is not None


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("metadata", "labels"), ["a", "b"], "metadata.labels"),  # a list: `.items()` raised AttributeError
        (("spec", "successPolicy", "targetReplicatedJobs"), 5, "spec.successPolicy.targetReplicatedJobs"),
        (("spec", "successPolicy", "targetReplicatedJobs"), [["x"]], "spec.successPolicy.targetReplicatedJobs"),
        (("spec", "coordinator", "replicatedJob"), ["x"], "spec.coordinator.replicatedJob"),
        (("spec", "coordinator", "jobIndex"), "0; rm", "spec.coordinator.jobIndex"),
        (("spec", "replicatedJobs", 0, "replicas"), 2**31, "spec.replicatedJobs[0].replicas"),
        (("spec", "replicatedJobs", 0, "template", "spec", "completions"), "1", "spec.replicatedJobs[0].template.spec"),
    ],
)
def test_found_by_hypothesis(path: tuple[Any, ...], value: Any, field: str) -> None:
    found = lint_or_field(_set(VALID, path, value))
    assert found is not None and found.startswith(field), found


FIELDS = [f.name for f in dataclasses.fields(JobSpec) if f.name != "runtime"]


@HOSTILE
@given(
    name=st.sampled_from(FIELDS), value=st.one_of(anything(), numbers_ish()), runtime=st.sampled_from(["gke", "local"])
)
def test_any_job_field_any_value(name: str, value: Any, runtime: str) -> None:
    job = dataclasses.replace(JOB, runtime=runtime, **{name: value})  # type: ignore[arg-type]
    try:
        lint_job(job)
    except SpecError as error:
        assert error.field
        return
    manifest = plain_jobset(job, name="eval-abcdef", namespace="default", labels=LABELS, stage="evaluate")
    lint_manifest(manifest)
    (container,) = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    assert isinstance(container["command"], list) and all(isinstance(c, str) for c in container["command"])


@HOSTILE
@given(
    dag=nasty_text,
    task=nasty_text,
    run=nasty_text,
    prefix=st.none() | nasty_text,
    stage=nasty_text,
    map_index=st.integers(-1, 10**9),
    attempt=st.integers(0, 99),
)
def test_names_and_labels_from_hostile_identities(
    dag: str, task: str, run: str, prefix: str | None, stage: str, map_index: int, attempt: int
) -> None:
    name = jobset_name(dag_id=dag, task_id=task, run_id=run, map_index=map_index, attempt=attempt, prefix=prefix)
    assert len(name) <= JOBSET_NAME_MAX and DNS1035.match(name)
    labels = identity_labels(dag_id=dag, task_id=task, run_id=run, map_index=map_index)
    manifest = plain_jobset(JOB, name=name, namespace="default", labels=labels, stage=stage)
    lint_manifest(manifest)
    template_labels = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"]
    for value in [*manifest["metadata"]["labels"].values(), *template_labels.values()]:
        assert len(value) <= 63 and LABEL_VALUE.match(value), value


@pytest.mark.parametrize("value", ["abc\n", "a" * 62 + "\n"])
def test_a_trailing_newline_is_not_a_label_value(value: str) -> None:
    safe = identity_labels(dag_id=value, task_id="t", run_id="r", map_index=-1)
    assert all(LABEL_VALUE.match(v) for v in safe.values())
    with pytest.raises(SpecError):
        plain_jobset(JOB, name="eval-abcdef\n", namespace="default", labels=LABELS, stage="evaluate")
    with pytest.raises(SpecError):
        plain_jobset(JOB, name="eval-abcdef", namespace="default", labels={"k": value}, stage="evaluate")
    with pytest.raises(SpecError):
        lint_job(dataclasses.replace(JOB, env={"PATH\n": "x"}))


@pytest.mark.parametrize("namespace", ["", "Default", "a b", "../kube-system", "a/b", "x" * 64, "ns\n", 5, None])
def test_a_bad_namespace_is_refused_when_rendering(namespace: Any) -> None:
    with pytest.raises(SpecError) as raised:
        plain_jobset(JOB, name="eval-abcdef", namespace=namespace, labels=LABELS, stage="evaluate")
    assert raised.value.field == "namespace"
    with pytest.raises(SpecError) as raised:
        elastic_jobset(SPEC, name="demo-abcdef", namespace=namespace, labels=LABELS)
    assert raised.value.field == "namespace"
