"""Faults injected when a training run reaches a step, as a person running a drill would inject them.

A background thread follows the run's newest head pod log through the official client (the pods carry the project's
``run-name`` label; one ``follow`` stream a head, as ``kubectl logs -f``) and fires each fault once, when the trainer
logs that it has completed its step. (It polled the log's tail 5 times a second before: 2 requests each time, about a
tenth of the suite's kube-apiserver requests, every log read proxied to the node agent.)
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, config
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.constants import (
    COMPLETED_STEP_RE,
    HEAD_MAIN_CONTAINER,
    HEAD_REPLICATED_JOB,
    LABEL_JOB_INDEX,
    LABEL_REPLICATED_JOB_NAME,
    LABEL_RUN_NAME,
    WORKER_REPLICATED_JOB,
)

NAMESPACE = "default"
# A request that hangs must not hold the injector past the fault's window: the next look asks again.
REQUEST_TIMEOUT = 5
# A follow silent this long is reopened (the head may have been replaced meanwhile; a stop is seen within it).
FOLLOW_READ_TIMEOUT = 3


@dataclass
class Fault:
    step: int
    action: Callable[[StepFaults], None]
    fired_at: float | None = None


@dataclass
class StepFaults:
    """Fire faults at steps of the run ``run_name`` on ``cluster`` (use as a context manager)."""

    cluster: UpstreamCluster
    run_name: str
    faults: list[Fault] = field(default_factory=list)
    poll_seconds: float = 0.2

    def __post_init__(self) -> None:
        self._api = config.new_client_from_config(config_file=str(self.cluster.kubeconfig_path))
        self.core = client.CoreV1Api(self._api)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"faults-{self.run_name}", daemon=True)
        self.errors: list[BaseException] = []

    def at(self, step: int, action: Callable[[StepFaults], None]) -> StepFaults:
        self.faults.append(Fault(step, action))
        return self

    def __enter__(self) -> StepFaults:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._api.close()

    def _pods(self, replicated_job: str) -> list[Any]:
        selector = f"{LABEL_RUN_NAME}={self.run_name},{LABEL_REPLICATED_JOB_NAME}={replicated_job}"
        pods = self.core.list_namespaced_pod(NAMESPACE, label_selector=selector, _request_timeout=REQUEST_TIMEOUT).items
        return sorted(
            (p for p in pods if p.metadata.deletion_timestamp is None),
            key=lambda p: p.metadata.creation_timestamp,
        )

    def head_pod(self) -> Any | None:
        pods = [p for p in self._pods(HEAD_REPLICATED_JOB) if p.status and p.status.phase == "Running"]
        return pods[-1] if pods else None

    def latest_step(self) -> int | None:
        head = self.head_pod()
        if head is None:
            return None
        response = self.core.read_namespaced_pod_log(
            head.metadata.name,
            NAMESPACE,
            container=HEAD_MAIN_CONTAINER,
            tail_lines=40,
            _preload_content=False,
            _request_timeout=REQUEST_TIMEOUT,
        )
        steps = [int(m.group(1)) for m in COMPLETED_STEP_RE.finditer(response.data.decode(errors="replace"))]
        return max(steps) if steps else None

    def kill_worker(self, slice_index: int = 0) -> None:
        """Force-delete the slice's worker pod, as ``kubectl delete pod --grace-period=0 --force`` (a slice dies): the
        node agent kills its processes at once, the Job controller replaces it after its Job-tracking finalizer."""
        for pod in self._pods(WORKER_REPLICATED_JOB):
            if (pod.metadata.labels or {}).get(LABEL_JOB_INDEX) == str(slice_index):
                self.core.delete_namespaced_pod(
                    pod.metadata.name, NAMESPACE, grace_period_seconds=0, _request_timeout=REQUEST_TIMEOUT
                )
                return
        raise RuntimeError(f"no worker pod of slice {slice_index}")

    def signal_trainer(self, sig: int) -> None:
        head = self.head_pod()
        if head is None:
            raise RuntimeError("no running head pod")
        self.cluster.faults.signal_pod(NAMESPACE, head.metadata.name, sig, HEAD_MAIN_CONTAINER)

    def freeze_trainer(self) -> None:
        self.signal_trainer(signal.SIGSTOP)

    def _pending(self) -> list[Fault]:
        return [f for f in self.faults if f.fired_at is None]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                head = self.head_pod() if self._pending() else None
                if head is not None:
                    self._follow(head.metadata.name)
            except Exception as error:  # a pod replaced under us, an action refused: look again
                self.errors.append(error)
            # No head yet, or its stream ended (its container did, and the pod may still read Running a moment).
            self._stop.wait(self.poll_seconds)

    def _follow(self, pod: str) -> None:
        """Fire the pending faults as the head's step lines come, until its container ends or none is pending."""
        response = self.core.read_namespaced_pod_log(
            pod,
            NAMESPACE,
            container=HEAD_MAIN_CONTAINER,
            follow=True,
            tail_lines=40,
            _preload_content=False,
            _request_timeout=(REQUEST_TIMEOUT, FOLLOW_READ_TIMEOUT),
        )
        try:
            partial = b""
            for chunk in _chunks(response):
                *lines, partial = (partial + chunk).split(b"\n")
                for line in lines:
                    self._on_line(line.decode(errors="replace"))
                if self._stop.is_set() or not self._pending():
                    return
        finally:
            response.close()  # not back to the pool while the node agent still streams on it
            response.release_conn()

    def _on_line(self, line: str) -> None:
        """One fault at most a line, and the next at least ``poll_seconds`` later (as when this polled)."""
        match = COMPLETED_STEP_RE.search(line)
        if match is None or self._stop.is_set():
            return
        step = int(match.group(1))
        for fault in self._pending():
            if step >= fault.step:
                fault.action(self)
                fault.fired_at = time.time()
                self._stop.wait(self.poll_seconds)
                return

    def __repr__(self) -> str:  # what an assertion on ``fired`` shows: the errors met looking
        return f"StepFaults({self.run_name!r}, fired={self.fired}, errors={self.errors[-5:]!r})"

    @property
    def fired(self) -> list[int]:
        return [f.step for f in self.faults if f.fired_at is not None]


def kill_worker(slice_index: int = 0) -> Callable[[StepFaults], None]:
    return lambda faults: faults.kill_worker(slice_index)


def _chunks(response: Any) -> Iterator[bytes]:
    """The follow's chunks until it ends, goes silent for FOLLOW_READ_TIMEOUT, or is cut (then the caller looks for
    the head again): only the stream's own errors end it quietly, not an action's."""
    try:
        yield from response.stream(4096)
    except (ReadTimeoutError, ProtocolError):
        return
