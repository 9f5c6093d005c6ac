"""Stock MaxText's command line: every pinned key accepted, unknown keys refused with MaxText's text and exit 2."""

from __future__ import annotations

import re

import pytest
import yaml

from elastic_training.local.workloads.maxtext_config import (
    LOCAL_ENV,
    MAXTEXT_EXIT_CONFIG_ERROR,
    MODELLED,
    MaxTextConfigError,
    maxtext_commit,
    maxtext_keys,
    parse_command_line,
    train_config,
    unknown_key_message,
)
from tests.support.workload_processes import run_module

BASE = "src/maxtext/configs/base.yml"


def test_key_list_is_pinned_and_holds_the_keys_the_operator_renders() -> None:
    assert re.fullmatch(r"[0-9a-f]{40}", maxtext_commit())
    keys = maxtext_keys()
    assert len(keys) == len(set(keys)) > 600
    for key in (*MODELLED, "num_slices", "checkpoint_period", "enable_single_controller", "model_name"):
        assert key in keys
    # Local knobs are never MaxText keys.
    for field in ("devices_per_slice", "elastic_poll_interval_seconds", "seed"):
        assert field not in keys
    assert all(name.lower().removeprefix("local_") not in keys for name in LOCAL_ENV)


def test_every_maxtext_key_is_accepted_and_unmodelled_ones_are_reported() -> None:
    command = parse_command_line([BASE, *(f"{key}=1" for key in maxtext_keys())])
    assert set(command.keys) == set(maxtext_keys())
    assert "model_name" in command.ignored() and "steps" not in command.ignored()
    assert command.modelled()["seed"] == "1"  # init_weights_seed


def test_unknown_key_is_refused_with_maxtexts_message() -> None:
    with pytest.raises(MaxTextConfigError) as raised:
        parse_command_line([BASE, "steps=5", "num_devices=8"])
    assert raised.value.unknown_key == "num_devices"
    message = str(raised.value)
    assert message == unknown_key_message("num_devices")
    assert message.startswith("'num_devices' not in 'run_name', 'model_name', ")
    assert message.endswith("'elastic_min_slice_count'.")


def test_local_knobs_come_from_the_environment_and_slices_from_the_caller() -> None:
    command = parse_command_line([BASE, "steps=7", "base_output_directory=/tmp/x", "run_name=r"])
    config = train_config(command, {"LOCAL_DEVICES_PER_SLICE": "2", "LOCAL_ELASTIC_POLL_INTERVAL_SECONDS": "0.2"}, 3)
    assert (config.steps, config.num_slices, config.devices_per_slice) == (7, 3, 2)
    assert config.elastic_poll_interval_seconds == 0.2


def test_a_local_config_file_is_read_and_checked(tmp_path: object) -> None:
    path = f"{tmp_path}/mine.yml"
    with open(path, "w") as handle:
        yaml.safe_dump({"steps": 4, "max_num_checkpoints_to_keep": None}, handle)
    assert parse_command_line([path, "steps=5"]).keys == {"steps": "5", "max_num_checkpoints_to_keep": "None"}
    with open(path, "w") as handle:
        yaml.safe_dump({"stepz": 4}, handle)
    with pytest.raises(MaxTextConfigError, match=r"^'stepz' not in "):
        parse_command_line([path])


def test_invalid_values_and_maxtexts_elastic_rule_are_config_errors() -> None:
    command = parse_command_line([BASE, "steps=lots", "base_output_directory=/tmp/x"])
    with pytest.raises(MaxTextConfigError, match=r"^steps: invalid int value 'lots'"):
        train_config(command, {}, 1)
    command = parse_command_line([BASE, "elastic_enabled=true", "base_output_directory=/tmp/x"])
    with pytest.raises(MaxTextConfigError, match=re.escape("only supported with Pathways (enable_single_controller")):
        train_config(command, {}, 1)


def test_the_entry_point_exits_1_with_maxtexts_banner_and_its_traceback() -> None:
    done = run_module("elastic_training.local.workloads.maxtext_train", [BASE, "steps=2", "num_devices=8"])
    assert done.returncode == 1 == MAXTEXT_EXIT_CONFIG_ERROR
    assert "Traceback" in done.stderr and "ValueError: 'num_devices' not in 'run_name'," in done.stderr
    lines = done.stdout.splitlines()
    assert any(line.endswith("Ignoring invalid/unsupported field from YAML/CLI: 'num_devices'") for line in lines)
    error = next(i for i, line in enumerate(lines) if "MAXTEXT CONFIG ERROR: 'num_devices' not in 'run_name'," in line)
    assert lines[error - 1].endswith("=" * 80) and lines[error + 1].endswith("=" * 80)
