"""`JobSetOperator`: a plain (non-elastic) one-job JobSet that must complete: evaluation, synthesis.

The JobSet lifecycle (identity, adoption, create, deferral, deadline, kill) is :mod:`operators.lifecycle`'s,
shared with the elastic operator; there are no budgets here: ``Completed`` is success, ``Failed`` fails the
task with the JobSet's reason and the tail of the container's log. A retry adopts a JobSet still running;
one that failed in an earlier try is deleted and made again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from elastic_training.operators import alerts as alerting
from elastic_training.operators import kube_names, manifests
from elastic_training.operators.constants import LABEL_JOBSET_NAME
from elastic_training.operators.images import enforce_allowed_images
from elastic_training.operators.lifecycle import Handle, JobSetTaskOperator
from elastic_training.operators.manifests import JobSpec, lint_job
from elastic_training.operators.observations import MonitorState
from elastic_training.operators.options import Capacity, OptionGroup, grouped
from elastic_training.operators.policy import Budgets, JobSetPhase, Reason
from elastic_training.operators.recovery import holding_end
from elastic_training.operators.shown import shown
from elastic_training.operators.spec import SpecError, check_runtime
from elastic_training.operators.triggers import EventStatus

if TYPE_CHECKING:
    from airflow.sdk import Context

# A plain JobSet has no slices and no stall rule: only its terminal state wakes the operator.
_NO_BUDGETS = Budgets(
    max_slice_restarts=1_000_000,
    slice_restart_window_seconds=1.0,
    stall_timeout_seconds=10.0 * 365 * 24 * 3600,
    max_full_restarts=0,
)


def _argv_item(value: Any) -> Any:
    """A rendered argument: text as is, a (bounded) integer as its digits; anything else left for `lint_job`."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**18:
        return str(value)
    return value


# The groups a plain JobSet takes: its Kueue queue (the elastic operator's other groups are about slices).
_GROUPS: dict[str, type[OptionGroup]] = {"capacity": Capacity}
_AIRFLOW_RESOURCES = frozenset({"cpus", "ram", "disk", "gpus"})


def _refuse_kubernetes_resources(resources: Any) -> None:
    """Kubernetes limits passed as Airflow's ``resources`` would fail deep in Airflow: say where they go."""
    if isinstance(resources, Mapping) and not set(resources) <= _AIRFLOW_RESOURCES:
        foreign = sorted(set(map(str, resources)) - _AIRFLOW_RESOURCES)
        raise ValueError(
            f"resources is Airflow's own (cpus, ram, disk, gpus), not the container's: got {', '.join(foreign)}; "
            "pass the container's limits as container_resources={...}"
        )


class JobSetOperator(JobSetTaskOperator):
    """Run one container to completion as a JobSet.

    :param name: base of the JobSet name (DNS-1123). Templated.
    :param image: container image (``local`` runtime: ignored, the command runs on this machine).
    :param command: the container's command (argv list, never a shell string). Templated.
    :param args: its arguments. Templated. :param env: environment variables. Templated.
    :param runtime: ``"gke"`` or ``"local"``. :param namespace: Kubernetes namespace.
    :param stage: the stage label (``evaluate``, ``synthesize``, ...).
    :param backoff_limit: pod retries of the Job. :param active_deadline_seconds: Job deadline.
    :param container_resources: the container's resource limits, e.g. ``{"cpu": "4", "memory": "16Gi"}`` or
        ``{"google.com/tpu": "4"}``. (``resources`` stays Airflow's own: ``cpus``, ``ram``, ``disk``, ``gpus``.)
    :param service_account: the pod's service account.
    :param kubernetes_conn_id: the cncf-kubernetes connection.
    :param keep_jobset_on_kill: leave the JobSet when the task is killed.
    :param deferrable: wait in the triggerer, holding no worker slot (the default), or block a worker.
    :param poll_interval: seconds between the trigger's timer checks.
    :param alerts: Airflow notifiers (as the elastic operator's ``alerts``: one notifier, a list, or an
        :class:`~operators.alerts.Alerts` with its ``queued_after``), told of a Kueue preemption, a wait for
        admission past ``queued_after`` and a budget spent (``queue_timeout``, ``execution_timeout``): the task
        fails (docs/operations.md, "Alerts"). A notifier's error is logged, never the stage's.
    :param capacity: the Kueue queue (:class:`~operators.options.Capacity`, as the elastic operator's):
        ``queue_name`` (the ``kueue.x-k8s.io/queue-name`` label; ``None``: none), ``workload_priority_class`` (the
        ``kueue.x-k8s.io/priority-class`` label) and ``queue_timeout``: how long one wait for Kueue's admission may
        last (queued, or preempted and requeued), then the JobSet is deleted and the task fails, saying how long it
        waited and why (``None``: no bound). A preemption suspends the JobSet (its pod stops) and the stage runs
        again once admitted: it is waited out. Its ``priority_class`` is refused: a plain JobSet sets none. The flat
        ``queue_name=``, ``workload_priority_class=``, ``queue_timeout=`` still work for one release, with an
        :class:`~operators.options.ElasticTrainingDeprecationWarning`.

    Returns ``{"jobset_name", "namespace", "stage", "seconds", "resume_seconds"}``: ``seconds`` from the task's
    start to the JobSet's end as Kubernetes stamps it (its ``Completed`` condition), ``resume_seconds`` from then
    to the task's return (the trigger firing, the scheduler and a worker resuming the deferred task, and any retry
    of the task in between; ``None`` when the JobSet's end is not known).
    """

    template_fields: Sequence[str] = ("name", "image", "command", "args", "env", "namespace")
    ui_color = "#e8f6f3"

    def __init__(
        self,
        *,
        name: str,
        image: str,
        command: Sequence[str],
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        runtime: str = "gke",
        namespace: str = "default",
        stage: str = "job",
        backoff_limit: int = 0,
        active_deadline_seconds: int | None = None,
        container_resources: Mapping[str, str] | None = None,
        service_account: str | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        keep_jobset_on_kill: bool = False,
        deferrable: bool = True,
        poll_interval: float = 10.0,
        capacity: Capacity | None = None,
        alerts: Any = None,
        **kwargs: Any,
    ) -> None:
        _refuse_kubernetes_resources(kwargs.get("resources"))
        owner = type(self).__name__
        grouped_capacity = grouped(owner, {"capacity": capacity}, kwargs, groups=_GROUPS, stacklevel=4)["capacity"]
        super().__init__(**kwargs)
        check_runtime(runtime)
        for argv in (command, args):
            if isinstance(argv, str | bytes) or not isinstance(argv, Sequence):
                raise ValueError("command and args must be lists of arguments, not a shell string")
        self.name = name
        self.image = image
        self.command = list(command)
        self.args = list(args)
        self.env = dict(env or {})
        self.runtime = runtime
        self.namespace = namespace
        self.stage = stage
        self.backoff_limit = backoff_limit
        self.active_deadline_seconds = active_deadline_seconds
        self.container_resources = dict(container_resources) if container_resources else None
        self.service_account = service_account
        self.kubernetes_conn_id = kubernetes_conn_id
        self.keep_jobset_on_kill = keep_jobset_on_kill
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.alerts = alerting.Alerts.of(alerts)
        if grouped_capacity is not None and not isinstance(grouped_capacity, Capacity):
            raise TypeError(f"{owner}: capacity must be a Capacity, got {shown(grouped_capacity)}")
        self.capacity = grouped_capacity or Capacity()
        if self.capacity.priority_class is not None:
            raise ValueError(f"{owner}: Capacity.priority_class is not supported: a plain JobSet sets no PriorityClass")
        if self.capacity.kueue_pods_ready_seconds != (None, None):
            raise ValueError(
                f"{owner}: Capacity.kueue_pods_ready_timeout and kueue_recovery_timeout are the elastic operator's "
                "(its launch warnings and report); a plain JobSet takes neither"
            )
        self._active: Handle | None = None

    def build_job(self) -> JobSpec:
        """The rendered job, linted; ``AirflowFailException`` naming the field when it is wrong."""
        return self._linted("job", self._job)

    def _job(self) -> JobSpec:
        if not isinstance(self.name, str) or not self.name.strip():
            raise SpecError("name", f"must be a non-empty string, got {shown(self.name)}")
        for field in ("command", "args"):
            if not isinstance(getattr(self, field), list | tuple):
                raise SpecError(field, f"must be a list of arguments, got {shown(getattr(self, field))}")
        if not isinstance(self.env, Mapping):
            raise SpecError("env", f"must be a mapping of names to values, got {shown(self.env)}")
        job = JobSpec(
            image=self.image,
            command=[_argv_item(c) for c in self.command],
            args=[_argv_item(a) for a in self.args],
            env={k: _argv_item(v) for k, v in self.env.items()},
            runtime=self.runtime,  # type: ignore[arg-type]
            backoff_limit=self.backoff_limit,
            active_deadline_seconds=self.active_deadline_seconds,
            resources=self.container_resources,
            service_account=self.service_account,
            queue_name=self.capacity.queue_name,
            workload_priority_class=self.capacity.workload_priority_class,
        )
        lint_job(job)
        return job

    def _name(self, context: Context) -> str:
        return kube_names.TaskIdentity.of(context["ti"]).jobset_name(attempt=0, prefix=str(self.name))

    def _current(self, context: Context) -> Handle | None:
        found = self._cluster(context).get(self._name(context))
        return None if found is None else Handle(found["metadata"]["name"], found["metadata"].get("uid"))

    def execute(self, context: Context) -> Any:
        job = self.build_job()
        placeholder = manifests.plain_jobset(job, name="image-check", namespace=self.namespace, labels={}, stage="job")
        enforce_allowed_images(placeholder)
        cluster = self._cluster(context)
        name = self._name(context)
        existing = cluster.get(name)
        if existing is not None:
            cluster.refuse_foreign(existing)
            existing = cluster.adoptable(existing)
            if existing is not None:
                self.log.info("adopting JobSet %s", name)
        if existing is None:
            body = manifests.plain_jobset(
                job, name=name, namespace=self.namespace, labels=cluster.identity, stage=self.stage
            )
            existing = cluster.create(body)
        uid = str(existing["metadata"].get("uid"))
        self._active = Handle(name, uid)
        context["ti"].xcom_push(key="jobset_name", value=name)
        context["ti"].xcom_push(key="namespace", value=self.namespace)
        return self._wait(context, self._active, MonitorState(jobset_uid=uid, started_at=time.time()))

    def _wait(self, context: Context, handle: Handle, state: MonitorState) -> Any:
        budgets = replace(_NO_BUDGETS, queue_timeout_seconds=self.capacity.queue_timeout_seconds)
        news = None if self.alerts is None else self.alerts.trigger_kwargs(_seen(context, handle.uid))
        return self._watch(context, handle, target_step=0, budgets=budgets, state=state.to_json(), alerts=news)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Succeed when the JobSet completed; fail with its reason and log tail otherwise."""
        state = MonitorState.from_json(event.get("state"))
        name = str(event.get("name"))
        self._active = Handle(name, state.jobset_uid)
        now = time.time()
        # Until the JobSet ended as Kubernetes stamps it: Airflow's resume of the task after that holds no capacity.
        end = holding_end(now, state.ended_at, state.started_at or None)
        seconds = round((end or now) - state.started_at, 3) if state.started_at else None
        if self.alerts is not None:
            seen = alerting.tell_news(self.alerts, context, state, _seen(context, state.jobset_uid), self.log)
            _save_seen(context, seen)
        if event.get("status") == EventStatus.NOTICE:  # told above; the stage goes on
            return self._wait(context, self._active, state)
        if event.get("status") == EventStatus.DEADLINE:
            timed_out = self._timed_out_message(context, self._active)
            self._alert_budget(context, "execution_timeout", "deadline", timed_out)
            raise AirflowException(timed_out)
        if event.get("status") == EventStatus.ERROR:
            why = f"watching JobSet {name} failed: {event.get('message')}"
            raise AirflowException(self._abandoned_message(context, self._active, why))
        if state.phase is JobSetPhase.COMPLETED:
            resumed = None if end is None else round(now - end, 3)
            return {
                "jobset_name": name,
                "namespace": self.namespace,
                "stage": self.stage,
                "seconds": seconds,
                "resume_seconds": resumed,
            }
        if state.phase is JobSetPhase.MISSING:
            raise AirflowFailException(f"JobSet {name} was deleted outside this task")
        if event.get("status") == EventStatus.DECISION and state.phase is JobSetPhase.SUSPENDED:
            # Kueue will not admit it (queue_timeout, deactivated, never fits its ClusterQueue, ...): nothing left.
            deleted = self._cluster(context).delete(self._active)
            self._active = None
            verb = "deleted" if deleted else "already gone"
            message = f"JobSet {name} {verb}: {event.get('message')}"
            if event.get("reason") == Reason.QUEUE_TIMEOUT:
                self._alert_budget(context, "queue_timeout", Reason.QUEUE_TIMEOUT.value, message)
            raise AirflowFailException(message)
        if state.phase is JobSetPhase.ACTIVE:
            raise AirflowException(f"JobSet {name}: {event.get('message')}")
        tail = self._cluster(context).log_tail(f"{LABEL_JOBSET_NAME}={name}")
        raise AirflowFailException(f"JobSet {name} failed: {state.failure_detail or 'no reason given'}{tail}")

    def _alert_budget(self, context: Context, budget: str, reason: str, message: str) -> None:
        """A budget of the stage spent (it has no full restarts: none used, none allowed)."""
        alert = alerting.budget_spent(budget, message, reason=reason, full_restarts_used=0, allowed=0)
        alerting.send(self.alerts, context, alert, self.log)


# What the alerts told about the stage's JobSet (operators.alerts.Seen's JSON), in the task state store: a resumed
# or retried try that adopts the same JobSet does not tell it again.
ALERTED_KEY = "jobset_alerted"


def _seen(context: Context, uid: str | None) -> alerting.Seen:
    store = context.get("task_state_store")
    return alerting.Seen.from_json(store.get(ALERTED_KEY) if store is not None else None, jobset_uid=uid)


def _save_seen(context: Context, seen: alerting.Seen) -> None:
    store = context.get("task_state_store")
    if store is not None:
        store.set(ALERTED_KEY, seen.to_json())
