"""A watchdog process that kills every container process group if the cluster process dies abruptly.

``PR_SET_PDEATHSIG`` only reaches a container's first process; anything it forked (a shell's
background job, a trainer's worker processes) would be reparented to init and live on. The
reaper is one small child of the cluster that reads ``+<pgid>`` / ``-<pgid>`` lines on its
stdin. The cluster process holds the only write end of that pipe, so when it dies for any
reason the reaper reads EOF at once and SIGKILLs every group still registered.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

_REAPER_SCRIPT = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
groups = set()
for line in sys.stdin:
    line = line.strip()
    if line[:1] == "+":
        groups.add(int(line[1:]))
    elif line[:1] == "-":
        groups.discard(int(line[1:]))
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""


class GroupReaper:
    """The cluster's side of the watchdog: register and unregister container process groups."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", _REAPER_SCRIPT], stdin=subprocess.PIPE, start_new_session=True
        )

    def add(self, pgid: int) -> None:
        self._send(f"+{pgid}\n")

    def remove(self, pgid: int) -> None:
        self._send(f"-{pgid}\n")

    def stop(self) -> None:
        """Close the pipe (the reaper kills what is still registered) and wait for it to exit."""
        process, self._process = self._process, None
        if process is None or process.stdin is None:
            return
        with contextlib.suppress(OSError):
            process.stdin.close()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _send(self, line: str) -> None:
        process = self._process
        if process is None or process.stdin is None:
            return
        with contextlib.suppress(OSError):
            os.write(process.stdin.fileno(), line.encode())
