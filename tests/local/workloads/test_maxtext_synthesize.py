"""The synthesis program's command line: the shipped program (deploy/images/maxtext-synthesize) and its local
stand-in take the same one, the stand-in refuses what MaxText and the OfflineEngine refuse and writes the files."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from elastic_training.local.workloads.config import ConfigError, SynthesizeConfig, run_main
from elastic_training.local.workloads.maxtext_synthesize import build_parser, main, to_config
from elastic_training.local.workloads.synthesize import MANIFEST_FILE, SAMPLES_FILE, synthesize

SHIPPED = Path(__file__).resolve().parents[3] / "deploy" / "images" / "maxtext-synthesize" / "maxtext_synthesize.py"


@pytest.fixture(scope="module")
def shipped() -> ModuleType:
    """The shipped program, imported from its file (its MaxText imports are inside the function that runs it)."""
    spec = importlib.util.spec_from_file_location("maxtext_synthesize", SHIPPED)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["maxtext_synthesize"] = module
    spec.loader.exec_module(module)
    return module


def argv(base: str, out: Path, *keys: str, step: int = 29) -> list[str]:
    """What `operators.pipeline.synthesize_args` renders, for the trained run's model size."""
    return [
        "--num_samples=5",
        "--sample_seed=3",
        f"--output_directory={out}",
        "src/maxtext/configs/base.yml",
        "run_name=trained",
        f"base_output_directory={base}",
        "per_device_batch_size=8",
        f"load_parameters_path={base}/trained/checkpoints/{step}/items",
        "max_target_length=32",
        "max_prefill_predict_length=16",
        "return_log_prob=true",
        "decode_sampling_strategy=weighted",
        "decode_sampling_temperature=0.8",
        "base_emb_dim=32",
        "vocab_size=32",
        *keys,
    ]


def test_writes_the_samples_and_manifest_of_the_local_synthesizer(
    trained_run: tuple[str, list[str]], tmp_path: Path
) -> None:
    base, _ = trained_run
    assert run_main(main, argv(base, tmp_path / "a")) == 0
    direct = synthesize(
        SynthesizeConfig(
            base_output_directory=base,
            run_name="trained",
            checkpoint_step=29,
            num_samples=5,
            temperature=0.8,
            sample_seed=3,
            synthetic_output_directory=str(tmp_path / "b"),
            base_emb_dim=32,
            vocab_size=32,
        )
    )
    manifest = json.loads((tmp_path / "a" / MANIFEST_FILE).read_text())
    assert manifest == direct and (manifest["count"], manifest["step"]) == (5, 29)
    assert (tmp_path / "a" / SAMPLES_FILE).read_text() == (tmp_path / "b" / SAMPLES_FILE).read_text()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("ici_fsdp_parallelism=1", "Invalid config: ici_fsdp_parallelism: a MaxText key the local synthesis"),
        ("checkpoint_step=3", "Invalid config: checkpoint_step: 'checkpoint_step' not in "),
        ("return_log_prob=false", "Invalid config: return_log_prob: must be True when using OfflineEngine"),
        ("max_prefill_predict_length=32", "Invalid config: max_target_length: Make sure max_target_length"),
        ("decode_sampling_strategy=beam", "Invalid config: decode_sampling_strategy: must be one of"),
        ("decode_sampling_strategy=nucleus", "the local stand-in samples greedy or weighted"),
        ("model_name=llama3.1-8b", "Invalid config: model_name"),
    ],
)
def test_the_stand_in_refuses_bad_keys_naming_them(
    trained_run: tuple[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str, message: str
) -> None:
    base, _ = trained_run
    assert run_main(main, argv(base, tmp_path / "x", extra)) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "bad",
    [["--num_sample=5"], ["--temperature=1"], ["--num_samples=5", "--output_directory=/o", "a=b"], []],
)
def test_both_programs_refuse_the_same_command_lines(shipped: Any, bad: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        shipped.parse_argv(bad)
    assert exit_.value.code == 2
    try:
        code = run_main(main, bad)
    except SystemExit as stand_in_exit:
        code = int(stand_in_exit.code or 0)
    assert code == 2


def test_both_programs_read_the_pipelines_command_line_alike(shipped: Any, tmp_path: Path) -> None:
    line = argv("/runs", tmp_path)
    options = shipped.parse_argv(line)
    config = to_config(line)
    assert (options.num_samples, options.sample_seed, options.output_directory) == (
        config.num_samples,
        config.sample_seed,
        config.synthetic_output_directory,
    )
    assert options.maxtext_argv == tuple(line[3:])
    assert shipped.step_of(dict(k.split("=", 1) for k in line[4:])["load_parameters_path"]) == config.checkpoint_step
    flags = {tuple(a.option_strings) for a in shipped.build_parser()._actions}
    assert flags == {tuple(a.option_strings) for a in build_parser()._actions}


def test_the_tokenizer_keys_are_taken_when_maxtext_knows_the_type() -> None:
    """The pipeline passes the evaluation's tokenizer (`tokenizer_type=huggingface tokenizer_path=…`); the local
    model has none, so the path is not loaded, but a tokenizer type MaxText does not know is refused."""
    line = argv("/runs", Path("/out"), "tokenizer_type=huggingface", "tokenizer_path=local/markov-128")
    assert to_config(line).checkpoint_step == 29
    with pytest.raises(ConfigError, match="tokenizer_type: must be one of tiktoken, sentencepiece, huggingface"):
        to_config(argv("/runs", Path("/out"), "tokenizer_type=bpe"))
