"""`CheckpointValidationOperator`: let only a committed, complete, readable checkpoint flow downstream.

Three answers (`operators.checkpoints.answers`): a valid step succeeds, an invalid one fails the task for good
(`AirflowFailException`), and one storage could not be read ("unknown") fails it for a retry (`AirflowException`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetAlias, BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from elastic_training.operators import alerts as alerting
from elastic_training.operators.checkpoints import (
    CheckpointReport,
    DeepOptions,
    MissingLibraryError,
    StepVerdict,
    ValidationOptions,
    validate_checkpoints,
)
from elastic_training.operators.checkpoints.answers import Answer, answer
from elastic_training.operators.checkpoints.storage import CredentialsError, is_gcs, split_gcs
from elastic_training.operators.metrics import ValidationOutcome, emit_validation_outcome

if TYPE_CHECKING:
    from airflow.sdk import Context


def checkpoint_asset_uri(path: str) -> str:
    """The Asset URI of a checkpoint root: ``gs://...`` as is, local paths as ``file://`` URIs."""
    if is_gcs(path):
        return path.rstrip("/")
    return "file://" + os.path.abspath(path)


def _optional_int(name: str, value: Any) -> int | None:
    """Templated fields render as strings; '' and 'None' mean unset."""
    if value is None or (isinstance(value, str) and value.strip() in ("", "None")):
        return None
    if isinstance(value, bool):
        raise AirflowFailException(f"{name} must be a step number, got {value!r}")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise AirflowFailException(f"{name} must be a step number, got {value!r}") from None
    if number < 0:
        raise AirflowFailException(f"{name} must be >= 0, got {number}")
    return number


def checked_path(value: Any, error: type[Exception] = AirflowFailException) -> str:
    """`value` as a checkpoint location, or `error` saying why it cannot be one.

    Templated paths come from params, trigger confs and XCom: an empty render, a missing XCom
    (``"None"``), a relative path (relative to a worker's working directory) or a ``..`` segment
    (which climbs out of the intended directory locally and names nothing on GCS) is refused.
    """
    if not isinstance(value, str) or not value.strip():
        raise error(f"path must be a non-empty string, got {value!r}")
    if value != value.strip() or any(not c.isprintable() for c in value):
        raise error(f"path has surrounding whitespace or control characters: {value!r}")
    if is_gcs(value):
        try:
            split_gcs(value)
        except ValueError as exc:
            raise error(f"path: {exc}") from None
        segments = value[len("gs://") :].split("/")
    elif not os.path.isabs(value):
        raise error(f"path must be absolute or a gs:// URI, got {value!r}")
    else:
        segments = value.split("/")
    if ".." in segments:
        raise error(f"path must not contain '..' segments: {value!r}")
    return value


class CheckpointValidationOperator(BaseOperator):
    """Validate the newest (or a given) Orbax step under `path` and publish it as an Asset event.

    :param path: checkpoints root, MaxText run directory (with ``checkpoints/``) or a step
        directory; local or ``gs://``. Templated.
    :param step: validate this step instead of the newest. Templated.
    :param expected_min_step: the step must be at least this, e.g. the final step the previous
        stage pushed to XCom. Templated.
    :param deep: also restore arrays with Orbax on CPU and check they are finite.
    :param deep_budget_bytes: bytes restored per item in deep mode before sampling arrays.
    :param reference_step: the step must have the same arrays, shapes and dtypes as this one.
        Templated.
    :param require_commit_marker: require ``commit_success.txt`` (always required on ``gs://``).
    :param required_items: item directories every step must have.
    :param fallback_to_latest_valid: when the target step is invalid, succeed with the newest
        valid step (still ``>= expected_min_step``) instead of failing.
    :param asset: the Asset to update; by default ``Asset(<path as a URI>)`` when `path` is not
        templated (no storage is read while parsing DAGs, so point `path` at the same directory
        the consumers watch; the event's ``extra.root`` names the resolved checkpoints root).
    :param asset_alias: with a templated `path`, the alias under which ``Asset(<rendered path>)``
        is emitted (default ``checkpoints:<task_id>``).
    :param alerts: Airflow notifiers (or an :class:`operators.alerts.Alerts`) told when the step is judged invalid
        (``checkpoint_invalid``, a fallback too) or unknown (``checkpoint_unknown``); docs/operations.md, "Alerts".

    The return value (XCom ``return_value``) is the chosen step's verdict; the full report is
    pushed under the key ``report`` before a failure, too. A rendered value that cannot be meant
    (an empty or relative path, a ``..`` segment, a negative or non-numeric step) fails the task
    without retrying, before any storage is read.
    """

    template_fields: Sequence[str] = ("path", "step", "expected_min_step", "reference_step")
    ui_color = "#d6eaf8"

    def __init__(
        self,
        *,
        path: str | os.PathLike[str],
        step: int | str | None = None,
        expected_min_step: int | str | None = None,
        deep: bool = False,
        deep_budget_bytes: int = 1 << 30,
        reference_step: int | str | None = None,
        require_commit_marker: bool = True,
        required_items: Sequence[str] = ("items",),
        fallback_to_latest_valid: bool = False,
        asset: Asset | None = None,
        asset_alias: str | None = None,
        alerts: Any = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        templated = isinstance(path, str) and ("{{" in path or "{%" in path)
        if not templated:
            checked_path(path, ValueError)  # a DAG import error, not a task failure at run time
        self.asset = asset if asset is not None else (None if templated else Asset(checkpoint_asset_uri(path)))
        self.asset_alias = (
            AssetAlias(asset_alias or f"checkpoints:{kwargs.get('task_id', 'validate')}")
            if self.asset is None
            else None
        )
        outlets = list(kwargs.pop("outlets", None) or [])
        outlets.append(self.asset if self.asset is not None else self.asset_alias)
        super().__init__(outlets=outlets, **kwargs)
        self.path = path
        self.step = step
        self.expected_min_step = expected_min_step
        self.deep = deep
        self.deep_budget_bytes = deep_budget_bytes
        self.reference_step = reference_step
        self.require_commit_marker = require_commit_marker
        self.required_items = tuple(required_items)
        self.fallback_to_latest_valid = fallback_to_latest_valid
        self.alerts = alerting.Alerts.of(alerts)

    def execute(self, context: Context) -> dict[str, Any]:
        """Validate, push the verdict, emit the Asset event; fail with the problems listed."""
        path = checked_path(self.path)
        report = self._validate(path)
        context["ti"].xcom_push(key="report", value=report.to_json())
        chosen = self._judge(context, report)
        extra = self._publish(context, path, report, chosen)
        return {
            **extra,
            "valid": True,
            "fallback": chosen is not report.target,
            "requested_step": report.target_step,
            "latest_valid_step": report.latest_valid_step,
            "layout": chosen.layout,
            "deep": chosen.deep,
        }

    def _validate(self, path: str) -> CheckpointReport:
        """The validator's report on ``path``; a worker that cannot read it or lacks a library fails here."""
        step = _optional_int("step", self.step)
        expected = _optional_int("expected_min_step", self.expected_min_step)
        reference_step = _optional_int("reference_step", self.reference_step)
        options = ValidationOptions(
            require_commit_marker=self.require_commit_marker or is_gcs(path),
            required_items=self.required_items,
            min_step=expected,
        )
        try:
            return validate_checkpoints(
                path,
                step=step,
                options=options,
                deep=DeepOptions(budget_bytes=self.deep_budget_bytes) if self.deep else None,
                reference_step=reference_step,
            )
        except CredentialsError as exc:  # the worker's environment, not the checkpoint
            raise AirflowException(str(exc)) from None
        except MissingLibraryError as exc:  # a retry on the same worker image cannot install it
            raise AirflowFailException(str(exc)) from None

    def _judge(self, context: Context, report: CheckpointReport) -> StepVerdict:
        """The step the report lets through (the target, or a fallback), its outcome emitted and alerted on."""
        try:
            chosen = self._choose(report)
        except AirflowException as refused:
            unknown = not isinstance(refused, AirflowFailException)
            self._emit_outcome(context, ValidationOutcome.UNKNOWN if unknown else ValidationOutcome.INVALID)
            self._alert_judged(context, report, str(refused), unknown=unknown)
            raise
        fallback = chosen is not report.target
        self._emit_outcome(context, ValidationOutcome.FALLBACK if fallback else ValidationOutcome.VALID)
        if fallback:
            self._alert_judged(context, report, f"fell back to step {chosen.step}", unknown=False)
            self.log.warning(
                "step %s is not valid; falling back to step %s (%s)",
                report.target_step,
                chosen.step,
                chosen.path,
            )
        return chosen

    def _publish(self, context: Context, path: str, report: CheckpointReport, chosen: StepVerdict) -> dict[str, Any]:
        """The Asset event of the chosen step (on the asset, or the alias's asset of ``path``); its ``extra``."""
        validated_at = datetime.fromtimestamp(report.validated_at, UTC).isoformat()
        extra: dict[str, Any] = {
            "step": chosen.step,
            "path": chosen.path,
            "root": report.root,
            "bytes": chosen.bytes,
            "files": chosen.files,
            "validated_at": validated_at,
        }
        if self.asset is not None:
            context["outlet_events"][self.asset].extra.update(extra)
        elif self.asset_alias is not None:
            asset = Asset(checkpoint_asset_uri(path))
            context["outlet_events"][self.asset_alias].add(asset, extra=extra)
        self.log.info(
            "checkpoint step %s is valid: %s (%d files, %d bytes)", chosen.step, chosen.path, chosen.files, chosen.bytes
        )
        return extra

    def _emit_outcome(self, context: Context, outcome: ValidationOutcome) -> None:
        try:
            ti = context["ti"]
            emit_validation_outcome(outcome, dag_id=ti.dag_id, task_id=ti.task_id)
        except Exception:  # metrics are a courtesy: a broken StatsD/OTel backend must not fail the validation
            self.log.warning("sending the validation's metric failed", exc_info=True)

    def _choose(self, report: CheckpointReport) -> StepVerdict:
        target = report.target
        if report.valid and target is not None:
            return target
        reasons = self._describe(report)
        latest = report.latest_valid_step
        behind_target = (
            latest is not None
            and report.target_step is not None
            and (latest < report.target_step or report.target is None)
        )
        if self.fallback_to_latest_valid and behind_target and latest is not None:
            fallback = report.verdict(latest)
            if fallback is not None:
                self.log.warning("%s", reasons)
                return fallback
        hint = f"; newest valid step is {latest}" if latest is not None else "; no valid step found"
        if report.unreadable or (target is not None and answer(target) is Answer.UNKNOWN):
            # Could not look (a storage outage): unknown, not invalid; the task's retries read it again.
            raise AirflowException(f"{reasons}{hint} (unknown: storage could not be read; retrying may succeed)")
        raise AirflowFailException(f"{reasons}{hint}")

    def _alert_judged(self, context: Context, report: CheckpointReport, said: str, *, unknown: bool) -> None:
        if unknown:
            alert = alerting.checkpoint_unknown(report.root, said)
        else:
            target = report.target
            problems = list(target.problems) if target is not None else [report.error or said]
            alert = alerting.checkpoint_invalid(
                report.target_step, target.path if target is not None else report.root, problems, moved_to=None
            )
        alerting.send(self.alerts, context, alert, self.log)

    @staticmethod
    def _describe(report: CheckpointReport) -> str:
        if report.error and report.target is None:
            return f"checkpoint validation failed under {report.root}: {report.error}"
        target = report.target
        problems = "\n".join(f"  - {p}" for p in (target.problems if target else ()))
        return f"checkpoint step {report.target_step} under {report.root} is not valid:\n{problems}"
