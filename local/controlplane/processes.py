"""Supervision of the control plane's processes: start with a log file each, wait until ready, stop, restart.

Each process leads a session of its own (``start_new_session``), so a stop signals it and anything it started.
A stop sends SIGTERM, then SIGKILL after the grace period; nothing is left running.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


class ProcessError(RuntimeError):
    """A component exited or did not become ready; the message names it and quotes its log's last lines."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, below the kernel's ephemeral range (from 10000).

    The port is bound later by another process (etcd, Kueue, ...). The kernel's own pick (``bind`` to 0) is in the
    ephemeral range, where an outgoing connection may take it as its local port meanwhile: on a loaded machine
    Kueue once found its webhook port taken so. Below that range only another explicit pick can collide."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
        for _ in range(100):
            with contextlib.suppress(OSError), socket.socket() as probe:
                probe.bind((host, random.randrange(10_000, low)))
                return int(probe.getsockname()[1])
    with socket.socket() as probe:  # no such range here: the kernel's pick
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(line.strip()[:300] for line in text[-lines:]) or "(empty log)"


class Component:
    """One upstream process: its command line, environment and log file."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self._process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        self.started_at = time.monotonic()

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def check_running(self) -> None:
        """Raise :class:`ProcessError` when the process has exited."""
        if self._process is not None and self._process.poll() is not None:
            raise ProcessError(f"{self.name} exited with status {self._process.returncode}: {log_tail(self.log_path)}")

    def stop(self, grace_seconds: float = 5.0) -> None:
        """SIGTERM to its process group, SIGKILL after ``grace_seconds``; waits for it."""
        process = self._process
        if process is None or process.poll() is not None:
            self._reap_group()
            return
        self._signal_group(signal.SIGTERM)
        try:
            process.wait(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            process.wait(timeout=10)
        self._reap_group()

    def kill(self) -> None:
        """SIGKILL at once (a crash, for faults and tests)."""
        if self._process is not None and self._process.poll() is None:
            self._signal_group(signal.SIGKILL)
            self._process.wait(timeout=10)

    def _signal_group(self, sig: int) -> None:
        if self._process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, sig)

    def _reap_group(self) -> None:
        """Children that outlived the leader (none of ours should) are killed with its group."""
        self._signal_group(signal.SIGKILL)


def wait_until(ready: Callable[[], bool], component: Component, timeout: float, what: str) -> None:
    """Poll ``ready`` until it is true; raise when the component exits or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        component.check_running()
        if ready():
            return
        if time.monotonic() > deadline:
            raise ProcessError(f"{component.name} was not {what} after {timeout:.0f} s: {log_tail(component.log_path)}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def https_ok(url: str, context: ssl.SSLContext | None = None, token: str | None = None) -> bool:
    """Whether ``url`` answers 200 (any connection error or other status: not yet); plain HTTP without a context."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def listening(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False
