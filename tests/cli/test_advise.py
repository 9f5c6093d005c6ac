"""``elastic-training advise REPORT.json`` through the installed console script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.recovery_logs import report_with

SCRIPT = shutil.which("elastic-training", path=str(Path(sys.executable).parent))


def advise(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert SCRIPT is not None, "the console script is installed with the package (make setup)"
    return subprocess.run([SCRIPT, "advise", *args], input=stdin, capture_output=True, text=True, timeout=120)


def test_advice_for_a_report(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report_with(2)))
    result = advise(str(path))
    assert result.returncode == 0, result.stderr
    # Hand-worked in tests/operators/test_advice.py: period 10 at 85.0 %, configured 5 at 82.5 %.
    assert "checkpoint_period=10 (expected goodput 85.0%) instead of 5 (82.5%)" in result.stdout
    assert "sqrt(2*C*M)" in result.stdout
    as_json = advise(str(path), "--json")
    assert json.loads(as_json.stdout)["optimal_period"] == 10
    piped = advise("-", "--json", stdin=path.read_text())
    assert json.loads(piped.stdout) == json.loads(as_json.stdout)


def test_overrides_fill_what_an_older_report_lacks(tmp_path: Path) -> None:
    report = report_with(2)
    del report["checkpoint_save_seconds"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(report))
    refused = advise(str(path))
    assert refused.returncode == 2 and "no 'checkpoint_save_seconds' (pass --save-seconds)" in refused.stderr
    assert advise(str(path), "--save-seconds", "0.5").returncode == 0


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "no such file"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "a JSON list, not a run report object"),
        ('{"goodput": 1}', "not a run report (no 'target_step'"),
        (b"\xff\xfe\x00", "not UTF-8 text"),
        (
            '{"target_step": 9, "wall_seconds": 0, "mean_step_seconds": 1, "checkpoint_save_seconds": 1, '
            '"checkpoint_period": 5}',
            "wall_seconds must be a positive number",
        ),
        ('{"target_step": 9, "wall_seconds": "soon"}', "wrong type"),
    ],
)
def test_bad_input_files_are_refused_with_exit_2(tmp_path: Path, content: str | bytes | None, words: str) -> None:
    path = tmp_path / "report.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    result = advise(str(path))
    assert result.returncode == 2
    assert words in result.stderr and "Traceback" not in result.stderr


def test_a_directory_is_not_a_report(tmp_path: Path) -> None:
    result = advise(str(tmp_path))
    assert result.returncode == 2 and "is a directory" in result.stderr
