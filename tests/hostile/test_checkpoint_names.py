"""Hostile checkpoint trees and step names: `validate_checkpoints` gives a verdict for any generated tree, and
`quarantine_step` either moves a step inside `<root>/quarantine` or refuses the name; nothing escapes the root."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastic_training.operators.checkpoints import QUARANTINE_DIR, quarantine_step, validate_checkpoints
from tests.support.hostile_strategies import HOSTILE

# Names a filesystem takes (no '/' or NUL), biased towards ones that look like steps.
names = st.one_of(
    st.text(
        alphabet=st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=30
    ),
    st.integers(0, 10**20).map(str),
    st.integers(0, 999).map(lambda n: f"{n}\n"),
    st.integers(0, 999).map(lambda n: f"0{n}"),
    st.integers(0, 999).map(lambda n: f"{n}.orbax-checkpoint-tmp"),
    st.sampled_from(["\u0663", "\uff11", "1 ", " 1", "+1", "-1", "1e3", "..", ".", QUARANTINE_DIR, "checkpoints"]),
).filter(lambda n: n not in (".", ".."))

# A tree: each entry is a relative path of 1-3 names and what to put there.
trees = st.lists(
    st.tuples(st.lists(names, min_size=1, max_size=3), st.sampled_from(["dir", "file", "link-out", "link-loop"])),
    max_size=12,
)


def _build(root: Path, outside: Path, tree: list[tuple[list[str], str]]) -> None:
    for parts, kind in tree:
        path = root.joinpath(*parts)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if kind == "dir":
                path.mkdir(exist_ok=True)
            elif kind == "file":
                path.write_bytes(b"x")
            elif kind == "link-out":
                path.symlink_to(outside)
            else:
                path.symlink_to(path)
        except OSError:
            continue  # a name or a shape this filesystem refuses


@HOSTILE
@given(tree=trees, step=st.none() | st.integers(0, 10**19))
def test_any_tree_gives_a_verdict(
    tmp_path_factory: pytest.TempPathFactory, tree: list[tuple[list[str], str]], step: int | None
) -> None:
    base = tmp_path_factory.mktemp("tree")
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret").write_text("not a checkpoint")
    root = base / "root"
    root.mkdir()
    _build(root, outside, tree)
    report = validate_checkpoints(str(root), step=step)
    json.dumps(report.to_json())
    for verdict in report.steps:
        assert os.path.realpath(verdict.path).startswith(str(root)) or os.path.islink(verdict.path)
        assert str(verdict.step) == os.path.basename(verdict.path).lstrip("0") or verdict.step == 0
    assert (outside / "secret").read_text() == "not a checkpoint"


def test_a_step_name_with_a_trailing_newline_is_not_a_step(tmp_path: Path) -> None:
    (tmp_path / "5\n").mkdir()
    report = validate_checkpoints(str(tmp_path))
    assert report.steps == () or all(v.step != 5 for v in report.steps)
    assert any(i.name == "5\n" for i in report.ignored)


@HOSTILE
@given(name=names | st.sampled_from(["", "a/b", "../x", "/etc", "5/../../x", QUARANTINE_DIR]))
def test_quarantine_names(tmp_path_factory: pytest.TempPathFactory, name: str) -> None:
    base = tmp_path_factory.mktemp("quarantine")
    root = base / "checkpoints"
    root.mkdir()
    with contextlib.suppress(OSError):
        (root / name).mkdir()
    before = sorted(p.name for p in base.iterdir())
    try:
        moved = quarantine_step(str(root), name)
    except (ValueError, FileNotFoundError):
        assert sorted(p.name for p in base.iterdir()) == before
        return
    assert Path(moved).parent == root / QUARANTINE_DIR
    assert Path(moved).name.startswith(name + ".")
    assert not (root / name).exists()
    assert sorted(p.name for p in base.iterdir()) == before
