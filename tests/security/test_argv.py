"""Commands are argv lists, never a shell built from parameters: whatever a spec or job holds, the rendered
containers run a fixed program (elastic) or exactly the user's argv (plain), and user values are whole items."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastic_training.operators.manifest_lint import lint_manifest
from elastic_training.operators.manifests import JobSpec, elastic_jobset, plain_jobset
from elastic_training.operators.spec import ElasticRunSpec, SpecError, lint
from tests.support.hostile_strategies import HOSTILE, nasty_text

SHELLS = {"sh", "bash", "dash", "zsh", "ash", "ksh", "/bin/sh", "/bin/bash", "/usr/bin/env"}
GKE = ElasticRunSpec(
    run_name="llama",
    base_output_directory="gs://runs/x",
    steps=100,
    checkpoint_period=10,
    num_slices=2,
    image="us-docker.pkg.dev/p/r/maxtext:1",
    tpu_type="v5p",
    tpu_topology="2x2x2",
)
LOCAL = dataclasses.replace(GKE, runtime="local", image=None, tpu_type=None, tpu_topology=None)


def _containers(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for rjob in manifest["spec"]["replicatedJobs"]:
        pod = rjob["template"]["spec"]["template"]["spec"]
        found += [*pod.get("initContainers", []), *pod["containers"]]
    return found


def _assert_no_shell(container: dict[str, Any]) -> None:
    argv = [*container.get("command", []), *container.get("args", [])]
    assert all(isinstance(item, str) for item in argv)
    if container.get("command"):
        assert container["command"][0] not in SHELLS, container["command"]
    assert "-c" not in container.get("command", [])[1:2], container["command"]


@HOSTILE
@given(
    base=st.sampled_from([GKE, LOCAL]),
    values=st.dictionaries(
        st.sampled_from(["model_name", "dataset_path", "tokenizer_path", "x"]), nasty_text, max_size=3
    ),
    run_name=st.sampled_from(["llama", "x; rm -rf /", "$(id)", "`id`"]),
)
def test_elastic_containers_run_fixed_programs(base: ElasticRunSpec, values: dict[str, str], run_name: str) -> None:
    spec = dataclasses.replace(base, maxtext_args=values, run_name=run_name)
    try:
        lint(spec)
    except SpecError:
        return
    manifest = elastic_jobset(spec, name="llama-abcdef", namespace="default", labels={})
    for container in _containers(manifest):
        _assert_no_shell(container)
    commands = {tuple(c["command"]) for c in _containers(manifest) if "command" in c}
    assert commands <= {
        ("python3", "-m", "maxtext.trainers.pre_train.train"),
        ("python", "-m", "elastic_training.local.workloads.train"),
        ("python", "-m", "elastic_training.local.workloads.slice_worker"),
    }
    (head,) = [c for c in _containers(manifest) if c["name"] == "jax-tpu"]
    for key, value in values.items():
        assert f"{key}={value}" in head["args"]  # one whole argv item, never split or quoted


@HOSTILE
@given(command=st.lists(nasty_text, min_size=1, max_size=4), args=st.lists(nasty_text, max_size=4))
def test_plain_containers_run_exactly_the_given_argv(command: list[str], args: list[str]) -> None:
    job = JobSpec(image="us-docker.pkg.dev/p/r/eval:1", command=command, args=args)
    try:
        manifest = plain_jobset(job, name="eval-abcdef", namespace="default", labels={}, stage="evaluate")
    except SpecError:
        return
    lint_manifest(manifest)
    (container,) = _containers(manifest)
    assert container["command"] == command and container.get("args", []) == args


@pytest.mark.parametrize("command", ["python -c 'import os'", b"python", ("sh", "-c", "x")])
def test_the_jobset_operator_refuses_a_string_command(command: Any) -> None:
    from elastic_training.operators import JobSetOperator

    if isinstance(command, tuple):  # an argv tuple is a list of arguments: taken as given, never wrapped
        operator = JobSetOperator(task_id="t", name="x", image="local", command=command, runtime="local")
        assert operator.command == list(command)
        return
    with pytest.raises((ValueError, TypeError), match="not a shell string"):
        JobSetOperator(task_id="t", name="x", image="local", command=command, runtime="local")


def test_a_string_rendered_into_args_stays_one_argument() -> None:
    """A templated argument that renders to text with spaces and quotes is one argv item, not words."""
    from elastic_training.operators import JobSetOperator

    operator = JobSetOperator(
        task_id="t", name="x", image="local", command=["python", "-m", "eval"], args=["{{ params.p }}"], runtime="local"
    )
    operator.args = ["a b; rm -rf / 'c'"]  # what Jinja renders the template to
    job = operator.build_job()
    manifest = plain_jobset(job, name="x-abcdef", namespace="default", labels={}, stage="job")
    (container,) = _containers(manifest)
    assert container["args"] == ["a b; rm -rf / 'c'"]
