"""A slice-kill drill on the local cluster: run an elastic JobSet, force-delete one worker pod mid-run, observe.

The demo, the workloads benchmark and the cluster tests all run this same drill, through the official
`kubernetes` client against the cluster's kubeconfig, and differ only in what they do with what was observed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from kubernetes import client, config

from elastic_training.local.workloads.jobset import elastic_jobset
from elastic_training.operators.constants import (
    COMPLETED_STEP_RE,
    HEAD_MAIN_CONTAINER,
    HEAD_REPLICATED_JOB,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    LABEL_JOB_INDEX,
    LABEL_JOBSET_NAME,
    LABEL_REPLICATED_JOB_NAME,
    RECOVERY_RECORDS_FILE,
    WORKER_REPLICATED_JOB,
)

T = TypeVar("T")
NAMESPACE = "default"


class Cluster(Protocol):
    """What the drill needs of a running cluster (`local.upstream_cluster.UpstreamCluster`)."""

    @property
    def kubeconfig_path(self) -> Path: ...


class DrillTimeout(TimeoutError):
    """The drill waited longer than its plan allows."""


@dataclass(frozen=True)
class DrillPlan:
    """One drill: the run, when to kill which slice, and how long to wait.

    `until` is `"finished"` (wait for the JobSet's terminal state) or `"recovered"` (stop at the
    first recovery record, leaving the JobSet running: benchmarks measure many recoveries).
    """

    name: str
    base_output_directory: Path
    train_keys: Sequence[str]
    slices: int = 2
    kill_slice: int = 1
    kill_after_step: int = 50
    until: str = "finished"
    timeout: float = 300.0
    hold_file: Path | None = None
    extra_env: Mapping[str, str] | None = None

    @property
    def run_directory(self) -> Path:
        return self.base_output_directory / self.name


@dataclass
class DrillObservation:
    """What the drill saw, all read from the cluster's API and the run directory."""

    name: str
    head_pod: str
    head_pod_uid: str
    killed_pod: str
    killed_slice: int
    killed_at: float
    step_at_kill: int
    head_pod_kept: bool = False
    head_restarts: int = 0
    terminal_state: str | None = None
    jobset_status: dict[str, Any] = field(default_factory=dict)
    head_log: str = ""
    worker_pods: dict[int, list[str]] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def steps(self) -> list[int]:
        """Every `completed step` the trainer logged, in order (a rewind shows as a repeat)."""
        return [int(m[1]) for m in COMPLETED_STEP_RE.finditer(self.head_log)]


class SliceKillDrill:
    """Runs drills on one cluster; use as a context manager to close the API client."""

    def __init__(self, cluster: Cluster, on_step: Callable[[int], None] | None = None) -> None:
        self._cluster = cluster
        self._api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
        self.core = client.CoreV1Api(self._api)
        self.custom = client.CustomObjectsApi(self._api)
        self._on_step = on_step or (lambda step: None)

    def __enter__(self) -> SliceKillDrill:
        return self

    def __exit__(self, *exc: object) -> None:
        self._api.close()

    def run(self, plan: DrillPlan) -> DrillObservation:
        """Create the JobSet, kill the slice after `kill_after_step`, wait as the plan says, observe."""
        deadline = time.monotonic() + plan.timeout
        keys = [f"base_output_directory={plan.base_output_directory}", f"run_name={plan.name}", *plan.train_keys]
        manifest = elastic_jobset(
            plan.name, keys, slices=plan.slices, hold_file=plan.hold_file, extra_env=plan.extra_env
        )
        self.custom.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, manifest)
        head = _wait(
            f"the trainer pod of {plan.name}",
            deadline,
            lambda: next(iter(self.pods(plan.name, HEAD_REPLICATED_JOB)), None),
        )
        seen: dict[int, set[str]] = {}

        def progress() -> int:
            self._note_workers(plan.name, seen)
            try:
                log = self.head_log(head.metadata.name, tail_lines=50)
            except client.ApiException as error:
                if error.status not in (400, 404):
                    raise
                # A pod just bound: its node does not know it yet (404, as a kubelet says) or its container waits
                # to start (400). No step yet.
                log = ""
            step = max(_steps(log), default=-1)
            self._on_step(step)
            return step

        _wait(f"step {plan.kill_after_step}", deadline, lambda: progress() >= plan.kill_after_step)
        victim = _wait(
            f"a running worker pod of slice {plan.kill_slice}",
            deadline,
            lambda: self.worker_pod(plan.name, plan.kill_slice),
        )
        if plan.hold_file is not None:
            plan.hold_file.touch()  # the replacement worker stays down: replica-resize
        step_at_kill = progress()
        observation = DrillObservation(
            name=plan.name,
            head_pod=head.metadata.name,
            head_pod_uid=head.metadata.uid,
            killed_pod=victim.metadata.name,
            killed_slice=plan.kill_slice,
            killed_at=time.time(),
            step_at_kill=step_at_kill,
        )
        self.force_delete(victim.metadata.name)
        if plan.until == "recovered":
            _wait("a recovery record", deadline, lambda: (progress(), self.records(plan))[1])
        else:
            _wait(f"JobSet {plan.name} to finish", deadline, lambda: (progress(), self.terminal_state(plan.name))[1])
        self._observe(plan, observation, seen)
        return observation

    def force_delete(self, pod: str) -> None:
        """``kubectl delete pod --grace-period=0 --force``: the node kills the processes at once, and the Job
        controller counts the pod failed and replaces it. A graceful deletion would not do: the slice worker exits 0
        on SIGTERM, its pod Succeeded, and its one-completion Job complete, never replaced."""
        self.core.delete_namespaced_pod(pod, NAMESPACE, grace_period_seconds=0)

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, name, propagation_policy="Foreground"
        )

    def pods(self, jobset: str, replicated_job: str) -> list[Any]:
        selector = f"{LABEL_JOBSET_NAME}={jobset},{LABEL_REPLICATED_JOB_NAME}={replicated_job}"
        items: list[Any] = self.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
        return items

    def worker_pod(self, jobset: str, slice_index: int) -> Any | None:
        """The running worker pod of one slice, if any."""
        for pod in self.pods(jobset, WORKER_REPLICATED_JOB):
            if pod.metadata.labels.get(LABEL_JOB_INDEX) == str(slice_index) and pod.status.phase == "Running":
                return pod
        return None

    def head_log(self, pod_name: str, tail_lines: int | None = None) -> str:
        """The trainer container's log (its last `tail_lines` lines when given)."""
        # The client's preloaded log is the repr of bytes; read the raw body instead.
        extra = {"tail_lines": tail_lines} if tail_lines is not None else {}
        response = self.core.read_namespaced_pod_log(
            pod_name, NAMESPACE, container=HEAD_MAIN_CONTAINER, _preload_content=False, **extra
        )
        return str(response.data.decode("utf-8", errors="replace"))

    def jobset(self, name: str) -> dict[str, Any]:
        jobset: dict[str, Any] = self.custom.get_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, name
        )
        return jobset

    def terminal_state(self, name: str) -> str | None:
        state = self.jobset(name).get("status", {}).get("terminalState")
        return str(state) if state else None

    @staticmethod
    def records(plan: DrillPlan) -> list[dict[str, Any]]:
        path = plan.run_directory / RECOVERY_RECORDS_FILE
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def _note_workers(self, jobset: str, seen: dict[int, set[str]]) -> None:
        for pod in self.pods(jobset, WORKER_REPLICATED_JOB):
            seen.setdefault(int(pod.metadata.labels[LABEL_JOB_INDEX]), set()).add(pod.metadata.name)

    def _observe(self, plan: DrillPlan, observation: DrillObservation, seen: dict[int, set[str]]) -> None:
        self._note_workers(plan.name, seen)
        status = self.jobset(plan.name).get("status", {})
        heads = self.pods(plan.name, HEAD_REPLICATED_JOB)
        observation.jobset_status = status
        observation.terminal_state = status.get("terminalState")
        observation.head_pod_kept = [p.metadata.uid for p in heads] == [observation.head_pod_uid]
        observation.head_restarts = sum(s.restart_count for p in heads for s in (p.status.container_statuses or []))
        observation.head_log = self.head_log(observation.head_pod)
        observation.worker_pods = {index: sorted(names) for index, names in sorted(seen.items())}
        observation.records = self.records(plan)


def _steps(log: str) -> list[int]:
    return [int(m[1]) for m in COMPLETED_STEP_RE.finditer(log)]


def _wait(what: str, deadline: float, probe: Callable[[], T | None]) -> T:
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.05)
    raise DrillTimeout(f"timed out waiting for {what}")
