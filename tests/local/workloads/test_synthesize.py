"""Synthesis: N samples with a temperature and a seed, JSON lines plus a manifest, deterministic."""

from __future__ import annotations

import json
from pathlib import Path

from local.workloads.config import SynthesizeConfig, parse_args
from local.workloads.synthesize import MANIFEST_FILE, SAMPLES_FILE, synthesize
from tests.local.workloads.conftest import run_module


def _run(keys: list[str], out: Path, *extra: str) -> tuple[dict[str, object], str]:
    manifest = synthesize(parse_args(SynthesizeConfig, [*keys, f"synthetic_output_directory={out}", *extra]))
    return manifest, (out / SAMPLES_FILE).read_text()


def test_samples_and_manifest_are_deterministic_for_a_seed(trained_run: tuple[str, list[str]], tmp_path: Path) -> None:
    base, keys = trained_run
    manifest, samples = _run(keys, tmp_path / "a", "num_samples=5", "temperature=0.8", "sample_seed=3")
    again, samples_again = _run(keys, tmp_path / "b", "num_samples=5", "temperature=0.8", "sample_seed=3")
    _, other_seed = _run(keys, tmp_path / "c", "num_samples=5", "temperature=0.8", "sample_seed=4")
    assert samples == samples_again and samples != other_seed
    assert manifest == again
    assert manifest["count"] == 5 and manifest["step"] == 29
    assert manifest["source"] == f"{base}/trained/checkpoints/29"
    assert json.loads((tmp_path / "a" / MANIFEST_FILE).read_text()) == manifest
    rows = [json.loads(line) for line in samples.splitlines()]
    assert [r["index"] for r in rows] == list(range(5))
    assert all(len(r["tokens"]) == 32 and all(0 <= t < 32 for t in r["tokens"]) for r in rows)


def test_cli_defaults_to_the_run_directory(trained_run: tuple[str, list[str]]) -> None:
    base, keys = trained_run
    result = run_module("local.workloads.synthesize", [*keys, "checkpoint_step=20", "num_samples=2"])
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = json.loads((Path(base) / "trained" / "synthetic" / "step_20" / MANIFEST_FILE).read_text())
    assert (manifest["count"], manifest["step"]) == (2, 20)
