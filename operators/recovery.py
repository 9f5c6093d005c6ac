"""Recovery timelines and their cost, folded from the trainer's log lines. Pure: no I/O, no Airflow.

MaxText on Pathways logs each in-process recovery (shared markers in :mod:`operators.constants`):
``Elastic event detected`` (the controller caught the slice failure), ``Sufficient slices active:
A >= K`` (pathwaysutils' wait for slices returned), ``restoring from this run's directory step N``
(the restore of the newest committed step), then ``completed step: N+1`` (the first step after). A scale-up
(pathwaysutils' ``Scale up requested.``, when slices came back while ``elastic_min_slice_count`` let the run go on
without them) is a recovery of its own kind, with the same phases. pathwaysutils' wait for slices (``Waiting for
K slices``, then ``A slices active. Wanting at least K`` every poll) is progress, bounded by MaxText's
``elastic_timeout_seconds`` (:meth:`LogDigest.slice_wait_progress`).

The digest also keeps MaxText's two refusals to train, each a plain exit 1: ``MAXTEXT CONFIG ERROR: …`` (its
configuration was refused: a restart cannot help) and ``Requested training up to step N, but a checkpoint
already exists at step M`` (the run had already reached its target).

The digest also holds the run's time in Kueue's hands, told by the JobSet rather than the log (:meth:`queued`,
:meth:`admitted`): the spans it waited for admission, and each preemption (suspended after an admission) as a
recovery of kind ``preemption``, whose restore and first step come from the log when the run is admitted again. That
recovery carries the eviction's kind (:class:`operators.queueing.EvictionKind`): a Kueue eviction for a PodsReady
timeout, a stopped queue or an admission check is folded the same way, and the report counts each kind apart
(``preemption_count`` the preemptions, ``pods_ready_evictions`` the PodsReady timeouts, ``evictions`` all).
:class:`LogDigest` folds timestamped lines into those phases without keeping the lines, so it can
travel in a trigger's kwargs and the task state store: its size grows with recoveries, not steps.

Steps follow MaxText: ``failed_step`` is the last completed step before the failure and
``restored_step`` the checkpoint restored, so ``steps_lost = failed_step - restored_step`` steps
are run again (``failed_step + 1`` when nothing was restored).

Step times are the trainer's own (``completed step: N, seconds: S``). MaxText's first step after
each start or restore includes the compilation of the step function (``train.py`` times the whole
``p_train_step`` call, and the first call compiles it), so it is kept apart as start-up: the mean step
time and goodput use the steady steps, the way ml-goodput-measurement counts program start-up and
compilation as badput (AI-Hypercomputer/ml-goodput-measurement, ``goodput.py``). The digest also keeps
a thinned series of (time, step) points, at most ``MAX_STEP_POINTS``, so a view can draw what the
trainer did rather than a line between checkpoints.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from elastic_training.operators.constants import (
    ALREADY_AT_TARGET_RE,
    ASYNC_SAVE_STARTED_RE,
    COMPLETED_STEP_RE,
    CONFIG_ERROR_RE,
    ELASTIC_ATTEMPTS_SPENT_RE,
    ELASTIC_EVENT_RE,
    LIVE_SLICE_COUNT_RE,
    NO_CHECKPOINT_RE,
    RECOVERY_RECORD_RE,
    RESTORING_STEP_RE,
    SAVED_CHECKPOINT_RE,
    SCALE_UP_RE,
    SLICE_WAIT_RE,
    SLICES_WANTED_RE,
    SUFFICIENT_SLICES_RE,
    TRAINING_STOPPED_RE,
)
from elastic_training.operators.queueing import EvictionKind
from elastic_training.operators.run_report import (
    BudgetAllowances,
    CapacityTimes,
    Escalation,
    PhaseSeconds,
    PreemptionEntry,
    RecoveryEntry,
    RunReport,
)

MAX_RECOVERIES_KEPT = 200  # a hostile or broken trainer must not grow a trigger's kwargs without bound
MAX_STEP_POINTS = 240  # the step series is thinned (every 2nd, 4th, ... step) to stay this small
MAX_QUEUE_SPANS = 200
SLICE_DOWN, SCALE_UP, PREEMPTION = "slice_down", "scale_up", "preemption"
PREEMPTED, PODS_READY_TIMEOUT = EvictionKind.PREEMPTED.value, EvictionKind.PODS_READY_TIMEOUT.value


@dataclass
class Recovery:
    """One recovery: its phases (Unix seconds) and what it cost in steps.

    ``kind``: ``slice_down`` (pathwaysutils' ``Elastic event detected``), ``scale_up`` (``Scale up requested.``) or
    ``preemption`` (Kueue suspended the admitted JobSet: ``detected_at`` is the suspension, ``slices_ready_at`` the
    admission again).
    """

    detected_at: float
    failed_step: int | None
    slices_ready_at: float | None = None
    slices: int | None = None  # slices active after the recovery
    restored_step: int | None = None
    restored_at: float | None = None
    first_step_at: float | None = None
    kind: str = SLICE_DOWN
    reason: str = ""  # a preemption: what Kueue said (its Workload's Evicted condition)
    # A preemption: the eviction's kind (operators.queueing.EvictionKind: preempted, pods_ready_timeout, ...), "" when
    # Kueue's reason was not seen (read as a preemption).
    eviction: str = ""
    # The newest save the trainer had started since its last restore when the failure came (MaxText's async "Started
    # ... save for step N"; None: none). If the restore then goes to an older step, the failure interrupted that save.
    saving_step: int | None = None
    async_saves: bool = False  # the trainer had logged an async save's start before: its saves can be told apart

    @property
    def interrupted_save(self) -> bool | None:
        """Whether the failure came while a save was being written: the restore went to a step older than the
        newest save started (a save that had committed would have been restored). ``None``: not known, as no async
        save was seen before it (synchronous saves log only their end; or the failure came before the first save).
        ``auto`` tells failures that saves bring from the steady rate by this (``operators.advice``)."""
        if not self.async_saves:
            return None
        if self.saving_step is None or self.restored_at is None:
            return False
        return self.restored_step is None or self.restored_step < self.saving_step

    @property
    def complete(self) -> bool:
        return self.first_step_at is not None

    @property
    def steps_lost(self) -> int | None:
        """Steps run again; ``None`` until the restore happened (a recovery cut short loses no steps of its own)."""
        if self.failed_step is None or self.restored_at is None:
            return None
        return max(0, self.failed_step - (self.restored_step if self.restored_step is not None else -1))

    def phases(self) -> dict[str, float | None]:
        """Seconds spent in each phase: waiting for slices, restoring, the first step; and in all."""

        def span(start: float | None, end: float | None) -> float | None:
            return None if start is None or end is None else round(max(0.0, end - start), 3)

        return {
            "wait_for_slices": span(self.detected_at, self.slices_ready_at),
            "restore": span(self.slices_ready_at or self.detected_at, self.restored_at),
            "first_step": span(self.restored_at, self.first_step_at),
            "total": span(self.detected_at, self.first_step_at),
        }


@dataclass
class LogDigest:
    """What the trainer's log said so far, folded line by line (see :meth:`feed`)."""

    latest_step: int | None = None
    latest_step_at: float | None = None
    progress_at: float | None = None
    steps_executed: int = 0
    step_seconds_total: float = 0.0
    live_slices: int | None = None
    restores: int = 0
    recoveries: list[Recovery] = field(default_factory=list)
    open_recovery: Recovery | None = None
    attempts_spent: bool = False
    stopped: str | None = None
    config_error: str | None = None  # MaxText refused its configuration: ``MAXTEXT CONFIG ERROR: <this>``
    already_at_target: list[int] | None = None  # MaxText refused to train a finished run: [steps asked, newest step]
    startup_steps: int = 0  # first steps after a start or restore: they include compilation
    startup_step_seconds: float = 0.0
    awaiting_first_step: bool = False
    save_started_step: int | None = None  # the newest save the trainer started since its last restore (async)
    async_saves_seen: bool = False  # an async save's start was logged: MaxText's async_checkpointing (its default)
    first_step_at: float | None = None
    first_step_seconds: float | None = None
    resumed_from_step: int | None = None  # the step restored before any step ran (-1: trained from scratch)
    step_points: list[list[float]] = field(default_factory=list)  # [at, step, n-th step executed]
    step_point_stride: int = 1
    last_restore_at: float | None = None  # the newest restore line (a restored step, or none found: from scratch)
    last_restored_step: int | None = None  # the step it restored (None: no checkpoint, trained from scratch)
    slice_wait_since: float | None = None  # pathwaysutils' current wait for slices: its first line, its last
    slice_wait_last_at: float | None = None
    queue_spans: list[list[float | None]] = field(default_factory=list)  # [suspended at, admitted at or None]
    preempted_spans: int = 0  # of queue_spans, those after an admission (preemptions)
    first_admitted_at: float | None = None
    # Quota reserved and waiting for admission checks (flex-start provisioning): [from, to or None]; and what each
    # check said when it left Pending ([at, "admission check dws-prov Rejected: ..."]), newest last.
    provisioning_spans: list[list[float | None]] = field(default_factory=list)
    provisioning_notes: list[list[Any]] = field(default_factory=list)
    # What Kueue said of each wait for quota while it lasted ([at, "couldn't assign flavors ..."]), newest last.
    queue_notes: list[list[Any]] = field(default_factory=list)

    def feed(self, at: float, line: str) -> None:
        """Fold one log line logged at ``at`` (Unix seconds)."""
        if RECOVERY_RECORD_RE.search(line):
            return  # the local trainer's summary of a recovery already folded: its error quotes the event's line
        if (match := COMPLETED_STEP_RE.search(line)) is not None:
            try:
                seconds = float(match.group(2))
            except ValueError:  # "1.2.3" matches the pattern but is no number
                seconds = 0.0
            self._completed_step(at, int(match.group(1)), seconds, line)
        elif ELASTIC_EVENT_RE.search(line):
            if not self._preempted_waiting():  # else: the old trainer saw the preemption take its slices
                self._close_open()
                self.open_recovery = Recovery(
                    detected_at=at,
                    failed_step=self.latest_step,
                    saving_step=self.save_started_step,
                    async_saves=self.async_saves_seen,
                )
            self.progress_at = at
        elif SCALE_UP_RE.search(line):
            self._close_open()
            self.open_recovery = Recovery(detected_at=at, failed_step=self.latest_step, kind=SCALE_UP)
            self.progress_at = at
        elif (match := SUFFICIENT_SLICES_RE.search(line)) is not None:
            recovery = self.open_recovery
            if recovery is not None and recovery.slices_ready_at is None and recovery.kind != PREEMPTION:
                recovery.slices_ready_at = at
                recovery.slices = int(match.group(1))
            self.progress_at = at
            self.slice_wait_since = self.slice_wait_last_at = None
        elif SLICE_WAIT_RE.search(line) or SLICES_WANTED_RE.search(line):
            # Progress only as long as MaxText itself waits (elastic_timeout_seconds): see slice_wait_progress.
            if self.slice_wait_since is None:
                self.slice_wait_since = at
            self.slice_wait_last_at = at
        elif (match := RESTORING_STEP_RE.search(line)) is not None:
            self._restored(at, int(match.group(1)))
        elif NO_CHECKPOINT_RE.search(line):
            self._restored(at, None)
        elif (match := ASYNC_SAVE_STARTED_RE.search(line)) is not None:
            # A save that starts (once the one before it is done): the trainer is at work, not stuck, however long
            # the storage makes it wait.
            self.progress_at = at
            self.save_started_step, self.async_saves_seen = int(match.group(1)), True
        elif SAVED_CHECKPOINT_RE.search(line):
            self.progress_at = at
        elif ELASTIC_ATTEMPTS_SPENT_RE.search(line):
            self.attempts_spent = True
        elif (match := TRAINING_STOPPED_RE.search(line)) is not None:
            self.stopped = match.group(1).strip()[:500]
        elif (match := CONFIG_ERROR_RE.search(line)) is not None:
            self.config_error = match.group(1).strip()[:500]
        elif (match := ALREADY_AT_TARGET_RE.search(line)) is not None:
            self.already_at_target = [int(match.group(1)), int(match.group(2))]
            self._resumed_at_target(at, int(match.group(2)))

    def feed_all(self, lines: Iterable[tuple[float, str]]) -> LogDigest:
        for at, line in lines:
            self.feed(at, line)
        return self

    def slice_wait_progress(self, bound_seconds: float | None) -> float | None:
        """The last line of the current wait for slices as progress, no later than its start + ``bound_seconds``."""
        if self.slice_wait_since is None or self.slice_wait_last_at is None:
            return None
        if bound_seconds is None:
            return self.slice_wait_last_at
        return min(self.slice_wait_last_at, self.slice_wait_since + bound_seconds)

    @property
    def waiting_for_slices(self) -> bool:
        return self.slice_wait_since is not None

    # -- Kueue: told by the JobSet, not the log ---------------------------------------------------

    def queued(self, at: float, *, preempted: bool, reason: str = "", eviction: str = "") -> None:
        """The JobSet is suspended from ``at``: waiting for its (first, or next) admission."""
        if self.queue_spans and self.queue_spans[-1][1] is None:
            return
        self.queue_spans.append([at, None])
        del self.queue_spans[:-MAX_QUEUE_SPANS]
        self.slice_wait_since = self.slice_wait_last_at = None
        if preempted:
            self.preempted_spans += 1
            opened, failed_step = self.open_recovery, self.latest_step
            if opened and opened.kind == SLICE_DOWN and opened.restored_at is None and opened.detected_at >= at:
                # The trainer's elastic event came after the suspension (its line read before the JobSet was seen
                # suspended): Kueue took the slices, so it is this preemption, not an in-process recovery.
                self.open_recovery, failed_step = None, opened.failed_step
            self._close_open()
            self.open_recovery = Recovery(
                detected_at=at, failed_step=failed_step, kind=PREEMPTION, reason=reason, eviction=eviction
            )

    def admitted(self, at: float) -> None:
        """The JobSet runs (again) from ``at``."""
        if self.first_admitted_at is None:
            self.first_admitted_at = at
        if self.queue_spans and self.queue_spans[-1][1] is None:
            self.queue_spans[-1][1] = max(at, float(self.queue_spans[-1][0] or 0.0))
        recovery = self.open_recovery
        if recovery is not None and recovery.kind == PREEMPTION and recovery.slices_ready_at is None:
            recovery.slices_ready_at = at

    def _preempted_waiting(self) -> bool:
        """A preemption is open and no trainer has restored since: the old trainer's pods went with it (their
        lines may come late, under load even after the admission again), so a lost slice then is Kueue's."""
        opened = self.open_recovery
        return opened is not None and opened.kind == PREEMPTION and opened.restored_at is None

    def note_preemption_reason(self, reason: str, eviction: str = "") -> None:
        """What Kueue said of the open preemption (its Evicted condition) and the eviction's kind, when not known."""
        recovery = self.open_recovery
        if recovery is None or recovery.kind != PREEMPTION:
            return
        if reason and not recovery.reason:
            recovery.reason = reason[:500]
        if eviction and not recovery.eviction:
            recovery.eviction = eviction

    def evictions(self, kind: str) -> int:
        """Kueue evictions of this incarnation of the kind ``kind`` (``operators.queueing.EvictionKind``)."""
        return sum(1 for r in self.all_recoveries if r.kind == PREEMPTION and r.eviction == kind)

    def provisioning(self, at: float) -> None:
        """Quota is reserved and the admission checks are pending from ``at`` (capacity being provisioned)."""
        if not self.provisioning_spans or self.provisioning_spans[-1][1] is not None:
            self.provisioning_spans.append([at, None])
            del self.provisioning_spans[:-MAX_QUEUE_SPANS]

    def provisioned(self, at: float) -> None:
        """No longer waiting on admission checks (admitted, evicted, or back in the queue) from ``at``."""
        if self.provisioning_spans and self.provisioning_spans[-1][1] is None:
            self.provisioning_spans[-1][1] = max(at, float(self.provisioning_spans[-1][0] or 0.0))

    def note_provisioning(self, at: float, said: str) -> None:
        """An admission check's outcome (Ready, Retry, Rejected and its message), kept once per provisioning and
        bounded: the same words said again in a later provisioning are that one's outcome."""
        opened = float(self.provisioning_spans[-1][0] or 0.0) if self.provisioning_spans else None
        _note(self.provisioning_notes, at, said, opened)

    def note_queue(self, at: float, said: str) -> None:
        """What Kueue says of a wait for quota (its QuotaReserved=False message), kept once per wait. The Workload may
        be read before the JobSet's suspension opens the wait: the view places each note in its wait by time."""
        newest = self.queue_spans[-1] if self.queue_spans else None
        # Said again after the newest wait ended (admitted), it is the next wait's.
        since = None if newest is None else float((newest[1] if newest[1] is not None else newest[0]) or 0.0)
        _note(self.queue_notes, at, said, since)

    def provisioning_seconds(self, now: float) -> float:
        return sum(max(0.0, (e if e is not None else now) - float(s or 0.0)) for s, e in self.provisioning_spans)

    def queued_seconds(self, now: float) -> float:
        """Seconds spent suspended (queued or preempted), an open wait counted until ``now``."""
        return sum(max(0.0, (end if end is not None else now) - float(start or 0.0)) for start, end in self.queue_spans)

    @property
    def suspended(self) -> bool:
        return bool(self.queue_spans) and self.queue_spans[-1][1] is None

    def _completed_step(self, at: float, step: int, seconds: float, line: str) -> None:
        self.slice_wait_since = self.slice_wait_last_at = None
        opened = self.open_recovery
        if opened is not None and opened.kind == PREEMPTION and opened.restored_at is None:
            opened.failed_step = step  # the old trainer's last steps, logged as its pods went
        self.latest_step = step
        self.latest_step_at = at
        self.progress_at = at
        self.steps_executed += 1
        seconds = max(0.0, seconds)
        self.step_seconds_total += seconds
        if self.first_step_at is None:
            self.first_step_at, self.first_step_seconds = at, seconds
        if self.awaiting_first_step:
            self.awaiting_first_step = False
            self.startup_steps += 1
            self.startup_step_seconds += seconds
        self._add_point(at, step)
        if (live := LIVE_SLICE_COUNT_RE.search(line)) is not None:
            self.live_slices = int(live.group(1))
        recovery = self.open_recovery
        if recovery is not None and recovery.restored_at is not None:
            recovery.first_step_at = at
            if recovery.slices is None:
                recovery.slices = self.live_slices
            self._close_open()

    def _add_point(self, at: float, step: int) -> None:
        n = self.steps_executed - 1
        if n % self.step_point_stride == 0:
            self.step_points.append([at, step, n])
        if len(self.step_points) > MAX_STEP_POINTS:
            self.step_point_stride *= 2
            self.step_points = [p for p in self.step_points if int(p[2]) % self.step_point_stride == 0]

    def _restored(self, at: float, step: int | None) -> None:
        self.restores += 1
        self.save_started_step = None  # a save begun before the restore is not one the next failure can interrupt
        self.progress_at = at
        self.last_restore_at, self.last_restored_step = at, step
        self.awaiting_first_step = True
        if self.steps_executed == 0 and self.resumed_from_step is None:
            self.resumed_from_step = -1 if step is None else step
        recovery = self.open_recovery
        if recovery is not None and recovery.restored_at is None:
            recovery.restored_at = at
            recovery.restored_step = step

    def _resumed_at_target(self, at: float, newest: int) -> None:
        # A preemption after the final step was committed: the trainer admitted again finds that checkpoint and
        # refuses to train (before any restore), so the run resumes at it with nothing to run again.
        recovery = self.open_recovery
        if recovery is not None and recovery.kind == PREEMPTION and recovery.restored_at is None:
            recovery.restored_at, recovery.restored_step = at, newest

    def _close_open(self) -> None:
        if self.open_recovery is not None:
            self.recoveries.append(self.open_recovery)
            del self.recoveries[:-MAX_RECOVERIES_KEPT]
            self.open_recovery = None

    @property
    def all_recoveries(self) -> list[Recovery]:
        """Finished recoveries, then the one in progress."""
        return [*self.recoveries, *([self.open_recovery] if self.open_recovery else [])]

    @property
    def trained_at(self) -> float | None:
        """The newest sign that the trainer trained: a completed step, or an in-process recovery it detected
        (pathwaysutils' elastic event, a scale-up), which only a training trainer logs. A restore, a wait for
        slices or their end are start-up too (pathwaysutils waits for slices before the first attempt), and a save
        follows a step; a preemption is Kueue's, told by the JobSet, not the trainer."""
        detected = (r.detected_at for r in self.all_recoveries if r.kind != PREEMPTION)
        return max((t for t in (self.latest_step_at, *detected) if t is not None), default=None)

    @property
    def mean_step_seconds(self) -> float | None:
        """The mean of the steady steps (start-up steps apart); of every step when all were start-up steps."""
        steady = self.steps_executed - self.startup_steps
        if steady > 0:
            return max(0.0, self.step_seconds_total - self.startup_step_seconds) / steady
        return self.step_seconds_total / self.steps_executed if self.steps_executed else None

    @property
    def points(self) -> list[tuple[float, int]]:
        """(time, step) of the thinned step series, with the latest step always last."""
        found = [(float(p[0]), int(p[1])) for p in self.step_points]
        latest_at = self.latest_step_at
        if latest_at is not None and self.latest_step is not None and (not found or found[-1][0] < latest_at):
            found.append((latest_at, self.latest_step))
        return found

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> LogDigest:
        if not data:
            return cls()
        values = copy.deepcopy(dict(data))
        values["recoveries"] = [Recovery(**r) for r in values.get("recoveries") or []]
        opened = values.get("open_recovery")
        values["open_recovery"] = Recovery(**opened) if opened else None
        values["queue_spans"] = [list(span) for span in values.get("queue_spans") or []]
        values["provisioning_spans"] = [list(span) for span in values.get("provisioning_spans") or []]
        values["provisioning_notes"] = [list(note) for note in values.get("provisioning_notes") or []]
        values["queue_notes"] = [list(note) for note in values.get("queue_notes") or []]
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


def _note(notes: list[list[Any]], at: float, said: str, opened: float | None) -> None:
    """Append ``[at, said]`` unless the newest note already says it within the span opened at ``opened``."""
    if not said:
        return
    if notes and notes[-1][1] == said[:500] and (opened is None or float(notes[-1][0] or 0.0) >= opened):
        return
    notes.append([at, said[:500]])
    del notes[:-MAX_QUEUE_SPANS]


@dataclass(frozen=True)
class CostModel:
    """Chips the run holds and what a chip-hour costs."""

    chips: int
    price_per_chip_hour: float = 0.0

    def cost(self, chip_seconds: float) -> float:
        return round(chip_seconds / 3600.0 * self.price_per_chip_hour, 6)


def recovery_report(recovery: Recovery, *, mean_step_seconds: float | None, costs: CostModel) -> RecoveryEntry:
    """One recovery as the run report shows it: steps, phase timestamps and durations, cost.

    Chip-seconds lost = chips x (detection to first step + steps lost x mean step time): the whole
    allocation waits while slices come back, then redoes the lost steps.
    """
    lost = recovery.steps_lost
    downtime = (recovery.first_step_at - recovery.detected_at) if recovery.first_step_at is not None else None
    redo = (lost or 0) * (mean_step_seconds or 0.0)
    chip_seconds = None if downtime is None else round(costs.chips * (max(0.0, downtime) + redo), 3)
    return RecoveryEntry(
        slices=recovery.slices,
        failed_step=recovery.failed_step,
        restored_step=recovery.restored_step,
        steps_lost=lost,
        detected_at=recovery.detected_at,
        slices_ready_at=recovery.slices_ready_at,
        restored_at=recovery.restored_at,
        first_step_at=recovery.first_step_at,
        phase_seconds=PhaseSeconds(**recovery.phases()),
        chip_seconds_lost=chip_seconds,
        cost=None if chip_seconds is None else costs.cost(chip_seconds),
        complete=recovery.complete,
        kind=recovery.kind,
        interrupted_save=recovery.interrupted_save,
    )


def preemption_report(recovery: Recovery, *, mean_step_seconds: float | None, costs: CostModel) -> PreemptionEntry:
    """One preemption as the run report shows it: when, how long it waited to be admitted again, steps lost.

    Its queue time spends no chip time (the slices went to another workload); the steps run again do.
    """
    lost = recovery.steps_lost
    redo = round(costs.chips * (lost or 0) * (mean_step_seconds or 0.0), 3)
    queued = None
    if recovery.slices_ready_at is not None:
        queued = round(max(0.0, recovery.slices_ready_at - recovery.detected_at), 3)
    return PreemptionEntry(
        at=recovery.detected_at,
        reason=recovery.reason,
        step=recovery.failed_step,
        readmitted_at=recovery.slices_ready_at,
        queued_seconds=queued,
        restored_step=recovery.restored_step,
        restored_at=recovery.restored_at,
        first_step_at=recovery.first_step_at,
        steps_lost=lost,
        chip_seconds_lost=redo if lost is not None else None,
        complete=recovery.complete,
        recreated=False,
        eviction=recovery.eviction,
    )


@dataclass(frozen=True)
class Incarnation:
    """One JobSet incarnation's share of a run: its name, restarts, evictions and folded log.

    ``slice_evictions``: slices taken by an eviction (maintenance, preemption), which spend no budget.
    """

    jobset_name: str
    slice_restarts: int
    jobset_restarts: int
    digest: LogDigest
    slice_evictions: int = 0


@dataclass(frozen=True)
class _Entries:
    """The report's recoveries and preemptions, and the productive step time of every incarnation."""

    recoveries: tuple[RecoveryEntry, ...]
    preemptions: tuple[PreemptionEntry, ...]
    productive_seconds: float


def _entries(incarnations: Sequence[Incarnation], escalations: Sequence[Escalation], costs: CostModel) -> _Entries:
    """Each incarnation's recoveries and preemptions with their cost, and the time of the steps it kept."""
    recoveries: list[RecoveryEntry] = []
    preemptions: list[PreemptionEntry] = []
    productive = 0.0
    # A preemption that ended its JobSet (the trainer's exit 0 on SIGTERM) was resumed by a new one: its restore
    # and steps lost are that recreation's.
    recreated = {str(e.jobset_name): e for e in escalations if e.preemption}
    for incarnation in incarnations:
        digest = incarnation.digest
        mean = digest.mean_step_seconds
        for r in digest.all_recoveries:
            if r.kind != PREEMPTION:
                recoveries.append(recovery_report(r, mean_step_seconds=mean, costs=costs))
                continue
            entry = preemption_report(r, mean_step_seconds=mean, costs=costs)
            again = recreated.get(incarnation.jobset_name) if r.restored_at is None else None
            if again is not None:
                lost = again.steps_lost or 0
                entry = dataclasses.replace(
                    entry,
                    restored_step=again.resumed_from_step,
                    steps_lost=lost,
                    chip_seconds_lost=round(costs.chips * lost * (mean or 0.0), 3),
                    recreated=True,
                )
            preemptions.append(entry)
        lost = sum(r.steps_lost or 0 for r in digest.all_recoveries)
        productive += (mean or 0.0) * max(0, digest.steps_executed - lost)
    return _Entries(tuple(recoveries), tuple(preemptions), productive)


def run_report(
    *,
    incarnations: list[Incarnation],
    escalations: Sequence[Escalation],
    namespace: str,
    run_directory: str,
    target_step: int,
    final_step: int | None,
    wall_seconds: float,
    costs: CostModel,
    full_restart_seconds_lost: float = 0.0,
    budgets: BudgetAllowances | None = None,
    checkpoint_period: int | None = None,
    checkpoint_save_seconds: float | None = None,
    ended_at: float | None = None,
    released_at: float | None = None,
) -> RunReport:
    """The run report (:class:`operators.run_report.RunReport`): counts, recoveries with cost, goodput.

    Escalations carry their own ``steps_lost``; the chip time between a full restart's delete and
    the new incarnation's first step is ``full_restart_seconds_lost`` (measured by the operator).
    ``budgets`` (the operator's allowances) travel with the report so a view of it can show each
    budget used against allowed; ``checkpoint_period`` and ``checkpoint_save_seconds`` feed the
    checkpoint-period advice (:mod:`operators.advice`; ``None`` when they were not measured).
    ``ended_at`` (Unix time the report is made; default: the newest time the digests know) closes an open queue
    wait and measures the tail after the last step. ``goodput`` is productive step time over the time the run
    held capacity (queue time apart); ``goodput_with_queue`` over the whole wall time. ``released_at``: when the
    last JobSet ended, as Kubernetes stamps it (:func:`holding_end`); the time from then to ``ended_at`` held no
    capacity, so it leaves the wall time and the tail and is told apart as ``capacity.resume_seconds``.
    """
    entries = _entries(incarnations, escalations, costs)
    last_step = incarnations[-1].digest.latest_step_at if incarnations else None
    started = None if ended_at is None else ended_at - wall_seconds
    held_until = holding_end(ended_at, released_at, max((t for t in (last_step, started) if t), default=None))
    resume = None if held_until is None or ended_at is None else round(ended_at - held_until, 3)
    wall_seconds = max(0.0, wall_seconds - (resume or 0.0))
    times = dataclasses.replace(capacity(incarnations, held_until or ended_at), resume_seconds=resume)
    base = RunReport(
        jobset_name=incarnations[-1].jobset_name if incarnations else None,
        namespace=namespace,
        run_directory=run_directory,
        target_step=target_step,
        final_step=final_step,
        chips=costs.chips,
        price_per_chip_hour=costs.price_per_chip_hour,
        capacity=times,
        wall_seconds=round(wall_seconds, 3),
        jobsets=tuple(i.jobset_name for i in incarnations),
        budgets=budgets or BudgetAllowances(),
        checkpoint_period=checkpoint_period,
        checkpoint_save_seconds=checkpoint_save_seconds,
    )
    return _counted(base, incarnations, escalations, entries, costs, wall_seconds, full_restart_seconds_lost)


def _counted(
    base: RunReport,
    incarnations: Sequence[Incarnation],
    escalations: Sequence[Escalation],
    entries: _Entries,
    costs: CostModel,
    wall_seconds: float,
    full_restart_seconds_lost: float,
) -> RunReport:
    """``base`` with the counts, the steps and chip time lost, and the goodput of the incarnations and escalations."""
    recoveries, preemptions = entries.recoveries, entries.preemptions
    escalation_steps_lost = sum(e.steps_lost or 0 for e in escalations)
    mean_all = _mean_step_seconds(incarnations)
    productive = max(0.0, entries.productive_seconds - escalation_steps_lost * (mean_all or 0.0))
    executed = sum(i.digest.steps_executed for i in incarnations)
    resumed = next((i.digest.resumed_from_step for i in incarnations if i.digest.resumed_from_step is not None), None)
    trained_nothing = executed == 0 and resumed is not None and resumed >= 0 and base.final_step == resumed
    # No step read and no restore either: the log was not read; an unknown goodput is not a zero one.
    goodput_known = wall_seconds > 0 and (executed > 0 or trained_nothing)
    kept = [p for p in preemptions if not p.recreated]
    chip_seconds = sum(r.chip_seconds_lost or 0.0 for r in recoveries) + sum(p.chip_seconds_lost or 0.0 for p in kept)
    chip_seconds += costs.chips * (full_restart_seconds_lost + escalation_steps_lost * (mean_all or 0.0))
    # Queue time is no training badput (ml-goodput-measurement keeps its badput kinds apart): the run held no chips.
    holding = max(0.0, wall_seconds - (base.capacity.queued_seconds if base.capacity else 0.0))
    return dataclasses.replace(
        base,
        slice_restarts=sum(i.slice_restarts for i in incarnations),
        slice_evictions=sum(i.slice_evictions for i in incarnations),
        in_process_recoveries=len(recoveries),
        scale_up_recoveries=sum(1 for r in recoveries if r.kind == SCALE_UP),
        preemptions=preemptions,
        preemption_count=sum(1 for p in preemptions if p.eviction in ("", PREEMPTED)),
        pods_ready_evictions=sum(1 for p in preemptions if p.eviction == PODS_READY_TIMEOUT),
        evictions=len(preemptions),
        full_restarts=sum(1 for e in escalations if not (e.preemption or e.relaxation or e.replan)),
        preemption_recreations=sum(1 for e in escalations if e.preemption),
        jobset_restarts=sum(i.jobset_restarts for i in incarnations),
        escalations=tuple(escalations),
        recoveries=recoveries,
        steps_lost=sum(r.steps_lost or 0 for r in recoveries)
        + sum(p.steps_lost or 0 for p in kept)
        + escalation_steps_lost,
        chip_seconds_lost=round(chip_seconds, 3),
        cost_lost=costs.cost(chip_seconds),
        mean_step_seconds=None if mean_all is None else round(mean_all, 6),
        goodput=round(min(1.0, productive / holding), 4) if goodput_known and holding > 0 else None,
        goodput_with_queue=round(min(1.0, productive / wall_seconds), 4) if goodput_known else None,
        steps_executed=executed,
        startup_step_seconds=round(sum(i.digest.startup_step_seconds for i in incarnations), 3),
        resumed_from_step=resumed,
        trained_nothing=trained_nothing,
    )


def holding_end(ended_at: float | None, released_at: float | None, not_before: float | None) -> float | None:
    """When the run stopped holding capacity: the JobSet's end ``released_at`` (Kubernetes' whole seconds, so
    never before ``not_before``: the last step seen, or the run's start) and never after the report, ``ended_at``;
    ``None`` when either end is unknown."""
    if ended_at is None or released_at is None:
        return None
    return min(ended_at, max(released_at, not_before or released_at))


def first_step_span(digest: LogDigest, end: float, *, started_at: float | None = None) -> tuple[float, float] | None:
    """(from, seconds) of an incarnation's start-up: its first admission to its first step, Kueue's waits apart.

    The one computation of the span, shown as the report's ``admission_to_first_step_seconds`` and as the view's
    start-up. Without an admission seen (a state store from before it was folded) it counts from ``started_at``;
    ``end`` closes a queue wait still open. ``None`` until the first step.
    """
    start = digest.first_admitted_at if digest.first_admitted_at is not None else started_at
    if start is None or digest.first_step_at is None:
        return None
    first = digest.first_step_at
    # Preemptions between the admission and the first step are queue time, not start-up.
    waits = sum(
        max(0.0, min(float(e if e is not None else end), first) - float(s or 0.0))
        for s, e in digest.queue_spans
        if float(s or 0.0) >= start
    )
    return start, round(max(0.0, first - start - waits), 3)


def capacity(incarnations: Sequence[Incarnation], ended_at: float | None) -> CapacityTimes:
    """Where the run's time went around its steps: queued, admission to first step, training, the tail after."""
    digests = [i.digest for i in incarnations]
    known = [t for d in digests for t in (d.latest_step_at, *(s for span in d.queue_spans for s in span)) if t]
    end = ended_at if ended_at is not None else max(known, default=0.0)
    queued = sum(d.queued_seconds(end) for d in digests)
    first = next((d for d in digests if d.first_step_at is not None), None)
    span = first_step_span(first, end) if first is not None and first.first_admitted_at is not None else None
    training = 0.0
    for d in digests:
        if d.first_step_at is None or d.latest_step_at is None:
            continue
        inside = sum(
            max(0.0, min(float(e if e is not None else end), d.latest_step_at) - max(float(s or 0.0), d.first_step_at))
            for s, e in d.queue_spans
        )
        training += max(0.0, d.latest_step_at - d.first_step_at - inside)
    last = digests[-1].latest_step_at if digests else None
    return CapacityTimes(
        queued_seconds=round(queued, 3),
        admission_to_first_step_seconds=None if span is None else span[1],
        training_seconds=round(training, 3),
        tail_seconds=None if last is None or ended_at is None else round(max(0.0, ended_at - last), 3),
        last_step_at=last,
        queue_spans=tuple((float(s or 0.0), e) for d in digests for s, e in d.queue_spans),
        provisioning_seconds=round(sum(d.provisioning_seconds(end) for d in digests), 3),
        provisioning_spans=tuple((float(s or 0.0), e) for d in digests for s, e in d.provisioning_spans),
        provisioning_notes=tuple((float(at or 0.0), str(said)) for d in digests for at, said in d.provisioning_notes),
        queue_notes=tuple((float(at or 0.0), str(said)) for d in digests for at, said in d.queue_notes),
    )


def _mean_step_seconds(incarnations: Sequence[Incarnation]) -> float | None:
    """The steady steps' mean over every incarnation (see :attr:`LogDigest.mean_step_seconds`)."""
    steps = sum(i.digest.steps_executed - i.digest.startup_steps for i in incarnations)
    seconds = sum(i.digest.step_seconds_total - i.digest.startup_step_seconds for i in incarnations)
    if steps > 0:
        return max(0.0, seconds) / steps
    everything = sum(i.digest.steps_executed for i in incarnations)
    return sum(i.digest.step_seconds_total for i in incarnations) / everything if everything else None
