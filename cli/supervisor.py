"""Child processes that each lead their own process group, stopped group by group.

The shape follows what ``airflow standalone`` and supervisord do for a set of long-running services: each
child is started in a new session (``setsid``), so the terminal's Ctrl-C reaches only the supervisor,
which then stops the children in a chosen order, SIGTERM first and SIGKILL after a grace period, to the
whole process group. Signalling the group rather than the pid is what reaches the grandchildren a
component forks (the LocalExecutor's workers, the API server's worker, a task's supervisor process),
also when the component itself already exited. On Linux each child also gets ``PR_SET_PDEATHSIG``, so a
supervisor killed with SIGKILL still takes its direct children with it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

_PR_SET_PDEATHSIG = 1


class SignalRelay:
    """Sets ``event`` for a signal handler, which only calls the relay: a handler runs on the main thread, which may
    hold the Event's lock at that moment (entering or leaving a wait on it), and that lock, like the one
    ``Thread.start`` takes, is not reentrant. The relay puts into a ``SimpleQueue`` (whose ``put`` may be called from a
    handler), and a thread started with the relay sets the Event."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event
        self._queue: queue.SimpleQueue[None] = queue.SimpleQueue()
        threading.Thread(target=self._relay, name="signal-relay", daemon=True).start()

    def _relay(self) -> None:
        while True:
            self._queue.get()
            self.event.set()

    def __call__(self) -> None:
        self._queue.put(None)


def die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGTERM when the supervisor dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


@dataclass
class Child:
    """One started component: its process (the leader of group ``pid``) and the file its output goes to."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes] = field(repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    def exited(self) -> int | None:
        """The exit code once the leader exited, else ``None``."""
        return self.process.poll()

    def group_alive(self) -> bool:
        """Whether any process of the group still exists (the leader is reaped first, so it is no zombie)."""
        self.process.poll()
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # a member changed its uid: it exists
            return True
        return True

    def signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def close_log(self) -> None:
        """Close the supervisor's handle on the output file (the child keeps its own)."""
        self._log.close()

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of the child's output, for an error message."""
        try:
            with self.log_path.open("rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - 64 * 1024))
                text = handle.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class Supervisor:
    """Starts children in their own process groups and stops them all, in reverse start order by default."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.children: list[Child] = []

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str], cwd: Path | None = None) -> Child:
        """Start ``argv`` with its stdout and stderr in ``<log_dir>/<name>.log``."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        log = log_path.open("ab")
        try:
            process = subprocess.Popen(
                list(argv),
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent if sys.platform == "linux" else None,
            )
        except OSError:
            log.close()
            raise
        child = Child(name, process, log_path, log)
        self.children.append(child)
        return child

    def first_exited(self) -> Child | None:
        """A child whose leader exited, if any (a component that died on its own)."""
        return next((child for child in self.children if child.exited() is not None), None)

    def stop_all(
        self,
        grace_seconds: float = 30.0,
        order: Sequence[str] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        """SIGTERM each group (in ``order`` by name, the rest in reverse start order), SIGKILL it after the grace."""
        by_name = {child.name: child for child in self.children}
        ordered = [by_name[name] for name in order or () if name in by_name]
        ordered += [child for child in reversed(self.children) if child not in ordered]
        for child in ordered:
            if not child.group_alive():
                continue
            if progress is not None:
                progress(f"stopping {child.name}")
            child.signal_group(signal.SIGTERM)
            deadline = time.monotonic() + grace_seconds
            while child.group_alive() and time.monotonic() < deadline:
                time.sleep(0.1)
            if child.group_alive():
                child.signal_group(signal.SIGKILL)
                while child.group_alive() and time.monotonic() < deadline + 5:
                    time.sleep(0.05)
        for child in self.children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(timeout=1)
            child.close_log()
