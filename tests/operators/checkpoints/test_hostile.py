"""Hostile names and file contents: always a verdict, never a hang, a crash or a traceback."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elastic_training.cli.validate import print_table
from elastic_training.operators.checkpoints import Problem, ValidationOptions, validate_checkpoints
from elastic_training.operators.checkpoints.discovery import discover
from elastic_training.operators.checkpoints.storage import LocalStorage

HOSTILE = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

contents = st.one_of(
    st.binary(max_size=2048),
    st.text(max_size=512).map(str.encode),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
        max_leaves=30,
    ).map(lambda v: json.dumps(v).encode()),
    st.integers(1000, 100_000).map(lambda n: b"[" * n + b"]" * n),  # deep nesting
)
names = st.text(
    alphabet=st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=60
).filter(lambda n: n not in (".", ".."))
FILES = (
    "_CHECKPOINT_METADATA",
    "items/_METADATA",
    "items/opt.mu/.zarray",
    "iter/metadata",
    "commit_success.txt",
)


@pytest.fixture(scope="module")
def pristine(orbax_runs: dict[str, Path]) -> Path:
    return orbax_runs["zarr"]


@HOSTILE
@given(target=st.sampled_from(FILES), data=contents)
def test_any_metadata_content_gives_a_verdict(
    pristine: Path, tmp_path_factory: pytest.TempPathFactory, target: str, data: bytes
) -> None:
    run = tmp_path_factory.mktemp("hostile")
    shutil.copytree(pristine / "checkpoints" / "20", run / "20")
    (run / "20" / target).write_bytes(data)
    report = validate_checkpoints(str(run))
    assert report.target_step == 20 and report.target is not None
    json.dumps(report.to_json())  # always serialisable
    print_table(report, io.StringIO())
    if target == "commit_success.txt":  # only its presence counts
        assert report.valid, report.to_json()
    elif target == "iter/metadata":  # a non-PyTree item: any non-empty data
        assert report.valid == bool(data), report.to_json()
    else:  # the step's, the tree's or an array's metadata, replaced by arbitrary bytes
        assert not report.valid and report.target.problems


@HOSTILE
@given(odd=st.lists(names, min_size=1, max_size=8, unique=True))
def test_odd_names_under_the_root(tmp_path_factory: pytest.TempPathFactory, odd: list[str]) -> None:
    root = tmp_path_factory.mktemp("names")
    made = []
    for i, name in enumerate(odd):
        try:
            if i % 2:
                (root / name).mkdir()
            else:
                (root / name).write_bytes(b"x")
            made.append(name)
        except OSError:
            continue  # a name this filesystem refuses (too long, ...)
    found = discover(LocalStorage(), str(root))
    assert sorted([*(os.path.basename(p) for p in found.steps.values()), *(i.name for i in found.ignored)]) == sorted(
        made
    )
    report = validate_checkpoints(str(root))
    json.dumps(report.to_json())


@HOSTILE
@given(odd=st.lists(names, min_size=1, max_size=6, unique=True), where=st.sampled_from(["", "items", "items/opt.mu"]))
def test_odd_names_inside_a_step(
    pristine: Path, tmp_path_factory: pytest.TempPathFactory, odd: list[str], where: str
) -> None:
    """Stray files and directories with odd names inside a step: a verdict, and the older step stays valid."""
    run = tmp_path_factory.mktemp("inside")
    for step in ("10", "20"):
        shutil.copytree(pristine / "checkpoints" / step, run / step)
    for i, name in enumerate(odd):
        with contextlib.suppress(OSError):  # a name this filesystem refuses (too long, ...)
            if i % 2:
                (run / "20" / where / name).mkdir()
            else:
                (run / "20" / where / name).write_bytes(b"\x00" * i)
    report = validate_checkpoints(str(run))
    assert report.target_step == 20 and report.verdict(10) is not None and report.verdict(10).valid  # type: ignore[union-attr]
    assert report.latest_valid_step in (10, 20)
    json.dumps(report.to_json())
    out = io.StringIO()
    print_table(report, out)
    assert all(c.isprintable() for line in out.getvalue().splitlines() for c in line)


def test_huge_metadata_is_refused_not_read(run_copy: object, orbax_runs: dict[str, Path], tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(orbax_runs["ocdbt"], run)
    meta = run / "checkpoints" / "20" / "_CHECKPOINT_METADATA"
    with open(meta, "wb") as f:
        f.truncate(200 * 1024 * 1024)  # sparse: 200 MiB of zeros
    report = validate_checkpoints(str(run), options=ValidationOptions(max_metadata_bytes=1024 * 1024))
    problem = report.target.problems[0]  # type: ignore[union-attr]
    assert problem.code is Problem.CHECKPOINT_METADATA_UNREADABLE and "larger than" in problem.detail
    assert report.latest_valid_step == 10


def test_symlink_loops_fifos_and_dangling_links(orbax_runs: dict[str, Path], tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(orbax_runs["zarr"], run)
    step = run / "checkpoints" / "20"
    (step / "items" / "loop").symlink_to(step / "items", target_is_directory=True)
    (step / "items" / "self").symlink_to(step / "items" / "self")
    os.unlink(step / "_CHECKPOINT_METADATA")
    os.mkfifo(step / "_CHECKPOINT_METADATA")
    os.unlink(step / "items" / "_METADATA")
    (step / "items" / "_METADATA").symlink_to(step / "items" / "_METADATA")
    (run / "checkpoints" / "30").symlink_to(run / "checkpoints", target_is_directory=True)
    report = validate_checkpoints(str(run))
    assert report.latest_valid_step == 10
    codes = {p.code for p in report.verdict(20).problems}  # type: ignore[union-attr]
    assert {Problem.UNREADABLE_ENTRY, Problem.CHECKPOINT_METADATA_MISSING, Problem.ITEM_METADATA_MISSING} <= codes
    looped = report.verdict(30)
    assert looped is not None and not looped.valid  # the root seen again through a link: not a step


def test_many_problems_are_capped(run_copy: object, orbax_runs: dict[str, Path], tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(orbax_runs["ocdbt"], run)
    d = run / "checkpoints" / "20" / "items" / "d"
    for i in range(50):
        (d / f"empty{i}").write_bytes(b"")
    problems = validate_checkpoints(str(run)).target.problems  # type: ignore[union-attr]
    assert len(problems) == 21 and problems[-1].detail == "and 30 more of this kind"
