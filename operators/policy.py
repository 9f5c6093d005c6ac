"""The restart budget and escalation decision: pure functions over observations, no I/O, no Airflow.

Four layers recover a failure, cheapest first: MaxText's in-process elastic retries, slice restarts
(the worker Job's ``backoffLimit``), JobSet restarts (``failurePolicy.maxRestarts``), and ours, the
full-job restart (delete the JobSet and create it again with the same run directory, so MaxText
resumes from the last committed step). :func:`decide` says when the fourth layer is warranted:

- the slice-restart budget is spent: more than ``max_slice_restarts`` slice restarts within the
  sliding ``slice_restart_window`` (in-process recovery keeps being undone by failing slices);
- training stalled: no progress (a completed step, a checkpoint save started or finished, an elastic
  recovery line, pathwaysutils' wait for slices within ``elastic_timeout_seconds``) for ``stall_timeout`` while the
  stall clock runs: only while the JobSet is admitted (not suspended) and its trainer has trained since its
  container started;
- the start-up took too long: the trainer's container has been up for ``startup_timeout`` without training
  (no completed step, no in-process recovery since it started). The start-up (JAX's start, pathwaysutils' first wait
  for slices, the restore, the step function's compilation) has a clock of its own, so that a big model's restore or
  compilation needs no long ``stall_timeout``, and a hang in training is caught after ``stall_timeout``. Every new
  trainer container starts up again: the first one, one after a JobSet restart, a preemption or a full restart (a
  new JobSet restoring the run's checkpoint);
- the JobSet failed for a reason a restart can mend (its ``failurePolicy`` gave up).

Success needs the JobSet ``Completed`` **and** a committed step at the final step: MaxText exits 0
after SIGTERM, so completion alone proves nothing. A JobSet completed short of its final step (a drain's or an
eviction's SIGTERM; never Kueue's suspension, whose pods the Job controller does not count) is restartable: a full
restart resumes it while the full-restart budget lasts.

Waiting is not stalling. A JobSet suspended by Kueue (queued before its admission, or preempted after it) spends
no budget and is never escalated: it is waited out, bounded only by ``queue_timeout`` (then the task fails, saying
how long it waited and what Kueue said), and one suspended in no queue at all (kubernetes-sigs/kueue #14811) is
reported as such under the same bound. Admitted but with its trainer's container not up yet (pods scheduling,
nodes being provisioned, images pulling) no clock runs either: neither the start-up's nor the stall's.

Each eviction reason is judged on its own (:data:`operators.queueing.EVICTION_COSTS`): a preemption, a stopped
queue, an admission check's retry or node failures are free and waited out as above; an eviction for a PodsReady
timeout (Kueue's ``waitForPodsReady``: the pods not all ready in time, e.g. a slice repair longer than its
``recoveryTimeout``) is waited out too, spending no restart budget, but counts toward ``max_pods_ready_evictions``:
one more than that fails the task (the run keeps losing its admission, and a restart would not mend it); a
deactivated Workload (``spec.active: false``, by a person, or by Kueue once its requeuing limit was reached) will
not be admitted again: the task fails at once, saying so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final

from elastic_training.operators.queueing import EVICTION_COSTS, EVICTION_WORDS, EvictionCost, EvictionKind

# The termination grace of an escalation's old pods when their trainer has nothing left to save (hung, starting up,
# or waiting for slices in an in-process recovery): 1 s, the kubelet's least (0 would force-delete the pod object
# while its processes may still run, and the next incarnation could start beside them).
SHORT_POD_GRACE_SECONDS: Final = 1


class JobSetPhase(StrEnum):
    """Where the JobSet stands, from its ``status.terminalState`` and conditions."""

    ACTIVE = "active"
    COMPLETED = "completed"
    FAILED = "failed"
    MISSING = "missing"  # deleted by someone else
    SUSPENDED = "suspended"  # spec.suspend (Kueue holds it: queued, or preempted)


class RunPhase(StrEnum):
    """Where the run stands, as the log and the view name it."""

    QUEUED = "queued"  # suspended, never admitted yet
    STARTING = "starting"  # admitted; pods scheduling, images pulling, then the trainer's start-up until it trains
    TRAINING = "training"
    RECOVERING = "recovering"  # in process: pathwaysutils' wait for slices, the restore, the first step after
    PREEMPTED = "preempted"  # suspended after an admission
    NOT_QUEUED = "not_queued"  # suspended, and pending in no queue (kubernetes-sigs/kueue #14811)
    PROVISIONING = "provisioning"  # suspended, quota reserved, its admission checks (a ProvisioningRequest) pending
    EVICTED = "evicted"  # suspended after an eviction that is not a preemption (pods-ready timeout, queue stopped, ...)
    DEACTIVATED = "deactivated"  # suspended, its Workload deactivated: nothing admits it
    ENDED = "ended"  # completed, failed or gone


class Action(StrEnum):
    """What the operator does next."""

    CONTINUE = "continue"
    ESCALATE = "escalate"
    SUCCEED = "succeed"
    FAIL = "fail"


class Reason(StrEnum):
    """Why :func:`decide` chose its action."""

    RUNNING = "running"
    SLICE_RESTART_BUDGET = "slice_restart_budget_spent"
    STALLED = "stalled"
    STARTUP_TIMED_OUT = "startup_timed_out"
    JOBSET_FAILED = "jobset_failed"
    COMPLETED = "completed"
    COMPLETED_SHORT = "completed_short_of_target"
    COMPLETED_UNCHECKED = "completed_checkpoint_not_checked"
    FULL_RESTART_BUDGET = "full_restart_budget_spent"
    PERMANENT_FAILURE = "permanent_failure"
    JOBSET_MISSING = "jobset_missing"
    STARTING = "starting"
    QUEUED = "queued"
    PREEMPTED = "preempted"
    NOT_QUEUED = "not_queued"
    PROVISIONING = "provisioning"
    QUEUE_TIMEOUT = "queue_timeout"
    ALREADY_AT_TARGET = "already_at_target"
    PODS_READY_TIMEOUT = "pods_ready_timeout"  # evicted for a PodsReady timeout, waiting to be requeued
    QUEUE_STOPPED = "queue_stopped"  # evicted because its queue was stopped, waiting for it to start again
    EVICTED = "evicted"  # evicted for another reason (an admission check, node failures), waiting
    PODS_READY_EVICTIONS = "pods_ready_evictions_exceeded"  # more than max_pods_ready_evictions
    DEACTIVATED = "deactivated"  # its Workload deactivated: nothing will admit it
    REQUEUING_LIMIT_EXCEEDED = "requeuing_limit_exceeded"  # deactivated by Kueue at backoffLimitCount
    NEVER_FITS = "never_fits"  # asks for more than its ClusterQueue can ever hold: no wait will admit it


@dataclass(frozen=True)
class Budgets:
    """The operator's own budgets (seconds for durations).

    ``queue_timeout_seconds``: how long one wait for Kueue's admission may last (``None``: as long as it takes);
    ``elastic_timeout_seconds``: MaxText's per-attempt wait for slices, the bound of that wait as progress;
    ``startup_timeout_seconds``: how long a trainer container may run before it trains (``None``: bounded by
    ``stall_timeout_seconds``, as budgets written before this bound existed were);
    ``max_pods_ready_evictions``: Kueue evictions for a PodsReady timeout the run may take (``None``: any number,
    as budgets written before this bound existed were).
    """

    max_slice_restarts: int
    slice_restart_window_seconds: float
    stall_timeout_seconds: float
    max_full_restarts: int
    queue_timeout_seconds: float | None = None
    elastic_timeout_seconds: float | None = None
    startup_timeout_seconds: float | None = None
    max_pods_ready_evictions: int | None = None

    def __post_init__(self) -> None:
        if self.max_slice_restarts < 0 or self.max_full_restarts < 0:
            raise ValueError("restart budgets must be >= 0")
        if self.max_pods_ready_evictions is not None and self.max_pods_ready_evictions < 0:
            raise ValueError("max_pods_ready_evictions must be >= 0, or None")
        if self.slice_restart_window_seconds <= 0 or self.stall_timeout_seconds <= 0:
            raise ValueError("the slice-restart window and the stall timeout must be positive")
        for name in ("queue_timeout_seconds", "elastic_timeout_seconds", "startup_timeout_seconds"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive, or None")

    def to_json(self) -> dict[str, Any]:
        """The budgets as JSON (a trigger's kwargs, the run report); an unset optional bound is left out."""
        return {name: value for name, value in asdict(self).items() if value is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Budgets:
        """The budgets :meth:`to_json` wrote (the optional bounds may also be present as ``None``)."""
        return cls(**data)


@dataclass(frozen=True)
class QueueWait:
    """The JobSet is suspended: since when this wait began, whether it follows an admission, what Kueue says."""

    since: float
    preempted: bool = False
    not_queued: bool = False  # suspended, but pending in no queue (no Workload, or one neither pending nor admitted)
    reason: str = ""  # Kueue's words: the Workload's QuotaReserved=False or Evicted condition
    provisioning: bool = False  # quota reserved; waiting for its admission checks (flex-start's ProvisioningRequest)
    eviction: str = ""  # the eviction's kind (operators.queueing.EvictionKind), "" when none is known
    pods_ready_evictions: int = 0  # Kueue evictions for a PodsReady timeout in the run so far, this one included
    requeue_at: float | None = None  # the end of Kueue's requeuing backoff (status.requeueState.requeueAt)
    # Kueue's words on why it can never admit the JobSet as its ClusterQueue stands (a pod set above its maximum
    # capacity, ...), said without a break for the grace; "" otherwise
    never_fits: str = ""


@dataclass(frozen=True)
class Observation:
    """What is known about the current JobSet incarnation at time ``now`` (Unix seconds).

    ``waiting`` is set while the JobSet is suspended (queued or preempted); ``progress_at`` is ``None`` while the
    stall clock does not run (suspended, admitted with its trainer not up yet, or starting up).
    ``starting_since`` is set while the trainer starts up: its container runs since then and has not trained yet
    (the start-up clock runs); ``startup_detail`` says what it was last seen doing.
    ``slice_restart_times`` holds when each slice restart of this incarnation began, by Kubernetes' clock
    (one per slice failure, however many of its pods failed; evictions are not restarts, see
    :mod:`operators.slice_failures`); ``progress_at`` the last
    sign of training progress (a completed step, a checkpoint save started or finished, or an elastic
    recovery line), or when the incarnation started; ``committed_step`` is ``None`` when storage was not read.
    ``failure_detail`` carries a failed JobSet's reason and, when the trainer itself refused to run
    (an invalid configuration), ``permanent`` says a restart cannot help.
    """

    now: float
    phase: JobSetPhase
    target_step: int
    full_restarts_used: int
    progress_at: float | None
    slice_restart_times: Sequence[float] = ()
    committed_step: int | None = None
    latest_step: int | None = None
    failure_detail: str = ""
    permanent: bool = False
    waiting: QueueWait | None = None
    # Preempted and not restored since (a completion now is not the preemption's doing: see _completed).
    preempted: bool = False
    # The trainer refused to train because its run already reached its target (MaxText's "checkpoint already
    # exists" RuntimeError, exit 1): done, once the committed step says so.
    already_at_target: bool = False
    starting_since: float | None = None
    startup_detail: str = ""
    # In an in-process recovery that has not trained since: waiting for its slices, or restoring.
    recovering: bool = False


@dataclass(frozen=True)
class Decision:
    """The action, why, and a message a person can act on."""

    action: Action
    reason: Reason
    message: str
    # Continuing: the moment the stall rule (or startup_timeout, or queue_timeout) would fire if nothing changes.
    recheck_at: float | None = None
    # Escalating: the grace period the old incarnation's pods get (``None``: their own terminationGracePeriodSeconds,
    # time for a trainer that is training to save on SIGTERM).
    pod_grace_seconds: int | None = None


def slice_restarts_in_window(times: Sequence[float], now: float, window_seconds: float) -> int:
    """Slice restarts within the sliding window ending at ``now``.

    The times are Kubernetes' (the API server's and kubelets' clocks), ``now`` is the caller's: a restart
    stamped after ``now`` by a clock slightly ahead is in the window, not ignored.
    """
    return sum(1 for t in times if now - window_seconds < t)


def decide(obs: Observation, budgets: Budgets) -> Decision:
    """The next action for one observation of the run."""
    if obs.phase is JobSetPhase.COMPLETED:
        return _completed(obs, budgets)
    if obs.phase is JobSetPhase.MISSING:
        return Decision(
            Action.FAIL,
            Reason.JOBSET_MISSING,
            "the JobSet was deleted outside this task; not recreating it (the run directory is untouched)",
        )
    if obs.phase is JobSetPhase.FAILED and obs.already_at_target and (done := _already_at_target(obs)) is not None:
        return done
    if obs.phase is JobSetPhase.FAILED and obs.permanent:
        return Decision(
            Action.FAIL,
            Reason.PERMANENT_FAILURE,
            f"the JobSet failed and a restart cannot help: {obs.failure_detail}",
        )
    if obs.phase is JobSetPhase.SUSPENDED or obs.waiting is not None:
        return _waiting(obs, budgets)
    in_window = slice_restarts_in_window(obs.slice_restart_times, obs.now, budgets.slice_restart_window_seconds)
    if in_window > budgets.max_slice_restarts:
        # Checked before a JobSet failure: the worker Job's backoffLimit is this same budget, so a JobSet
        # failed by slices that kept dying is reported as the budget it spent.
        window = _duration(budgets.slice_restart_window_seconds)
        ended = f"; the JobSet failed: {obs.failure_detail}" if obs.phase is JobSetPhase.FAILED else ""
        return _escalate(
            obs,
            budgets,
            Reason.SLICE_RESTART_BUDGET,
            f"{in_window} slice restarts within {window} exceed max_slice_restarts={budgets.max_slice_restarts}"
            + ended,
        )
    if obs.phase is JobSetPhase.FAILED:
        return _escalate(obs, budgets, Reason.JOBSET_FAILED, f"the JobSet failed: {obs.failure_detail or 'no reason'}")
    if obs.starting_since is not None:
        return _starting(obs, budgets)
    if obs.progress_at is None:
        return Decision(
            Action.CONTINUE,
            Reason.STARTING,
            "admitted; waiting for the trainer's container to start (no clock runs: pods scheduling, images pulling)",
        )
    stall_at = obs.progress_at + budgets.stall_timeout_seconds
    if obs.now >= stall_at:
        step = "no step yet" if obs.latest_step is None else f"last completed step {obs.latest_step}"
        return _escalate(
            obs,
            budgets,
            Reason.STALLED,
            f"no training progress for {_duration(obs.now - obs.progress_at)} "
            f"(stall_timeout={_duration(budgets.stall_timeout_seconds)}; {step})",
        )
    return Decision(Action.CONTINUE, Reason.RUNNING, "training", recheck_at=stall_at)


def _starting(obs: Observation, budgets: Budgets) -> Decision:
    """The trainer's container is up and has not trained yet: bounded by ``startup_timeout``, not the stall clock."""
    since = obs.starting_since if obs.starting_since is not None else obs.now
    bound, name = budgets.startup_timeout_seconds, "startup_timeout"
    if bound is None:  # budgets from before startup_timeout existed: the start-up ran on the stall clock
        bound, name = budgets.stall_timeout_seconds, "stall_timeout"
    doing = obs.startup_detail or "nothing logged of its start-up"
    timeout_at = since + bound
    if obs.now >= timeout_at:
        return _escalate(
            obs,
            budgets,
            Reason.STARTUP_TIMED_OUT,
            f"the trainer has not trained since its container started {_duration(obs.now - since)} ago "
            f"({name}={_duration(bound)}; {doing})",
        )
    return Decision(
        Action.CONTINUE,
        Reason.STARTING,
        f"the trainer is starting up ({doing}): the start-up clock runs ({name}={_duration(bound)}), "
        "the stall clock from its first step",
        recheck_at=timeout_at,
    )


def _waiting(obs: Observation, budgets: Budgets) -> Decision:
    """Suspended by Kueue: wait, spending nothing, until admitted again or ``queue_timeout`` has passed; a deactivated
    Workload or one pods-ready eviction too many fails at once."""
    wait = obs.waiting or QueueWait(since=obs.now)
    waited = max(0.0, obs.now - wait.since)
    said = f"; Kueue: {wait.reason}" if wait.reason else ""
    ended = _evicted_for_good(wait, budgets, said)
    if ended is not None:
        return ended
    if wait.never_fits and not wait.provisioning:
        return Decision(
            Action.FAIL,
            Reason.NEVER_FITS,
            f"Kueue can never admit the JobSet as its ClusterQueue stands ({wait.never_fits}): ask for fewer or "
            f"smaller slices, a queue whose flavors match them, or more quota from the ClusterQueue's admin; "
            f"failing after {_duration(waited)} instead of waiting out queue_timeout",
        )
    if wait.not_queued:
        reason = Reason.NOT_QUEUED
        what = (
            "suspended and pending in no Kueue queue (no Workload, or one neither pending nor admitted: "
            "kubernetes-sigs/kueue #14811), so nothing will admit it unless it is requeued"
        )
    elif wait.provisioning:
        reason = Reason.PROVISIONING
        what = "quota reserved by Kueue, waiting for its admission checks (capacity being provisioned)"
    elif wait.preempted:
        reason, what = _evicted_wait(wait, budgets)
    else:
        reason, what = Reason.QUEUED, "queued by Kueue and waiting for admission"
    timeout = budgets.queue_timeout_seconds
    if timeout is not None and waited >= timeout:
        return Decision(
            Action.FAIL,
            Reason.QUEUE_TIMEOUT,
            f"not admitted after waiting {_duration(waited)} (queue_timeout={_duration(timeout)}): {what}{said}",
        )
    return Decision(
        Action.CONTINUE,
        reason,
        f"{what} for {_duration(waited)} (no budget spent){said}",
        recheck_at=None if timeout is None else wait.since + timeout,
    )


def _evicted_wait(wait: QueueWait, budgets: Budgets) -> tuple[Reason, str]:
    """Why an admitted JobSet waits again, by its eviction's kind (a preemption when none is known)."""
    kind = _eviction(wait.eviction)
    if kind is EvictionKind.PODS_READY_TIMEOUT:
        limit = budgets.max_pods_ready_evictions
        count = f"pods-ready eviction {wait.pods_ready_evictions}" + ("" if limit is None else f" of at most {limit}")
        backoff = (
            "" if wait.requeue_at is None else f"; Kueue requeues it after its backoff, at {_clock(wait.requeue_at)}"
        )
        return Reason.PODS_READY_TIMEOUT, f"{EVICTION_WORDS[kind]}, and waiting to be admitted again ({count}{backoff})"
    if kind is EvictionKind.QUEUE_STOPPED:
        return Reason.QUEUE_STOPPED, f"{EVICTION_WORDS[kind]}, and waiting for the queue to be started again"
    if kind is EvictionKind.PREEMPTED:
        return Reason.PREEMPTED, "preempted by Kueue and waiting to be admitted again"
    return Reason.EVICTED, f"{EVICTION_WORDS[kind]}, and waiting to be admitted again"


def _evicted_for_good(wait: QueueWait, budgets: Budgets, said: str) -> Decision | None:
    """The failure of a run Kueue will not admit again (deactivated), or one evicted too often for its pods'
    readiness; ``None`` for any other wait."""
    kind = _eviction(wait.eviction)
    if EVICTION_COSTS.get(kind) is EvictionCost.ENDS_RUN:
        reason = (
            Reason.REQUEUING_LIMIT_EXCEEDED if kind is EvictionKind.REQUEUING_LIMIT_EXCEEDED else Reason.DEACTIVATED
        )
        return Decision(
            Action.FAIL,
            reason,
            f"Kueue will not admit the JobSet again: it was {EVICTION_WORDS[kind]}, and stays suspended until someone "
            f"sets the Workload's spec.active back to true; the run directory is untouched, a new try resumes it from "
            f"its last committed checkpoint{said}",
        )
    limit = budgets.max_pods_ready_evictions
    if kind is EvictionKind.PODS_READY_TIMEOUT and limit is not None and wait.pods_ready_evictions > limit:
        return Decision(
            Action.FAIL,
            Reason.PODS_READY_EVICTIONS,
            f"Kueue evicted the JobSet {wait.pods_ready_evictions} times because its pods were not all ready in time "
            f"(PodsReadyTimeout), more than max_pods_ready_evictions={limit}: its pods keep missing Kueue's "
            "waitForPodsReady timeout or recoveryTimeout (a slice repair or pod scheduling slower than Kueue waits), "
            f"which a restart cannot mend; raise Kueue's recoveryTimeout, or the limit{said}",
        )
    return None


def _eviction(value: str) -> EvictionKind:
    try:
        return EvictionKind(value) if value else EvictionKind.PREEMPTED
    except ValueError:
        return EvictionKind.OTHER


def _completed(obs: Observation, budgets: Budgets) -> Decision:
    if obs.committed_step is None:
        return Decision(
            Action.FAIL,
            Reason.COMPLETED_UNCHECKED,
            "the JobSet completed but its checkpoints were not read; success needs a committed final step",
        )
    if obs.committed_step >= obs.target_step:
        return Decision(
            Action.SUCCEED,
            Reason.COMPLETED,
            f"the JobSet completed with committed step {obs.committed_step} (target {obs.target_step})",
        )
    reached = "no committed step" if obs.committed_step < 0 else f"newest committed step {obs.committed_step}"
    # MaxText exits 0 after SIGTERM (a node drain, an eviction) or a failed save: the run was stopped, not
    # finished, and resuming from the last committed step mends it like any other restartable failure.
    # A Kueue preemption is never the cause: the Job controller takes its tracking finalizer off each pod it deletes for
    # a suspension before deleting it, so that pod counts for nothing, whatever it exits with (kubernetes/kubernetes
    # pkg/controller/job/job_controller.go, deleteJobPods, getValidPodsWithFilter). A head Job that completes while
    # preempted had its pod end for another reason (an eviction, a drain: a pod deleted by someone else keeps its
    # finalizer and, with the head's podFailurePolicy, counts as succeeded on exit 0), or end by itself before the
    # suspension reached it: the same rule and the same budget as without the preemption.
    during = " while preempted by Kueue (its suspension completes no Job: the head pod ended otherwise)"
    return _escalate(
        obs,
        budgets,
        Reason.COMPLETED_SHORT,
        f"the JobSet completed{during if obs.preempted else ''} but training did not reach its final step: "
        f"{reached}, target step {obs.target_step} (MaxText exits 0 after SIGTERM or a failed save; completion "
        "alone is not success)",
    )


def _already_at_target(obs: Observation) -> Decision | None:
    """The trainer found its run finished: success when the committed step agrees; ``None`` when it does not (the
    newest step MaxText saw may be invalid: the usual rules restart it, quarantining that step first)."""
    if obs.committed_step is None:
        return Decision(
            Action.FAIL,
            Reason.COMPLETED_UNCHECKED,
            "the trainer refused to train a run already at its target, but its checkpoints were not read; "
            "success needs a committed final step",
        )
    if obs.committed_step < obs.target_step:
        return None
    return Decision(
        Action.SUCCEED,
        Reason.ALREADY_AT_TARGET,
        f"the run was already at its target: the trainer found a checkpoint at its final step and refused to train "
        f"again (MaxText's exit 1), and the committed step is {obs.committed_step} (target {obs.target_step})",
    )


def _escalate(obs: Observation, budgets: Budgets, reason: Reason, why: str) -> Decision:
    if obs.full_restarts_used >= budgets.max_full_restarts:
        return Decision(
            Action.FAIL,
            Reason.FULL_RESTART_BUDGET,
            f"full-restart budget spent: max_full_restarts={budgets.max_full_restarts} "
            f"and {obs.full_restarts_used} used; the run needed another because {why}",
        )
    return Decision(
        Action.ESCALATE,
        reason,
        f"full restart {obs.full_restarts_used + 1} of {budgets.max_full_restarts}: {why}",
        pod_grace_seconds=_pod_grace(obs, reason),
    )


# The reasons whose old trainer is past saving anything: no step in stall_timeout, or none since it started.
_PAST_SAVING: Final = frozenset({Reason.STALLED, Reason.STARTUP_TIMED_OUT})


def _pod_grace(obs: Observation, reason: Reason) -> int | None:
    """A short grace for old pods whose trainer can save nothing on SIGTERM; ``None`` (their own) otherwise.

    A hung trainer or one that never trained has no step to save, and one waiting for its slices has no slices to
    save with: their full grace (30 s for a TPU worker, longer for a head that ignores SIGTERM while it hangs) would
    only hold the slices from the next incarnation. A trainer that may be training keeps its grace: on SIGTERM
    MaxText stops at a step boundary (``StopTraining``, exit 0), and a save in flight needs the time to commit.
    """
    if reason in _PAST_SAVING or (reason is Reason.SLICE_RESTART_BUDGET and obs.recovering):
        return SHORT_POD_GRACE_SECONDS
    return None


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _clock(at: float) -> str:
    """A Unix time as UTC wall-clock time (``HH:MM:SS UTC``), for messages."""
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S UTC")
