"""Chaos matrix: many short elastic runs through Airflow on the local cluster, each under a seeded fault schedule.

    .venv/bin/python -m benchmarks.chaos --runs 50 --seed 1 --budget 2100
    .venv/bin/python -m benchmarks.chaos --runs 5 --seed 1 --dry-run     # print the schedules only
    .venv/bin/python -m benchmarks.chaos --runs 20 --seed 1 --gcs         # run directories on gs://

Each run is one DAG with one ``ElasticJobSetOperator`` (``runtime="local"``, deferrable, 40-60 steps,
checkpoint period 10, 2-3 slices) run by ``dag.test()`` in a child process, against an upstream local cluster
(:class:`UpstreamCluster`, ``v5e-small``: kube-apiserver, the Job, JobSet and Kueue controllers, the node agent) this
harness hosts. The operators connect as their shipped ServiceAccount through the cluster's API fault proxy. The
fault schedule (``benchmarks/chaos_schedule.py``) is drawn from
``random.Random(seed + run_index)``; faults fire when the trainer's log shows the scheduled completed step:
worker pods force-deleted or SIGKILLed, the trainer killed in a checkpoint save
(``LOCAL_FAULT_KILL_DURING_SAVE_STEP``, once per run), the trainer frozen (SIGSTOP), API 500/429 bursts and
latency, watches expired with the history compacted, and the task process SIGKILLed mid-watch (the inline
trigger dies with it) and the DAG run run again, which adopts the JobSet and rebuilds the trigger from its
serialized kwargs (``dag.test`` always round-trips them through serde).

With ``--gcs`` each run also gets a GCS emulator of its own; run directories are on ``gs://`` and the trainers and
the operator reach the emulator through a proxy that can answer 503: a burst of a few requests (retries
ride it out, though the save it meets waits out their backoff: under a stall timeout of 65 s or less that may
be a stall, and one full restart) or an outage of 36-45 s (past gcsfs's retries: a save fails, the trainer exits,
and one full restart is warranted). These faults are drawn after all others, so a seed's other faults do not
change.

While a run goes, the harness polls kube-apiserver (as the admin) for the run's JobSets (label ``run-name``) that are
not being deleted and the run directory for its newest committed step. Afterwards it records, per run:
the outcome and why; the most JobSets that coexisted (must be 1); committed steps lost beyond one checkpoint
period (the newest committed step going backwards, or a restore older than it, unless a quarantine the
report names explains it); every escalation and whether the faults that hit that JobSet (or an observed
stall) warranted it; false successes (success without a valid committed final step, checked with
``validate_checkpoints``) and false failures (a failure although the schedule fits the budgets).

Output: ``<out>/chaos.jsonl`` (one record per run) and a Markdown table on stdout and in ``<out>/chaos.md``.
Every run is bounded (``--run-timeout``); one past its bound is killed and recorded as ``hung``. Runs not
started before ``--budget`` seconds are recorded as ``not run``. ``--jobs`` lanes run side by side, each
with its own cluster and Airflow database.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.chaos_schedule import (
    API_ERRORS,
    API_LATENCY,
    DELETE_WORKERS,
    EXPIRE_WATCHES,
    FREEZE_TRAINER,
    GCS_ERRORS,
    KILL_TASK,
    KUEUE_DIMENSIONS,
    PODS_READY,
    PODS_READY_RECOVERY_TIMEOUT_SECONDS,
    PREEMPT,
    PROVISION,
    QUEUE_WAIT,
    SLICE_FAULTS,
    Fault,
    Schedule,
    schedule,
    schedules,
)

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "default"
SMALL_MODEL = {"base_emb_dim": 32, "base_num_decoder_layers": 1, "vocab_size": 32, "max_target_length": 16}
FIRST_LOGICAL_DATE = datetime(2026, 1, 1, tzinfo=UTC)
# Seconds each training step also sleeps (LOCAL_STEP_SECONDS): the tiny model does 60 steps in a second,
# which no fault scheduled at a step could hit. With it, a 60-step incarnation trains for about half a minute.
STEP_SECONDS = 0.4
# The harness notes a step when it polls the log (every 0.3 s, behind the API), the operator by the log line's
# own timestamp: the harness's gap before a stall decision can come out up to about a second short.
STALL_GAP_TOLERANCE_SECONDS = 2.0
# A slice fault fires only on a slice whose every host has run, unchanged (the same pods, no container
# restarted), for this long. The operator counts failures of one slice before it is whole again as one
# restart (an episode, operators/slice_failures.py), and Kubernetes dates them in whole seconds: hitting a
# slice still coming back, or back for under a second, would make two scheduled faults one restart, and the
# schedule's expected escalations would not hold. (A SIGKILLed container is back within one 0.3 s poll, so
# "running" alone would not show it went.)
SLICE_WHOLE_SECONDS = 1.5
# A run is not started with less than this left of the budget (a typical run takes two to four minutes).
MIN_SECONDS_TO_START = 200.0


# -- the Airflow side (child processes) ------------------------------------------------------------------


DAG_TEMPLATE = """\
from datetime import timedelta
from airflow.sdk import DAG
from elastic_training.operators import Budgets, Capacity, ElasticJobSetOperator, History, Scale, Training

with DAG({dag_id!r}, schedule=None) as dag:
    ElasticJobSetOperator(
        task_id="pretrain",
        training=Training(
            run_name={run_name!r},
            base_output_directory={base!r},
            steps={steps},
            checkpoint_period={period},
            maxtext_args={maxtext_args!r},
            local_env={local_env!r},
        ),
        scale=Scale(num_slices={slices}),
        budgets=Budgets(
            max_slice_restarts={max_slice_restarts},
            max_full_restarts={max_full_restarts},
            stall_timeout=timedelta(seconds={stall}),
            elastic_timeout_seconds={elastic_timeout},
        ),{kueue_args}{history_args}
        runtime="local",
        deferrable=True,
        poll_interval=1.0,
    )
"""


def dag_source(plan: Schedule, base: str, storage_env: dict[str, str] | None = None) -> str:
    """The DAG file of one chaos run (``storage_env``: what points the trainer at the GCS emulator's proxy)."""
    local_env: dict[str, str] = {"LOCAL_STEP_SECONDS": str(STEP_SECONDS), **(storage_env or {})}
    if plan.kill_during_save_step is not None:
        local_env |= {
            "LOCAL_FAULT_KILL_DURING_SAVE_STEP": str(plan.kill_during_save_step),
            "LOCAL_FAULT_KILL_DURING_SAVE_ONCE": "1",
        }
        if plan.history:  # the period auto chooses may never save the step itself: the first save from it on
            local_env["LOCAL_FAULT_KILL_DURING_SAVE_OR_LATER"] = "1"
    return DAG_TEMPLATE.format(
        dag_id=dag_id(plan),
        run_name=plan.run_name,
        base=base,
        steps=plan.steps,
        period=repr("auto") if plan.history else plan.checkpoint_period,
        slices=plan.num_slices,
        maxtext_args=SMALL_MODEL,
        max_slice_restarts=plan.max_slice_restarts,
        max_full_restarts=plan.max_full_restarts,
        stall=plan.stall_timeout_seconds,
        # The stall timeout must exceed MaxText's wait for slices (the spec lint): half of it waits for slices.
        elastic_timeout=max(1, plan.stall_timeout_seconds // 2),
        local_env=local_env,
        kueue_args=_kueue_args(plan),
        history_args=_history_args(plan),
    )


# The history dimension: every run of a lane shares one failure history, as one DAG's nightly runs do.
HISTORY_KEY = "chaos-history"
CHAOS_POOLS = tuple(f"tpu-v5e-16-{i}" for i in range(4))  # v5e-small's v5e-16 pools: where a worker may run


def _history_args(plan: Schedule) -> str:
    """The history dimension's runs turn both closed-loop options on over the lane's shared history."""
    if not plan.history:
        return ""
    return f"\n        history=History(avoid_failing_node_pools=True, failure_history_key={HISTORY_KEY!r}),"


def _kueue_args(plan: Schedule) -> str:
    """The Kueue dimensions' runs go to xpk's LocalQueue at a low priority (a blocker outranks them)."""
    if not plan.kueue:
        return ""
    from benchmarks.chaos_kueue import RUN_PRIORITY, queue_for

    args = f"queue_name={queue_for(plan)!r}, priority_class={RUN_PRIORITY!r}"
    if plan.kueue == "provisioning":
        # A revoked flex run is deactivated and its Deactivated rule ends it; queue_timeout (stall timeout + 60 s)
        # only bounds a run that rule missed (the promise checks which ended it).
        args += f", queue_timeout={plan.stall_timeout_seconds + 60}.0"
    if plan.kueue == "pods-ready":  # the operator cannot read Kueue's ConfigMap here: it is told
        args += f", kueue_recovery_timeout={float(PODS_READY_RECOVERY_TIMEOUT_SECONDS)!r}"
    return f"\n        capacity=Capacity({args}),"


def dag_id(plan: Schedule) -> str:
    return plan.run_name.replace("-", "_")


def run_task(dag_file: Path, logical_date: str, result_path: Path) -> int:
    """Child: ``dag.test()`` the DAG in ``dag_file`` for ``logical_date``; write its task state and report."""
    import importlib.util

    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    spec = importlib.util.spec_from_file_location(f"chaos_{dag_file.stem}", dag_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    when = datetime.fromisoformat(logical_date)
    dag_run = module.dag.test(logical_date=when, run_after=when)
    with create_session() as session:
        tis = session.query(TaskInstance).filter_by(dag_id=dag_run.dag_id, run_id=dag_run.run_id).all()
        state = {ti.task_id: str(ti.state) for ti in tis}.get("pretrain")
        xcoms = {
            row.key: XComModel.deserialize_value(row)
            for row in session.query(XComModel).filter_by(
                dag_id=dag_run.dag_id, run_id=dag_run.run_id, task_id="pretrain"
            )
        }
    result_path.write_text(json.dumps({"state": state, "xcom": xcoms}, default=str))
    return 0


def reset_db() -> int:
    """Child: an empty Airflow metadata database for a lane."""
    from airflow.utils import db

    db.resetdb()
    return 0


# -- watching one run (lane process) ----------------------------------------------------------------------


@dataclass
class Fired:
    """A fault as it fired."""

    fault: Fault
    at: float
    at_step: int | None
    jobset: str | None
    pods: list[str] = field(default_factory=list)
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.fault.step,
            "kind": self.fault.kind,
            "describe": self.fault.describe(),
            "at": round(self.at, 3),
            "at_step": self.at_step,
            "jobset": self.jobset,
            "pods": self.pods,
            "note": self.note,
        }


class RunFiles:
    """A run directory on local disk: its newest committed step and the kill-in-save marker."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def newest_committed(self) -> int | None:
        checkpoints = Path(self.uri) / "checkpoints"
        if not checkpoints.is_dir():
            return None
        steps = [int(p.name) for p in checkpoints.iterdir() if p.name.isdigit() and (p / "commit_success.txt").exists()]
        return max(steps) if steps else None

    def killed_in_save(self) -> bool:
        return any(Path(self.uri).glob("local-fault-killed-during-save-*"))


class GcsRunFiles(RunFiles):
    """A run directory on ``gs://``, read straight from the emulator (not through the failing proxy)."""

    def __init__(self, uri: str, client: Any) -> None:
        super().__init__(uri)
        bucket, _, prefix = uri.removeprefix("gs://").partition("/")
        self.bucket, self.prefix, self.client = bucket, prefix.rstrip("/") + "/", client

    def _names(self, prefix: str) -> list[str]:
        return [blob.name for blob in self.client.list_blobs(self.bucket, prefix=self.prefix + prefix)]

    def newest_committed(self) -> int | None:
        steps = []
        for name in self._names("checkpoints/"):
            parts = name[len(self.prefix) :].split("/")
            if len(parts) == 3 and parts[1].isdigit() and parts[2] == "commit_success.txt":
                steps.append(int(parts[1]))
        return max(steps) if steps else None

    def killed_in_save(self) -> bool:
        return bool(self._names("local-fault-killed-during-save-"))


class RunWatch:
    """Polls the cluster's API and the run directory while a run goes; fires its faults on schedule."""

    def __init__(
        self,
        cluster: Any,
        plan: Schedule,
        files: RunFiles,
        kill_task: Callable[[], None],
        gcs_proxy: Any | None = None,
        log_path: Path | None = None,
        kueue_actor: Any | None = None,
    ) -> None:
        self.cluster = cluster
        self.kueue_actor = kueue_actor  # benchmarks.chaos_kueue.KueueActor: the blocker of a Kueue dimension's run
        self.log_path = log_path  # the task processes' log: an escalation logged there holds the faults
        self.plan = plan
        self.files = files
        self.kill_task = kill_task
        self.gcs_proxy = gcs_proxy
        # A queue wait and a provisioning delay or failure act before the task starts; a revocation at its step.
        self.pending = [f for f in plan.faults if f.kind != QUEUE_WAIT and (f.kind != PROVISION or f.step > 0)]
        self.fired: list[Fired] = []
        self.errors: list[str] = []
        self.max_alive = 0
        self.alive_samples: list[tuple[float, list[str]]] = []  # only when more than one was alive
        self.jobsets_seen: list[str] = []
        self.last_seen: dict[str, dict[str, Any]] = {}  # each JobSet as last seen
        self.committed: list[tuple[float, int]] = []  # (time, newest committed step) on every change
        self.progress: dict[str, list[tuple[float, int]]] = {}  # JobSet → (time, newest completed step) changes
        self.head_pods: dict[str, str] = {}  # head pod uid → its JobSet
        self.killed_in_save_of: str | None = None  # the JobSet alive when the kill-in-save marker appeared
        # (JobSet, slice index) → (its pods' uids and container restarts, seen whole and unchanged since)
        self.whole_since: dict[tuple[str, str], tuple[frozenset[tuple[str, int]], float]] = {}
        self.escalated: set[str] = set()  # JobSets the operator logged an escalation of
        self.worker_pools: dict[str, set[str]] = {}  # JobSet → the node pools its worker pods were bound to
        self._node_pools: dict[str, str] = {}  # node name → its GKE node pool
        self._log_offset = 0
        self._marker_checked_at = 0.0
        self._api: Any = None  # the admin's API client, made on first use
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"watch-{plan.run_name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # not started when the run failed before its task did
            self._thread.join(timeout=30)
        if self._api is not None:
            self._api.close()
            self._api = None

    # -- reading -----------------------------------------------------------------------------

    def _client(self) -> Any:
        """The admin's API client (the cluster's own kubeconfig, straight to kube-apiserver), made on first use."""
        if self._api is None:
            from kubernetes import config

            self._api = config.new_client_from_config(config_file=str(self.cluster.kubeconfig_path))
        return self._api

    def _list(self, path: str, selector: str | None = None) -> list[dict[str, Any]]:
        """The items of a list through kube-apiserver, as the admin, as plain JSON objects."""
        response = self._client().call_api(
            path,
            "GET",
            query_params=[("labelSelector", selector)] if selector else [],
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
            _request_timeout=30,
        )
        return list(json.loads(response.data)["items"])

    def _objects(self, plural: str) -> list[dict[str, Any]]:
        from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION, LABEL_RUN_NAME

        selector = f"{LABEL_RUN_NAME}={self.plan.run_name}"
        if plural == "jobsets":
            return self._list(f"/apis/{JOBSET_GROUP}/{JOBSET_VERSION}/namespaces/{NAMESPACE}/{JOBSET_PLURAL}", selector)
        return self._list(f"/api/v1/namespaces/{NAMESPACE}/pods", selector)

    def _head(self, jobsets: list[dict[str, Any]], pods: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
        """The live JobSet's running head pod."""
        from elastic_training.operators.constants import (
            HEAD_REPLICATED_JOB,
            LABEL_JOBSET_NAME,
            LABEL_REPLICATED_JOB_NAME,
        )

        alive = [js for js in jobsets if not js["metadata"].get("deletionTimestamp")]
        if len(alive) != 1:
            return None
        name = alive[0]["metadata"]["name"]
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            if (
                labels.get(LABEL_JOBSET_NAME) == name
                and labels.get(LABEL_REPLICATED_JOB_NAME) == HEAD_REPLICATED_JOB
                and not pod["metadata"].get("deletionTimestamp")
                and (pod.get("status") or {}).get("phase") == "Running"
            ):
                return name, pod
        return None

    def _latest_step(self, pod: dict[str, Any]) -> int | None:
        from elastic_training.operators.constants import COMPLETED_STEP_RE, HEAD_MAIN_CONTAINER

        logs = log_store(self.cluster)
        uid = pod["metadata"]["uid"]
        run = logs.latest_run(uid, HEAD_MAIN_CONTAINER)
        path = None if run is None else logs.run_path(uid, HEAD_MAIN_CONTAINER, run)
        if path is None:
            return None
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 16384))
            text = handle.read().decode(errors="replace")
        steps = [int(m.group(1)) for m in COMPLETED_STEP_RE.finditer(text)]
        return steps[-1] if steps else None

    # -- the loop ----------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._look()
            except Exception as error:  # a pod replaced under us, the cluster busy: look again
                if len(self.errors) < 50:
                    self.errors.append(f"{type(error).__name__}: {error}")
            self._stop.wait(0.3)

    def _look(self) -> None:
        now = time.time()
        jobsets = self._objects("jobsets")
        alive = [js["metadata"]["name"] for js in jobsets if not js["metadata"].get("deletionTimestamp")]
        for js in jobsets:
            name = js["metadata"]["name"]
            if name not in self.jobsets_seen:
                self.jobsets_seen.append(name)
            self.last_seen[name] = js
        self.max_alive = max(self.max_alive, len(alive))
        if len(alive) > 1:
            self.alive_samples.append((now, alive))
        newest = self.files.newest_committed()
        if newest is not None and (not self.committed or self.committed[-1][1] != newest):
            self.committed.append((now, newest))
        marker_pending = self.plan.kill_during_save_step is not None and self.killed_in_save_of is None
        if marker_pending and len(alive) == 1 and now - self._marker_checked_at >= 1.0:
            self._marker_checked_at = now
            if self.files.killed_in_save():
                self.killed_in_save_of = alive[0]
        pods = self._objects("pods")
        if self.plan.history:
            self._note_worker_pools(pods)
        self._note_whole_slices(jobsets, pods, now)
        self._note_escalations()
        head = self._head(jobsets, pods)
        if head is None:
            return
        name, head_pod = head
        self.head_pods.setdefault(head_pod["metadata"]["uid"], name)
        step = self._latest_step(head_pod)
        if step is None:
            return
        history = self.progress.setdefault(name, [])
        if not history or history[-1][1] != step:
            history.append((now, step))
        if self.pending and step >= self.pending[0].step:
            self._fire(self.pending[0], step, name, head_pod, pods)

    def _note_worker_pools(self, pods: list[dict[str, Any]]) -> None:
        """Note the node pool of every bound worker pod (the history dimension checks them against the avoidance)."""
        from elastic_training.operators.constants import (
            HEAD_REPLICATED_JOB,
            LABEL_GKE_NODEPOOL,
            LABEL_JOBSET_NAME,
            LABEL_REPLICATED_JOB_NAME,
        )

        if any((pod.get("spec") or {}).get("nodeName") not in self._node_pools for pod in pods):
            for listed in self._list("/api/v1/nodes"):
                labels = listed["metadata"].get("labels") or {}
                self._node_pools[listed["metadata"]["name"]] = labels.get(LABEL_GKE_NODEPOOL, "")
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            node = (pod.get("spec") or {}).get("nodeName")
            if node not in self._node_pools or labels.get(LABEL_REPLICATED_JOB_NAME) == HEAD_REPLICATED_JOB:
                continue
            jobset = str(labels.get(LABEL_JOBSET_NAME))
            self.worker_pools.setdefault(jobset, set()).add(self._node_pools[node])

    def _note_whole_slices(self, jobsets: list[dict[str, Any]], pods: list[dict[str, Any]], now: float) -> None:
        """Note since when each slice has had every host (the worker Job's ``completions``) running."""
        from elastic_training.local.workloads.pathways_session import worker_shape

        whole: dict[tuple[str, str], frozenset[tuple[str, int]]] = {}
        for jobset in jobsets:
            shape = worker_shape(jobset)
            if jobset["metadata"].get("deletionTimestamp") or shape is None:
                continue
            name, (replicas, hosts) = jobset["metadata"]["name"], shape
            workers = _running_workers(pods, name)
            for i in range(replicas):
                members = frozenset(
                    (
                        pod["metadata"]["uid"],
                        sum(int(c.get("restartCount") or 0) for c in pod["status"]["containerStatuses"]),
                    )
                    for pod in workers.get(str(i), [])
                )
                if len(members) >= hosts:
                    whole[(name, str(i))] = members
        for key in set(self.whole_since) - set(whole):
            del self.whole_since[key]
        for key, members in whole.items():
            if key not in self.whole_since or self.whole_since[key][0] != members:
                self.whole_since[key] = (members, now)

    def _slice_ready(self, jobset: str, index: int, now: float) -> bool:
        seen = self.whole_since.get((jobset, str(index)))
        return seen is not None and now - seen[1] >= SLICE_WHOLE_SECONDS

    def _note_escalations(self) -> None:
        """Read the task log's new lines for ``JobSet X: escalate (...)``."""
        if self.log_path is None or not self.log_path.exists():
            return
        with self.log_path.open("rb") as handle:
            handle.seek(self._log_offset)
            chunk = handle.read()
        end = chunk.rfind(b"\n") + 1  # whole lines only; the rest is read next time
        self._log_offset += end
        for line in chunk[:end].decode(errors="replace").splitlines():
            match = _ESCALATE_LINE.match(line)
            if match:
                self.escalated.add(match.group(2))

    def _force_delete(self, pod: str) -> None:
        """``kubectl delete pod --grace-period=0 --force``: the node kills the processes at once, and the Job
        controller counts the pod failed and replaces it (a graceful deletion lets the slice worker exit 0 on SIGTERM:
        its pod Succeeded, its one-completion Job complete, never replaced)."""
        from kubernetes import client

        client.CoreV1Api(self._client()).delete_namespaced_pod(pod, NAMESPACE, grace_period_seconds=0)

    def _fire(self, fault: Fault, step: int, jobset: str, head_pod: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        from elastic_training.operators.constants import HEAD_MAIN_CONTAINER, WORKER_CONTAINER

        faults = self.cluster.faults
        fired = Fired(fault, time.time(), step, jobset)
        if fault.kind in (*SLICE_FAULTS, FREEZE_TRAINER) and jobset in self.escalated:
            return  # the operator is replacing this JobSet: the fault waits for the next incarnation
        if fault.kind in SLICE_FAULTS:
            if not all(self._slice_ready(jobset, index, fired.at) for index in fault.slices):
                return  # a slice is not whole again yet: wait, so that each fault is one slice restart
            workers = _running_workers(pods, jobset)
            targets = [workers[str(index)][0]["metadata"]["name"] for index in fault.slices if workers.get(str(index))]
            if len(targets) < len(fault.slices):
                return  # a slice is still being replaced: wait for it to come back, then hit it
            for target in targets:
                if fault.kind == DELETE_WORKERS:
                    self._force_delete(target)
                else:
                    faults.signal_pod(NAMESPACE, target, signal.SIGKILL, WORKER_CONTAINER)
            fired.pods = targets
        elif fault.kind == FREEZE_TRAINER:
            faults.signal_pod(NAMESPACE, head_pod["metadata"]["name"], signal.SIGSTOP, HEAD_MAIN_CONTAINER)
            fired.pods = [head_pod["metadata"]["name"]]
        elif fault.kind == API_ERRORS:
            faults.fail_requests(fault.code, count=fault.count)
        elif fault.kind == API_LATENCY:
            faults.latency(fault.seconds)
        elif fault.kind == EXPIRE_WATCHES:
            fired.note = f"{faults.expire_watches(compact=True)} watches ended"
        elif fault.kind == KILL_TASK:
            self.kill_task()
        elif fault.kind == PREEMPT and self.kueue_actor is not None:
            self.kueue_actor.preempt()
            fired.note = f"blocker {self.kueue_actor.blocker} created"
        elif fault.kind == PROVISION and self.kueue_actor is not None:
            self.kueue_actor.revoke()
            fired.note = "capacity revoked"
        elif fault.kind == PODS_READY and self.kueue_actor is not None:
            if not all(self._slice_ready(jobset, index, fired.at) for index in fault.slices):
                return  # the slice is not whole yet: its repair must take a running slice
            fired.note = self.kueue_actor.repair_slice(pods, jobset)
        elif fault.kind == GCS_ERRORS and self.gcs_proxy is not None:
            if fault.count:
                self.gcs_proxy.fail_next(fault.count)
            else:
                self.gcs_proxy.fail_for(fault.seconds)
        self.pending.pop(0)
        self.fired.append(fired)


def _running_workers(pods: list[dict[str, Any]], jobset: str) -> dict[str, list[dict[str, Any]]]:
    """The JobSet's worker pods that are running and not being deleted, by slice (``job-index``)."""
    from elastic_training.operators.constants import (
        LABEL_JOB_INDEX,
        LABEL_JOBSET_NAME,
        LABEL_REPLICATED_JOB_NAME,
        WORKER_REPLICATED_JOB,
    )

    by_slice: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        if (
            labels.get(LABEL_JOBSET_NAME) == jobset
            and labels.get(LABEL_REPLICATED_JOB_NAME) == WORKER_REPLICATED_JOB
            and not pod["metadata"].get("deletionTimestamp")
            and _running(pod)
        ):
            by_slice.setdefault(str(labels.get(LABEL_JOB_INDEX)), []).append(pod)
    return by_slice


def _running(pod: dict[str, Any]) -> bool:
    """Running with every container up: a fault on a slice still restarting would restart nothing."""
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    return (
        status.get("phase") == "Running"
        and bool(containers)
        and all("running" in (c.get("state") or {}) for c in containers)
    )


# -- one run ----------------------------------------------------------------------------------------------


@dataclass
class Lane:
    """Where a lane keeps its files, and the environment of its Airflow children."""

    root: Path
    cluster: Any
    env: dict[str, str]
    base: str = ""  # where run directories go: gs://… on GCS, else <root>/runs
    storage_env: dict[str, str] = field(default_factory=dict)  # the trainer's way to the GCS proxy
    gcs_proxy: Any | None = None
    gcs_client: Any | None = None

    @property
    def dags(self) -> Path:
        return self.root / "dags"


def child_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "benchmarks.chaos", *args]


def run_one(lane: Lane, plan: Schedule, run_timeout: float, *, cut_by_budget: bool = False) -> dict[str, Any]:
    """Run one chaos run to its end (or its bound) and evaluate it; on GCS, against an emulator of its own.

    gcp-storage-emulator rewrites the metadata of every object it holds on each write, so one emulator for a
    whole lane made each run's saves slower than the last (15-35 s by the twentieth run).
    """
    if not plan.gcs:
        return _run_one(lane, plan, run_timeout, cut_by_budget=cut_by_budget)
    with _run_storage(lane.root) as storage:
        on_gcs = dataclasses.replace(
            lane,
            base=storage.base,
            storage_env=storage.storage_env,
            gcs_proxy=storage.gcs_proxy,
            gcs_client=storage.gcs_client,
        )
        return _run_one(on_gcs, plan, run_timeout, cut_by_budget=cut_by_budget)


class _TaskProcess:
    """The run's Airflow task process: started, killed as a dead worker is and started again, stopped at the end."""

    def __init__(self, command: list[str], env: dict[str, str], log_path: Path) -> None:
        self.command, self.env, self.log_path = command, env, log_path
        self.processes: list[subprocess.Popen[bytes]] = []
        self.lock = threading.Lock()

    def start(self) -> None:
        with self.lock:
            self._start()

    def _start(self) -> None:
        with self.log_path.open("ab") as log:
            self.processes.append(
                subprocess.Popen(
                    self.command,
                    cwd=REPO,
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def kill_and_restart(self) -> None:
        with self.lock:
            self._kill()  # no on_kill, no cleanup: the worker died
            self._start()

    def _kill(self) -> None:
        current = self.processes[-1]
        os.killpg(current.pid, signal.SIGKILL)
        current.wait()

    def done(self) -> bool:
        with self.lock:
            return self.processes[-1].poll() is not None

    def stop(self) -> None:
        """Kill the task process if it still runs: it has its own session, so nothing else stops it."""
        with self.lock:
            if self.processes and self.processes[-1].poll() is None:
                self._kill()

    def wait(self, started: float, run_timeout: float) -> bool:
        """Wait for the task process to end; True (and killed) when the run outlasted ``run_timeout``."""
        while not self.done():
            if time.time() - started > run_timeout:
                self.stop()
                return True
            time.sleep(0.5)
        return False


def _arm_kueue(actor: Any, plan: Schedule, watch: RunWatch) -> None:
    """Set up the run's Kueue fault before its task starts, and start the actor that plays it."""
    fault = plan.kueue_fault
    if fault is not None and fault.kind == QUEUE_WAIT:
        actor.hold_queue()
        watch.fired.append(Fired(fault, time.time(), None, None, note=actor.blocker))
    elif fault is not None and fault.kind == PROVISION:
        actor.prepare_provisioning()
        if fault.step == 0:
            watch.fired.append(Fired(fault, time.time(), None, None, note=fault.outcome))
    elif fault is not None and fault.kind == PODS_READY:
        actor.hold_other_pools()
    actor.start()


def _task_report(result: dict[str, Any] | None) -> dict[str, Any]:
    xcom = (result or {}).get("xcom") or {}
    report: dict[str, Any] = xcom.get("return_value") or xcom.get("report") or {}
    return report


def _add_kueue(record: dict[str, Any], plan: Schedule, actor: Any, watch: RunWatch, report: dict[str, Any]) -> None:
    from benchmarks.chaos_kueue import broken_promises

    jobsets = [watch.last_seen[n] for n in watch.jobsets_seen if n in watch.last_seen]
    record["kueue"] = {**actor.notes, "errors": actor.errors}
    record["kueue_broken"] = broken_promises(plan, actor.notes, report, record["outcome"], jobsets)
    record["preemptions"] = report.get("preemptions")
    record["preemption_recreations"] = report.get("preemption_recreations")
    record["queued_seconds"] = report.get("queued_seconds")


def _run_one(lane: Lane, plan: Schedule, run_timeout: float, *, cut_by_budget: bool) -> dict[str, Any]:
    base = lane.base or str(lane.root / "runs")
    if not base.startswith("gs://"):
        Path(base).mkdir(parents=True, exist_ok=True)
    uri = f"{base}/{plan.run_name}"
    files = GcsRunFiles(uri, lane.gcs_client) if uri.startswith("gs://") else RunFiles(uri)
    dag_file = lane.dags / f"{dag_id(plan)}.py"
    dag_file.write_text(dag_source(plan, base, lane.storage_env))
    logical_date = (FIRST_LOGICAL_DATE + timedelta(minutes=plan.index)).isoformat()
    result_path = lane.root / f"{plan.run_name}.result.json"
    log_path = lane.root / f"{plan.run_name}.log"
    result_path.unlink(missing_ok=True)
    command = child_command("_task", str(dag_file), logical_date, str(result_path))
    task = _TaskProcess(command, {**lane.env, **lane.storage_env}, log_path)
    print(
        f"[chaos] run {plan.index}: {plan.run_name} steps={plan.steps} slices={plan.num_slices} "
        f"budgets={plan.max_slice_restarts}/{plan.max_full_restarts}: {plan.describe()}",
        flush=True,
    )
    started = time.time()
    actor = None
    if plan.kueue:
        from benchmarks.chaos_kueue import KueueActor

        actor = KueueActor(lane.cluster.kubeconfig_path, plan, lane.cluster.faults)
    watch = RunWatch(lane.cluster, plan, files, task.kill_and_restart, lane.gcs_proxy, log_path, actor)
    try:
        if actor is not None:
            _arm_kueue(actor, plan, watch)
        task.start()
        watch.start()
        hung = task.wait(started, run_timeout)
    finally:
        watch.stop()  # first: a task kill it fires would start another task process
        if actor is not None:
            actor.stop()
        task.stop()  # interrupted: the task process has its own session, so it must be stopped here
        lane.cluster.faults.clear_api_faults()
        if lane.gcs_proxy is not None:
            lane.gcs_proxy.clear()
    wall = time.time() - started
    result = json.loads(result_path.read_text()) if result_path.exists() and not hung else None
    record = evaluate(
        plan, watch, result, hung=hung, wall=wall, run_timeout=run_timeout, run_directory=files.uri, log_path=log_path
    )
    if plan.history:
        record["history"] = history_seen(_task_report(result), watch)
        record["history_broken"] = history_broken(plan, record["history"], record["outcome"])
    if actor is not None:
        _add_kueue(record, plan, actor, watch, _task_report(result))
    if hung and cut_by_budget:
        record["outcome"], record["why"] = "cut", f"the harness's budget ended {run_timeout:.0f} s into the run"
    if record["outcome"] != "success" and "no report" in record["why"]:
        record["why"] = last_error(log_path) or record["why"]
    record["task_processes"] = len(task.processes)
    record["log"] = str(log_path)
    cleanup(lane.cluster, plan)
    return record


def history_seen(report: dict[str, Any], watch: RunWatch) -> dict[str, Any]:
    """What the closed loop did in one run of the history dimension: its plan, as reported, and where workers ran."""
    avoidance = report.get("node_pool_avoidance") or {}
    choice = report.get("checkpoint_period_choice") or {}
    return {
        "enabled": bool(avoidance.get("enabled")),
        "avoided": list(avoidance.get("avoided") or []),
        "failing": list(avoidance.get("failing") or []),
        "candidates": list(avoidance.get("candidates") or []),
        "probation": list(avoidance.get("probation") or []),
        "relaxed": str(avoidance.get("relaxed") or ""),
        "reason": str(avoidance.get("reason") or ""),
        "period": report.get("checkpoint_period"),
        "period_reason": str(choice.get("reason") or ""),
        "period_runs": choice.get("runs"),
        "notes": list(report.get("history_notes") or []),
        "worker_pools": {jobset: sorted(pools) for jobset, pools in watch.worker_pools.items()},
    }


def history_broken(plan: Schedule, seen: dict[str, Any], outcome: str) -> list[str]:
    """The history dimension's promises: the loop may change where and how often the run saves, never hurt it.

    The report shows the plan (avoidance on, a period chosen with its reason); it avoids only pools the cluster has;
    no worker runs on an avoided pool unless the report says the avoidance was relaxed; the period is one the run can
    use (1 to half its steps). That the run is not failed by it is the matrix's own false-failure check.
    """
    if outcome in ("hung", "error", "not run", "lost"):
        return []  # nothing reported to judge (the row says why)
    broken: list[str] = []
    if not seen["enabled"]:
        broken.append("the report has no node-pool avoidance")
    if "RBAC forbids" in seen["reason"]:  # the lane's setup, not the loop: nothing could have been avoided
        broken.append("the operators' account may not list nodes, so no avoidance was tried")
    known = set(seen["candidates"]) or set(CHAOS_POOLS)
    strangers = [p for p in seen["avoided"] if p not in known]
    if strangers:
        broken.append(f"avoided pools the cluster does not list: {strangers}")
    if seen["avoided"] and not seen["relaxed"]:
        for jobset, pools in seen["worker_pools"].items():
            on_avoided = sorted(set(pools) & set(seen["avoided"]))
            if on_avoided:
                broken.append(f"{jobset}'s workers ran on avoided pools {on_avoided}")
    period = seen["period"]
    if not isinstance(period, int) or not 1 <= period <= max(1, plan.steps // 2):
        broken.append(f"checkpoint period {period!r} outside 1..{max(1, plan.steps // 2)}")
    if not seen["period_reason"]:
        broken.append("the report does not say why the period was chosen")
    return broken


_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Exception|Error)): (.*)$")


def last_error(log_path: Path) -> str | None:
    """The last exception line of a task log: the failure when the task died without a report."""
    if not log_path.exists():
        return None
    found = None
    for line in log_path.read_text(errors="replace").splitlines():
        match = _ERROR_LINE.match(line.strip())
        if match:
            found = f"{match.group(1)}: {match.group(2)}"
    return found


def cleanup(cluster: Any, plan: Schedule) -> None:
    """Delete what is left of the run and wait until its pods are gone (the next run gets the CPU)."""
    from kubernetes import client, config

    from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION, LABEL_RUN_NAME

    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        selector = f"{LABEL_RUN_NAME}={plan.run_name}"
        for jobset in custom.list_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, label_selector=selector
        )["items"]:
            custom.delete_namespaced_custom_object(
                JOBSET_GROUP,
                JOBSET_VERSION,
                NAMESPACE,
                JOBSET_PLURAL,
                jobset["metadata"]["name"],
                propagation_policy="Foreground",
                grace_period_seconds=0,
            )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if not core.list_namespaced_pod(NAMESPACE, label_selector=selector).items:
                return
            time.sleep(1)
    except Exception as error:  # a leftover slows the next run; it does not spoil its figures
        print(f"[chaos] cleanup of {plan.run_name}: {type(error).__name__}: {error}", flush=True)
    finally:
        api.close()


# -- evaluation -------------------------------------------------------------------------------------------


def _outcome(
    result: dict[str, Any] | None, report: dict[str, Any], *, hung: bool, run_timeout: float
) -> tuple[str, str]:
    """The run's outcome and why, from its task's result."""
    state = (result or {}).get("state")
    if hung:
        return "hung", f"still running after its bound of {run_timeout:.0f} s; killed"
    if result is None:
        return "error", "the task process left no result"
    if state == "success":
        return "success", f"final step {report.get('final_step')}"
    outcome = "failed" if state == "failed" else f"state {state}"
    return outcome, str(report.get("failure") or "no report (see the log)").splitlines()[0]


def _final_valid_step(run_directory: str) -> tuple[int | None, str]:
    """The newest valid committed step of the run directory, and why there is none when validation failed."""
    from elastic_training.operators.checkpoints import ValidationOptions, validate_checkpoints

    try:
        options = ValidationOptions(require_commit_marker=True)
        return validate_checkpoints(f"{run_directory}/checkpoints", options=options).latest_valid_step, ""
    except Exception as error:
        return None, f" (validation failed: {error})"


def _quarantined_steps(report: dict[str, Any]) -> set[int]:
    quarantined = [q for e in report.get("escalations") or [] for q in e.get("quarantined") or []]
    return {int(Path(q).name.split(".", 1)[0]) for q in quarantined if Path(q).name.split(".")[0].isdigit()}


def _steps_lost(
    watch: RunWatch, period: int, quarantined_steps: set[int]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """The committed step's regressions, the trainers' restores, and the most steps lost beyond one period."""
    # The newest committed step over time: it may go back only by a quarantine the report names.
    regressions: list[dict[str, Any]] = []
    high = -1
    for at, step in watch.committed:
        if step < high:
            explained = all(s in quarantined_steps for s in range(step + 1, high + 1) if s % period == 0 or s == high)
            regressions.append({"at": round(at, 3), "from": high, "to": step, "quarantined": explained})
        high = max(high, step)
    # Restores, as every trainer logged them: each must start from the newest committed step the harness had
    # seen by then (a step committed while the restore ran may be missed: hence "beyond one period").
    restores: list[dict[str, Any]] = []
    for at, jobset, step in restores_from_logs(watch):
        committed_then = _committed_at(watch.committed, at)
        if committed_then is not None:
            restores.append({"at": round(at, 3), "jobset": jobset, "committed": committed_then, "restored": step})
    lost = 0
    for regression in regressions:
        if not regression["quarantined"]:
            lost = max(lost, regression["from"] - regression["to"] - period)
    for restore in restores:
        if restore["committed"] not in quarantined_steps:
            lost = max(lost, restore["committed"] - restore["restored"] - period)
    return regressions, restores, max(0, lost)


def _judged_escalations(
    plan: Schedule, watch: RunWatch, report: dict[str, Any], log_path: Path | None
) -> tuple[list[dict[str, Any]], int]:
    """Every escalation judged against the faults that fired, and how many the report does not know."""
    # The task logs hold every escalation, also those a rerun's report no longer knows.
    logged = escalations_from_log(log_path) if log_path is not None else []
    reported = {str(e.get("jobset_name")): e for e in report.get("escalations") or []}
    escalations = [judge(plan, watch, {**e, **reported.get(e["jobset_name"], {})}) for e in logged] or [
        judge(plan, watch, e) for e in reported.values()
    ]
    return escalations, max(0, len(logged) - len(reported))


def evaluate(
    plan: Schedule,
    watch: RunWatch,
    result: dict[str, Any] | None,
    *,
    hung: bool,
    wall: float,
    run_timeout: float,
    run_directory: str,
    log_path: Path | None = None,
) -> dict[str, Any]:
    """The record of one run: outcome, invariants, escalations judged against the faults that fired."""
    report = _task_report(result)
    outcome, why = _outcome(result, report, hung=hung, run_timeout=run_timeout)
    final_valid, validation_error = _final_valid_step(run_directory)
    why += validation_error
    # checkpoint_period="auto" (the history dimension) chose the period in use: the report says which.
    period = int(report.get("checkpoint_period") or plan.checkpoint_period) if plan.history else plan.checkpoint_period
    regressions, restores, lost = _steps_lost(watch, period, _quarantined_steps(report))
    escalations, report_missing = _judged_escalations(plan, watch, report, log_path)
    false_success = outcome == "success" and (final_valid is None or final_valid < plan.target_step)
    fired = [f.to_json() for f in watch.fired]
    judged = plan
    if plan.history and plan.kill_during_save_step is not None and not killed_in_save_from_logs(watch):
        # The kill is in the first save from its step on; a run that ended (failed) before any never fired it.
        judged = dataclasses.replace(plan, kill_during_save_step=None)
    false_failure = is_false_failure(judged, outcome, why, escalations, fired, watch.jobsets_seen)
    return {
        "seed": plan.seed,
        "index": plan.index,
        "run_name": plan.run_name,
        "schedule": plan.to_json(),
        "describe": plan.describe(),
        "outcome": outcome,
        "why": why,
        "wall_seconds": round(wall, 1),
        "target_step": plan.target_step,
        "final_valid_step": final_valid,
        "max_coexisting_jobsets": watch.max_alive,
        "coexisting_samples": watch.alive_samples[:5],
        "jobsets_seen": watch.jobsets_seen,
        "committed_timeline": watch.committed,
        "regressions": regressions,
        "restores": restores,
        "steps_lost_beyond_period": lost,
        "escalations": escalations,
        "unwarranted_escalations": sum(1 for e in escalations if not e["warranted"]),
        "escalations_missing_from_report": report_missing,
        "false_success": false_success,
        "false_failure": false_failure,
        "fired": fired,
        "unfired": [f.describe() for f in watch.pending],
        "slice_restarts": report.get("slice_restarts"),
        "in_process_recoveries": report.get("in_process_recoveries"),
        "full_restarts": report.get("full_restarts"),
        "watch_errors": watch.errors[:10],
        "checkpoint_period": period,
        "kill_in_save_counted": judged.kill_during_save_step is not None,
    }


def is_false_failure(
    plan: Schedule,
    outcome: str,
    why: str,
    escalations: Sequence[dict[str, Any]],
    fired: Sequence[dict[str, Any]],
    jobsets_seen: Sequence[str],
) -> bool:
    """A failure although the full restarts the faults warranted fit ``max_full_restarts`` (never a run whose
    flex-start capacity was revoked: that fails by design, and :func:`chaos_kueue.broken_promises` judges how).

    A GCS fault may or may not cost one: count those it did, the escalations it explains and the restart the
    operator refused when the budget was spent, if an outage (or, for a stall, a burst) hit the JobSet that
    needed it.
    """
    if outcome == "success" or plan.revokes_capacity:  # a revocation fails the run by design: Kueue's promises judge it
        return False
    expected = plan.expected()
    by_outage = sum(1 for e in escalations if e.get("outage"))
    if "full-restart budget spent" in why and jobsets_seen:
        last = jobsets_seen[-1]
        stalled = "no training progress" in why
        if any(
            f["kind"] == GCS_ERRORS and f["jobset"] == last and ("GCS 503 for" in f["describe"] or stalled)
            for f in fired
        ):
            by_outage += 1
    return len(expected.escalations) + min(len(expected.possible), by_outage) <= plan.max_full_restarts


def log_store(cluster: Any) -> Any:
    """Where the node agent keeps every container's log (``<root>/<pod uid>/<container>/<run>.log``): read there,
    they outlive their pods."""
    return cluster.agent.log_store


def restores_from_logs(watch: RunWatch) -> list[tuple[float, str, int]]:
    """Every restore the trainers logged: (time, JobSet, step), from each head pod's log files."""
    from elastic_training.operators.constants import HEAD_MAIN_CONTAINER, RESTORING_STEP_RE

    logs = log_store(watch.cluster)
    found: list[tuple[float, str, int]] = []
    for uid, jobset in watch.head_pods.items():
        directory = logs.root / uid / HEAD_MAIN_CONTAINER
        for path in sorted(directory.glob("*.log")) if directory.is_dir() else []:
            for line in path.read_text(errors="replace").splitlines():
                match = RESTORING_STEP_RE.search(line)
                if match:
                    stamp = datetime.fromisoformat(line.split(" ", 1)[0][:26].rstrip("Z") + "+00:00")
                    found.append((stamp.timestamp(), jobset, int(match.group(1))))
    return sorted(found)


def killed_in_save_from_logs(watch: RunWatch) -> set[str]:
    """The JobSets whose trainer logged that it killed itself in a save (local/workloads/checkpointing.py)."""
    from elastic_training.local.workloads.checkpointing import KILL_DURING_SAVE_ENV
    from elastic_training.operators.constants import HEAD_MAIN_CONTAINER

    line = f"Fault injection ({KILL_DURING_SAVE_ENV}): killing the process"
    found: set[str] = set()
    for uid, jobset in watch.head_pods.items():
        directory = log_store(watch.cluster).root / uid / HEAD_MAIN_CONTAINER
        for path in sorted(directory.glob("*.log")) if directory.is_dir() else []:
            if line in path.read_text(errors="replace"):
                found.add(jobset)
    return found


_ESCALATE_LINE = re.compile(r"^(\S+) \[\w+\s*\] JobSet (\S+): escalate \((\w+)\): (.*?)(?: \[airflow|$)")


def escalations_from_log(log_path: Path) -> list[dict[str, Any]]:
    """Every escalation the task processes logged (a rerun's report starts afresh when the task state is gone)."""
    if not log_path.exists():
        return []
    found = []
    for line in log_path.read_text(errors="replace").splitlines():
        match = _ESCALATE_LINE.match(line)
        if match:
            at = datetime.fromisoformat(match.group(1).rstrip("Z")[:26] + "+00:00").timestamp()
            found.append({"at": at, "jobset_name": match.group(2), "reason": match.group(3), "message": match.group(4)})
    return found


def _committed_at(timeline: Sequence[tuple[float, int]], at: float) -> int | None:
    """The newest committed step seen at or before ``at``."""
    seen = [step for t, step in timeline if t <= at]
    return max(seen) if seen else None


def judge(plan: Schedule, watch: RunWatch, escalation: dict[str, Any]) -> dict[str, Any]:
    """Was this full restart warranted by what hit its JobSet (or by a stall the harness saw)?"""
    jobset = escalation.get("jobset_name")
    reason = str(escalation.get("reason"))
    hits = [f for f in watch.fired if f.jobset == jobset]
    slice_restarts = sum(len(f.fault.slices) for f in hits if f.fault.kind in SLICE_FAULTS)
    froze = any(f.fault.kind == FREEZE_TRAINER for f in hits)
    marker = _killed_in_save(plan, watch, str(jobset))
    outages = [f.fault.seconds for f in hits if f.fault.kind == GCS_ERRORS and f.fault.seconds > 0]
    bursts = [f.fault.count for f in hits if f.fault.kind == GCS_ERRORS and f.fault.count]
    outage = f"GCS down for {outages[0]:.0f} s (past gcsfs's retries)" if outages else ""
    gap = _longest_gap(watch.progress.get(str(jobset), []), float(escalation.get("at") or time.time()))
    over_budget = slice_restarts > plan.max_slice_restarts
    # A full restart only a GCS fault explains: one of the schedule's possible ones. A burst fails no save, so
    # it can explain a stall only (a save waiting out the clients' backoff): only then is it named.
    if reason == "stalled" and not outage and bursts and not froze:
        outage = f"{bursts[0]} GCS 503s in a row delayed a save (the clients' backoff)"
    by_outage = bool(outage) and (
        (reason == "stalled" and not froze) or (reason == "jobset_failed" and not marker and not over_budget)
    )
    if reason == "slice_restart_budget_spent":
        warranted = slice_restarts > plan.max_slice_restarts
        because = f"{slice_restarts} slice restarts injected into {jobset} (budget {plan.max_slice_restarts})"
    elif reason == "stalled":
        warranted = froze or gap >= plan.stall_timeout_seconds - STALL_GAP_TOLERANCE_SECONDS
        because = "trainer frozen (SIGSTOP)" if froze else f"no step for {gap:.0f} s (harness view)"
        because += f"; {outage}" if outage else ""
    elif reason == "jobset_failed":
        warranted = marker or slice_restarts > plan.max_slice_restarts or bool(outage)
        because = (
            "trainer killed in a checkpoint save" if marker else outage or f"{slice_restarts} slice restarts injected"
        )
    else:
        warranted, because = False, "unknown reason"
    return {
        "reason": reason,
        "jobset": jobset,
        "warranted": warranted,
        "because": because,
        "outage": by_outage,
        "resumed_from_step": escalation.get("resumed_from_step"),
        "quarantined": escalation.get("quarantined") or [],
        "message": escalation.get("message"),
    }


def _killed_in_save(plan: Schedule, watch: RunWatch, jobset: str) -> bool:
    """Whether the kill in a save happened in ``jobset``: the JobSet whose trainer logged it; else the one alive
    when the harness saw the marker (a whole full restart can take 0.1 s, quicker than that look)."""
    if plan.kill_during_save_step is None:
        return False
    logged = killed_in_save_from_logs(watch)
    if logged:
        return jobset in logged
    if watch.killed_in_save_of is not None:
        return watch.killed_in_save_of == jobset
    return watch.files.killed_in_save()


def _longest_gap(history: Sequence[tuple[float, int]], until: float) -> float:
    """The longest time without a new step, up to ``until``."""
    times = [t for t, _ in history if t <= until]
    if not times:
        return 0.0
    gaps = [b - a for a, b in itertools.pairwise(times)]
    gaps.append(until - times[-1])
    return max(gaps)


# -- lanes and the whole matrix ---------------------------------------------------------------------------


def operators_connection(cluster: Any, *, list_nodes: bool = False) -> str:
    """Airflow's ``kubernetes_default`` connection for the operators, as JSON: the shipped ServiceAccount and Role
    (``operators.rbac``; a token from the TokenRequest API), through the cluster's API fault proxy, so that the
    API faults (``cluster.faults.fail_requests``, ``latency``, ``expire_watches``) meet the operators' clients.
    With ``list_nodes`` the account also gets the node-reading ClusterRole, as ``avoid_failing_node_pools`` needs."""
    from tests.support.airflow_dags import grant_node_reading, write_operators_kubeconfig

    kubeconfig = write_operators_kubeconfig(cluster)
    if list_nodes:
        grant_node_reading(cluster)
    return json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig), "namespace": NAMESPACE}}
    )


def run_lane(
    root: Path,
    seed: int,
    indices: Sequence[int],
    deadline: float,
    run_timeout: float,
    *,
    gcs: bool = False,
    kueue: str = "",
    stall_timeout: int | None = None,
    history: bool = False,
) -> int:
    """A lane: one upstream local cluster, one Airflow database, its runs one after another (JSON lines on stdout).

    With ``gcs`` each run also gets a GCS emulator and a proxy in front of it that answers 503 when a fault
    says so: the trainers and the operator reach the emulator through the proxy, the harness directly.
    """
    from cryptography.fernet import Fernet

    from elastic_training.local.upstream_cluster import UpstreamCluster

    root.mkdir(parents=True, exist_ok=True)
    (root / "dags").mkdir(exist_ok=True)
    records = root / "records.jsonl"
    with UpstreamCluster(root / "cluster", description="v5e-small") as cluster:
        env = dict(os.environ)
        env.update(
            {
                "AIRFLOW_HOME": str(root / "airflow"),
                "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
                # Unit-test mode makes a Fernet key per process: one per lane, or a run could not read the
                # Variables (the failure history) an earlier run of its lane wrote.
                "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
                # dag.test() runs triggers inline: no scheduler race for the settle time to wait out.
                "AIRFLOW__ELASTIC_TRAINING__DEFER_SETTLE_SECONDS": "0",
                "JAX_PLATFORMS": "cpu",
                "AIRFLOW_CONN_KUBERNETES_DEFAULT": operators_connection(cluster, list_nodes=history),
            }
        )
        subprocess.run(child_command("_resetdb"), cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
        lane = Lane(root, cluster, env)
        for index in indices:
            plan = schedule(seed, index, gcs=gcs, kueue=kueue, history=history)
            if stall_timeout is not None:
                plan = dataclasses.replace(plan, stall_timeout_seconds=stall_timeout)
            left = deadline - time.time()
            if left < MIN_SECONDS_TO_START:
                record: dict[str, Any] = {
                    "seed": seed,
                    "index": index,
                    "run_name": plan.run_name,
                    "schedule": plan.to_json(),
                    "describe": plan.describe(),
                    "outcome": "not run",
                    "why": "the harness's time budget ran out",
                }
            else:
                record = run_one(lane, plan, min(run_timeout, left), cut_by_budget=left < run_timeout)
            with records.open("a") as handle:
                handle.write(json.dumps(record, default=str) + "\n")
            print(f"[chaos] run {index}: {record['outcome']}: {record['why']}", flush=True)
    return 0


@contextlib.contextmanager
def _run_storage(root: Path) -> Iterator[Lane]:
    """A GCS emulator with a bucket and a 503 proxy for one run (only the storage fields are set)."""
    from tests.support.gcs_emulator import FlakyProxy, start_emulator

    emulator = start_emulator()
    proxy = FlakyProxy(emulator.endpoint)
    try:
        bucket = emulator.create_bucket(f"chaos-{os.getpid()}")
        through_proxy = {**emulator.env, "STORAGE_EMULATOR_HOST": proxy.endpoint}
        through_proxy["TENSORSTORE_GCS_HTTP_URL"] = proxy.endpoint
        with emulator.environment():  # the harness's own reads and validation go straight to the emulator
            yield Lane(
                root,
                None,
                {},
                base=f"{bucket}/runs",
                storage_env=through_proxy,
                gcs_proxy=proxy,
                gcs_client=emulator.client(),
            )
    finally:
        proxy.close()
        emulator.stop()


def stop_lanes(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    """Interrupt lanes still running (their clusters stop their pods on the way out), then kill them."""
    running = [p for p in processes if p.poll() is None]
    for process in running:
        os.killpg(process.pid, signal.SIGINT)
    for process in running:
        try:
            process.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def _lane_records(roots: Sequence[Path]) -> dict[int, dict[str, Any]]:
    """The records the lanes wrote, by run index."""
    records: dict[int, dict[str, Any]] = {}
    for root in roots:
        path = root / "records.jsonl"
        if path.exists():
            for line in path.read_text().splitlines():
                record = json.loads(line)
                records[int(record["index"])] = record
    return records


def run_matrix(
    out: Path,
    seed: int,
    runs: Sequence[int],
    jobs: int,
    budget: float,
    run_timeout: float,
    *,
    gcs: bool = False,
    kueue: str = "",
    stall_timeout: int | None = None,
    history: bool = False,
) -> list[dict[str, Any]]:
    """The runs ``runs`` (indices), split over ``jobs`` lanes; the records in run order."""
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.time() + budget
    dimension = ["gcs" if gcs else "local", kueue or "-", str(stall_timeout or "-"), "history" if history else "-"]
    lanes = []
    for lane in range(jobs):
        indices = [i for n, i in enumerate(runs) if n % jobs == lane]
        if not indices:
            continue
        root = out / f"lane{lane}"
        (root / "records.jsonl").unlink(missing_ok=True)
        arguments = [str(root), str(seed), ",".join(map(str, indices)), str(deadline), str(run_timeout), *dimension]
        lanes.append((root, subprocess.Popen(child_command("_lane", *arguments), cwd=REPO, start_new_session=True)))
    try:
        for _, process in lanes:
            process.wait(timeout=max(1.0, deadline - time.time() + run_timeout + 300))
    except subprocess.TimeoutExpired:
        pass
    finally:  # also when this process is interrupted: a lane left behind would keep its cluster and pods
        stop_lanes([process for _, process in lanes])
    records = _lane_records([root for root, _ in lanes])
    for index in runs:
        if index not in records:
            plan = schedule(seed, index, gcs=gcs, kueue=kueue, history=history)
            records[index] = {
                "seed": seed,
                "index": index,
                "run_name": plan.run_name,
                "schedule": plan.to_json(),
                "describe": plan.describe(),
                "outcome": "lost",
                "why": "its lane ended without a record",
            }
    return [records[i] for i in runs]


# -- the table --------------------------------------------------------------------------------------------


def _escalations_cell(record: dict[str, Any]) -> str:
    escalations = record.get("escalations") or []
    if not escalations:
        return "-"
    return ", ".join(f"{e['reason']} ({'ok' if e['warranted'] else 'UNWARRANTED'})" for e in escalations)


def _kueue_cell(record: dict[str, Any]) -> str:
    preemptions = record.get("preemptions")
    queued = record.get("queued_seconds")
    shown = [
        "-" if preemptions is None else str(len(preemptions)),
        "-" if queued is None else f"{float(queued):.0f}",
        "; ".join(record.get("kueue_broken") or []).replace("|", "/") or "none",
    ]
    return ", ".join(shown)


def _history_cell(record: dict[str, Any]) -> str:
    seen = record.get("history")
    if not seen:
        return "-"
    avoided = ",".join(p.removeprefix("tpu-v5e-16-") for p in seen["avoided"]) or "none"
    failing = ",".join(p.removeprefix("tpu-v5e-16-") for p in seen["failing"])
    relaxed = " relaxed" if seen["relaxed"] else ""
    probation = (
        f" probation {','.join(p.removeprefix('tpu-v5e-16-') for p in seen['probation'])}" if seen["probation"] else ""
    )
    shown = [
        f"{avoided}{f' ({failing})' if failing else ''}{probation}{relaxed}",
        f"{seen['period']} ({seen.get('period_runs') or 0})",
        "; ".join(record.get("history_broken") or []).replace("|", "/") or "none",
    ]
    return ", ".join(shown)


def markdown(records: Sequence[dict[str, Any]], command: str, seed: int) -> str:
    """The chaos table: a summary, then one row per run."""
    ran = [r for r in records if r.get("outcome") not in ("not run", "lost")]
    succeeded = [r for r in ran if r["outcome"] == "success"]
    kueue = any(r["schedule"].get("kueue") for r in records)
    history = any(r["schedule"].get("history") for r in records)
    lines = [
        f"Seed {seed}; command: `{command}`.",
        "",
        "| runs | succeeded | expected to fail (budget) | failed | hung | max JobSets at once | committed steps lost "
        "beyond a period | false successes | false failures | unwarranted escalations | escalations missing from "
        "the report |"
        + (" runs breaking a Kueue promise |" if kueue else "")
        + (" runs breaking a history promise |" if history else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if kueue else "") + ("---|" if history else ""),
        f"| {len(ran)} of {len(records)} | {len(succeeded)} "
        f"| {sum(1 for r in ran if not r['schedule']['expected']['survivable'])} "
        f"| {sum(1 for r in ran if r['outcome'] not in ('success', 'hung'))} "
        f"| {sum(1 for r in ran if r['outcome'] == 'hung')} "
        f"| {max((r.get('max_coexisting_jobsets') or 0 for r in ran), default=0)} "
        f"| {sum(r.get('steps_lost_beyond_period') or 0 for r in ran)} "
        f"| {sum(1 for r in ran if r.get('false_success'))} "
        f"| {sum(1 for r in ran if r.get('false_failure'))} "
        f"| {sum(r.get('unwarranted_escalations') or 0 for r in ran)} "
        f"| {sum(r.get('escalations_missing_from_report') or 0 for r in ran)} |"
        + (f" {sum(1 for r in ran if r.get('kueue_broken'))} |" if kueue else "")
        + (f" {sum(1 for r in ran if r.get('history_broken'))} |" if history else ""),
        "",
        "| # | steps / slices / budgets (slice, full) | faults (at completed step) | expected full restarts "
        "| outcome | why | JobSets at once | steps lost | escalations | false S/F |"
        + (" Kueue: preemptions, queued s, promises broken |" if kueue else "")
        + (" history: avoided (failing), period (runs learnt from), promises broken |" if history else "")
        + " s |",
        "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if kueue else "") + ("---|" if history else ""),
    ]
    for r in records:
        s = r["schedule"]
        expected = s["expected"]
        possible = len(expected.get("possible") or [])
        exp = f"{len(expected['escalations'])}{f' (+{possible} possible)' if possible else ''}"
        exp += "" if expected["survivable"] else " (over budget)"
        flags = ("S" if r.get("false_success") else "") + ("F" if r.get("false_failure") else "")
        why = str(r.get("why", "")).replace("|", "/")
        if len(why) > 110:
            why = why[:107] + "…"
        lines.append(
            f"| {r['index']} | {s['steps']} / {s['num_slices']} / {s['max_slice_restarts']}, {s['max_full_restarts']} "
            f"| {r['describe']} | {exp} | {r['outcome']} | {why} | {r.get('max_coexisting_jobsets', '-')} "
            f"| {r.get('steps_lost_beyond_period', '-')} | {_escalations_cell(r)} | {flags or '-'} "
            + (f"| {_kueue_cell(r)} " if kueue else "")
            + (f"| {_history_cell(r)} " if history else "")
            + f"| {r.get('wall_seconds', '-')} |"
        )
    return "\n".join(lines) + "\n"


def _child(args: Sequence[str]) -> int | None:
    """Run the child process ``args`` names (a lane, a task, a database reset); None for the harness itself."""
    if args and args[0] == "_task":
        return run_task(Path(args[1]), args[2], Path(args[3]))
    if args and args[0] == "_resetdb":
        return reset_db()
    if args and args[0] == "_lane":
        root, seed, lane_indices, deadline, run_timeout, storage, kueue, stall, history = args[1:10]
        return run_lane(
            Path(root),
            int(seed),
            [int(i) for i in lane_indices.split(",")],
            float(deadline),
            float(run_timeout),
            gcs=storage == "gcs",
            kueue="" if kueue == "-" else kueue,
            stall_timeout=None if stall == "-" else int(stall),
            history=history == "history",
        )
    return None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=1, help="lanes side by side (each its own cluster)")
    parser.add_argument("--budget", type=float, default=3600.0, help="seconds; no run starts after it")
    parser.add_argument("--run-timeout", type=float, default=480.0, help="seconds one run may take")
    parser.add_argument("--out", type=Path, default=None, help="directory for the JSON lines, table and logs")
    parser.add_argument("--only", default="", help="comma-separated run indices to run (development)")
    parser.add_argument("--dry-run", action="store_true", help="print the schedules and stop")
    parser.add_argument(
        "--gcs",
        action="store_true",
        help="run directories on gs:// (a GCS emulator per lane) and GCS 503 bursts and outages among the faults",
    )
    parser.add_argument(
        "--kueue",
        choices=KUEUE_DIMENSIONS,
        default="",
        help="a Kueue dimension: every run in multislice-queue, preempted mid-training by a higher-priority JobSet "
        "(preempt), queued behind one past its stall timeout (queue-wait), or evicted by Kueue's waitForPodsReady when "
        "a slice's node-pool repair outlasts its recoveryTimeout (pods-ready); or in a flex-start queue whose "
        "ProvisioningRequest is delayed, fails once or has its capacity revoked (provisioning); no other faults",
    )
    parser.add_argument(
        "--history",
        action="store_true",
        help="both history options on (avoid_failing_node_pools, checkpoint_period='auto'), the runs of a lane sharing "
        "one failure history as a DAG's nightly runs do; the faults are the matrix's",
    )
    parser.add_argument(
        "--stall-timeout",
        type=int,
        default=None,
        help="every run's stall_timeout in seconds (default: the schedule's 60); a loaded machine may take longer "
        "than 60 s to its first step. A queue wait is this plus its extra seconds",
    )
    return parser


def _options(args: Sequence[str]) -> argparse.Namespace:
    parser = _parser()
    options = parser.parse_args(args)
    if options.stall_timeout is not None and options.stall_timeout < 10:
        parser.error(f"--stall-timeout must be at least 10 seconds, got {options.stall_timeout}")
    if options.kueue and options.gcs:
        parser.error("--kueue runs write to local disk: drop --gcs")
    if options.kueue and options.history:
        parser.error("--history runs the matrix's faults, not a Kueue dimension's: drop --kueue")
    return options


def _print_schedules(options: argparse.Namespace) -> None:
    for plan in schedules(options.seed, options.runs, gcs=options.gcs, kueue=options.kueue, history=options.history):
        print(json.dumps(plan.to_json()))
        print(
            f"# run {plan.index}: {plan.describe()}; expected full restarts "
            f"{list(plan.expected().escalations)}, possible {list(plan.expected().possible)}; "
            f"survivable={plan.expected().survivable}"
        )


def _broken_runs(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of runs that broke a promise."""
    return [
        r
        for r in records
        if (r.get("max_coexisting_jobsets") or 0) > 1
        or (r.get("steps_lost_beyond_period") or 0) > 0
        or r.get("false_success")
        or r.get("kueue_broken")
        or r.get("history_broken")
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    child = _child(args)
    if child is not None:
        return child
    options = _options(args)
    if options.dry_run:
        _print_schedules(options)
        return 0
    out = (options.out or Path(tempfile.mkdtemp(prefix="chaos-"))).resolve()  # sqlite needs absolute paths
    indices = [int(i) for i in options.only.split(",") if i] or list(range(options.runs))
    records = run_matrix(
        out,
        options.seed,
        indices,
        options.jobs,
        options.budget,
        options.run_timeout,
        gcs=options.gcs,
        kueue=options.kueue,
        stall_timeout=options.stall_timeout,
        history=options.history,
    )
    with (out / "chaos.jsonl").open("w") as handle:
        for record in records:
            handle.write(json.dumps(record, default=str) + "\n")
    command = "python -m benchmarks.chaos " + " ".join(re.sub(r"^--out=.*", "", a) for a in args if a)
    table = markdown(records, command.strip(), options.seed)
    (out / "chaos.md").write_text(table)
    print(table)
    print(f"records: {out / 'chaos.jsonl'}")
    return 1 if _broken_runs(records) else 0


if __name__ == "__main__":
    sys.exit(main())
