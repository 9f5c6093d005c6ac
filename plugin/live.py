"""What a running elastic task is doing now: its head pod's log, read by the view through the Kubernetes hook.

While the task is deferred its trigger folds the trainer's log in the triggerer, and none of that reaches
the database before the trigger fires: the trigger is side-effect free by design (operators/triggers.py),
and the task state store holds the monitor state as of the deferral. So for a task that is running or
deferred the view reads the head pod's log itself, the way ``kubectl logs --tail --limit-bytes
--timestamps`` does (kubernetes/kubernetes ``pkg/apis/core/types.go``, ``PodLogOptions``: ``tailLines``,
``limitBytes``, ``timestamps``), and folds the lines after the persisted cursor into the persisted
digest with :meth:`operators.observations.MonitorState.on_log_line`, the very fold the trigger uses.

Why this and not the trigger writing its state: a trigger that writes is no longer safe to run twice
(a triggerer failover runs it twice), and it would write on every log line. The read here is:

- read-only: ``list`` pods and ``get`` ``pods/log``, which the operators' Role already grants;
- bounded: one list by label and one log read of at most ``TAIL_LINES`` lines and ``LIMIT_BYTES``
  bytes, each with a ``TIMEOUT_SECONDS`` request timeout and no retries (a view must answer fast);
- shared: answers are cached per (namespace, JobSet) for ``CACHE_SECONDS`` (at most ``CACHE_ENTRIES``),
  so a page polled by many viewers costs the cluster one read per run per interval;
- honest: when the tail does not reach back to the persisted cursor, ``complete`` is false (the
  current step is right; recoveries older than the tail may be missing until the run report).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from elastic_training.operators import config
from elastic_training.operators.constants import (
    HEAD_MAIN_CONTAINER,
    HEAD_REPLICATED_JOB,
    LABEL_JOBSET_NAME,
    LABEL_REPLICATED_JOB_NAME,
)
from elastic_training.operators.observations import MonitorState, normalize_timestamp

TAIL_LINES = 2000
LIMIT_BYTES = 512 * 1024
TIMEOUT_SECONDS = 5.0
CACHE_SECONDS = 5.0
CACHE_ENTRIES = 64
CONN_ID_CONFIG = (config.SECTION, config.VIEW_KUBERNETES_CONN_ID.name)
DEFAULT_CONN_ID = config.VIEW_KUBERNETES_CONN_ID.default


@dataclass(frozen=True)
class HeadLog:
    """One bounded read of a head pod's trainer log (``text`` has an RFC 3339 timestamp on every line)."""

    pod: str | None
    pod_uid: str | None
    text: str
    read_at: float
    error: str | None = None


Reader = Callable[[str, str], HeadLog]  # (namespace, JobSet name) -> the head pod's log tail


def fold(state: Mapping[str, Any], log: HeadLog) -> tuple[dict[str, Any], dict[str, Any]]:
    """The persisted state with the log's new lines folded into its monitor, and what the page says of it."""
    monitor = MonitorState.from_json(state.get("monitor") if isinstance(state.get("monitor"), Mapping) else None)
    lines = [line for line in log.text.splitlines() if line.strip()]
    new = 0
    first_stamp: str | None = None
    same_pod = log.pod_uid is not None and log.pod_uid == monitor.log_cursor_pod_uid
    cursor = monitor.log_cursor if same_pod else None
    if log.pod_uid is not None:
        for line in lines:
            stamp, _, text = line.partition(" ")
            if first_stamp is None:
                first_stamp = normalize_timestamp(stamp)
            if monitor.on_log_line(stamp, text, log.pod_uid):
                new += 1
    # The tail reaches back far enough when it starts at or before the cursor, or holds the whole log.
    whole_log = len(lines) < TAIL_LINES and len(log.text.encode()) < LIMIT_BYTES
    complete = whole_log if cursor is None else (first_stamp is not None and first_stamp <= cursor) or whole_log
    digest = monitor.digest
    info = {
        "pod": log.pod,
        "read_at": log.read_at,
        "lines_read": len(lines),
        "new_lines": new,
        "complete": bool(complete) and log.error is None,
        "error": log.error,
        "current_step": digest.latest_step,
        "latest_step_at": digest.latest_step_at,
        "live_slices": digest.live_slices,
        "recoveries_so_far": len(digest.all_recoveries),
        "recovering": digest.open_recovery is not None,
    }
    return {**dict(state), "monitor": monitor.to_json()}, info


def kubernetes_reader(conn_id: str | None = None) -> Reader:
    """A reader through the cncf-kubernetes connection ``conn_id`` (``[elastic_training] view_kubernetes_conn_id``).

    A GKE connection (``gke_cluster`` in its extra) works here as in the operators: the api-server's
    process looks the endpoint up once and shares one refreshed Google token across its reads.
    """

    def read(namespace: str, jobset: str) -> HeadLog:
        now = time.time()
        try:
            from elastic_training.operators.hooks import JobSetHook

            hook = JobSetHook(conn_id=conn_id or _conn_id())
            core = hook.core_v1_client
            selector = f"{LABEL_JOBSET_NAME}={jobset},{LABEL_REPLICATED_JOB_NAME}={HEAD_REPLICATED_JOB}"
            pods = core.list_namespaced_pod(namespace, label_selector=selector, _request_timeout=TIMEOUT_SECONDS).items
            alive = [p for p in pods if p.metadata.deletion_timestamp is None] or list(pods)
            if not alive:
                return HeadLog(None, None, "", now, "the head pod does not exist (yet)")
            pod = max(alive, key=lambda p: p.metadata.creation_timestamp or 0)
            text = core.read_namespaced_pod_log(
                pod.metadata.name,
                namespace,
                container=HEAD_MAIN_CONTAINER,
                tail_lines=TAIL_LINES,
                limit_bytes=LIMIT_BYTES,
                timestamps=True,
                _preload_content=False,
                _request_timeout=TIMEOUT_SECONDS,
            ).data.decode("utf-8", errors="replace")
            return HeadLog(pod.metadata.name, pod.metadata.uid, text, now)
        except Exception as error:  # no connection, no access, the pod not started: the page says so
            return HeadLog(None, None, "", now, f"{type(error).__name__}: {_short(error)}")

    return read


def _short(error: BaseException) -> str:
    status = getattr(error, "status", None)
    reason = getattr(error, "reason", None)
    text = f"HTTP {status}: {reason}" if status is not None else str(error)
    return text[:600]  # room for a ClusterAccessError's advice


def _conn_id() -> str:
    return config.get_option(config.VIEW_KUBERNETES_CONN_ID)


class _Cache:
    """(namespace, JobSet) -> the last read, for ``CACHE_SECONDS``; at most ``CACHE_ENTRIES`` kept."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: OrderedDict[tuple[str, str], HeadLog] = OrderedDict()

    def get(self, key: tuple[str, str], read: Callable[[], HeadLog]) -> HeadLog:
        with self.lock:
            found = self.entries.get(key)
            if found is not None and time.time() - found.read_at < CACHE_SECONDS:
                return found
        fresh = read()
        with self.lock:
            self.entries[key] = fresh
            self.entries.move_to_end(key)
            while len(self.entries) > CACHE_ENTRIES:
                self.entries.popitem(last=False)
        return fresh


_CACHE = _Cache()


def live_state(
    state: Mapping[str, Any], *, namespace: str, reader: Reader | None = None
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The state with the head pod's recent log folded in, and the page's live summary; ``None`` without a JobSet."""
    jobset = state.get("jobset_name")
    if not isinstance(jobset, str) or not jobset:
        return None
    read = reader or kubernetes_reader()
    log = (
        _CACHE.get((namespace, jobset), lambda: read(namespace, jobset)) if reader is None else read(namespace, jobset)
    )
    return fold(state, log)
