"""An alert inbox on disk: the demo's stand-in for a team's mail or Slack notifier, and what the demo reads back.

:class:`InboxNotifier` is an Airflow notifier as the SMTP provider's ``SmtpNotifier`` is one (apache/airflow
``providers/smtp/src/airflow/providers/smtp/notifications/smtp.py``, apache-airflow-providers-smtp 2.x): a
``BaseNotifier`` subclass (Task SDK 1.3, ``task-sdk/src/airflow/sdk/bases/notifier.py``: ``__call__`` renders the
``template_fields`` with the context and calls ``notify``; ``__await__`` does the same for ``async_notify``, as the
triggerer awaits a deadline's notifier), built from keyword arguments (``[elastic_training] alert_notifier_kwargs``),
whose ``subject`` is a Jinja template rendered by that machinery. Where ``SmtpNotifier`` sends a mail, it appends one
JSON line (the rendered subject and the ``elastic_training_alert`` payload) to ``path``, which the demo reads back
(cli/demo.py, ``say_alerts``).
"""

from __future__ import annotations

import fcntl
import json
from typing import Any

from airflow.sdk import BaseNotifier

SUBJECT = "{{ elastic_training_alert.title }}"


class InboxNotifier(BaseNotifier):
    """Append ``{"subject": <rendered subject>, "alert": <elastic_training_alert>}`` to ``path``, one a line."""

    template_fields = ("subject",)

    def __init__(self, path: str, subject: str = SUBJECT, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.subject = subject

    def notify(self, context: Any) -> None:
        record = {"subject": self.subject, "alert": context.get("elastic_training_alert")}
        with open(self.path, "a") as inbox:
            fcntl.flock(inbox, fcntl.LOCK_EX)  # the task's process and the triggerer may both tell
            inbox.write(json.dumps(record, default=str) + "\n")

    async def async_notify(self, context: Any) -> None:
        self.notify(context)
