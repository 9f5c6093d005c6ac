"""One run of one container as a local process group, with its output copied to the log store.

The process starts in its own session (so its whole process group can be signalled, as a
container runtime signals a container) and, where util-linux's ``setpriv`` exists, with
``PR_SET_PDEATHSIG`` = SIGKILL so it dies at once if the cluster process dies abruptly.
PDEATHSIG fires when the *thread* that forked the child exits; asyncio forks from the event-loop
thread, which lives as long as the cluster. What the process forks itself is covered by the
:class:`GroupReaper`, which kills the group.

No Python runs between fork and exec (no ``preexec_fn``): the cluster often shares its process
with JAX or other threaded code, where running Python in a forked child can deadlock.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from elastic_training.local.group_reaper import GroupReaper
from elastic_training.local.nodeagent.logs import ContainerLogWriter

_SETPRIV = shutil.which("setpriv")
_STREAM_LIMIT = 1 << 20  # longest line read at once; longer lines are split
_LOG_DRAIN_SECONDS = 0.5  # how long to wait for output still in the pipes once the process is gone


def _with_parent_death_signal(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """``argv`` run through ``setpriv --pdeathsig KILL`` (when installed), after checking it can start.

    The executable is looked up first so a missing command still fails with ``FileNotFoundError``
    here rather than as ``setpriv``'s exit status.
    """
    if not argv:
        raise FileNotFoundError("empty command")
    if shutil.which(argv[0], path=env.get("PATH")) is None:
        raise FileNotFoundError(errno.ENOENT, f"executable file not found in $PATH: {argv[0]!r}", argv[0])
    if _SETPRIV is None or not sys.platform.startswith("linux"):
        return list(argv)
    return [_SETPRIV, "--pdeathsig", "KILL", "--", *argv]


class _ExitProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """The stream protocol ``create_subprocess_exec`` uses, plus a future set the moment the process exits.

    ``Process.wait()`` returns only once the process has exited *and* every pipe to it is closed; a
    container's forked children inherit its stdout and stderr, so it would wait for them too.
    """

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited: asyncio.Future[None] = loop.create_future()

    def process_exited(self) -> None:
        super().process_exited()
        if not self.exited.done():
            self.exited.set_result(None)


class ContainerProcess:
    """A started container process: wait for it, signal its group, read its exit status."""

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        log: ContainerLogWriter,
        reaper: GroupReaper | None = None,
        *,
        exited: asyncio.Future[None] | None = None,
        transport: asyncio.SubprocessTransport | None = None,
    ) -> None:
        self.process = process
        self.pid = process.pid
        self._exited = exited
        self._transport = transport
        self._log = log
        self._reaper = reaper
        if reaper is not None:
            reaper.add(self.pid)
        assert process.stdout is not None and process.stderr is not None
        self._pumps = [
            asyncio.ensure_future(_pump(process.stdout, log, "stdout")),
            asyncio.ensure_future(_pump(process.stderr, log, "stderr")),
        ]

    @classmethod
    async def start(
        cls,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        log: ContainerLogWriter,
        reaper: GroupReaper | None = None,
    ) -> ContainerProcess:
        """Spawn ``argv``; raises ``OSError`` (e.g. ``FileNotFoundError``) when it cannot start."""
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.subprocess_exec(
            lambda: _ExitProtocol(_STREAM_LIMIT, loop),
            *_with_parent_death_signal(argv, env),
            env=dict(env),
            cwd=str(cwd),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        process = asyncio.subprocess.Process(transport, protocol, loop)
        return cls(process, log, reaper, exited=protocol.exited, transport=transport)

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the container's process group (ignored once the group is gone)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    async def wait(self) -> int:
        """Wait for the main process; then kill what is left of its group, as a runtime tears down a container.

        Returns the raw return code (negative for a signal). Returns when the main process exits, even
        while processes it forked still hold its output pipes (they are killed here).
        """
        if self._exited is not None:
            await self._exited
            code = self.process.returncode
            assert code is not None
        else:
            code = await self.process.wait()
        self.signal_group(signal.SIGKILL)
        if self._reaper is not None:
            self._reaper.remove(self.pid)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*self._pumps, return_exceptions=True), _LOG_DRAIN_SECONDS)
        for pump in self._pumps:
            pump.cancel()
        if self._transport is not None:
            self._transport.close()  # the pipes, should something outside the group (a setsid escapee) hold them
        self._log.close()
        return code


async def _pump(stream: asyncio.StreamReader, log: ContainerLogWriter, name: str) -> None:
    while True:
        try:
            line = await stream.readline()
        except ValueError:  # a line longer than the limit: take what is buffered
            line = await stream.read(_STREAM_LIMIT)
        if not line:
            return
        log.write_line(line.decode("utf-8", errors="replace").rstrip("\r\n"), name)
