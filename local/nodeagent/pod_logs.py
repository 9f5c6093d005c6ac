"""``GET /api/v1/namespaces/{ns}/pods/{name}/log``: container logs as the kubelet serves them.

The kubelet (control plane) writes CRI-format files through :class:`LogStore` and records each container's state in
``status.containerStatuses`` / ``initContainerStatuses``; a ``follow`` stream reads the file of the run it started on
until that run has terminated (or the pod is gone) and everything it wrote has been sent.

As in the kubelet's ``ReadLogs``, ``tailLines`` picks the last lines first and ``sinceTime`` / ``sinceSeconds`` then
drops the older ones among them; ``limitBytes`` caps what is sent. Every file read runs in a worker thread, a bounded
chunk at a time, so a large log never stalls the API's event loop; a follow's poll of a file that has not grown reads
nothing (100 silent follows took half a core in thread hops).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, BinaryIO

from aiohttp import web

from elastic_training.local.nodeagent.logs import (
    LogLine,
    LogStore,
    complete_size,
    parse_rfc3339,
    read_lines,
    since_offset,
    tail_offset,
)

DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
FOLLOW_POLL_SECONDS = 0.05


class LogRequestError(ValueError):
    """A log request that cannot be answered as asked (kubelet answers it 400 with this message)."""

    code = 400

    @property
    def message(self) -> str:
        return str(self)


def _flag(query: Mapping[str, str], key: str) -> bool:
    return query.get(key, "").lower() in ("true", "1")


def _non_negative_int(query: Mapping[str, str], key: str) -> int | None:
    raw = query.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise LogRequestError(f"{key}: invalid integer {raw!r}") from exc
    if value < 0:
        raise LogRequestError(f"{key}: must be greater than or equal to 0")
    return value


def _container_status(pod: Mapping[str, Any], container: str) -> Mapping[str, Any] | None:
    status = pod.get("status") or {}
    for entry in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        if entry.get("name") == container:
            return entry  # type: ignore[no-any-return]
    return None


def pod_run_finished(pod: Mapping[str, Any] | None, uid: str, container: str, run: int) -> bool:
    """Whether run ``run`` of ``container`` can print no more: terminated, replaced, or its pod (now: ``pod``;
    None: gone) gone."""
    if pod is None or pod["metadata"].get("uid") != uid:
        return True
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return True
    status = _container_status(pod, container)
    if status is None:
        return False
    restarts = int(status.get("restartCount", 0))
    if restarts > run:
        return True
    return restarts == run and "terminated" in (status.get("state") or {})


def _since(query: Mapping[str, str]) -> datetime | None:
    seconds = _non_negative_int(query, "sinceSeconds")
    moment = query.get("sinceTime")
    if seconds is not None and moment is not None:
        raise LogRequestError("at most one of sinceTime or sinceSeconds may be specified")
    if seconds is not None:
        if seconds == 0:
            raise LogRequestError("sinceSeconds: must be greater than 0")
        return datetime.now(UTC) - timedelta(seconds=seconds)
    if moment is not None:
        try:
            return parse_rfc3339(moment)
        except ValueError as exc:
            raise LogRequestError(f"sinceTime: invalid RFC 3339 time {moment!r}") from exc
    return None


class _Budget:
    """What is left of ``limitBytes``."""

    def __init__(self, limit: int | None) -> None:
        self.left = limit

    def take(self, data: bytes) -> bytes:
        if self.left is None:
            return data
        data = data[: self.left]
        self.left -= len(data)
        return data

    @property
    def spent(self) -> bool:
        return self.left is not None and self.left <= 0


def _render(lines: list[LogLine], timestamps: bool) -> bytes:
    return "".join(line.render(timestamps) + "\n" for line in lines).encode()


def _start_offset(handle: BinaryIO, end: int, tail: int | None, since: datetime | None) -> int:
    if tail is not None:
        return tail_offset(handle, end, tail)
    if since is not None:
        return since_offset(handle, end, since)
    return 0


async def stream_container_log(
    request: web.Request,
    logs: LogStore,
    pod: Mapping[str, Any],
    container: str,
    finished: Callable[[int], bool],
) -> web.StreamResponse:
    """Answer a log request for ``container`` of ``pod`` from its log files; ``finished(run)`` says when a
    ``follow`` stream of that run can end."""
    query = request.query
    name = pod["metadata"]["name"]
    tail = _non_negative_int(query, "tailLines")
    since = _since(query)
    timestamps = _flag(query, "timestamps")
    follow = _flag(query, "follow")
    previous = _flag(query, "previous")
    budget = _Budget(_non_negative_int(query, "limitBytes"))
    uid = pod["metadata"]["uid"]
    latest = logs.latest_run(uid, container)
    if latest is None:
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if phase == "Pending" or previous:
            raise LogRequestError(f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating')
        return web.Response(body=b"", content_type="text/plain")
    run = latest - 1 if previous else latest
    if run < 0:
        raise LogRequestError(f'previous terminated container "{container}" in pod "{name}" not found')
    path = logs.run_path(uid, container, run)
    if path is None:
        return web.Response(body=b"", content_type="text/plain")
    handle = await asyncio.to_thread(path.open, "rb")
    try:
        end = await asyncio.to_thread(complete_size, handle)
        offset = await asyncio.to_thread(_start_offset, handle, end, tail, since)
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        sender = _LogSender(response, handle, budget, since, timestamps)
        try:
            offset = await sender.send_until(offset, end)  # the file as it was when the request came
            if follow and not previous:
                while not budget.spent:
                    done = finished(run)
                    offset = await sender.send_until(offset, None)  # what the run wrote since
                    if done:
                        break
                    await asyncio.sleep(FOLLOW_POLL_SECONDS)
            await response.write_eof()
        except ConnectionError:
            pass
        return response
    finally:
        handle.close()


class _LogSender:
    """Sends the lines of one open log file, a chunk at a time, read in a worker thread."""

    def __init__(
        self,
        response: web.StreamResponse,
        handle: BinaryIO,
        budget: _Budget,
        since: datetime | None,
        timestamps: bool,
    ) -> None:
        self._response = response
        self._handle = handle
        self._budget = budget
        self._since = since
        self._timestamps = timestamps

    async def send_until(self, offset: int, end: int | None) -> int:
        """Send the complete lines from ``offset`` to ``end`` (None: to what is written now); the offset reached."""
        while not self._budget.spent and (end is None or offset < end):
            if end is None and os.fstat(self._handle.fileno()).st_size <= offset:
                break  # nothing written since the last poll
            lines, reached = await asyncio.to_thread(read_lines, self._handle, offset, since=self._since, end=end)
            if lines:
                await self._response.write(self._budget.take(_render(lines, self._timestamps)))
            if reached == offset:
                break
            offset = reached
        return offset
