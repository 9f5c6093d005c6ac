"""Container logs on disk, in the kubelet's CRI format, and the reads the log endpoint needs.

Each container run gets one file ``<root>/<pod uid>/<container>/<restart count>.log``; each line
is ``<RFC3339Nano timestamp> <stream> F <text>``, the format the CRI runtimes write, so
``timestamps``, ``sinceTime`` and ``sinceSeconds`` are answered from the file alone.

Reads go to where the answer is, as the kubelet's ``ReadLogs``
(``pkg/kubelet/kuberuntime/logs/logs.go``) does: ``tailLines`` seeks back from the end of the
file (its ``tail.FindTailLineStartIndex``), ``sinceTime`` bisects the time-ordered lines for
the first one not older, and the rest is read forward in bounded chunks, so no request
reads (or holds) the whole file. They block: the API calls them off its event loop.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, BinaryIO

READ_CHUNK_BYTES = 1 << 20  # one forward read; a longer line is read to its end
_SEEK_BLOCK_BYTES = 64 * 1024  # one step of a backward scan
_STAMP_PROBE_BYTES = 64  # enough for a line's timestamp


def rfc3339_nano(moment: datetime) -> str:
    """``2026-11-29T08:36:37.123456000Z``: nanosecond precision, as the kubelet prints."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def parse_rfc3339(text: str) -> datetime:
    """Parse an RFC 3339 timestamp with optional fraction (any precision) and ``Z`` or offset."""
    value = text.strip()
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    if "." in value:
        head, rest = value.split(".", 1)
        digits = ""
        while rest and rest[0].isdigit():
            digits, rest = digits + rest[0], rest[1:]
        value = f"{head}.{digits[:6].ljust(6, '0')}{rest}"
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


@dataclass(frozen=True)
class LogLine:
    """One line a container printed, with the time the kubelet read it (as written, RFC 3339 nano)."""

    stamp: str
    stream: str
    text: str

    @property
    def time(self) -> datetime:
        return parse_rfc3339(self.stamp)

    def render(self, timestamps: bool) -> str:
        return f"{self.stamp} {self.text}" if timestamps else self.text


class ContainerLogWriter:
    """Appends a running container's output to its log file, one CRI line per printed line."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[str] = path.open("a", encoding="utf-8")

    def write_line(self, text: str, stream: str = "stdout") -> None:
        self._file.write(f"{rfc3339_nano(datetime.now(UTC))} {stream} F {text.rstrip(chr(10))}\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class LogStore:
    """Where the kubelet writes container logs and where the API reads them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, pod_uid: str, container: str, restart_count: int) -> Path:
        return self.root / pod_uid / container / f"{restart_count}.log"

    def writer(self, pod_uid: str, container: str, restart_count: int) -> ContainerLogWriter:
        return ContainerLogWriter(self.path(pod_uid, container, restart_count))

    def latest_run(self, pod_uid: str, container: str) -> int | None:
        """The restart count of the newest run with a log file, or None if it never ran."""
        directory = self.root / pod_uid / container
        runs = [int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit()] if directory.is_dir() else []
        return max(runs) if runs else None

    def run_path(self, pod_uid: str, container: str, run: int) -> Path | None:
        """The log file of one run, or None when it has none."""
        path = self.path(pod_uid, container, run)
        return path if path.is_file() else None


def complete_size(handle: BinaryIO) -> int:
    """The offset just past the file's last newline: a half-written last line is not read yet."""
    pos = handle.seek(0, os.SEEK_END)
    while pos > 0:
        step = min(_SEEK_BLOCK_BYTES, pos)
        pos -= step
        handle.seek(pos)
        newline = handle.read(step).rfind(b"\n")
        if newline >= 0:
            return pos + newline + 1
    return 0


def tail_offset(handle: BinaryIO, end: int, lines: int) -> int:
    """Where the last ``lines`` complete lines before ``end`` start, found by reading backwards."""
    if lines == 0 or end == 0:
        return end
    pos = end - 1  # the last line's own newline does not start a line
    seen = 0
    while pos > 0:
        step = min(_SEEK_BLOCK_BYTES, pos)
        pos -= step
        handle.seek(pos)
        block = handle.read(step)
        index = len(block)
        while (index := block.rfind(b"\n", 0, index)) >= 0:
            seen += 1
            if seen == lines:
                return pos + index + 1
    return 0


def _next_line_start(handle: BinaryIO, pos: int, end: int) -> int:
    """The first line start at or after ``pos`` (``end`` when there is none before it)."""
    if pos <= 0:
        return 0
    handle.seek(pos - 1)
    while pos - 1 < end:
        block = handle.read(_SEEK_BLOCK_BYTES)
        if not block:
            return end
        newline = block.find(b"\n")
        if newline >= 0:
            return min(pos + newline, end)
        pos += len(block)
    return end


def _line_time(handle: BinaryIO, start: int) -> datetime | None:
    handle.seek(start)
    stamp = handle.read(_STAMP_PROBE_BYTES).split(b" ", 1)[0]
    try:
        return parse_rfc3339(stamp.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None


def since_offset(handle: BinaryIO, end: int, since: datetime) -> int:
    """The start of the first line not older than ``since``, by bisecting the time-ordered file."""
    low, high = 0, end
    while low < high:
        middle = (low + high) // 2
        start = _next_line_start(handle, middle, end)
        moment = _line_time(handle, start) if start < end else None
        if start >= end or (moment is not None and moment >= since):
            high = middle
        else:
            low = middle + 1
    return _next_line_start(handle, low, end)


def read_lines(
    handle: BinaryIO, offset: int, *, since: datetime | None = None, end: int | None = None
) -> tuple[list[LogLine], int]:
    """The complete lines from ``offset`` on (up to about :data:`READ_CHUNK_BYTES`, never past
    ``end``), those older than ``since`` left out, and the offset read up to."""
    handle.seek(offset)
    budget = READ_CHUNK_BYTES if end is None else min(READ_CHUNK_BYTES, end - offset)
    data = handle.read(max(budget, 0))
    complete = data.rfind(b"\n") + 1
    while complete == 0 and data and (end is None or offset + len(data) < end):  # a line longer than a chunk
        more = handle.read(READ_CHUNK_BYTES if end is None else min(READ_CHUNK_BYTES, end - offset - len(data)))
        if not more:
            break
        newline = more.rfind(b"\n")
        complete = len(data) + newline + 1 if newline >= 0 else 0
        data += more
    lines: list[LogLine] = []
    for raw in data[:complete].decode("utf-8", errors="replace").splitlines():
        line = _parse_line(raw)
        if line is None:
            continue
        if since is not None:
            try:
                if parse_rfc3339(line.stamp) < since:
                    continue
            except ValueError:
                continue
        lines.append(line)
    return lines, offset + complete


def _parse_line(raw: str) -> LogLine | None:
    parts = raw.split(" ", 3)
    if len(parts) < 3:
        return None
    text = parts[3] if len(parts) == 4 else ""
    return LogLine(parts[0], parts[1], text)
