"""One ``elastic-training airflow`` (what ``make airflow`` runs: the api-server, scheduler, dag-processor,
triggerer and the local cluster) for the whole session, shared by the tests that need a real stack.

Its DAGs folder holds copies of the repository's ``dags/`` (the browser journey runs the shipped DAGs), a
one-task smoke DAG (a deferrable ``ElasticJobSetOperator`` on the local runtime) for the CLI's own test, a
one-task DAG that writes to the metadata database until told to stop (the UI-under-load test's), and a one-task DAG
that stores a flex-start run's state and report as the operator does (``CAPACITY``: the journey's capacity view).
Its alerts go to a real notifier (tests/support/alert_notifier.py's ``FileNotifier``, writing ``<home>/alerts.jsonl``:
``ALERTS``) through the ``[elastic_training]`` options a deployment sets, and the nightly DAG's deadline is short
(``NIGHTLY_DEADLINE``): every nightly run it runs is past it, and says so there.
Starting a stack costs a minute or two of both cores; the CLI's test and the browser journey used one each.
tests/conftest.py sends both files to one xdist process as one unit, so it starts once, and orders the CLI's
tests after the journey: their Ctrl-C test stops it.

Its metadata database is a database of its own on the test process's PostgreSQL server (tests/support/postgres.py,
``--db external``), as teams run Airflow: the launcher's own embedded server (its default) is tested in
tests/cli/test_airflow.py and tests/cli/test_postgres.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from elastic_training.cli.postgres import RunningPostgres, free_port
from tests.support.postgres import postgres_database

ROOT = Path(__file__).resolve().parents[2]
SMOKE = "launcher_smoke"
WRITER = "launcher_writer"
WRITER_STOP = "launcher_writer_stop"
WRITER_COUNT = "launcher_writer_count"
CAPACITY = "elastic_capacity_story"
STARTUP_SECONDS = 600.0
CALL_SECONDS = 180.0
ALERTS = "alerts.jsonl"
NIGHTLY_DEADLINE = "20s"


def _launcher_env(home: Path) -> dict[str, str]:
    """The user's environment, without the test session's Airflow settings (unit-test mode, its home)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_"))}
    env["AIRFLOW_HOME"] = str(home)
    env["PYTHONUNBUFFERED"] = "1"
    # The alerts' notifier is the tests' own: importable by the workers, the triggerer and the dag-processor.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env["AIRFLOW__ELASTIC_TRAINING__ALERT_NOTIFIER"] = "tests.support.alert_notifier.FileNotifier"
    env["AIRFLOW__ELASTIC_TRAINING__ALERT_NOTIFIER_KWARGS"] = json.dumps({"path": str(home / ALERTS)})
    env["AIRFLOW__ELASTIC_TRAINING__NIGHTLY_DEADLINE"] = NIGHTLY_DEADLINE
    return env


def _smoke_dag(folder: Path, base: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{SMOKE}.py").write_text(
        textwrap.dedent(
            f"""\
            from airflow.sdk import DAG
            from elastic_training.operators import ElasticJobSetOperator, Scale, Training

            with DAG({SMOKE!r}, schedule=None, tags=["test"]) as dag:
                ElasticJobSetOperator(
                    task_id="pretrain",
                    training=Training(
                        run_name="launcher-smoke",
                        base_output_directory={str(base)!r},
                        steps=40,
                        checkpoint_period=10,
                    ),
                    scale=Scale(num_slices=2),
                    runtime="local",
                    deferrable=True,
                    poll_interval=1.0,
                )
            """
        )
    )


def _writer_dag(folder: Path) -> None:
    """A one-task DAG whose task writes to the metadata database (through the execution API) until told to stop.

    Each round sets a Variable and pushes a 200 kB XCom, as a task that reports progress does, as fast as the API
    takes them; it stops when the Variable ``WRITER_STOP`` exists, after 2000 rounds, or after 600 s, whichever is
    first. On SQLite that made the UI's calls answer 500 (``database is locked`` on the audit log's insert).
    """
    (folder / f"{WRITER}.py").write_text(
        textwrap.dedent(
            f"""\
            import time

            from airflow.sdk import DAG, Variable, task

            with DAG({WRITER!r}, schedule=None, tags=["test"]) as dag:

                @task
                def write(ti=None):
                    ends = time.monotonic() + 600
                    for count in range(1, 2001):
                        if Variable.get({WRITER_STOP!r}, default=None) is not None or time.monotonic() > ends:
                            return count
                        Variable.set({WRITER_COUNT!r}, str(count))
                        ti.xcom_push(key="progress", value={{"count": count, "log": "x" * 200_000}})
                    return count

                write()
            """
        )
    )


def _capacity_dag(folder: Path) -> None:
    """A one-task DAG whose ``pretrain`` stores what ``ElasticJobSetOperator`` stores at its end: the ``elastic_run``
    entry (``RunState.save``) and the run report as its return value, of tests/support/capacity_run.py's run (queued
    for quota, provisioning, three kinds of eviction), so the run view shows it as it shows any ended run."""
    (folder / f"{CAPACITY}.py").write_text(
        textwrap.dedent(
            f"""\
            import time

            from airflow.sdk import DAG, task

            from tests.support.capacity_run import capacity_run

            with DAG({CAPACITY!r}, schedule=None, tags=["test"]) as dag:

                @task(task_id="pretrain")
                def pretrain(**context):
                    run, report = capacity_run(float(int(time.time())))
                    run.save(context)
                    return report.to_json()

                pretrain()
            """
        )
    )


def _dags_folder(folder: Path, runs: Path) -> Path:
    """The repository's DAG files, copied as they are (the dag-processor skips symlinked files), and the smoke DAG."""
    folder.mkdir(parents=True, exist_ok=True)
    for dag_file in sorted((ROOT / "dags").glob("*.py")):
        shutil.copyfile(dag_file, folder / dag_file.name)
    _smoke_dag(folder, runs)
    _writer_dag(folder)
    _capacity_dag(folder)
    return folder


def _listening(processes: list[psutil.Process]) -> list[tuple[int, str, int]]:
    sockets = []
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            for conn in process.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    sockets.append((process.pid, conn.laddr.ip, conn.laddr.port))
    return sockets


@dataclass
class Stack:
    """A running launcher: its process, output file, URL and the processes seen under it so far."""

    process: subprocess.Popen[bytes]
    output: Path
    home: Path
    url: str
    dag_id: str
    seen: dict[int, psutil.Process] = field(default_factory=dict)
    listening: set[tuple[int, str, int]] = field(default_factory=set)
    token: str = ""

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def snapshot(self) -> list[psutil.Process]:
        """The launcher's descendants now; each one and its listening sockets are remembered for later checks."""
        try:
            current = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        for child in current:
            self.seen.setdefault(child.pid, child)
        self.listening.update(_listening(current))
        return current

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(f"{self.url}{path}", data=data, headers=headers, method=method)
        try:
            # Generous: the api-server's one worker answered nothing for 32 s on a loaded machine (its first
            # execution-API call); the callers' own deadlines say how long a state may take.
            with urllib.request.urlopen(request, timeout=CALL_SECONDS) as response:
                return int(response.status), json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return int(error.code), error.read().decode(errors="replace")


def admin_password(stack: Stack) -> str:
    """The admin's generated password (Airflow's simple auth manager writes it to the home)."""
    return str(json.loads((stack.home / "simple_auth_manager_passwords.json.generated").read_text())["admin"])


def logged_in(stack: Stack, dag_ids: tuple[str, ...]) -> Stack:
    """``stack`` with a REST token, once the dag-processor has parsed ``dag_ids``."""
    status, answer = stack.call("POST", "/auth/token", {"username": "admin", "password": admin_password(stack)})
    assert status == 201, answer
    stack.token = answer["access_token"]
    deadline = time.monotonic() + STARTUP_SECONDS
    for dag_id in dag_ids:
        while stack.call("GET", f"/api/v2/dags/{dag_id}")[0] != 200:
            assert time.monotonic() < deadline, f"the dag-processor never parsed {dag_id}"
            time.sleep(2)  # polls the REST API with the deadline above
    return stack


@pytest.fixture(scope="session")
def airflow_stack(tmp_path_factory: pytest.TempPathFactory, postgres_server: RunningPostgres) -> Iterator[Stack]:
    """``elastic-training airflow`` on the shipped DAGs and the smoke DAG, started once, in a home of its own, on a
    database of its own on the session's PostgreSQL server."""
    home = tmp_path_factory.mktemp("airflow-home")
    dags = _dags_folder(home / "dags", tmp_path_factory.mktemp("runs"))
    port = free_port()
    output = home / "launcher.out"
    argv = [sys.executable, "-m", "elastic_training.cli", "airflow", "--port", str(port), "--home", str(home)]
    argv += ["--dags-folder", str(dags), "--startup-timeout", str(STARTUP_SECONDS), "--db", "external"]
    env = _launcher_env(home)
    env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = postgres_server.url(postgres_database(postgres_server, "stack"))
    with output.open("wb") as sink:
        process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    running = Stack(process, output, home, f"http://127.0.0.1:{port}", SMOKE)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS + 60
        while "] ready in" not in running.text():
            assert process.poll() is None, f"the launcher exited ({process.returncode}):\n{running.text()}"
            assert time.monotonic() < deadline, f"the launcher never got ready:\n{running.text()}"
            running.snapshot()
            time.sleep(1)  # polls the launcher's output for its ready line, with the deadline above
        running.snapshot()
        yield running
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=180)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
