"""`python -m elastic_training.local.workloads.evaluate key=value ...`: loss and perplexity on held-out data.

Reads a committed checkpoint (`checkpoint_step`, default the newest) of `<base_output_directory>/<run_name>`,
evaluates `eval_batches` batches of the corpus' held-out split, and writes a JSON result file
(`eval_output_file`, default `<run directory>/eval/step_<N>.json`). Exit 0, 1 when there is no such
checkpoint, 2 for an invalid configuration.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from etils import epath

from elastic_training.local.workloads import model
from elastic_training.local.workloads.config import EvalConfig, join_path, run_main
from elastic_training.local.workloads.inference import load_committed_params, reader_main

_logger = logging.getLogger("elastic_training.local.workloads.evaluate")
# One jitted loss for every evaluation in a process (compiled once per shape), not a new lambda per call.
_loss = jax.jit(model.loss_fn, static_argnames="heads")


def evaluate(config: EvalConfig) -> dict[str, Any]:
    """Evaluate and write the result file; returns the result."""
    loaded = load_committed_params(config)
    # One device (the parameters are restored onto the first), so the result does not depend on how many
    # devices the environment happens to expose.
    batch = config.per_device_batch_size
    losses = [
        float(_loss(loaded.params, model.corpus_batch("eval", i, batch, loaded.dims), heads=loaded.dims.heads))
        for i in range(config.eval_batches)
    ]
    loss = float(np.mean(losses))
    result = {
        "run_name": config.run_name,
        "step": loaded.step,
        "checkpoint_path": loaded.path,
        "split": "eval",
        "eval_batches": config.eval_batches,
        "batch_size": batch,
        "tokens": config.eval_batches * batch * (loaded.dims.length - 1),
        "loss": loss,
        "perplexity": math.exp(loss),
        "corpus_entropy": model.corpus_entropy(loaded.dims.vocab),
    }
    output = config.eval_output_file or join_path(config.run_directory, "eval", f"step_{loaded.step}.json")
    path = epath.Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    _logger.info("eval step: %d, loss: %.4f, perplexity: %.4f, result: %s", loaded.step, loss, math.exp(loss), output)
    return result


def main(argv: Sequence[str]) -> int:
    """Parse and evaluate; 1 when the checkpoint is missing."""
    return reader_main(EvalConfig, evaluate, argv)


if __name__ == "__main__":
    sys.exit(run_main(main))
