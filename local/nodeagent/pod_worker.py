"""The life of one pod on the local kubelet: init containers, sidecars, main containers, termination.

Order, as the kubelet does it: ``initContainers`` run one after another; a plain one must exit
0 before the next starts, a native sidecar (``restartPolicy: Always``) only has to have started
and keeps running. Then every main container starts. When the main containers are done (by the
pod's ``restartPolicy``), the sidecars are stopped in reverse order and the pod's phase comes
from the main containers alone. A deletion stops the main containers first, then the sidecars,
all within ``deletionGracePeriodSeconds`` (SIGTERM, then SIGKILL at the deadline). The pod object
stays (and takes status writes) until every container has stopped; then the worker deletes it
with grace 0, as the kubelet's status manager does.

The worker computes the pod's status and hands it to a :class:`PodSink`, which stands for the kubelet's
status manager: the imitation's Kubelet writes it into its in-memory store, the node agent
(``local/nodeagent/``) through ``pods/{name}/status`` on the real kube-apiserver.

Restart backoff is short on purpose: 0.2 s doubling to 2 s (the kubelet uses 10 s doubling to
5 min), so tests and the demo do not wait on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from elastic_training.local.group_reaper import GroupReaper
from elastic_training.local.kube_objects import Obj, now_rfc3339
from elastic_training.local.nodeagent.container_env import ContainerConfigError, container_argv, container_env
from elastic_training.local.nodeagent.container_process import ContainerProcess
from elastic_training.local.nodeagent.images import (
    ERR_IMAGE_PULL,
    IMAGE_PULL_BACKOFF,
    ImageEntry,
    ImagePullError,
    ProgramNotFound,
    find_image,
)
from elastic_training.local.nodeagent.logs import LogStore

log = logging.getLogger(__name__)

HOST_IP = "127.0.0.1"
BACKOFF_INITIAL_SECONDS = 0.2
BACKOFF_MAX_SECONDS = 2.0
IDLE_COMMAND = ("sleep", "infinity")  # what a container without ``command`` runs
HOST_ENV_PASSED = ("HOME", "LANG", "LC_ALL", "TMPDIR", "TZ", "USER", "SYSTEMROOT")

INIT, SIDECAR, MAIN = "init", "sidecar", "main"


def container_path() -> str:
    """PATH for containers: the project's venv ``bin`` first (so ``python`` is ours), then the system's."""
    venv_bin = str(Path(sys.prefix) / "bin")
    system = [part for part in (_host_env("PATH") or "/usr/local/bin:/usr/bin:/bin").split(":") if part]
    return ":".join([venv_bin, *[p for p in system if p != venv_bin]])


def _host_env(name: str) -> str | None:
    return os.environ.get(name)


class PodSink(Protocol):
    """Where a pod worker's status writes and its final deletion go (the kubelet's status manager)."""

    def write_status(self, namespace: str, name: str, uid: str, status: Obj) -> bool:
        """Write (or schedule the write of) the kubelet's ``status`` of pod ``uid``; False when the pod is
        known to be gone, so the worker writes nothing more."""

    def delete_now(self, namespace: str, name: str, uid: str) -> None:
        """Delete pod ``uid`` with grace 0 once its statuses written so far are in (the API server keeps
        it while finalizers remain); nothing when it is gone or another pod holds the name."""


@dataclass
class Container:
    """What the kubelet tracks about one container of the pod."""

    spec: Obj
    kind: str
    restart_count: int = 0
    state: Obj = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: Obj = field(default_factory=dict)
    process: ContainerProcess | None = None
    started: bool = False
    done: bool = False  # finished for good: will not be (re)started
    exit_code: int | None = None
    ever_started: bool = False

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.alive

    def status(self) -> Obj:
        status: Obj = {
            "name": self.name,
            "image": str(self.spec.get("image", "")),
            "imageID": "",
            "ready": self.running,
            "started": self.running,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.process is not None:
            status["containerID"] = f"local://{self.process.pid}"
        return status


class PodWorker:
    """Runs one pod's containers and reports its status; one instance per pod uid."""

    def __init__(
        self,
        sink: PodSink,
        logs: LogStore,
        pod: Obj,
        workdir: Path,
        pod_env: Mapping[str, str],
        on_exit: Callable[[PodWorker], None],
        reaper: GroupReaper | None = None,
    ) -> None:
        self._sink = sink
        self._logs = logs
        meta = pod["metadata"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.uid: str = meta["uid"]
        self._pod = pod
        self._workdir = workdir
        self._pod_env = pod_env
        self._on_exit = on_exit
        self._reaper = reaper
        spec = pod.get("spec", {})
        self._restart_policy = str(spec.get("restartPolicy") or "Always")
        self._grace = int(spec.get("terminationGracePeriodSeconds", 30))
        self._containers: list[Container] = []
        for c in spec.get("initContainers") or []:
            self._containers.append(Container(c, SIDECAR if c.get("restartPolicy") == "Always" else INIT))
        for c in spec.get("containers") or []:
            self._containers.append(Container(c, MAIN))
        self._phase = "Pending"
        self._start_time = ""
        self._initialized = False
        self._stopping = asyncio.Event()  # no more (re)starts
        self._deadline: float | None = None
        self._kill_timer: asyncio.TimerHandle | None = None
        self._deleting = False
        self._removed = False  # the pod object is gone: write nothing more
        self._silent = False  # cluster shutdown: write nothing more
        self.task: asyncio.Task[None] | None = None

    # -- control from the kubelet ------------------------------------------------------------

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"pod {self.namespace}/{self.name}")

    def request_termination(self, grace_seconds: float, *, silent: bool = False) -> None:
        """Graceful stop: SIGTERM now to the main containers, SIGKILL to everything at the deadline."""
        loop = asyncio.get_running_loop()
        self._silent = self._silent or silent
        self._deleting = self._deleting or not silent
        deadline = loop.time() + max(grace_seconds, 0.0)
        if self._deadline is not None and deadline >= self._deadline:
            return
        self._deadline = deadline
        self._stopping.set()
        for c in self._containers:
            if c.kind != SIDECAR and c.process is not None:
                c.process.signal_group(signal.SIGTERM)
        if self._kill_timer is not None:
            self._kill_timer.cancel()
        self._kill_timer = loop.call_at(deadline, self._kill_all)
        if grace_seconds <= 0:
            self._kill_all()

    def kill_now(self) -> None:
        """Forced deletion: the pod object is gone; SIGKILL every process at once."""
        self._removed = True
        self._stopping.set()
        self._kill_all()

    def signal(self, sig: int, container: str | None = None) -> int:
        """Send ``sig`` to running containers (one by name, or all); returns how many were signalled."""
        count = 0
        for c in self._containers:
            if (container is None or c.name == container) and c.process is not None and c.process.alive:
                c.process.signal_group(sig)
                count += 1
        return count

    def pids(self) -> list[int]:
        return [c.process.pid for c in self._containers if c.process is not None]

    # -- the pod's life ----------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            self._prepare()
            if self._removed:
                return
            sidecars: list[asyncio.Task[None]] = []
            succeeded = await self._run_init_containers(sidecars)
            if succeeded and not self._stopping.is_set():
                self._initialized = True
                self._flush()
                mains = [c for c in self._containers if c.kind == MAIN]
                await asyncio.gather(*(self._supervise(c) for c in mains))
                succeeded = all(c.exit_code == 0 for c in mains)
            await self._stop_sidecars(sidecars)
            self._phase = "Succeeded" if succeeded else "Failed"
            self._flush()
            if self._deleting and not self._removed and not self._silent:
                self._finish_deletion()
        except asyncio.CancelledError:
            self._kill_all()
            raise
        except Exception:
            log.exception("pod %s/%s: kubelet failure", self.namespace, self.name)
            self._kill_all()
        finally:
            if self._kill_timer is not None:
                self._kill_timer.cancel()
            self._on_exit(self)

    def _finish_deletion(self) -> None:
        """Every container has stopped: delete the pod with grace 0, as the kubelet's status manager
        does once a terminating pod is done; the API server keeps it while finalizers remain."""
        self._sink.delete_now(self.namespace, self.name, self.uid)

    def _prepare(self) -> None:
        self._start_time = now_rfc3339()
        self._flush()

    async def _run_init_containers(self, sidecars: list[asyncio.Task[None]]) -> bool:
        for c in self._containers:
            if self._stopping.is_set():
                return False
            if c.kind == SIDECAR:
                started = asyncio.Event()
                sidecars.append(asyncio.ensure_future(self._supervise(c, started)))
                waiter = asyncio.ensure_future(started.wait())
                stopper = asyncio.ensure_future(self._stopping.wait())
                await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                stopper.cancel()
            elif c.kind == INIT:
                await self._supervise(c)
                if c.exit_code != 0:
                    return False
        return True

    async def _stop_sidecars(self, sidecars: list[asyncio.Task[None]]) -> None:
        if not sidecars:
            return
        loop = asyncio.get_running_loop()
        if self._deadline is None:
            self._deadline = loop.time() + self._grace
            self._kill_timer = loop.call_at(self._deadline, self._kill_all)
        self._stopping.set()
        for c in reversed([c for c in self._containers if c.kind == SIDECAR]):
            if c.process is not None:
                c.process.signal_group(signal.SIGTERM)
        await asyncio.gather(*sidecars, return_exceptions=True)

    async def _supervise(self, c: Container, started: asyncio.Event | None = None) -> None:
        """Run one container until it is done for good, restarting it as the policy says."""
        image = await self._pull(c)
        backoff = BACKOFF_INITIAL_SECONDS
        while image is not None and not self._stopping.is_set():
            code = await self._run_once(c, image, started)
            if self._stopping.is_set() or not self._should_restart(c, code):
                break
            c.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {backoff:g}s restarting failed container={c.name} pod={self.name}",
                }
            }
            self._flush()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(backoff):  # not wait_for: it can drop a cancellation on 3.11
                    await self._stopping.wait()
            if self._stopping.is_set():
                break
            backoff = min(backoff * 2, BACKOFF_MAX_SECONDS)
            c.restart_count += 1
        c.done = True
        if "waiting" in c.state and c.ever_started:
            c.state = c.last_state or c.state  # never restarted after a crash: show the last exit
        self._flush()

    async def _pull(self, c: Container) -> ImageEntry | None:
        """The container's image from the catalogue; an unknown one waits in ImagePullBackOff until stopped.

        The catalogue does not change while the cluster runs, so a failed pull is not retried: the state goes
        from ``ErrImagePull`` to ``ImagePullBackOff``, as the kubelet's, and stays there; the container never
        starts (a sidecar that never starts keeps the pod Pending, ``Init:ImagePullBackOff``).
        """
        image = str(c.spec.get("image", ""))
        try:
            return find_image(image)
        except ImagePullError as err:
            c.state = {"waiting": {"reason": ERR_IMAGE_PULL, "message": str(err)}}
            self._flush()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(BACKOFF_INITIAL_SECONDS):  # not wait_for: it can drop a cancellation on 3.11
                await self._stopping.wait()
        if not self._stopping.is_set():
            c.state = {"waiting": {"reason": IMAGE_PULL_BACKOFF, "message": f'Back-off pulling image "{image}"'}}
            self._flush()
            await self._stopping.wait()
        return None

    def _should_restart(self, c: Container, code: int) -> bool:
        if c.kind == SIDECAR:
            return True
        if c.kind == INIT:
            return code != 0 and self._restart_policy != "Never"
        if self._restart_policy == "Always":
            return True
        return self._restart_policy == "OnFailure" and code != 0

    async def _run_once(self, c: Container, image: ImageEntry, started: asyncio.Event | None) -> int:
        """Start the container once and wait for it; returns its exit code (128+n for signal n)."""
        started_at = now_rfc3339()
        try:
            env = container_env(self._pod_with_status(), c.spec, self._base_env(), self._pod_env)
            argv = self._argv(c, image, env)
            cwd = Path(str(c.spec.get("workingDir") or self._pod_dir()))
            cwd.mkdir(parents=True, exist_ok=True)
            writer = self._logs.writer(self.uid, c.name, c.restart_count)
            try:
                c.process = await ContainerProcess.start(argv, env, cwd, writer, self._reaper)
            except BaseException:
                writer.close()
                raise
        except (ContainerConfigError, ProgramNotFound, OSError) as err:
            reason = "CreateContainerConfigError" if isinstance(err, ContainerConfigError) else "StartError"
            self._set_terminated(c, 128, reason, started_at, message=str(err))
            return 128
        if self._stopping.is_set():  # a stop came while the process was being spawned
            c.process.signal_group(signal.SIGTERM if not self._removed else signal.SIGKILL)
        c.started = c.ever_started = True
        c.state = {"running": {"startedAt": started_at}}
        self._flush()
        if started is not None:
            started.set()
        raw = await c.process.wait()
        code, sig = (128 - raw, -raw) if raw < 0 else (raw, None)
        self._set_terminated(c, code, "Completed" if code == 0 else "Error", started_at, signal_number=sig)
        return code

    def _argv(self, c: Container, image: ImageEntry, env: dict[str, str]) -> list[str]:
        """The local argv: the catalogue's program for the container's command line, given the pod identity
        the local stand-ins need to find their JobSet (in place of the service-account mount)."""
        has_command = bool(c.spec.get("command"))
        if image.passthrough and not has_command:
            return list(IDLE_COMMAND)
        if not image.passthrough:
            env.setdefault("LOCAL_POD_NAMESPACE", self.namespace)
            env.setdefault("LOCAL_POD_NAME", self.name)
        return image.local_argv(container_argv(c.spec, env), has_command)

    def _set_terminated(
        self,
        c: Container,
        code: int,
        reason: str,
        started_at: str,
        *,
        message: str = "",
        signal_number: int | None = None,
    ) -> None:
        terminated: Obj = {"exitCode": code, "reason": reason, "startedAt": started_at, "finishedAt": now_rfc3339()}
        if message:
            terminated["message"] = message
        if signal_number is not None:
            terminated["signal"] = signal_number
        if c.process is not None:
            terminated["containerID"] = f"local://{c.process.pid}"
        c.state = {"terminated": terminated}
        c.last_state = {"terminated": terminated}
        c.exit_code = code
        c.started = False
        self._flush()

    def _kill_all(self) -> None:
        for c in self._containers:
            if c.process is not None and c.process.alive:
                c.process.signal_group(signal.SIGKILL)

    # -- environment -------------------------------------------------------------------------

    def _base_env(self) -> dict[str, str]:
        env = {name: value for name in HOST_ENV_PASSED if (value := _host_env(name)) is not None}
        env["PATH"] = container_path()
        env["HOSTNAME"] = self._hostname()
        return env

    def _hostname(self) -> str:
        return str(self._pod.get("spec", {}).get("hostname") or self.name)[:63]

    def _pod_dir(self) -> Path:
        return self._workdir / "pods" / f"{self.namespace}_{self.name}_{self.uid}"

    def _pod_with_status(self) -> Obj:
        pod = dict(self._pod)
        pod["status"] = self._status()
        return pod

    # -- status ------------------------------------------------------------------------------

    def _flush(self) -> None:
        """Write the pod's status now: the benchmark measures how fast a process death shows."""
        if self._removed or self._silent:
            return
        if not self._sink.write_status(self.namespace, self.name, self.uid, self._status()):
            self._removed = True

    def _status(self) -> Obj:
        mains = [c for c in self._containers if c.kind == MAIN]
        inits = [c for c in self._containers if c.kind != MAIN]
        phase = self._phase
        if phase == "Pending" and any(c.ever_started for c in mains):
            phase = "Running"
        ready = phase == "Running" and all(c.running for c in self._containers if c.kind != INIT)
        stamp = self._start_time or now_rfc3339()
        terminal = phase in ("Succeeded", "Failed")

        def condition(kind: str, ok: bool, reason: str = "") -> Obj:
            cond: Obj = {"type": kind, "status": "True" if ok else "False", "lastTransitionTime": stamp}
            if reason and not ok:
                cond["reason"] = reason
            return cond

        status: Obj = {
            "phase": phase,
            "conditions": [
                condition("PodReadyToStartContainers", not terminal),
                condition("Initialized", self._initialized or not inits, "ContainersNotInitialized"),
                condition("Ready", ready, "PodCompleted" if terminal else "ContainersNotReady"),
                condition("ContainersReady", ready, "PodCompleted" if terminal else "ContainersNotReady"),
                condition("PodScheduled", True),
            ],
            "hostIP": HOST_IP,
            "hostIPs": [{"ip": HOST_IP}],
            "podIP": HOST_IP,
            "podIPs": [{"ip": HOST_IP}],
            "startTime": stamp,
            "qosClass": "BestEffort",
            "containerStatuses": [c.status() for c in mains],
        }
        if inits:
            status["initContainerStatuses"] = [c.status() for c in inits]
        return status


def pod_is_terminal(pod: Obj) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def grace_of(pod: Obj) -> float:
    meta: dict[str, Any] = pod.get("metadata", {})
    value = meta.get("deletionGracePeriodSeconds")
    if value is None:
        value = pod.get("spec", {}).get("terminationGracePeriodSeconds", 30)
    return float(value)
