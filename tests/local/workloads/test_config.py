"""MaxText-style key=value parsing and validation; bad configs exit 2 naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from local.workloads.config import (
    ELASTIC_NEEDS_SINGLE_CONTROLLER,
    ConfigError,
    EvalConfig,
    SynthesizeConfig,
    TrainConfig,
    parse_args,
)
from tests.local.workloads.conftest import run_module


def test_defaults_and_overrides() -> None:
    config = parse_args(
        TrainConfig,
        ["base_output_directory=/tmp/out", "run_name=r1", "steps=7", "learning_rate=0.01", "async_checkpointing=False"],
    )
    assert (config.steps, config.learning_rate, config.async_checkpointing) == (7, 0.01, False)
    assert config.checkpoint_directory == "/tmp/out/r1/checkpoints"
    assert config.max_num_checkpoints_to_keep is None
    assert config.minimum_slice_count is None


def test_gs_paths_join_with_slashes() -> None:
    config = parse_args(TrainConfig, ["base_output_directory=gs://bucket/base/", "run_name=r"])
    assert config.checkpoint_directory == "gs://bucket/base/r/checkpoints"


def test_yaml_file_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "base.yml"
    path.write_text("steps: 5\nbase_output_directory: /tmp/o\nelastic_min_slice_count: 1\nnum_slices: 2\n")
    config = parse_args(TrainConfig, [str(path), "steps=9", "run_name=x"])
    assert (config.steps, config.minimum_slice_count) == (9, 1)


def test_run_name_falls_back_to_jobset_name() -> None:
    config = parse_args(TrainConfig, ["base_output_directory=/tmp/o"], env={"JOBSET_NAME": "js-1"})
    assert config.run_name == "js-1"


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (["bogus=1"], "bogus"),
        (["steps=ten"], "steps"),
        (["steps=0"], "steps"),
        (["enable_checkpointing=maybe"], "enable_checkpointing"),
        (["base_emb_dim=30", "base_num_query_heads=4"], "base_num_query_heads"),
        (["elastic_enabled=true"], "enable_single_controller"),
        (["elastic_enabled=true", "enable_single_controller=true", "elastic_max_retries=0"], "elastic_max_retries"),
        (["num_slices=2", "elastic_min_slice_count=3"], "elastic_min_slice_count"),
        (["max_num_checkpoints_to_keep=0"], "max_num_checkpoints_to_keep"),
        (["noequals"], "noequals"),
    ],
)
def test_invalid_train_keys(args: list[str], key: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_args(TrainConfig, ["base_output_directory=/tmp/o", "run_name=r", *args])
    assert error.value.key == key


def test_checkpointing_needs_an_output_directory() -> None:
    with pytest.raises(ConfigError, match="base_output_directory"):
        parse_args(TrainConfig, ["run_name=r"])
    assert parse_args(TrainConfig, ["run_name=r", "enable_checkpointing=false"]).steps > 0


def test_eval_and_synthesize_keys() -> None:
    base = ["base_output_directory=/tmp/o", "run_name=r"]
    assert parse_args(EvalConfig, [*base, "checkpoint_step=20"]).checkpoint_step == 20
    assert parse_args(SynthesizeConfig, [*base, "temperature=0.5"]).temperature == 0.5
    with pytest.raises(ConfigError, match="steps"):
        parse_args(EvalConfig, [*base, "steps=3"])
    with pytest.raises(ConfigError, match="temperature"):
        parse_args(SynthesizeConfig, [*base, "temperature=-1"])


def test_bad_config_exits_2_with_the_key() -> None:
    result = run_module("local.workloads.train", ["base_output_directory=/tmp/o", "stepz=3"], timeout=60)
    assert result.returncode == 2
    assert "stepz" in result.stderr


def test_elastic_without_single_controller_exits_2_with_maxtexts_message() -> None:
    result = run_module(
        "local.workloads.train", ["base_output_directory=/tmp/o", "run_name=r", "elastic_enabled=true"], timeout=60
    )
    assert result.returncode == 2
    assert "enable_single_controller" in result.stderr
    assert ELASTIC_NEEDS_SINGLE_CONTROLLER in result.stderr
