"""absl-style log lines on stdout, as MaxText's head container prints them."""

from __future__ import annotations

import logging
import sys


class _AbslFormatter(logging.Formatter):
    """`I1129 08:40:00.123456 12345 train.py:42] message` (level letter, date, time, pid, file:line)."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = self.formatTime(record, "%m%d %H:%M:%S")
        prefix = f"{record.levelname[0]}{stamp}.{int(record.msecs * 1000):06d} {record.process} "
        message = f"{prefix}{record.filename}:{record.lineno}] {record.getMessage()}"
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        return message


def configure_logging(level: int = logging.INFO) -> None:
    """Send INFO and above from every logger (pathwaysutils' included) to stdout, line-buffered."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(_AbslFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("absl", "jax", "orbax", "urllib3", "kubernetes", "fsspec", "gcsfs"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # A JAX error raised while a log call formats its arguments must not be swallowed (pathwaysutils' advice).
    logging.raiseExceptions = True
