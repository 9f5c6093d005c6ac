"""The run report: one elastic run's counts, recoveries with their cost, capacity times and goodput, typed.

``ElasticJobSetOperator`` builds it (:func:`operators.recovery.run_report`) and returns :meth:`RunReport.to_json`
(its XCom ``return_value``; under ``report`` when the task fails, with ``failure``); the plugin's view, the
pipeline report, the metrics, the failure history, the advice and the CLI read it back with
:meth:`RunReport.from_json`. The keys are those of docs/operators.md ("The run report"), plus ``version``.
Pure: no Airflow, no I/O, so the plugin imports it without the Task SDK.

Reports live on in Airflow's XCom table, so :meth:`RunReport.from_json` reads the current
:data:`REPORT_VERSION` and the unversioned shape earlier releases stored (a key those did not write reads as
unknown: ``None``, 0 or empty), and refuses a version newer than it knows (:class:`ReportError`) rather than
misread it. A value of the wrong type is refused the same way, naming its key. ``advice`` is not stored but
derived: the model (:mod:`operators.advice`) over the report's own measurements, on every read.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, TypeVar

from elastic_training.operators.advice import Advice, AdviceError, AdviceInputs, PeriodChoice, advise
from elastic_training.operators.failure_history import MAX_TEXT, RunRecord, SliceFailure
from elastic_training.operators.kueue_config import PodsReadyTimeouts
from elastic_training.operators.policy import Budgets
from elastic_training.operators.pool_avoidance import Avoidance

REPORT_VERSION = 1
PHASES = ("wait_for_slices", "restore", "first_step", "total")

_T = TypeVar("_T")


class ReportError(ValueError):
    """A stored run report that cannot be read: a version this release does not know, or a wrong value."""


# -- reading JSON values: absent reads as unknown, a wrong type is refused ------------------------------------


def _int(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ReportError(f"the report holds a value of the wrong type: {key} must be an integer, got {value!r}")
    return value


def _float(data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ReportError(f"the report holds a value of the wrong type: {key} must be a number, got {value!r}")
    return float(value)


def _str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ReportError(f"the report holds a value of the wrong type: {key} must be a string, got {value!r}")
    return value


def _bool(data: Mapping[str, Any], key: str) -> bool:
    value = data.get(key)
    if value is not None and not isinstance(value, bool):
        raise ReportError(f"the report holds a value of the wrong type: {key} must be true or false, got {value!r}")
    return bool(value)


def _list(data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise ReportError(f"the report holds a value of the wrong type: {key} must be a list, got {value!r}")
    return list(value)


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ReportError(f"the report holds a value of the wrong type: {what} must be an object, got {value!r}")
    return value


def _objects(data: Mapping[str, Any], key: str, read: Callable[[Mapping[str, Any]], _T]) -> tuple[_T, ...]:
    return tuple(read(_object(item, f"each of {key}")) for item in _list(data, key))


def _strings(data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    return tuple(str(item) for item in _list(data, key))


_SCALAR_READERS: Mapping[type, Callable[[Mapping[str, Any], str], Any]] = {
    int: _int,
    float: _float,
    str: _str,
    bool: _bool,
}


@cache
def _scalar_fields(cls: type) -> tuple[tuple[str, Callable[[Mapping[str, Any], str], Any], bool, Any], ...]:
    """(name, reader, optional, default) of each int, float, str or bool field of the dataclass ``cls``."""
    hints = typing.get_type_hints(cls)
    found = []
    for item in dataclasses.fields(cls):
        args = typing.get_args(hints[item.name])
        optional = type(None) in args
        base = next(arg for arg in args if arg is not type(None)) if optional and len(args) == 2 else hints[item.name]
        reader = _SCALAR_READERS.get(base)
        if reader is not None:
            found.append((item.name, reader, optional, item.default))
    return tuple(found)


def _scalars(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """Every int, float, str and bool field of ``cls`` read from ``data`` by its annotated type: an optional one
    absent reads as ``None``, any other one absent, zero or empty as its default."""
    values = {}
    for name, reader, optional, default in _scalar_fields(cls):
        value = None if optional and data.get(name) is None else reader(data, name)
        values[name] = value if optional else (value or default)
    return values


# -- the report's parts ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PhaseSeconds:
    """Seconds of each phase of a recovery (``None``: not reached): slices back, restore, first step, in all."""

    wait_for_slices: float | None = None
    restore: float | None = None
    first_step: float | None = None
    total: float | None = None

    def items(self) -> tuple[tuple[str, float | None], ...]:
        """(phase, seconds) in :data:`PHASES` order."""
        return tuple((name, getattr(self, name)) for name in PHASES)

    def to_json(self) -> dict[str, float | None]:
        return dict(self.items())

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PhaseSeconds:
        return cls(**{name: _float(data, name) for name in PHASES})


@dataclass(frozen=True)
class RecoveryEntry:
    """One in-process recovery (``kind``: ``slice_down`` or ``scale_up``): steps, phase times, chip time lost."""

    detected_at: float | None = None
    failed_step: int | None = None
    restored_step: int | None = None
    steps_lost: int | None = None
    slices: int | None = None  # slices active after it
    slices_ready_at: float | None = None
    restored_at: float | None = None
    first_step_at: float | None = None
    phase_seconds: PhaseSeconds = PhaseSeconds()
    chip_seconds_lost: float | None = None
    cost: float | None = None
    complete: bool = False
    kind: str = "slice_down"
    interrupted_save: bool | None = None  # it came while a save was written (None: not known, no async save seen)

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "phase_seconds": self.phase_seconds.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RecoveryEntry:
        phases = PhaseSeconds.from_json(_object(data.get("phase_seconds") or {}, "phase_seconds"))
        return cls(**_scalars(cls, data), phase_seconds=phases)


@dataclass(frozen=True)
class PreemptionEntry:
    """One Kueue eviction after an admission (a preemption, or another kind): when, Kueue's reason, the wait to be
    admitted again, the steps it cost.

    ``recreated``: the preemption ended its JobSet and a new one resumed the run (its restore is that one's).
    ``eviction``: its kind (``operators.queueing.EvictionKind``: ``preempted``, ``pods_ready_timeout``,
    ``queue_stopped``, ...; ``""`` in a report from before kinds were told apart, or when Kueue's reason was not seen).
    """

    at: float | None = None
    reason: str = ""
    step: int | None = None
    readmitted_at: float | None = None
    queued_seconds: float | None = None
    restored_step: int | None = None
    restored_at: float | None = None
    first_step_at: float | None = None
    steps_lost: int | None = None
    chip_seconds_lost: float | None = None
    complete: bool = False
    recreated: bool = False
    eviction: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PreemptionEntry:
        return cls(**_scalars(cls, data))


@dataclass(frozen=True)
class Escalation:
    """One full restart: why, when, from which step to which, what it quarantined and how long it took.

    ``preemption``: a recreation a preemption forced (the trainer's exit 0 on SIGTERM), no full restart spent;
    ``relaxation``: a recreation that dropped the node-pool avoidance its workers could not be scheduled under
    (``node_pool_avoidance.relaxed`` says why), no full restart spent; ``replan``: a recreation with a shorter
    ``checkpoint_period`` (``checkpoint_period_replan`` says why), no full restart spent.
    """

    reason: str = ""
    at: float | None = None
    message: str = ""
    jobset_name: str | None = None
    latest_step: int | None = None
    resumed_from_step: int | None = None
    steps_lost: int | None = None
    seconds_to_recreate: float | None = None
    quarantined: tuple[str, ...] = ()
    preemption: bool = False
    # The old pods' grace period when the restart shortened it (a trainer past saving: hung, starting, waiting).
    pod_grace_seconds: int | None = None
    relaxation: bool = False
    replan: bool = False

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "quarantined": list(self.quarantined)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Escalation:
        """An escalation as the operator records it (its task state store entry) or a report carries it."""
        return cls(**_scalars(cls, data), quarantined=_strings(data, "quarantined"))


@dataclass(frozen=True)
class PeriodReplan:
    """``checkpoint_period="auto"``'s restart mid-run (:mod:`operators.period_replan`): from ``from_period`` to
    ``period``, the MTBF the run's own failures showed, the seconds the shorter period was to save net of the
    restart, and why in words."""

    period: int = 0
    from_period: int = 0
    mtbf_seconds: float = 0.0
    net_gain_seconds: float = 0.0
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> PeriodReplan | None:
        """The replan a plan or report holds; ``None`` for none, or for one without a period."""
        if not isinstance(data, Mapping):
            return None
        found = cls(**_scalars(cls, data))
        return found if found.period >= 1 else None


@dataclass(frozen=True)
class CapacityTimes:
    """Where the run's time went around its steps: queued, admission to first step, training, the tail after.

    ``queue_spans``: each suspension ``(suspended at, admitted at or None)``, every incarnation's in order;
    ``provisioning_spans``: the parts of them with quota reserved and admission checks pending (flex-start capacity
    being provisioned), ``provisioning_seconds`` their sum; ``provisioning_notes``: ``(at, what a check said)``;
    ``queue_notes``: ``(at, what Kueue said of a wait for quota)`` while it lasted.
    ``resume_seconds``: from the JobSet's end (its terminal condition, as Kubernetes stamps it) to the report: the
    trigger firing (after its ``defer_settle_seconds`` hold when the run ended within it), the scheduler queueing the
    deferred task again, a worker resuming it, and any retry of the task in between. No chips are held then (after a
    ``Failed`` end the JobSet's pods may still be stopping), so it is outside the wall time goodput divides by;
    ``None`` when the JobSet's end is not known.
    """

    queued_seconds: float = 0.0
    admission_to_first_step_seconds: float | None = None
    training_seconds: float = 0.0
    tail_seconds: float | None = None
    last_step_at: float | None = None
    queue_spans: tuple[tuple[float, float | None], ...] = ()
    provisioning_seconds: float = 0.0
    provisioning_spans: tuple[tuple[float, float | None], ...] = ()
    provisioning_notes: tuple[tuple[float, str], ...] = ()
    queue_notes: tuple[tuple[float, str], ...] = ()
    resume_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "queue_spans": [list(span) for span in self.queue_spans],
            "provisioning_spans": [list(span) for span in self.provisioning_spans],
            "provisioning_notes": [list(note) for note in self.provisioning_notes],
            "queue_notes": [list(note) for note in self.queue_notes],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CapacityTimes:
        return cls(
            **_scalars(cls, data),
            queue_spans=_spans(data, "queue_spans"),
            provisioning_spans=_spans(data, "provisioning_spans"),
            provisioning_notes=_notes(data, "provisioning_notes", "provisioning note"),
            queue_notes=_notes(data, "queue_notes", "queue note"),
        )


def _notes(data: Mapping[str, Any], key: str, what: str) -> tuple[tuple[float, str], ...]:
    notes = []
    for note in _list(data, key):
        if not isinstance(note, list | tuple) or len(note) != 2 or not isinstance(note[1], str):
            raise ReportError(f"the report holds a value of the wrong type: a {what} {note!r}")
        notes.append((_float({"at": note[0]}, "at") or 0.0, note[1][:500]))
    return tuple(notes)


def _spans(data: Mapping[str, Any], key: str) -> tuple[tuple[float, float | None], ...]:
    spans = []
    for span in _list(data, key):
        if not isinstance(span, list | tuple) or len(span) != 2:
            raise ReportError(f"the report holds a value of the wrong type: a queue span {span!r}")
        start, end = _float({"start": span[0]}, "start"), _float({"end": span[1]}, "end")
        spans.append((start or 0.0, end))
    return tuple(spans)


@dataclass(frozen=True)
class BudgetAllowances:
    """The operator's allowances as the report carries them, so a view shows each budget used against allowed.

    ``None``: not carried (a report from before it was, or a bound left unset).
    """

    max_slice_restarts: int | None = None
    slice_restart_window_seconds: float | None = None
    stall_timeout_seconds: float | None = None
    startup_timeout_seconds: float | None = None
    max_full_restarts: int | None = None
    queue_timeout_seconds: float | None = None
    elastic_timeout_seconds: float | None = None
    jobset_max_restarts: int | None = None
    elastic_max_retries: int | None = None
    max_pods_ready_evictions: int | None = None
    # Kueue's waitForPodsReady, as the operator learnt it (its ConfigMap, or the operator's options)
    pods_ready_timeout_seconds: float | None = None
    pods_ready_recovery_timeout_seconds: float | None = None

    @classmethod
    def of(
        cls,
        budgets: Budgets,
        *,
        jobset_max_restarts: int,
        elastic_max_retries: int,
        pods_ready: PodsReadyTimeouts | None = None,
    ) -> BudgetAllowances:
        """The operator's own budgets, with JobSet's ``maxRestarts``, MaxText's attempts and Kueue's
        ``waitForPodsReady`` timeouts (as far as they are known) beside them."""
        return cls(
            **dataclasses.asdict(budgets),
            jobset_max_restarts=jobset_max_restarts,
            elastic_max_retries=elastic_max_retries,
            pods_ready_timeout_seconds=pods_ready.timeout_seconds if pods_ready else None,
            pods_ready_recovery_timeout_seconds=pods_ready.recovery_timeout_seconds if pods_ready else None,
        )

    def to_json(self) -> dict[str, Any]:
        """The allowances carried (an unset one is left out, as :meth:`Budgets.to_json` does)."""
        return {name: value for name, value in dataclasses.asdict(self).items() if value is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BudgetAllowances:
        return cls(**_scalars(cls, data))


def period_choice_from_json(data: Any) -> PeriodChoice | None:
    """The ``checkpoint_period="auto"`` choice (its JSON, as the run's plan or a report holds it), or ``None``.

    A report's ``achieved_goodput`` beside it is the report's own ``goodput``, not part of the choice.
    """
    if data is None:
        return None
    entry = _object(data, "checkpoint_period_choice")
    known = {f.name for f in dataclasses.fields(PeriodChoice)}
    values = {k: v for k, v in entry.items() if k in known}
    if "source" not in values:  # a choice stored before issue 55: from runs when it used any, else the fallback
        values["source"] = "runs" if entry.get("runs") else "fallback"
    bounds = values.get("bounds")
    try:
        if not isinstance(bounds, list | tuple) or len(bounds) != 2:
            raise TypeError(f"bounds {bounds!r}")
        return PeriodChoice(**{**values, "bounds": (int(bounds[0]), int(bounds[1]))})
    except (TypeError, ValueError) as error:
        raise ReportError(f"the report holds a value of the wrong type: checkpoint_period_choice ({error})") from None


def _slice_failure(data: Mapping[str, Any]) -> SliceFailure:
    try:
        return SliceFailure.from_json(dict(data))
    except (TypeError, ValueError) as error:
        raise ReportError(f"the report holds a value of the wrong type: a slice failure ({error})") from None


# -- the report --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunReport:
    """One run's report (docs/operators.md, "The run report"); :meth:`to_json` is what lands in XCom.

    ``capacity`` is ``None`` in a report from before queue time was measured; ``node_pool_avoidance`` and
    ``num_slices`` are ``None`` when the operator did not add them (a report built outside it).
    """

    target_step: int
    jobset_name: str | None = None
    namespace: str = ""
    run_directory: str = ""
    final_step: int | None = None
    slice_restarts: int = 0
    slice_evictions: int = 0
    in_process_recoveries: int = 0
    scale_up_recoveries: int = 0
    preemption_count: int = 0
    pods_ready_evictions: int = 0
    evictions: int = 0
    full_restarts: int = 0
    preemption_recreations: int = 0
    jobset_restarts: int = 0
    steps_lost: int = 0
    recoveries: tuple[RecoveryEntry, ...] = ()
    preemptions: tuple[PreemptionEntry, ...] = ()
    escalations: tuple[Escalation, ...] = ()
    chips: int = 0
    price_per_chip_hour: float = 0.0
    chip_seconds_lost: float = 0.0
    cost_lost: float = 0.0
    mean_step_seconds: float | None = None
    goodput: float | None = None
    goodput_with_queue: float | None = None
    capacity: CapacityTimes | None = None
    steps_executed: int = 0
    startup_step_seconds: float = 0.0
    resumed_from_step: int | None = None
    trained_nothing: bool = False
    wall_seconds: float = 0.0
    jobsets: tuple[str, ...] = ()
    budgets: BudgetAllowances = field(default_factory=BudgetAllowances)
    checkpoint_period: int | None = None
    checkpoint_save_seconds: float | None = None
    num_slices: int | None = None
    slice_failures: tuple[SliceFailure, ...] = ()
    node_pools: tuple[str, ...] = ()
    node_pool_avoidance: Avoidance | None = None
    checkpoint_period_choice: PeriodChoice | None = None
    checkpoint_period_replan: PeriodReplan | None = None
    history_key: str | None = None
    history_notes: tuple[str, ...] = ()
    already_at_target: bool = False
    failure: str | None = None
    version: int = REPORT_VERSION

    # -- what is derived from the report ---------------------------------------------------------------

    def advice_inputs(self) -> AdviceInputs:
        """The checkpoint-period model's inputs (:mod:`operators.advice`); ``AdviceError`` naming a gap."""
        needed = {
            "mean_step_seconds": self.mean_step_seconds,
            "checkpoint_save_seconds": self.checkpoint_save_seconds,
            "checkpoint_period": self.checkpoint_period,
        }
        for key, value in needed.items():
            if value is None:
                raise AdviceError(f"the report has no {key!r}")
        downtimes = self.downtimes()
        return AdviceInputs(
            failures=len(downtimes),
            wall_seconds=self.wall_seconds,
            step_seconds=float(self.mean_step_seconds or 0.0),
            checkpoint_save_seconds=float(self.checkpoint_save_seconds or 0.0),
            checkpoint_period=int(self.checkpoint_period or 0),
            steps=self.target_step + 1,
            recovery_seconds=sum(downtimes) / len(downtimes) if downtimes else 0.0,
        )

    @property
    def advice(self) -> Advice | None:
        """The checkpoint-period advice, or ``None`` when its inputs were not measured."""
        try:
            return advise(self.advice_inputs())
        except AdviceError:
            return None

    def downtimes(self) -> list[float]:
        """Each failure's downtime: a recovery's detection to first step, a full restart's delete to recreate (a
        replan's restart is no failure: the rate ``auto`` learns must not count its own restarts)."""
        found = [float(r.phase_seconds.total or 0.0) for r in self.recoveries]
        return found + [float(e.seconds_to_recreate or 0.0) for e in self.escalations if not e.replan]

    def history_record(self, *, run_id: str, ended_at: float, succeeded: bool, fingerprint: str = "") -> RunRecord:
        """The failure history's entry for this run (:mod:`operators.failure_history`); ``fingerprint``: its shape
        (:func:`operators.advice.shape_fingerprint`), which the report does not carry."""
        downtimes = self.downtimes()
        # The period auto chose, not the replan's: auto's change bound centres on its own choices, as the
        # benchmark's simulation keeps them (benchmarks/checkpoint_period_replan.py).
        replanned = self.checkpoint_period_replan
        period = replanned.from_period if replanned is not None and replanned.from_period else self.checkpoint_period
        avoided = self.node_pool_avoidance.avoided if self.node_pool_avoidance is not None else ()
        return RunRecord(
            run_id=run_id[:MAX_TEXT],
            ended_at=ended_at,
            failures=self.slice_failures,
            pools=self.node_pools,
            slices=self.num_slices or 0,
            succeeded=succeeded,
            wall_seconds=self.wall_seconds or None,
            failures_total=len(downtimes),
            mean_step_seconds=self.mean_step_seconds,
            checkpoint_save_seconds=self.checkpoint_save_seconds,
            recovery_seconds=sum(downtimes) / len(downtimes) if downtimes else None,
            checkpoint_period=period if period is not None and period >= 1 else None,
            goodput=None if self.goodput is None else min(1.0, max(0.0, self.goodput)),
            avoided_pools=avoided,
            training_seconds=self.capacity.training_seconds if self.capacity is not None else None,
            fingerprint=fingerprint[:MAX_TEXT],
            failures_in_saves=self.failures_in_saves(),
        )

    def failures_in_saves(self) -> int | None:
        """The in-process recoveries that interrupted a save; ``None`` when none of them could tell (synchronous
        saves, or every failure before the first save), so ``auto`` fits this run as one that does not say."""
        known = [r.interrupted_save for r in self.recoveries if r.interrupted_save is not None]
        return sum(known) if known else None

    # -- JSON ------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The report as it lands in XCom: docs/operators.md's keys, plus ``version``."""
        advice = self.advice
        data: dict[str, Any] = {
            "version": self.version,
            "jobset_name": self.jobset_name,
            "namespace": self.namespace,
            "run_directory": self.run_directory,
            "target_step": self.target_step,
            "final_step": self.final_step,
            **{name: getattr(self, name) for name in _COUNTS},
            "preemptions": [p.to_json() for p in self.preemptions],
            "escalations": [e.to_json() for e in self.escalations],
            "recoveries": [r.to_json() for r in self.recoveries],
            **{name: getattr(self, name) for name in _MEASURES},
            **(self.capacity.to_json() if self.capacity is not None else {}),
            "jobsets": list(self.jobsets),
            "budgets": self.budgets.to_json(),
            "advice": None if advice is None else advice.to_json(),
            "num_slices": self.num_slices,
            "slice_failures": [f.to_json() for f in self.slice_failures],
            "node_pools": list(self.node_pools),
            "history_key": self.history_key,
            "history_notes": list(self.history_notes),
        }
        if self.node_pool_avoidance is not None:
            data["node_pool_avoidance"] = self.node_pool_avoidance.to_json()
        if self.checkpoint_period_choice is not None:
            data["checkpoint_period_choice"] = {
                **self.checkpoint_period_choice.to_json(),
                "achieved_goodput": self.goodput,
            }
        if self.checkpoint_period_replan is not None:
            data["checkpoint_period_replan"] = self.checkpoint_period_replan.to_json()
        if self.already_at_target:
            data["already_at_target"] = True
        if self.failure is not None:
            data["failure"] = self.failure
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunReport:
        """A report :meth:`to_json` wrote, or an unversioned one of an earlier release; ``ReportError`` otherwise."""
        version = _check_version(data)
        target = _int(data, "target_step")
        if target is None:
            raise ReportError("not a run report (no 'target_step'; see docs/operators.md, 'The run report')")
        avoidance = data.get("node_pool_avoidance")
        return cls(
            **{**_scalars(cls, data), "target_step": target, "version": version},
            recoveries=_objects(data, "recoveries", RecoveryEntry.from_json),
            preemptions=_objects(data, "preemptions", PreemptionEntry.from_json),
            escalations=_objects(data, "escalations", Escalation.from_json),
            capacity=CapacityTimes.from_json(data) if "queued_seconds" in data else None,
            jobsets=_strings(data, "jobsets"),
            budgets=BudgetAllowances.from_json(_object(data.get("budgets") or {}, "budgets")),
            slice_failures=_objects(data, "slice_failures", _slice_failure),
            node_pools=_strings(data, "node_pools"),
            history_notes=_strings(data, "history_notes"),
            node_pool_avoidance=None if avoidance is None else Avoidance.from_json(avoidance),
            checkpoint_period_choice=period_choice_from_json(data.get("checkpoint_period_choice")),
            checkpoint_period_replan=PeriodReplan.from_json(data.get("checkpoint_period_replan")),
        )


_COUNTS = (
    "slice_restarts",
    "slice_evictions",
    "in_process_recoveries",
    "scale_up_recoveries",
    "preemption_count",
    "pods_ready_evictions",
    "evictions",
    "full_restarts",
    "preemption_recreations",
    "jobset_restarts",
    "steps_lost",
)
_MEASURES = (
    "chips",
    "price_per_chip_hour",
    "chip_seconds_lost",
    "cost_lost",
    "mean_step_seconds",
    "goodput",
    "goodput_with_queue",
    "steps_executed",
    "startup_step_seconds",
    "resumed_from_step",
    "trained_nothing",
    "wall_seconds",
    "checkpoint_period",
    "checkpoint_save_seconds",
)


def _check_version(data: Mapping[str, Any]) -> int:
    """The report's version: :data:`REPORT_VERSION`, or none (an earlier release's); a newer one is refused."""
    version = data.get("version")
    if version is None:
        return REPORT_VERSION  # the unversioned shape: the same keys, some of them not written yet
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ReportError(f"the run report's version must be a whole number >= 1, got {version!r}")
    if version > REPORT_VERSION:
        raise ReportError(
            f"the run report is version {version}, newer than this elastic-training reads ({REPORT_VERSION}): "
            "upgrade the elastic-training package where the report is read (the API server, the CLI)"
        )
    return version


def escalations_of(entries: Sequence[Mapping[str, Any]]) -> tuple[Escalation, ...]:
    """The escalations of the task state store (the operator's own records), typed."""
    return tuple(Escalation.from_json(e) for e in entries if isinstance(e, Mapping))
