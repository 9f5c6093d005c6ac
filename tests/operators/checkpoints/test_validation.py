"""Real Orbax checkpoints, damaged one way at a time: each damage gives its named problem."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from elastic_training.operators.checkpoints import (
    IgnoredReason,
    Problem,
    ValidationOptions,
    validate_checkpoints,
)
from elastic_training.operators.checkpoints.validation import _expected_chunks
from tests.support.orbax_checkpoints import make_tree, write_run

Damage = Callable[[Path], None]


def _rm(rel: str) -> Damage:
    def damage(step: Path) -> None:
        target = step / rel
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()

    return damage


def _write(rel: str, data: bytes) -> Damage:
    return lambda step: (step / rel).write_bytes(data)


def _edit_json(rel: str, **changes: object) -> Damage:
    def damage(step: Path) -> None:
        doc = json.loads((step / rel).read_text())
        doc.update(changes)
        (step / rel).write_text(json.dumps(doc))

    return damage


def _truncate(rel: str, size: int = 0) -> Damage:
    def damage(step: Path) -> None:
        with open(step / rel, "r+b") as f:
            f.truncate(size)

    return damage


def _ocdbt_data(step: Path) -> list[Path]:
    return sorted(p for p in (step / "items").rglob("*") if p.is_file() and p.parent.name == "d")


def _empty_first_data_file(step: Path) -> None:
    _ocdbt_data(step)[0].write_bytes(b"")


def _remove_data_files(step: Path) -> None:
    for p in _ocdbt_data(step):
        p.unlink()


CASES: list[tuple[str, str, Damage, Problem]] = [
    ("zarr", "no commit marker", _rm("commit_success.txt"), Problem.COMMIT_MARKER_MISSING),
    ("ocdbt", "no commit marker", _rm("commit_success.txt"), Problem.COMMIT_MARKER_MISSING),
    ("zarr", "no step metadata", _rm("_CHECKPOINT_METADATA"), Problem.CHECKPOINT_METADATA_MISSING),
    (
        "zarr",
        "truncated step metadata",
        _truncate("_CHECKPOINT_METADATA", 40),
        Problem.CHECKPOINT_METADATA_UNREADABLE,
    ),
    (
        "ocdbt",
        "garbage step metadata",
        _write("_CHECKPOINT_METADATA", b"\x00\xff\xfe garbage"),
        Problem.CHECKPOINT_METADATA_UNREADABLE,
    ),
    (
        "zarr",
        "metadata is a JSON list",
        _write("_CHECKPOINT_METADATA", b"[1, 2]"),
        Problem.CHECKPOINT_METADATA_UNREADABLE,
    ),
    (
        "zarr",
        "null commit timestamp",
        _edit_json("_CHECKPOINT_METADATA", commit_timestamp_nsecs=None),
        Problem.COMMIT_TIMESTAMP_MISSING,
    ),
    ("zarr", "no items dir", _rm("items"), Problem.ITEM_MISSING),
    ("ocdbt", "no item marker", _rm("items/commit_success.txt"), Problem.ITEM_COMMIT_MARKER_MISSING),
    ("zarr", "no iter marker", _rm("iter/commit_success.txt"), Problem.ITEM_COMMIT_MARKER_MISSING),
    ("zarr", "empty iter item", _rm("iter/metadata"), Problem.ITEM_EMPTY),
    ("zarr", "no item _METADATA", _rm("items/_METADATA"), Problem.ITEM_METADATA_MISSING),
    ("ocdbt", "garbage item _METADATA", _write("items/_METADATA", b"{not json"), Problem.ITEM_METADATA_UNREADABLE),
    ("ocdbt", "empty tree", _edit_json("items/_METADATA", tree_metadata={}), Problem.TREE_METADATA_EMPTY),
    ("ocdbt", "no manifest.ocdbt", _rm("items/manifest.ocdbt"), Problem.OCDBT_MANIFEST_MISSING),
    (
        "ocdbt",
        "no per-process manifest",
        _rm("items/ocdbt.process_0/manifest.ocdbt"),
        Problem.OCDBT_PROCESS_MANIFEST_MISSING,
    ),
    ("ocdbt", "empty data file", _empty_first_data_file, Problem.DATA_FILE_EMPTY),
    ("ocdbt", "no data files", _remove_data_files, Problem.OCDBT_DATA_MISSING),
    ("zarr", "no .zarray", _rm("items/params.dense.kernel/.zarray"), Problem.ARRAY_METADATA_MISSING),
    (
        "zarr",
        "garbage .zarray",
        _write("items/opt.mu/.zarray", b'{"shape": "big"}'),
        Problem.ARRAY_METADATA_UNREADABLE,
    ),
    ("zarr", "missing chunk", _rm("items/opt.mu/0.0"), Problem.CHUNK_MISSING),
    ("zarr", "missing scalar chunk", _rm("items/step/0"), Problem.CHUNK_MISSING),
    ("zarr", "empty chunk", _truncate("items/params.embed/0.0"), Problem.DATA_FILE_EMPTY),
    ("zarr", "array dir gone", _rm("items/params.dense.bias"), Problem.ARRAY_METADATA_MISSING),
]


def test_pristine_runs_are_valid(orbax_runs: dict[str, Path]) -> None:
    for layout, run in orbax_runs.items():
        report = validate_checkpoints(str(run))
        assert report.valid, (layout, report.to_json())
        assert report.root == str(run / "checkpoints")
        assert [v.step for v in report.steps] == [20, 10, 0]
        assert report.target_step == report.latest_valid_step == 20
        newest = report.steps[0]
        assert newest.layout == ("ocdbt" if layout == "ocdbt" else "zarr2")
        assert newest.files > 5 and newest.bytes > 0 and newest.committed_at_nsecs
        assert sum(len(i.arrays) for i in newest.items) == 5
    assert [i.name for i in validate_checkpoints(str(orbax_runs["zarr"])).steps[0].items] == ["items", "iter"]


@pytest.mark.parametrize(("layout", "name", "damage", "expected"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_damage_is_named_and_newest_valid_step_falls_back(
    run_copy: Callable[[str], Path], layout: str, name: str, damage: Damage, expected: Problem
) -> None:
    run = run_copy(layout)
    damage(run / "checkpoints" / "20")
    report = validate_checkpoints(str(run))
    assert not report.valid
    assert report.target_step == 20
    codes = {p.code for p in report.target.problems} if report.target else set()
    assert expected in codes, report.to_json()
    assert report.latest_valid_step == 10
    assert all(v.valid for v in report.steps if v.step != 20)


def test_temporary_dir_is_not_a_step(run_copy: Callable[[str], Path]) -> None:
    run = run_copy("zarr")
    ckpt = run / "checkpoints"
    (ckpt / "20").rename(ckpt / "20.orbax-checkpoint-tmp")
    shutil.copytree(ckpt / "10", ckpt / "15.orbax-checkpoint-tmp-1700000000")
    report = validate_checkpoints(str(run))
    assert report.valid and report.target_step == 10
    assert {(i.name, i.reason, i.step) for i in report.ignored} == {
        ("20.orbax-checkpoint-tmp", IgnoredReason.TEMPORARY, 20),
        ("15.orbax-checkpoint-tmp-1700000000", IgnoredReason.TEMPORARY, 15),
    }


def test_non_ascii_digits_are_not_steps(run_copy: Callable[[str], Path]) -> None:
    ckpt = run_copy("zarr") / "checkpoints"
    shutil.copytree(ckpt / "10", ckpt / "\u0663")  # ARABIC-INDIC DIGIT THREE: int() reads 3
    shutil.copytree(ckpt / "10", ckpt / "\uff13\uff10")  # FULLWIDTH "30"
    shutil.copytree(ckpt / "10", ckpt / "\u0664\u0660.orbax-checkpoint-tmp")
    report = validate_checkpoints(str(ckpt))
    assert [v.step for v in report.steps] == [20, 10, 0] and report.target_step == 20
    assert {i.name: i.reason for i in report.ignored} == {
        "\u0663": IgnoredReason.NOT_A_STEP,
        "\uff13\uff10": IgnoredReason.NOT_A_STEP,
        "\u0664\u0660.orbax-checkpoint-tmp": IgnoredReason.TEMPORARY,
    }


def test_required_iter_item(run_copy: Callable[[str], Path]) -> None:
    """Requiring ``iter`` (a JSON item, no ``_METADATA``) does not make it a PyTree item."""
    run = run_copy("zarr")
    both = ValidationOptions(required_items=("items", "iter"))
    report = validate_checkpoints(str(run), options=both)
    assert report.valid and report.latest_valid_step == 20, report.to_json()
    shutil.rmtree(run / "checkpoints" / "20" / "iter")
    # The step metadata still names the iter handler, so it is missing even when not required.
    for options in (both, ValidationOptions()):
        damaged = validate_checkpoints(str(run), options=options)
        assert [(p.code, p.path) for p in damaged.target.problems] == [(Problem.ITEM_MISSING, "iter")]  # type: ignore[union-attr]
        assert damaged.latest_valid_step == 10
    ocdbt = run_copy("ocdbt")
    no_iter = validate_checkpoints(str(ocdbt), options=both)
    assert [v.step for v in no_iter.steps if v.valid] == [] and no_iter.latest_valid_step is None
    assert {p.code for p in no_iter.target.problems} == {Problem.ITEM_MISSING}  # type: ignore[union-attr]


def test_listing_cap_gives_listing_truncated(run_copy: Callable[[str], Path]) -> None:
    run = run_copy("ocdbt")

    def count(step: str) -> int:
        return sum(1 for p in (run / "checkpoints" / step).rglob("*") if p.is_file())

    files = count("10")
    # OCDBT writes a timing-dependent number of data files: step 20 may hold fewer than step 10. Pad it
    # until it has 3 more than the cap, so only step 20 goes over.
    for i in range(max(3, files - count("20") + 3)):
        (run / "checkpoints" / "20" / "items" / f"extra{i}").write_bytes(b"x")
    report = validate_checkpoints(str(run), options=ValidationOptions(max_files=files))
    assert [p.code for p in report.target.problems] == [Problem.LISTING_TRUNCATED]  # type: ignore[union-attr]
    assert report.target.files == files  # type: ignore[union-attr]
    assert report.latest_valid_step == 10


def test_other_names_are_reported(run_copy: Callable[[str], Path]) -> None:
    ckpt = run_copy("ocdbt") / "checkpoints"
    (ckpt / "notes").mkdir()
    (ckpt / "30").write_text("a file, not a step")
    shutil.copytree(ckpt / "10", ckpt / "0010")
    (ckpt / "quarantine").mkdir()
    reasons = {i.name: i.reason for i in validate_checkpoints(str(ckpt)).ignored}
    assert reasons == {
        "notes": IgnoredReason.NOT_A_STEP,
        "30": IgnoredReason.NOT_A_DIRECTORY,
        "0010": IgnoredReason.DUPLICATE_STEP,
        "quarantine": IgnoredReason.QUARANTINE,
    }


def test_a_given_step_and_a_step_path(orbax_runs: dict[str, Path]) -> None:
    run = orbax_runs["ocdbt"]
    assert validate_checkpoints(str(run), step=10).target_step == 10
    by_path = validate_checkpoints(str(run / "checkpoints" / "10"))
    assert by_path.valid and by_path.target_step == 10 and by_path.root == str(run / "checkpoints")
    missing = validate_checkpoints(str(run), step=11)
    assert not missing.valid and "step 11 not found" in (missing.error or "")


def test_no_steps_and_no_directory(tmp_path: Path) -> None:
    assert "no checkpoint steps" in (validate_checkpoints(str(tmp_path)).error or "")
    gone = validate_checkpoints(str(tmp_path / "nope"))
    assert not gone.valid and "no such directory" in (gone.error or "")


def test_min_step(orbax_runs: dict[str, Path]) -> None:
    report = validate_checkpoints(str(orbax_runs["zarr"]), options=ValidationOptions(min_step=25))
    assert not report.valid
    assert [p.code for p in report.target.problems] == [Problem.STEP_BELOW_EXPECTED]  # type: ignore[union-attr]


def test_commit_marker_can_be_optional_locally(run_copy: Callable[[str], Path]) -> None:
    run = run_copy("ocdbt")
    for marker in (run / "checkpoints").rglob("commit_success.txt"):
        marker.unlink()
    assert not validate_checkpoints(str(run)).valid
    relaxed = validate_checkpoints(str(run), options=ValidationOptions(require_commit_marker=False))
    assert relaxed.valid and relaxed.latest_valid_step == 20


def test_reference_step_tree_shape_and_dtype(tmp_path: Path) -> None:
    def tree(step: int) -> dict[str, object]:
        t = make_tree(step)
        if step == 20:
            t["opt"]["mu"] = np.zeros((4, 4), np.float16)  # type: ignore[index]
        if step == 30:
            del t["params"]["dense"]["bias"]  # type: ignore[index]
        return t

    root = write_run(tmp_path / "run", ocdbt=True, steps=(10, 20, 30), tree_fn=tree)
    ok = validate_checkpoints(str(root), step=10, reference_step=10)
    assert ok.valid
    shaped = validate_checkpoints(str(root), step=20, reference_step=10)
    assert {p.code for p in shaped.target.problems} == {Problem.SHAPE_MISMATCH, Problem.DTYPE_MISMATCH}  # type: ignore[union-attr]
    pruned = validate_checkpoints(str(root), step=30, reference_step=10)
    assert [p.code for p in pruned.target.problems] == [Problem.TREE_MISMATCH]  # type: ignore[union-attr]
    assert "params.dense.bias" in pruned.target.problems[0].detail  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        ({"shape": [8, 8], "chunks": [4, 4]}, ["0.0", "0.1", "1.0", "1.1"]),
        ({"shape": [5], "chunks": [2]}, ["0", "1", "2"]),
        ({"shape": [], "chunks": []}, ["0"]),
        ({"shape": [0, 4], "chunks": [1, 4]}, []),
        ({"shape": [4, 4], "chunks": [2, 4], "dimension_separator": "/"}, ["0/0", "1/0"]),
    ],
)
def test_expected_zarr2_chunks(meta: dict[str, object], expected: list[str]) -> None:
    result = _expected_chunks(meta, zarr3=False)
    assert result is not None
    count, keys = result
    assert count == len(expected) and list(keys or []) == expected


def test_expected_chunks_bounded_and_zarr3() -> None:
    huge = _expected_chunks({"shape": [10**12, 10**12], "chunks": [1, 1]}, zarr3=False)
    assert huge is not None and huge[0] == 10**24 and huge[1] is None
    z3 = {"shape": [4, 2], "chunk_grid": {"configuration": {"chunk_shape": [2, 2]}}}
    result = _expected_chunks(z3, zarr3=True)
    assert result is not None and list(result[1] or []) == ["c/0/0", "c/1/0"]
    assert _expected_chunks({"shape": [-1], "chunks": [1]}, zarr3=False) is None


def test_library_does_not_import_airflow_or_jax() -> None:
    """Every module of the validator, and a whole validation run, load no Airflow (nor JAX/Orbax)."""
    code = (
        "import importlib, pkgutil, sys, tempfile, elastic_training.operators.checkpoints as c\n"
        "mods = [importlib.import_module(m.name) for m in pkgutil.iter_modules(c.__path__, c.__name__ + '.')]\n"
        "assert len(mods) >= 8, mods\n"
        "c.validate_checkpoints(sys.argv[1])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('airflow', 'jax', 'orbax'))\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent)], capture_output=True, text=True, cwd=os.getcwd()
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "[]"
