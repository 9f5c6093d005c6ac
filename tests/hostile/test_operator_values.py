"""Hostile constructor and rendered (templated) values of the operators: construction either succeeds or raises
`ValueError`/`TypeError` naming the parameter, and `build_spec()`/`build_job()` on any rendered value return a
linted spec or raise `AirflowFailException` naming the field. No API call is made here: these are the checks that
run before anything is created."""

from __future__ import annotations

import dataclasses
import math
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastic_training.operators import ElasticJobSetOperator, JobSetOperator
from tests.support.hostile_strategies import HOSTILE, anything, nasty_text, numbers_ish, words

BASE: dict[str, Any] = {
    "task_id": "pretrain",
    "run_name": "llama",
    "base_output_directory": "gs://runs/x",
    "steps": 100,
    "checkpoint_period": 10,
    "num_slices": 2,
    "image": "us-docker.pkg.dev/p/r/maxtext:1",
    "tpu_type": "v5p",
    "tpu_topology": "2x2x2",
}
TEMPLATED = [
    "run_name",
    "base_output_directory",
    "steps",
    "checkpoint_period",
    "num_slices",
    "maxtext_args",
    "image",
    "tpu_type",
    "tpu_topology",
    "namespace",
]
CONSTRUCTOR = [
    "runtime",
    "max_slice_restarts",
    "slice_restart_window",
    "stall_timeout",
    "startup_timeout",
    "max_full_restarts",
    "jobset_max_restarts",
    "elastic_min_slice_count",
    "elastic_timeout_seconds",
    "price_per_chip_hour",
    "poll_interval",
    "pathways_server_image",
    "pathways_proxy_image",
    "head_node_pool",
    "service_account",
    "priority_class",
    "queue_name",
    "image_pull_policy",
    "trainer_env",
    "worker_env",
]


def _elastic(**changes: Any) -> Any:
    return ElasticJobSetOperator(**{**BASE, **changes})


def _rendered(operator: Any, name: str, value: Any) -> None:
    """What template rendering does, after construction: a group's field rendered into a new group."""
    for group in ("training", "scale"):
        options = getattr(operator, group)
        if name in options.TEMPLATED:
            setattr(operator, group, dataclasses.replace(options, **{name: value}))
            return
    setattr(operator, name, value)


def _build(operator: Any) -> str | None:
    """The field `build_spec` names, or None when the rendered values make a linted spec."""
    from airflow.sdk.exceptions import AirflowFailException

    try:
        operator.build_spec()
    except AirflowFailException as error:
        message = str(error)
        assert message.startswith("invalid run spec: ") and "\n" not in message, message
        return message.removeprefix("invalid run spec: ").split(":", 1)[0]
    return None


@HOSTILE
@given(name=st.sampled_from(TEMPLATED), value=st.one_of(anything(), numbers_ish()))
def test_any_rendered_value(name: str, value: Any) -> None:
    operator = _elastic()
    _rendered(operator, name, value)
    field = _build(operator)
    # steps and checkpoint_period are checked together: a small step count is the period's error.
    related = {"steps": ("steps", "checkpoint_period"), "checkpoint_period": ("checkpoint_period",)}
    if field is not None:
        assert field.split(".")[0] in related.get(name, (name,)), (name, field)


@HOSTILE
@given(
    value=st.one_of(
        st.integers(0, 10**6).map(str),
        st.integers(0, 10**6).map(lambda n: f" {n} "),
        st.sampled_from(["1e3", "100.0", "nan", "inf", "0x10", "1_000", "\uff11\uff10", "", "\n", "True"]),
        st.floats(),
        st.booleans(),
        st.just(10).map(lambda n: 10 ** (n * 500)),
    )
)
def test_integers_rendered_as_text(value: Any) -> None:
    """Jinja renders to text: "100" is an integer; "1e3", "nan", True, 100.0 and huge numbers are not."""
    operator = _elastic()
    _rendered(operator, "steps", value)
    field = _build(operator)
    plain = isinstance(value, str) and value.strip().isascii() and value.strip().isdecimal()
    if plain and 20 <= int(value) <= 2**31 - 1:
        assert field is None
    elif plain and 2 <= int(value) < 20:  # an integer, but not well over checkpoint_period (10)
        assert field == "checkpoint_period"
    else:
        assert field == "steps"


def test_gke_knobs_reach_the_spec_and_bad_ones_are_named() -> None:
    knobs = {"service_account": "ksa", "queue_name": "q", "trainer_env": {"ENABLE_PATHWAYS_PERSISTENCE": "1"}}
    spec = _elastic(**knobs).build_spec()
    assert (spec.service_account, spec.queue_name, dict(spec.trainer_env)) == tuple(knobs.values())
    assert _build(_elastic(pathways_server_image="r.io/p/server:latest")) == "pathways_server_image"
    assert _build(_elastic(worker_env=["TPU_MIN_LOG_LEVEL=1"])) == "worker_env"


@HOSTILE
@given(name=st.sampled_from(CONSTRUCTOR), value=st.one_of(anything(), numbers_ish(), st.timedeltas()))
def test_any_constructor_value(name: str, value: Any) -> None:
    try:
        operator = _elastic(**{name: value})
    except (ValueError, TypeError) as error:
        assert name in str(error), f"{name}={value!r}: {error}"
        return
    _build(operator)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("max_full_restarts", "2"),
        ("max_full_restarts", None),
        ("max_full_restarts", 2.5),
        ("max_slice_restarts", "3"),
        ("slice_restart_window", "1h"),
        ("slice_restart_window", math.nan),
        ("stall_timeout", timedelta(0)),
        ("startup_timeout", timedelta(0)),
        ("startup_timeout", "30m"),
        ("price_per_chip_hour", "cheap"),
        ("price_per_chip_hour", math.nan),
        ("price_per_chip_hour", -1.0),
        ("poll_interval", math.nan),
        ("poll_interval", 0),
        ("poll_interval", "10"),
        ("runtime", ["gke"]),
    ],
)
def test_constructor_errors_name_the_parameter(name: str, value: Any) -> None:
    with pytest.raises((ValueError, TypeError), match=name):
        _elastic(**{name: value})


@HOSTILE
@given(
    name=st.sampled_from(["name", "image", "command", "args", "env", "namespace"]),
    value=st.one_of(anything(), nasty_text, words),
)
def test_any_rendered_job_value(name: str, value: Any) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    operator = JobSetOperator(task_id="job", name="eval", image="us-docker.pkg.dev/p/r/e:1", command=["python3"])
    setattr(operator, name, value)
    try:
        operator.build_job()
    except AirflowFailException as error:
        assert str(error).startswith("invalid job: ") and "\n" not in str(error)
