"""The suite's own scheduling (tests/conftest.py): which files a light process takes, and which processes are light."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests import conftest
from tests.conftest import SHARED_UNITS, light_processes, light_scope, light_workers, read_cluster_files


def test_a_light_process_takes_the_last_file_that_uses_no_shared_cluster() -> None:
    queue = ["tests/a.py", "tests/b.py", "tests/c.py", "tests/d.py"]
    assert light_scope(queue, {"tests/d.py"}) == "tests/c.py"
    assert light_scope(queue, set()) == "tests/d.py"


def test_a_light_process_takes_no_shared_unit_and_nothing_when_only_cluster_files_are_left() -> None:
    unit = next(iter(SHARED_UNITS.values()))
    assert light_scope([unit, "tests/a.py"], {"tests/a.py"}) is None
    assert light_scope([], set()) is None


def test_a_light_process_takes_nothing_when_the_cluster_files_are_not_known() -> None:
    assert light_scope(["tests/a.py"], None) is None


def test_the_light_processes_are_the_last_ones_and_never_all() -> None:
    ids = ["gw10", "gw2", "gw0", "gw1"]
    assert light_processes(ids, 1) == {"gw10"}
    assert light_processes(ids, 2) == {"gw10", "gw2"}
    assert light_processes(ids, 9) == {"gw10", "gw2", "gw1"}
    assert light_processes(ids, 0) == frozenset()
    assert light_processes(["gw0"], 1) == frozenset()


@pytest.mark.parametrize(("value", "count"), [("1", 1), ("3", 3), ("", 0), ("-1", 0), ("one", 0)])
def test_the_light_worker_count_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str, count: int
) -> None:
    monkeypatch.setenv(conftest.LIGHT_WORKERS_ENV, value)
    assert light_workers() == count


def test_the_cluster_files_are_read_once_and_a_broken_list_is_not_known(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(conftest.tempfile, "gettempdir", lambda: str(tmp_path))
    written = tmp_path / "elastic-training-cluster-files-run1.json"
    written.write_text(json.dumps(["tests/a.py"]))
    assert read_cluster_files("run1") == {"tests/a.py"}
    assert not written.exists()
    assert read_cluster_files("run1") is None
    written.write_text("{not json")
    assert read_cluster_files("run1") is None
    written.write_text(json.dumps({"tests/a.py": True}))
    assert read_cluster_files("run1") is None


def test_the_light_process_runs_the_last_file_of_a_real_run(tmp_path: Path) -> None:
    """Two processes, one light, over two files that use no cluster: the light one (gw1) runs the last file, the
    other the first, and the list of the cluster's files is gone after the run."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    files = ["tests/operators/test_policy.py", "tests/operators/test_spec.py"]
    env = {**os.environ, conftest.LIGHT_WORKERS_ENV: "1", "TMPDIR": str(tmp_path), "PYTEST_ADDOPTS": ""}
    command = [sys.executable, "-m", "pytest", "-vv", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile"]
    done = subprocess.run([*command, *files], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    by_process: dict[str, set[str]] = {}
    for process, path in re.findall(r"^\[(gw\d+)\].* PASSED (tests/[^:]+\.py)::", done.stdout, re.MULTILINE):
        by_process.setdefault(process, set()).add(path)
    assert by_process == {"gw0": {files[0]}, "gw1": {files[1]}}, done.stdout[-3000:]
    assert list(tmp_path.glob("elastic-training-cluster-files-*")) == []
