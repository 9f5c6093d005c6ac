"""Validate every step under a checkpoint root and pick the target and the newest valid step."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from elastic_training.operators.checkpoints.discovery import (
    QUARANTINE_DIR,
    Discovery,
    Ignored,
    discover,
    resolve_root,
    split_step_path,
)
from elastic_training.operators.checkpoints.libraries import MissingLibraryError, require_restore_libraries
from elastic_training.operators.checkpoints.problems import Finding, Problem
from elastic_training.operators.checkpoints.storage import CredentialsError, Storage, StorageError, is_gcs, storage_for
from elastic_training.operators.checkpoints.validation import StepVerdict, ValidationOptions, validate_step


@dataclass(frozen=True)
class DeepOptions:
    """Deep mode: restore arrays with Orbax within `budget_bytes`, sampling beyond it."""

    budget_bytes: int = 1 << 30
    seed: int = 0


@dataclass(frozen=True)
class CheckpointReport:
    """Verdicts on every step under a root, newest first, and the answer for the target step."""

    path: str
    root: str
    target_step: int | None
    steps: tuple[StepVerdict, ...] = ()
    ignored: tuple[Ignored, ...] = ()
    error: str | None = None
    validated_at: float = field(default_factory=time.time)
    # The error is storage's (it could not be read), not a finding: the answer is unknown, not "nothing there".
    unreadable: bool = False

    @property
    def latest_valid_step(self) -> int | None:
        """The newest step with no problem."""
        return next((v.step for v in self.steps if v.valid), None)

    @property
    def target(self) -> StepVerdict | None:
        """The verdict on the target step (the newest, or the one asked for)."""
        return next((v for v in self.steps if v.step == self.target_step), None)

    @property
    def valid(self) -> bool:
        """Whether the target step exists and is valid."""
        target = self.target
        return self.error is None and target is not None and target.valid

    def verdict(self, step: int) -> StepVerdict | None:
        """The verdict on `step`, if it was found."""
        return next((v for v in self.steps if v.step == step), None)

    def to_json(self) -> dict[str, Any]:
        """The ``validate --json`` document (see docs/checkpoint-validation.md)."""
        return {
            "path": self.path,
            "root": self.root,
            "valid": self.valid,
            "step": self.target_step,
            "latest_valid_step": self.latest_valid_step,
            "error": self.error,
            "steps": [v.to_json() for v in self.steps],
            "ignored": [i.to_json() for i in self.ignored],
        }


def validate_checkpoints(
    path: str,
    *,
    step: int | None = None,
    options: ValidationOptions | None = None,
    deep: DeepOptions | None = None,
    reference_step: int | None = None,
    storage: Storage | None = None,
    quarantine_dir: str = QUARANTINE_DIR,
) -> CheckpointReport:
    """Validate the checkpoints under `path` (a checkpoints root, a MaxText run dir or a step dir).

    ``commit_success.txt`` is required on ``gs://`` whatever `options` say. All steps get the
    metadata checks, in parallel. Deep checks (when asked) run on the target
    step and, going down from the newest, until one valid step is found. Raises `CredentialsError`
    when gs:// has no usable credentials; any other storage error is the report's ``error``. Raises
    `MissingLibraryError` before reading anything when `deep` or `reference_step` asks for a check whose
    libraries (the ``[deep]`` extra) are not installed.
    """
    _require_libraries(deep, reference_step)
    store = storage or storage_for(path)
    opts = _options_for(path, options or ValidationOptions())
    try:
        root, step = _locate(store, path, step)
        found = discover(store, root, quarantine_dir)
    except CredentialsError:
        raise  # the environment is broken, not the checkpoint: no verdict
    except StorageError as exc:
        return CheckpointReport(path, path, step, error=str(exc), unreadable=True)
    if not found.steps:
        return _nothing_found(store, path, root, step, found)
    verdicts = _validate_all(store, found, opts)
    target = step if step is not None else max(found.steps)
    if reference_step is not None:
        verdicts = _apply_reference(verdicts, reference_step, target)
    if deep is not None:
        verdicts = _apply_deep(store, verdicts, target, deep)
    report = CheckpointReport(
        path=path,
        root=root,
        target_step=target,
        steps=tuple(sorted(verdicts.values(), key=lambda v: v.step, reverse=True)),
        ignored=found.ignored,
    )
    if step is not None and step not in found.steps:
        return replace(report, error=f"step {step} not found under {root}")
    return report


def _require_libraries(deep: DeepOptions | None, reference_step: int | None) -> None:
    """`MissingLibraryError` before anything is read when a check asked for needs the ``[deep]`` extra."""
    if deep is not None:
        require_restore_libraries("deep validation (restoring arrays)")
    if reference_step is not None:
        require_restore_libraries("comparing shapes and dtypes with a reference step")


def _options_for(path: str, opts: ValidationOptions) -> ValidationOptions:
    """`opts`, requiring the commit marker on ``gs://``."""
    if is_gcs(path) and not opts.require_commit_marker:
        # On GCS Orbax writes in place (commit-file atomicity): without the marker, a step
        # directory cannot be told from a save still in progress or killed.
        return replace(opts, require_commit_marker=True)
    return opts


def _locate(store: Storage, path: str, step: int | None) -> tuple[str, int | None]:
    """The checkpoints root `path` is or holds, and the step asked for (else the one `path` names, if any)."""
    as_step = split_step_path(store, path)
    if as_step is None:
        return resolve_root(store, path), step
    root, step_in_path = as_step
    return root, step if step is not None else step_in_path


def _nothing_found(store: Storage, path: str, root: str, step: int | None, found: Discovery) -> CheckpointReport:
    """The report on a root with no step: no such directory, or no step in it."""
    try:
        why = "no such directory" if not store.exists_dir(root) else "no checkpoint steps found"
    except StorageError as exc:
        return CheckpointReport(path, root, step, ignored=found.ignored, error=str(exc), unreadable=True)
    return CheckpointReport(path, root, step, ignored=found.ignored, error=f"{why}: {root}")


def _validate_all(store: Storage, found: Discovery, opts: ValidationOptions) -> dict[int, StepVerdict]:
    workers = max(1, min(opts.max_workers, len(found.steps)))
    with (
        ThreadPoolExecutor(max_workers=workers) as steps_pool,
        ThreadPoolExecutor(max_workers=opts.max_workers) as files_pool,
    ):

        def one(item: tuple[int, str]) -> StepVerdict:
            s, p = item
            return validate_step(store, p, s, opts, pool=files_pool)

        return {v.step: v for v in steps_pool.map(one, sorted(found.steps.items()))}


def _apply_reference(verdicts: dict[int, StepVerdict], reference_step: int, target: int) -> dict[int, StepVerdict]:
    from elastic_training.operators.checkpoints.expectations import array_signature, compare_signatures, compare_trees

    ref = verdicts.get(reference_step)
    current = verdicts.get(target)
    if current is None:
        return verdicts
    if ref is None:
        extra = [Finding(Problem.TREE_MISMATCH, "", f"reference step {reference_step} not found")]
        return {**verdicts, target: current.with_problems(extra)}
    problems = compare_trees(current, ref)
    if not problems and current.valid and ref.valid:
        for item in current.items:
            if not item.layout or not any(i.name == item.name and i.layout for i in ref.items):
                continue
            try:
                actual = array_signature(f"{current.path}/{item.name}")
                expected = array_signature(f"{ref.path}/{item.name}")
            except MissingLibraryError:
                raise  # not the checkpoint's fault, and no answer about it
            except Exception as exc:  # Orbax raises many types for damaged data.
                problems.append(Finding(Problem.RESTORE_FAILED, item.name, f"metadata: {exc}"[:300]))
                continue
            problems.extend(compare_signatures(item.name, actual, expected, ref.step))
    return {**verdicts, target: current.with_problems(problems)}


def _apply_deep(
    store: Storage, verdicts: dict[int, StepVerdict], target: int, deep: DeepOptions
) -> dict[int, StepVerdict]:
    """Deep-check the target, then (newest first) valid steps until one passes."""
    out = dict(verdicts)
    run: Callable[[StepVerdict], StepVerdict] = lambda v: deep_verdict(v, deep)  # noqa: E731
    if target in out and out[target].valid:
        out[target] = run(out[target])
    for s in sorted(out, reverse=True):
        if out[s].valid and out[s].deep is None:
            out[s] = run(out[s])
        if out[s].valid and out[s].deep is not None:
            break
    return out


def deep_verdict(verdict: StepVerdict, deep: DeepOptions) -> StepVerdict:
    """`verdict` with the results of restoring its PyTree items."""
    from elastic_training.operators.checkpoints.deep import deep_check

    problems: list[Finding] = []
    summary: dict[str, Any] = {}
    for item in verdict.items:
        if not item.layout:
            continue
        result = deep_check(f"{verdict.path}/{item.name}", budget_bytes=deep.budget_bytes, seed=deep.seed)
        problems.extend(
            Finding(p.code, f"{item.name}/{p.path}" if p.path else item.name, p.detail) for p in result.problems
        )
        summary[item.name] = result.to_json()
    return verdict.with_problems(problems, deep=summary)
