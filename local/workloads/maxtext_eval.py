"""`python -m elastic_training.local.workloads.maxtext_eval --runner=lm_eval ...`: the local stand-in of MaxText's
evaluation framework.

Takes the command line of `python -m maxtext.eval.runner.run` and writes the file it writes, in its schema,
so the pipeline's evaluation stage and gate are the same on both runtimes. Follows MaxText at commit
e591f30cbbf217ed67ef71263ec0538239f9c3b8 (AI-Hypercomputer/maxtext):

- `src/maxtext/eval/runner/run.py`: `--runner` (required; eval, lm_eval, evalchemy, simple_evals) is read
  first and the rest goes to the runner's own parser;
- `src/maxtext/eval/runner/common.py` (`add_server_args`) and `harness_runner.py` (`_build_arg_parser`):
  the lm_eval runner's flags, every one of them, with their types, defaults and required ones; argparse
  refuses any other flag (exit 2), as MaxText's parser does;
- `harness_runner.py` (`main`, `run_harness`, `_map_results`) and `reporting/json_reporter.py`
  (`write_results`): `<--base_output_directory>/<--run_name>/eval_results/<tasks joined by +>_<model>_<UTC
  timestamp>.json` holding `benchmark`, `model_name`, `timestamp_utc`, `scores` (`<task>_accuracy`, percent,
  2 decimals), `generation_stats` (`lm_eval_config`, `lm_eval_results` keyed by task with lm-eval's keys)
  and `config` (the flags but `log_level` and `hf_token`, plus `results_path`).

What is local: only `--runner=lm_eval` with `--tasks=lambada_openai` and a MaxText `--checkpoint_path`
(`<run>/checkpoints/<step>/items`, a committed step) are served; the others exit 2 naming the flag. The
model is the local trainer's (`model_name=default`; its size read from the checkpoint), scored as lm-eval scores
LAMBADA: each held-out sequence's last token is the target, `perplexity` = exp(mean negative
log-likelihood of the targets), `acc` = the share whose greedy prediction is the target. `--num_samples`
limits the sequences (default 64; lm-eval's `limit`). A missing or uncommitted step exits 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import json
import logging
import math
import re
import sys
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from etils import epath

from elastic_training.local.workloads import checkpointing, model
from elastic_training.local.workloads.config import CheckpointReaderConfig, ConfigError, run_main
from elastic_training.local.workloads.inference import CheckpointNotFoundError, load_committed_params
from elastic_training.local.workloads.logs import configure_logging

_logger = logging.getLogger("elastic_training.local.workloads.maxtext_eval")

RUNNERS = ("eval", "lm_eval", "evalchemy", "simple_evals")
LOCAL_RUNNER = "lm_eval"
LOCAL_TASK = "lambada_openai"
DEFAULT_SAMPLES = 64
_BATCH = 16
_CHECKPOINT_PATH = re.compile(r"^(?P<run>.+)/checkpoints/(?P<step>\d+)/items/?\Z")


def build_parser() -> argparse.ArgumentParser:
    """MaxText's lm_eval runner parser: `add_server_args` plus the harness's own flags (same names and types)."""
    parser = argparse.ArgumentParser(prog="maxtext.eval.runner.run --runner lm_eval", allow_abbrev=True)
    parser.add_argument("--checkpoint_path")
    parser.add_argument("--model_name", required=True)
    parser.add_argument("--hf_path", required=True)
    parser.add_argument("--base_output_directory", required=True)
    parser.add_argument("--run_name", required=True)
    parser.add_argument("--max_model_len", type=int, required=True)
    parser.add_argument("--tensor_parallel_size", type=int, default=4)
    parser.add_argument("--server_host", default="localhost")
    parser.add_argument("--server_port", type=int, default=8000)
    parser.add_argument("--max_num_batched_tokens", type=int)
    parser.add_argument("--max_num_seqs", type=int)
    parser.add_argument("--hf_mode", action="store_true")
    parser.add_argument("--expert_parallel_size", type=int, default=0)
    parser.add_argument("--data_parallel_size", type=int, default=1)
    parser.add_argument("--hbm_memory_utilization", type=float, default=0.3)
    parser.add_argument("--hf_token")
    parser.add_argument("--skip_warmup", action="store_true")
    parser.add_argument("--gcs_results_path")
    parser.add_argument("--log_level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--backend", choices=["lm_eval", "evalchemy"], default="lm_eval")
    parser.add_argument("--tasks", nargs="+", default=["mmlu"])
    parser.add_argument("--num_fewshot", type=int, default=0)
    parser.add_argument("--num_samples", type=int)
    parser.add_argument("--apply_chat_template", action="store_true", default=False)
    parser.add_argument("--fewshot_as_multiturn", action="store_true", default=False)
    parser.add_argument("--gen_kwargs", type=str, default=None)
    return parser


@dataclasses.dataclass(frozen=True)
class TaskScore:
    """lm-eval's LAMBADA numbers for one checkpoint."""

    samples: int
    perplexity: float
    perplexity_stderr: float
    accuracy: float
    accuracy_stderr: float


# One jitted function for every scoring in a process (compiled once per shape), not a new closure per call.
@functools.partial(jax.jit, static_argnames="heads")
def _last_token(params: model.Params, tokens: jax.Array, *, heads: int) -> tuple[jax.Array, jax.Array]:
    logits = model.apply(params, tokens[:, :-1], heads)[:, -1]
    logp = jax.nn.log_softmax(logits, axis=-1)
    target = tokens[:, -1]
    nll = -jax.numpy.take_along_axis(logp, target[:, None], axis=1)[:, 0]
    return nll, (logits.argmax(axis=-1) == target)


def score_lambada(config: CheckpointReaderConfig, samples: int) -> tuple[TaskScore, int, str]:
    """Score `samples` held-out sequences' last tokens; returns the score, the step and its path."""
    loaded = load_committed_params(config)
    nlls: list[np.ndarray] = []
    hits: list[np.ndarray] = []
    for index in range(math.ceil(samples / _BATCH)):
        batch = model.corpus_batch("eval", index, _BATCH, loaded.dims)
        nll, hit = _last_token(loaded.params, batch, heads=loaded.dims.heads)
        nlls.append(np.asarray(nll))
        hits.append(np.asarray(hit))
    nll_all = np.concatenate(nlls)[:samples].astype(np.float64)
    hit_all = np.concatenate(hits)[:samples].astype(np.float64)
    perplexity = float(np.exp(nll_all.mean()))
    spread = float(nll_all.std(ddof=1)) if samples > 1 else 0.0
    accuracy = float(hit_all.mean())
    score = TaskScore(
        samples=samples,
        perplexity=perplexity,
        perplexity_stderr=perplexity * spread / math.sqrt(samples),
        accuracy=accuracy,
        accuracy_stderr=math.sqrt(accuracy * (1 - accuracy) / (samples - 1)) if samples > 1 else 0.0,
    )
    return score, loaded.step, loaded.path


def _reader_config(checkpoint_path: str) -> CheckpointReaderConfig:
    match = _CHECKPOINT_PATH.match(checkpoint_path)
    if not match:
        raise ConfigError(
            "--checkpoint_path", f"expected <run directory>/checkpoints/<step>/items, got {checkpoint_path!r}"
        )
    run_directory = match["run"].rstrip("/")
    base, _, run_name = run_directory.rpartition("/")
    if not base or not run_name:
        raise ConfigError("--checkpoint_path", f"{checkpoint_path!r} names no run directory")
    config = CheckpointReaderConfig(base_output_directory=base, run_name=run_name, checkpoint_step=int(match["step"]))
    config.validate()
    return config


def with_checkpoint_dims(config: CheckpointReaderConfig) -> CheckpointReaderConfig:
    """`config` sized as the checkpoint's parameters are (MaxText reads the size from `model_name`; the
    local model has one, `default`, whose size a run may have changed). Heads keep the default: shapes do
    not show them. Unchanged when the step's metadata cannot be read (the load then says why)."""
    manager = checkpointing.create_manager(config.checkpoint_directory, read_only=True)
    try:
        params = manager.item_metadata(config.checkpoint_step)[checkpointing.ITEM_NAME]["params"]
        vocab, emb = params["token_embedding"].shape
        length = params["position_embedding"].shape[0]
        layers = params["decoder"]["qkv"].shape[0]
    except (KeyError, TypeError, ValueError, AttributeError, FileNotFoundError):
        return config
    finally:
        manager.close()
    return dataclasses.replace(
        config, vocab_size=vocab, base_emb_dim=emb, max_target_length=length, base_num_decoder_layers=layers
    )


def write_results(cfg: dict[str, Any], score: TaskScore, model_name: str) -> str:
    """Write MaxText's result file for lm_eval's `lambada_openai`; returns its path."""
    timestamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    benchmark = "+".join(cfg["tasks"])
    safe_model = model_name.replace("/", "_").replace(":", "_")
    raw = {
        "alias": LOCAL_TASK,
        "perplexity,none": score.perplexity,
        "perplexity_stderr,none": score.perplexity_stderr,
        "acc,none": score.accuracy,
        "acc_stderr,none": score.accuracy_stderr,
    }
    results = {
        "benchmark": benchmark,
        "model_name": model_name,
        "timestamp_utc": timestamp,
        "scores": {f"{LOCAL_TASK}_accuracy": round(score.accuracy * 100, 2)},
        "generation_stats": {
            "lm_eval_config": {
                "model": "local-completions",
                "model_args": f"model={model_name},tokenizer_backend=huggingface,tokenizer={cfg['hf_path']}",
                "num_fewshot": cfg["num_fewshot"],
                "limit": cfg["num_samples"],
            },
            "lm_eval_results": {LOCAL_TASK: raw},
        },
        "config": cfg,
    }
    directory = epath.Path(cfg["results_path"])
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{benchmark}_{safe_model}_{timestamp}.json"
    path.write_text(json.dumps(results, indent=2))
    _logger.info("Results written to %s", path)
    return str(path)


def main(argv: Sequence[str]) -> int:
    """Parse MaxText's flags, score the checkpoint, write the result file; 1 when the checkpoint is missing."""
    pre_parser = argparse.ArgumentParser(prog="maxtext.eval.runner.run", add_help=False)
    pre_parser.add_argument("--runner", required=True, choices=list(RUNNERS))
    pre_args, remaining = pre_parser.parse_known_args(list(argv))
    if pre_args.runner != LOCAL_RUNNER:
        raise ConfigError("--runner", f"the local stand-in serves --runner={LOCAL_RUNNER} only, got {pre_args.runner}")
    args = build_parser().parse_args(remaining)
    if args.hf_mode or not args.checkpoint_path:
        raise ConfigError("--checkpoint_path", "the local stand-in evaluates MaxText checkpoints only (no --hf_mode)")
    if args.backend != "lm_eval" or args.tasks != [LOCAL_TASK]:
        raise ConfigError("--tasks", f"the local stand-in serves lm_eval's {LOCAL_TASK} only, got {args.tasks}")
    if args.model_name != "default":
        raise ConfigError("--model_name", f"the local trainer has one model, 'default'; got {args.model_name!r}")
    for name in ("max_model_len", "tensor_parallel_size"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name}", "must be at least 1")
    if args.num_samples is not None and args.num_samples < 1:
        raise ConfigError("--num_samples", "must be at least 1")
    configure_logging()
    reader = with_checkpoint_dims(_reader_config(args.checkpoint_path))
    cfg = {k: v for k, v in vars(args).items() if k not in ("log_level", "hf_token")}
    cfg["results_path"] = f"{args.base_output_directory.rstrip('/')}/{args.run_name}/eval_results"
    if args.max_model_len > reader.max_target_length:
        # vLLM refuses a context longer than the model's; so does the stand-in, before loading anything.
        _logger.error(
            "--max_model_len %d is greater than the model's max_target_length %d",
            args.max_model_len,
            reader.max_target_length,
        )
        return 1
    try:
        score, step, path = score_lambada(reader, args.num_samples or DEFAULT_SAMPLES)
    except CheckpointNotFoundError as error:
        _logger.error("%s", error)
        return 1
    _logger.info(
        "lm_eval %s on step %d (%s): perplexity %.4f, acc %.4f over %d samples",
        LOCAL_TASK,
        step,
        path,
        score.perplexity,
        score.accuracy,
        score.samples,
    )
    write_results(cfg, score, args.model_name)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
