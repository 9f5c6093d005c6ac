"""MaxText-style `key=value` configuration for the local workloads.

The trainer, the evaluator and the synthesizer each take a frozen dataclass of settings parsed from
MaxText-style arguments (`python -m elastic_training.local.workloads.train [config.yml] key=value ...`). An unknown
key or
an invalid value raises `ConfigError`, which the entry points turn into exit code 2 naming the key.

This module must not import JAX: the trainer reads the slice layout from the config before JAX starts,
because the number of host CPU devices is fixed when the XLA backend initialises.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

EXIT_CONFIG_ERROR = 2

ELASTIC_NEEDS_SINGLE_CONTROLLER = "Elastic training is only supported with Pathways (enable_single_controller=True)."


class ConfigError(ValueError):
    """A configuration key is unknown or has an invalid value."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Model size and data keys shared by training, evaluation and synthesis (MaxText names)."""

    base_output_directory: str = ""
    run_name: str = ""
    base_emb_dim: int = 64
    base_num_decoder_layers: int = 2
    base_num_query_heads: int = 4
    vocab_size: int = 128
    max_target_length: int = 32
    per_device_batch_size: int = 8
    # MaxText's default (base.yml): JAX's persistent compilation cache, so a restarted process reuses the
    # compiled step instead of compiling it again; "" turns it off.
    jax_cache_dir: str = "~/jax_cache"
    # Local extension: seed of parameter initialisation (the corpus has its own fixed seed).
    seed: int = 0

    def validate(self) -> None:
        """Raise `ConfigError` for the first invalid value."""
        _positive(self, "base_emb_dim", "base_num_decoder_layers", "base_num_query_heads")
        _positive(self, "per_device_batch_size")
        if self.base_emb_dim % self.base_num_query_heads:
            raise ConfigError("base_num_query_heads", "must divide base_emb_dim")
        if self.vocab_size < 8:
            raise ConfigError("vocab_size", "must be at least 8")
        if self.max_target_length < 2:
            raise ConfigError("max_target_length", "must be at least 2")

    @property
    def run_directory(self) -> str:
        """`<base_output_directory>/<run_name>` (a local path or a gs:// URL)."""
        return join_path(self.base_output_directory, self.run_name)

    @property
    def checkpoint_directory(self) -> str:
        """`<base_output_directory>/<run_name>/checkpoints`: the Orbax CheckpointManager root."""
        return join_path(self.run_directory, "checkpoints")


@dataclasses.dataclass(frozen=True)
class TrainConfig(ModelConfig):
    """Keys of `python -m elastic_training.local.workloads.train` (MaxText names unless marked local)."""

    steps: int = 60
    learning_rate: float = 3e-3
    enable_checkpointing: bool = True
    async_checkpointing: bool = True
    checkpoint_period: int = 10
    save_checkpoint_on_completion: bool = True
    max_num_checkpoints_to_keep: int | None = None
    checkpoint_storage_use_ocdbt: bool = True
    checkpoint_storage_use_zarr3: bool = True
    enable_single_controller: bool = False
    elastic_enabled: bool = False
    elastic_min_slice_count: int = -1
    elastic_timeout_seconds: float = 300.0
    elastic_max_retries: int = 10
    # Local extensions: the slice layout (JAX CPU devices grouped into slices) and how often slice
    # health is polled (pathwaysutils' default of 10 s is too slow for a laptop-sized demo).
    num_slices: int = 1
    devices_per_slice: int = 1
    elastic_poll_interval_seconds: float = 0.5

    def validate(self) -> None:
        """Raise `ConfigError` for the first invalid value, MaxText's elastic rule included."""
        super().validate()
        _positive(self, "steps", "checkpoint_period", "num_slices", "devices_per_slice")
        if self.learning_rate <= 0:
            raise ConfigError("learning_rate", "must be positive")
        if self.enable_checkpointing and not self.base_output_directory:
            raise ConfigError("base_output_directory", "is required when enable_checkpointing=true")
        if self.max_num_checkpoints_to_keep is not None and self.max_num_checkpoints_to_keep < 1:
            raise ConfigError("max_num_checkpoints_to_keep", "must be at least 1 (or unset)")
        if self.elastic_enabled and not self.enable_single_controller:
            raise ConfigError("enable_single_controller", ELASTIC_NEEDS_SINGLE_CONTROLLER)
        if self.elastic_min_slice_count != -1 and not 1 <= self.elastic_min_slice_count <= self.num_slices:
            raise ConfigError("elastic_min_slice_count", f"must be -1 or 1..num_slices ({self.num_slices})")
        if self.elastic_timeout_seconds <= 0:
            raise ConfigError("elastic_timeout_seconds", "must be positive")
        if self.elastic_max_retries < 1:
            raise ConfigError("elastic_max_retries", "must be at least 1 (it counts attempts)")
        if self.elastic_poll_interval_seconds <= 0:
            raise ConfigError("elastic_poll_interval_seconds", "must be positive")

    @property
    def storage_format(self) -> tuple[bool, bool]:
        """(use_ocdbt, use_zarr3) as MaxText applies them: both off on Pathways (single controller)."""
        if self.enable_single_controller:
            return False, False
        return self.checkpoint_storage_use_ocdbt, self.checkpoint_storage_use_zarr3

    @property
    def device_count(self) -> int:
        """JAX CPU devices the trainer needs: every slice's devices."""
        return self.num_slices * self.devices_per_slice

    @property
    def minimum_slice_count(self) -> int | None:
        """pathwaysutils' `minimum_slice_count`: None (wait for all) when the key is -1, as MaxText maps it."""
        return None if self.elastic_min_slice_count == -1 else self.elastic_min_slice_count


@dataclasses.dataclass(frozen=True)
class CheckpointReaderConfig(ModelConfig):
    """Keys of the entry points that read one committed checkpoint of a run."""

    # -1: the newest committed step.
    checkpoint_step: int = -1

    def validate(self) -> None:
        """Raise `ConfigError` for the first invalid value."""
        super().validate()
        if not self.base_output_directory:
            raise ConfigError("base_output_directory", "is required")
        if self.checkpoint_step < -1:
            raise ConfigError("checkpoint_step", "must be -1 (newest committed) or a step number")


@dataclasses.dataclass(frozen=True)
class EvalConfig(CheckpointReaderConfig):
    """Keys of `python -m elastic_training.local.workloads.evaluate`."""

    eval_batches: int = 8
    # Default: <run directory>/eval/step_<N>.json
    eval_output_file: str = ""

    def validate(self) -> None:
        """Raise `ConfigError` for the first invalid value."""
        super().validate()
        _positive(self, "eval_batches")


@dataclasses.dataclass(frozen=True)
class SynthesizeConfig(CheckpointReaderConfig):
    """Keys of `python -m elastic_training.local.workloads.synthesize`."""

    num_samples: int = 16
    temperature: float = 1.0
    sample_seed: int = 0
    # Tokens per sample including the prompt token; 0 means max_target_length.
    sample_length: int = 0
    # Default: <run directory>/synthetic/step_<N>
    synthetic_output_directory: str = ""

    def validate(self) -> None:
        """Raise `ConfigError` for the first invalid value."""
        super().validate()
        _positive(self, "num_samples")
        if self.temperature < 0:
            raise ConfigError("temperature", "must be >= 0 (0 is greedy)")
        if not 0 <= self.sample_length <= self.max_target_length:
            raise ConfigError("sample_length", f"must be 0..max_target_length ({self.max_target_length})")


_C = TypeVar("_C", bound=ModelConfig)


def parse_args(cls: type[_C], argv: Sequence[str], env: Mapping[str, str] | None = None) -> _C:
    """Build and validate a `cls` from MaxText-style arguments.

    The first argument may be a YAML file of keys (as MaxText takes `base.yml`); `key=value` arguments
    override it. An empty `run_name` falls back to the `JOBSET_NAME` environment variable, then to a
    timestamped name, as MaxText does.
    """
    env = os.environ if env is None else env
    raw: dict[str, Any] = {}
    args = list(argv)
    if args and "=" not in args[0]:
        raw.update(_read_yaml(args.pop(0)))
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or not key:
            raise ConfigError(arg, "expected key=value")
        raw[key] = value
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known:
            raise ConfigError(key, f"unknown key for {cls.__name__}")
        values[key] = _convert(key, value, hints[key])
    if not values.get("run_name"):
        values["run_name"] = env.get("JOBSET_NAME") or f"local_{time.strftime('%Y-%m-%d-%H-%M')}"
    config = cls(**values)
    config.validate()
    return config


def run_main(main: Callable[[Sequence[str]], int], argv: Sequence[str] | None = None) -> int:
    """Run an entry point, turning `ConfigError` into exit code 2 with a message naming the key."""
    try:
        return main(sys.argv[1:] if argv is None else argv)
    except ConfigError as error:
        print(f"Invalid config: {error.key}: {error.message}", file=sys.stderr, flush=True)
        return EXIT_CONFIG_ERROR


def join_path(base: str, *parts: str) -> str:
    """Join path parts with `/`, for local paths and gs:// URLs alike."""
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])


def _read_yaml(path: str) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(path, f"cannot read config file: {error}") from error
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(path, "config file must hold a mapping of keys")
    return {str(k): v for k, v in loaded.items()}


_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


def _convert(key: str, value: Any, hint: Any) -> Any:
    args = typing.get_args(hint)
    optional = type(None) in args
    target = next((a for a in args if a is not type(None)), hint) if optional else hint
    if optional and (value is None or (isinstance(value, str) and value.lower() in {"none", "null", ""})):
        return None
    text = str(value).strip()
    try:
        if target is bool:
            if isinstance(value, bool):
                return value
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise ValueError(text)
        if target is int:
            return int(text)
        if target is float:
            number = float(text)
            if not math.isfinite(number):
                raise ValueError(text)
            return number
    except ValueError:
        raise ConfigError(key, f"invalid {target.__name__} value {text!r}") from None
    return text


def _positive(config: object, *keys: str) -> None:
    for key in keys:
        if getattr(config, key) < 1:
            raise ConfigError(key, "must be at least 1")
