"""`python3 -m maxtext_synthesize [flags] <MaxText config> key=value ...`: synthetic samples from a MaxText checkpoint.

The pipeline's synthesis stage on GKE, shipped in the image built by this directory's Dockerfile (on top
of a MaxText image). Stock MaxText has no batch-generation command: its decoder
(`src/maxtext/inference/decode.py`, `main`) takes one prompt (`prompt` key) and writes no file, and batch
generation is a library API, `OfflineEngine(config, ...).batch_inference(data, rng=...)`
(`src/maxtext/inference/offline_engine.py`), which this program drives. Followed at MaxText commit
e591f30cbbf217ed67ef71263ec0538239f9c3b8 (AI-Hypercomputer/maxtext):

- the MaxText arguments go to `maxtext.configs.pyconfig.initialize([argv0, config, key=value, ...])`
  unchanged, which refuses a key MaxText does not know (`pyconfig.py`: `'<key>' not in ...`), so this
  program's own settings are `--flags` before them and never MaxText keys;
- `OfflineEngine` requires `return_log_prob=True` and `max_target_length > max_prefill_predict_length`
  (`_validate_config`); with `enable_batch_prefill=False` (the default) any `scan_layers` works, so a
  training checkpoint (`load_parameters_path=<run>/checkpoints/<step>/items`) loads as saved;
- sampling is MaxText's own (`decode_sampling_strategy`, `decode_sampling_temperature`), seeded through
  the engine's `rng` (`jax.random.PRNGKey(--sample_seed)`);
- every sample starts from MaxText's `prompt` key, tokenized as `decode.py` does
  (`tokenizer.encode(prompt, is_bos=add_bos, prefill_lengths=[max_prefill_predict_length])`).

Writes `samples.jsonl` (one `{"index", "tokens", "text"}` per sample: prompt and completion tokens, and
their decoded text) and then `manifest.json` (`count`, `step`, `source`, `run_name`, `samples_file`,
`temperature`, `sample_seed`, `sample_length`, `vocab_size`, `model_name`, `prompt`) into
`--output_directory` (a local path or gs://). Only process 0 writes. Exit 0, or 2 for invalid flags.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SAMPLES_FILE = "samples.jsonl"
MANIFEST_FILE = "manifest.json"
_KEY_VALUE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_STEP = re.compile(r"/checkpoints/(\d+)/items/?$")


@dataclass(frozen=True)
class Options:
    """This program's own settings, and the MaxText command line it passes on."""

    num_samples: int
    sample_seed: int
    output_directory: str
    maxtext_argv: tuple[str, ...]


def build_parser() -> argparse.ArgumentParser:
    """The program's flags; positionals are the MaxText config file and `key=value` keys."""
    parser = argparse.ArgumentParser(prog="maxtext_synthesize", allow_abbrev=False)
    parser.add_argument("--num_samples", type=int, required=True, help="samples to write (>= 1)")
    parser.add_argument("--sample_seed", type=int, default=0, help="the sampling rng seed")
    parser.add_argument("--output_directory", required=True, help="where samples.jsonl and manifest.json go")
    parser.add_argument("maxtext_config", help="a MaxText config file, e.g. src/maxtext/configs/base.yml")
    parser.add_argument("maxtext_keys", nargs="*", help="MaxText key=value overrides")
    return parser


def parse_argv(argv: Sequence[str]) -> Options:
    """Options from the command line (without the program name); argparse exits 2 naming a bad flag."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    if args.num_samples < 1:
        parser.error("--num_samples must be at least 1")
    if "=" in args.maxtext_config:
        parser.error("the first positional argument must be a MaxText config file, then key=value keys")
    for item in args.maxtext_keys:
        if not _KEY_VALUE.match(item):
            parser.error(f"MaxText arguments are key=value, got {item!r}")
    return Options(args.num_samples, args.sample_seed, args.output_directory, (args.maxtext_config, *args.maxtext_keys))


def step_of(load_parameters_path: str) -> int | None:
    """The step of a `<run>/checkpoints/<step>/items` path."""
    match = _STEP.search(load_parameters_path)
    return int(match[1]) if match else None


def synthesize(options: Options, program: str = "maxtext_synthesize") -> dict[str, Any]:
    """Load the checkpoint with MaxText, sample with its OfflineEngine, write the files; returns the manifest."""
    # Imported here: the image has MaxText, and the project's tests import only the parser.
    import jax
    import numpy as np
    from etils import epath
    from maxtext.configs import pyconfig
    from maxtext.inference.offline_engine import InputData, OfflineEngine

    config = pyconfig.initialize([program, *options.maxtext_argv])
    engine = OfflineEngine(config=config, params=None, rng=jax.random.PRNGKey(options.sample_seed))
    tokenizer = engine.tokenizer
    ids, length = tokenizer.encode(
        config.prompt, is_bos=config.add_bos, prefill_lengths=[config.max_prefill_predict_length]
    )
    prompt = np.asarray(ids[:length], dtype=np.int32)
    data = [InputData(id=str(i), tokens=prompt, true_length=len(prompt)) for i in range(options.num_samples)]
    outputs = engine.batch_inference(data, rng=jax.random.PRNGKey(options.sample_seed))
    manifest = {
        "count": len(outputs),
        "step": step_of(config.load_parameters_path),
        "source": config.load_parameters_path,
        "run_name": config.run_name,
        "samples_file": SAMPLES_FILE,
        "temperature": float(config.decode_sampling_temperature),
        "sample_seed": options.sample_seed,
        "sample_length": int(config.max_target_length),
        "vocab_size": int(config.vocab_size),
        "model_name": config.model_name,
        "prompt": config.prompt,
    }
    if jax.process_index() != 0:
        return manifest
    lines = []
    for output in sorted(outputs, key=lambda o: int(o.index)):
        tokens = [int(t) for t in np.asarray(output.token_ids).tolist()]
        lines.append(json.dumps({"index": int(output.index), "tokens": tokens, "text": tokenizer.decode(tokens)}))
    directory = epath.Path(options.output_directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / SAMPLES_FILE).write_text("\n".join(lines) + "\n")
    # The manifest last: its presence says the samples are complete.
    (directory / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    argv = sys.argv if argv is None else argv
    manifest = synthesize(parse_argv(argv[1:]), program=argv[0])
    print(f"synthesized {manifest['count']} samples from {manifest['source']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
