"""Evaluation result files as MaxText's evaluation harness writes them, for the tests that read them back."""

from __future__ import annotations

from typing import Any


# What MaxText's harness_runner + json_reporter write for `--runner lm_eval --tasks lambada_openai`.
def maxtext_result(checkpoint_path: str, perplexity: float, timestamp: str = "20261201T010203Z") -> dict[str, Any]:
    return {
        "benchmark": "lambada_openai",
        "model_name": "default",
        "timestamp_utc": timestamp,
        "scores": {"lambada_openai_accuracy": 61.5},
        "generation_stats": {
            "lm_eval_config": {"model": "local-completions"},
            "lm_eval_results": {
                "lambada_openai": {
                    "alias": "lambada_openai",
                    "perplexity,none": perplexity,
                    "perplexity_stderr,none": 0.1,
                    "acc,none": 0.615,
                    "acc_stderr,none": 0.0068,
                }
            },
        },
        "config": {"checkpoint_path": checkpoint_path, "tasks": ["lambada_openai"], "results_path": "x"},
    }
