"""`elastic-training validate`: exit codes 0/1/2, the JSON schema, and the short table."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from elastic_training.cli import validate


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="elastic-training validate")
    validate.add_arguments(parser)
    try:
        code = validate.run(parser.parse_args(list(argv)))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_valid_run_exits_0_with_a_table(capsys: pytest.CaptureFixture[str], orbax_runs: dict[str, Path]) -> None:
    code, out, _ = _run(capsys, str(orbax_runs["zarr"]))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].endswith("/checkpoints") and "STEP" in lines[1]
    assert lines[2].startswith("*") and " 20 " in lines[2] and "yes" in lines[2]
    assert lines[-1] == "step 20: VALID; latest valid step: 20"


def test_json_schema(capsys: pytest.CaptureFixture[str], run_copy: Callable[[str], Path]) -> None:
    run = run_copy("ocdbt")
    (run / "checkpoints" / "20" / "commit_success.txt").unlink()
    (run / "checkpoints" / "10").rename(run / "checkpoints" / "10.orbax-checkpoint-tmp")
    code, out, _ = _run(capsys, str(run), "--json")
    assert code == 1
    doc = json.loads(out)
    assert set(doc) == {"path", "root", "valid", "step", "latest_valid_step", "error", "steps", "ignored"}
    assert (doc["valid"], doc["step"], doc["latest_valid_step"]) == (False, 20, 0)
    assert [s["step"] for s in doc["steps"]] == [20, 0]
    first = doc["steps"][0]
    assert set(first) >= {"step", "valid", "problems", "path", "files", "bytes", "layout"}
    assert first["problems"][0] == {
        "code": "commit_marker_missing",
        "path": "commit_success.txt",
        "detail": "the step was never committed",
    }
    assert doc["ignored"] == [{"name": "10.orbax-checkpoint-tmp", "reason": "temporary", "step": 10}]


def test_given_step_and_deep(capsys: pytest.CaptureFixture[str], orbax_runs: dict[str, Path]) -> None:
    code, out, _ = _run(capsys, str(orbax_runs["ocdbt"]), "--step", "10", "--deep", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["step"] == 10
    assert next(s for s in doc["steps"] if s["step"] == 10)["deep"]["items"]["sampled"] is False


def test_missing_step_or_no_steps_exit_1(
    capsys: pytest.CaptureFixture[str], orbax_runs: dict[str, Path], tmp_path: Path
) -> None:
    code, out, _ = _run(capsys, str(orbax_runs["ocdbt"]), "--step", "7")
    assert code == 1 and "error: step 7 not found" in out
    code, out, _ = _run(capsys, str(tmp_path))
    assert code == 1 and "no checkpoint steps found" in out


def test_json_when_no_step_exists(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "20.orbax-checkpoint-tmp").mkdir()
    code, out, _ = _run(capsys, str(tmp_path), "--json")
    doc = json.loads(out)
    assert code == 1
    assert (doc["valid"], doc["step"], doc["latest_valid_step"], doc["steps"]) == (False, None, None, [])
    assert doc["error"].startswith("no checkpoint steps found")
    assert doc["ignored"] == [{"name": "20.orbax-checkpoint-tmp", "reason": "temporary", "step": 20}]


def test_required_items_option(capsys: pytest.CaptureFixture[str], orbax_runs: dict[str, Path]) -> None:
    code, out, _ = _run(capsys, str(orbax_runs["zarr"]), "--items", "items,iter")
    assert code == 0 and out.splitlines()[-1] == "step 20: VALID; latest valid step: 20"
    code, out, _ = _run(capsys, str(orbax_runs["ocdbt"]), "--items", "items,iter")
    assert code == 1 and "item_missing (iter)" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["/definitely/not/here"], "no such file or directory"),
        (["gs://"], "without a bucket"),
        (["gs://bucket/run", "--no-commit-marker"], "always required on gs://"),
        (["{tmp}", "--step", "-3"], "must be >= 0"),
        (["{tmp}", "--step", "x"], "not an integer"),
        (["{tmp}", "--deep-budget", "lots"], "not a size"),
        (["{tmp}/file"], "not a directory"),
    ],
)
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str) -> None:
    (tmp_path / "file").write_text("x")
    code, _out, err = _run(capsys, *(a.format(tmp=tmp_path) for a in argv))
    assert code == 2 and message in err and "Traceback" not in err


def test_console_script_end_to_end(orbax_runs: dict[str, Path]) -> None:
    """Through `python -m elastic_training.cli` (the dispatcher), exit code and JSON on stdout."""
    result = subprocess.run(
        [sys.executable, "-m", "elastic_training.cli", "validate", str(orbax_runs["zarr"]), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if "No module named 'elastic_training.cli.cluster'" in result.stderr:
        pytest.skip("the cluster subcommand is not there yet")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["latest_valid_step"] == 20
