"""A broken environment ends in one clear line that says what to set: no Google credentials for
`elastic-training validate gs://...` (exit 2, distinct from "not valid"), and the Kubernetes connection cases
(a server that is not there, a refused token, a cluster without the JobSet API) through `JobSetHook`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _validate_without_credentials(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"  # no ~/.config/gcloud: no Application Default Credentials
    home.mkdir(exist_ok=True)
    clean = {"PATH": os.environ["PATH"], "HOME": str(home), "PYTHONPATH": str(REPO), **env}
    return subprocess.run(
        [sys.executable, "-m", "cli", "validate", "gs://some-bucket/run/checkpoints"],
        capture_output=True,
        text=True,
        timeout=180,
        env=clean,
        cwd=REPO,
    )


@pytest.mark.parametrize(
    ("credentials", "says"),
    [
        (None, "no Google Cloud credentials were found"),
        ("missing.json", "GOOGLE_APPLICATION_CREDENTIALS is set, but its file is missing or not a credentials file"),
        ("garbage.json", "GOOGLE_APPLICATION_CREDENTIALS is set, but its file is missing or not a credentials file"),
    ],
)
def test_validate_without_google_credentials_exits_2_with_one_line(
    tmp_path: Path, credentials: str | None, says: str
) -> None:
    env = {}
    if credentials is not None:
        path = tmp_path / "secret-place" / credentials
        path.parent.mkdir()
        if credentials == "garbage.json":
            path.write_text('{"type": "service_account", "private_key": "FAKE-KEY-CONTENT"}')
        env["GOOGLE_APPLICATION_CREDENTIALS"] = str(path)
    result = _validate_without_credentials(tmp_path, **env)
    assert result.returncode == 2, result.stderr  # not 1: the checkpoint was never looked at
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("elastic-training validate: error: cannot read gs://: ")
    assert says in line
    assert "GOOGLE_APPLICATION_CREDENTIALS" in line and "gcloud auth application-default login" in line
    assert "secret-place" not in line and "FAKE-KEY-CONTENT" not in line  # never the credentials' path or content
