"""A directory that cannot be read is `directory_unreadable`, never `chunk_missing` or the like.

Root reads any directory whatever its mode (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), so as root
the validator runs in a child process without those two capabilities (``setpriv``); as any
other user it runs in-process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from elastic_training.operators.checkpoints import Problem, validate_checkpoints

REPO = Path(__file__).resolve().parents[3]


def _validate_without_root_powers(run: Path) -> dict[str, Any]:
    if os.geteuid() != 0:
        return validate_checkpoints(str(run)).to_json()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: every directory is readable")
    code = (
        "import json, sys; from operators.checkpoints import validate_checkpoints; "
        "print(json.dumps(validate_checkpoints(sys.argv[1]).to_json()))"
    )
    proc = subprocess.run(
        [setpriv, "--bounding-set", "-dac_override,-dac_read_search", sys.executable, "-c", code, str(run)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _problems(report: dict[str, Any], step: int) -> list[tuple[str, str]]:
    (verdict,) = [s for s in report["steps"] if s["step"] == step]
    return [(p["code"], p["path"]) for p in verdict["problems"]]


@pytest.mark.parametrize(
    ("layout", "unreadable"),
    [
        ("zarr", "items/opt.mu"),  # an array's chunks: would be chunk_missing + array_metadata_missing
        ("zarr", "items"),  # a whole item: would be item_missing
        ("ocdbt", "items/d"),  # OCDBT data files: would be ocdbt_data_missing
        ("zarr", ""),  # the step itself: would be commit_marker_missing and the rest
    ],
    ids=["array", "item", "ocdbt-data", "step"],
)
def test_unreadable_directory_is_its_own_problem(run_copy: Callable[[str], Path], layout: str, unreadable: str) -> None:
    run = run_copy(layout)
    target = run / "checkpoints" / "20" / unreadable
    target.chmod(0)
    try:
        report = _validate_without_root_powers(run)
    finally:
        target.chmod(0o755)
    assert _problems(report, 20) == [(str(Problem.DIRECTORY_UNREADABLE), unreadable.rstrip("/"))]
    assert report["latest_valid_step"] == 10
