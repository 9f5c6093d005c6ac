"""`ElasticJobSetOperator`: launch an elastic MaxText JobSet, watch it deferred, escalate only when warranted.

The operator is thin; it wires spec → manifest → hook → trigger → policy:

1. ``execute`` lints the spec (nothing is created when it is wrong), then adopts the JobSet this task
   already made (the task state store first, then a search by the task's identity labels) or
   creates it, pushes ``jobset_name``/``namespace`` to XCom and defers to :class:`JobSetTrigger`.
2. ``execute_complete`` feeds the trigger's observations to :func:`operators.policy.decide`:
   success needs ``Completed`` and a valid committed step at ``steps - 1``; an escalation deletes the
   JobSet (foreground, waiting until it is gone), moves an invalid newest step aside (never
   deleting data) and creates the next incarnation with the same run directory, so MaxText resumes
   from the last committed step; anything else fails with a message naming what ran out.

What must survive a worker crash lives in the task state store (JobSet name and uid, full restarts
used, the incarnations folded so far, escalations); the cluster is the source of truth for the rest.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from operators import manifests
from operators.checkpoints import ValidationOptions, quarantine_step, validate_checkpoints
from operators.checkpoints.storage import StorageError
from operators.checkpoints.timing import mean_save_seconds
from operators.constants import HEAD_MAIN_CONTAINER, LABEL_JOBSET_NAME, LABEL_REPLICATED_JOB_NAME, PROJECT_PREFIX
from operators.hooks import JobSetHook, ride_out_transient
from operators.images import enforce_allowed_images
from operators.links import ElasticTrainingViewLink, GkeLogsLink, GkeWorkloadLink
from operators.metrics import emit_run_metrics
from operators.observations import MonitorState
from operators.policy import Action, Budgets, JobSetPhase, decide
from operators.recovery import CostModel, Incarnation, LogDigest, run_report
from operators.run_history import ANNOTATION_RUN_HISTORY, parse_run_history, render_run_history
from operators.spec import (
    DEFAULT_HEAD_NODE_POOL,
    INT32_MAX,
    PATHWAYS_PROXY_IMAGE,
    PATHWAYS_SERVER_IMAGE,
    ElasticRunSpec,
    SpecError,
    lint,
    lint_warnings,
    shown,
)
from operators.triggers import EventStatus, JobSetTrigger, defer_settle_seconds

if TYPE_CHECKING:
    from airflow.sdk import Context

LABEL_FULL_RESTART = f"{PROJECT_PREFIX}/full-restart"
# Creates of one incarnation's name that may meet a JobSet of this task being deleted before giving up.
CREATE_ATTEMPTS = 3
STATE_KEY = "elastic_run"
DELETE_TIMEOUT_SECONDS = 600.0
MAX_QUARANTINES_PER_ESCALATION = 3
T = TypeVar("T")


def _as_int(field: str, value: Any) -> int:
    """A rendered integer field: an int, or text of ASCII digits (Jinja renders to text); `SpecError` otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = value.strip() if isinstance(value, str) else ""
    if text.isascii() and text.lstrip("-").isdecimal() and len(text) <= 20:
        return int(text)
    raise SpecError(field, f"must be an integer, got {shown(value)}")


def _rendered_args(args: Any) -> dict[str, Any]:
    """Rendered ``maxtext_args`` as they are, for `lint` to judge (NaN, lists, huge ints, keys that are not text)."""
    if not isinstance(args, Mapping):
        raise SpecError("maxtext_args", f"must be a mapping of MaxText keys to values, got {type(args).__name__}")
    return dict(args)


def _count(field: str, value: Any, maximum: int) -> None:
    """A constructor count: an integer from 0 to `maximum` (`TypeError`/`ValueError` naming the parameter)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{field} must be an integer, got {shown(value)}")
    if not 0 <= value <= maximum:
        raise ValueError(f"{field} must be 0..{maximum}, got {shown(value)}")


def _number(field: str, value: Any, *, positive: bool) -> float:
    """A constructor number (a `timedelta` counts its seconds): finite, and positive or non-negative."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{field} must be a number, got {shown(value)}")
    number = float(value) if not isinstance(value, int) or abs(value) < 2**53 else math.inf
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise ValueError(
            f"{field} must be a {'positive' if positive else 'non-negative'} finite number, got {shown(value)}"
        )
    return number


def _seconds(field: str, value: timedelta | float | int) -> float:
    return _number(field, value, positive=True)


class ElasticJobSetOperator(BaseOperator):
    """Run an elastic MaxText pretraining JobSet to its final step, recovering what can be recovered.

    :param run_name: MaxText ``run_name`` (DNS-1123); the run directory is
        ``<base_output_directory>/<run_name>``. Templated.
    :param base_output_directory: ``gs://bucket/prefix`` or an absolute local path. Templated.
    :param steps: training steps (MaxText counts from 0: success needs a committed step ``steps - 1``).
    :param checkpoint_period: steps between checkpoints; well under ``steps``.
    :param num_slices: TPU slices (worker replicas).
    :param maxtext_args: further MaxText keys, e.g. ``{"model_name": "llama2-7b"}``. Values templated.
    :param runtime: ``"gke"`` (MaxText on Pathways) or ``"local"`` (the same JobSet shape running the
        local stand-in workloads).
    :param image: the MaxText image (``gke``). :param tpu_type: e.g. ``v5p``. :param tpu_topology: e.g. ``2x2x1``.
    :param namespace: Kubernetes namespace. :param kubernetes_conn_id: the cncf-kubernetes connection.
    :param max_slice_restarts: slice restarts allowed within ``slice_restart_window`` before a full
        restart; also sets the worker Job's ``backoffLimit``.
    :param slice_restart_window: the sliding window of that budget.
    :param stall_timeout: no completed step for this long while the JobSet is active → full restart.
    :param max_full_restarts: full restarts (delete and recreate the JobSet) allowed before failing.
    :param jobset_max_restarts: the JobSet's own ``failurePolicy.maxRestarts`` (set explicitly).
    :param elastic_min_slice_count: MaxText's ``elastic_min_slice_count`` (-1: wait for every slice).
    :param elastic_timeout_seconds: MaxText's per-attempt wait for slices.
    :param elastic_max_retries: MaxText's ``elastic_max_retries`` (attempts, the first run included; default
        ``max_slice_restarts + 1``). Every slice loss spends one, evictions too, which spend no slice budget.
    :param price_per_chip_hour: for the cost of lost chip time in the report.
    :param keep_jobset_on_kill: leave the JobSet running when the task is killed.
    :param deferrable: wait in the triggerer, holding no worker slot (the default), or block a worker.
    :param poll_interval: seconds between the trigger's timer checks when nothing changes.
    :param local_env: more trainer env (``jax-tpu``), merged over ``trainer_env``: the same manifest on both
        runtimes; the tests put the local stand-ins' fault knobs here.
    :param pathways_server_image: :param pathways_proxy_image: :param head_node_pool: :param service_account:
        :param priority_class: :param kueue_queue: :param image_pull_policy: :param trainer_env:
        :param worker_env: the GKE JobSet's knobs, as the ``ElasticRunSpec`` fields of the same names
        (docs/operators.md, "GKE knobs").

    Returns the run report (see docs/operators.md); pushes ``jobset_name`` and ``namespace`` to XCom
    before the first wait, and the report under ``report`` before failing.
    """

    template_fields: Sequence[str] = (
        "run_name",
        "base_output_directory",
        "steps",
        "checkpoint_period",
        "num_slices",
        "maxtext_args",
        "image",
        "tpu_type",
        "tpu_topology",
        "namespace",
    )
    ui_color = "#fdebd0"
    operator_extra_links = (ElasticTrainingViewLink(), GkeWorkloadLink(), GkeLogsLink())

    def __init__(
        self,
        *,
        run_name: str,
        base_output_directory: str,
        steps: int | str,
        checkpoint_period: int | str,
        num_slices: int | str,
        maxtext_args: Mapping[str, Any] | None = None,
        runtime: str = "gke",
        image: str | None = None,
        tpu_type: str | None = None,
        tpu_topology: str | None = None,
        namespace: str = "default",
        kubernetes_conn_id: str = "kubernetes_default",
        max_slice_restarts: int = 3,
        slice_restart_window: timedelta = timedelta(hours=1),
        stall_timeout: timedelta = timedelta(minutes=30),
        max_full_restarts: int = 2,
        jobset_max_restarts: int = 0,
        elastic_min_slice_count: int = -1,
        elastic_timeout_seconds: int = 300,
        elastic_max_retries: int | None = None,
        price_per_chip_hour: float = 0.0,
        keep_jobset_on_kill: bool = False,
        deferrable: bool = True,
        poll_interval: float = 10.0,
        local_env: Mapping[str, str] | None = None,
        pathways_server_image: str = PATHWAYS_SERVER_IMAGE,
        pathways_proxy_image: str = PATHWAYS_PROXY_IMAGE,
        head_node_pool: str = DEFAULT_HEAD_NODE_POOL,
        service_account: str | None = None,
        priority_class: str | None = None,
        kueue_queue: str | None = None,
        image_pull_policy: str | None = None,
        trainer_env: Mapping[str, str] | None = None,
        worker_env: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if runtime not in ("gke", "local"):
            raise ValueError(f"runtime must be 'gke' or 'local', got {shown(runtime)}")
        _count("max_full_restarts", max_full_restarts, manifests.MAX_ATTEMPT)
        _count("max_slice_restarts", max_slice_restarts, INT32_MAX)
        self.run_name = run_name
        self.base_output_directory = base_output_directory
        self.steps = steps
        self.checkpoint_period = checkpoint_period
        self.num_slices = num_slices
        self.maxtext_args = dict(maxtext_args or {})
        self.runtime = runtime
        self.image = image
        self.tpu_type = tpu_type
        self.tpu_topology = tpu_topology
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.budgets = Budgets(
            max_slice_restarts=max_slice_restarts,
            slice_restart_window_seconds=_seconds("slice_restart_window", slice_restart_window),
            stall_timeout_seconds=_seconds("stall_timeout", stall_timeout),
            max_full_restarts=max_full_restarts,
        )
        self.jobset_max_restarts = jobset_max_restarts
        self.elastic_min_slice_count = elastic_min_slice_count
        self.elastic_timeout_seconds = elastic_timeout_seconds
        self.elastic_max_retries = elastic_max_retries
        self.price_per_chip_hour = _number("price_per_chip_hour", price_per_chip_hour, positive=False)
        self.keep_jobset_on_kill = keep_jobset_on_kill
        self.deferrable = deferrable
        self.poll_interval = _number("poll_interval", poll_interval, positive=True)
        self.local_env = dict(local_env or {})
        self.gke_knobs: dict[str, Any] = {
            "pathways_server_image": pathways_server_image,
            "pathways_proxy_image": pathways_proxy_image,
            "head_node_pool": head_node_pool,
            "service_account": service_account,
            "priority_class": priority_class,
            "kueue_queue": kueue_queue,
            "image_pull_policy": image_pull_policy,
            # Copied when a mapping; anything else reaches the lint, which names the field.
            "trainer_env": (
                {**trainer_env, **self.local_env} if isinstance(trainer_env, Mapping) else trainer_env or self.local_env
            ),
            "worker_env": dict(worker_env) if isinstance(worker_env, Mapping) else worker_env or {},
        }
        self._active_jobset: tuple[str, str | None] | None = None
        self._newest_valid_steps: list[str] = []

    # -- spec --------------------------------------------------------------------------------

    def build_spec(self) -> ElasticRunSpec:
        """The rendered, linted run spec; ``AirflowFailException`` naming the field when it is wrong."""
        try:
            spec = ElasticRunSpec(
                run_name=self.run_name,
                base_output_directory=self.base_output_directory,
                steps=_as_int("steps", self.steps),
                checkpoint_period=_as_int("checkpoint_period", self.checkpoint_period),
                num_slices=_as_int("num_slices", self.num_slices),
                runtime=self.runtime,  # type: ignore[arg-type]
                maxtext_args=_rendered_args(self.maxtext_args),
                image=self.image,
                tpu_type=self.tpu_type,
                tpu_topology=self.tpu_topology,
                max_slice_restarts=self.budgets.max_slice_restarts,
                jobset_max_restarts=self.jobset_max_restarts,
                elastic_timeout_seconds=self.elastic_timeout_seconds,
                elastic_min_slice_count=self.elastic_min_slice_count,
                elastic_max_retries=self.elastic_max_retries,
                **self.gke_knobs,
            )
            lint(spec)
            manifests.check_namespace(self.namespace)
        except SpecError as error:
            raise AirflowFailException(f"invalid run spec: {error}") from None
        for warning in lint_warnings(spec):
            self.log.warning("run spec: %s", warning)
        return spec

    # -- lifecycle ---------------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        spec = self.build_spec()
        # Placeholder name: the images depend on the spec alone, and nothing may be created before this check.
        enforce_allowed_images(manifests.elastic_jobset(spec, name="image-check", namespace=self.namespace, labels={}))
        hook = self._hook()
        run = _RunState.load(context)
        if run.started_at == 0.0:
            run.started_at = time.time()
        identity = self._identity(context)
        if run.escalating:  # a worker died in the middle of a full restart: finish it
            self._finish_escalation(context, spec, run)
            return self._wait(context, spec, run)
        # Safe to repeat: every step of an adoption is idempotent.
        jobset = self._through_transient("finding this task's JobSet", lambda: self._adopt(hook, run, identity))
        if jobset is None:
            jobset = self._create(hook, spec, run, identity)
        else:
            self.log.info("adopting JobSet %s (uid %s)", run.jobset_name, run.jobset_uid)
        run.save(context)
        context["ti"].xcom_push(key="jobset_name", value=run.jobset_name)
        context["ti"].xcom_push(key="namespace", value=self.namespace)
        return self._wait(context, spec, run)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resume after the trigger fired: decide, then succeed, fail, escalate or wait again."""
        spec = self.build_spec()
        run = _RunState.load(context)
        if event.get("name") != run.jobset_name:
            raise AirflowException(f"trigger event for {event.get('name')!r}, expected {run.jobset_name!r}")
        run.monitor = MonitorState.from_json(event.get("state"))
        status = event.get("status")
        if status == EventStatus.ERROR:
            run.save(context)
            raise AirflowException(f"watching JobSet {run.jobset_name} failed: {event.get('message')}")
        if status == EventStatus.DEADLINE:
            self._fail(context, spec, run, f"deadline passed while JobSet {run.jobset_name} was running")
        observation = run.monitor.observation(
            now=time.time(), target_step=spec.target_step, full_restarts_used=run.full_restarts
        )
        committed = self._committed_step(spec) if run.monitor.phase is JobSetPhase.COMPLETED else None
        decision = decide(_with_committed(observation, committed), self.budgets)
        self.log.info("JobSet %s: %s (%s): %s", run.jobset_name, decision.action, decision.reason, decision.message)
        if decision.action is Action.SUCCEED:
            report = self._report(spec, run, committed)
            run.save(context)
            self.log.info("run report: %s", report)
            self._emit_metrics(context, report)
            return report
        if decision.action is Action.FAIL:
            self._fail(context, spec, run, decision.message, committed=committed)
        if decision.action is Action.ESCALATE:
            self._escalate(context, spec, run, decision.reason.value, decision.message)
        run.save(context)
        return self._wait(context, spec, run)

    def on_kill(self) -> None:
        if self.keep_jobset_on_kill or self._active_jobset is None:
            return
        name, uid = self._active_jobset
        self.log.info("task killed: deleting JobSet %s", name)
        self._hook().delete_jobset(name, self.namespace, uid=uid)

    # -- helpers -----------------------------------------------------------------------------

    def _hook(self) -> JobSetHook:
        return JobSetHook(conn_id=self.kubernetes_conn_id)

    def _through_transient(self, what: str, call: Callable[[], T]) -> T:
        return ride_out_transient(call, what=what, log=self.log)

    def _identity(self, context: Context) -> dict[str, str]:
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        return manifests.identity_labels(
            dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id, map_index=-1 if map_index is None else map_index
        )

    def _adopt(self, hook: JobSetHook, run: _RunState, identity: Mapping[str, str]) -> dict[str, Any] | None:
        """The JobSet of this task's current incarnation when it exists; never a foreign one."""
        if run.jobset_name:
            found = hook.get_jobset(run.jobset_name, self.namespace)
            if found is not None and (not run.jobset_uid or found["metadata"].get("uid") == run.jobset_uid):
                if self._being_deleted(hook, found):
                    run.close_incarnation()  # its slice restarts and recoveries stay in the report
                    return None
                run.jobset_uid = str(found["metadata"].get("uid"))
                self._active_jobset = (run.jobset_name, run.jobset_uid)
                return dict(found)
            if run.escalating:
                return None  # deleted by our escalation before a crash: create the next incarnation
        mine = hook.list_jobsets(self.namespace, manifests.label_selector(identity))
        if not mine:
            return None
        newest = max(mine, key=lambda js: int((js["metadata"].get("labels") or {}).get(LABEL_FULL_RESTART, "0")))
        labels = newest["metadata"].get("labels") or {}
        run.full_restarts = max(run.full_restarts, int(labels.get(LABEL_FULL_RESTART, "0")))
        if not run.escalations and not run.history:
            run.restore_history(newest, self.log.warning)
        if self._being_deleted(hook, newest):
            return None
        run.jobset_name = str(newest["metadata"]["name"])
        run.jobset_uid = str(newest["metadata"].get("uid"))
        self._active_jobset = (run.jobset_name, run.jobset_uid)
        return dict(newest)

    def _being_deleted(self, hook: JobSetHook, jobset: Mapping[str, Any]) -> bool:
        """Whether ``jobset`` is being deleted, then gone: never adopt a dying JobSet, nor create beside it.

        A kill's cleanup or an escalation whose record was cleared with the task leaves one; once it is
        gone its name is free again.
        """
        metadata = jobset["metadata"]
        if not metadata.get("deletionTimestamp"):
            return False
        name, uid = str(metadata["name"]), metadata.get("uid")
        self.log.info("JobSet %s is being deleted: waiting until it is gone before creating it again", name)
        hook.require_jobset_gone(name, self.namespace, uid=uid, timeout=DELETE_TIMEOUT_SECONDS)
        return True

    def _create(
        self, hook: JobSetHook, spec: ElasticRunSpec, run: _RunState, identity: Mapping[str, str]
    ) -> dict[str, Any]:
        name = manifests.jobset_name(
            dag_id=run.dag_id,
            task_id=run.task_id,
            run_id=run.run_id,
            map_index=run.map_index,
            attempt=run.full_restarts,
            prefix=spec.run_name,
        )
        labels = {**identity, LABEL_FULL_RESTART: str(run.full_restarts)}
        body = manifests.elastic_jobset(spec, name=name, namespace=self.namespace, labels=labels)
        if run.escalations or run.history:
            body["metadata"].setdefault("annotations", {})[ANNOTATION_RUN_HISTORY] = run.history_annotation()
        from kubernetes.client.rest import ApiException

        created: dict[str, Any] | None = None
        for _ in range(CREATE_ATTEMPTS):
            try:
                created = self._through_transient("creating JobSet", lambda: hook.create_jobset(body, self.namespace))
                break
            except ApiException as error:
                if error.status != 409:
                    raise AirflowException(
                        f"creating JobSet {name} failed: HTTP {error.status}: {error.reason}"
                    ) from None
                created = self._holder_of_name(hook, name, identity)
                if created is not None:
                    break
        if created is None:
            raise AirflowException(f"creating JobSet {name}: its name was taken again {CREATE_ATTEMPTS} times")
        run.jobset_name = name
        run.jobset_uid = str(created["metadata"].get("uid"))
        run.escalating = False
        run.monitor = MonitorState(jobset_uid=run.jobset_uid, started_at=time.time())
        self._active_jobset = (run.jobset_name, run.jobset_uid)
        self.log.info("created JobSet %s (uid %s) in %s", name, run.jobset_uid, self.namespace)
        return created

    def _holder_of_name(self, hook: JobSetHook, name: str, identity: Mapping[str, str]) -> dict[str, Any] | None:
        """After a 409 on create: this task's live JobSet of that name, or None once the name is free again.

        The name was taken between the adoption's list and the create: by this task's own JobSet (a retry
        whose create landed), by one of its own being deleted (waited out), or by a foreign one (refused).
        """
        found = hook.get_jobset(name, self.namespace)
        if found is None:
            return None
        theirs = found["metadata"].get("labels") or {}
        if any(theirs.get(k) != v for k, v in identity.items()):
            raise AirflowFailException(
                f"a JobSet named {name} already exists in {self.namespace} and was not made by this task"
            )
        if self._being_deleted(hook, found):
            return None
        return dict(found)

    def _wait(self, context: Context, spec: ElasticRunSpec, run: _RunState) -> Any:
        if not run.monitor.started_at:
            run.monitor.started_at = time.time()
        trigger = JobSetTrigger(
            name=run.jobset_name,
            namespace=self.namespace,
            uid=run.jobset_uid,
            target_step=spec.target_step,
            budgets={
                "max_slice_restarts": self.budgets.max_slice_restarts,
                "slice_restart_window_seconds": self.budgets.slice_restart_window_seconds,
                "stall_timeout_seconds": self.budgets.stall_timeout_seconds,
                "max_full_restarts": self.budgets.max_full_restarts,
            },
            full_restarts_used=run.full_restarts,
            state=run.monitor.to_json(),
            kubernetes_conn_id=self.kubernetes_conn_id,
            poll_interval=self.poll_interval,
            delete_on_kill=not self.keep_jobset_on_kill,
        )
        if self.deferrable:
            trigger.settle_seconds = defer_settle_seconds()
            self.defer(trigger=trigger, method_name="execute_complete")
        event = asyncio.run(first_event(trigger))
        return self.execute_complete(context, event)

    def _committed_step(self, spec: ElasticRunSpec) -> int:
        """The newest valid committed step of the run (-1: none)."""
        try:
            report = validate_checkpoints(
                spec.checkpoint_directory, options=ValidationOptions(require_commit_marker=True)
            )
        except StorageError as error:
            raise AirflowException(f"reading checkpoints under {spec.checkpoint_directory} failed: {error}") from None
        latest = report.latest_valid_step
        valid = sorted((v for v in report.steps if v.valid), key=lambda v: v.step, reverse=True)
        self._newest_valid_steps = [v.path for v in valid]
        return -1 if latest is None else latest

    def _escalate(self, context: Context, spec: ElasticRunSpec, run: _RunState, reason: str, message: str) -> None:
        """Record the escalation durably, then carry it out (a crash in between resumes it)."""
        self.log.warning("escalating to a full restart of %s: %s", run.jobset_name, message)
        run.escalations.append(
            {
                "reason": reason,
                "message": message,
                "at": time.time(),
                "jobset_name": run.jobset_name,
                "latest_step": run.monitor.digest.latest_step,
            }
        )
        run.escalating = True
        run.save(context)
        self._finish_escalation(context, spec, run)

    def _finish_escalation(self, context: Context, spec: ElasticRunSpec, run: _RunState) -> None:
        """Delete the JobSet and wait until it is gone, quarantine an invalid newest step, create the next."""
        hook = self._hook()
        record: dict[str, Any] = run.escalations[-1] if run.escalations else {"at": time.time()}
        self._through_transient(
            "deleting JobSet", lambda: hook.delete_jobset(run.jobset_name, self.namespace, uid=run.jobset_uid)
        )
        hook.require_jobset_gone(run.jobset_name, self.namespace, uid=run.jobset_uid, timeout=DELETE_TIMEOUT_SECONDS)
        record["quarantined"] = [*record.get("quarantined", []), *self._quarantine_invalid_newest(spec)]
        committed = self._committed_step(spec)
        latest = record.get("latest_step")
        record["resumed_from_step"] = committed
        record["steps_lost"] = max(0, (latest if latest is not None else -1) - committed)
        run.close_incarnation()
        run.full_restarts += 1
        record["seconds_to_recreate"] = round(time.time() - float(record["at"]), 3)  # as the annotation has it
        self._create(hook, spec, run, self._identity(context))
        record["seconds_to_recreate"] = round(time.time() - float(record["at"]), 3)
        run.save(context)

    def _quarantine_invalid_newest(self, spec: ElasticRunSpec) -> list[str]:
        moved: list[str] = []
        for _ in range(MAX_QUARANTINES_PER_ESCALATION):
            try:
                report = validate_checkpoints(
                    spec.checkpoint_directory, options=ValidationOptions(require_commit_marker=True)
                )
            except StorageError as error:
                raise AirflowException(
                    f"reading checkpoints under {spec.checkpoint_directory} failed: {error}"
                ) from None
            newest = max(report.steps, key=lambda v: v.step, default=None)
            if newest is None or newest.valid:
                return moved
            step_name = os.path.basename(newest.path.rstrip("/"))
            destination = quarantine_step(report.root, step_name)
            self.log.warning("step %s is not valid (%s); moved aside to %s", newest.step, newest.problems, destination)
            moved.append(destination)
        return moved

    def _report(self, spec: ElasticRunSpec, run: _RunState, final_step: int | None) -> dict[str, Any]:
        incarnations = [*run.incarnations(), run.current_incarnation()]
        return run_report(
            incarnations=incarnations,
            escalations=run.escalations,
            namespace=self.namespace,
            run_directory=spec.run_directory,
            target_step=spec.target_step,
            final_step=final_step,
            wall_seconds=time.time() - run.started_at,
            costs=CostModel(chips=spec.total_chips, price_per_chip_hour=self.price_per_chip_hour),
            full_restart_seconds_lost=sum(float(e.get("seconds_to_recreate") or 0.0) for e in run.escalations),
            budgets={
                "max_slice_restarts": self.budgets.max_slice_restarts,
                "slice_restart_window_seconds": self.budgets.slice_restart_window_seconds,
                "stall_timeout_seconds": self.budgets.stall_timeout_seconds,
                "max_full_restarts": self.budgets.max_full_restarts,
                "jobset_max_restarts": self.jobset_max_restarts,
                "elastic_max_retries": spec.effective_elastic_max_retries,
            },
            checkpoint_period=spec.checkpoint_period,
            checkpoint_save_seconds=mean_save_seconds(self._newest_valid_steps),
        )

    def _emit_metrics(self, context: Context, report: Mapping[str, Any]) -> None:
        ti = context["ti"]
        try:
            emit_run_metrics(report, dag_id=ti.dag_id, task_id=ti.task_id)
        except Exception:  # metrics are a courtesy: a broken StatsD/OTel backend must not fail the run
            self.log.warning("sending the run's metrics failed", exc_info=True)

    def _fail(
        self, context: Context, spec: ElasticRunSpec, run: _RunState, message: str, *, committed: int | None = None
    ) -> None:
        if committed is None:
            try:
                committed = self._committed_step(spec)
            except AirflowException:
                committed = None
        report = {**self._report(spec, run, committed), "failure": message}
        run.save(context)
        context["ti"].xcom_push(key="report", value=report)
        self._emit_metrics(context, report)
        if run.monitor.phase is JobSetPhase.ACTIVE and not self.keep_jobset_on_kill:
            self.log.warning("deleting the still-active JobSet %s: the task is failing", run.jobset_name)
            self._hook().delete_jobset(run.jobset_name, self.namespace, uid=run.jobset_uid)
        head = self._head_log_tail(run)
        raise AirflowFailException(f"{message}{head}")

    def _head_log_tail(self, run: _RunState) -> str:
        try:
            hook = self._hook()
            pods = hook.list_pods(
                self.namespace, f"{LABEL_JOBSET_NAME}={run.jobset_name},{LABEL_REPLICATED_JOB_NAME}=pathways-head"
            )
            if not pods:
                return ""
            tail = hook.read_log_tail(pods[0]["metadata"]["name"], self.namespace, HEAD_MAIN_CONTAINER, tail_lines=15)
        except Exception:  # the message is what matters; the log tail is a courtesy
            return ""
        return f"\nlast lines of the trainer's log:\n{tail}" if tail.strip() else ""


def _with_committed(observation: Any, committed: int | None) -> Any:
    from dataclasses import replace

    return replace(observation, committed_step=committed)


async def first_event(trigger: JobSetTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        payload: dict[str, Any] = event.payload
        return payload
    raise AirflowException("the JobSet trigger ended without an event")


class _RunState:
    """What must survive a worker crash, in the Airflow task state store (key ``elastic_run``)."""

    def __init__(self, data: Mapping[str, Any], *, dag_id: str, task_id: str, run_id: str, map_index: int) -> None:
        self.dag_id, self.task_id, self.run_id, self.map_index = dag_id, task_id, run_id, map_index
        self.jobset_name: str = str(data.get("jobset_name") or "")
        self.jobset_uid: str | None = data.get("jobset_uid")
        self.full_restarts: int = int(data.get("full_restarts") or 0)
        self.escalating: bool = bool(data.get("escalating"))
        self.started_at: float = float(data.get("started_at") or 0.0)
        self.escalations: list[dict[str, Any]] = list(data.get("escalations") or [])
        self.history: list[dict[str, Any]] = list(data.get("history") or [])
        self.monitor = MonitorState.from_json(data.get("monitor"))

    @classmethod
    def load(cls, context: Context) -> _RunState:
        ti = context["ti"]
        store = context.get("task_state_store")
        data = store.get(STATE_KEY) if store is not None else None
        map_index = getattr(ti, "map_index", -1)
        return cls(
            data if isinstance(data, Mapping) else {},
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            run_id=ti.run_id,
            map_index=-1 if map_index is None else int(map_index),
        )

    def save(self, context: Context) -> None:
        store = context.get("task_state_store")
        if store is None:
            return
        store.set(
            STATE_KEY,
            cast(
                Any,
                {
                    "jobset_name": self.jobset_name,
                    "jobset_uid": self.jobset_uid,
                    "full_restarts": self.full_restarts,
                    "escalating": self.escalating,
                    "started_at": self.started_at,
                    "escalations": self.escalations,
                    "history": self.history,
                    "monitor": self.monitor.to_json(),
                },
            ),
        )

    def current_incarnation(self) -> Incarnation:
        return Incarnation(
            jobset_name=self.jobset_name,
            slice_restarts=self.monitor.slice_restarts,
            jobset_restarts=self.monitor.jobset_restarts,
            digest=self.monitor.digest,
            slice_evictions=self.monitor.slice_evictions,
        )

    def incarnations(self) -> list[Incarnation]:
        return [
            Incarnation(
                jobset_name=str(h["jobset_name"]),
                slice_restarts=int(h["slice_restarts"]),
                jobset_restarts=int(h["jobset_restarts"]),
                digest=LogDigest.from_json(h.get("digest")),
            )
            for h in self.history
        ]

    def history_annotation(self) -> str:
        """The escalations and closed incarnations as the run-history annotation's JSON."""
        return render_run_history(self.escalations, self.history)

    def restore_history(self, jobset: Mapping[str, Any], warn: Callable[..., None]) -> None:
        """Take the escalations and closed incarnations from a JobSet's run-history annotation, if sound."""
        metadata = jobset["metadata"]
        text = (metadata.get("annotations") or {}).get(ANNOTATION_RUN_HISTORY)
        if not text:
            return
        try:
            escalations, history = parse_run_history(str(text))
        except (ValueError, TypeError, KeyError, OverflowError, RecursionError) as error:
            warn("ignoring the %s annotation of %s: %s", ANNOTATION_RUN_HISTORY, metadata.get("name"), error)
            return
        # It describes the incarnations before this JobSet: an entry under its own name is not one of them.
        self.history = [h for h in history if h["jobset_name"] != metadata.get("name")]
        self.escalations = escalations

    def close_incarnation(self) -> None:
        current = self.current_incarnation()
        if self.history and self.history[-1].get("jobset_name") == current.jobset_name:
            return  # already closed before a crash
        self.history.append(
            {
                "jobset_name": current.jobset_name,
                "slice_restarts": current.slice_restarts,
                "jobset_restarts": current.jobset_restarts,
                "digest": current.digest.to_json(),
            }
        )
        self.monitor = MonitorState()
