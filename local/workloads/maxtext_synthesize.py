"""`python -m elastic_training.local.workloads.maxtext_synthesize [flags] <MaxText config> key=value ...`: the local
synthesis stand-in.

Takes the command line of the project's shipped synthesis program (`python3 -m maxtext_synthesize`,
deploy/images/maxtext-synthesize/maxtext_synthesize.py: `--num_samples`, `--sample_seed`,
`--output_directory`, then a MaxText config file and MaxText keys) and writes what it writes
(`samples.jsonl`, then `manifest.json`), with the local model (local/workloads/synthesize.py).

The MaxText keys are held to MaxText's rules as the program meets them (AI-Hypercomputer/maxtext at
e591f30cbbf217ed67ef71263ec0538239f9c3b8): `src/maxtext/configs/pyconfig.py` refuses a key it does not
know; `src/maxtext/inference/offline_engine.py` (`OfflineEngine._validate_config`) refuses
`return_log_prob` false and `max_target_length <= max_prefill_predict_length`;
`src/maxtext/configs/base.yml` names the sampling strategies (greedy, weighted, nucleus, topk,
composite) and the tokenizer types (`tokenizer_type`: "Currently supporting: tiktoken, sentencepiece,
huggingface"). A key not in MaxText's list (local/workloads/data/maxtext_keys.txt) exits 2 with MaxText's own
message; a MaxText key the stand-in does not model (below) exits 2 saying so. The config file is taken as
MaxText's (it is not read here), and `load_parameters_path` must be `<run>/checkpoints/<step>/items` of a
committed step (else exit 1).

Local: the model has no tokenizer, so each sample's prompt is one token drawn from `--sample_seed` (the
real program starts from MaxText's `prompt`) and `tokenizer_path` is taken and not loaded (`tokenizer_type`
must be one MaxText knows); `weighted` samples at `decode_sampling_temperature`,
`greedy` takes the argmax; the model size keys (`base_emb_dim`, `base_num_decoder_layers`,
`base_num_query_heads`, `vocab_size`, `max_target_length`) must match the trained model, as in MaxText.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from elastic_training.local.workloads.config import ConfigError, SynthesizeConfig, run_main
from elastic_training.local.workloads.inference import reader_main_with
from elastic_training.local.workloads.maxtext_config import maxtext_keys, unknown_key_message
from elastic_training.local.workloads.synthesize import synthesize

_KEY_VALUE = re.compile(r"^(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)\Z", re.DOTALL)
_CHECKPOINT_PATH = re.compile(r"^(?P<run>.+)/checkpoints/(?P<step>\d+)/items/?\Z")
_TRUE = frozenset({"true", "1"})
_FALSE = frozenset({"false", "0"})
_MODEL_KEYS = ("base_emb_dim", "base_num_decoder_layers", "base_num_query_heads", "vocab_size", "max_target_length")
STRATEGIES = ("greedy", "weighted", "nucleus", "topk", "composite")
LOCAL_STRATEGIES = ("greedy", "weighted")
TOKENIZER_TYPES = ("tiktoken", "sentencepiece", "huggingface")
# The MaxText keys the stand-in models, with their MaxText defaults where the local model has none.
KNOWN_KEYS = frozenset(
    {
        "run_name",
        "base_output_directory",
        "load_parameters_path",
        "model_name",
        "per_device_batch_size",
        "max_target_length",
        "max_prefill_predict_length",
        "return_log_prob",
        "decode_sampling_strategy",
        "decode_sampling_temperature",
        "base_emb_dim",
        "base_num_decoder_layers",
        "base_num_query_heads",
        "vocab_size",
        "tokenizer_type",
        "tokenizer_path",
    }
)


def build_parser() -> argparse.ArgumentParser:
    """The shipped program's flags (deploy/images/maxtext-synthesize/maxtext_synthesize.py)."""
    parser = argparse.ArgumentParser(prog="maxtext_synthesize", allow_abbrev=False)
    parser.add_argument("--num_samples", type=int, required=True)
    parser.add_argument("--sample_seed", type=int, default=0)
    parser.add_argument("--output_directory", required=True)
    parser.add_argument("maxtext_config")
    parser.add_argument("maxtext_keys", nargs="*")
    return parser


def _integer(key: str, value: str, low: int = 1) -> int:
    try:
        number = int(float(value)) if key == "per_device_batch_size" else int(value)
    except ValueError:
        raise ConfigError(key, f"expected an integer, got {value!r}") from None
    if number < low:
        raise ConfigError(key, f"must be at least {low}, got {number}")
    return number


def _boolean(key: str, value: str) -> bool:
    word = value.strip().lower()
    if word in _TRUE | _FALSE:
        return word in _TRUE
    raise ConfigError(key, f"expected true or false, got {value!r}")


def _maxtext_keys(items: Sequence[str]) -> dict[str, str]:
    """The ``key=value`` arguments, each a MaxText key the stand-in models."""
    keys: dict[str, str] = {}
    for item in items:
        match = _KEY_VALUE.match(item)
        if not match:
            raise ConfigError(item, "expected key=value")
        if match["key"] not in maxtext_keys():
            raise ConfigError(match["key"], unknown_key_message(match["key"]))
        if match["key"] not in KNOWN_KEYS:
            raise ConfigError(match["key"], "a MaxText key the local synthesis stand-in does not model")
        keys[match["key"]] = match["value"]
    return keys


def _sampling_temperature(keys: Mapping[str, str]) -> float:
    """The sampling temperature the keys ask for: 0 for greedy decoding."""
    tokenizer = keys.get("tokenizer_type", "sentencepiece")
    if tokenizer not in TOKENIZER_TYPES:
        raise ConfigError("tokenizer_type", f"must be one of {', '.join(TOKENIZER_TYPES)}, got {tokenizer!r}")
    strategy = keys.get("decode_sampling_strategy", "greedy")
    if strategy not in STRATEGIES:
        raise ConfigError("decode_sampling_strategy", f"must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if strategy not in LOCAL_STRATEGIES:
        raise ConfigError("decode_sampling_strategy", f"the local stand-in samples {' or '.join(LOCAL_STRATEGIES)}")
    try:
        temperature = float(keys.get("decode_sampling_temperature", "1.0"))
    except ValueError:
        raise ConfigError("decode_sampling_temperature", "expected a number") from None
    if not temperature > 0:
        raise ConfigError("decode_sampling_temperature", f"must be positive, got {temperature}")
    return 0.0 if strategy == "greedy" else temperature


def to_config(argv: Sequence[str]) -> SynthesizeConfig:
    """The local synthesis settings from the program's command line; `ConfigError` names the key or flag."""
    args = build_parser().parse_args(list(argv))
    if args.num_samples < 1:
        raise ConfigError("--num_samples", "must be at least 1")
    if "=" in args.maxtext_config:
        raise ConfigError(args.maxtext_config, "the first positional argument must be a MaxText config file")
    keys = _maxtext_keys(args.maxtext_keys)
    path = keys.get("load_parameters_path", "")
    checkpoint = _CHECKPOINT_PATH.match(path)
    if not checkpoint:
        raise ConfigError("load_parameters_path", f"expected <run directory>/checkpoints/<step>/items, got {path!r}")
    base, _, run_name = checkpoint["run"].rstrip("/").rpartition("/")
    if keys.get("model_name", "default") != "default":
        raise ConfigError("model_name", f"the local trainer has one model, 'default'; got {keys['model_name']!r}")
    if not _boolean("return_log_prob", keys.get("return_log_prob", "false")):
        raise ConfigError("return_log_prob", "must be True when using OfflineEngine")
    temperature = _sampling_temperature(keys)
    dims: dict[str, Any] = {key: _integer(key, keys[key]) for key in _MODEL_KEYS if key in keys}
    if "per_device_batch_size" in keys:
        _integer("per_device_batch_size", keys["per_device_batch_size"])
    length = dims.get("max_target_length", SynthesizeConfig.max_target_length)
    prefill = _integer("max_prefill_predict_length", keys.get("max_prefill_predict_length", "64"))
    if length <= prefill:
        raise ConfigError(
            "max_target_length",
            f"Make sure max_target_length - max_prefill_predict_length is greater than 0 ({length} <= {prefill})",
        )
    config = SynthesizeConfig(
        base_output_directory=base,
        run_name=run_name,
        checkpoint_step=int(checkpoint["step"]),
        num_samples=args.num_samples,
        temperature=temperature,
        sample_seed=args.sample_seed,
        synthetic_output_directory=args.output_directory,
        **dims,
    )
    config.validate()
    return config


def main(argv: Sequence[str]) -> int:
    """Parse the program's command line and synthesize; 1 when the checkpoint is missing."""
    return reader_main_with(to_config(argv), synthesize)


if __name__ == "__main__":
    sys.exit(run_main(main))
