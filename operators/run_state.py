"""What an elastic run keeps across worker crashes and retries, in the Airflow task state store.

The entry ``elastic_run`` holds the incarnation watched now (JobSet name and uid, its persisted
:class:`~operators.observations.MonitorState`), the full restarts used and this try's share of them, whether an
escalation is half done, and the escalations and closed incarnations the run report is built from. Pure: no
Airflow import at run time, so the plugin reads the same key and shape without the Task SDK.

The store is written whole, last writer wins (Airflow 3.3's ``airflow/state/metastore.py`` upserts the row). Two
tries of one task instance can run at once: a task cleared while it runs gets a new task-instance id at once
(``clear_task_instances``) and the next try may start before the old process's heartbeat stops it. Airflow's
execution API scopes every store call by the caller's id (``execution_api/routes/task_state_store.py``), so the old
try's writes are refused with a 404 and its reads find nothing; :meth:`RunState.save` turns that refusal into
:class:`StateRefused`, which stops the old try before it acts on the cluster again
(tests/operators/test_run_state_concurrency.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from elastic_training.operators.failure_history import SliceFailure
from elastic_training.operators.kube_names import TaskIdentity
from elastic_training.operators.observations import MonitorState
from elastic_training.operators.recovery import PODS_READY_TIMEOUT, Incarnation, LogDigest
from elastic_training.operators.run_history import ANNOTATION_RUN_HISTORY, parse_run_history, render_run_history

if TYPE_CHECKING:
    from airflow.sdk import Context

STATE_KEY = "elastic_run"
NOT_FOUND = 404


class StateRefused(RuntimeError):
    """The task state store refused this try's write: its task instance was cleared or retried while it ran."""


class RunState:
    """What must survive a worker crash, in the Airflow task state store (key ``elastic_run``)."""

    def __init__(self, data: Mapping[str, Any], *, dag_id: str, task_id: str, run_id: str, map_index: int) -> None:
        self.dag_id, self.task_id, self.run_id, self.map_index = dag_id, task_id, run_id, map_index
        self.jobset_name: str = str(data.get("jobset_name") or "")
        self.jobset_uid: str | None = data.get("jobset_uid")
        self.full_restarts: int = int(data.get("full_restarts") or 0)
        # Full restarts before this try's budget began (a new try after the JobSet ended starts a fresh one).
        self.budget_base: int = int(data.get("budget_base") or 0)
        self.escalating: bool = bool(data.get("escalating"))
        self.started_at: float = float(data.get("started_at") or 0.0)
        self.escalations: list[dict[str, Any]] = list(data.get("escalations") or [])
        self.history: list[dict[str, Any]] = list(data.get("history") or [])
        self.monitor = MonitorState.from_json(data.get("monitor"))
        # the pools avoided and the period chosen before the first launch (kept for every incarnation of this try)
        plan = data.get("plan")
        self.plan: dict[str, Any] | None = dict(plan) if isinstance(plan, Mapping) else None
        # what the alerts told about the incarnation watched now (operators.alerts.Seen's JSON)
        alerted = data.get("alerted")
        self.alerted: dict[str, Any] = dict(alerted) if isinstance(alerted, Mapping) else {}

    @classmethod
    def load(cls, context: Context) -> RunState:
        task = TaskIdentity.of(context["ti"])
        store = context.get("task_state_store")
        data = store.get(STATE_KEY) if store is not None else None
        return cls(
            data if isinstance(data, Mapping) else {},
            dag_id=task.dag_id,
            task_id=task.task_id,
            run_id=task.run_id,
            map_index=task.map_index,
        )

    def save(self, context: Context) -> None:
        store = context.get("task_state_store")
        if store is None:
            return
        try:
            self._set(store)
        except Exception as error:
            if getattr(getattr(error, "response", None), "status_code", None) != NOT_FOUND:
                raise
            raise StateRefused(
                f"the task state store refused {STATE_KEY!r} of {self.dag_id}.{self.task_id} (run {self.run_id}, "
                f"map index {self.map_index}): this try's task instance is gone (cleared or retried while it ran; "
                "HTTP 404), so this try stops here and the next one goes on from the state stored"
            ) from error

    def _set(self, store: Any) -> None:
        store.set(
            STATE_KEY,
            cast(
                Any,
                {
                    "jobset_name": self.jobset_name,
                    "jobset_uid": self.jobset_uid,
                    "full_restarts": self.full_restarts,
                    "budget_base": self.budget_base,
                    "escalating": self.escalating,
                    "started_at": self.started_at,
                    "escalations": self.escalations,
                    "history": self.history,
                    "monitor": self.monitor.to_json(),
                    "plan": self.plan,
                    "alerted": self.alerted,
                },
            ),
        )

    @property
    def budget_used(self) -> int:
        """Full restarts counted against ``max_full_restarts`` in this try."""
        return max(0, self.full_restarts - self.budget_base)

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

    def closed_pods_ready_evictions(self) -> int:
        """Kueue's evictions for a PodsReady timeout in the closed incarnations (max_pods_ready_evictions spans the
        run)."""
        return sum(i.digest.evictions(PODS_READY_TIMEOUT) for i in self.incarnations())

    def slice_failures(self) -> list[SliceFailure]:
        """Every incarnation's slice failures (pool, hosts, kind), oldest first."""
        found = [SliceFailure.from_json(f) for h in self.history for f in h.get("slice_failures") or []]
        return sorted([*found, *self.monitor.slice_failures(self.jobset_name)], key=lambda f: f.at)

    def node_pools(self) -> list[str]:
        """The node pools every incarnation's slices ran on."""
        pools = {str(p) for h in self.history for p in h.get("node_pools") or []}
        return sorted(pools | set(self.monitor.node_pools()))

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
                "slice_failures": [f.to_json() for f in self.monitor.slice_failures(current.jobset_name)],
                "node_pools": self.monitor.node_pools(),
            }
        )
        self.monitor = MonitorState()
