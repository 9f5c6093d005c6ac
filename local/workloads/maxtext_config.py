"""Stock MaxText's trainer command line, `<config.yml> key=value ...`, read the way MaxText reads it.

Follows AI-Hypercomputer/maxtext `src/maxtext/configs/pyconfig.py` at e591f30 (2026-08-22):
- the first argument is the config file when it ends in `.yml` (`_resolve_or_infer_config`); the rest are
  OmegaConf `key=value` overrides;
- a key outside MaxText's config is refused (`_prepare_for_pydantic`): it logs
  `Ignoring invalid/unsupported field from YAML/CLI: '<key>'`, then raises
  `ValueError("'<key>' not in '<k1>', '<k2>', ….")`, which `_handle_config_exception` logs between two lines
  of 80 `=` as `MAXTEXT CONFIG ERROR: <message>` and re-raises (exit code 1 with a traceback: it exits 2 only
  when neither `pytest` nor `unittest` is imported, and the trainer's imports load `unittest` through JAX's
  `etils.epath`; measured with MaxText 0.2.5, tests/local/workloads/test_maxtext_contract.py). An invalid value
  (pydantic's validation) and MaxText's own rules (`Elastic training is only supported with Pathways
  (enable_single_controller=True).`) take the same path.

MaxText's keys are data: `data/maxtext_keys.txt`, every key of `src/maxtext/configs/base.yml` at that commit
(its SOURCE and COMMIT in the file's header). The local trainer models some of them (`MODELLED`) and logs
the others as accepted but not modelled. The config file named in the manifest is MaxText's, inside the
image (`src/maxtext/configs/base.yml`); the local stand-in's copy of it has the same keys with a small
model's defaults (those of `local.workloads.config.TrainConfig`). A `.yml` path that exists on this machine
is read instead, and its keys are checked like the command line's.

Knobs MaxText does not have (fault injection, step sleeps, devices per slice, the slice-health poll) are
never command-line keys: they come from the environment (`LOCAL_ENV`), as a test sets them through the
trainer container's env.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Final

import yaml

from elastic_training.local.workloads.config import ConfigError, TrainConfig, parse_args

# What MaxText's trainer exits with on a refused configuration: an uncaught ValueError (see the module's docstring).
MAXTEXT_EXIT_CONFIG_ERROR: Final = 1
MAXTEXT_IMAGE_CONFIG_PREFIXES: Final = ("src/maxtext/configs/", "maxtext/configs/", "/deps/src/maxtext/configs/")

# MaxText key -> TrainConfig field, for the keys the local trainer models.
MODELLED: Final[Mapping[str, str]] = {
    **{
        name: name
        for name in (
            "base_output_directory",
            "run_name",
            "base_emb_dim",
            "base_num_decoder_layers",
            "base_num_query_heads",
            "vocab_size",
            "max_target_length",
            "per_device_batch_size",
            "steps",
            "learning_rate",
            "enable_checkpointing",
            "async_checkpointing",
            "checkpoint_period",
            "save_checkpoint_on_completion",
            "max_num_checkpoints_to_keep",
            "checkpoint_storage_use_ocdbt",
            "checkpoint_storage_use_zarr3",
            "enable_single_controller",
            "elastic_enabled",
            "elastic_min_slice_count",
            "elastic_timeout_seconds",
            "elastic_max_retries",
            "jax_cache_dir",
        )
    },
    "init_weights_seed": "seed",
}

# Local-only knobs: environment variable -> TrainConfig field.
LOCAL_ENV: Final[Mapping[str, str]] = {
    "LOCAL_DEVICES_PER_SLICE": "devices_per_slice",
    "LOCAL_ELASTIC_POLL_INTERVAL_SECONDS": "elastic_poll_interval_seconds",
}

# MaxText's num_slices: -1 means "from the devices", which on Pathways is the resource manager's count.
NUM_SLICES_KEY: Final = "num_slices"


class MaxTextConfigError(ValueError):
    """What MaxText's pyconfig raises for a bad configuration: `MAXTEXT CONFIG ERROR: …`, then exit 1."""

    def __init__(self, message: str, unknown_key: str | None = None) -> None:
        super().__init__(message)
        self.unknown_key = unknown_key


@dataclasses.dataclass(frozen=True)
class MaxTextCommandLine:
    """A parsed command line: the config file (if any) and every key in order (file first, then overrides)."""

    config_file: str | None
    keys: Mapping[str, str]

    def modelled(self) -> dict[str, str]:
        """The keys the local trainer uses, under their TrainConfig names."""
        return {MODELLED[key]: value for key, value in self.keys.items() if key in MODELLED}

    def ignored(self) -> dict[str, str]:
        """Keys MaxText accepts that the local trainer does not model (logged, not used)."""
        return {key: value for key, value in self.keys.items() if key not in MODELLED and key != NUM_SLICES_KEY}

    @property
    def num_slices(self) -> int:
        """MaxText's `num_slices` (-1, the default: from the devices, i.e. from Pathways)."""
        value = self.keys.get(NUM_SLICES_KEY, "-1")
        try:
            return int(value)
        except ValueError:
            raise MaxTextConfigError(f"num_slices: invalid int value {value!r}") from None


@cache
def maxtext_keys() -> tuple[str, ...]:
    """Every key of MaxText's base.yml at the pinned commit, in file order."""
    text = resources.files("elastic_training.local.workloads").joinpath("data/maxtext_keys.txt").read_text()
    return tuple(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


def maxtext_commit() -> str:
    """The MaxText commit the key list was read at (the data file's COMMIT line)."""
    text = resources.files("elastic_training.local.workloads").joinpath("data/maxtext_keys.txt").read_text()
    for line in text.splitlines():
        if line.startswith("# COMMIT:"):
            return line.split(":", 1)[1].split()[0]
    raise RuntimeError("data/maxtext_keys.txt has no COMMIT line")


def unknown_key_message(key: str) -> str:
    """MaxText's exact ValueError text for an unknown key."""
    return f"{key!r} not in {', '.join(map(repr, maxtext_keys()))}."


def parse_command_line(argv: Sequence[str]) -> MaxTextCommandLine:
    """Split `[config.yml] key=value ...` and refuse any key MaxText would refuse."""
    args = list(argv)
    config_file = args.pop(0) if args and args[0].endswith(".yml") else None
    keys: dict[str, str] = {}
    if config_file is not None:
        keys.update(_config_file_keys(config_file))
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or not key:
            raise MaxTextConfigError(f"Invalid override {arg!r}: expected key=value")
        keys[key] = value
    known = frozenset(maxtext_keys())
    for key in keys:
        if key not in known:
            raise MaxTextConfigError(unknown_key_message(key), unknown_key=key)
    return MaxTextCommandLine(config_file, keys)


def _config_file_keys(path: str) -> dict[str, str]:
    local = Path(path)
    if not local.is_file() and path.startswith(MAXTEXT_IMAGE_CONFIG_PREFIXES):
        return {}  # MaxText's own config in the image: the stand-in's copy has every key, small defaults
    try:
        loaded = yaml.safe_load(local.read_text())
    except OSError as error:
        raise MaxTextConfigError(str(error)) from error
    except yaml.YAMLError as error:
        raise MaxTextConfigError(f"cannot parse {path}: {error}") from error
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise MaxTextConfigError(f"{path} must hold a mapping of keys")
    return {str(key): "None" if value is None else _text(value) for key, value in loaded.items()}


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def train_config(command: MaxTextCommandLine, env: Mapping[str, str], num_slices: int) -> TrainConfig:
    """The local trainer's config: the modelled keys, the local knobs from `env`, and `num_slices`."""
    values = command.modelled()
    for name, field in LOCAL_ENV.items():
        if env.get(name):
            values[field] = env[name]
    values["num_slices"] = str(num_slices)
    try:
        return parse_args(TrainConfig, [f"{key}={value}" for key, value in values.items()], env)
    except ConfigError as error:
        key = next((k for k, v in MODELLED.items() if v == error.key), error.key)
        if error.message.endswith("(enable_single_controller=True)."):
            raise MaxTextConfigError(error.message) from error
        raise MaxTextConfigError(f"{key}: {error.message}") from error
