"""absl-style log lines on stdout, as MaxText's head container prints them."""

from __future__ import annotations

import logging
import sys

_progress_logger = logging.getLogger("elastic_training.local.workloads.trainer")


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


def log_completed_step(
    step: int, seconds: float, tokens_per_device: float, loss: float, *, live_slices: int | None = None
) -> None:
    """MaxText's progress line, which the operator parses (`COMPLETED_STEP_RE`, `LIVE_SLICE_COUNT_RE`)."""
    live = f"live slice count: {live_slices}, " if live_slices is not None else ""
    _progress_logger.info(
        "completed step: %d, seconds: %.3f, %sTokens/s/device: %.1f, loss: %.3f",
        step,
        seconds,
        live,
        tokens_per_device,
        loss,
    )
