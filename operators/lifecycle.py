"""One JobSet lifecycle for both operators: find or adopt, create, wait out deletions, defer, delete, report.

`ElasticJobSetOperator` and `JobSetOperator` both run a JobSet through :class:`JobSetTaskOperator`; the elastic
operator adds its budgets and escalation on top. What each step follows upstream:

- Adoption follows the cncf-kubernetes provider's ``KubernetesPodOperator.find_pod`` / ``get_or_create_pod``
  (apache/airflow ``providers/cncf/kubernetes/src/airflow/providers/cncf/kubernetes/operators/pod.py``): an
  object of this task that is still running is reused; one that ended in failure is never re-attached (the
  provider deletes a terminated pod and makes a new one), so a cleared task runs its new spec. A JobSet being
  deleted is waited out before its name is taken again (a foreground delete keeps it until its Jobs are gone).
- Deletes are foreground (``KubernetesJobOperator.on_kill``'s ``on_kill_propagation_policy="Foreground"``,
  ``operators/job.py``) and carry a ``preconditions.uid``, so a newer JobSet of the same name is never hit.
- ``execution_timeout`` follows the provider's ``KubernetesPodOperator.invoke_defer_method`` (provider 10.25.0):
  Airflow 3.3 does not time a deferred task out by itself (the task runner's ``_execute_task`` applies
  ``execution_timeout`` to one stint in a worker only, "TODO: handle timeout in case of deferral",
  ``task-sdk/src/airflow/sdk/execution_time/task_runner.py``), so the deadline ``ti.start_date +
  execution_timeout`` goes to the trigger, which yields a ``deadline`` event; the deferral's own ``timeout`` is
  padded past it as a backstop. When that backstop fires, Airflow resumes the task with ``next_method="__fail__"``
  and no ``on_kill`` (``BaseOperator.resume_execution``, ``task-sdk/src/airflow/sdk/bases/operator.py``):
  :meth:`JobSetTaskOperator.resume_execution` deletes the JobSet before failing, so a timeout never orphans it.
- A user kill of a deferred task reaches ``JobSetTrigger.on_kill`` (Airflow 3.3's ``BaseTrigger.on_kill``,
  apache/airflow PR #65741); a kill in a worker reaches ``on_kill`` here, whose handle is set before any wait.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, cast

from airflow.sdk import BaseOperator
from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from elastic_training.operators import kube_names
from elastic_training.operators.backoff import Backoff
from elastic_training.operators.constants import LABEL_JOBSET_UID
from elastic_training.operators.observations import jobset_phase
from elastic_training.operators.options import OptionGroup
from elastic_training.operators.policy import Budgets, JobSetPhase
from elastic_training.operators.spec import SpecError

if TYPE_CHECKING:
    from airflow.sdk import Context

    from elastic_training.operators.hooks import JobSetHook
    from elastic_training.operators.triggers import JobSetTrigger

# Creates of one name that may meet a JobSet of this task being deleted before giving up.
CREATE_ATTEMPTS = 3
DELETE_TIMEOUT_SECONDS = 600.0
# How long an escalation waits for the garbage collector to mark the old JobSet's Jobs deleting before it shortens
# their pods' grace period (moments, on a healthy control plane).
JOBS_DELETING_SECONDS = 30.0
# The deferral's own timeout is padded past the trigger's deadline by this much (at least), as the provider does,
# so Airflow's backstop does not pre-empt the trigger's deadline event.
DEFER_TIMEOUT_PADDING_SECONDS = 60.0
T = TypeVar("T")


class ObjectMeta(TypedDict, total=False):
    """The ``metadata`` of a Kubernetes object, as far as these paths read it."""

    name: str
    namespace: str
    uid: str
    resourceVersion: str
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]


class Condition(TypedDict, total=False):
    type: str
    status: str
    reason: str
    message: str


class JobSetStatus(TypedDict, total=False):
    terminalState: str
    restarts: int
    restartsCountTowardsMax: int
    conditions: list[Condition]


class JobSet(TypedDict, total=False):
    """A ``jobset.x-k8s.io/v1alpha2`` JobSet as the API returns it (camelCase JSON)."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: dict[str, Any]
    status: JobSetStatus


def as_jobset(obj: Mapping[str, Any]) -> JobSet:
    """A JobSet dict from the hook, typed."""
    return cast(JobSet, obj)


@dataclass(frozen=True)
class Handle:
    """One JobSet incarnation: its name and uid (the uid makes every delete conditional)."""

    name: str
    uid: str | None


class JobSetLifecycle:
    """The cluster side of one task's JobSets: find, adopt, create, delete, wait, read the log tail."""

    def __init__(self, hook: JobSetHook, *, namespace: str, identity: Mapping[str, str], log: Any) -> None:
        self.hook = hook
        self.namespace = namespace
        self.identity = dict(identity)
        self.log = log

    def transient(self, what: str, call: Callable[[], T]) -> T:
        """``call()``, riding out a burst of 429/5xx answers (see `ride_out_transient`)."""
        from elastic_training.operators.hooks import ride_out_transient

        return ride_out_transient(call, what=what, log=self.log)

    def get(self, name: str) -> JobSet | None:
        found = self.transient("finding this task's JobSet", lambda: self.hook.get_jobset(name, self.namespace))
        return None if found is None else as_jobset(found)

    def mine(self) -> list[JobSet]:
        """This task's JobSets, by its identity labels."""
        selector = kube_names.label_selector(self.identity)
        listed = self.transient("finding this task's JobSet", lambda: self.hook.list_jobsets(self.namespace, selector))
        return [as_jobset(js) for js in listed]

    def refuse_foreign(self, jobset: JobSet) -> None:
        """`AirflowFailException` when ``jobset`` was not made by this task (its identity labels differ)."""
        theirs = jobset["metadata"].get("labels") or {}
        if any(theirs.get(k) != v for k, v in self.identity.items()):
            raise AirflowFailException(
                f"a JobSet named {jobset['metadata'].get('name')} already exists in {self.namespace} "
                "and was not made by this task"
            )

    def adoptable(self, jobset: JobSet) -> JobSet | None:
        """``jobset`` when a new try may adopt it; ``None`` once it is gone and its name free.

        A JobSet being deleted (a kill's cleanup, an escalation cleared with its task) is waited out. One
        that failed ended an earlier try: it is deleted and waited out too, never re-adopted, so a cleared
        task runs its new spec (the provider replaces a terminated pod the same way).
        """
        metadata = jobset["metadata"]
        name, uid = str(metadata.get("name")), metadata.get("uid")
        if metadata.get("deletionTimestamp"):
            self.log.info("JobSet %s is being deleted: waiting until it is gone before creating it again", name)
        elif jobset_phase(cast(dict[str, Any], jobset))[0] is JobSetPhase.FAILED:
            self.log.info("JobSet %s failed in an earlier try: deleting it, then running a new one", name)
            self.delete(Handle(name, uid))
        else:
            return jobset
        self.hook.require_jobset_gone(name, self.namespace, uid=uid, timeout=DELETE_TIMEOUT_SECONDS)
        return None

    def create(self, body: dict[str, Any]) -> JobSet:
        """Create ``body``; a 409 is this task's own JobSet (adopted, or waited out when it is going) or refused."""
        from kubernetes.client.rest import ApiException

        name = str(body["metadata"]["name"])
        for _ in range(CREATE_ATTEMPTS):
            try:
                created = self.transient("creating JobSet", lambda: self.hook.create_jobset(body, self.namespace))
                self.log.info("created JobSet %s (uid %s) in %s", name, created["metadata"].get("uid"), self.namespace)
                return as_jobset(created)
            except ApiException as error:
                if error.status != 409:
                    raise AirflowException(
                        f"creating JobSet {name} failed: HTTP {error.status}: {error.reason}"
                    ) from None
            # The name was taken after the adoption looked: by this task's own JobSet (a retry whose create
            # landed), by one of its own going away (waited out), or by a foreign one (refused).
            found = self.get(name)
            if found is not None:
                self.refuse_foreign(found)
                if adopted := self.adoptable(found):
                    return adopted
        raise AirflowException(f"creating JobSet {name}: its name was taken again {CREATE_ATTEMPTS} times")

    def delete(self, handle: Handle) -> bool:
        """Delete the incarnation in the foreground (conditional on its uid); ``False`` when it was gone."""
        return self.transient(
            "deleting JobSet", lambda: self.hook.delete_jobset(handle.name, self.namespace, uid=handle.uid)
        )

    def retire(self, handle: Handle, *, pod_grace_seconds: int | None = None) -> None:
        """Delete the incarnation and wait until it is gone (its name is free, its pods stopped).

        With ``pod_grace_seconds`` its pods are stopped with that grace period instead of their own (a hung trainer
        would hold its slices for its whole ``terminationGracePeriodSeconds``).
        """
        self.delete(handle)
        if pod_grace_seconds is not None and handle.uid:
            self._shorten_pod_grace(handle, pod_grace_seconds)
        self.hook.require_jobset_gone(handle.name, self.namespace, uid=handle.uid, timeout=DELETE_TIMEOUT_SECONDS)

    def _shorten_pod_grace(self, handle: Handle, grace: int) -> None:
        """Delete the incarnation's pods with ``grace``, once its Jobs are being deleted.

        Not before: a Job not yet deleting replaces a deleted pod, and the replacement would start a trainer
        beside the next incarnation's. The Job controller creates no pod for a Job being deleted (``syncJob``
        calls ``manageJob`` only while ``job.DeletionTimestamp == nil``, kubernetes
        ``pkg/controller/job/job_controller.go``), and the garbage collector marks them within moments of the
        JobSet's foreground delete. Best effort: when they are not marked in time, or the role may not delete
        pods, the pods keep their own grace and the retirement goes on.
        """
        selector = f"{LABEL_JOBSET_UID}={handle.uid}"
        deadline = time.monotonic() + JOBS_DELETING_SECONDS
        backoff = Backoff(base=0.1, cap=2.0)
        while True:
            jobs = self.transient("reading the JobSet's Jobs", lambda: self.hook.list_jobs(self.namespace, selector))
            if all((j.get("metadata") or {}).get("deletionTimestamp") for j in jobs):
                break
            if time.monotonic() >= deadline:
                self.log.warning(
                    "the Jobs of JobSet %s were not being deleted after %.0f s: its pods keep their own grace period",
                    handle.name,
                    JOBS_DELETING_SECONDS,
                )
                return
            time.sleep(backoff.next_delay())
        pods = self.transient("reading the JobSet's pods", lambda: self.hook.list_pods(self.namespace, selector))
        stopped = 0
        for pod in pods:
            meta = pod.get("metadata") or {}
            name, uid = str(meta.get("name")), str(meta.get("uid"))
            asked = self.transient(
                "stopping the JobSet's pods",
                functools.partial(self.hook.delete_pod, name, self.namespace, uid=uid, grace_period_seconds=grace),
            )
            if asked is None:
                self.log.warning(
                    "not allowed to delete pods in %s (a Role from before delete on pods was granted: re-apply "
                    "deploy/rbac.yaml): the pods of JobSet %s keep their own grace period",
                    self.namespace,
                    handle.name,
                )
                return
            stopped += asked
        self.log.info("stopping the %d pods of JobSet %s with a %d s grace period", stopped, handle.name, grace)

    def log_tail(self, selector: str, container: str | None = None, *, lines: int = 15) -> str:
        """The newest matching pod's last log lines, as a message suffix ('' when there are none)."""
        try:
            pods = self.hook.list_pods(self.namespace, selector)
            if not pods:
                return ""
            newest = max(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "")
            name = container or newest["spec"]["containers"][0]["name"]
            tail = self.hook.read_log_tail(newest["metadata"]["name"], self.namespace, name, tail_lines=lines)
        except Exception:  # the failure message is what matters; the log tail is a courtesy
            return ""
        return f"\nlast lines of its log:\n{tail}" if tail.strip() else ""


async def first_event(trigger: JobSetTrigger) -> dict[str, Any]:
    """The trigger's first event (the blocking, non-deferrable wait)."""
    async for event in trigger.run():
        payload: dict[str, Any] = event.payload
        return payload
    raise AirflowException("the JobSet trigger ended without an event")


def task_identity(context: Context) -> dict[str, str]:
    """The task instance's identity labels."""
    return kube_names.TaskIdentity.of(context["ti"]).labels()


class JobSetTaskOperator(BaseOperator):
    """What both JobSet operators share: the lifecycle's Airflow side (defer, deadline, kill, trigger failure).

    A subclass sets ``namespace``, ``kubernetes_conn_id``, ``keep_jobset_on_kill``, ``deferrable`` and
    ``poll_interval``, sets ``_active`` as soon as it knows its JobSet, and implements `_current` (the
    incarnation a resumed task is about).
    """

    namespace: str
    kubernetes_conn_id: str
    keep_jobset_on_kill: bool
    deferrable: bool
    poll_interval: float
    _active: Handle | None = None

    def render_template(
        self, content: Any, context: Any, jinja_env: Any = None, seen_oids: set[int] | None = None
    ) -> Any:
        """Airflow's rendering, and an option group (:mod:`operators.options`) rendered into a new, frozen one.

        Airflow renders an object that is not text or a collection in place, through its ``template_fields`` and
        ``setattr`` (the Task SDK's ``Templater._render_nested_template_fields``), which a frozen group refuses;
        every template field, a mapped task's too, is rendered through this method.
        """
        if isinstance(content, OptionGroup):
            return content.rendered(
                lambda value: super(JobSetTaskOperator, self).render_template(value, context, jinja_env, seen_oids)
            )
        return super().render_template(content, context, jinja_env, seen_oids)

    def _hook(self) -> JobSetHook:
        # Imported here, not at the top: the Kubernetes clients are most of a DAG file's import (4.2 of its 4.7
        # CPU seconds), paid at every parse and by every task of the DAG, the ones that never call a cluster too.
        from elastic_training.operators.hooks import JobSetHook

        return JobSetHook(conn_id=self.kubernetes_conn_id)

    def _cluster(self, context: Context) -> JobSetLifecycle:
        return JobSetLifecycle(self._hook(), namespace=self.namespace, identity=task_identity(context), log=self.log)

    def _current(self, context: Context) -> Handle | None:
        """The incarnation this task instance watches now (from its state, or found on the cluster)."""
        raise NotImplementedError

    def _linted(self, what: str, build: Callable[[], T]) -> T:
        """``build()`` (which lints), with the namespace checked; `AirflowFailException` naming the field."""
        try:
            built = build()
            kube_names.check_namespace(self.namespace)
        except SpecError as error:
            raise AirflowFailException(f"invalid {what}: {error}") from None
        return built

    # -- waiting ----------------------------------------------------------------------------------

    def _watch(
        self,
        context: Context,
        handle: Handle,
        *,
        target_step: int,
        budgets: Budgets,
        state: dict[str, Any],
        full_restarts_used: int = 0,
        relax_after_seconds: float | None = None,
        relax_not_before: float = 0.0,
        alerts: Mapping[str, Any] | None = None,
        replan: Mapping[str, Any] | None = None,
    ) -> Any:
        """Watch ``handle`` with a `JobSetTrigger` until the policy wants the task to act (or, with
        ``relax_after_seconds``, a worker pod stays unschedulable that long; with ``alerts``, has news for its
        notifiers; with ``replan``, its slice failures call for a shorter checkpoint period); resume there."""
        from elastic_training.operators.triggers import JobSetTrigger

        trigger = JobSetTrigger(
            name=handle.name,
            namespace=self.namespace,
            uid=handle.uid,
            target_step=target_step,
            budgets=budgets,
            full_restarts_used=full_restarts_used,
            state=state,
            kubernetes_conn_id=self.kubernetes_conn_id,
            poll_interval=self.poll_interval,
            delete_on_kill=not self.keep_jobset_on_kill,
            relax_after_seconds=relax_after_seconds,
            relax_not_before=relax_not_before,
            alerts=alerts,
            replan=replan,
        )
        return self._defer_or_wait(context, trigger)

    def _deadline(self, context: Context) -> float | None:
        """``ti.start_date + execution_timeout`` as Unix time (the provider's anchor: stable across deferrals)."""
        if self.execution_timeout is None:
            return None
        start = getattr(context["ti"], "start_date", None)
        began = start.timestamp() if start is not None else time.time()
        return began + self.execution_timeout.total_seconds()

    def _defer_or_wait(self, context: Context, trigger: JobSetTrigger, method_name: str = "execute_complete") -> Any:
        """Defer to ``trigger`` (or, not deferrable, run it here) and resume in ``method_name``."""
        trigger.deadline = self._deadline(context)
        if self.deferrable:
            from elastic_training.operators.triggers import defer_settle_seconds

            trigger.settle_seconds = defer_settle_seconds()
            timeout = None
            if trigger.deadline is not None:
                padding = max(DEFER_TIMEOUT_PADDING_SECONDS, 2 * self.poll_interval)
                timeout = timedelta(seconds=max(0.0, trigger.deadline - time.time()) + padding)
            self.defer(trigger=trigger, method_name=method_name, timeout=timeout)
        event = asyncio.run(first_event(trigger))
        return getattr(self, method_name)(context, event)

    # -- ending ------------------------------------------------------------------------------------

    def _timed_out_message(self, context: Context, handle: Handle | None) -> str:
        """Delete the JobSet (unless kept) for a reached ``execution_timeout``; the failure message."""
        limit = self.execution_timeout.total_seconds() if self.execution_timeout else 0.0
        head = f"execution_timeout ({limit:.0f} s) reached"
        if handle is None:
            return f"{head}; no JobSet of this task was found"
        if self.keep_jobset_on_kill:
            return f"{head}; JobSet {handle.name} left running (keep_jobset_on_kill)"
        deleted = self._cluster(context).delete(handle)
        self._active = None
        verb = "deleted (foreground)" if deleted else "already gone"
        return f"{head}: JobSet {handle.name} {verb}"

    def _abandoned_message(self, context: Context, handle: Handle | None, why: str) -> str:
        """The watch failed: keep the JobSet for the retry to adopt, or delete it when no retry will watch it."""
        if handle is None or self.keep_jobset_on_kill:
            return why
        ti = context["ti"]
        try_number, max_tries = int(getattr(ti, "try_number", 1) or 1), int(getattr(ti, "max_tries", 0) or 0)
        if try_number <= max_tries:
            return f"{why}; JobSet {handle.name} left running: the next try adopts it"
        try:
            self._cluster(context).delete(handle)
        except Exception as error:  # the watch already failed; say that the delete did too
            return f"{why}; deleting JobSet {handle.name} failed too ({error}): delete it by hand"
        self._active = None
        return f"{why}; JobSet {handle.name} deleted: no retry is left to watch it"

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Airflow failed the deferral itself (its trigger timeout, a trigger crash): delete, then fail."""
        if next_method != TRIGGER_FAIL_REPR:
            return super().resume_execution(next_method, next_kwargs, context)
        error = (next_kwargs or {}).get("error", "Unknown")
        handle = self._current(context)
        if error == TriggerFailureReason.TRIGGER_TIMEOUT:
            raise AirflowException(self._timed_out_message(context, handle))
        raise AirflowException(self._abandoned_message(context, handle, f"the JobSet trigger failed: {error}"))

    def on_kill(self) -> None:
        """A kill in a worker (or ``execution_timeout`` while it waits there): delete the JobSet unless kept."""
        if self.keep_jobset_on_kill or self._active is None:
            return
        self.log.info("task killed: deleting JobSet %s", self._active.name)
        self._hook().delete_jobset(self._active.name, self.namespace, uid=self._active.uid)
