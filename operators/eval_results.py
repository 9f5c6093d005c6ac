"""Reading the result files of MaxText's evaluation framework, for the evaluation gate (pure: no Airflow).

Follows MaxText at commit e591f30cbbf217ed67ef71263ec0538239f9c3b8 (AI-Hypercomputer/maxtext):

- `src/maxtext/eval/runner/harness_runner.py` (`--runner lm_eval`): the results directory is
  `<--base_output_directory>/<--run_name>/eval_results`; the scores are lm-eval's, mapped by
  `_map_results` to `<task>_accuracy` (percent, 2 decimals), and lm-eval's raw per-task results are kept
  under `generation_stats["lm_eval_results"][<task>]` with lm-eval's own keys (`"perplexity,none"`, ...);
- `src/maxtext/eval/reporting/json_reporter.py` (`write_results`): one file per evaluation,
  `<benchmark>_<model>_<YYYYmmddTHHMMSSZ>.json` holding `benchmark` (the tasks joined by `+`),
  `model_name`, `timestamp_utc`, `scores`, `generation_stats` and `config` (the merged flags, so
  `config["checkpoint_path"]` says which checkpoint was evaluated).

lm-eval's `lambada_openai` task reports `perplexity` = exp(mean negative log-likelihood of each passage's
last word) and `acc` (the share of passages whose last word is the greedy continuation); the gate's loss is
ln(perplexity), in nats, so `max_eval_loss` keeps its meaning of a cross-entropy bound.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from elastic_training.operators import run_layout

EVAL_RESULTS_DIRECTORY: Final = "eval_results"
EVAL_RUNNER: Final = "lm_eval"
EVAL_TASK: Final = "lambada_openai"
PERPLEXITY_KEY: Final = "perplexity,none"


class EvalResultError(ValueError):
    """A result file does not have MaxText's schema; ``str()`` names the field."""


@dataclass(frozen=True)
class EvalResult:
    """What the gate needs from one MaxText evaluation result file."""

    path: str
    benchmark: str
    model_name: str
    timestamp_utc: str
    checkpoint_path: str
    task: str
    perplexity: float
    accuracy: float | None
    scores: Mapping[str, float]

    @property
    def loss(self) -> float:
        """ln(perplexity): the mean negative log-likelihood of the task's targets, in nats."""
        return math.log(self.perplexity) if self.perplexity > 0 else math.nan


def results_directory(base_output_directory: str, run_name: str) -> str:
    """Where `maxtext.eval.runner.run` writes for these flags (MaxText's `results_path`)."""
    return f"{run_layout.run_directory(base_output_directory, run_name)}/{EVAL_RESULTS_DIRECTORY}"


def _kind_name(kind: type | tuple[type, ...]) -> str:
    if isinstance(kind, tuple):
        return "a number" if kind == (int, float) else " or ".join(k.__name__ for k in kind)
    return {"str": "a string", "Mapping": "a JSON object"}.get(kind.__name__, kind.__name__)


def _field(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str = "") -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise EvalResultError(f"{where}{key}: expected {_kind_name(kind)}, got {value!r:.80}")
    return value


def parse_result(path: str, data: object, task: str = EVAL_TASK, backend: str = EVAL_RUNNER) -> EvalResult:
    """The gate's view of one result file; `EvalResultError` naming the field when it is not MaxText's schema."""
    if not isinstance(data, Mapping):
        raise EvalResultError(f"the file holds {type(data).__name__}, not a JSON object")
    benchmark = _field(data, "benchmark", str)
    model_name = _field(data, "model_name", str)
    timestamp = _field(data, "timestamp_utc", str)
    scores = _field(data, "scores", Mapping)
    stats = _field(data, "generation_stats", Mapping)
    config = _field(data, "config", Mapping)
    checkpoint_path = _field(config, "checkpoint_path", str, "config.")
    raw = _field(stats, f"{backend}_results", Mapping, "generation_stats.")
    task_results = _field(raw, task, Mapping, f"generation_stats.{backend}_results.")
    where = f"generation_stats.{backend}_results.{task}."
    perplexity = float(_field(task_results, PERPLEXITY_KEY, (int, float), where))
    accuracy = scores.get(f"{task}_accuracy")
    if accuracy is not None and (isinstance(accuracy, bool) or not isinstance(accuracy, int | float)):
        raise EvalResultError(f"scores.{task}_accuracy: expected a number, got {accuracy!r:.80}")
    return EvalResult(
        path=path,
        benchmark=benchmark,
        model_name=model_name,
        timestamp_utc=timestamp,
        checkpoint_path=checkpoint_path,
        task=task,
        perplexity=perplexity,
        accuracy=None if accuracy is None else float(accuracy),
        scores={k: v for k, v in scores.items() if isinstance(v, int | float) and not isinstance(v, bool)},
    )


def newest_for_checkpoint(results: Sequence[EvalResult], checkpoint_path: str) -> EvalResult | None:
    """The newest result of `checkpoint_path` (by MaxText's UTC timestamp, then file name), if any."""
    wanted = checkpoint_path.rstrip("/")
    mine = [r for r in results if r.checkpoint_path.rstrip("/") == wanted]
    return max(mine, key=lambda r: (r.timestamp_utc, r.path), default=None)
