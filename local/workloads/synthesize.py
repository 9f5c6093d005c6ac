"""`python -m elastic_training.local.workloads.synthesize key=value ...`: sample synthetic sequences from a checkpoint.

Writes `num_samples` samples (`temperature`, `sample_seed`) as JSON lines to `samples.jsonl` and a
`manifest.json` (count, step, source checkpoint path, settings) into `synthetic_output_directory`
(default `<run directory>/synthetic/step_<N>`); the manifest is written last. The same checkpoint, keys
and seed give the same bytes. Exit 0, 1 when there is no such checkpoint, 2 for an invalid configuration.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
from etils import epath

from elastic_training.local.workloads import model
from elastic_training.local.workloads.config import SynthesizeConfig, join_path, run_main
from elastic_training.local.workloads.inference import load_committed_params, reader_main

_logger = logging.getLogger("elastic_training.local.workloads.synthesize")

SAMPLES_FILE = "samples.jsonl"
MANIFEST_FILE = "manifest.json"
_CHUNK = 64


def synthesize(config: SynthesizeConfig) -> dict[str, Any]:
    """Sample and write the samples and the manifest; returns the manifest."""
    loaded = load_committed_params(config)
    length = config.sample_length or loaded.dims.length
    prompts = np.random.default_rng(config.sample_seed).integers(0, loaded.dims.vocab, config.num_samples)
    lines: list[str] = []
    for start in range(0, config.num_samples, _CHUNK):
        chunk = prompts[start : start + _CHUNK].astype(np.int32)
        tokens = model.sample(loaded.params, loaded.dims, chunk, length, config.temperature, config.sample_seed + start)
        lines.extend(json.dumps({"index": start + i, "tokens": row.tolist()}) for i, row in enumerate(tokens))
    output = config.synthetic_output_directory or join_path(config.run_directory, "synthetic", f"step_{loaded.step}")
    directory = epath.Path(output)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / SAMPLES_FILE).write_text("\n".join(lines) + "\n")
    manifest = {
        "count": len(lines),
        "step": loaded.step,
        "source": loaded.path,
        "run_name": config.run_name,
        "samples_file": SAMPLES_FILE,
        "temperature": config.temperature,
        "sample_seed": config.sample_seed,
        "sample_length": length,
        "vocab_size": loaded.dims.vocab,
    }
    (directory / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    _logger.info("synthesized %d samples from step %d into %s", len(lines), loaded.step, output)
    return manifest


def main(argv: Sequence[str]) -> int:
    """Parse and synthesize; 1 when the checkpoint is missing."""
    return reader_main(SynthesizeConfig, synthesize, argv)


if __name__ == "__main__":
    sys.exit(run_main(main))
