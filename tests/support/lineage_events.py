"""The OpenLineage provider's file transport, for the lineage tests: where to point it, and the events it wrote.

``AIRFLOW__OPENLINEAGE__TRANSPORT`` is the provider's ``[openlineage] transport`` (a JSON transport config;
``openlineage.client.transport.file.FileConfig``: ``log_file_path``, ``append`` for one event a line). The provider
emits a task's events from the task's process, in a forked child by default; ``execute_in_thread`` (an option of
the provider's) emits them from a thread instead, for a ``dag.test()`` process whose other threads (the inline
trigger's) a fork would copy mid-work.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def lineage_environment(events: Path, namespace: str = "elastic-training-tests") -> dict[str, str]:
    """The ``[openlineage]`` configuration that writes every event to ``events``, one JSON document a line."""
    return {
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events), "append": True}),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": namespace,
        "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "True",
    }


def read_events(
    events: Path, done: Callable[[list[dict[str, Any]]], bool] = bool, timeout: float = 60.0
) -> list[dict[str, Any]]:
    """The events in ``events`` once ``done(them)`` (``TimeoutError`` naming what was read by the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        text = events.read_text() if events.exists() else ""
        found = [json.loads(line) for line in text.splitlines() if line.strip()]
        if done(found):
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"no such OpenLineage events in {events} within {timeout:.0f} s: {found}")
        time.sleep(0.2)


def task_events(events: list[dict[str, Any]], task_id: str) -> list[dict[str, Any]]:
    """The events of one task (its job is ``<dag_id>.<task_id>``), in order."""
    return [e for e in events if e.get("job", {}).get("name", "").endswith(f".{task_id}")]
