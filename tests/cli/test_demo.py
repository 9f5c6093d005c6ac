"""`elastic-training demo`: the real run on the local cluster, and its argument checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.main import main
from operators.constants import RECOVERY_RECORDS_FILE


@pytest.mark.slow
def test_demo_recovers_from_a_killed_slice_and_reports_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--workdir", str(tmp_path), "--steps", "120", "--kill-at-step", "30"]) == 0
    out = capsys.readouterr().out
    assert "JobSet terminal state      : Completed" in out
    assert "JobSet restarts            : 0" in out
    assert "Trainer pod kept           : yes" in out
    assert "(1 replaced)" in out
    assert "Result: OK: training reached step 119 with 1 in-process recovery" in out
    [record] = [
        json.loads(line)
        for line in (tmp_path / "output" / "demo-pretrain" / RECOVERY_RECORDS_FILE).read_text().splitlines()
    ]
    assert record["outcome"] == "recovered"
    assert f"steps lost               : {record['steps_lost']} " in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--slices", "1"], "--slices must be at least 2"),
        (["--steps", "10", "--checkpoint-period", "10"], "--checkpoint-period must be at least 1 and smaller"),
        (["--kill-at-step", "5"], "--kill-at-step must be after the first checkpoint period"),
    ],
)
def test_demo_rejects_bad_arguments_before_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["demo", "--workdir", str(tmp_path / "w"), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "w").exists()
