"""Seeded fault schedules for the chaos harness (`benchmarks/chaos.py`): pure data, no I/O, no Airflow.

Run ``i`` of seed ``s`` draws everything from ``random.Random(s + i)``, so the same seed always gives the
same schedules. Each schedule says what the run is (steps, slices, budgets) and which faults hit it at
which completed training step, and :meth:`Schedule.expected` works out, from the schedule alone, which
full restarts the operator should make and whether the run fits its budgets.

A third, ``kueue="provisioning"``, runs in a flex-start queue (xpk's ``dws-prov`` admission check, queued-provisioning
node pools) and meets a delayed, failed or revoked ProvisioningRequest.

Two Kueue dimensions (``kueue="preempt"`` or ``"queue-wait"``) run behind ``v5e-small``'s ``multislice-queue`` at a low
priority and meet another team's higher-priority JobSet (a blocker): it arrives mid-training and Kueue preempts the
run, or it holds the whole quota when the run is submitted and the run waits longer than its stall timeout. Their
runs keep the seed's shape (steps, slices, budgets) and carry that one Kueue fault and no other: the promise is
absolute (no full restart, no slice restart), which the other faults would legitimately break. A third
(``kueue="pods-ready"``) runs with Kueue's ``waitForPodsReady`` on: GKE repairs the node pool of one of the run's slices
for longer than Kueue's ``recoveryTimeout`` while a blocker holds every other pool, so Kueue evicts the whole JobSet
(``PodsReadyTimeout``) and the run must wait it out and resume from its checkpoint, spending no budget.

With ``history=True`` (the history dimension) a run has the same faults as without it, and its DAG turns both of the
closed loop's options on: ``avoid_failing_node_pools`` and ``checkpoint_period="auto"``, over one failure history
that the lane's runs share, as a DAG's nightly runs share theirs (``benchmarks/chaos.py``).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field, replace
from typing import Any

CHECKPOINT_PERIOD = 10
STALL_TIMEOUT_SECONDS = 60

# Fault kinds, in the order the docs list them.
DELETE_WORKERS = "delete_workers"  # force-delete worker pods (kubectl delete --grace-period=0 --force)
KILL_WORKERS = "kill_workers"  # SIGKILL the worker containers (restart in place)
KILL_DURING_SAVE = "kill_during_save"  # the trainer SIGKILLs itself before the commit marker of a step
FREEZE_TRAINER = "freeze_trainer"  # SIGSTOP the trainer: only the stall rule can notice
API_ERRORS = "api_errors"  # a burst of HTTP 500 or 429 answers from the API server
API_LATENCY = "api_latency"  # every API request delayed from then on
EXPIRE_WATCHES = "expire_watches"  # every open watch ended and the history compacted (410 on resume)
KILL_TASK = "kill_task"  # SIGKILL the Airflow task process mid-watch (its inline trigger with it), then rerun
GCS_ERRORS = "gcs_errors"  # GCS (the emulator) answers 503: the next `count` requests, or all for `seconds`
PREEMPT = "preempt"  # a higher-priority blocker of `slices` v5e-16 slices arrives; it runs `seconds`, then goes
QUEUE_WAIT = "queue_wait"  # a blocker holds all the quota at submission, for the stall timeout plus `seconds`
PROVISION = "provision"  # flex-start: the run's ProvisioningRequest is delayed, fails once, or its capacity is revoked
PODS_READY = "pods_ready"  # slice `slices[0]`'s node pool repaired for `seconds`, past Kueue's recoveryTimeout

KUEUE_DIMENSIONS = ("preempt", "queue-wait", "provisioning", "pods-ready")
_RUN_NAME_PREFIXES = {"preempt": "preempt-", "queue-wait": "queue-", "provisioning": "prov-", "pods-ready": "ready-"}
# Provisioning outcomes (benchmarks/chaos_kueue.py; local/gke/provisioning_requests.py's faults): the request takes
# `seconds` (past the stall timeout sometimes: provisioning is waiting, not stalling); fails once and Kueue's retry
# provisions (in `seconds`); or, at `step`, the capacity is revoked (Kueue deactivates the Workload).
PROVISION_DELAY, PROVISION_FAIL, PROVISION_REVOKE = "delay", "fail", "revoke"
PROVISION_OUTCOMES = (PROVISION_DELAY, PROVISION_FAIL, PROVISION_REVOKE)
PROVISION_SECONDS = (5.0, 90.0)
# pods-ready: Kueue's recoveryTimeout, under the runs' elastic_timeout_seconds (half the stall timeout), so Kueue
# evicts while MaxText still waits for the slice; the repair outlasts it by 13 to 48 s.
PODS_READY_RECOVERY_TIMEOUT_SECONDS = 12
PODS_READY_BACKOFF_SECONDS = 5
PODS_READY_REPAIR_SECONDS = (25.0, 60.0)
QUEUE_CHIPS = 64  # v5e-small's cluster-queue: 4 slices of v5litepod-16
SLICE_CHIPS = 16
# A blocker runs this long after its pods all run (preempt), or the run waits this much past its stall timeout.
PREEMPT_HOLD_SECONDS = (5.0, 90.0)  # past the stall timeout sometimes: a preemption is waiting, not stalling
QUEUE_WAIT_EXTRA_SECONDS = (10.0, 40.0)

# A burst of at most this many 503s is ridden out: gcsfs (Orbax's file I/O) tries a request 6 times, and
# tensorstore and google-cloud-storage retry longer. An outage outlasts gcsfs's backoff (1+2+4+8+16 s and
# jitter) when it is longer than 36 s: a save then fails and the trainer exits, or its next save waits
# long enough to stall. Either way one full restart may follow, never two (the outage is over by then).
GCS_BURST_MAX = 5
GCS_OUTAGE_SECONDS = (36.0, 45.0)
# A burst fails no save, but the save it meets waits out the clients' backoff: up to 36 s for 5 failures in a row
# on one request (benchmarks/gcs_burst_delay.py, alone), and 65 s once under the matrix's load (run 14 of the
# --gcs matrix at 969752b: the trainer waited that long for the save of step 30 before its final save). A stall
# timeout at or under this can see that wait as a stall: a burst may then cost one full restart (`stalled`).
GCS_BURST_DELAY_SEEN_SECONDS = 65.0

SLICE_FAULTS = (DELETE_WORKERS, KILL_WORKERS)


@dataclass(frozen=True)
class Fault:
    """One fault, fired once when the trainer has completed ``step``."""

    step: int
    kind: str
    slices: tuple[int, ...] = ()
    code: int = 0
    count: int = 0
    seconds: float = 0.0
    outcome: str = ""  # a provision fault's: delay, fail or revoke

    def describe(self) -> str:
        if self.kind in SLICE_FAULTS:
            verb = "delete" if self.kind == DELETE_WORKERS else "SIGKILL"
            return f"@{self.step} {verb} slice {','.join(map(str, self.slices))}"
        if self.kind == API_ERRORS:
            return f"@{self.step} {self.count}x HTTP {self.code}"
        if self.kind == API_LATENCY:
            return f"@{self.step} +{self.seconds:.2f}s latency"
        if self.kind == EXPIRE_WATCHES:
            return f"@{self.step} expire watches"
        if self.kind == FREEZE_TRAINER:
            return f"@{self.step} SIGSTOP trainer"
        if self.kind == KILL_TASK:
            return f"@{self.step} SIGKILL task, rerun"
        if self.kind == GCS_ERRORS:
            what = f"{self.count}x GCS 503" if self.count else f"GCS 503 for {self.seconds:.0f}s"
            return f"@{self.step} {what}"
        if self.kind == PREEMPT:
            return f"@{self.step} preempted by {len(self.slices)} slices for {self.seconds:.0f}s"
        if self.kind == QUEUE_WAIT:
            return f"@0 queued behind {len(self.slices)} slices, stall timeout +{self.seconds:.0f}s"
        if self.kind == PROVISION:
            if self.outcome == PROVISION_REVOKE:
                return f"@{self.step} flex capacity revoked"
            if self.outcome == PROVISION_FAIL:
                return f"@0 flex provisioning fails once, then {self.seconds:.0f}s"
            return f"@0 flex provisioning takes {self.seconds:.0f}s"
        if self.kind == PODS_READY:
            return (
                f"@{self.step} slice {','.join(map(str, self.slices))} repaired {self.seconds:.0f}s (> recoveryTimeout)"
            )
        return f"@{self.step} {self.kind}"


@dataclass(frozen=True)
class Expected:
    """What the schedule alone says should happen: the full restarts (reasons) and whether they fit.

    ``possible`` are full restarts that may or may not come (a GCS outage: a save fails, or it only waits; a
    GCS burst under a stall timeout it can outlast: the save it met waits out the clients' backoff, or not);
    ``survivable`` holds when the budget covers the certain and the possible ones together.
    """

    escalations: tuple[str, ...]
    survivable: bool
    possible: tuple[str, ...] = ()


@dataclass(frozen=True)
class Schedule:
    """One chaos run: its shape, budgets and faults."""

    seed: int
    index: int
    steps: int
    num_slices: int
    max_slice_restarts: int
    max_full_restarts: int
    kill_during_save_step: int | None
    faults: tuple[Fault, ...] = field(default=())
    checkpoint_period: int = CHECKPOINT_PERIOD
    stall_timeout_seconds: int = STALL_TIMEOUT_SECONDS
    gcs: bool = False  # the run directory is on gs:// (the emulator, behind a proxy that can answer 503)
    kueue: str = ""  # "preempt" or "queue-wait": the run is in multislice-queue and meets a blocker; "provisioning":
    # the run is in a flex-start queue (xpk's dws-prov check) and its ProvisioningRequest meets the fault;
    # "pods-ready": Kueue's waitForPodsReady is on and a slice's repair outlasts its recoveryTimeout
    history: bool = False  # both history options on, over the lane's shared failure history

    @property
    def run_name(self) -> str:
        kueue = _RUN_NAME_PREFIXES.get(self.kueue, "")
        return f"chaos-{'gcs-' if self.gcs else ''}{kueue}{'hist-' if self.history else ''}s{self.seed}-r{self.index}"

    @property
    def kueue_fault(self) -> Fault | None:
        """The run's Kueue fault, if any: a preemption, a queue wait, a provisioning outcome or a pods-ready repair."""
        return next((f for f in self.faults if f.kind in (PREEMPT, QUEUE_WAIT, PROVISION, PODS_READY)), None)

    @property
    def target_step(self) -> int:
        return self.steps - 1

    def expected(self) -> Expected:
        """Walk the faults in step order: which full restarts they warrant, and whether the budget covers them.

        A full restart resumes from the last checkpoint, and faults fire in step order as training gets
        there again, so the slice restarts of one incarnation are those fired since the last full restart.
        """
        events: list[tuple[float, str, int]] = [(f.step, f.kind, len(f.slices)) for f in self.faults]
        if self.kill_during_save_step is not None:
            events.append((self.kill_during_save_step + 0.5, KILL_DURING_SAVE, 0))  # after the step, in its save
        escalations: list[str] = []
        slice_restarts = 0
        for _, kind, slices in sorted(events, key=lambda e: e[0]):
            if kind in SLICE_FAULTS:
                slice_restarts += slices
                if slice_restarts > self.max_slice_restarts:
                    escalations.append("slice_restart_budget_spent")
                    slice_restarts = 0
            elif kind == FREEZE_TRAINER:
                escalations.append("stalled")
                slice_restarts = 0
            elif kind == KILL_DURING_SAVE:
                escalations.append("jobset_failed")
                slice_restarts = 0
        possible = tuple(
            "jobset_failed" if f.seconds > 0 else "stalled"
            for f in self.faults
            if f.kind == GCS_ERRORS and (f.seconds > 0 or self.stall_timeout_seconds <= GCS_BURST_DELAY_SEEN_SECONDS)
        )
        return Expected(
            tuple(escalations),
            survivable=len(escalations) + len(possible) <= self.max_full_restarts and not self.revokes_capacity,
            possible=possible,
        )

    @property
    def revokes_capacity(self) -> bool:
        """Revoked capacity: Kueue deactivates the Workload, nothing admits it again; the operator fails the run at
        its queue_timeout, naming the revocation (docs/operators.md), spending no budget."""
        return any(f.kind == PROVISION and f.outcome == PROVISION_REVOKE for f in self.faults)

    def describe(self) -> str:
        parts = [f.describe() for f in self.faults]
        if self.kill_during_save_step is not None:
            later = " or later" if self.history else ""  # with auto's period: the first save from that step on
            parts.append(f"@{self.kill_during_save_step} kill in save{later}")
        return "; ".join(sorted(parts, key=lambda p: int(p[1:].split(" ", 1)[0]))) or "none"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["run_name"] = self.run_name
        expected = self.expected()
        data["expected"] = {
            "escalations": list(expected.escalations),
            "possible": list(expected.possible),
            "survivable": expected.survivable,
        }
        return data


def _slice_faults(rng: random.Random, num_slices: int, last: int) -> list[Fault]:
    """One to four slice events, several slices at once sometimes, close together or far apart."""
    faults: list[Fault] = []
    events = rng.choice((0, 1, 1, 2, 2, 3, 4))
    apart = rng.random() < 0.5
    step = rng.randint(4, max(5, last // 2))
    for _ in range(events):
        if step > last:
            break
        width = 2 if num_slices > 1 and rng.random() < 0.3 else 1
        faults.append(
            Fault(
                step=step,
                kind=rng.choice(SLICE_FAULTS),
                slices=tuple(sorted(rng.sample(range(num_slices), width))),
            )
        )
        step += rng.randint(8, 16) if apart else rng.randint(1, 3)
    return faults


def _other_faults(rng: random.Random, last: int, *, gcs: bool) -> tuple[int | None, list[Fault]]:
    """The step of a kill in a save (or None), and the faults that are not a slice's, drawn after the slices'."""
    faults: list[Fault] = []
    kill_during_save_step = None
    if rng.random() < 0.2:
        kill_during_save_step = rng.choice([s for s in range(CHECKPOINT_PERIOD, last, CHECKPOINT_PERIOD)])
    if rng.random() < 0.2:
        faults.append(Fault(step=rng.randint(5, last), kind=FREEZE_TRAINER))
    if rng.random() < 0.35:
        faults.append(
            Fault(step=rng.randint(3, last), kind=API_ERRORS, code=rng.choice((500, 429)), count=rng.randint(5, 40))
        )
    if rng.random() < 0.2:
        faults.append(Fault(step=rng.randint(3, last), kind=API_LATENCY, seconds=round(rng.uniform(0.05, 0.4), 2)))
    if rng.random() < 0.35:
        faults.append(Fault(step=rng.randint(3, last), kind=EXPIRE_WATCHES))
    if rng.random() < 0.25:
        faults.append(Fault(step=rng.randint(6, last), kind=KILL_TASK))
    if gcs and rng.random() < 0.8:
        at = rng.randint(3, last)
        if rng.random() < 0.5:
            faults.append(Fault(step=at, kind=GCS_ERRORS, count=rng.randint(2, GCS_BURST_MAX)))
        else:
            faults.append(Fault(step=at, kind=GCS_ERRORS, seconds=round(rng.uniform(*GCS_OUTAGE_SECONDS), 1)))
    return kill_during_save_step, faults


def _spaced(faults: list[Fault], kill_during_save_step: int | None) -> list[Fault]:
    """The faults by step, each moved on past a kill in a save: on the same step the two would race."""
    taken = {kill_during_save_step} if kill_during_save_step is not None else set()
    spaced: list[Fault] = []
    for fault in sorted(faults, key=lambda f: f.step):
        moved = fault
        while moved.step in taken or moved.step - 1 in taken:
            moved = Fault(moved.step + 2, moved.kind, moved.slices, moved.code, moved.count, moved.seconds)
        spaced.append(moved)
    return spaced


def schedule(seed: int, index: int, *, gcs: bool = False, kueue: str = "", history: bool = False) -> Schedule:
    """The schedule of run ``index`` under ``seed`` (drawn from ``random.Random(seed + index)``).

    With ``gcs`` the run writes to ``gs://`` and may also get GCS 503s, drawn after everything else: the
    other faults of a run are the same with or without it. With ``kueue`` (one of :data:`KUEUE_DIMENSIONS`)
    the run has the same shape and only its Kueue fault (:func:`kueue_schedule`). With ``history`` the faults are
    those without it, and the run turns the history options on.
    """
    if history:
        if kueue:
            raise ValueError("the history dimension runs without Kueue: drop kueue")
        return replace(schedule(seed, index, gcs=gcs), history=True)
    rng = random.Random(seed + index)
    steps = rng.choice((40, 50, 60))
    num_slices = rng.choice((2, 3))
    max_slice_restarts = rng.choice((2, 3))
    max_full_restarts = rng.choice((1, 2, 2))
    if kueue:
        return kueue_schedule(seed, index, kueue, steps, num_slices, max_slice_restarts, max_full_restarts)
    last = steps - 4  # leave the final save alone: a fault after it has nothing left to hit
    faults = _slice_faults(rng, num_slices, last)
    kill_during_save_step, others = _other_faults(rng, last, gcs=gcs)
    spaced = _spaced([*faults, *others], kill_during_save_step)
    return Schedule(
        seed=seed,
        index=index,
        steps=steps,
        num_slices=num_slices,
        max_slice_restarts=max_slice_restarts,
        max_full_restarts=max_full_restarts,
        kill_during_save_step=kill_during_save_step,
        faults=tuple(sorted(spaced, key=lambda f: f.step)),
        gcs=gcs,
    )


def kueue_schedule(
    seed: int, index: int, kueue: str, steps: int, num_slices: int, max_slice_restarts: int, max_full_restarts: int
) -> Schedule:
    """A run behind Kueue with one Kueue fault, drawn from its own stream (the seed's shape is kept).

    ``preempt``: at a step from 3 to four before the end (before the first checkpoint sometimes), a blocker
    arrives that needs more chips than the run leaves free (``QUEUE_CHIPS``), so Kueue must preempt the run to
    admit it. ``queue-wait``: a blocker holds all the chips when the run is submitted. ``provisioning``: the run's
    ProvisioningRequest takes 5 to 90 s, or fails once (Kueue retries it: the next provisions in that time), or is
    provisioned and, at a step from 3 to four before the end, its capacity is revoked. ``pods-ready``: at a step from 3
    to four before the end, one of the run's slices has its node pool repaired for longer than Kueue's recoveryTimeout.
    """
    if kueue not in KUEUE_DIMENSIONS:
        raise ValueError(f"kueue must be one of {', '.join(KUEUE_DIMENSIONS)}, got {kueue!r}")
    rng = random.Random(f"{seed}-{index}-{kueue}")
    if kueue == "provisioning":
        outcome = rng.choice(PROVISION_OUTCOMES)
        fault = Fault(
            step=rng.randint(3, steps - 4) if outcome == PROVISION_REVOKE else 0,
            kind=PROVISION,
            seconds=round(rng.uniform(*PROVISION_SECONDS), 1),
            outcome=outcome,
        )
    elif kueue == "preempt":
        free = QUEUE_CHIPS // SLICE_CHIPS - num_slices
        blocker_slices = rng.randint(free + 1, QUEUE_CHIPS // SLICE_CHIPS)
        fault = Fault(
            step=rng.randint(3, steps - 4),
            kind=PREEMPT,
            slices=tuple(range(blocker_slices)),
            seconds=round(rng.uniform(*PREEMPT_HOLD_SECONDS), 1),
        )
    elif kueue == "pods-ready":
        fault = Fault(
            step=rng.randint(3, steps - 4),
            kind=PODS_READY,
            slices=(rng.randrange(num_slices),),
            seconds=round(rng.uniform(*PODS_READY_REPAIR_SECONDS), 1),
        )
    else:
        fault = Fault(
            step=0,
            kind=QUEUE_WAIT,
            slices=tuple(range(QUEUE_CHIPS // SLICE_CHIPS)),
            seconds=round(rng.uniform(*QUEUE_WAIT_EXTRA_SECONDS), 1),
        )
    return Schedule(
        seed=seed,
        index=index,
        steps=steps,
        num_slices=num_slices,
        max_slice_restarts=max_slice_restarts,
        max_full_restarts=max_full_restarts,
        kill_during_save_step=None,
        faults=(fault,),
        kueue=kueue,
    )


def schedules(seed: int, runs: int, *, gcs: bool = False, kueue: str = "", history: bool = False) -> list[Schedule]:
    """The schedules of runs ``0..runs-1``."""
    return [schedule(seed, index, gcs=gcs, kueue=kueue, history=history) for index in range(runs)]
