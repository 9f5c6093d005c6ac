"""Reading MaxText's evaluation result files: the schema, its errors naming the field, the newest of a checkpoint."""

from __future__ import annotations

import math

import pytest

from elastic_training.operators.eval_results import (
    EvalResultError,
    newest_for_checkpoint,
    parse_result,
    results_directory,
)
from tests.support.eval_results import maxtext_result


def test_results_directory_is_maxtexts() -> None:
    assert results_directory("gs://b/llm/", "run-1") == "gs://b/llm/run-1/eval_results"


def test_parse_names_the_missing_field() -> None:
    good = maxtext_result("/r/checkpoints/3/items", 4.0)
    result = parse_result("f.json", good)
    assert result.loss == pytest.approx(math.log(4.0)) and result.accuracy == 61.5
    del good["generation_stats"]["lm_eval_results"]["lambada_openai"]["perplexity,none"]
    with pytest.raises(EvalResultError, match=r"generation_stats.lm_eval_results.lambada_openai.perplexity,none"):
        parse_result("f.json", good)
    with pytest.raises(EvalResultError, match=r"config\.checkpoint_path"):
        parse_result("f.json", {**maxtext_result("x", 1.0), "config": {}})
    with pytest.raises(EvalResultError, match="not a JSON object"):
        parse_result("f.json", [1])


def test_the_newest_result_of_the_checkpoint_wins() -> None:
    results = [
        parse_result("a.json", maxtext_result("/r/checkpoints/3/items", 9.0, "20261201T010000Z")),
        parse_result("b.json", maxtext_result("/r/checkpoints/3/items/", 2.0, "20261201T020000Z")),
        parse_result("c.json", maxtext_result("/r/checkpoints/4/items", 1.0, "20261201T030000Z")),
    ]
    newest = newest_for_checkpoint(results, "/r/checkpoints/3/items")
    assert newest is not None and newest.path == "b.json"
    assert newest_for_checkpoint(results, "/r/checkpoints/5/items") is None
