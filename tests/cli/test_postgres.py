"""The embedded PostgreSQL server (``elastic_training.cli.postgres``): made once per home, started on loopback with a
generated password, its data kept between starts, stopped; and each home or port it cannot use refused with a
clear error and nothing left behind. Every test starts and stops a real server from the wheel (under a second:
without fsync, which only crash safety needs; the launcher's homes keep it)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg2
import pytest

from elastic_training.cli.postgres import (
    DATABASE,
    HOST,
    MAJOR,
    USER,
    EmbeddedPostgres,
    PostgresError,
    PostgresUnreachable,
    RunningPostgres,
    running,
)
from elastic_training.cli.postgres_access import RUNTIME_VARIABLE
from tests.support.postgres import postgres_database, private_site, reachable_dir
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def base() -> Iterator[Path]:
    path = reachable_dir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _listening(server: RunningPostgres) -> list[tuple[str, int]]:
    """Every socket the server's processes listen on, TCP and Unix."""
    found = []
    postmaster = psutil.Process(server.process.pid)
    for process in [postmaster, *postmaster.children(recursive=True)]:
        try:
            connections = process.net_connections(kind="all")
        except psutil.NoSuchProcess:  # a backend that ended meanwhile
            continue
        for conn in connections:
            if conn.status == psutil.CONN_LISTEN or (conn.family == socket.AF_UNIX and conn.laddr):
                found.append((conn.laddr.ip, conn.laddr.port) if conn.family != socket.AF_UNIX else (conn.laddr, 0))
    return found


def _scalar(server: RunningPostgres, query: str, database: str = DATABASE) -> object:
    connection = server.connect(database)
    try:
        with connection.cursor() as cursor:
            cursor.execute(query)
            return cursor.fetchone()[0]
    finally:
        connection.close()


def test_starts_on_loopback_with_a_private_generated_password_and_stops(base: Path) -> None:
    home = base / "home"
    server = EmbeddedPostgres(home, durable=False).start()
    try:
        assert server.version.startswith(f"{MAJOR}.")
        assert server.describe() == f"PostgreSQL {server.version} at {HOST}:{server.port} (embedded, {home}/postgres)"
        assert _listening(server) == [(HOST, server.port)]  # no other address, no Unix socket
        password_file = home / "postgres.password"
        assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
        assert password_file.read_text().strip() == server.password and len(server.password) >= 30
        assert _scalar(server, "SELECT current_database()") == DATABASE
        assert _scalar(server, "SHOW server_encoding") == "UTF8"
        for password in ("", "not-the-password"):
            with pytest.raises(psycopg2.OperationalError, match="password"):
                psycopg2.connect(host=HOST, port=server.port, user=USER, password=password, dbname=DATABASE)
        assert server.url().startswith(f"postgresql+psycopg2://{USER}:")
        assert server.url(driver="asyncpg").endswith(f"@{HOST}:{server.port}/{DATABASE}")
        session = server.connect()  # a session still open: the fast shutdown ends it
    finally:
        server.stop()
    assert server.exited() == 0
    with pytest.raises(psycopg2.Error):
        session.cursor().execute("SELECT 1")
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as postgres binds (TIME_WAIT allowed)
        probe.bind((HOST, server.port))  # the port is free again


def test_a_second_start_of_the_same_home_keeps_its_data_and_password(base: Path) -> None:
    home = base / "home"
    with running(home, durable=False) as first:
        connection = first.connect(DATABASE)
        with connection.cursor() as cursor:
            cursor.execute("CREATE TABLE kept (value text)")
            cursor.execute("INSERT INTO kept VALUES ('across restarts')")
        connection.close()
        password = first.password
    made = (home / "postgres" / "PG_VERSION").stat().st_ino
    with running(home, durable=False) as second:
        assert second.password == password
        assert _scalar(second, "SELECT value FROM kept") == "across restarts"
    assert (home / "postgres" / "PG_VERSION").stat().st_ino == made  # not made again


def test_databases_on_one_server_are_separate(base: Path) -> None:
    with running(base / "home", durable=False, databases=()) as server:
        one, two = postgres_database(server, "stack"), postgres_database(server, "stack")
        assert one != two
        connection = server.connect(one)
        with connection.cursor() as cursor:
            cursor.execute("CREATE TABLE only_here (x int)")
        connection.close()
        assert _scalar(server, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_here'", two) == 0


def test_a_port_in_use_is_refused_and_nothing_is_made(base: Path) -> None:
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PostgresError, match=f"port {port} on 127.0.0.1 is in use"):
            EmbeddedPostgres(base / "home").start(port=port)
    assert not (base / "home").exists()


def test_a_data_directory_of_another_major_is_refused_and_kept(base: Path) -> None:
    data = base / "home" / "postgres"
    data.mkdir(parents=True)
    (data / "PG_VERSION").write_text("16\n")
    (base / "home" / "postgres.password").write_text("x\n")
    with pytest.raises(PostgresError, match=f"holds PostgreSQL 16's data and this wheel runs PostgreSQL {MAJOR}"):
        EmbeddedPostgres(base / "home", durable=False).start()
    assert sorted(p.name for p in data.iterdir()) == ["PG_VERSION"]


def test_something_else_at_the_data_path_is_refused_and_kept(base: Path) -> None:
    data = base / "home" / "postgres"
    data.mkdir(parents=True)
    (data / "notes.txt").write_text("mine")
    with pytest.raises(PostgresError, match="is not a PostgreSQL data directory"):
        EmbeddedPostgres(base / "home", durable=False).start()
    assert (data / "notes.txt").read_text() == "mine"
    assert not (base / "home" / "postgres.password").exists()


def test_data_whose_password_is_lost_or_wrong_is_refused_not_remade(base: Path) -> None:
    home = base / "home"
    with running(home, durable=False):
        pass
    (home / "postgres.password").write_text("wrong\n")
    with pytest.raises(PostgresError, match="does not hold the password"):
        EmbeddedPostgres(home, durable=False).start()
    (home / "postgres.password").unlink()
    with pytest.raises(PostgresError, match="which is missing"):
        EmbeddedPostgres(home, durable=False).start()
    assert (home / "postgres" / "PG_VERSION").is_file()
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(home / "postgres") in (p.info["cmdline"] or [])]


def test_a_failed_initdb_leaves_nothing(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The real initdb refuses a superuser name PostgreSQL reserves ("pg_" prefix): a real failure part-way.
    monkeypatch.setattr("elastic_training.cli.postgres.USER", "pg_reserved")
    with pytest.raises(PostgresError, match="initdb failed"):
        EmbeddedPostgres(base / "home", durable=False).start()
    assert sorted(os.listdir(base / "home")) == []


AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="only root's server runs as another user")
# One start of the server in a process whose PYTHONPATH puts a private copy of the wheel first; the query's row back.
START = """\
import json, sys
from pathlib import Path
from elastic_training.cli.postgres import EmbeddedPostgres, binaries
server = EmbeddedPostgres(Path(sys.argv[1]), durable=False).start()
try:
    connection = server.connect("airflow")
    with connection.cursor() as cursor:
        cursor.execute(sys.argv[2])
        row = cursor.fetchone()
    connection.close()
finally:
    server.stop()
print(json.dumps({"binaries": str(binaries()), "data": str(server.data_dir), "row": list(row)}))
"""


@pytest.fixture
def private_folder() -> Iterator[Path]:
    """A folder only its owner may enter (mode 0700), as ``/root`` or ``mktemp -d`` are."""
    path = Path(tempfile.mkdtemp(prefix="elastic-training-private-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _start_in(site: Path, home: Path, query: str, runtime: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), RUNTIME_VARIABLE: str(runtime)}
    done = subprocess.run(
        [sys.executable, "-c", START, str(home), query], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return answer


@AS_ROOT
def test_as_root_binaries_and_a_home_in_a_private_folder_are_placed_where_the_server_reaches(
    base: Path, private_folder: Path
) -> None:
    """Issue 52: a clone in a 0700 folder, run by root. ``nobody`` can reach neither the wheel's binaries in its venv
    nor its home: both are placed in the runtime directory, the binaries readable by ``nobody``'s group only, the
    data ``nobody``'s alone, and the home links to its data, kept between starts."""
    site, home, runtime = private_site(private_folder), private_folder / "clone" / ".airflow", base / "runtime"
    made = "CREATE TABLE kept AS SELECT 'across restarts'::text AS value; SELECT value FROM kept"
    first = _start_in(site, home, made, runtime)
    assert Path(first["binaries"]).is_relative_to(site)  # the server ran from the private folder's wheel
    data = Path(first["data"])
    assert data.parent == runtime / "data" and (home / "postgres").resolve() == data
    assert (home / "postgres").is_symlink() and stat.S_IMODE((home / "postgres.password").stat().st_mode) == 0o600
    nobody = pwd.getpwnam("nobody")
    assert (data.stat().st_uid, stat.S_IMODE(data.stat().st_mode)) == (nobody.pw_uid, 0o700)
    (copy,) = runtime.glob("pginstall-*")
    for path in [runtime, copy, *copy.rglob("*")]:
        if not path.is_symlink():
            assert path.stat().st_gid == nobody.pw_gid and not path.stat().st_mode & 0o007, path
    assert _start_in(site, home, "SELECT value FROM kept", runtime) == {**first, "row": ["across restarts"]}
    # The home removed and made again: the data nothing links to any more is made afresh, not left behind.
    shutil.rmtree(home)
    fresh = _start_in(site, home, "SELECT count(*) FROM pg_tables WHERE tablename = 'kept'", runtime)
    assert fresh["data"] == first["data"] and fresh["row"] == [0]
    assert sorted(p.name for p in (runtime / "data").iterdir()) == [data.name]
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(data) in (p.info["cmdline"] or [])]
    # A throw-away home (the demo's work directory) takes its data with it, wherever it was placed.
    EmbeddedPostgres(home).discard()
    assert list((runtime / "data").iterdir()) == [] and sorted(os.listdir(home)) == ["postgres.log"]


@AS_ROOT
def test_as_root_where_nothing_can_be_placed_it_is_refused_as_unreachable_and_nothing_is_made(
    private_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = private_folder / "runtime"  # inside the private folder too
    monkeypatch.setenv(RUNTIME_VARIABLE, str(runtime))
    home = private_folder / "home"
    with pytest.raises(PostgresUnreachable) as refused:
        EmbeddedPostgres(home).start()
    message = str(refused.value)
    # What it first could not reach (the home here; the venv's binaries too where this checkout is private) and why
    # the runtime directory does not help.
    assert message.startswith("PostgreSQL refuses root and runs as 'nobody': 'nobody' cannot enter ")
    assert f"nor {runtime}: 'nobody' cannot enter {private_folder} (mode 700)" in message
    assert f"to avoid it, set ${RUNTIME_VARIABLE} to a directory" in message and "\n" not in message
    assert sorted(os.listdir(home)) == [] and not runtime.exists()


def test_the_session_server_takes_a_database_per_caller(postgres_server: RunningPostgres, postgres_url: str) -> None:
    name = postgres_url.rsplit("/", 1)[1]
    assert postgres_url == postgres_server.url(name)
    assert _scalar(postgres_server, "SELECT current_database()", name) == name


def test_a_server_whose_owner_is_killed_stops_with_it(base: Path) -> None:
    """``kill -9`` of the launcher (or of pytest) leaves no server behind: it gets SIGTERM as its parent dies."""
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from elastic_training.cli.postgres import EmbeddedPostgres\n"
        f"server = EmbeddedPostgres(Path({str(base / 'home')!r}), durable=False).start()\n"
        "print(server.process.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        postmaster = psutil.Process(int(owner.stdout.readline()))
        assert postmaster.is_running()
    finally:
        owner.kill()
        owner.wait()
    wait_for(lambda: _gone(postmaster), timeout=60)
    assert "database system is shut down" in (base / "home" / "postgres.log").read_text()


def _gone(process: psutil.Process) -> bool:
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
