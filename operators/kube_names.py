"""Kubernetes names and labels of the project's JobSets: deterministic, DNS-safe, and checked.

A JobSet's name is a DNS-1035 label short enough that every child Job and pod name, and the coordinator
endpoint upstream JobSet writes as a label on them, fit 63 characters (kubernetes-sigs/jobset
``pkg/controllers/jobset_controller.go``, the pod webhook's random suffix); label keys and values follow
apimachinery's ``validation.IsQualifiedName`` and ``IsValidLabelValue``. The Airflow identity of a task
instance (`TaskIdentity`) names and labels its JobSets. Pure.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from elastic_training.operators.constants import (
    HEAD_REPLICATED_JOB,
    LABEL_DAG_ID,
    LABEL_MAP_INDEX,
    LABEL_RUN_ID,
    LABEL_TASK_ID,
)
from elastic_training.operators.shown import shown
from elastic_training.operators.spec import SpecError, is_dns1123_label

# Upstream webhook: the longest pod name is the deterministic part plus "-" and 5 random characters.
POD_NAME_RANDOM_SUFFIX: Final = "-abcde"
NAME_MAX: Final = 63
# Upstream JobSet labels and annotates every Job and pod with the coordinator's stable endpoint,
# `<jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<jobset>`; as a label value it must fit 63 characters,
# or the child Jobs are invalid and never created. With `pathways-head` as coordinator that leaves 22.
COORDINATOR_SUFFIX: Final = f"-{HEAD_REPLICATED_JOB}-0-0."
JOBSET_NAME_MAX: Final = (NAME_MAX - len(COORDINATOR_SUFFIX)) // 2  # 22
NAME_HASH_LENGTH: Final = 6
# The readable part of a JobSet name, kept the same length on every attempt so names sort and read alike.
NAME_PREFIX_MAX: Final = 11
MAX_ATTEMPT: Final = 99
LABEL_HASH_LENGTH: Final = 8

DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
_LABEL_VALUE_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?)?\Z")
# A label key: an optional DNS-1123 subdomain prefix and '/', then a name of at most 63 characters.
_LABEL_KEY_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")


def _short_hash(*parts: object, length: int) -> str:
    digest = hashlib.sha256(json.dumps(list(parts), separators=(",", ":")).encode()).hexdigest()
    return digest[:length]


def _slug(text: str) -> str:
    """Lowercase letters, digits and single dashes, starting with a letter (a DNS-1035 label's alphabet)."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    # A run name may start with a digit (a date); a DNS-1035 label may not.
    return f"run-{slug}" if slug[:1].isdigit() else slug


def jobset_name(
    *, dag_id: str, task_id: str, run_id: str, map_index: int, attempt: int, prefix: str | None = None
) -> str:
    """The JobSet name of one task instance's full-restart `attempt`: same inputs, same name.

    `<slug of prefix or dag-task>-<6 hex of sha256(dag, task, run, map_index)>[-r<attempt>]`, a DNS-1035
    label of at most `JOBSET_NAME_MAX` (22) characters so that every child Job and pod name, and the
    coordinator endpoint label upstream JobSet puts on them, fit 63.
    """
    if attempt < 0 or attempt > MAX_ATTEMPT:
        raise ValueError(f"attempt must be 0..{MAX_ATTEMPT}, got {attempt}")
    digest = _short_hash(dag_id, task_id, run_id, map_index, length=NAME_HASH_LENGTH)
    suffix = f"-{digest}" + (f"-r{attempt}" if attempt else "")
    slug = _slug(prefix if prefix else f"{dag_id}-{task_id}")
    slug = slug[: min(NAME_PREFIX_MAX, JOBSET_NAME_MAX - len(suffix))].rstrip("-") or "run"
    return slug + suffix


def label_value(value: str) -> str:
    """`value` as a label value: itself when valid, else a safe prefix plus a hash of the whole value.

    Valid label values are at most 63 characters of `[A-Za-z0-9._-]` with alphanumeric ends; two different
    inputs never share a rewritten value (the hash covers the original).
    """
    if len(value) <= NAME_MAX and _LABEL_VALUE.match(value):
        return value
    digest = _short_hash(value, length=LABEL_HASH_LENGTH)
    safe = _LABEL_VALUE_UNSAFE.sub("_", value)
    safe = re.sub(r"^[^A-Za-z0-9]+", "", safe)[: NAME_MAX - LABEL_HASH_LENGTH - 1]
    safe = re.sub(r"[^A-Za-z0-9]+$", "", safe)
    return f"{safe}-{digest}" if safe else digest


def identity_labels(*, dag_id: str, task_id: str, run_id: str, map_index: int) -> dict[str, str]:
    """The Airflow identity of a task instance as labels a selector can find (values made label-safe).

    An unmapped task (`map_index` -1) is labelled `none`, since "-1" is not a label value.
    """
    return {
        LABEL_DAG_ID: label_value(dag_id),
        LABEL_TASK_ID: label_value(task_id),
        LABEL_RUN_ID: label_value(run_id),
        LABEL_MAP_INDEX: str(map_index) if map_index >= 0 else "none",
    }


@dataclass(frozen=True)
class TaskIdentity:
    """One Airflow task instance, as its JobSets are named and labelled (``map_index`` -1: not mapped)."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int

    @classmethod
    def of(cls, ti: Any) -> TaskIdentity:
        """The identity of a task instance (its ``map_index`` ``None`` or missing counts as not mapped)."""
        map_index = getattr(ti, "map_index", -1)
        return cls(ti.dag_id, ti.task_id, ti.run_id, -1 if map_index is None else int(map_index))

    def labels(self) -> dict[str, str]:
        """See `identity_labels`."""
        return identity_labels(dag_id=self.dag_id, task_id=self.task_id, run_id=self.run_id, map_index=self.map_index)

    def jobset_name(self, *, attempt: int, prefix: str | None = None) -> str:
        """See `jobset_name`."""
        return jobset_name(
            dag_id=self.dag_id,
            task_id=self.task_id,
            run_id=self.run_id,
            map_index=self.map_index,
            attempt=attempt,
            prefix=prefix,
        )


def label_selector(labels: Mapping[str, str]) -> str:
    """An equality label selector matching every one of `labels` (`k=v,k=v`, keys sorted)."""
    return ",".join(f"{key}={labels[key]}" for key in sorted(labels))


def check_jobset_name(name: str) -> None:
    """`SpecError("name", ...)` unless `name` is a JobSet name `jobset_name` could have made."""
    if not isinstance(name, str) or len(name) > JOBSET_NAME_MAX or not DNS1035_LABEL.match(name):
        raise SpecError(
            "name",
            f"{shown(name)} must be a DNS-1035 label of at most {JOBSET_NAME_MAX} characters (use jobset_name())",
        )


def check_namespace(namespace: object) -> None:
    """`SpecError("namespace", ...)` unless `namespace` is a DNS-1123 label (what a namespace name is)."""
    if not isinstance(namespace, str) or not is_dns1123_label(namespace):
        raise SpecError(
            "namespace",
            f"{shown(namespace)} is not a namespace name: lowercase letters, digits and '-', at most 63 characters",
        )


def is_label_key(key: object) -> bool:
    """Whether `key` is a label key: ``[prefix/]name``, a DNS-1123 subdomain prefix and a 63-character name."""
    if not isinstance(key, str):
        return False
    prefix, _, name = key.rpartition("/")
    if prefix and not (len(prefix) <= 253 and all(is_dns1123_label(part) for part in prefix.split("."))):
        return False
    return len(name) <= NAME_MAX and bool(_LABEL_KEY_NAME.match(name))


def is_label_value(value: object) -> bool:
    """Whether `value` is a label value: at most 63 characters of `[A-Za-z0-9._-]`, alphanumeric at both ends."""
    return isinstance(value, str) and len(value) <= NAME_MAX and bool(_LABEL_VALUE.match(value))


def check_labels(labels: Mapping[str, str], where: str = "labels") -> None:
    """`SpecError` naming `where` (and the key) unless every key and value of `labels` is a valid label."""
    if not isinstance(labels, Mapping):
        raise SpecError(where, f"must be a mapping of label keys to values, got {type(labels).__name__}")
    for key, value in labels.items():
        if not is_label_key(key):
            raise SpecError(where, f"{shown(key)} is not a label key")
        if not is_label_value(value):
            raise SpecError(f"{where}.{key}", f"{shown(value)} is not a label value (use identity_labels())")
