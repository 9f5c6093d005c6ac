"""MaxText-style key=value parsing and validation; bad configs exit 2 naming the key."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from elastic_training.local.workloads.config import (
    ELASTIC_NEEDS_SINGLE_CONTROLLER,
    ConfigError,
    EvalConfig,
    SynthesizeConfig,
    TrainConfig,
    parse_args,
)
from tests.support.workload_processes import REPO, run_module


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
    result = run_module(
        "elastic_training.local.workloads.train", ["base_output_directory=/tmp/o", "stepz=3"], timeout=60
    )
    assert result.returncode == 2
    assert "stepz" in result.stderr


def test_elastic_without_single_controller_exits_2_with_maxtexts_message() -> None:
    result = run_module(
        "elastic_training.local.workloads.train",
        ["base_output_directory=/tmp/o", "run_name=r", "elastic_enabled=true"],
        timeout=60,
    )
    assert result.returncode == 2
    assert "enable_single_controller" in result.stderr
    assert ELASTIC_NEEDS_SINGLE_CONTROLLER in result.stderr


# Every key the issue lists for `python -m elastic_training.local.workloads.train` (MaxText's names): a valid value
# as text,
# what it parses to, and an invalid value. The table is checked against the dataclass, so a key cannot
# silently drop out of either.
_MAXTEXT_TRAIN_KEYS: dict[str, tuple[str, object, str | None]] = {
    "run_name": ("my-run", "my-run", None),  # "" is valid too (falls back to JOBSET_NAME)
    "base_output_directory": ("gs://bucket/base", "gs://bucket/base", ""),  # required when checkpointing
    "steps": ("5", 5, "-1"),
    "checkpoint_period": ("3", 3, "0"),
    "enable_checkpointing": ("true", True, "sometimes"),
    "async_checkpointing": ("False", False, "2"),
    "save_checkpoint_on_completion": ("no", False, "maybe"),
    "max_num_checkpoints_to_keep": ("2", 2, "0"),
    "per_device_batch_size": ("4", 4, "0"),
    "learning_rate": ("0.01", 0.01, "nan"),
    "base_emb_dim": ("32", 32, "0"),
    "base_num_decoder_layers": ("1", 1, "0"),
    "base_num_query_heads": ("2", 2, "3"),  # 3 does not divide the default width 64
    "vocab_size": ("64", 64, "4"),
    "max_target_length": ("16", 16, "1"),
    "elastic_enabled": ("false", False, "on"),
    "enable_single_controller": ("True", True, "yes please"),
    "elastic_min_slice_count": ("-1", -1, "0"),
    "elastic_timeout_seconds": ("30", 30.0, "inf"),
    "elastic_max_retries": ("3", 3, "0"),
}


def test_the_table_covers_every_maxtext_key_of_the_issue() -> None:
    assert set(_MAXTEXT_TRAIN_KEYS) <= {f.name for f in dataclasses.fields(TrainConfig)}
    assert len(_MAXTEXT_TRAIN_KEYS) == 20


@pytest.mark.parametrize("key", sorted(_MAXTEXT_TRAIN_KEYS))
def test_every_maxtext_key_is_accepted_and_validated(key: str) -> None:
    valid, expected, invalid = _MAXTEXT_TRAIN_KEYS[key]
    base = {"base_output_directory": "/tmp/o", "run_name": "r"}
    accepted = parse_args(TrainConfig, [f"{k}={v}" for k, v in {**base, key: valid}.items()], env={})
    assert getattr(accepted, key) == expected
    assert type(getattr(accepted, key)) is type(expected)
    if invalid is None:
        return
    with pytest.raises(ConfigError) as error:
        parse_args(TrainConfig, [f"{k}={v}" for k, v in {**base, key: invalid}.items()], env={})
    assert error.value.key == key


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_numbers_are_invalid(value: str) -> None:
    for config_class, key in ((TrainConfig, "learning_rate"), (SynthesizeConfig, "temperature")):
        with pytest.raises(ConfigError, match="invalid float") as error:
            parse_args(config_class, ["base_output_directory=/tmp/o", "run_name=r", f"{key}={value}"])
        assert error.value.key == key


def test_elastic_rule_is_maxtexts_and_single_controller_turns_off_ocdbt() -> None:
    base = ["base_output_directory=/tmp/o", "run_name=r"]
    with pytest.raises(ConfigError) as error:
        parse_args(TrainConfig, [*base, "elastic_enabled=true", "enable_single_controller=false"])
    assert (error.value.key, error.value.message) == ("enable_single_controller", ELASTIC_NEEDS_SINGLE_CONTROLLER)
    elastic = parse_args(TrainConfig, [*base, "elastic_enabled=true", "enable_single_controller=true"])
    assert elastic.elastic_max_retries == 10 and elastic.elastic_timeout_seconds == 300
    assert elastic.storage_format == (False, False)
    assert parse_args(TrainConfig, base).storage_format == (True, True)


@pytest.mark.parametrize(
    "module", ["elastic_training.local.workloads.evaluate", "elastic_training.local.workloads.synthesize"]
)
def test_readers_exit_2_on_an_unknown_key(module: str) -> None:
    result = run_module(module, ["base_output_directory=/tmp/o", "run_name=r", "checkpoint_stepp=3"])
    assert result.returncode == 2
    assert "Invalid config: checkpoint_stepp: unknown key" in result.stderr


def test_every_key_is_documented() -> None:
    doc = (REPO / "docs" / "workloads.md").read_text()
    for config_class in (TrainConfig, EvalConfig, SynthesizeConfig):
        for field in dataclasses.fields(config_class):
            assert f"`{field.name}`" in doc, f"{config_class.__name__}.{field.name} is not in docs/workloads.md"
