"""`JobSetTrigger` (watches) against a 10-second polling trigger, or against itself at a tenth of the JobSets,
side by side on the upstream local cluster.

    .venv/bin/python -m benchmarks.trigger_watch --jobsets 100 --window 300 --deletes 20
    .venv/bin/python -m benchmarks.trigger_watch --jobsets 1000 --queued 0.9 --baseline watch --baseline-jobsets 100

``--queued F`` leaves that fraction of the JobSets queued by Kueue: every JobSet then joins the benchmark's
LocalQueue (``bench-queue``; its ClusterQueue's cpu quota holds exactly the running ones, each pod requesting
10m), the running ones are created first and admitted, and the rest wait behind them, suspended, their Workloads
``QuotaReserved=False`` ("insufficient unused quota"), as on a full cluster. ``--baseline watch`` replaces the
polling triggerer by a second ``JobSetTrigger`` triggerer watching ``--baseline-jobsets`` of the same JobSets,
the running ones first (at 1,000 with 90 % queued and 100: exactly the 100 running), so one run gives both
figures and their ratio; each watch triggerer sends its own User-Agent (``bench-trigger-<label>``) so that the
cluster counts its requests apart. Deletes hit running JobSets both triggerers watch.

Four processes, so that each one's CPU is its own:

- **cluster**: an :class:`UpstreamCluster` (``single-node``: etcd, kube-apiserver, kube-controller-manager,
  kube-scheduler, JobSet, Kueue, the node agent). Requests are counted by client (``User-Agent``) and kind
  (list, get, watch, log follow, log read) from kube-apiserver's audit log (``RequestReceived``: a watch or a log
  follow is one request however long it stays open), and in all, every client, from its ``/metrics``
  (``apiserver_request_total``, counted when a request ends; ``apiserver_longrunning_requests``, open now). Its
  CPU is every control-plane process's and the node agent's, from ``/proc``. It also force-deletes pods on request
  (like ``kubectl delete pod --grace-period=0 --force``).
- **watch triggerer**: one event loop running ``--jobsets`` monitors of ``operators.triggers.JobSetTrigger``
  at once (the trigger's own ``_Monitor``, which is all ``JobSetTrigger.run()`` runs, held so the
  benchmark can see when it has read everything once): it watches the JobSet, its pods and its Jobs
  (through the process's shared watches, one per kind) and follows the head pod's log. A slice budget of 0
  makes the first slice restart yield its event.
- **polling triggerer**: the same number of :class:`PollingJobSetTrigger`, in the provider's
  ``KubernetesJobTrigger`` style: get, sleep ``--poll-interval`` seconds, get again. Each poll is
  two requests, get the JobSet and list its Jobs (a slice restart shows as the worker Job's
  ``status.failed`` going up, which is how ``MonitorState`` counts it; pods alone only show
  in-place container restarts). What it reads goes into the same ``MonitorState`` and the same
  policy. Starts are spread over one interval, as triggers deferred at different times are.
- **driver** (this process): creates the JobSets, whose pods run ``sleep`` through the node agent
  (a ``pathways-head`` job and a ``worker`` job, labelled as the operator's), then measures:

1. *start*: requests from starting the triggers until every one has read everything once and every
   watch triggerer has its shared watches and every log follow open (counted at the cluster);
2. *steady window* (``--window`` seconds, nothing changing): requests per client, and each
   triggerer's CPU time (user + system) over wall time and its resident memory;
3. *detection*: ``--deletes`` worker pods of different JobSets force-deleted one by one (random
   gaps of 0.5 to 1.5 s). "Restart counted" is when the trigger's ``MonitorState`` counted the
   slice restart (``_Monitor._restarted`` wrapped to note the time), "event" when the trigger yielded; both minus
   the time just before the delete in the cluster process (``time.time()``, one machine). The
   watch trigger reads the head log's last lines (one short request) before it yields; that is in.

Requests per JobSet-hour come from the steady window: steady requests per JobSet * 3600 / window.
The watch streams reopen after their server-side timeout (300 s in ``operators.hooks``), so a
window of 300 s holds one reopen per stream if the reopens are not delayed (with 100 triggers they
were: each new API client loads the CA bundle on the event loop; benchmarks/RESULTS.md); a shorter
window undercounts the watch trigger. Start requests are reported apart (once per trigger start).

Prints a Markdown table; ``--json`` writes every number. Bounded in time (each wait has a
timeout), loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config

from benchmarks.upstream import cpu_seconds, difference

NS = "default"
BENCH_LABEL = "elastic-training.airflow.apache.org/benchmark"
DRIVER_AGENT = "bench-driver"
POLL_AGENT = "bench-polling-trigger"
HEAD_JOB, WORKER_JOB = "pathways-head", "worker"  # operators.constants names, without importing Airflow here
HEAD_CONTAINER, WORKER_CONTAINER = "jax-tpu", "pathways-worker"
LABEL_JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
LABEL_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
LABEL_QUEUE_NAME = "kueue.x-k8s.io/queue-name"  # operators.constants.LABEL_KUEUE_QUEUE_NAME
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
BENCH_QUEUE, BENCH_FLAVOR = "bench-queue", "bench-flavor"  # the LocalQueue and ClusterQueue, the ResourceFlavor
POD_CPU_MILLIS = 10  # each pod's cpu request when the JobSets are queued: what the quota counts
AGENT_PREFIX = "bench-trigger-"  # a watch triggerer with a label sends User-Agent bench-trigger-<label>
SLEEP_SECONDS = 7200
POLL_SECONDS: list[float] = []  # in a polling triggerer: how long each poll (both requests) took

# The cluster process: the upstream local cluster, driven over stdin/stdout. Requests are counted by client and kind
# from kube-apiserver's audit log, and in all from its /metrics (benchmarks/upstream.py).
_CLUSTER_SCRIPT = """
import json, sys, time
from pathlib import Path
from kubernetes import client
from benchmarks.upstream import AuditCounter, component_pids, request_totals
from elastic_training.local.upstream_cluster import UpstreamCluster

with UpstreamCluster(Path(sys.argv[1]), description="single-node") as cluster:
    counter = AuditCounter(cluster.audit_log_path)
    core = client.CoreV1Api(cluster.api)
    print(json.dumps({"kubeconfig": str(cluster.kubeconfig_path), "pids": component_pids(cluster)}), flush=True)
    for line in sys.stdin:
        command = line.split()
        if command[0] == "counts":
            print(json.dumps({"counts": counter.update()}), flush=True)
        elif command[0] == "totals":
            print(json.dumps({"totals": request_totals(cluster.api)}), flush=True)
        elif command[0] == "delete":  # kubectl delete pod --grace-period=0 --force
            at = time.time()
            core.delete_namespaced_pod(command[2], command[1], grace_period_seconds=0)
            print(json.dumps({"at": at}), flush=True)
"""


# -- the polling baseline ---------------------------------------------------------------------


def _polling_trigger_class() -> type[Any]:
    """:class:`PollingJobSetTrigger`, built on first use so that the driver never imports Airflow."""
    from airflow.triggers.base import BaseTrigger, TriggerEvent
    from kubernetes_asyncio import client as async_k8s

    from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION
    from elastic_training.operators.hooks import AsyncJobSetHook
    from elastic_training.operators.observations import MonitorState
    from elastic_training.operators.policy import Action, Budgets, decide

    class PollingJobSetTrigger(BaseTrigger):
        """Every ``poll_interval`` s: get the JobSet and list its Jobs (the ``KubernetesJobTrigger`` loop)."""

        def __init__(self, *, name: str, namespace: str, budgets: dict[str, Any], poll_interval: float) -> None:
            super().__init__()
            self.name, self.namespace, self.budgets, self.poll_interval = name, namespace, budgets, poll_interval
            self.polls = 0
            self.counted_at: float | None = None  # when the state first counted a slice restart

        def serialize(self) -> tuple[str, dict[str, Any]]:
            kwargs = {"name": self.name, "namespace": self.namespace, "budgets": self.budgets}
            return f"{__name__}.PollingJobSetTrigger", {**kwargs, "poll_interval": self.poll_interval}

        async def run(self) -> AsyncIterator[Any]:
            hook = AsyncJobSetHook(conn_id="kubernetes_default")
            state = MonitorState(started_at=time.time())
            budgets = Budgets(**self.budgets)
            while True:
                began = time.perf_counter()
                async with hook.get_conn() as api:
                    api.user_agent = POLL_AGENT
                    jobset = await async_k8s.CustomObjectsApi(api).get_namespaced_custom_object(
                        JOBSET_GROUP, JOBSET_VERSION, self.namespace, JOBSET_PLURAL, self.name
                    )
                    listed = await async_k8s.BatchV1Api(api).list_namespaced_job(
                        self.namespace, label_selector=f"{LABEL_JOBSET_NAME}={self.name}"
                    )
                    jobs = api.sanitize_for_serialization(listed).get("items") or []
                POLL_SECONDS.append(time.perf_counter() - began)
                now = time.time()
                state.on_jobset(jobset)
                state.forget_missing(alive_jobs={str(j["metadata"]["uid"]) for j in jobs})
                for job in jobs:
                    if state.on_job(job, deleted=False, now=now) and self.counted_at is None:
                        self.counted_at = time.time()
                self.polls += 1
                observation = state.observation(now=now, target_step=1 << 30, full_restarts_used=0)
                decision = decide(observation, budgets)
                if decision.action is not Action.CONTINUE:
                    payload = {"reason": decision.reason.value, "slice_restarts": state.slice_restarts}
                    yield TriggerEvent({**payload, "counted_at": self.counted_at})
                    return
                await asyncio.sleep(self.poll_interval)

    return PollingJobSetTrigger


# -- a triggerer process ----------------------------------------------------------------------


def _usage() -> dict[str, float]:
    used = resource.getrusage(resource.RUSAGE_SELF)
    rss_kib = 0
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss_kib = int(line.split()[1])
    usage = {"cpu": used.ru_utime + used.ru_stime, "wall": time.time(), "rss_kib": rss_kib}
    usage["maxrss_kib"] = used.ru_maxrss
    if POLL_SECONDS:
        usage["polls"] = len(POLL_SECONDS)
        usage["poll_seconds_median"] = statistics.median(POLL_SECONDS)
    return usage


def _budgets(max_slice_restarts: int = 0) -> dict[str, Any]:
    # By default the first slice restart spends the budget; nothing else can fire during the run.
    day = 86400.0
    return {
        "max_slice_restarts": max_slice_restarts,
        "slice_restart_window_seconds": day,
        "stall_timeout_seconds": 30 * day,
        "max_full_restarts": 1,
    }


async def _watch_monitor(
    name: str, trigger_class: Any, monitor_class: Any, state_class: Any, budgets: dict[str, Any]
) -> Any:
    """The monitor ``JobSetTrigger.run()`` would run, noting when its state first counts a restart."""
    trigger = trigger_class(
        name=name, namespace=NS, uid=None, target_step=1 << 30, budgets=budgets, state={"started_at": time.time()}
    )
    monitor = monitor_class(trigger, state_class.from_json(trigger.state), await trigger._hook())
    monitor.counted_at = None
    restarted = monitor._restarted

    def counted(slices: list[int]) -> None:  # instrumentation only: every newly counted slice restart passes here
        if slices and monitor.counted_at is None:
            monitor.counted_at = time.time()
        restarted(slices)

    monitor._restarted = counted
    return monitor


def _send_user_agent(agent: str) -> None:
    """Every API client made in this process sends ``agent`` (the cluster counts requests by it)."""
    from kubernetes_asyncio import client as async_k8s

    original = async_k8s.ApiClient.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.user_agent = agent

    async_k8s.ApiClient.__init__ = init  # type: ignore[method-assign]


Emit = Callable[[dict[str, Any]], None]
Started = tuple[list["asyncio.Task[None]"], Callable[[], bool]]


def _emitter() -> Emit:
    """Print one JSON line per message, whole, from any thread."""
    lock = threading.Lock()

    def emit(message: dict[str, Any]) -> None:
        with lock:
            print(json.dumps(message), flush=True)

    return emit


async def _start_watches(names: list[str], emit: Emit) -> Started:
    """One ``JobSetTrigger`` monitor per JobSet, each on a task; and whether every one has synced."""
    from elastic_training.operators.observations import MonitorState
    from elastic_training.operators.triggers import JobSetTrigger, _Monitor

    tasks: list[asyncio.Task[None]] = []
    monitors = [await _watch_monitor(n, JobSetTrigger, _Monitor, MonitorState, _budgets()) for n in names]
    for name, monitor in zip(names, monitors, strict=True):

        async def watch(name: str = name, monitor: Any = monitor) -> None:
            # After its event a fresh trigger watches on (as after the operator defers again), with a
            # budget that the restart already seen does not spend, so it stays for the steady window.
            while True:
                event = await monitor.run()
                restarts = event["state"]["slice_restarts"]
                emit({"event": name, "at": time.time(), "reason": event["reason"], "slice_restarts": restarts,
                      "counted_at": monitor.counted_at})  # fmt: skip
                monitor = await _watch_monitor(name, JobSetTrigger, _Monitor, MonitorState, _budgets(1 << 20))

        tasks.append(asyncio.create_task(watch()))

    def synced() -> bool:
        # A JobSet Kueue has not admitted has no pods: its Workload read as pending is all there is.
        return all(
            (m.state.head_pod and m.state.pods and m.state.jobs) or m.state.queue_state == "pending" for m in monitors
        )

    return tasks, synced


def _start_polls(names: list[str], poll_interval: float, emit: Emit) -> Started:
    """One polling trigger per JobSet, each on a task, started at a random point of its interval."""
    polling = _polling_trigger_class()
    triggers = [polling(name=n, namespace=NS, budgets=_budgets(), poll_interval=poll_interval) for n in names]
    tasks: list[asyncio.Task[None]] = []
    for name, trigger in zip(names, triggers, strict=True):

        async def poll(name: str = name, trigger: Any = trigger) -> None:
            await asyncio.sleep(random.uniform(0, poll_interval))
            while True:
                async for event in trigger.run():
                    emit({"event": name, "at": time.time(), **event.payload})
                trigger = polling(name=name, namespace=NS, budgets=_budgets(1 << 20), poll_interval=poll_interval)

        tasks.append(asyncio.create_task(poll()))
    return tasks, lambda: all(t.polls > 0 for t in triggers)


async def _serve_triggers(kind: str, names: list[str], poll_interval: float, emit: Emit) -> None:
    """Start the triggers, say when they are ready, answer ``usage`` on stdin, and stop when stdin closes."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def commands() -> None:
        for line in sys.stdin:
            if line.strip() == "usage":
                emit({"usage": _usage()})
        loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=commands, daemon=True).start()
    before = _usage()
    if kind == "watch":
        tasks, synced = await _start_watches(names, emit)
    else:
        tasks, synced = _start_polls(names, poll_interval, emit)
    while not stop.is_set():
        if synced():
            emit({"ready": time.time(), "before": before})
            break
        await asyncio.sleep(0.05)
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def run_triggerer(kind: str, names: list[str], poll_interval: float, agent: str | None = None) -> int:
    """Run one trigger per JobSet on one loop; JSON lines out (ready, events, usage), commands in."""
    # Imported before the triggers' "before" reading, whichever kind: the process's own memory includes Airflow's.
    import elastic_training.operators.observations
    import elastic_training.operators.triggers  # noqa: F401

    if agent:
        _send_user_agent(agent)
    asyncio.run(_serve_triggers(kind, names, poll_interval, _emitter()))
    return 0


# -- the driver -------------------------------------------------------------------------------


class Child:
    """A child process speaking JSON lines; a reader thread queues every line it prints."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None, stderr: Path | None = None) -> None:
        errors = None if stderr is None else stderr.open("w")
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True, env=env
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.events: dict[str, dict[str, Any]] = {}  # a triggerer's first event per JobSet
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                message = json.loads(line)
                if "event" in message:
                    self.events.setdefault(message["event"], message)
                else:
                    self.lines.put(message)

    def send(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def next(self, key: str, timeout: float) -> dict[str, Any]:
        """The next line holding ``key`` (others are dropped: replies come in order)."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(0.001, deadline - time.monotonic()))
            if key in line:
                return line

    def ask(self, command: str, key: str, timeout: float = 60.0) -> dict[str, Any]:
        self.send(command)
        return self.next(key, timeout)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _jobset(name: str, in_queue: bool = False) -> dict[str, Any]:
    """A JobSet of two ``sleep`` pods; ``in_queue``: it joins the benchmark's LocalQueue (Kueue suspends it at
    create until admitted) and its pods request the cpu the ClusterQueue's quota counts."""

    def rjob(rname: str, container: str, backoff: int, restart: str) -> dict[str, Any]:
        spec: dict[str, Any] = {"name": container, "image": "local", "command": ["sleep", str(SLEEP_SECONDS)]}
        if in_queue:
            spec["resources"] = {"requests": {"cpu": f"{POD_CPU_MILLIS}m"}}
        pod = {
            "metadata": {"labels": {BENCH_LABEL: "trigger-watch"}},
            "spec": {"restartPolicy": restart, "terminationGracePeriodSeconds": 1, "containers": [spec]},
        }
        job = {"backoffLimit": backoff, "completionMode": "Indexed", "completions": 1, "parallelism": 1}
        return {"name": rname, "replicas": 1, "template": {"spec": {**job, "template": pod}}}

    labels = {BENCH_LABEL: "trigger-watch"}
    if in_queue:
        labels[LABEL_QUEUE_NAME] = BENCH_QUEUE
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {
            "failurePolicy": {"restartStrategy": "Recreate", "maxRestarts": 0},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [HEAD_JOB]},
            "replicatedJobs": [
                rjob(HEAD_JOB, HEAD_CONTAINER, 0, "Never"),
                rjob(WORKER_JOB, WORKER_CONTAINER, 1000, "OnFailure"),
            ],
        },
    }


def _create_queue(custom: client.CustomObjectsApi, admitted: int) -> None:
    """A ResourceFlavor, a ClusterQueue whose cpu quota holds exactly ``admitted`` JobSets, and its LocalQueue:
    the JobSets created after those wait behind them ("insufficient unused quota"), as on a full cluster."""
    api_version = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
    quota = f"{admitted * 2 * POD_CPU_MILLIS}m" if admitted else "0"
    flavor = {"apiVersion": api_version, "kind": "ResourceFlavor", "metadata": {"name": BENCH_FLAVOR}, "spec": {}}
    cluster_queue = {
        "apiVersion": api_version,
        "kind": "ClusterQueue",
        "metadata": {"name": BENCH_QUEUE},
        "spec": {
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [{"name": BENCH_FLAVOR, "resources": [{"name": "cpu", "nominalQuota": quota}]}],
                }
            ],
        },
    }
    local_queue = {
        "apiVersion": api_version,
        "kind": "LocalQueue",
        "metadata": {"name": BENCH_QUEUE, "namespace": NS},
        "spec": {"clusterQueue": BENCH_QUEUE},
    }
    custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", flavor)
    custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", cluster_queue)
    custom.create_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, NS, "localqueues", local_queue)


def _wait_running(core: client.CoreV1Api, pods: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        listed = core.list_namespaced_pod(NS, label_selector=f"{BENCH_LABEL}=trigger-watch").items
        running = sum(1 for p in listed if p.status and p.status.phase == "Running")
        if running >= pods:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{running} of {pods} pods running after {timeout:.0f} s")
        time.sleep(1.0)


def _wait_pending(custom: client.CustomObjectsApi, pending: int, timeout: float) -> str:
    """Wait until ``pending`` Workloads say ``QuotaReserved=False`` reason ``Pending``; one of their messages."""
    deadline = time.monotonic() + timeout
    while True:
        listed = custom.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, NS, "workloads")["items"]
        said = [
            str(c.get("message", ""))
            for w in listed
            for c in (w.get("status") or {}).get("conditions") or []
            if c.get("type") == "QuotaReserved" and c.get("status") == "False" and c.get("reason") == "Pending"
        ]
        if len(said) >= pending:
            return said[0] if said else ""
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(said)} of {pending} Workloads pending after {timeout:.0f} s")
        time.sleep(1.0)


def _by_client(
    before: dict[str, int], after: dict[str, int], labels: tuple[str, ...] = ("watch", "polling")
) -> dict[str, dict[str, int]]:
    """Count differences as ``{client: {kind: n}}``: ``driver``, ``polling``, a watch triggerer's label (its
    ``bench-trigger-<label>`` User-Agent), or ``cluster`` for any other agent: the cluster's own components (the
    controllers, the scheduler, JobSet, Kueue, the node agent), which talk to kube-apiserver too."""
    result: dict[str, dict[str, int]] = {label: {} for label in (*labels, "driver", "cluster")}
    for key, value in after.items():
        agent, _, kind = key.partition("\t")
        if agent.startswith(AGENT_PREFIX):
            who = agent.removeprefix(AGENT_PREFIX)
        else:
            who = {POLL_AGENT: "polling", DRIVER_AGENT: "driver"}.get(agent, "cluster")
        delta = value - before.get(key, 0)
        if delta:
            counts = result.setdefault(who, {})
            counts[kind] = counts.get(kind, 0) + delta
    return result


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _cluster_cpu(pids: dict[str, int]) -> dict[str, Any]:
    """CPU seconds (user + system) of the cluster's processes, each and in all, from ``/proc``."""
    by = {name: cpu_seconds(pid) for name, pid in pids.items()}
    return {"cpu": sum(by.values()), "wall": time.time(), "by": by}


def _cpu_share(a: dict[str, float], b: dict[str, float]) -> float:
    return (b["cpu"] - a["cpu"]) / (b["wall"] - a["wall"])


def _streams(names: list[str], running: set[str], in_queue: bool) -> tuple[int, int]:
    """(watches, log follows) a watch triggerer holds open for ``names``: the process's shared watches of the
    namespace's JobSets, pods and Jobs, and of its Workloads when the JobSets are in a queue, however many JobSets
    (``operators.shared_watches``); the head's log only where it runs."""
    kinds = (4 if in_queue else 3) if names else 0
    return kinds, sum(1 for n in names if n in running)


def _wait_streams(
    cluster: Child, start: dict[str, int], expected: dict[str, tuple[int, int]], labels: tuple[str, ...], timeout: float
) -> dict[str, int]:
    """Wait until each watch triggerer has opened its ``expected`` (watches, log follows); the counts then."""
    deadline = time.monotonic() + timeout
    while True:
        counts: dict[str, int] = cluster.ask("counts", "counts")["counts"]
        opened = _by_client(start, counts, labels)
        short = {
            label: opened.get(label, {})
            for label, (watches, follows) in expected.items()
            if opened.get(label, {}).get("watch", 0) < watches or opened.get(label, {}).get("log follow", 0) < follows
        }
        if not short:
            return counts
        if time.monotonic() > deadline:
            raise TimeoutError(f"watch triggers opened only {short}, expected {expected}")
        time.sleep(0.5)


@dataclass(frozen=True)
class _Plan:
    """The JobSets the benchmark makes (the first running, the rest queued) and what each triggerer watches."""

    names: list[str]
    running: list[str]
    queued: list[str]
    baseline_label: str
    triggerers: dict[str, tuple[str, list[str]]]  # label: (kind, the JobSets it watches)

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(self.triggerers)

    @property
    def in_queue(self) -> bool:
        return bool(self.queued)


def _plan(args: argparse.Namespace) -> _Plan:
    queued_count = round(args.jobsets * args.queued)
    names = [f"bench-tw-{i:04d}" for i in range(args.jobsets)]
    baseline_label = "polling" if args.baseline == "polling" else "baseline"
    # The baseline watches the admitted JobSets first: at 1,000 with 90 % queued and 100, exactly the 100 running.
    triggerers = {"watch": ("watch", names), baseline_label: (args.baseline, names[: args.baseline_jobsets])}
    split = args.jobsets - queued_count
    return _Plan(names, names[:split], names[split:], baseline_label, triggerers)


def _make_jobsets(core: client.CoreV1Api, custom: client.CustomObjectsApi, plan: _Plan) -> str:
    """Create the running JobSets, wait for their pods, then the queued ones behind them; Kueue's pending message."""
    if plan.in_queue:
        _create_queue(custom, len(plan.running))
    for name in plan.running:
        custom.create_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", NS, "jobsets", _jobset(name, plan.in_queue)
        )
    _wait_running(core, 2 * len(plan.running), timeout=60 + 2 * len(plan.running))
    for name in plan.queued:  # after the running ones hold the whole quota: these wait behind them
        custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", NS, "jobsets", _jobset(name, True))
    pending_message = _wait_pending(custom, len(plan.queued), timeout=60 + len(plan.queued)) if plan.queued else ""
    _say(f"{len(plan.running)} JobSets running, {len(plan.queued)} queued; starting the triggerers")
    return pending_message


def _triggerer_env(workdir: Path, kubeconfig: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        AIRFLOW_HOME=str(workdir / "airflow"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__LOGGING__LOGGING_LEVEL="WARNING",
        AIRFLOW_CONN_KUBERNETES_DEFAULT=json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": kubeconfig, "namespace": NS}}
        ),
    )
    return env


def _sync_triggerers(
    args: argparse.Namespace, plan: _Plan, cluster: Child, triggerers: dict[str, Child], env: dict[str, str]
) -> dict[str, Any]:
    """Start each triggerer (into ``triggerers``) and wait until every trigger has listed and opened its streams."""
    readings: dict[str, Any] = {"counts_start": cluster.ask("counts", "counts")["counts"]}
    readings["totals_start"] = cluster.ask("totals", "totals")["totals"]
    for label, (kind, watched) in plan.triggerers.items():
        argv = [sys.executable, "-m", "benchmarks.trigger_watch", "--triggerer", kind]
        argv += ["--poll-interval", str(args.poll_interval), "--names", ",".join(watched)]
        if kind == "watch":
            argv += ["--agent", AGENT_PREFIX + label]
        triggerers[label] = Child(argv, env)
    timeout = 300 + 2 * len(plan.names)
    readings["ready"] = {label: child.next("ready", timeout=timeout) for label, child in triggerers.items()}
    # Every watch trigger has listed; wait until its watches and its log follow are open too.
    running = set(plan.running)
    readings["expected"] = {
        label: _streams(watched, running, plan.in_queue)
        for label, (kind, watched) in plan.triggerers.items()
        if kind == "watch"
    }
    readings["counts_ready"] = _wait_streams(
        cluster, readings["counts_start"], readings["expected"], plan.labels, timeout=timeout
    )
    readings["totals_ready"] = cluster.ask("totals", "totals")["totals"]
    return readings


def _detect(
    args: argparse.Namespace,
    plan: _Plan,
    cluster: Child,
    core: client.CoreV1Api,
    triggerers: dict[str, Child],
    readings: dict[str, Any],
) -> dict[str, Any]:
    """Force-delete a worker pod of ``--deletes`` JobSets every triggerer watches, and wait for their events."""
    _say("all triggers synced; force-deleting worker pods")
    counts_detect_start = cluster.ask("counts", "counts")["counts"]
    deletes: dict[str, float] = {}
    watched_by_all = set.intersection(*(set(w) for _, w in plan.triggerers.values()))
    candidates = [n for n in plan.running if n in watched_by_all]
    for name in random.sample(candidates, min(args.deletes, len(candidates))):
        workers = core.list_namespaced_pod(
            NS, label_selector=f"{LABEL_JOBSET_NAME}={name},{LABEL_REPLICATED_JOB}={WORKER_JOB}"
        ).items
        deletes[name] = cluster.ask(f"delete {NS} {workers[0].metadata.name}", "at")["at"]
        time.sleep(random.uniform(0.5, 1.5))
    deadline = time.monotonic() + 2 * args.poll_interval + 60
    while time.monotonic() < deadline and any(set(deletes) - set(c.events) for c in triggerers.values()):
        time.sleep(0.2)
    events = {label: dict(child.events) for label, child in triggerers.items()}
    counts_detect_end = cluster.ask("counts", "counts")["counts"]
    # The triggers that fired were replaced by fresh ones; wait for their streams before the window.
    rearmed = _streams(list(deletes), set(plan.running), plan.in_queue)[1]  # the shared watches stay open
    expected = {label: (w, f + rearmed) for label, (w, f) in readings["expected"].items()}
    _wait_streams(cluster, readings["counts_start"], expected, plan.labels, timeout=120 + len(plan.names) / 5)
    return {
        "deletes": deletes,
        "events": events,
        "counts_detect_start": counts_detect_start,
        "counts_detect_end": counts_detect_end,
    }


def _steady_window(
    args: argparse.Namespace, cluster: Child, triggerers: dict[str, Child], pids: dict[str, int], load: dict[str, Any]
) -> dict[str, Any]:
    """Every reading at the start and the end of the steady window, with nothing done in it."""
    _say(f"steady window of {args.window:.0f} s")
    load["window_start"] = list(os.getloadavg())
    start = {
        "usage_start": {label: child.ask("usage", "usage")["usage"] for label, child in triggerers.items()},
        "cluster_start": _cluster_cpu(pids),
        "counts_window_start": cluster.ask("counts", "counts")["counts"],
        "totals_window_start": cluster.ask("totals", "totals")["totals"],
    }
    time.sleep(args.window)
    end = {
        "counts_window_end": cluster.ask("counts", "counts")["counts"],
        "totals_window_end": cluster.ask("totals", "totals")["totals"],
        "usage_end": {label: child.ask("usage", "usage")["usage"] for label, child in triggerers.items()},
        "cluster_end": _cluster_cpu(pids),
    }
    load["window_end"] = list(os.getloadavg())
    return {**start, **end}


def drive(args: argparse.Namespace) -> dict[str, Any]:
    """Run the whole benchmark; every number it measured."""
    workdir = Path(tempfile.mkdtemp(prefix="trigger-watch-bench-"))
    plan = _plan(args)
    # The cluster's stderr (its shutdown with streams still open is noisy) goes to a file.
    cluster = Child([sys.executable, "-c", _CLUSTER_SCRIPT, str(workdir / "cluster")], stderr=workdir / "cluster.err")
    _say(f"work directory {workdir}")
    triggerers: dict[str, Child] = {}
    readings: dict[str, Any] = {"load": {"start": list(os.getloadavg())}}
    try:
        started = cluster.next("kubeconfig", timeout=300)
        kubeconfig = started["kubeconfig"]
        pids = {"node agent (python)": cluster.process.pid, **started["pids"]}
        api_client = config.new_client_from_config(config_file=kubeconfig)
        api_client.user_agent = DRIVER_AGENT
        core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
        readings["pending_message"] = _make_jobsets(core, custom, plan)
        readings |= _sync_triggerers(args, plan, cluster, triggerers, _triggerer_env(workdir, kubeconfig))
        readings |= _detect(args, plan, cluster, core, triggerers, readings)
        readings |= _steady_window(args, cluster, triggerers, pids, readings["load"])
    finally:
        for child in triggerers.values():
            child.close()
        cluster.close()
    return _result(args, plan, readings)


def _result(args: argparse.Namespace, plan: _Plan, r: dict[str, Any]) -> dict[str, Any]:
    """What the benchmark measured, from its readings."""
    startup = _by_client(r["counts_start"], r["counts_ready"], plan.labels)
    steady = _by_client(r["counts_window_start"], r["counts_window_end"], plan.labels)
    cluster_start, cluster_end = r["cluster_start"], r["cluster_end"]
    totals_window_end = r["totals_window_end"]
    result: dict[str, Any] = {
        "jobsets": len(plan.names),
        "queued": len(plan.queued),
        "pending_message": r["pending_message"],
        "baseline": plan.baseline_label,
        "window_seconds": args.window,
        "poll_interval_seconds": args.poll_interval,
        "load_average": r["load"],
        "startup_requests": startup,
        "window_requests": steady,
        "detection_phase_requests": _by_client(r["counts_detect_start"], r["counts_detect_end"], plan.labels),
        "cluster_cpu_share_of_one_core": _cpu_share(cluster_start, cluster_end),
        "cluster_cpu_share_by_process": {
            name: (cluster_end["by"][name] - cluster_start["by"][name]) / (cluster_end["wall"] - cluster_start["wall"])
            for name in cluster_start["by"]
        },
        # kube-apiserver's own counts (all clients: the triggerers, the controllers, the node agent)
        "apiserver_requests": {
            "startup": difference(r["totals_start"]["requests"], r["totals_ready"]["requests"]),
            "window": difference(r["totals_window_start"]["requests"], totals_window_end["requests"]),
            "open_longrunning_at_window_end": totals_window_end["open_longrunning"],
        },
        "triggerers": {
            label: _triggerer_result(label, kind, watched, plan, r, startup[label], steady[label], args.window)
            for label, (kind, watched) in plan.triggerers.items()
        },
    }
    return result


def _triggerer_result(
    label: str,
    kind: str,
    watched: list[str],
    plan: _Plan,
    r: dict[str, Any],
    startup: dict[str, int],
    steady: dict[str, int],
    window: float,
) -> dict[str, Any]:
    """One triggerer's detections, requests, CPU and memory."""
    deletes, events = r["deletes"], r["events"][label]
    latencies = [events[n]["at"] - t for n, t in deletes.items() if n in events]
    counted = [events[n]["counted_at"] - t for n, t in deletes.items() if events.get(n, {}).get("counted_at")]
    steady_per_hour = sum(steady.values()) / len(watched) / (window / 3600)
    usage_end, running = r["usage_end"][label], set(plan.running)
    return {
        "kind": kind,
        "jobsets": len(watched),
        "queued": sum(1 for n in watched if n not in running),
        "same_as_running": set(watched) == running,
        "detections": len(latencies),
        "deletes": len(deletes),
        "reasons": sorted({events[n]["reason"] for n in deletes if n in events}),
        "latency_seconds": latencies,
        "counted_seconds": counted,
        "counted_median": statistics.median(counted) if counted else None,
        "latency_median": statistics.median(latencies) if latencies else None,
        "latency_p95": _percentile(latencies, 0.95) if latencies else None,
        "latency_p99": _percentile(latencies, 0.99) if latencies else None,
        "latency_max": max(latencies) if latencies else None,
        "startup_requests_per_jobset": sum(startup.values()) / len(watched),
        "steady_requests": sum(steady.values()),
        "steady_requests_per_jobset_hour": steady_per_hour,
        "steady_requests_per_jobset_minute": steady_per_hour / 60,
        "cpu_share_of_one_core": _cpu_share(r["usage_start"][label], usage_end),
        "poll_seconds_median": usage_end.get("poll_seconds_median"),
        "rss_mib_before_triggers": r["ready"][label]["before"]["rss_kib"] / 1024,
        "rss_mib": usage_end["rss_kib"] / 1024,
        "max_rss_mib": usage_end["maxrss_kib"] / 1024,
    }


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.0f} ms"


def _ratio(a: float, b: float, none: str = "n/a (no watch requests)") -> str:
    return f"{a / b:.1f}x" if b > 0 else none


def _row_label(label: str, row: dict[str, Any], poll_interval: float) -> str:
    if row["kind"] == "polling":
        return f"polling, {poll_interval:g} s"
    return "`JobSetTrigger` (watch)" if label == "watch" else f"`JobSetTrigger` (watch), {label}"


def _table(result: dict[str, Any]) -> list[str]:
    """The heading and one row per triggerer."""
    triggerers = result["triggerers"]
    queued = f", {result['queued']} of them queued by Kueue" if result["queued"] else ""
    rows = [
        f"{result['jobsets']} JobSets{queued}, steady window {result['window_seconds']:.0f} s, "
        f"polling every {result['poll_interval_seconds']:g} s",
        "",
        "| trigger | JobSets (queued) | detected | restart counted, median | event, median | event, p95 | event, p99 "
        "| event, max | req/JobSet at start | req/JobSet-h (steady) | req/JobSet-min (steady) | CPU, % of one core "
        "| RSS MiB (before triggers) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, row in triggerers.items():
        rows.append(
            f"| {_row_label(label, row, result['poll_interval_seconds'])} | {row['jobsets']} ({row['queued']}) "
            f"| {row['detections']}/{row['deletes']} | {_ms(row['counted_median'])} "
            f"| {_ms(row['latency_median'])} | {_ms(row['latency_p95'])} | {_ms(row['latency_p99'])} "
            f"| {_ms(row['latency_max'])} | {row['startup_requests_per_jobset']:.1f} "
            f"| {row['steady_requests_per_jobset_hour']:.1f} | {row['steady_requests_per_jobset_minute']:.2f} "
            f"| {100 * row['cpu_share_of_one_core']:.1f} % "
            f"| {row['rss_mib']:.0f} ({row['rss_mib_before_triggers']:.0f}) |"
        )
    return rows


def _comparison(result: dict[str, Any]) -> list[str]:
    """The watch trigger against its baseline: a polling one, or a watch one on fewer JobSets."""
    watch, other = result["triggerers"]["watch"], result["triggerers"][result["baseline"]]
    if other["kind"] == "polling":
        polling_hour = other["steady_requests_per_jobset_hour"]
        steady = _ratio(polling_hour, watch["steady_requests_per_jobset_hour"])
        first_hour = _ratio(
            polling_hour, watch["steady_requests_per_jobset_hour"] + watch["startup_requests_per_jobset"]
        )
        return [
            f"Requests per JobSet-hour, polling / watch: {steady} steady; {first_hour} when the watch trigger is "
            "also charged its start requests within the hour (polling is not: its first poll is an ordinary poll).",
            f"A poll (both requests, in the provider's style with a new API client each time) took "
            f"{_ms(other['poll_seconds_median'])} (median); the polling period is the interval plus that.",
        ]
    scale = watch["jobsets"] / other["jobsets"]
    grown = {k: r["rss_mib"] - r["rss_mib_before_triggers"] for k, r in (("watch", watch), ("other", other))}
    rows = [
        f"{watch['jobsets']} against {other['jobsets']} JobSets ({scale:g}x) in one run: CPU "
        f"{_ratio(watch['cpu_share_of_one_core'], other['cpu_share_of_one_core'])}, steady requests "
        f"{_ratio(watch['steady_requests'], other['steady_requests'], none='n/a (none in the baseline)')}, "
        "RSS above the process's own "
        f"{_ratio(grown['watch'], grown['other'])}; "
        f"detection p99 {_ms(watch['latency_p99'])} against {_ms(other['latency_p99'])}."
    ]
    if other["same_as_running"] and result["queued"]:
        extra_cpu = watch["cpu_share_of_one_core"] - other["cpu_share_of_one_core"]
        extra_requests = (watch["steady_requests"] - other["steady_requests"]) / (result["window_seconds"] / 60)
        rows.append(
            f"The baseline watches exactly the running JobSets, so the difference is the {result['queued']} "
            f"queued ones: {100 * extra_cpu:.2f} % of one core in all, "
            f"{extra_requests / result['queued']:.2f} requests per queued JobSet-minute."
        )
    return rows


def _cluster_lines(result: dict[str, Any]) -> list[str]:
    """The cluster's CPU, the requests by kind, the events' reasons and the load."""
    triggerers = result["triggerers"]
    load = result["load_average"]
    by_process = result.get("cluster_cpu_share_by_process") or {}
    return [
        f"The cluster (kube-apiserver, etcd, the controllers, JobSet, Kueue, the node agent) used "
        f"{100 * result['cluster_cpu_share_of_one_core']:.0f} % of one core in the window"
        + (": " + ", ".join(f"{name} {100 * share:.1f} %" for name, share in by_process.items()) if by_process else "")
        + ".",
        "Window requests by kind: "
        + "; ".join(f"{label} {result['window_requests'][label]}" for label in triggerers)
        + "; startup: "
        + "; ".join(f"{label} {result['startup_requests'][label]}" for label in triggerers)
        + ".",
        "Event reasons: " + "; ".join(f"{label} {row['reasons']}" for label, row in triggerers.items()) + ".",
        "Load average (1, 5, 15 min) at start "
        + ", ".join(f"{x:.1f}" for x in load["start"])
        + (
            f"; over the window {', '.join(f'{x:.1f}' for x in load['window_start'])} -> "
            f"{', '.join(f'{x:.1f}' for x in load['window_end'])}."
            if "window_end" in load
            else "."
        ),
    ]


def markdown(result: dict[str, Any]) -> str:
    """The results as the Markdown rows RESULTS.md records."""
    rows = [*_table(result), "", *_comparison(result), *_cluster_lines(result)]
    apiserver = result.get("apiserver_requests")
    if apiserver:
        window = apiserver["window"]
        rows.append(
            f"kube-apiserver's own count (`apiserver_request_total`, every client, requests ended) over the window: "
            f"{sum(window.values())} ({_top(window)}); open watches and log follows at its end "
            f"(`apiserver_longrunning_requests`): {sum(apiserver['open_longrunning_at_window_end'].values())}."
        )
    if result["pending_message"]:
        rows.append(f"Kueue's word on a queued JobSet's Workload: \"{result['pending_message']}\".")
    return "\n".join(rows)


def _top(counts: dict[str, int], n: int = 6) -> str:
    return ", ".join(f"{key} {value}" for key, value in sorted(counts.items(), key=lambda kv: -kv[1])[:n])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobsets", type=int, default=100, help="JobSets the watch triggerer watches")
    parser.add_argument(
        "--queued",
        type=float,
        default=0.0,
        help="fraction of the JobSets left queued by Kueue (suspended, not admitted) behind the running ones, "
        "0 to 1 (not 1: nothing would run); with any, every JobSet joins the benchmark's LocalQueue",
    )
    parser.add_argument(
        "--baseline",
        choices=["polling", "watch"],
        default="polling",
        help="what runs beside: the 10 s polling trigger, or a second JobSetTrigger triggerer watching fewer",
    )
    parser.add_argument(
        "--baseline-jobsets",
        type=int,
        help="JobSets the baseline watches, running ones first (default: all for polling, 100 for watch)",
    )
    parser.add_argument("--window", type=float, default=300.0, help="steady window in seconds")
    parser.add_argument("--deletes", type=int, default=20, help="worker pods force-deleted (distinct JobSets)")
    parser.add_argument("--poll-interval", type=float, default=10.0, help="the polling baseline's interval")
    parser.add_argument("--json", type=Path, help="also write every number here")
    parser.add_argument("--triggerer", choices=["watch", "polling"], help=argparse.SUPPRESS)
    parser.add_argument("--names", help=argparse.SUPPRESS)
    parser.add_argument("--agent", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.triggerer:
        return run_triggerer(args.triggerer, args.names.split(","), args.poll_interval, args.agent)
    if args.jobsets < 1 or args.window <= 0 or args.deletes < 0:
        parser.error("--jobsets must be at least 1, --window positive, --deletes not negative")
    if not 0.0 <= args.queued < 1.0:
        parser.error(f"--queued must be at least 0 and below 1 (some JobSets must run), got {args.queued:g}")
    if args.baseline_jobsets is None:
        args.baseline_jobsets = args.jobsets if args.baseline == "polling" else min(100, args.jobsets)
    if not 1 <= args.baseline_jobsets <= args.jobsets:
        parser.error(
            f"--baseline-jobsets must be between 1 and --jobsets ({args.jobsets}), got {args.baseline_jobsets}"
        )
    running = args.jobsets - round(args.jobsets * args.queued)
    if running < 1:
        parser.error(f"--queued {args.queued:g} of {args.jobsets} JobSets leaves none running")
    if args.deletes > min(running, args.baseline_jobsets):
        parser.error(
            f"--deletes {args.deletes}: only {min(running, args.baseline_jobsets)} running JobSets are watched by "
            "both triggerers"
        )
    result = drive(args)
    print(markdown(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
