"""A real Airflow notifier for the alert tests: a ``BaseNotifier`` subclass that appends what it is told to a file.

It is what a team's ``SmtpNotifier`` or ``SlackWebhookNotifier`` is to the operators (built with keyword arguments,
called with the task context, or awaited in the triggerer for a missed deadline), with a file for the inbox: its
``line`` is a template rendered by Airflow's own ``BaseNotifier`` machinery, as a mail subject would be. With
``fail=True`` it raises, for the tests that show a broken notifier never fails a run.
"""

from __future__ import annotations

import fcntl
import json
from pathlib import Path
from typing import Any

from airflow.sdk import BaseNotifier

LINE = "{{ elastic_training_alert.event }}: {{ elastic_training_alert.title }}"


class FileNotifier(BaseNotifier):
    """Append ``{"line": <rendered line>, "alert": <elastic_training_alert>, "how": "sync"|"async"}`` to ``path``."""

    template_fields = ("line",)

    def __init__(self, path: str, line: str = LINE, fail: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.line = line
        self.fail = fail

    def _write(self, context: Any, how: str) -> None:
        if self.fail:
            raise RuntimeError("this notifier is broken on purpose")
        record = {"line": self.line, "alert": context.get("elastic_training_alert"), "how": how}
        with open(self.path, "a") as inbox:
            fcntl.flock(inbox, fcntl.LOCK_EX)
            inbox.write(json.dumps(record, default=str) + "\n")

    def notify(self, context: Any) -> None:
        self._write(context, "sync")

    async def async_notify(self, context: Any) -> None:
        self._write(context, "async")


def told(path: Path) -> list[dict[str, Any]]:
    """What the notifier was told, oldest first."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
