"""Evaluation: loss and perplexity of a committed step on held-out data, as a JSON result file."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from elastic_training.local.workloads.config import EvalConfig, parse_args
from elastic_training.local.workloads.evaluate import evaluate
from elastic_training.local.workloads.inference import CheckpointNotFoundError
from elastic_training.operators.constants import COMMIT_SUCCESS_FILE
from tests.support.workload_processes import run_module


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


def test_a_missing_step_is_refused(trained_run: tuple[str, list[str]]) -> None:
    _, keys = trained_run
    with pytest.raises(CheckpointNotFoundError, match=r"has no step 5 \(committed steps: \[0, 10, 20, 29\]\)"):
        evaluate(parse_args(EvalConfig, [*keys, "checkpoint_step=5"]))


@pytest.mark.e2e
@pytest.mark.timeout(900)  # the entry point as a process, three times (JAX start, restore)
def test_cli_writes_the_result_file(trained_run: tuple[str, list[str]], tmp_path: Path) -> None:
    _, keys = trained_run
    out = tmp_path / "eval.json"
    result = run_module(
        "elastic_training.local.workloads.evaluate", [*keys, "checkpoint_step=10", f"eval_output_file={out}"]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(out.read_text())["step"] == 10
    missing = run_module("elastic_training.local.workloads.evaluate", [*keys, "run_name=nope"])
    assert missing.returncode == 1 and "has no committed checkpoint" in missing.stdout
    no_step = run_module("elastic_training.local.workloads.evaluate", [*keys, "checkpoint_step=7"])
    assert no_step.returncode == 1 and "has no step 7 (committed steps: [0, 10, 20, 29])" in no_step.stdout


_RESULT_FIELDS = {
    "run_name",
    "step",
    "checkpoint_path",
    "split",
    "eval_batches",
    "batch_size",
    "tokens",
    "loss",
    "perplexity",
    "corpus_entropy",
}


def test_result_schema(trained_run: tuple[str, list[str]], tmp_path: Path) -> None:
    _, keys = trained_run
    result = evaluate(parse_args(EvalConfig, [*keys, "eval_batches=2", f"eval_output_file={tmp_path / 'r.json'}"]))
    assert set(result) == _RESULT_FIELDS
    assert (result["run_name"], result["split"], result["eval_batches"], result["batch_size"]) == (
        "trained",
        "eval",
        2,
        8,
    )
    assert result["tokens"] == 2 * 8 * (32 - 1)  # next-token targets of 2 batches of 8 sequences of 32
    assert 0 < result["corpus_entropy"] < result["loss"] < math.log(32)


def test_a_step_without_its_marker_is_never_read(trained_run: tuple[str, list[str]], tmp_path: Path) -> None:
    base, keys = trained_run
    # A copy of the run whose newest step directory (35, a copy of 29) lost its commit marker.
    shutil.copytree(Path(base) / "trained", tmp_path / "trained")
    checkpoints = tmp_path / "trained" / "checkpoints"
    shutil.copytree(checkpoints / "29", checkpoints / "35")
    (checkpoints / "35" / COMMIT_SUCCESS_FILE).unlink()
    copy = [*keys, f"base_output_directory={tmp_path}"]
    assert evaluate(parse_args(EvalConfig, copy))["step"] == 29  # the newest *committed* step
    with pytest.raises(CheckpointNotFoundError, match=r"step 35 of .* is not committed \(no commit_success.txt"):
        evaluate(parse_args(EvalConfig, [*copy, "checkpoint_step=35"]))
