"""Hostile run specs and `maxtext_args`: `lint` either raises `SpecError` naming a field or passes, and a spec
that passes renders into argv items no shell or MaxText parser can split, and into a JobSet the API accepts."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastic_training.operators.kube_names import identity_labels
from elastic_training.operators.manifest_lint import lint_manifest
from elastic_training.operators.manifests import elastic_jobset
from elastic_training.operators.spec import ElasticRunSpec, SpecError, lint
from tests.support.hostile_strategies import HOSTILE, anything, nasty_text, numbers_ish, words

GKE = ElasticRunSpec(
    run_name="llama3-nightly",
    base_output_directory="gs://ml-runs/pretrain",
    steps=1000,
    checkpoint_period=100,
    num_slices=4,
    image="us-docker.pkg.dev/my-project/maxtext/maxtext:2026-11-30",
    tpu_type="v5p",
    tpu_topology="2x2x2",
    maxtext_args={"model_name": "llama3-8b"},
)
LOCAL = dataclasses.replace(GKE, runtime="local", image=None, tpu_type=None, tpu_topology=None, maxtext_args={})
FIELDS = [f.name for f in dataclasses.fields(ElasticRunSpec)]
INT_FIELDS = [
    "steps",
    "checkpoint_period",
    "num_slices",
    "max_slice_restarts",
    "jobset_max_restarts",
    "elastic_max_retries",
    "elastic_timeout_seconds",
    "elastic_min_slice_count",
]
# Integer fields of the rendered JobSet that the API server reads as int32 (JobSet and batch/v1 Job types).
INT32_MAX = 2**31 - 1
LABELS = identity_labels(dag_id="d", task_id="t", run_id="r", map_index=-1)


def lint_or_field(spec: ElasticRunSpec) -> str | None:
    """The field `lint` names, or None when the spec passes; any other exception fails the test."""
    try:
        lint(spec)
    except SpecError as error:
        assert error.field and error.message, error
        assert str(error).startswith(f"{error.field}: ")
        assert "\n" not in error.field
        return error.field
    return None


def assert_renders_safely(spec: ElasticRunSpec) -> None:
    """A linted spec: argv items that never split, a JobSet that passes `lint_manifest`, int32 fields in range."""
    for arg in spec.maxtext_keys():
        key, sep, value = arg.partition("=")
        assert sep and key.isidentifier() and value, arg
        assert "=" not in value, arg
        assert not any(c.isspace() or not c.isprintable() for c in arg), arg
    manifest = elastic_jobset(spec, name="run-abcdef", namespace="default", labels=LABELS)
    lint_manifest(manifest)
    for rjob in manifest["spec"]["replicatedJobs"]:
        job = rjob["template"]["spec"]
        for value in (rjob["replicas"], job["backoffLimit"], job["completions"], job["parallelism"]):
            assert 0 <= value <= INT32_MAX, (rjob["name"], value)
    assert 0 <= manifest["spec"]["failurePolicy"]["maxRestarts"] <= INT32_MAX


@HOSTILE
@given(base=st.sampled_from([GKE, LOCAL]), name=st.sampled_from(FIELDS), value=anything())
def test_any_field_any_value(base: ElasticRunSpec, name: str, value: Any) -> None:
    spec = dataclasses.replace(base, **{name: value})
    field = lint_or_field(spec)
    if field is None:
        assert_renders_safely(spec)


@pytest.mark.parametrize("value", [10**5000, 2**31, float(2**40)], ids=["10**5000", "2**31", "2.0**40"])
def test_a_stall_timeout_past_the_int32_range_is_refused_not_an_overflow(value: float) -> None:
    # Hypothesis found 10**5000: float() of it raised OverflowError inside the lint.
    with pytest.raises(SpecError, match=r"stall_timeout: must be at most 2147483647 seconds"):
        lint(dataclasses.replace(GKE, stall_timeout_seconds=value))


@HOSTILE
@given(base=st.sampled_from([GKE, LOCAL]), name=st.sampled_from(INT_FIELDS), value=numbers_ish())
def test_integer_fields(base: ElasticRunSpec, name: str, value: Any) -> None:
    spec = dataclasses.replace(base, **{name: value})
    field = lint_or_field(spec)
    if field is None:
        is_int = isinstance(value, int) and not isinstance(value, bool)
        assert is_int or (name, value) == ("elastic_max_retries", None)
        assert_renders_safely(spec)


@HOSTILE
@given(
    name=st.sampled_from(
        [
            "run_name",
            "base_output_directory",
            "image",
            "tpu_type",
            "tpu_topology",
            "config_file",
            "pathways_server_image",
            "pathways_proxy_image",
            "head_node_pool",
            "service_account",
            "priority_class",
            "queue_name",
        ]
    ),
    value=st.one_of(nasty_text, words, st.text(max_size=300)),
    prefix=st.sampled_from(["", "gs://bucket/", "/tmp/", "us-docker.pkg.dev/p/r/", "2x2x", "v5p"]),
)
def test_string_fields(name: str, value: str, prefix: str) -> None:
    spec = dataclasses.replace(GKE, **{name: prefix + value})
    if lint_or_field(spec) is None:
        assert_renders_safely(spec)


@HOSTILE
@given(
    args=st.dictionaries(
        st.one_of(st.from_regex(r"\A[a-z_][a-z0-9_]{0,20}\Z"), nasty_text, st.integers()),
        st.one_of(anything(), st.floats(), numbers_ish()),
        max_size=5,
    )
)
def test_maxtext_args(args: dict[Any, Any]) -> None:
    spec = dataclasses.replace(GKE, maxtext_args=args)
    field = lint_or_field(spec)
    if field is None:
        assert_renders_safely(spec)
        keys = spec.maxtext_keys()
        assert len(keys) == len(dataclasses.replace(GKE, maxtext_args={}).maxtext_keys()) + len(args)
    else:
        assert field.startswith("maxtext_args")


@HOSTILE
@given(
    name=st.sampled_from(["trainer_env", "worker_env"]),
    env=st.dictionaries(
        st.one_of(st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,20}\Z"), nasty_text, st.integers()),
        st.one_of(anything(), nasty_text, words),
        max_size=4,
    ),
)
def test_env_fields(name: str, env: dict[Any, Any]) -> None:
    spec = dataclasses.replace(GKE, **{name: env})
    field = lint_or_field(spec)
    if field is None:
        assert_renders_safely(spec)
        manifest = elastic_jobset(spec, name="run-abcdef", namespace="default", labels=LABELS)
        for rjob in manifest["spec"]["replicatedJobs"]:
            for container in rjob["template"]["spec"]["template"]["spec"]["containers"]:
                names = [e["name"] for e in container["env"]]
                assert len(names) == len(set(names)), names
    else:
        assert field.startswith(name)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"tpu_topology": "9" * 5000 + "x4x4"}, "tpu_topology"),  # int() of > 4300 digits raises ValueError
        ({"tpu_topology": "4x4x" + "4" * 30}, "tpu_topology"),
        ({"tpu_type": ["v5p"]}, "tpu_type"),  # unhashable: `in TPU_TYPES` would raise TypeError
        ({"tpu_type": {"v5p": 1}}, "tpu_type"),
        ({"num_slices": 2**31}, "num_slices"),  # JobSet replicas are int32
        ({"max_slice_restarts": 2**31}, "max_slice_restarts"),  # so is the worker Job's backoffLimit
        ({"max_slice_restarts": 2**29, "tpu_topology": "2x2x4"}, "max_slice_restarts"),  # x 4 VMs per slice
        ({"jobset_max_restarts": 2**31}, "jobset_max_restarts"),
        ({"steps": 10**5000}, "steps"),  # str() of it raises ValueError
        ({"config_file": "--flagfile=/etc/passwd"}, "config_file"),  # absl reads argv flags before MaxText
        ({"config_file": "-h"}, "config_file"),
        ({"image": "a" * 100_000}, "image"),
        ({"maxtext_args": {"model_name": 10**5000}}, "maxtext_args.model_name"),
        # `$` matches before a final newline: every name pattern ends in \Z instead.
        ({"run_name": "demo\n"}, "run_name"),
        ({"maxtext_args": {"model_name\n": "x"}}, "maxtext_args"),
        ({"base_output_directory": "gs://bucket\n/x"}, "base_output_directory"),
        ({"image": "ubuntu\n"}, "image"),
        ({"pathways_server_image": "r.io/pathways/server:jax-0.10.2\n"}, "pathways_server_image"),
        ({"pathways_proxy_image": ["r.io/p/proxy:1"]}, "pathways_proxy_image"),
        ({"head_node_pool": "cpu-np\n"}, "head_node_pool"),
        ({"queue_name": {"q": 1}}, "queue_name"),  # unhashable
        ({"image_pull_policy": ["Always"]}, "image_pull_policy"),  # unhashable: `in` a tuple still compares
        ({"service_account": "a" * 254}, "service_account"),
        ({"trainer_env": {"X\n": "1"}}, "trainer_env"),
        ({"worker_env": {("X",): "1"}}, "worker_env"),
    ],
)
def test_found_by_hypothesis(changes: dict[str, Any], field: str) -> None:
    assert lint_or_field(dataclasses.replace(GKE, **changes)) == field
