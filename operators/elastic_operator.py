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

import dataclasses
import math
import os
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, cast

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from elastic_training.operators import alerts as alerting
from elastic_training.operators import config, kube_names, manifests
from elastic_training.operators.advice import auto_period, shape_fingerprint
from elastic_training.operators.backoff import Backoff
from elastic_training.operators.checkpoints import (
    CheckpointReport,
    ValidationOptions,
    quarantine_step,
    validate_checkpoints,
)
from elastic_training.operators.checkpoints.answers import Answer, answer, unknown_reason
from elastic_training.operators.checkpoints.storage import StorageError
from elastic_training.operators.checkpoints.timing import mean_save_seconds
from elastic_training.operators.constants import (
    HEAD_MAIN_CONTAINER,
    HEAD_REPLICATED_JOB,
    LABEL_JOBSET_NAME,
    LABEL_REPLICATED_JOB_NAME,
    PROJECT_PREFIX,
    WORKER_REPLICATED_JOB,
)
from elastic_training.operators.failure_history import RunRecord
from elastic_training.operators.history_store import (
    bounded_notes,
    history_key,
    load_history,
    record_run,
    record_run_id,
)
from elastic_training.operators.images import enforce_allowed_images
from elastic_training.operators.kueue_config import (
    CONFIG_MAP_NAME,
    CONFIG_MAP_NAMESPACE,
    KueueConfigError,
    PodsReadyTimeouts,
    from_config_map,
    from_options,
    pods_ready_warnings,
)
from elastic_training.operators.lifecycle import Handle, JobSet, JobSetLifecycle, JobSetTaskOperator
from elastic_training.operators.lineage import elastic_run_lineage
from elastic_training.operators.links import ElasticTrainingViewLink, GkeLogsLink, GkeWorkloadLink
from elastic_training.operators.metrics import emit_run_metrics
from elastic_training.operators.observations import MonitorState
from elastic_training.operators.options import (
    GROUPS,
    Budgets,
    Capacity,
    History,
    OptionGroup,
    RunOptions,
    Scale,
    Training,
    grouped,
)
from elastic_training.operators.period_replan import REPLAN_FACTOR, REPLAN_KEY, REPLAN_REASON, ReplanBasis
from elastic_training.operators.policy import SHORT_POD_GRACE_SECONDS, Action, JobSetPhase, Reason, decide
from elastic_training.operators.policy import Budgets as PolicyBudgets
from elastic_training.operators.pool_avoidance import (
    RELAX_AFTER_SECONDS,
    RELAXED_REASON,
    Avoidance,
    choose_avoided_pools,
    disabled,
    relaxed,
)
from elastic_training.operators.recovery import CostModel, run_report
from elastic_training.operators.run_history import ANNOTATION_RUN_HISTORY
from elastic_training.operators.run_report import (
    BudgetAllowances,
    PeriodReplan,
    RunReport,
    escalations_of,
    period_choice_from_json,
)
from elastic_training.operators.run_state import RunState
from elastic_training.operators.scheduling import describe, stranded
from elastic_training.operators.shape_prior import ShapeEstimate, estimate_shape
from elastic_training.operators.shown import shown
from elastic_training.operators.spec import (
    ELASTIC_TIMEOUT_HOST_REPAIR_SECONDS,
    ElasticRunSpec,
    SpecError,
    check_runtime,
    lint,
    lint_warnings,
)
from elastic_training.operators.triggers import EventStatus

if TYPE_CHECKING:
    from airflow.sdk import Context

LABEL_FULL_RESTART = f"{PROJECT_PREFIX}/full-restart"
# The failures that are a budget spent (alerted as such): the budget's parameter, by the decision's reason.
_BUDGETS: Mapping[Reason, str] = {
    Reason.FULL_RESTART_BUDGET: "max_full_restarts",
    Reason.QUEUE_TIMEOUT: "queue_timeout",
    Reason.PODS_READY_EVICTIONS: "max_pods_ready_evictions",
    Reason.REQUEUING_LIMIT_EXCEEDED: "Kueue's waitForPodsReady.requeuingStrategy.backoffLimitCount",
}
AUTO_FALLBACK_PERIOD = 10  # checkpoint_period="auto" with no history to learn from: the nightly form's default
MAX_QUARANTINES_PER_ESCALATION = 3


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


def _required(owner: str, name: str, group: OptionGroup | None, example: str) -> Any:
    if group is None:
        raise TypeError(f"{owner} needs {name}={example}")
    expected = GROUPS[name]
    if not isinstance(group, expected):
        raise TypeError(f"{owner}: {name} must be a {expected.__name__}, got {shown(group)}")
    return group


def _optional(owner: str, name: str, group: OptionGroup | None) -> Any:
    return GROUPS[name]() if group is None else _required(owner, name, group, "")


class ElasticJobSetOperator(JobSetTaskOperator):
    """Run an elastic MaxText pretraining JobSet to its final step, recovering what can be recovered.

    Its options come in five groups (:mod:`operators.options`, each checked when made, naming the field)::

        ElasticJobSetOperator(
            task_id="pretrain",
            training=Training(run_name="llama", base_output_directory="gs://b/runs", steps=10_000,
                              checkpoint_period=200, image="…/maxtext:1"),
            scale=Scale(num_slices=4, tpu_type="v5p", tpu_topology="2x2x2"),
            budgets=Budgets(max_slice_restarts=3, stall_timeout=timedelta(minutes=30)),
            capacity=Capacity(queue_name="tpu-queue"),
            history=History(avoid_failing_node_pools=True),
        )

    :param training: what to train (:class:`~operators.options.Training`; required).
    :param scale: how many slices of which TPU (:class:`~operators.options.Scale`; required).
    :param budgets: the restart budgets and timeouts (:class:`~operators.options.Budgets`; default ``Budgets()``).
    :param capacity: the Kueue queue, priorities and the queue's timeout (:class:`~operators.options.Capacity`).
    :param history: learning from earlier runs (:class:`~operators.options.History`).
    :param runtime: ``"gke"`` (MaxText on Pathways) or ``"local"`` (the same JobSet shape running the
        local stand-in workloads).
    :param namespace: Kubernetes namespace (templated). :param kubernetes_conn_id: the cncf-kubernetes connection.
    :param service_account: the pods' Kubernetes service account.
    :param price_per_chip_hour: for the cost of lost chip time in the report.
    :param keep_jobset_on_kill: leave the JobSet running when the task is killed.
    :param deferrable: wait in the triggerer, holding no worker slot (the default), or block a worker.
    :param poll_interval: seconds between the trigger's timer checks when nothing changes.
    :param alerts: Airflow notifiers to call (``BaseNotifier`` instances such as the SMTP provider's
        ``SmtpNotifier``, or callables taking the context), a list of them, or an
        :class:`operators.alerts.Alerts` (with ``queued_after``, the seconds a wait for admission lasts before it is
        told; default 30 min). Called with the task context and ``elastic_training_alert`` in it on a full restart,
        a budget spent, a preemption or eviction, a long wait for admission, a checkpoint invalid or unknown
        (docs/operations.md, "Alerts"); a notifier's error is logged, never the run's.

    Templated: the groups' ``TEMPLATED`` fields (``training.run_name``, ``training.steps``, ``scale.num_slices``,
    ...) and ``namespace``: the operator renders each group into a new one (``render_template``). The flat keyword
    arguments of earlier releases (``max_slice_restarts=3``) still work for one release, with an
    :class:`~operators.options.ElasticTrainingDeprecationWarning` saying the new spelling
    (``budgets=Budgets(max_slice_restarts=3)``); a flat argument and its group together are refused.

    Returns the run report (see docs/operators.md); pushes ``jobset_name`` and ``namespace`` to XCom
    before the first wait, and the report under ``report`` before failing.
    """

    template_fields: Sequence[str] = ("training", "scale", "namespace")
    # Airflow's Rendered Template view (and the plugin's view) show these nested fields one by one.
    template_fields_renderers: ClassVar[dict[str, str]] = {
        **{f"training.{name}": "py" for name in Training.TEMPLATED},
        **{f"scale.{name}": "py" for name in Scale.TEMPLATED},
    }
    ui_color = "#fdebd0"
    operator_extra_links = (ElasticTrainingViewLink(), GkeWorkloadLink(), GkeLogsLink())

    def __init__(
        self,
        *,
        training: Training | None = None,
        scale: Scale | None = None,
        budgets: Budgets | None = None,
        capacity: Capacity | None = None,
        history: History | None = None,
        runtime: str = "gke",
        namespace: str = "default",
        kubernetes_conn_id: str = "kubernetes_default",
        service_account: str | None = None,
        price_per_chip_hour: float = 0.0,
        keep_jobset_on_kill: bool = False,
        deferrable: bool = True,
        poll_interval: float = 10.0,
        alerts: Any = None,
        **kwargs: Any,
    ) -> None:
        owner = type(self).__name__
        given: dict[str, OptionGroup | None] = {
            "training": training,
            "scale": scale,
            "budgets": budgets,
            "capacity": capacity,
            "history": history,
        }
        groups = grouped(owner, given, kwargs, stacklevel=4)
        super().__init__(**kwargs)
        check_runtime(runtime)
        example = "Training(run_name=..., base_output_directory=..., steps=..., checkpoint_period=...)"
        self.training: Training = _required(owner, "training", groups["training"], example)
        self.scale: Scale = _required(owner, "scale", groups["scale"], "Scale(num_slices=...)")
        self.budgets: Budgets = _optional(owner, "budgets", groups["budgets"])
        self.capacity: Capacity = _optional(owner, "capacity", groups["capacity"])
        self.history: History = _optional(owner, "history", groups["history"])
        self.alerts = alerting.Alerts.of(alerts)
        self.runtime = runtime
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.service_account = service_account
        self.price_per_chip_hour = _number("price_per_chip_hour", price_per_chip_hour, positive=False)
        self.keep_jobset_on_kill = keep_jobset_on_kill
        self.deferrable = deferrable
        self.poll_interval = _number("poll_interval", poll_interval, positive=True)
        self.auto_fallback_period: int | None = None  # "auto" with no history: this period (default 10)
        self._active: Handle | None = None
        self._newest_valid_steps: list[str] = []
        self._alert_context: Context | None = None

    @property
    def options(self) -> RunOptions:
        """The run's five groups (rendered, once the task has rendered its templates)."""
        return RunOptions(self.training, self.scale, self.budgets, self.capacity, self.history)

    @options.setter
    def options(self, options: RunOptions) -> None:
        self.training, self.scale, self.budgets = options.training, options.scale, options.budgets
        self.capacity, self.history = options.capacity, options.history

    @property
    def policy_budgets(self) -> PolicyBudgets:
        """The budgets the policy decides with (:class:`operators.policy.Budgets`, in seconds)."""
        return self.options.policy_budgets()

    # -- spec --------------------------------------------------------------------------------

    def build_spec(self) -> ElasticRunSpec:
        """The rendered, linted run spec; ``AirflowFailException`` naming the field when it is wrong."""
        spec = self._linted("run spec", self._spec)
        for warning in lint_warnings(spec):
            self.log.warning("run spec: %s", warning)
        return spec

    def _spec(self) -> ElasticRunSpec:
        spec = self._rendered_spec()
        lint(spec)
        return spec

    def _rendered_spec(self) -> ElasticRunSpec:
        """The spec of the rendered groups and the operator's knobs, not linted yet."""
        # "auto": a placeholder period until the run's plan replaces it (`_planned`)
        return self.options.spec(runtime=self.runtime, service_account=self.service_account)  # type: ignore[arg-type]

    @property
    def auto_period(self) -> bool:
        """Whether ``checkpoint_period="auto"`` (chosen from the failure history before launch)."""
        return self.options.auto_period

    def _history_key(self, context: Context) -> str:
        ti = context["ti"]
        return self.history.failure_history_key or history_key(ti.dag_id, ti.task_id, getattr(ti, "map_index", -1))

    def _plan(self, context: Context, spec: ElasticRunSpec, run: RunState, notes: list[str]) -> None:
        """Once per task try, before its first launch: the pools to avoid and the checkpoint period, from history
        and the options' values of this try (a plan of an earlier try, or of other options, is dropped). What the
        history's read left out or could not read goes into ``notes`` as soon as it is known (a plan that fails
        later still reports it)."""
        try_number = int(getattr(context["ti"], "try_number", 1) or 1)
        if run.plan is not None and run.plan.get("try_number") == try_number:
            return
        plan: dict[str, Any] = {"try_number": try_number}
        stored: tuple[RunRecord, ...] = ()
        if self.history.avoid_failing_node_pools or self.auto_period:
            read = load_history(self._history_key(context), self.log.warning)
            stored = read.history.runs
            notes.extend(read.notes)
            plan["history_notes"] = list(read.notes)  # what the read left out or could not read: the report says
        if self.auto_period:
            # auto weighs every run of this shape the history keeps, newest first (AUTO_SETTINGS)
            choice = auto_period(
                stored,
                steps=spec.steps,
                fallback=_fallback_period(spec.steps, self.auto_fallback_period),
                fingerprint=shape_fingerprint(spec),
                slices=spec.num_slices,
                estimate=_shape_estimate(spec),
            )
            self.log.info("checkpoint_period=auto: %s (%s)", choice.period, choice.reason)
            plan["checkpoint_period_choice"] = choice.to_json()
        avoidance = disabled()
        if self.history.avoid_failing_node_pools:
            candidates, source, unlisted = self._candidate_pools(context, spec)
            avoidance = choose_avoided_pools(
                stored,
                candidates=candidates,
                slices=spec.num_slices,
                threshold=self.history.node_pool_failure_threshold,
                source=source,
                now=time.time(),
                exposures=self.history.failure_history_runs,
                unlisted=unlisted,
            )
            self.log.info("avoid_failing_node_pools: %s", avoidance.reason)
        plan["node_pool_avoidance"] = avoidance.to_json()
        self._plan_pods_ready(spec, plan)
        run.plan = plan

    def _plan_pods_ready(self, spec: ElasticRunSpec, plan: dict[str, Any]) -> None:
        """Kueue's waitForPodsReady into ``plan`` (a queued run only), with the launch warnings it calls for."""
        if self.capacity.queue_name:
            pods_ready = self._pods_ready_timeouts()
            if pods_ready is not None:
                plan["kueue_pods_ready"] = pods_ready.to_json()
                self._warn_pods_ready(spec, pods_ready)

    def _planned_or_not(self, context: Context, spec: ElasticRunSpec, run: RunState) -> ElasticRunSpec:
        """``spec`` with the run's plan applied; any planning error (the history is anyone's edit): the run goes
        ahead without the plan, the log warns, and the report's ``node_pool_avoidance.reason`` says why."""
        notes: list[str] = []
        try:
            self._plan(context, spec, run, notes)
            return self._planned(spec, run)
        except Exception as error:
            why = f"planning from the failure history failed ({type(error).__name__}: {str(error)[:300]})"
            self.log.warning("%s: the run goes ahead without the plan", why)
            unplanned = Avoidance(enabled=self.history.avoid_failing_node_pools, reason=f"{why}: no pool avoided")
            try_number = int(getattr(context["ti"], "try_number", 1) or 1)  # as _plan keys it: not re-planned
            plan = {"try_number": try_number, "node_pool_avoidance": unplanned.to_json(), "planning_error": why}
            if notes:  # the read's own notes (records left out) stand whatever failed after it
                plan["history_notes"] = notes
            try:  # Kueue's timeouts do not come from the history: a failed plan still reads and warns about them
                self._plan_pods_ready(spec, plan)
            except Exception as kueue_error:  # stored input again (the ConfigMap): never the run's failure
                self.log.warning("reading Kueue's waitForPodsReady failed too: %s", str(kueue_error)[:300])
            run.plan = plan
            return self._planned(spec, run)

    def _pods_ready_timeouts(self) -> PodsReadyTimeouts | None:
        """Kueue's waitForPodsReady: its ConfigMap where the Role lets the operator read it, else the task's options."""
        where = f"the ConfigMap {CONFIG_MAP_NAMESPACE}/{CONFIG_MAP_NAME}"
        options = from_options(*self.capacity.kueue_pods_ready_seconds)
        fallback = "using the task's kueue_* options" if options is not None else "its waitForPodsReady is unknown"
        try:
            data = self._hook().read_config_map(CONFIG_MAP_NAME, CONFIG_MAP_NAMESPACE)
        except Exception as error:  # 403 where the Role does not grant it (docs/rbac.md), or no cluster
            self.log.info("Kueue's configuration (%s) could not be read (%s): %s", where, str(error)[:200], fallback)
            return options
        if data is None:
            self.log.info("Kueue's configuration (%s) does not exist: %s", where, fallback)
            return options
        try:
            found = from_config_map(data, where)
        except KueueConfigError as error:  # stored input: reported, never the run's failure
            self.log.warning("Kueue's configuration could not be read: %s; %s", error, fallback)
            return options
        return options if found.enabled is None and options is not None else found

    def _warn_pods_ready(self, spec: ElasticRunSpec, pods_ready: PodsReadyTimeouts) -> None:
        self.log.info(
            "Kueue's waitForPodsReady (%s): %s",
            pods_ready.source,
            "off"
            if pods_ready.enabled is False
            else "not configured (off on Kueue v0.17; on from v0.19, 30 min)"
            if pods_ready.enabled is None
            else f"timeout {pods_ready.timeout_seconds} s, recoveryTimeout {pods_ready.recovery_timeout_seconds} s",
        )
        repair = float(ELASTIC_TIMEOUT_HOST_REPAIR_SECONDS) if spec.runtime == "gke" else None
        for warning in pods_ready_warnings(
            pods_ready,
            elastic_timeout_seconds=float(spec.elastic_timeout_seconds),
            slice_repair_seconds=repair,
            max_pods_ready_evictions=self.budgets.max_pods_ready_evictions,
        ):
            self.log.warning("Kueue: %s", warning)

    def _candidate_pools(self, context: Context, spec: ElasticRunSpec) -> tuple[list[str], str, str]:
        """The node pools a slice of this run can land on (the schedulable nodes its workers select, by their GKE
        pool label, a slice's worth of them per pool), where that came from, and why it is unknown ("": known)."""
        label_selector = manifests.worker_node_selector(spec)
        source = f"schedulable nodes (Ready, not cordoned) matching {label_selector}, {spec.vms_per_slice} a pool"
        try:
            return self._hook().list_node_pools(label_selector, hosts=spec.vms_per_slice), source, ""
        except Exception as error:  # no `list nodes` (RBAC) or no cluster: nothing is known, nothing avoided
            text = str(error)[:300]
            if "403" in text or "orbidden" in text:
                why = (
                    "RBAC forbids listing nodes, so no pool is avoided: bind the node-reading ClusterRole "
                    f"(deploy/rbac-node-pools.yaml, docs/rbac.md) to this task's account ({text})"
                )
            else:
                why = f"the node pools could not be listed, so no pool is avoided ({text})"
            self.log.warning("avoid_failing_node_pools: %s", why)
            return [], f"the node pools could not be listed: {text}", why

    def _planned(self, spec: ElasticRunSpec, run: RunState) -> ElasticRunSpec:
        """``spec`` with the plan applied (the avoided pools, the chosen period), linted again."""
        plan = run.plan or {}
        avoided = tuple(Avoidance.from_json(plan.get("node_pool_avoidance")).avoided)
        if not self.history.avoid_failing_node_pools:  # turned off since the plan was made: never applied
            avoided = ()
        choice = plan.get("checkpoint_period_choice")
        period = spec.checkpoint_period
        if self.auto_period:
            period = (
                int(choice["period"])
                if isinstance(choice, Mapping)
                else _fallback_period(spec.steps, self.auto_fallback_period)
            )
            replanned = plan.get(REPLAN_KEY)
            if isinstance(replanned, Mapping) and isinstance(replanned.get("period"), int):
                period = min(period, max(1, replanned["period"]))  # only ever shorter: stored input
        if not avoided and period == spec.checkpoint_period:
            return spec
        planned = dataclasses.replace(spec, avoid_node_pools=avoided, checkpoint_period=period)
        return self._linted("run spec", lambda: _linted_spec(planned))

    # -- lifecycle ---------------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        self._alert_context = context
        spec = self.build_spec()
        # Placeholder name: the images depend on the spec alone, and nothing may be created before this check.
        enforce_allowed_images(manifests.elastic_jobset(spec, name="image-check", namespace=self.namespace, labels={}))
        cluster = self._cluster(context)
        run = RunState.load(context)
        if run.started_at == 0.0:
            run.started_at = time.time()
        spec = self._planned_or_not(context, spec, run)
        if run.escalating:  # a worker died in the middle of a full restart: finish it
            self._finish_escalation(context, spec, run)
            return self._wait(context, spec, run)
        jobset = self._adopt(cluster, run)
        if jobset is None and (done := self._done_before_launch(context, spec, run)) is not None:
            return done
        if jobset is None:
            self._create(cluster, spec, run)
        else:
            self.log.info("adopting JobSet %s (uid %s)", run.jobset_name, run.jobset_uid)
        run.save(context)
        context["ti"].xcom_push(key="jobset_name", value=run.jobset_name)
        context["ti"].xcom_push(key="namespace", value=self.namespace)
        return self._wait(context, spec, run)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resume after the trigger fired: tell its news, decide, then succeed, fail, escalate or wait again."""
        self._alert_context = context
        run = RunState.load(context)
        spec = self._planned(self.build_spec(), run)
        if event.get("name") != run.jobset_name:
            raise AirflowException(f"trigger event for {event.get('name')!r}, expected {run.jobset_name!r}")
        self._active = Handle(run.jobset_name, run.jobset_uid)  # a kill from here on deletes it
        run.monitor = MonitorState.from_json(event.get("state"))
        self._tell_news(context, run)
        status = event.get("status")
        if status == EventStatus.ERROR:
            run.save(context)
            why = f"watching JobSet {run.jobset_name} failed: {event.get('message')}"
            raise AirflowException(self._abandoned_message(context, self._active, why))
        if status == EventStatus.UNSCHEDULABLE:
            return self._relax_avoidance(context, spec, run, str(event.get("message") or ""))
        if status == EventStatus.REPLAN:
            return self._replan_period(context, spec, run, event)
        if status == EventStatus.DEADLINE:
            timed_out = self._timed_out_message(context, self._active)
            self._alert_budget(run, "execution_timeout", "deadline", timed_out)
            self._fail(context, spec, run, timed_out, retryable=True)
        observation = run.monitor.observation(
            now=time.time(),
            target_step=spec.target_step,
            full_restarts_used=run.budget_used,
            elastic_timeout_seconds=self.policy_budgets.elastic_timeout_seconds,
        )
        # A JobSet failed by MaxText's "checkpoint already exists" refusal may be done: its storage says.
        refused_done = run.monitor.phase is JobSetPhase.FAILED and observation.already_at_target
        read = run.monitor.phase is JobSetPhase.COMPLETED or refused_done
        committed = self._committed_step(spec) if read else None
        decision = decide(_with_committed(observation, committed), self.policy_budgets)
        self.log.info("JobSet %s: %s (%s): %s", run.jobset_name, decision.action, decision.reason, decision.message)
        if decision.action is Action.SUCCEED:
            report = self._report(spec, run, committed)
            if decision.reason is Reason.ALREADY_AT_TARGET:
                report = dataclasses.replace(report, already_at_target=True)
            run.save(context)
            report = self._record_history(context, report, run, succeeded=True, fingerprint=shape_fingerprint(spec))
            returned = report.to_json()
            self.log.info("run report: %s", returned)
            self._emit_metrics(context, report)
            return returned
        if decision.action is Action.FAIL:
            if decision.reason in _BUDGETS:
                self._alert_budget(run, _BUDGETS[decision.reason], decision.reason.value, decision.message)
            self._fail(context, spec, run, decision.message, committed=committed)
        if decision.action is Action.ESCALATE:
            self._escalate(context, spec, run, decision.reason.value, decision.message, decision.pod_grace_seconds)
        run.save(context)
        return self._wait(context, spec, run)

    # -- helpers -----------------------------------------------------------------------------

    def _current(self, context: Context) -> Handle | None:
        run = RunState.load(context)
        return Handle(run.jobset_name, run.jobset_uid) if run.jobset_name else None

    def _adopt(self, cluster: JobSetLifecycle, run: RunState) -> JobSet | None:
        """The JobSet of this task's current incarnation when a new try may adopt it; never a foreign one."""
        if run.jobset_name:
            found = cluster.get(run.jobset_name)
            if found is not None and (not run.jobset_uid or found["metadata"].get("uid") == run.jobset_uid):
                return self._adopted(cluster, run, found, stored=True)
            if run.escalating:
                return None  # deleted by our escalation before a crash: create the next incarnation
        mine = cluster.mine()
        if not mine:
            return None
        newest = max(mine, key=lambda js: int((js["metadata"].get("labels") or {}).get(LABEL_FULL_RESTART, "0")))
        labels = newest["metadata"].get("labels") or {}
        run.full_restarts = max(run.full_restarts, int(labels.get(LABEL_FULL_RESTART, "0")))
        if not run.escalations and not run.history:
            run.restore_history(cast(dict[str, Any], newest), self.log.warning)
        return self._adopted(cluster, run, newest, stored=False)

    def _adopted(self, cluster: JobSetLifecycle, run: RunState, found: JobSet, *, stored: bool) -> JobSet | None:
        dying = bool(found["metadata"].get("deletionTimestamp"))
        if cluster.adoptable(found) is None:
            if not dying:
                # It failed in an earlier try (a bad config, a spent budget): this try is a new run of the task,
                # with its new spec and a fresh full-restart budget, in a new incarnation.
                run.jobset_name, run.jobset_uid = found["metadata"]["name"], found["metadata"].get("uid")
                run.close_incarnation()
                run.full_restarts = min(run.full_restarts + 1, kube_names.MAX_ATTEMPT)
                run.budget_base = run.full_restarts
            elif stored:
                run.close_incarnation()  # its slice restarts and recoveries stay in the report
            return None
        run.jobset_name = str(found["metadata"]["name"])
        run.jobset_uid = str(found["metadata"].get("uid"))
        self._active = Handle(run.jobset_name, run.jobset_uid)
        return found

    def _next_name(self, spec: ElasticRunSpec, run: RunState, attempt: int) -> str:
        return kube_names.jobset_name(
            dag_id=run.dag_id,
            task_id=run.task_id,
            run_id=run.run_id,
            map_index=run.map_index,
            attempt=attempt,
            prefix=spec.run_name,
        )

    def _create(self, cluster: JobSetLifecycle, spec: ElasticRunSpec, run: RunState) -> JobSet:
        name = self._next_name(spec, run, run.full_restarts)
        labels = {**cluster.identity, LABEL_FULL_RESTART: str(run.full_restarts)}
        body = manifests.elastic_jobset(spec, name=name, namespace=self.namespace, labels=labels)
        if run.escalations or run.history:
            body["metadata"].setdefault("annotations", {})[ANNOTATION_RUN_HISTORY] = run.history_annotation()
        created = cluster.create(body)
        self._started(run, created)
        return created

    def _started(self, run: RunState, jobset: JobSet) -> None:
        """``jobset`` is the incarnation watched from now on."""
        run.jobset_name = str(jobset["metadata"]["name"])
        run.jobset_uid = str(jobset["metadata"].get("uid"))
        run.escalating = False
        run.monitor = MonitorState(jobset_uid=run.jobset_uid, started_at=time.time())
        self._active = Handle(run.jobset_name, run.jobset_uid)

    def _wait(self, context: Context, spec: ElasticRunSpec, run: RunState, relax_not_before: float = 0.0) -> Any:
        if not run.monitor.started_at:
            run.monitor.started_at = time.time()
        # max_pods_ready_evictions spans the run: the trigger counts this incarnation's on top of the earlier ones.
        run.monitor.earlier_pods_ready_evictions = run.closed_pods_ready_evictions()
        return self._watch(
            context,
            Handle(run.jobset_name, run.jobset_uid),
            target_step=spec.target_step,
            budgets=self.policy_budgets,
            state=run.monitor.to_json(),
            full_restarts_used=run.budget_used,
            # only while the workers keep off pools: the one thing this run may drop to get its nodes
            relax_after_seconds=RELAX_AFTER_SECONDS if spec.avoid_node_pools else None,
            relax_not_before=relax_not_before,
            alerts=None if self.alerts is None else self.alerts.trigger_kwargs(self._seen(run)),
            replan=self._replan_basis(spec, run),
        )

    def _replan_basis(self, spec: ElasticRunSpec, run: RunState) -> dict[str, Any] | None:
        """What the trigger weighs this run's slice failures against: an ``auto`` run's plan, once per try (a run
        restarted shorter already is not replanned again); ``None`` when ``auto`` measured nothing to plan on."""
        plan = run.plan or {}
        if not self.auto_period or plan.get(REPLAN_KEY) is not None:
            return None
        factor, restart = self._replan_settings()
        if factor == 0:
            return None
        choice = plan.get("checkpoint_period_choice")
        basis = ReplanBasis.from_choice(spec.checkpoint_period, choice, factor=factor, restart_seconds=restart)
        return None if basis is None else basis.to_json()

    def _replan_settings(self) -> tuple[float, float | None]:
        """``[elastic_training] auto_replan_factor`` and ``auto_replan_restart_seconds``; a value that is no
        number (or out of range) is its default, with a warning: a setting never fails a run."""
        factor_text = config.get_option(config.AUTO_REPLAN_FACTOR).strip()
        restart_text = config.get_option(config.AUTO_REPLAN_RESTART_SECONDS).strip()
        factor: float = REPLAN_FACTOR
        restart: float | None = None
        try:
            factor = float(factor_text or REPLAN_FACTOR)
            if not (factor == 0 or 1 <= factor < math.inf):
                raise ValueError("not 0, nor from 1 up")
        except ValueError as error:
            self.log.warning("auto_replan_factor %r is unusable (%s): %s it is", factor_text, error, REPLAN_FACTOR)
            factor = REPLAN_FACTOR
        try:
            restart = float(restart_text) if restart_text else None
            if restart is not None and not 0 <= restart < math.inf:
                raise ValueError("not a number of seconds >= 0")
        except ValueError as error:
            self.log.warning("auto_replan_restart_seconds %r is unusable (%s): measured", restart_text, error)
            restart = None
        return factor, restart

    def _replan_period(self, context: Context, spec: ElasticRunSpec, run: RunState, event: dict[str, Any]) -> Any:
        """The trigger's ``replan``: recreate the JobSet with the shorter period, as a full restart does (deleted and
        gone first, resumed from its newest committed step), spending none; the report says why. MaxText reads
        ``checkpoint_period`` once, at start, so a new incarnation is the only way to change it. An event that does
        not hold a sound shorter period (stored input: the trigger's serialized state) changes nothing."""
        found = event.get("replan")
        period = found.get("period") if isinstance(found, Mapping) else None
        if not isinstance(found, Mapping) or not isinstance(period, int) or not 1 <= period < spec.checkpoint_period:
            self.log.warning("JobSet %s: an unusable replan event (%r): waiting on", run.jobset_name, found)
            run.save(context)
            return self._wait(context, spec, run)
        why = (
            f"{event.get('message') or 'the run failed more often than planned'}; JobSet {run.jobset_name} was "
            "recreated with the shorter period (no full restart spent)"
        )
        run.plan = {**(run.plan or {}), REPLAN_KEY: {**found, "from_period": spec.checkpoint_period, "reason": why}}
        run.budget_base += 1  # the recreation below counts one full restart: not against this try's budget
        self.log.warning("checkpoint_period=auto replanned: %s", why)
        shorter = self._planned(self.build_spec(), run)
        self._escalate(context, shorter, run, REPLAN_REASON, why, None, replan=True)
        return self._wait(context, shorter, run)

    def _relax_avoidance(self, context: Context, spec: ElasticRunSpec, run: RunState, seen: str) -> Any:
        """Worker pods unschedulable for ``RELAX_AFTER_SECONDS`` under the avoidance (the trigger's event, judged
        again on the pods as they are now): drop the avoidance for the rest of this try and recreate the JobSet
        without it, as a full restart does (deleted and gone first: never two JobSets), spending none. JobSet
        refuses a change of a running JobSet's pod affinity (kubernetes-sigs/jobset
        ``pkg/webhooks/jobset_webhook.go`` ``ValidateUpdate`` keeps ``replicatedJobs`` immutable but for labels,
        annotations, node selectors, tolerations and scheduling gates while suspended), so a new incarnation is the
        only way to change it. ``seen``: what the trigger saw, relied on when the pods cannot be read again (the
        option must not strand the run on a failed read)."""
        now = time.time()
        selector = f"{LABEL_JOBSET_NAME}={run.jobset_name},{LABEL_REPLICATED_JOB_NAME}={WORKER_REPLICATED_JOB}"
        try:
            stuck = stranded(self._hook().list_pods(self.namespace, selector), now=now, after=RELAX_AFTER_SECONDS)
            seen = describe(stuck, now) if stuck else ""
        except Exception as error:  # the trigger saw them waiting: a failed second look must not keep them there
            self.log.warning(
                "listing the workers of %s again failed (%s): trusting the trigger", run.jobset_name, error
            )
            seen = f"{seen} (as the trigger saw it; the pods could not be read again)"
        if not spec.avoid_node_pools or not seen:
            self.log.info("JobSet %s: its workers are no longer unschedulable: waiting on", run.jobset_name)
            run.save(context)
            return self._wait(context, spec, run, relax_not_before=now + RELAX_AFTER_SECONDS)
        plan = run.plan or {}
        why = (
            f"{seen}; after {RELAX_AFTER_SECONDS:.0f} s under the avoidance of "
            f"{', '.join(spec.avoid_node_pools)}, JobSet {run.jobset_name} was recreated without it "
            "(no full restart spent)"
        )
        run.plan = {
            **plan,
            "node_pool_avoidance": relaxed(Avoidance.from_json(plan.get("node_pool_avoidance")), why).to_json(),
        }
        run.budget_base += 1  # the recreation below counts one full restart: not against this try's budget
        self.log.warning("avoid_failing_node_pools relaxed: %s", why)
        unavoided = self._planned(self.build_spec(), run)
        grace = None if run.monitor.digest.steps_executed else SHORT_POD_GRACE_SECONDS  # nothing trained: no save
        self._escalate(context, unavoided, run, RELAXED_REASON, why, grace, relaxation=True)
        return self._wait(context, unavoided, run)

    # -- alerts ------------------------------------------------------------------------------

    def _alert(self, alert: alerting.Alert) -> None:
        """Tell the notifiers (the context is the one of the task's current start: execute or its resume)."""
        if self._alert_context is not None:
            alerting.send(self.alerts, self._alert_context, alert, self.log)

    def _seen(self, run: RunState) -> alerting.Seen:
        return alerting.Seen.from_json(run.alerted, jobset_uid=run.jobset_uid)

    def _tell_news(self, context: Context, run: RunState) -> None:
        """What the trigger saw happen while it waited (preemptions, evictions, a long wait), told once."""
        if self.alerts is None:
            return
        run.alerted = alerting.tell_news(self.alerts, context, run.monitor, self._seen(run), self.log).to_json()

    def _read_checkpoints(self, spec: ElasticRunSpec) -> tuple[CheckpointReport | None, str | None]:
        """One read of the run's checkpoints, and why its answer is unknown (``None``: known)."""
        try:
            report = validate_checkpoints(
                spec.checkpoint_directory, options=ValidationOptions(require_commit_marker=True)
            )
        except StorageError as error:  # no credentials: the worker's environment, retried by the task
            return None, str(error)
        return report, unknown_reason(report)

    def _look(self, spec: ElasticRunSpec) -> CheckpointReport:
        """The run's checkpoints, read again with backoff while the answer is "unknown" (storage could not be read).

        Still unknown after ``storage_retry_timeout``: `AirflowException` (the task retries; nothing was moved).
        """
        deadline = time.monotonic() + self.budgets.storage_retry_seconds
        backoff = Backoff(base=2.0, cap=30.0)
        while True:
            report, why = self._read_checkpoints(spec)
            if report is not None and why is None:
                return report
            if time.monotonic() >= deadline:
                self._alert(alerting.checkpoint_unknown(spec.checkpoint_directory, str(why)))
                raise AirflowException(
                    f"the checkpoints under {spec.checkpoint_directory} could not be checked (unknown, not invalid: "
                    f"nothing was moved): {why}"
                )
            self.log.warning("checkpoints under %s not checked (%s); reading again", spec.checkpoint_directory, why)
            time.sleep(min(backoff.next_delay(), max(0.0, deadline - time.monotonic())))

    def _done_before_launch(self, context: Context, spec: ElasticRunSpec, run: RunState) -> dict[str, Any] | None:
        """The report of a run whose newest valid committed step already reaches its target (a cleared task, a
        re-run, a continued run that finished), or ``None`` to launch.

        MaxText refuses such a run (``Requested training up to step N, but a checkpoint already exists at step
        …``, exit 1), which would otherwise read as a trainer failure and spend the full-restart budget. One read,
        no retries: when storage cannot say, the run is launched and MaxText decides.
        """
        report, why = self._read_checkpoints(spec)
        latest = report.latest_valid_step if report is not None and why is None else None
        if latest is None or latest < spec.target_step:
            return None
        self.log.info(
            "step %s under %s is committed and valid, at or past the target step %s: nothing to train, "
            "no JobSet launched",
            latest,
            spec.checkpoint_directory,
            spec.target_step,
        )
        done = dataclasses.replace(self._report(spec, run, latest), already_at_target=True)
        run.save(context)
        self._emit_metrics(context, done)
        return done.to_json()

    def _committed_step(self, spec: ElasticRunSpec) -> int:
        """The newest valid committed step of the run (-1: none); `AirflowException` while storage cannot say."""
        report = self._look(spec)
        latest = report.latest_valid_step
        valid = sorted((v for v in report.steps if v.valid), key=lambda v: v.step, reverse=True)
        self._newest_valid_steps = [v.path for v in valid]
        return -1 if latest is None else latest

    def _escalate(
        self,
        context: Context,
        spec: ElasticRunSpec,
        run: RunState,
        reason: str,
        message: str,
        pod_grace_seconds: int | None = None,
        *,
        relaxation: bool = False,
        replan: bool = False,
    ) -> None:
        """Record the escalation durably, then carry it out (a crash in between resumes it). A ``relaxation`` or a
        ``replan`` recreates the JobSet spending no full restart: nothing to alert."""
        self.log.warning("escalating to a full restart of %s: %s", run.jobset_name, message)
        run.escalations.append(
            {
                "reason": reason,
                "message": message,
                "at": time.time(),
                "jobset_name": run.jobset_name,
                "latest_step": run.monitor.digest.latest_step,
                "pod_grace_seconds": pod_grace_seconds,
                **({"relaxation": True} if relaxation else {}),
                **({"replan": True} if replan else {}),
            }
        )
        run.escalating = True
        run.save(context)
        if not (relaxation or replan):
            self._alert(
                alerting.full_restart(
                    reason,
                    message,
                    used=run.budget_used + 1,
                    allowed=self.budgets.max_full_restarts,
                    latest_step=run.monitor.digest.latest_step,
                )
            )
        self._finish_escalation(context, spec, run)

    def _alert_budget(self, run: RunState, budget: str, reason: str, message: str) -> None:
        used, allowed = run.budget_used, self.budgets.max_full_restarts
        self._alert(alerting.budget_spent(budget, message, reason=reason, full_restarts_used=used, allowed=allowed))

    def _finish_escalation(self, context: Context, spec: ElasticRunSpec, run: RunState) -> None:
        """Delete the JobSet and wait until it is gone, quarantine an invalid newest step, create the next."""
        cluster = self._cluster(context)
        record: dict[str, Any] = run.escalations[-1] if run.escalations else {"at": time.time()}
        cluster.retire(Handle(run.jobset_name, run.jobset_uid), pod_grace_seconds=record.get("pod_grace_seconds"))
        # A crash after the next incarnation was created: it may be saving a step right now. Learn that
        # before quarantining anything, and adopt it instead of touching its run directory.
        following = cluster.get(self._next_name(spec, run, run.full_restarts + 1))
        if following is not None:
            cluster.refuse_foreign(following)
            following = cluster.adoptable(following)
        if following is None:
            record["quarantined"] = [*record.get("quarantined", []), *self._quarantine_invalid_newest(spec)]
            try:
                committed: int | None = self._committed_step(spec)
            except AirflowException:  # only for the report: MaxText finds its own step
                committed = None
            latest = record.get("latest_step")
            record["resumed_from_step"] = committed
            record["steps_lost"] = max(0, (latest if latest is not None else -1) - (committed or -1))
        run.close_incarnation()
        run.full_restarts += 1
        record["seconds_to_recreate"] = round(time.time() - float(record["at"]), 3)  # as the annotation has it
        if following is None:
            self._create(cluster, spec, run)
            record["seconds_to_recreate"] = round(time.time() - float(record["at"]), 3)
        else:
            self.log.info("JobSet %s was created before a crash: adopting it", following["metadata"]["name"])
            self._started(run, following)
        run.save(context)

    def _quarantine_invalid_newest(self, spec: ElasticRunSpec) -> list[str]:
        """Move an invalid newest step aside (never an unknown one: `_look` waits until storage answers)."""
        moved: list[str] = []
        for _ in range(MAX_QUARANTINES_PER_ESCALATION):
            report = self._look(spec)
            newest = max(report.steps, key=lambda v: v.step, default=None)
            if newest is None or answer(newest) is not Answer.INVALID:
                return moved
            step_name = os.path.basename(newest.path.rstrip("/"))
            destination = quarantine_step(report.root, step_name)
            self.log.warning("step %s is not valid (%s); moved aside to %s", newest.step, newest.problems, destination)
            self._alert(alerting.checkpoint_invalid(newest.step, newest.path, newest.problems, moved_to=destination))
            moved.append(destination)
        return moved

    def _report(self, spec: ElasticRunSpec, run: RunState, final_step: int | None) -> RunReport:
        incarnations = [*run.incarnations(), run.current_incarnation()]
        now = time.time()
        report = run_report(
            incarnations=incarnations,
            escalations=escalations_of(run.escalations),
            namespace=self.namespace,
            run_directory=spec.run_directory,
            target_step=spec.target_step,
            final_step=final_step,
            wall_seconds=now - run.started_at,
            costs=CostModel(chips=spec.total_chips, price_per_chip_hour=self.price_per_chip_hour),
            full_restart_seconds_lost=sum(float(e.get("seconds_to_recreate") or 0.0) for e in run.escalations),
            ended_at=now,
            released_at=run.monitor.ended_at,
            budgets=BudgetAllowances.of(
                self.policy_budgets,
                jobset_max_restarts=self.budgets.jobset_max_restarts,
                elastic_max_retries=spec.effective_elastic_max_retries,
                pods_ready=PodsReadyTimeouts.from_json((run.plan or {}).get("kueue_pods_ready")),
            ),
            checkpoint_period=spec.checkpoint_period,
            checkpoint_save_seconds=mean_save_seconds(self._newest_valid_steps),
        )
        plan = run.plan or {}
        avoidance = plan.get("node_pool_avoidance")
        return dataclasses.replace(
            report,
            num_slices=spec.num_slices,
            slice_failures=tuple(run.slice_failures()),
            node_pools=tuple(run.node_pools()),
            node_pool_avoidance=Avoidance.from_json(avoidance) if avoidance else disabled(),
            checkpoint_period_choice=period_choice_from_json(plan.get("checkpoint_period_choice")),
            checkpoint_period_replan=PeriodReplan.from_json(plan.get(REPLAN_KEY)),
        )

    def _record_history(
        self, context: Context, report: RunReport, run: RunState, *, succeeded: bool, fingerprint: str = ""
    ) -> RunReport:
        """Add this run to the failure history (a courtesy: a failure to write it is a warning, never the run's);
        ``report`` with the history's key and what its reads and write said (``history_notes``)."""
        ti = context["ti"]
        key = self._history_key(context)
        notes = [str(n) for n in ((run.plan or {}).get("history_notes") or [])]
        try:
            run_id = record_run_id(
                str(ti.run_id),
                dag_id=str(ti.dag_id),
                task_id=str(ti.task_id),
                map_index=getattr(ti, "map_index", -1),
                shared=bool(self.history.failure_history_key),  # as _history_key tells a named key
            )
            record = report.history_record(
                run_id=run_id, ended_at=time.time(), succeeded=succeeded, fingerprint=fingerprint
            )
        except (ValueError, TypeError) as error:
            self.log.warning("the run's failure history entry could not be made: %s", error)
            notes.append(f"this run's failure history entry could not be made: {error}")
        else:
            notes.extend(record_run(key, record, self.log.warning).notes)
        return dataclasses.replace(report, history_key=key, history_notes=bounded_notes(notes))

    def _emit_metrics(self, context: Context, report: RunReport) -> None:
        self._finished_report = report  # the run's end: its lineage facets read it too
        ti = context["ti"]
        try:
            emit_run_metrics(report, dag_id=ti.dag_id, task_id=ti.task_id)
        except Exception:  # metrics are a courtesy: a broken StatsD/OTel backend must not fail the run
            self.log.warning("sending the run's metrics failed", exc_info=True)

    # -- OpenLineage (the provider calls these after the task ran; operators/lineage.py) ----------------

    _finished_report: RunReport | None = None

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The run's MaxText inputs, its checkpoint directory and its recoveries (``None``: no provider)."""
        try:
            spec = self._rendered_spec()
        except (SpecError, TypeError, ValueError):
            return None
        return elastic_run_lineage(spec, self._finished_report)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """As on completion: the report carries the failure (none when the task failed before its run ended)."""
        return self.get_openlineage_facets_on_complete(task_instance)

    def _fail(
        self,
        context: Context,
        spec: ElasticRunSpec,
        run: RunState,
        message: str,
        *,
        committed: int | None = None,
        retryable: bool = False,
    ) -> None:
        if committed is None:
            try:
                committed = self._committed_step(spec)
            except AirflowException:
                committed = None
        report = dataclasses.replace(self._report(spec, run, committed), failure=message)
        run.save(context)
        report = self._record_history(context, report, run, succeeded=False, fingerprint=shape_fingerprint(spec))
        context["ti"].xcom_push(key="report", value=report.to_json())
        self._emit_metrics(context, report)
        cluster = self._cluster(context)
        alive = run.monitor.phase in (JobSetPhase.ACTIVE, JobSetPhase.SUSPENDED)
        if alive and not self.keep_jobset_on_kill and self._active is not None:
            self.log.warning("deleting the still-active JobSet %s: the task is failing", run.jobset_name)
            cluster.delete(self._active)
        selector = f"{LABEL_JOBSET_NAME}={run.jobset_name},{LABEL_REPLICATED_JOB_NAME}={HEAD_REPLICATED_JOB}"
        head = cluster.log_tail(selector, HEAD_MAIN_CONTAINER)
        raise (AirflowException if retryable else AirflowFailException)(f"{message}{head}")


def _shape_estimate(spec: ElasticRunSpec) -> ShapeEstimate | None:
    """The step and save times ``auto`` assumes before any run of this shape (None: unknown model or TPU, or the
    local runtime, whose stand-in trainer is not the model its arguments name)."""
    if spec.runtime == "local":
        return None
    try:
        return estimate_shape(spec, spec.tpu.name)
    except SpecError:
        return None


def _fallback_period(steps: int, preferred: int | None) -> int:
    return max(1, min(preferred or AUTO_FALLBACK_PERIOD, steps // 2))


def _linted_spec(spec: ElasticRunSpec) -> ElasticRunSpec:
    lint(spec)
    return spec


def _with_committed(observation: Any, committed: int | None) -> Any:
    from dataclasses import replace

    return replace(observation, committed_step=committed)
