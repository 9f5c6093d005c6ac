"""The local stand-in of MaxText's evaluation framework: MaxText's command line, MaxText's result file."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from elastic_training.local.workloads.config import run_main
from elastic_training.local.workloads.maxtext_eval import main
from elastic_training.operators.eval_results import parse_result

# The keys of MaxText's `config` in the result file: harness_runner's flags but log_level and hf_token,
# plus results_path (maxtext e591f30: src/maxtext/eval/runner/harness_runner.py, common.py).
MAXTEXT_CONFIG_KEYS = {
    "checkpoint_path",
    "model_name",
    "hf_path",
    "base_output_directory",
    "run_name",
    "max_model_len",
    "tensor_parallel_size",
    "server_host",
    "server_port",
    "max_num_batched_tokens",
    "max_num_seqs",
    "hf_mode",
    "expert_parallel_size",
    "data_parallel_size",
    "hbm_memory_utilization",
    "skip_warmup",
    "gcs_results_path",
    "backend",
    "tasks",
    "num_fewshot",
    "num_samples",
    "apply_chat_template",
    "fewshot_as_multiturn",
    "gen_kwargs",
    "results_path",
}


def flags(base: str, step: int, out: Path, *extra: str, runner: str = "lm_eval") -> list[str]:
    return [
        f"--runner={runner}",
        f"--checkpoint_path={base}/trained/checkpoints/{step}/items",
        "--model_name=default",
        "--hf_path=local/markov-128",
        "--tasks=lambada_openai",
        f"--base_output_directory={out}",
        f"--run_name=step{step}",
        "--max_model_len=32",
        "--tensor_parallel_size=1",
        *extra,
    ]


def result_of(out: Path, run_name: str) -> tuple[str, dict[str, Any]]:
    [path] = (out / run_name / "eval_results").iterdir()
    return str(path), json.loads(path.read_text())


def test_writes_maxtexts_result_file_and_a_trained_step_scores_better(
    trained_run: tuple[str, list[str]], tmp_path: Path
) -> None:
    base, _ = trained_run
    assert run_main(main, flags(base, 29, tmp_path, "--num_samples=32")) == 0
    assert run_main(main, flags(base, 0, tmp_path, "--num_samples=32")) == 0
    path, data = result_of(tmp_path, "step29")
    assert re.fullmatch(r"lambada_openai_default_\d{8}T\d{6}Z\.json", Path(path).name)
    assert set(data) == {"benchmark", "model_name", "timestamp_utc", "scores", "generation_stats", "config"}
    assert set(data["config"]) == MAXTEXT_CONFIG_KEYS
    assert data["config"]["results_path"] == f"{tmp_path}/step29/eval_results"
    trained = parse_result(path, data)
    untrained = parse_result(*result_of(tmp_path, "step0"))
    assert trained.checkpoint_path == f"{base}/trained/checkpoints/29/items"
    assert trained.benchmark == "lambada_openai" and 0 <= (trained.accuracy or 0) <= 100
    assert 1 < trained.perplexity < untrained.perplexity


@pytest.mark.parametrize(
    ("runner", "extra", "message"),
    [
        ("lm_eval", "--checkpoint_step=3", "unrecognized arguments: --checkpoint_step=3"),
        ("lm_eval", "--tasks=mmlu", "Invalid config: --tasks"),
        ("lm_eval", "--max_model_len=many", "argument --max_model_len: invalid int value"),
        ("lm_eval", "--model_name=llama3.1-8b", "Invalid config: --model_name"),
        ("simple_evals", "--num_fewshot=0", "Invalid config: --runner"),
        ("nope", "--num_fewshot=0", "argument --runner: invalid choice"),
    ],
)
def test_refuses_what_maxtext_refuses_and_what_it_does_not_model(
    trained_run: tuple[str, list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    runner: str,
    extra: str,
    message: str,
) -> None:
    base, _ = trained_run
    try:
        code = run_main(main, flags(base, 29, tmp_path, extra, runner=runner))
    except SystemExit as exit_:  # argparse's own refusal, as in MaxText
        code = int(exit_.code or 0)
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "step29").exists()


def test_a_missing_step_exits_1_and_writes_nothing(trained_run: tuple[str, list[str]], tmp_path: Path) -> None:
    base, _ = trained_run
    assert run_main(main, flags(base, 7, tmp_path)) == 1
    assert not (tmp_path / "step7").exists()
