"""The option groups of `ElasticJobSetOperator`: what to train, its scale, its budgets, its capacity, its history.

A DAG author reads five small values instead of some forty keyword arguments, in the spirit of astronomer-cosmos's
config objects (``ProjectConfig``, ``ProfileConfig``, ``ExecutionConfig``: cosmos/config.py) and of JobSet's own
API, which groups a JobSet's options by concern (``failurePolicy``, ``successPolicy``, ``startupPolicy``:
kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go). Each group is frozen and checks its own fields once,
in ``__post_init__``, with errors that name them (``Budgets.max_slice_restarts must be ≥ 0, got -1``):

- :class:`Training`: what runs (run directory, steps, checkpoint period, MaxText arguments, images, environment);
- :class:`Scale`: how many slices of which TPU, and how many the run may lose;
- :class:`Budgets`: the restart budgets and the timeouts that spend them;
- :class:`Capacity`: the Kueue queue and priorities, and how long a wait for admission may last;
- :class:`History`: learning from earlier runs (node pools to avoid, the failure history's Variable).

The fields of :class:`Training` and :class:`Scale` are the run spec's (:class:`operators.spec.ElasticRunSpec`):
most are templated, so their values are checked by the spec's lint when the task starts, after rendering (one owner,
which the nightly form asks too), still naming the field. The groups check what is theirs alone.

Templating: Airflow renders an operator's ``template_fields``; a value that is not text or a collection is rendered
through *its* ``template_fields`` with ``setattr`` (the Task SDK's ``Templater._render_nested_template_fields``,
apache/airflow task-sdk/src/airflow/sdk/definitions/_internal/templater.py), which a frozen dataclass refuses. So a
group names its templated fields in ``TEMPLATED`` (not ``template_fields``), and the operator's ``render_template``
(the method Airflow calls for every template field, mapped tasks included) returns :meth:`OptionGroup.rendered`: a
new group of the rendered values. Pure: no Airflow import.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar, Final, Self

from elastic_training.operators import policy
from elastic_training.operators.advice import AUTO_PERIOD
from elastic_training.operators.failure_history import DEFAULT_RUNS, MAX_RUNS
from elastic_training.operators.kube_names import MAX_ATTEMPT
from elastic_training.operators.pool_avoidance import DEFAULT_THRESHOLD
from elastic_training.operators.shown import shown
from elastic_training.operators.spec import (
    DEFAULT_ELASTIC_TIMEOUT_SECONDS,
    DEFAULT_HEAD_NODE_POOL,
    INT32_MAX,
    PATHWAYS_PROXY_IMAGE,
    PATHWAYS_SERVER_IMAGE,
    ElasticRunSpec,
    Runtime,
    SpecError,
)

Duration = timedelta | float | int
"""A duration: a `timedelta`, or seconds."""

MAX_FAILURE_HISTORY_KEY: Final = 250
DEFAULT_MAX_PODS_READY_EVICTIONS: Final = 3


class ElasticTrainingDeprecationWarning(DeprecationWarning):
    """A spelling of this library that goes in its next release; the message says the new one."""


def _count(name: str, value: Any, maximum: int = INT32_MAX) -> None:
    """An integer from 0 to ``maximum`` (`TypeError`/`ValueError` naming the field)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, got {shown(value)}")
    if value < 0:
        raise ValueError(f"{name} must be ≥ 0, got {shown(value)}")
    if value > maximum:
        raise ValueError(f"{name} must be ≤ {maximum}, got {shown(value)}")


def seconds(name: str, value: Any, *, positive: bool = True) -> float:
    """A duration (a `timedelta`, or seconds) in seconds: finite, and positive or non-negative; else an error naming
    the field (`TypeError` for what is not a duration, `ValueError` for one out of range)."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a timedelta or a number of seconds, got {shown(value)}")
    number = float(value) if not isinstance(value, int) or abs(value) < 2**53 else math.inf
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        kind = "positive" if positive else "non-negative"
        raise ValueError(f"{name} must be a {kind} finite duration, got {shown(value)}")
    return number


def _optional_text(name: str, value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name} must be text or None, got {shown(value)}")


class OptionGroup:
    """What the groups share: the fields Airflow renders (``TEMPLATED``) and a rendered copy."""

    TEMPLATED: ClassVar[tuple[str, ...]] = ()

    def rendered(self, render: Callable[[Any], Any]) -> Self:
        """A copy with each ``TEMPLATED`` field's value passed through ``render`` (the operator's Jinja)."""
        if not self.TEMPLATED:
            return self
        values = {name: render(getattr(self, name)) for name in self.TEMPLATED}
        return dataclasses.replace(self, **values)  # type: ignore[type-var]


@dataclass(frozen=True, kw_only=True)
class Training(OptionGroup):
    """What to train, and with which containers.

    :param run_name: MaxText's ``run_name`` (DNS-1123); the run directory is ``<base_output_directory>/<run_name>``.
    :param base_output_directory: ``gs://bucket/prefix`` or an absolute local path.
    :param steps: training steps (MaxText counts from 0: success needs a committed step ``steps - 1``).
    :param checkpoint_period: steps between checkpoints, well under ``steps``; ``"auto"``: chosen before launch from
        the failure history (docs/operators.md, "Learning from earlier runs").
    :param maxtext_args: further MaxText keys, e.g. ``{"model_name": "llama2-7b"}``.
    :param image: the MaxText image (``gke``).
    :param pathways_server_image: :param pathways_proxy_image: the Pathways images, pinned by tag.
    :param image_pull_policy: the containers' ``imagePullPolicy`` (``None``: Kubernetes' default).
    :param trainer_env: :param worker_env: more environment for the trainer (``jax-tpu``) and the workers.
    :param local_env: more trainer environment merged over ``trainer_env``, rendered the same on both runtimes (the
        tests put the local stand-ins' fault knobs here).

    Templated: ``run_name``, ``base_output_directory``, ``steps``, ``checkpoint_period``, ``maxtext_args``,
    ``image``. Every field is a run spec field, checked by the spec's lint when the task starts (after rendering).
    """

    TEMPLATED: ClassVar[tuple[str, ...]] = (
        "run_name",
        "base_output_directory",
        "steps",
        "checkpoint_period",
        "maxtext_args",
        "image",
    )

    run_name: str
    base_output_directory: str
    steps: int | str
    checkpoint_period: int | str
    maxtext_args: Mapping[str, Any] = field(default_factory=dict)
    image: str | None = None
    pathways_server_image: str = PATHWAYS_SERVER_IMAGE
    pathways_proxy_image: str = PATHWAYS_PROXY_IMAGE
    image_pull_policy: str | None = None
    trainer_env: Mapping[str, str] | None = None
    worker_env: Mapping[str, str] | None = None
    local_env: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        # merged into trainer_env before the lint sees it: a non-mapping would be lost in the merge
        if self.local_env is not None and not isinstance(self.local_env, Mapping):
            raise TypeError(f"Training.local_env must be a mapping of names to values, got {shown(self.local_env)}")

    def merged_trainer_env(self) -> Any:
        """``trainer_env`` (copied) with ``local_env`` over it; anything but a mapping is left for the lint to name."""
        more = dict(self.local_env or {})
        if isinstance(self.trainer_env, Mapping):
            return {**self.trainer_env, **more}
        return self.trainer_env or more


@dataclass(frozen=True, kw_only=True)
class Scale(OptionGroup):
    """How many TPU slices, of which type, placed where, and how many the run may lose.

    :param num_slices: TPU slices (the worker replicas).
    :param tpu_type: e.g. ``v5p``. :param tpu_topology: e.g. ``2x2x2`` (its hosts are the slice's worker pods).
    :param elastic_min_slice_count: MaxText's ``elastic_min_slice_count``: train on at least this many slices while
        the others are replaced (-1, the default: wait for every slice).
    :param elastic_slices: the slices the run may lose (the proxy's ``--num_elastic_slices``, xpk's
        ``--elastic-slices``); default 1, or ``num_slices - elastic_min_slice_count`` when that is set.
    :param head_node_pool: the node pool of the Pathways head (a CPU pool on GKE).

    Templated: ``num_slices``, ``tpu_type``, ``tpu_topology``. Checked by the spec's lint, as :class:`Training`.
    """

    TEMPLATED: ClassVar[tuple[str, ...]] = ("num_slices", "tpu_type", "tpu_topology")

    num_slices: int | str
    tpu_type: str | None = None
    tpu_topology: str | None = None
    elastic_min_slice_count: int = -1
    elastic_slices: int | None = None
    head_node_pool: str = DEFAULT_HEAD_NODE_POOL


@dataclass(frozen=True, kw_only=True)
class Budgets(OptionGroup):
    """How much failure a run may take, and how long each wait may last, before it escalates or fails.

    Four layers, cheapest first (docs/operators.md, "Budgets"): MaxText's in-process retries
    (``elastic_max_retries``), slice restarts (``max_slice_restarts`` in ``slice_restart_window``), the JobSet's own
    restarts (``jobset_max_restarts``), then full restarts (``max_full_restarts``): delete the JobSet, make it again.

    :param max_slice_restarts: slice restarts allowed within ``slice_restart_window`` before a full restart; also the
        worker Job's ``backoffLimit`` (times the VMs per slice).
    :param slice_restart_window: the sliding window of that budget.
    :param max_full_restarts: full restarts allowed (0..99); one more needed fails the task.
    :param jobset_max_restarts: the JobSet's ``failurePolicy.maxRestarts`` (always written out).
    :param elastic_max_retries: MaxText's ``elastic_max_retries`` (attempts, the first included; default
        ``max_slice_restarts + 1``).
    :param elastic_timeout_seconds: MaxText's per-attempt wait for slices.
    :param stall_timeout: no training progress for this long while the stall clock runs (admitted, trainer
        training) → full restart; must exceed ``elastic_timeout_seconds``.
    :param startup_timeout: how long a trainer container may run before it trains → full restart; must exceed
        ``elastic_timeout_seconds``.
    :param storage_retry_timeout: how long checkpoints storage cannot read ("unknown", not "invalid") are read
        again before the task fails for a retry (0: not read again).
    :param max_pods_ready_evictions: Kueue evictions for a PodsReady timeout (``waitForPodsReady``: the pods not
        all ready in time) the run may take; each is waited out like a preemption, spending no restart budget, and
        one more fails the task (``pods_ready_evictions_exceeded``). ``None``: any number
        (:attr:`Capacity.queue_timeout` still bounds each wait).

    The counts are checked here (``TypeError``/``ValueError`` naming ``Budgets.<field>``); the rules between
    fields (``stall_timeout`` over ``elastic_timeout_seconds``, ``elastic_max_retries`` against
    ``max_slice_restarts``) are the spec's lint's, which sees them with the run.
    """

    max_slice_restarts: int = 3
    slice_restart_window: Duration = timedelta(hours=1)
    max_full_restarts: int = 2
    jobset_max_restarts: int = 0
    elastic_max_retries: int | None = None
    elastic_timeout_seconds: int = DEFAULT_ELASTIC_TIMEOUT_SECONDS
    stall_timeout: Duration = timedelta(minutes=30)
    startup_timeout: Duration = timedelta(minutes=30)
    storage_retry_timeout: Duration = timedelta(minutes=5)
    max_pods_ready_evictions: int | None = DEFAULT_MAX_PODS_READY_EVICTIONS

    def __post_init__(self) -> None:
        _count("Budgets.max_slice_restarts", self.max_slice_restarts)
        if self.max_pods_ready_evictions is not None:
            _count("Budgets.max_pods_ready_evictions", self.max_pods_ready_evictions)
        _count("Budgets.max_full_restarts", self.max_full_restarts, MAX_ATTEMPT)
        for name in ("slice_restart_window", "stall_timeout", "startup_timeout"):
            seconds(f"Budgets.{name}", getattr(self, name))
        seconds("Budgets.storage_retry_timeout", self.storage_retry_timeout, positive=False)

    @property
    def storage_retry_seconds(self) -> float:
        """``storage_retry_timeout`` in seconds."""
        return seconds("storage_retry_timeout", self.storage_retry_timeout, positive=False)

    def policy(self, queue_timeout_seconds: float | None = None) -> policy.Budgets:
        """The policy's budgets (:class:`operators.policy.Budgets`, in seconds); the queue's bound is
        :attr:`Capacity.queue_timeout`'s."""
        timeout = self.elastic_timeout_seconds
        usable = isinstance(timeout, int) and not isinstance(timeout, bool) and 0 < timeout < 2**53
        return policy.Budgets(
            max_slice_restarts=self.max_slice_restarts,
            slice_restart_window_seconds=seconds("slice_restart_window", self.slice_restart_window),
            stall_timeout_seconds=seconds("stall_timeout", self.stall_timeout),
            max_full_restarts=self.max_full_restarts,
            queue_timeout_seconds=queue_timeout_seconds,
            # Out of range here is None; the spec's lint then refuses the value with its reason.
            elastic_timeout_seconds=float(timeout) if usable else None,
            startup_timeout_seconds=seconds("startup_timeout", self.startup_timeout),
            max_pods_ready_evictions=self.max_pods_ready_evictions,
        )


@dataclass(frozen=True, kw_only=True)
class Capacity(OptionGroup):
    """Where the run queues for TPUs, at which priority, and how long one wait for them may last.

    :param queue_name: the Kueue LocalQueue: the JobSet gets the ``kueue.x-k8s.io/queue-name`` label (``None``: no
        label, Kueue leaves it alone).
    :param workload_priority_class: a Kueue WorkloadPriorityClass (the ``kueue.x-k8s.io/priority-class`` label).
    :param priority_class: the pods' Kubernetes PriorityClass (``priorityClassName``).
    :param queue_timeout: how long one wait for Kueue's admission may last (queued before the start, or preempted
        and waiting to be admitted again); then the JobSet is deleted and the task fails, saying how long it waited
        and what Kueue said. ``None`` (the default): as long as it takes (``execution_timeout`` still applies).
    :param kueue_pods_ready_timeout: :param kueue_recovery_timeout: Kueue's ``waitForPodsReady`` ``timeout`` and
        ``recoveryTimeout`` (0: Kueue's ``0s``, no recovery check), for when the operator cannot read Kueue's
        ConfigMap (``kueue-system/kueue-manager-config``, which needs an optional Role: docs/rbac.md); used for the
        launch warnings and shown in the report. ``None``: unknown.

    ``queue_timeout`` lives here, not in :class:`Budgets`: it bounds a wait for capacity, spends no restart budget,
    and :class:`~operators.jobset_operator.JobSetOperator` takes this group too.
    """

    queue_name: str | None = None
    workload_priority_class: str | None = None
    priority_class: str | None = None
    queue_timeout: Duration | None = None
    kueue_pods_ready_timeout: Duration | None = None
    kueue_recovery_timeout: Duration | None = None

    def __post_init__(self) -> None:
        for name in ("queue_name", "workload_priority_class", "priority_class"):
            _optional_text(f"Capacity.{name}", getattr(self, name))
        if self.queue_timeout is not None:
            seconds("Capacity.queue_timeout", self.queue_timeout)
        if self.kueue_pods_ready_timeout is not None:
            seconds("Capacity.kueue_pods_ready_timeout", self.kueue_pods_ready_timeout)
        if self.kueue_recovery_timeout is not None:
            seconds("Capacity.kueue_recovery_timeout", self.kueue_recovery_timeout, positive=False)

    @property
    def kueue_pods_ready_seconds(self) -> tuple[float | None, float | None]:
        """``(kueue_pods_ready_timeout, kueue_recovery_timeout)`` in seconds (``None``: unknown)."""
        timeout, recovery = self.kueue_pods_ready_timeout, self.kueue_recovery_timeout
        return (
            None if timeout is None else seconds("kueue_pods_ready_timeout", timeout),
            None if recovery is None else seconds("kueue_recovery_timeout", recovery, positive=False),
        )

    @property
    def queue_timeout_seconds(self) -> float | None:
        """``queue_timeout`` in seconds (``None``: no bound)."""
        return None if self.queue_timeout is None else seconds("queue_timeout", self.queue_timeout)


@dataclass(frozen=True, kw_only=True)
class History(OptionGroup):
    """What the run learns from its task's earlier runs (docs/operators.md, "Learning from earlier runs").

    :param avoid_failing_node_pools: keep the slices off GKE node pools that had more than
        ``node_pool_failure_threshold`` slice failures in the last ``failure_history_runs`` runs, while the other
        pools can hold every slice. Needs ``list`` on ``nodes`` (docs/rbac.md).
    :param node_pool_failure_threshold: K: a pool with more than K failures in those runs is avoided.
    :param failure_history_runs: N: the runs the avoidance looks at (0..50).
    :param failure_history_key: the Airflow Variable holding the failure history (default
        ``elastic_training_failure_history.<dag_id>.<task_id>``); tasks naming the same key share one history.
    """

    avoid_failing_node_pools: bool = False
    node_pool_failure_threshold: int = DEFAULT_THRESHOLD
    failure_history_runs: int = DEFAULT_RUNS
    failure_history_key: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.avoid_failing_node_pools, bool):
            raise TypeError(
                f"History.avoid_failing_node_pools must be True or False, got {shown(self.avoid_failing_node_pools)}"
            )
        _count("History.node_pool_failure_threshold", self.node_pool_failure_threshold)
        _count("History.failure_history_runs", self.failure_history_runs, MAX_RUNS)
        key = self.failure_history_key
        if key is not None and not (isinstance(key, str) and 0 < len(key) <= MAX_FAILURE_HISTORY_KEY):
            raise ValueError(
                f"History.failure_history_key must be a Variable key of 1 to {MAX_FAILURE_HISTORY_KEY} characters, "
                f"got {shown(key)}"
            )


GROUPS: Final[dict[str, type[OptionGroup]]] = {
    "training": Training,
    "scale": Scale,
    "budgets": Budgets,
    "capacity": Capacity,
    "history": History,
}
# Former flat names that are not a field's own: the flat name, its group, its field.
RENAMED: Final[dict[str, tuple[str, str]]] = {"kueue_queue": ("capacity", "queue_name")}


def flat_names(groups: Mapping[str, type[OptionGroup]] = GROUPS) -> dict[str, tuple[str, str]]:
    """Every flat keyword argument of the groups, as ``{flat name: (group argument, field)}``."""
    names = {f.name: (group, f.name) for group, cls in groups.items() for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    names.update({flat: where for flat, where in RENAMED.items() if where[0] in groups})
    return names


def grouped(
    owner: str,
    given: Mapping[str, OptionGroup | None],
    flat: dict[str, Any],
    *,
    groups: Mapping[str, type[OptionGroup]] = GROUPS,
    stacklevel: int = 3,
) -> dict[str, OptionGroup | None]:
    """The groups of ``given``, with the deprecated flat keyword arguments of ``flat`` (popped from it) folded in,
    and those of its ``default_args`` (a DAG's, as Airflow passes them) for a group the call does not give.

    A flat argument whose group is given too is refused (`TypeError`: which value would win is anyone's guess);
    the rest make their group (its defaults for the fields not named) and one
    :class:`ElasticTrainingDeprecationWarning` says the new spelling of each. A group neither given nor spelled flat
    stays ``None``.
    """
    names = flat_names(groups)
    # Airflow fills only the constructor's parameters from a DAG's default_args (the Task SDK's apply_defaults),
    # and the flat names are none: read them there too, or a DAG that set one there would silently lose it. A
    # default yields to the call: to its own flat argument, and to the group it gives.
    for name, value in dict(flat.get("default_args") or {}).items():
        if name in names and name not in flat and given.get(names[name][0]) is None:
            flat[name] = value
    used = {name: flat.pop(name) for name in list(flat) if name in names}
    if not used:
        return dict(given)
    fields: dict[str, dict[str, Any]] = {}
    for name, value in used.items():
        group, field_name = names[name]
        if given.get(group) is not None:
            cls = groups[group].__name__
            raise TypeError(
                f"{owner}: {name}={shown(value)} and {group}={cls}(...) both given: put it in the group, "
                f"{group}={cls}(..., {field_name}={shown(value)})"
            )
        if field_name in fields.get(group, {}) and fields[group][field_name] != value:
            former = next(f for f, (g, n) in RENAMED.items() if (g, n) == (group, field_name))
            raise ValueError(
                f"{owner}: {field_name}={shown(fields[group][field_name])} and {former}={shown(value)} "
                "(its former name) disagree"
            )
        fields.setdefault(group, {})[field_name] = value
    by_group: dict[str, list[str]] = {}
    for name in used:
        by_group.setdefault(names[name][0], []).append(name)
    spelled = "; ".join(
        ", ".join(f"{name}={shown(used[name])}" for name in flat_of)
        + f" → {group}={groups[group].__name__}("
        + ", ".join(f"{names[name][1]}={shown(used[name])}" for name in flat_of)
        + ")"
        for group, flat_of in by_group.items()
    )
    warnings.warn(
        f"{owner}: flat keyword arguments are deprecated and go in the next release; pass them in their option "
        f"groups (elastic_training.operators): {spelled}",
        ElasticTrainingDeprecationWarning,
        stacklevel=stacklevel,
    )
    made = dict(given)
    for group, values in fields.items():
        made[group] = groups[group](**values)
    return made


def rendered_int(name: str, value: Any) -> int:
    """A rendered integer field: an int, or text of ASCII digits (Jinja renders to text); `SpecError` otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = value.strip() if isinstance(value, str) else ""
    if text.isascii() and text.lstrip("-").isdecimal() and len(text) <= 20:
        return int(text)
    raise SpecError(name, f"must be an integer, got {shown(value)}")


def _rendered_args(args: Any) -> dict[str, Any]:
    """Rendered ``maxtext_args`` as they are, for the lint to judge (NaN, lists, huge ints, keys that are not text)."""
    if not isinstance(args, Mapping):
        raise SpecError("maxtext_args", f"must be a mapping of MaxText keys to values, got {type(args).__name__}")
    return dict(args)


def _env(env: Any) -> Any:
    """``env`` copied when a mapping; anything else reaches the lint, which names the field."""
    return dict(env) if isinstance(env, Mapping) else (env or {})


@dataclass(frozen=True)
class RunOptions:
    """The five groups of one run, and the run spec they make (the one place groups become a spec)."""

    training: Training
    scale: Scale
    budgets: Budgets = field(default_factory=Budgets)
    capacity: Capacity = field(default_factory=Capacity)
    history: History = field(default_factory=History)

    @property
    def auto_period(self) -> bool:
        """Whether ``Training.checkpoint_period`` is ``"auto"`` (chosen from the failure history before launch)."""
        period = self.training.checkpoint_period
        return isinstance(period, str) and period.strip() == AUTO_PERIOD

    def spec(self, *, runtime: Runtime, service_account: str | None = None, auto_period: int = 1) -> ElasticRunSpec:
        """The run spec of the (rendered) groups, not linted yet: `SpecError` for a field that is not even its
        type. ``auto_period``: the period written for ``checkpoint_period="auto"`` until the run's plan chooses."""
        training, scale, budgets, capacity = self.training, self.scale, self.budgets, self.capacity
        return ElasticRunSpec(
            run_name=training.run_name,
            base_output_directory=training.base_output_directory,
            steps=rendered_int("steps", training.steps),
            checkpoint_period=auto_period
            if self.auto_period
            else rendered_int("checkpoint_period", training.checkpoint_period),
            num_slices=rendered_int("num_slices", scale.num_slices),
            runtime=runtime,
            maxtext_args=_rendered_args(training.maxtext_args),
            image=training.image,
            tpu_type=scale.tpu_type,
            tpu_topology=scale.tpu_topology,
            max_slice_restarts=budgets.max_slice_restarts,
            jobset_max_restarts=budgets.jobset_max_restarts,
            elastic_timeout_seconds=budgets.elastic_timeout_seconds,
            elastic_min_slice_count=scale.elastic_min_slice_count,
            elastic_max_retries=budgets.elastic_max_retries,
            stall_timeout_seconds=seconds("stall_timeout", budgets.stall_timeout),
            startup_timeout_seconds=seconds("startup_timeout", budgets.startup_timeout),
            pathways_server_image=training.pathways_server_image,
            pathways_proxy_image=training.pathways_proxy_image,
            head_node_pool=scale.head_node_pool,
            service_account=service_account,
            priority_class=capacity.priority_class,
            queue_name=capacity.queue_name,
            workload_priority_class=capacity.workload_priority_class,
            elastic_slices=scale.elastic_slices,
            image_pull_policy=training.image_pull_policy,  # type: ignore[arg-type]
            trainer_env=training.merged_trainer_env(),
            worker_env=_env(training.worker_env),
        )

    def policy_budgets(self) -> policy.Budgets:
        """The policy's budgets: :class:`Budgets` with :attr:`Capacity.queue_timeout`."""
        return self.budgets.policy(self.capacity.queue_timeout_seconds)
