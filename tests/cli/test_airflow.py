"""``elastic-training airflow`` (what ``make airflow`` runs): the real api-server, scheduler, dag-processor and
triggerer, a DAG run triggered over the REST API as the UI does it, loopback-only sockets, and Ctrl-C.

The DAG is a one-task DAG with a deferrable ``ElasticJobSetOperator`` on the local runtime, so the real
triggerer runs the JobSet trigger. The shipped DAGs run through the same launcher, from their forms in a
browser, in tests/plugin/test_browser_journey.py: a second whole nightly pipeline here would only make the
suite longer.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import socket
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

ROOT = Path(__file__).resolve().parents[2]
SMOKE = "launcher_smoke"
STARTUP_SECONDS = 600.0
RUN_SECONDS = 900.0
# The module's stack starts inside the first test that uses it: the suite's 300 s default would cut a slow start.
pytestmark = pytest.mark.timeout(STARTUP_SECONDS + RUN_SECONDS + 300)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _launcher_env(home: Path) -> dict[str, str]:
    """The user's environment, without the test session's Airflow settings (unit-test mode, its home)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_"))}
    env["AIRFLOW_HOME"] = str(home)
    env["PYTHONUNBUFFERED"] = "1"
    # Unpausing the nightly DAG would also start today's scheduled run, and max_active_runs=1 would queue
    # the test's run behind a whole second pipeline: the scheduler runs triggered runs only.
    env["AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE"] = "False"
    return env


def _smoke_dag(folder: Path, base: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{SMOKE}.py").write_text(
        textwrap.dedent(
            f"""\
            from airflow.sdk import DAG
            from elastic_training.operators import ElasticJobSetOperator

            with DAG({SMOKE!r}, schedule=None, tags=["test"]) as dag:
                ElasticJobSetOperator(
                    task_id="pretrain",
                    run_name="launcher-smoke",
                    base_output_directory={str(base)!r},
                    steps=40,
                    checkpoint_period=10,
                    num_slices=2,
                    runtime="local",
                    maxtext_args={{}},
                    deferrable=True,
                    poll_interval=1.0,
                )
            """
        )
    )


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
            with urllib.request.urlopen(request, timeout=30) as response:
                return int(response.status), json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return int(error.code), error.read().decode(errors="replace")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("airflow-home")
    dags, dag_id = home / "dags", SMOKE
    _smoke_dag(dags, tmp_path_factory.mktemp("runs"))
    port = _free_port()
    output = home / "launcher.out"
    argv = [sys.executable, "-m", "elastic_training.cli", "airflow", "--port", str(port), "--home", str(home)]
    argv += ["--dags-folder", str(dags), "--startup-timeout", str(STARTUP_SECONDS)]
    with output.open("wb") as sink:
        process = subprocess.Popen(argv, cwd=ROOT, env=_launcher_env(home), stdout=sink, stderr=subprocess.STDOUT)
    running = Stack(process, output, home, f"http://127.0.0.1:{port}", dag_id)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS + 60
        while "] ready in" not in running.text():
            assert process.poll() is None, f"the launcher exited ({process.returncode}):\n{running.text()}"
            assert time.monotonic() < deadline, f"the launcher never got ready:\n{running.text()}"
            running.snapshot()
            time.sleep(1)
        running.snapshot()
        yield running
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=180)
        if process.poll() is None:
            process.kill()


def _leftovers(processes: dict[int, psutil.Process]) -> list[str]:
    alive = []
    for process in processes.values():
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{process.pid} {' '.join(process.cmdline())[:120]}")
    return alive


def _listening(processes: list[psutil.Process]) -> list[tuple[int, str, int]]:
    sockets = []
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            for conn in process.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    sockets.append((process.pid, conn.laddr.ip, conn.laddr.port))
    return sockets


COMPONENTS = ("cluster", "api-server", "scheduler", "dag-processor", "triggerer")


@pytest.mark.slow
def test_login_with_the_generated_admin_password(stack: Stack) -> None:
    passwords = json.loads((stack.home / "simple_auth_manager_passwords.json.generated").read_text())
    assert f"user: admin   password: {passwords['admin']}" in stack.text()
    status, _ = stack.call("POST", "/auth/token", {"username": "admin", "password": "not-the-password"})
    assert status == 401
    status, answer = stack.call("POST", "/auth/token", {"username": "admin", "password": passwords["admin"]})
    assert status == 201, answer
    stack.token = answer["access_token"]
    status, _ = stack.call("GET", "/api/v2/dags")
    assert status == 200


@pytest.mark.slow
def test_dag_triggered_over_the_rest_api_succeeds_through_the_triggerer(stack: Stack) -> None:
    assert stack.token, "needs the login test's token"
    deadline = time.monotonic() + STARTUP_SECONDS
    while (status := stack.call("GET", f"/api/v2/dags/{stack.dag_id}")[0]) != 200:
        assert time.monotonic() < deadline, f"the dag-processor never parsed {stack.dag_id} ({status})"
        time.sleep(2)
    # New DAGs start paused; the UI's toggle does this.
    status, answer = stack.call("PATCH", f"/api/v2/dags/{stack.dag_id}", {"is_paused": False})
    assert status == 200, answer
    status, run = stack.call("POST", f"/api/v2/dags/{stack.dag_id}/dagRuns", {"logical_date": None, "conf": {}})
    assert status == 200, run
    run_path = f"/api/v2/dags/{stack.dag_id}/dagRuns/{run['dag_run_id']}"
    deadline = time.monotonic() + RUN_SECONDS
    while (state := stack.call("GET", run_path)[1]["state"]) not in ("success", "failed"):
        assert time.monotonic() < deadline, f"the run is still {state} after {RUN_SECONDS:.0f} s"
        stack.snapshot()
        time.sleep(2)
    _, instances = stack.call("GET", f"{run_path}/taskInstances")
    states = {ti["task_id"]: ti["state"] for ti in instances["task_instances"]}
    assert state == "success", f"{states}\n{_task_logs(stack)}"
    assert set(states.values()) <= {"success", "skipped"}, states
    # The triggerer writes each trigger's own log next to the task's (what the UI shows as the trigger log).
    run_logs = stack.home / "logs" / f"dag_id={stack.dag_id}" / f"run_id={run['dag_run_id']}"
    trigger_logs = list(run_logs.rglob("*.log.trigger.*.log"))
    fired = [p for p in trigger_logs if "Trigger fired event" in p.read_text(errors="replace")]
    assert fired, f"no trigger ran in the triggerer process: {trigger_logs}"


@pytest.mark.slow
def test_every_listening_socket_is_on_loopback(stack: Stack) -> None:
    stack.snapshot()
    sockets = sorted(stack.listening)  # every snapshot's: start-up, the whole DAG run (tasks, pods), now
    ports = {port for _, _, port in sockets}
    assert int(stack.url.rsplit(":", 1)[1]) in ports, sockets
    exposed = [s for s in sockets if not ipaddress.ip_address(s[1]).is_loopback]
    assert exposed == [], f"listening beyond loopback: {exposed}"


@pytest.mark.slow
def test_ctrl_c_stops_every_process_it_started(stack: Stack) -> None:
    started = stack.snapshot()
    assert [name for name in COMPONENTS if not _any(started, name)] == []
    stack.process.send_signal(signal.SIGINT)
    assert stack.process.wait(timeout=180) == 0, stack.text()
    assert "] stopped" in stack.text()
    deadline = time.monotonic() + 30
    while (alive := _leftovers(stack.seen)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert alive == [], "left behind:\n" + "\n".join(alive)


def _any(processes: list[psutil.Process], name: str) -> bool:
    marker = {"cluster": "cluster up", "api-server": "api_server"}.get(name, f"airflow {name}")
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if marker in " ".join(process.cmdline()):
                return True
    return False


def _task_logs(stack: Stack) -> str:
    tails = []
    for path in sorted((stack.home / "logs").rglob("*.log")):
        lines = path.read_text(errors="replace").splitlines()[-15:]
        tails.append(f"--- {path}\n" + "\n".join(lines))
    return "\n".join(tails)[-20000:]


def test_a_port_in_use_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "elastic_training.cli",
                "airflow",
                "--port",
                str(port),
                "--home",
                str(tmp_path / "home"),
            ],
            cwd=ROOT,
            env=_launcher_env(tmp_path / "home"),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 2
    assert f"port {port} on 127.0.0.1 is in use" in result.stderr
    assert not (tmp_path / "home" / "airflow.db").exists()
