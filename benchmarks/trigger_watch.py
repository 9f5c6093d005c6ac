"""`JobSetTrigger` (watches) against a 10-second polling trigger, side by side on the local cluster.

    .venv/bin/python -m benchmarks.trigger_watch --jobsets 100 --window 300 --deletes 20

Four processes, so that each one's CPU is its own:

- **cluster**: a :class:`local.cluster.LocalCluster` (API, controllers, kubelet) with one aiohttp
  middleware added by this benchmark that counts every HTTP request on arrival, by client
  (``User-Agent``) and kind (list, get, watch, log follow, log read). A watch or a log follow is one
  request however long it stays open. It also force-deletes pods on request
  (``cluster.faults.delete_pod``, like ``kubectl delete pod --grace-period=0 --force``).
- **watch triggerer**: one event loop running ``--jobsets`` monitors of ``operators.triggers.JobSetTrigger``
  at once (the trigger's own ``_Monitor``, which is all ``JobSetTrigger.run()`` runs, held so the
  benchmark can see when it has read everything once): it watches the JobSet, its pods and its Jobs
  and follows the head pod's log. A slice budget of 0 makes the first slice restart yield its event.
- **polling triggerer**: the same number of :class:`PollingJobSetTrigger`, in the provider's
  ``KubernetesJobTrigger`` style: get, sleep ``--poll-interval`` seconds, get again. Each poll is
  two requests, get the JobSet and list its Jobs (a slice restart shows as the worker Job's
  ``status.failed`` going up, which is how ``MonitorState`` counts it; pods alone only show
  in-place container restarts). What it reads goes into the same ``MonitorState`` and the same
  policy. Starts are spread over one interval, as triggers deferred at different times are.
- **driver** (this process): creates the JobSets, whose pods run ``sleep`` through the local kubelet
  (a ``pathways-head`` job and a ``worker`` job, labelled as the operator's), then measures:

1. *start*: requests from starting the triggers until every one has read everything once and every
   watch trigger has its three watches and its log follow open (counted at the cluster);
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
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from kubernetes import client, config

NS = "default"
BENCH_LABEL = "elastic-training.airflow.apache.org/benchmark"
DRIVER_AGENT = "bench-driver"
POLL_AGENT = "bench-polling-trigger"
HEAD_JOB, WORKER_JOB = "pathways-head", "worker"  # operators.constants names, without importing Airflow here
HEAD_CONTAINER, WORKER_CONTAINER = "jax-tpu", "pathways-worker"
LABEL_JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
LABEL_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
SLEEP_SECONDS = 7200
POLL_SECONDS: list[float] = []  # in a polling triggerer: how long each poll (both requests) took

# The cluster process: the local cluster plus a request counter, driven over stdin/stdout.
_CLUSTER_SCRIPT = """
import json, sys, time
from collections import Counter
from pathlib import Path
from aiohttp import web
from elastic_training.local.cluster import LocalCluster
from elastic_training.local.cluster import server

counts = Counter()

def flag(request, name):
    return request.query.get(name, "").lower() in ("true", "1")

def kind_of(request):
    path = request.path
    if path.endswith("/log"):
        return "log follow" if flag(request, "follow") else "log read"
    if request.method != "GET":
        return request.method.lower()
    if flag(request, "watch"):
        return "watch"
    return "list" if path.endswith(("/pods", "/jobs", "/jobsets")) else "get"

@web.middleware
async def count_requests(request, handler):
    if not request.path.startswith("/_local/"):
        counts[request.headers.get("User-Agent", "") + "\\t" + kind_of(request)] += 1
    return await handler(request)

original_app = server.ApiServer.app
def counted_app(self):
    app = original_app(self)
    app.middlewares.insert(0, count_requests)
    return app
server.ApiServer.app = counted_app

with LocalCluster(workdir=Path(sys.argv[1])) as cluster:
    print(json.dumps({"kubeconfig": str(cluster.kubeconfig_path)}), flush=True)
    for line in sys.stdin:
        command = line.split()
        if command[0] == "counts":
            print(json.dumps({"counts": cluster.call(lambda: dict(counts))}), flush=True)
        elif command[0] == "delete":
            at = time.time()
            cluster.faults.delete_pod(command[1], command[2])
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


def run_triggerer(kind: str, names: list[str], poll_interval: float) -> int:
    """Run one trigger per JobSet on one loop; JSON lines out (ready, events, usage), commands in."""
    from elastic_training.operators.observations import MonitorState
    from elastic_training.operators.triggers import JobSetTrigger, _Monitor

    lock = threading.Lock()

    def emit(message: dict[str, Any]) -> None:
        with lock:
            print(json.dumps(message), flush=True)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        ready = threading.Event()

        def commands() -> None:
            for line in sys.stdin:
                if line.strip() == "usage":
                    emit({"usage": _usage()})
            loop.call_soon_threadsafe(stop.set)

        threading.Thread(target=commands, daemon=True).start()
        before = _usage()
        tasks: list[asyncio.Task[None]] = []
        if kind == "watch":
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
                return all(m.state.head_pod and m.state.pods and m.state.jobs for m in monitors)
        else:
            polling = _polling_trigger_class()
            triggers = [polling(name=n, namespace=NS, budgets=_budgets(), poll_interval=poll_interval) for n in names]
            for name, trigger in zip(names, triggers, strict=True):

                async def poll(name: str = name, trigger: Any = trigger) -> None:
                    await asyncio.sleep(random.uniform(0, poll_interval))
                    while True:
                        async for event in trigger.run():
                            emit({"event": name, "at": time.time(), **event.payload})
                        trigger = polling(
                            name=name, namespace=NS, budgets=_budgets(1 << 20), poll_interval=poll_interval
                        )

                tasks.append(asyncio.create_task(poll()))

            def synced() -> bool:
                return all(t.polls > 0 for t in triggers)

        while not stop.is_set() and not ready.is_set():
            if synced():
                ready.set()
                emit({"ready": time.time(), "before": before})
            await asyncio.sleep(0.05)
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
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


def _jobset(name: str) -> dict[str, Any]:
    def rjob(rname: str, container: str, backoff: int, restart: str) -> dict[str, Any]:
        pod = {
            "metadata": {"labels": {BENCH_LABEL: "trigger-watch"}},
            "spec": {
                "restartPolicy": restart,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": container, "image": "local", "command": ["sleep", str(SLEEP_SECONDS)]}],
            },
        }
        job = {"backoffLimit": backoff, "completionMode": "Indexed", "completions": 1, "parallelism": 1}
        return {"name": rname, "replicas": 1, "template": {"spec": {**job, "template": pod}}}

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": NS, "labels": {BENCH_LABEL: "trigger-watch"}},
        "spec": {
            "failurePolicy": {"restartStrategy": "Recreate", "maxRestarts": 0},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [HEAD_JOB]},
            "replicatedJobs": [
                rjob(HEAD_JOB, HEAD_CONTAINER, 0, "Never"),
                rjob(WORKER_JOB, WORKER_CONTAINER, 1000, "OnFailure"),
            ],
        },
    }


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


def _by_client(before: dict[str, int], after: dict[str, int]) -> dict[str, dict[str, int]]:
    """Count differences as ``{client: {kind: n}}``; client is ``polling``, ``driver`` or ``watch``."""
    result: dict[str, dict[str, int]] = {"watch": {}, "polling": {}, "driver": {}}
    for key, value in after.items():
        agent, _, kind = key.partition("\t")
        who = {POLL_AGENT: "polling", DRIVER_AGENT: "driver"}.get(agent, "watch")
        delta = value - before.get(key, 0)
        if delta:
            result[who][kind] = result[who].get(kind, 0) + delta
    return result


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _proc_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of another process, from ``/proc``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return {"cpu": (int(fields[11]) + int(fields[12])) / ticks, "wall": time.time()}


def _cpu_share(a: dict[str, float], b: dict[str, float]) -> float:
    return (b["cpu"] - a["cpu"]) / (b["wall"] - a["wall"])


def drive(args: argparse.Namespace) -> dict[str, Any]:
    """Run the whole benchmark; every number it measured."""
    workdir = Path(tempfile.mkdtemp(prefix="trigger-watch-bench-"))
    names = [f"bench-tw-{i:03d}" for i in range(args.jobsets)]
    # The cluster's stderr (its shutdown with streams still open is noisy) goes to a file.
    cluster = Child([sys.executable, "-c", _CLUSTER_SCRIPT, str(workdir / "cluster")], stderr=workdir / "cluster.err")
    _say(f"work directory {workdir}")
    triggerers: dict[str, Child] = {}
    try:
        kubeconfig = cluster.next("kubeconfig", timeout=60)["kubeconfig"]
        api_client = config.new_client_from_config(config_file=kubeconfig)
        api_client.user_agent = DRIVER_AGENT
        core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
        for name in names:
            custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", NS, "jobsets", _jobset(name))
        _wait_running(core, 2 * len(names), timeout=60 + 2 * len(names))
        _say(f"{len(names)} JobSets running; starting the triggerers")

        env = dict(os.environ)
        env.update(
            AIRFLOW_HOME=str(workdir / "airflow"),
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            AIRFLOW__LOGGING__LOGGING_LEVEL="WARNING",
            AIRFLOW_CONN_KUBERNETES_DEFAULT=json.dumps(
                {"conn_type": "kubernetes", "extra": {"kube_config_path": kubeconfig, "namespace": NS}}
            ),
        )
        counts_start = cluster.ask("counts", "counts")["counts"]
        for kind in ("watch", "polling"):
            argv = [sys.executable, "-m", "benchmarks.trigger_watch", "--triggerer", kind]
            argv += ["--poll-interval", str(args.poll_interval), "--names", ",".join(names)]
            triggerers[kind] = Child(argv, env)
        ready = {kind: child.next("ready", timeout=300 + 2 * len(names)) for kind, child in triggerers.items()}
        # Every watch trigger has listed; wait until its three watches and its log follow are open too.
        deadline = time.monotonic() + 300 + 2 * len(names)
        while True:
            counts_ready = cluster.ask("counts", "counts")["counts"]
            opened = _by_client(counts_start, counts_ready)["watch"]
            if opened.get("watch", 0) >= 3 * len(names) and opened.get("log follow", 0) >= len(names):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"watch triggers opened only {opened} for {len(names)} JobSets")
            time.sleep(0.5)

        _say("all triggers synced; force-deleting worker pods")
        counts_detect_start = cluster.ask("counts", "counts")["counts"]
        deletes: dict[str, float] = {}
        for name in random.sample(names, min(args.deletes, len(names))):
            workers = core.list_namespaced_pod(
                NS, label_selector=f"{LABEL_JOBSET_NAME}={name},{LABEL_REPLICATED_JOB}={WORKER_JOB}"
            ).items
            deletes[name] = cluster.ask(f"delete {NS} {workers[0].metadata.name}", "at")["at"]
            time.sleep(random.uniform(0.5, 1.5))
        deadline = time.monotonic() + 2 * args.poll_interval + 60
        while time.monotonic() < deadline and any(set(deletes) - set(c.events) for c in triggerers.values()):
            time.sleep(0.2)
        events = {kind: dict(child.events) for kind, child in triggerers.items()}
        counts_detect_end = cluster.ask("counts", "counts")["counts"]
        # The triggers that fired were replaced by fresh ones; wait for their streams before the window.
        deadline = time.monotonic() + 120
        while True:
            counts = cluster.ask("counts", "counts")["counts"]
            opened = _by_client(counts_start, counts)["watch"]
            armed = len(names) + len(deletes)
            if opened.get("watch", 0) >= 3 * armed and opened.get("log follow", 0) >= armed:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"re-armed watch triggers opened only {opened}")
            time.sleep(0.5)

        _say(f"steady window of {args.window:.0f} s")
        usage_start = {kind: child.ask("usage", "usage")["usage"] for kind, child in triggerers.items()}
        cluster_start = _proc_cpu(cluster.process.pid)
        counts_window_start = cluster.ask("counts", "counts")["counts"]
        time.sleep(args.window)
        counts_window_end = cluster.ask("counts", "counts")["counts"]
        usage_end = {kind: child.ask("usage", "usage")["usage"] for kind, child in triggerers.items()}
        cluster_end = _proc_cpu(cluster.process.pid)
    finally:
        for child in triggerers.values():
            child.close()
        cluster.close()

    hours = args.window / 3600
    startup = _by_client(counts_start, counts_ready)
    steady = _by_client(counts_window_start, counts_window_end)
    result: dict[str, Any] = {
        "jobsets": len(names),
        "window_seconds": args.window,
        "poll_interval_seconds": args.poll_interval,
        "startup_requests": startup,
        "window_requests": steady,
        "detection_phase_requests": _by_client(counts_detect_start, counts_detect_end),
        "cluster_cpu_share_of_one_core": _cpu_share(cluster_start, cluster_end),
        "triggerers": {},
    }
    for kind in triggerers:
        latencies = [events[kind][n]["at"] - t for n, t in deletes.items() if n in events[kind]]
        counted = [
            events[kind][n]["counted_at"] - t for n, t in deletes.items() if events[kind].get(n, {}).get("counted_at")
        ]
        reasons = sorted({events[kind][n]["reason"] for n in deletes if n in events[kind]})
        start_per_jobset = sum(startup[kind].values()) / len(names)
        steady_per_hour = sum(steady[kind].values()) / len(names) / hours
        result["triggerers"][kind] = {
            "detections": len(latencies),
            "deletes": len(deletes),
            "reasons": reasons,
            "latency_seconds": latencies,
            "counted_seconds": counted,
            "counted_median": statistics.median(counted) if counted else None,
            "latency_median": statistics.median(latencies) if latencies else None,
            "latency_p95": _percentile(latencies, 0.95) if latencies else None,
            "latency_max": max(latencies) if latencies else None,
            "startup_requests_per_jobset": start_per_jobset,
            "steady_requests_per_jobset_hour": steady_per_hour,
            "cpu_share_of_one_core": _cpu_share(usage_start[kind], usage_end[kind]),
            "poll_seconds_median": usage_end[kind].get("poll_seconds_median"),
            "rss_mib_before_triggers": ready[kind]["before"]["rss_kib"] / 1024,
            "rss_mib": usage_end[kind]["rss_kib"] / 1024,
            "max_rss_mib": usage_end[kind]["maxrss_kib"] / 1024,
        }
    return result


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.0f} ms"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}x" if b > 0 else "n/a (no watch requests)"


def markdown(result: dict[str, Any]) -> str:
    """The results as the Markdown rows RESULTS.md records."""
    watch, polling = result["triggerers"]["watch"], result["triggerers"]["polling"]
    rows = [
        f"{result['jobsets']} JobSets, steady window {result['window_seconds']:.0f} s, "
        f"polling every {result['poll_interval_seconds']:g} s",
        "",
        "| trigger | detected | restart counted, median | event, median | event, p95 | event, max "
        "| req/JobSet at start | req/JobSet-h (steady) | CPU, % of one core | RSS MiB (before triggers) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, row in (
        ("`JobSetTrigger` (watch)", watch),
        (f"polling, {result['poll_interval_seconds']:g} s", polling),
    ):
        rows.append(
            f"| {label} | {row['detections']}/{row['deletes']} | {_ms(row['counted_median'])} "
            f"| {_ms(row['latency_median'])} | {_ms(row['latency_p95'])} | {_ms(row['latency_max'])} "
            f"| {row['startup_requests_per_jobset']:.1f} | {row['steady_requests_per_jobset_hour']:.1f} "
            f"| {100 * row['cpu_share_of_one_core']:.1f} % "
            f"| {row['rss_mib']:.0f} ({row['rss_mib_before_triggers']:.0f}) |"
        )
    polling_hour = polling["steady_requests_per_jobset_hour"]
    steady = _ratio(polling_hour, watch["steady_requests_per_jobset_hour"])
    first_hour = _ratio(polling_hour, watch["steady_requests_per_jobset_hour"] + watch["startup_requests_per_jobset"])
    rows += [
        "",
        f"Requests per JobSet-hour, polling / watch: {steady} steady; {first_hour} when the watch trigger is also "
        "charged its start requests within the hour (polling is not: its first poll is an ordinary poll).",
        f"The cluster process (API, controllers, kubelet, {result['jobsets']} log follows) used "
        f"{100 * result['cluster_cpu_share_of_one_core']:.0f} % of one core in the window.",
        f"Window requests by kind: watch {result['window_requests']['watch']}, "
        f"polling {result['window_requests']['polling']}; startup: watch {result['startup_requests']['watch']}, "
        f"polling {result['startup_requests']['polling']}.",
        f"Event reasons: watch {watch['reasons']}, polling {polling['reasons']}.",
        f"A poll (both requests, in the provider's style with a new API client each time) took "
        f"{_ms(polling['poll_seconds_median'])} (median); the polling period is the interval plus that.",
    ]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobsets", type=int, default=100, help="JobSets, each watched by both triggers")
    parser.add_argument("--window", type=float, default=300.0, help="steady window in seconds")
    parser.add_argument("--deletes", type=int, default=20, help="worker pods force-deleted (distinct JobSets)")
    parser.add_argument("--poll-interval", type=float, default=10.0, help="the polling baseline's interval")
    parser.add_argument("--json", type=Path, help="also write every number here")
    parser.add_argument("--triggerer", choices=["watch", "polling"], help=argparse.SUPPRESS)
    parser.add_argument("--names", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.triggerer:
        return run_triggerer(args.triggerer, args.names.split(","), args.poll_interval)
    if args.jobsets < 1 or args.window <= 0 or args.deletes < 0:
        parser.error("--jobsets must be at least 1, --window positive, --deletes not negative")
    result = drive(args)
    print(markdown(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
