"""Container logs on disk, in the kubelet's CRI format, and the reads the log endpoint needs.

Each container run gets one file ``<root>/<pod uid>/<container>/<restart count>.log``; each line
is ``<RFC3339Nano timestamp> <stream> F <text>``, the format the CRI runtimes write, so
``timestamps``, ``sinceTime`` and ``sinceSeconds`` are answered from the file alone.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO


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
    """One line a container printed, with the time the kubelet read it."""

    time: datetime
    stream: str
    text: str

    def render(self, timestamps: bool) -> str:
        return f"{rfc3339_nano(self.time)} {self.text}" if timestamps else self.text


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

    def read(
        self,
        pod_uid: str,
        container: str,
        *,
        previous: bool = False,
        tail_lines: int | None = None,
        since: datetime | None = None,
        offset: int = 0,
        run: int | None = None,
    ) -> tuple[list[LogLine], int]:
        """Lines of the container's current (or previous) run, and the byte offset read up to.

        ``offset`` lets a follower continue where its last read stopped; ``run`` pins the
        restart count to read (a follower must not jump to a newer run's file mid-stream).
        """
        if run is None:
            run = self.latest_run(pod_uid, container)
        if run is None:
            return [], 0
        if previous:
            run -= 1
            if run < 0:
                return [], 0
        path = self.path(pod_uid, container, run)
        if not path.exists():
            return [], 0
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read()
        complete = data.rfind(b"\n") + 1  # a half-written last line is left for the next read
        end = offset + complete
        lines: deque[LogLine] | list[LogLine]
        lines = deque(maxlen=tail_lines) if tail_lines is not None else []
        for raw in data[:complete].decode("utf-8", errors="replace").splitlines():
            line = _parse_line(raw)
            if line is None or (since is not None and line.time < since):
                continue
            lines.append(line)
        return list(lines), end


def _parse_line(raw: str) -> LogLine | None:
    parts = raw.split(" ", 3)
    if len(parts) < 3:
        return None
    try:
        moment = parse_rfc3339(parts[0])
    except ValueError:
        return None
    text = parts[3] if len(parts) == 4 else ""
    return LogLine(moment, parts[1], text)
