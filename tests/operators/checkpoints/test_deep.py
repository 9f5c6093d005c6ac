"""Deep mode: Orbax restores on CPU, finite values, a byte budget that turns into sampling."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from elastic_training.operators.checkpoints import DeepOptions, Problem, validate_checkpoints
from elastic_training.operators.checkpoints.deep import choose_sample
from tests.support.orbax_checkpoints import make_tree, write_run


def test_deep_restores_everything_within_budget(orbax_runs: dict[str, Path]) -> None:
    for run in orbax_runs.values():
        report = validate_checkpoints(str(run), deep=DeepOptions())
        assert report.valid
        deep = report.target.deep  # type: ignore[union-attr]
        assert deep is not None and deep["items"]["arrays_checked"] == deep["items"]["arrays_total"] == 5
        assert not deep["items"]["sampled"]


def test_deep_samples_beyond_budget(orbax_runs: dict[str, Path]) -> None:
    report = validate_checkpoints(str(orbax_runs["ocdbt"]), deep=DeepOptions(budget_bytes=300))
    info = report.target.deep["items"]  # type: ignore[index, union-attr]
    assert info["sampled"] and 1 <= info["arrays_checked"] < info["arrays_total"]
    assert info["bytes_checked"] <= 300


def test_non_finite_values_fall_back_to_an_older_step(tmp_path: Path) -> None:
    def tree(step: int) -> dict[str, object]:
        t = make_tree(step)
        if step == 20:
            t["opt"]["mu"] = np.full((8, 8), np.nan, np.float32)  # type: ignore[index]
        if step == 30:
            embed = np.ones((16, 8), jnp.bfloat16)
            embed[3, 5], embed[7, 0] = np.inf, -np.inf
            t["params"]["embed"] = embed  # type: ignore[index]
        return t

    root = write_run(tmp_path / "run", ocdbt=False, steps=(10, 20, 30), tree_fn=tree)
    metadata_only = validate_checkpoints(str(root))
    assert metadata_only.valid and metadata_only.latest_valid_step == 30  # metadata alone cannot see NaN/inf
    report = validate_checkpoints(str(root), deep=DeepOptions())
    assert not report.valid and report.latest_valid_step == 10
    (inf,) = report.target.problems  # type: ignore[union-attr]
    assert inf.code is Problem.NON_FINITE_VALUES and inf.path == "items/params.embed"
    assert "2 of 128" in inf.detail
    (nan,) = report.verdict(20).problems  # type: ignore[union-attr]
    assert nan.code is Problem.NON_FINITE_VALUES and nan.path == "items/opt.mu"
    assert "64 of 64" in nan.detail
    assert report.verdict(10).deep is not None  # type: ignore[union-attr]


def test_garbage_chunk_is_a_restore_failure(orbax_runs: dict[str, Path], tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(orbax_runs["zarr"], run)
    (run / "checkpoints" / "20" / "items" / "opt.mu" / "0.0").write_bytes(b"not zstd at all")
    report = validate_checkpoints(str(run), deep=DeepOptions())
    assert [p.code for p in report.target.problems] == [Problem.RESTORE_FAILED]  # type: ignore[union-attr]
    assert report.latest_valid_step == 10


def test_choose_sample_is_bounded_and_deterministic() -> None:
    sizes = {(f"a{i}",): 100 for i in range(20)}
    chosen = choose_sample(sizes, 450, seed=1)
    assert len(chosen) == 4 and chosen == choose_sample(sizes, 450, seed=1)
    assert choose_sample(sizes, 10, seed=1) and len(choose_sample(sizes, 10, seed=1)) == 1
    assert len(choose_sample(sizes, 10_000, seed=1)) == 20


RESTORE_LIBRARIES = ("orbax", "orbax.checkpoint", "jax")


@pytest.mark.parametrize(
    ("flags", "check"),
    [
        (("--deep",), "deep validation (restoring arrays)"),
        (("--reference-step", "10"), "comparing shapes and dtypes with a reference step"),
    ],
)
def test_without_orbax_a_restore_check_names_the_extra(
    orbax_runs: dict[str, Path], flags: tuple[str, ...], check: str
) -> None:
    """No answer at all (exit 2, the environment's fault), never a valid one, and the message says what to install."""
    code = (
        f"import sys; sys.modules.update(dict.fromkeys({RESTORE_LIBRARIES!r}))\n"
        "from elastic_training.cli.main import main; raise SystemExit(main())"
    )
    run = str(orbax_runs["ocdbt"])
    proc = subprocess.run(
        [sys.executable, "-c", code, "validate", *flags, run], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stdout
    assert proc.stdout == ""
    assert proc.stderr.startswith(f"elastic-training validate: error: {check} needs orbax-checkpoint and jax")
    assert proc.stderr.rstrip().endswith("pip install 'elastic-training[deep]'")


def test_without_orbax_the_operator_fails_for_good(orbax_runs: dict[str, Path]) -> None:
    code = (
        f"import sys; sys.modules.update(dict.fromkeys({RESTORE_LIBRARIES!r}))\n"
        "from airflow.sdk.exceptions import AirflowFailException\n"
        "from elastic_training.operators import CheckpointValidationOperator\n"
        "op = CheckpointValidationOperator(task_id='v', path=sys.argv[1], deep=True)\n"
        "try:\n"
        "    op.execute({})\n"
        "except AirflowFailException as exc:\n"
        "    print(exc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(orbax_runs["ocdbt"])], capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'elastic-training[deep]'" in proc.stdout
