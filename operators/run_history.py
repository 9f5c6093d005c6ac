"""The run-history annotation: what an incarnation knows of the incarnations and escalations before it.

`ElasticJobSetOperator` puts it on every JobSet after the first, so a rerun whose task state store is
empty (a cleared task, a DAG run that `dag.test()` recreated) still reports the whole run. Pure: no Airflow.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from elastic_training.operators.constants import PROJECT_PREFIX
from elastic_training.operators.spec import INT32_MAX

ANNOTATION_RUN_HISTORY = f"{PROJECT_PREFIX}/run-history"
# Well under the 256 KiB Kubernetes allows for all annotations together; past it the oldest entries go.
RUN_HISTORY_MAX_BYTES = 64 * 1024
_INCARNATION_KEYS = ("jobset_name", "slice_restarts", "jobset_restarts")
MAX_TEXT = 4096  # characters in any one string (messages are cut to it when written)


def render_run_history(escalations: Sequence[Mapping[str, Any]], history: Sequence[Mapping[str, Any]]) -> str:
    """Compact JSON of the escalations and closed incarnations (counts only, no recovery timelines).

    The oldest entries are left out when it would not fit in ``RUN_HISTORY_MAX_BYTES``.
    """
    kept_escalations = [{k: v[:MAX_TEXT] if isinstance(v, str) else v for k, v in e.items()} for e in escalations]
    kept_history = [{k: h[k] for k in _INCARNATION_KEYS} for h in history]
    while True:
        text = json.dumps({"escalations": kept_escalations, "history": kept_history}, separators=(",", ":"))
        if len(text.encode()) <= RUN_HISTORY_MAX_BYTES or not (kept_escalations or kept_history):
            return text
        if len(kept_escalations) >= len(kept_history):
            kept_escalations.pop(0)
        else:
            kept_history.pop(0)


def parse_run_history(text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(escalations, history) rebuilt from a run-history annotation, keeping only checked fields.

    Anyone who may edit JobSets can write the annotation, so nothing is taken as it is: each field the report
    reads is checked (type, finite, in range) and copied; anything else is dropped. Raises ValueError (or
    TypeError, KeyError, OverflowError, RecursionError) when the text is not a sound history.
    """
    if len(text.encode()) > RUN_HISTORY_MAX_BYTES:
        raise ValueError(f"longer than {RUN_HISTORY_MAX_BYTES} bytes")
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not an object")
    raw_escalations, raw_history = data["escalations"], data["history"]
    if not isinstance(raw_escalations, list) or not isinstance(raw_history, list):
        raise ValueError("escalations and history must be lists")
    escalations = [_checked_escalation(e) for e in raw_escalations]
    history = [
        {
            "jobset_name": _text(h, "jobset_name", required=True),
            "slice_restarts": _whole(h, "slice_restarts", required=True),
            "jobset_restarts": _whole(h, "jobset_restarts", required=True),
            "digest": None,
        }
        for h in map(_object, raw_history)
    ]
    return escalations, history


def _object(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("an entry must be an object")
    return value


def _text(entry: Mapping[str, Any], key: str, *, required: bool = False) -> str | None:
    value = entry.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise ValueError(f"{key} must be a string of at most {MAX_TEXT} characters")
    return value


def _whole(entry: Mapping[str, Any], key: str, *, required: bool = False, minimum: int = 0) -> int | None:
    value = entry.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= INT32_MAX:
        raise ValueError(f"{key} must be a whole number from {minimum} to {INT32_MAX}")
    return value


def _step(entry: Mapping[str, Any], key: str) -> int | None:
    """A step number, or -1 for "none committed"."""
    return _whole(entry, key, minimum=-1)


def _secs(entry: Mapping[str, Any], key: str, *, required: bool = False) -> float | None:
    value = entry.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value < 1e12:
        raise ValueError(f"{key} must be a number of seconds")
    return float(value)


_ESCALATION_FIELDS: dict[str, Callable[[Mapping[str, Any], str], object]] = {
    "message": _text,
    "jobset_name": _text,
    "latest_step": _step,
    "resumed_from_step": _step,
    "steps_lost": _whole,
    "seconds_to_recreate": _secs,
}


def _checked_escalation(value: Any) -> dict[str, Any]:
    entry = _object(value)
    checked: dict[str, Any] = {"reason": _text(entry, "reason", required=True), "at": _secs(entry, "at", required=True)}
    for key, check in _ESCALATION_FIELDS.items():
        if key in entry:
            checked[key] = check(entry, key)
    if "quarantined" in entry:
        quarantined = entry["quarantined"]
        if not isinstance(quarantined, list) or not all(isinstance(q, str) and len(q) <= MAX_TEXT for q in quarantined):
            raise ValueError("quarantined must be a list of paths")
        checked["quarantined"] = list(quarantined)
    return checked
