"""Orbax checkpoints in MaxText's layout with commit-file atomicity, and MaxText's log lines."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from elastic_training.local.workloads import checkpointing
from elastic_training.operators.constants import (
    COMMIT_SUCCESS_FILE,
    NO_CHECKPOINT_RE,
    RESTORING_STEP_RE,
    SAVED_CHECKPOINT_RE,
)

STATE = {"params": {"w": jnp.arange(6.0).reshape(2, 3)}, "step": jnp.int32(0)}


def _state(step: int) -> dict[str, object]:
    return {"params": {"w": jnp.arange(6.0).reshape(2, 3) + step}, "step": jnp.int32(step + 1)}


def _save(directory: Path, steps: list[int]) -> None:
    manager = checkpointing.create_manager(str(directory), period=1, async_checkpointing=True)
    for step in steps:
        assert checkpointing.save_checkpoint(manager, step, _state(step), async_checkpointing=True)
    manager.close()


def test_layout_markers_and_log_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    directory = tmp_path / "run" / "checkpoints"
    manager = checkpointing.create_manager(str(directory), period=5, async_checkpointing=False)
    saved = [s for s in range(12) if checkpointing.save_checkpoint(manager, s, _state(s), async_checkpointing=False)]
    assert checkpointing.save_checkpoint(manager, 11, _state(11), async_checkpointing=False, force=True)
    manager.close()
    assert saved == [0, 5, 10]
    for step in (0, 5, 10, 11):
        assert (directory / str(step) / COMMIT_SUCCESS_FILE).is_file()
        assert (directory / str(step) / "items" / COMMIT_SUCCESS_FILE).is_file()
    assert [int(m[1]) for m in SAVED_CHECKPOINT_RE.finditer(caplog.text)] == [0, 5, 10, 11]


def test_restore_newest_committed_step_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    directory = tmp_path / "checkpoints"
    _save(directory, [0, 5])
    # What a save killed part-way leaves with commit-file atomicity: the step written in place, no marker.
    shutil.copytree(directory / "5", directory / "10")
    (directory / "10" / COMMIT_SUCCESS_FILE).unlink()
    assert checkpointing.latest_committed_step(str(directory)) == 5

    manager = checkpointing.create_manager(str(directory), period=5)
    loaded = checkpointing.load_state_if_possible(manager, checkpointing.abstract_like(_state(0)))
    assert loaded is not None
    state, step = loaded
    assert step == 5 and int(state["step"]) == 6
    assert RESTORING_STEP_RE.search(caplog.text)[1] == "5"  # type: ignore[index]
    # The same step can be saved again over the unmarked leftovers.
    assert checkpointing.save_checkpoint(manager, 10, _state(10), async_checkpointing=True)
    manager.close()
    assert checkpointing.latest_committed_step(str(directory)) == 10
    restored = checkpointing.restore_checkpoint(
        checkpointing.create_manager(str(directory), read_only=True), 10, checkpointing.abstract_like(_state(0))
    )
    assert float(restored["params"]["w"][0, 0]) == 10.0


def test_no_checkpoint_message(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    manager = checkpointing.create_manager(str(tmp_path / "checkpoints"))
    assert checkpointing.load_state_if_possible(manager, checkpointing.abstract_like(STATE)) is None
    manager.close()
    assert NO_CHECKPOINT_RE.search(caplog.text)
    assert checkpointing.latest_committed_step(str(tmp_path / "missing")) is None


def test_clean_up_deletes_only_a_newest_unmarked_step(tmp_path: Path) -> None:
    directory = tmp_path / "checkpoints"
    _save(directory, [0, 5])
    assert checkpointing.clean_up_incomplete_checkpoint(str(directory)) is None
    shutil.copytree(directory / "5", directory / "10")
    (directory / "10" / COMMIT_SUCCESS_FILE).unlink()
    assert checkpointing.clean_up_incomplete_checkpoint(str(directory)) == str(directory / "10")
    assert sorted(p.name for p in directory.iterdir() if p.name.isdigit()) == ["0", "5"]
    assert jax.devices()


def test_kill_during_save_step_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(checkpointing.KILL_DURING_SAVE_ENV, raising=False)
    assert checkpointing.kill_during_save_step() is None
    monkeypatch.setenv(checkpointing.KILL_DURING_SAVE_ENV, " 20 ")
    assert checkpointing.kill_during_save_step() == 20
    monkeypatch.setenv(checkpointing.KILL_DURING_SAVE_ENV, "twenty")
    with pytest.raises(ValueError, match="must be a step number"):
        checkpointing.kill_during_save_step()


def test_an_armed_kill_leaves_other_steps_alone(tmp_path: Path) -> None:
    directory = tmp_path / "checkpoints"
    manager = checkpointing.create_manager(str(directory), period=1, kill_during_save_step=99)
    for step in (0, 1):
        assert checkpointing.save_checkpoint(manager, step, _state(step), async_checkpointing=True)
    manager.close()
    assert checkpointing.latest_committed_step(str(directory)) == 1
    assert (directory / "1" / "items" / COMMIT_SUCCESS_FILE).is_file()
