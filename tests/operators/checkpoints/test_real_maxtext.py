"""The validator on checkpoints real MaxText 0.2.5 wrote (tests/support/real_maxtext.py): OCDBT + zarr3.

Committed steps are valid, metadata-only and ``--deep``; each damage of the validator's corpus
(tests/operators/checkpoints/test_validation.py: deleted files, a missing commit marker, a tmp step) and
truncated or flipped OCDBT data gives its named problem, and the newest valid step falls back to 20.
What only a restore can see (a data file's bytes) is caught by ``--deep`` alone, as the last cases show.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from elastic_training.operators.checkpoints import DeepOptions, IgnoredReason, Problem, validate_checkpoints
from tests.support.real_maxtext import RealMaxText

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

Damage = Callable[[Path], None]
STEPS = [29, 20, 10, 0]


def _index_node(step: Path) -> Path:
    # The merged OCDBT database's own b-tree nodes sit in items/d/; the array bytes in ocdbt.process_0/d/.
    (node,) = sorted((step / "items" / "d").iterdir())
    return node


def _largest_data_file(step: Path) -> Path:
    return max((step / "items" / "ocdbt.process_0" / "d").iterdir(), key=lambda p: p.stat().st_size)


def _rm(rel: str) -> Damage:
    return lambda step: (step / rel).unlink()


def _truncate(pick: Callable[[Path], Path]) -> Damage:
    def damage(step: Path) -> None:
        target = pick(step)
        with open(target, "r+b") as f:
            f.truncate(target.stat().st_size // 2)

    return damage


def _flip(pick: Callable[[Path], Path], offset: int, length: int) -> Damage:
    def damage(step: Path) -> None:
        target = pick(step)
        data = bytearray(target.read_bytes())
        for i in range(offset, min(offset + length, len(data))):
            data[i] ^= 0xFF
        target.write_bytes(bytes(data))

    return damage


# (name, damage, the problem both modes name); metadata-only validation sees these.
SEEN_BY_METADATA: list[tuple[str, Damage, Problem]] = [
    ("no commit marker", _rm("commit_success.txt"), Problem.COMMIT_MARKER_MISSING),
    ("no item commit marker", _rm("items/commit_success.txt"), Problem.ITEM_COMMIT_MARKER_MISSING),
    ("no step metadata", _rm("_CHECKPOINT_METADATA"), Problem.CHECKPOINT_METADATA_MISSING),
    ("no item _METADATA", _rm("items/_METADATA"), Problem.ITEM_METADATA_MISSING),
    ("no manifest.ocdbt", _rm("items/manifest.ocdbt"), Problem.OCDBT_MANIFEST_MISSING),
    ("deleted index node", lambda step: _index_node(step).unlink(), Problem.OCDBT_INDEX_UNREADABLE),
    ("truncated index node", _truncate(_index_node), Problem.OCDBT_INDEX_UNREADABLE),
    ("flipped index node", _flip(_index_node, 64, 64), Problem.OCDBT_INDEX_UNREADABLE),
]
# Array bytes: the index and every metadata file still agree, so only --deep (a restore) sees them.
SEEN_BY_DEEP: list[tuple[str, Damage, Problem]] = [
    ("deleted data file", lambda step: _largest_data_file(step).unlink(), Problem.RESTORE_FAILED),
    ("truncated data file", _truncate(_largest_data_file), Problem.RESTORE_FAILED),
    ("flipped data file", _flip(_largest_data_file, 64, 4096), Problem.RESTORE_FAILED),
]


@pytest.fixture
def damaged_copy(real_maxtext: RealMaxText, tmp_path: Path) -> Callable[[Damage], Path]:
    def copy(damage: Damage) -> Path:
        run = tmp_path / "t1"
        shutil.copytree(real_maxtext.checkpoints, run / "checkpoints")
        damage(run / "checkpoints" / "29")
        return run

    return copy


def test_committed_steps_are_valid(real_maxtext: RealMaxText) -> None:
    report = validate_checkpoints(str(real_maxtext.run_directory))
    assert report.valid, report.to_json()
    assert [v.step for v in report.steps] == STEPS
    assert report.target_step == report.latest_valid_step == 29
    newest = report.steps[0]
    assert newest.layout == "ocdbt" and [i.name for i in newest.items] == ["items"]
    assert sum(len(i.arrays) for i in newest.items) > 40  # MaxText's params, opt_state, nnx_aux and step


def test_deep_restores_every_array_of_every_step(real_maxtext: RealMaxText) -> None:
    for step in STEPS:
        report = validate_checkpoints(str(real_maxtext.run_directory), step=step, deep=DeepOptions())
        assert report.valid, report.to_json()
        deep = report.target.deep["items"]  # type: ignore[index, union-attr]
        assert deep["arrays_checked"] == deep["arrays_total"] > 40 and not deep["sampled"]


def test_deep_samples_real_maxtext_within_a_budget(real_maxtext: RealMaxText) -> None:
    report = validate_checkpoints(str(real_maxtext.run_directory), deep=DeepOptions(budget_bytes=4096))
    assert report.valid, report.to_json()
    deep = report.target.deep["items"]  # type: ignore[index, union-attr]
    assert deep["sampled"] and 1 <= deep["arrays_checked"] < deep["arrays_total"]
    assert deep["bytes_checked"] <= 4096


@pytest.mark.parametrize(("name", "damage", "expected"), SEEN_BY_METADATA, ids=[c[0] for c in SEEN_BY_METADATA])
def test_damage_seen_by_metadata(
    damaged_copy: Callable[[Damage], Path], name: str, damage: Damage, expected: Problem
) -> None:
    run = damaged_copy(damage)
    for deep in (None, DeepOptions()):
        report = validate_checkpoints(str(run), deep=deep)
        assert not report.valid and report.target_step == 29
        assert expected in {p.code for p in report.target.problems}, report.to_json()  # type: ignore[union-attr]
        assert report.latest_valid_step == 20


@pytest.mark.parametrize(("name", "damage", "expected"), SEEN_BY_DEEP, ids=[c[0] for c in SEEN_BY_DEEP])
def test_damage_seen_by_deep_only(
    damaged_copy: Callable[[Damage], Path], name: str, damage: Damage, expected: Problem
) -> None:
    run = damaged_copy(damage)
    assert validate_checkpoints(str(run)).valid  # metadata alone cannot see the array bytes
    report = validate_checkpoints(str(run), deep=DeepOptions())
    assert not report.valid
    assert [p.code for p in report.target.problems] == [expected], report.to_json()  # type: ignore[union-attr]
    assert report.latest_valid_step == 20


def test_tmp_step_is_not_a_step(damaged_copy: Callable[[Damage], Path]) -> None:
    run = damaged_copy(lambda step: step.rename(step.with_name("29.orbax-checkpoint-tmp")))
    report = validate_checkpoints(str(run), deep=DeepOptions())
    assert report.valid and report.latest_valid_step == 20
    assert [(i.name, i.reason) for i in report.ignored] == [("29.orbax-checkpoint-tmp", IgnoredReason.TEMPORARY)]
