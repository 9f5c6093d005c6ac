"""Evaluation: loss and perplexity of a committed step on held-out data, as a JSON result file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from local.workloads.config import EvalConfig, parse_args
from local.workloads.evaluate import evaluate
from local.workloads.inference import CheckpointNotFoundError
from tests.local.workloads.conftest import run_module


def test_newest_step_beats_step_0_and_is_deterministic(trained_run: tuple[str, list[str]]) -> None:
    base, keys = trained_run
    newest = evaluate(parse_args(EvalConfig, keys))
    first = evaluate(parse_args(EvalConfig, [*keys, "checkpoint_step=0"]))
    assert (newest["step"], first["step"]) == (29, 0)
    assert newest["loss"] < first["loss"] - 0.5
    assert newest["perplexity"] == pytest.approx(math.exp(newest["loss"]))
    assert newest["checkpoint_path"] == f"{base}/trained/checkpoints/29"
    written = json.loads((Path(base) / "trained" / "eval" / "step_29.json").read_text())
    assert written == newest
    assert evaluate(parse_args(EvalConfig, keys)) == newest


def test_uncommitted_step_is_refused(trained_run: tuple[str, list[str]]) -> None:
    _, keys = trained_run
    with pytest.raises(CheckpointNotFoundError, match="committed step 5"):
        evaluate(parse_args(EvalConfig, [*keys, "checkpoint_step=5"]))


def test_cli_writes_the_result_file(trained_run: tuple[str, list[str]], tmp_path: Path) -> None:
    _, keys = trained_run
    out = tmp_path / "eval.json"
    result = run_module("local.workloads.evaluate", [*keys, "checkpoint_step=10", f"eval_output_file={out}"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(out.read_text())["step"] == 10
    missing = run_module("local.workloads.evaluate", [*keys, "run_name=nope"])
    assert missing.returncode == 1 and "has no any committed step" in missing.stdout
