"""Synthesis: N samples with a temperature and a seed, JSON lines plus a manifest, deterministic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from elastic_training.local.workloads.config import SynthesizeConfig, parse_args
from elastic_training.local.workloads.synthesize import MANIFEST_FILE, SAMPLES_FILE, synthesize
from tests.support.workload_processes import run_module


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


@pytest.mark.e2e
@pytest.mark.timeout(900)  # the entry point as a process, twice (JAX start, restore)
def test_cli_defaults_to_the_run_directory(trained_run: tuple[str, list[str]]) -> None:
    base, keys = trained_run
    result = run_module("elastic_training.local.workloads.synthesize", [*keys, "checkpoint_step=20", "num_samples=2"])
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = json.loads((Path(base) / "trained" / "synthetic" / "step_20" / MANIFEST_FILE).read_text())
    assert (manifest["count"], manifest["step"]) == (2, 20)
    assert manifest["source"] == f"{base}/trained/checkpoints/20"
    missing = run_module("elastic_training.local.workloads.synthesize", [*keys, "checkpoint_step=21"])
    assert missing.returncode == 1 and "has no step 21" in missing.stdout
    assert not (Path(base) / "trained" / "synthetic" / "step_21").exists()


def test_manifest_schema_and_greedy_sampling(trained_run: tuple[str, list[str]], tmp_path: Path) -> None:
    _, keys = trained_run
    # 40 samples over a vocabulary of 32: some prompt tokens repeat within the run.
    manifest, samples = _run(keys, tmp_path / "g", "num_samples=40", "temperature=0", "sample_length=8")
    assert set(manifest) == {
        "count",
        "step",
        "source",
        "run_name",
        "samples_file",
        "temperature",
        "sample_seed",
        "sample_length",
        "vocab_size",
    }
    assert (manifest["count"], manifest["sample_length"], manifest["temperature"]) == (40, 8, 0.0)
    assert (manifest["samples_file"], manifest["vocab_size"]) == (SAMPLES_FILE, 32)
    rows = [json.loads(line) for line in samples.splitlines()]
    assert [set(r) for r in rows] == [{"index", "tokens"}] * 40 and all(len(r["tokens"]) == 8 for r in rows)
    # Greedy decoding ignores the sampling key: one continuation per prompt token.
    continuations: dict[int, set[tuple[int, ...]]] = {}
    for row in rows:
        continuations.setdefault(row["tokens"][0], set()).add(tuple(row["tokens"]))
    assert len(continuations) < 40 and all(len(c) == 1 for c in continuations.values())
