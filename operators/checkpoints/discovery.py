"""Find the steps under an Orbax checkpoint root, and say why every other name is not one."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

from elastic_training.operators.checkpoints.storage import EntryKind, Storage
from elastic_training.operators.constants import CHECKPOINT_METADATA_FILE, CHECKPOINTS_DIR, TMP_DIR_SUFFIX

QUARANTINE_DIR = "quarantine"
# Orbax's temporary names: `<step>.orbax-checkpoint-tmp` (>= 0.11.20) and `...-tmp-<n>` (older).
# ASCII digits only: `\d` would also take Arabic-Indic or fullwidth digits, names no trainer writes.
_TMP_RE = re.compile(r"^([0-9]+)" + re.escape(TMP_DIR_SUFFIX) + r"(-[0-9]+)?\Z")
_STEP_RE = re.compile(r"^[0-9]{1,18}\Z")


class IgnoredReason(StrEnum):
    """Why a name under the root is not a step."""

    TEMPORARY = "temporary"
    QUARANTINE = "quarantine"
    NOT_A_STEP = "not_a_step"
    NOT_A_DIRECTORY = "not_a_directory"
    DUPLICATE_STEP = "duplicate_step"


@dataclass(frozen=True)
class Ignored:
    """A name under the root that is not a step."""

    name: str
    reason: IgnoredReason
    step: int | None = None

    def to_json(self) -> dict[str, object]:
        """Plain JSON form."""
        return {"name": self.name, "reason": str(self.reason), "step": self.step}


@dataclass(frozen=True)
class Discovery:
    """The steps found under `root` (the directory that holds the step directories)."""

    root: str
    steps: dict[int, str] = field(default_factory=dict)
    ignored: tuple[Ignored, ...] = ()

    @property
    def step_numbers(self) -> list[int]:
        """Steps, oldest first."""
        return sorted(self.steps)


def resolve_root(storage: Storage, path: str) -> str:
    """The Orbax root for `path`: itself, or its ``checkpoints/`` child for a MaxText run directory.

    A run directory is recognised by having a ``checkpoints/`` directory and no numeric children.
    """
    children = storage.list_dir(path)
    names = {e.name for e in children if e.kind is EntryKind.DIR}
    if CHECKPOINTS_DIR in names and not any(_STEP_RE.match(n) for n in names):
        return storage.join(path, CHECKPOINTS_DIR)
    return path


def split_step_path(storage: Storage, path: str) -> tuple[str, int] | None:
    """``(root, step)`` when `path` is itself a step directory (numeric name with step metadata)."""
    trimmed = path.rstrip("/")
    head, _, name = trimmed.rpartition("/")
    if not head or not _STEP_RE.match(name):
        return None
    names = {e.name for e in storage.list_dir(trimmed)}
    if CHECKPOINT_METADATA_FILE not in names:
        return None
    return head, int(name)


def discover(storage: Storage, root: str, quarantine_dir: str = QUARANTINE_DIR) -> Discovery:
    """List `root` once and classify each child."""
    steps: dict[int, str] = {}
    ignored: list[Ignored] = []
    for entry in sorted(storage.list_dir(root), key=lambda e: (len(e.name), e.name)):
        name = entry.name
        if name == quarantine_dir:
            ignored.append(Ignored(name, IgnoredReason.QUARANTINE))
            continue
        tmp = _TMP_RE.match(name)
        if tmp or TMP_DIR_SUFFIX in name:
            ignored.append(Ignored(name, IgnoredReason.TEMPORARY, int(tmp.group(1)) if tmp else None))
            continue
        if not _STEP_RE.match(name):
            ignored.append(Ignored(name, IgnoredReason.NOT_A_STEP))
            continue
        step = int(name)
        if entry.kind is not EntryKind.DIR:
            ignored.append(Ignored(name, IgnoredReason.NOT_A_DIRECTORY, step))
        elif step in steps:
            # "5" and "0005" are the same step; the shortest name wins.
            ignored.append(Ignored(name, IgnoredReason.DUPLICATE_STEP, step))
        else:
            steps[step] = storage.join(root, name)
    return Discovery(root=root, steps=steps, ignored=tuple(ignored))
