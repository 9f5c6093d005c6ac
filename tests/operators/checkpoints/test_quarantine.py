"""Quarantine moves an invalid step aside (never deletes it) so the newest step becomes valid."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from elastic_training.operators.checkpoints import IgnoredReason, quarantine_step, validate_checkpoints


def test_quarantine_moves_aside_and_resume_picks_last_valid(run_copy: Callable[[str], Path]) -> None:
    run = run_copy("zarr")
    ckpt = run / "checkpoints"
    (ckpt / "20" / "commit_success.txt").unlink()
    files_before = sorted(p.relative_to(ckpt / "20") for p in (ckpt / "20").rglob("*"))
    report = validate_checkpoints(str(run))
    assert not report.valid

    moved = quarantine_step(report.root, "20", now=0)
    assert moved == str(ckpt / "quarantine" / "20.19700101T000000Z")
    assert sorted(p.relative_to(moved) for p in Path(moved).rglob("*")) == files_before
    again = validate_checkpoints(str(run))
    assert again.valid and again.target_step == 10
    assert [(i.name, i.reason) for i in again.ignored] == [("quarantine", IgnoredReason.QUARANTINE)]

    # Same step, same second: a new name, never an overwrite.
    (ckpt / "20").mkdir()
    assert quarantine_step(str(ckpt), "20", now=0).endswith("20.19700101T000000Z-2")


def test_quarantine_refuses_bad_names(tmp_path: Path) -> None:
    for bad in ("", "..", "a/b", "quarantine"):
        with pytest.raises(ValueError):
            quarantine_step(str(tmp_path), bad)
    with pytest.raises(FileNotFoundError):
        quarantine_step(str(tmp_path), "7")
