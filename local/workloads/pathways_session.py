"""What the trainer learns from Pathways on GKE, learnt here from the JobSet it runs in.

On Pathways the MaxText process does not choose its slices: its JAX client asks the proxy
(`--num_elastic_slices`), which asks the resource manager (`--instance_count`, `--instance_type`), and the
devices it gets are grouped by slice. MaxText's `num_slices` stays -1 ("from the devices"). The local
trainer does the same through the Kubernetes API: it reads its own pod (namespace and name from the
kubelet, `LOCAL_POD_NAMESPACE` / `LOCAL_POD_NAME`, standing in for the service-account mount), takes the
slice count from the `pathways-rm` sidecar's `--instance_count` (as the resource manager knows it) and the
hosts per slice from the JobSet's `worker` Jobs (`completions`, one pod per TPU VM), and watches slice
health over the worker pods (local/workloads/slices.py).

It also watches its own pod's Pathways sidecars (`pathways-proxy`, `pathways-rm`): when one of them
restarted, the client's session with the Pathways backend is gone (arrays, compiled programs, the slice
leases) and the trainer cannot continue: it logs `UNAVAILABLE: …` and exits 1, as a JAX client that lost
its backend fails (see local/workloads/pathways.py for why this is the credible GKE equivalent).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from elastic_training.operators.constants import LABEL_JOBSET_NAME, WORKER_REPLICATED_JOB

if TYPE_CHECKING:
    from kubernetes import client

    from elastic_training.local.workloads.pod_watch import PodWatch

_logger = logging.getLogger(__name__)

JOBSET_GROUP: Final = "jobset.x-k8s.io"
JOBSET_VERSION: Final = "v1alpha2"
RESOURCE_MANAGER_FLAG: Final = "--node_type=resource_manager"
EXIT_BACKEND_LOST: Final = 1
# The trainer's reads ride out a throttling or failing API server for about a minute (12 tries, backoff
# 0.25 s doubling to 8 s, with jitter, honouring Retry-After), as the operator's own calls do: a burst of
# 429/5xx while the head starts must not fail it, as it would not fail Pathways' resource-manager handshake.
API_RETRY_STATUSES: Final = (429, 500, 502, 503, 504)
API_RETRIES: Final = 12


@dataclass(frozen=True)
class Allocation:
    """The slices the trainer runs on: how many, and how many hosts (worker pods) each."""

    jobset_name: str
    namespace: str
    num_slices: int
    hosts_per_slice: int


def instance_count(pod_spec: Mapping[str, Any]) -> int | None:
    """The resource manager's `--instance_count` from a head pod spec (its `pathways-rm` sidecar), or None."""
    for container in [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]:
        args = [str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])]]
        if RESOURCE_MANAGER_FLAG not in args:
            continue
        for arg in args:
            if arg.startswith("--instance_count="):
                return int(arg.split("=", 1)[1])
    return None


def worker_shape(jobset: Mapping[str, Any]) -> tuple[int, int] | None:
    """(replicas, completions) of the JobSet's `worker` replicated job, or None without one."""
    for rjob in jobset.get("spec", {}).get("replicatedJobs") or []:
        if rjob.get("name") == WORKER_REPLICATED_JOB:
            job_spec = rjob.get("template", {}).get("spec", {})
            return int(rjob.get("replicas", 1)), int(job_spec.get("completions") or 1)
    return None


class PathwaysSession:
    """The trainer's view of its Pathways allocation, from the cluster (one per trainer process)."""

    def __init__(self, api_client: client.ApiClient, namespace: str, pod_name: str) -> None:
        from kubernetes import client as k8s

        self._core = k8s.CoreV1Api(api_client)
        self._custom = k8s.CustomObjectsApi(api_client)
        self._namespace = namespace
        self._pod_name = pod_name
        self._api_client = api_client
        self._watch: PodWatch | None = None

    @classmethod
    def from_environment(cls) -> PathwaysSession | None:
        """Built from `KUBECONFIG`, `LOCAL_POD_NAMESPACE`, `LOCAL_POD_NAME`; None outside the local cluster."""
        kubeconfig = os.environ.get("KUBECONFIG")
        namespace = os.environ.get("LOCAL_POD_NAMESPACE")
        pod_name = os.environ.get("LOCAL_POD_NAME")
        if not kubeconfig or not namespace or not pod_name:
            return None
        return cls(api_client_from_kubeconfig(kubeconfig), namespace, pod_name)

    @property
    def api_client(self) -> client.ApiClient:
        """The client the session reads with (the slice health reuses it)."""
        return self._api_client

    def allocation(self) -> Allocation:
        """The slice count (the resource manager's `--instance_count`, else the worker replicas) and hosts."""
        pod = self._api_client.sanitize_for_serialization(
            self._core.read_namespaced_pod(self._pod_name, self._namespace)
        )
        jobset_name = (pod.get("metadata", {}).get("labels") or {}).get(LABEL_JOBSET_NAME)
        if not jobset_name:
            raise RuntimeError(f"pod {self._pod_name} has no {LABEL_JOBSET_NAME} label: not in a JobSet")
        jobset = self._custom.get_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, self._namespace, "jobsets", jobset_name
        )
        shape = worker_shape(jobset)
        replicas, hosts = shape if shape is not None else (1, 1)
        count = instance_count(pod.get("spec", {}))
        return Allocation(jobset_name, self._namespace, count if count is not None else replicas, hosts)

    def watch_sidecars(self, on_lost: Callable[[str], None]) -> None:
        """Call `on_lost(message)` (from a thread) once a sidecar of this pod restarted or stopped.

        The pod is watched (local/workloads/pod_watch.py), not polled: on GKE the client's session breaks
        the moment the proxy goes, and a watch hears the restart as the kubelet reports it.
        """
        from elastic_training.local.workloads.pod_watch import PodWatch

        baseline = self._sidecars()
        _logger.info("Pathways session: proxy and resource manager %s", sorted(baseline))
        reported = threading.Event()

        def changed(pods: Mapping[str, client.V1Pod]) -> None:
            pod = pods.get(self._pod_name)
            if pod is None or reported.is_set():  # deleted: the kubelet stops the trainer itself (SIGTERM)
                return
            now = _sidecar_states(pod)
            for name, (restarts, running) in baseline.items():
                later_restarts, later_running = now.get(name, (restarts, False))
                if later_restarts != restarts or (running and not later_running):
                    reported.set()
                    incarnation = (restarts, running)
                    on_lost(
                        f"UNAVAILABLE: the Pathways backend is gone: sidecar {name} restarted or stopped "
                        f"({incarnation} -> {now.get(name)}); the client's session, arrays and slices are lost"
                    )
                    return

        self._watch = PodWatch(
            self._core,
            self._namespace,
            changed,
            field_selector=f"metadata.name={self._pod_name}",
            name="pathways-session",
        )

    def _sidecars(self) -> dict[str, tuple[int, bool]]:
        return _sidecar_states(self._core.read_namespaced_pod(self._pod_name, self._namespace))

    def close(self) -> None:
        """Stop watching."""
        if self._watch is not None:
            self._watch.close()


def _sidecar_states(pod: client.V1Pod) -> dict[str, tuple[int, bool]]:
    """(restarts, running) of each init container (the sidecars) of `pod`."""
    statuses = (pod.status.init_container_statuses if pod.status else None) or []
    return {s.name: (int(s.restart_count or 0), bool(s.state and s.state.running)) for s in statuses}


def api_client_from_kubeconfig(path: str) -> client.ApiClient:
    """A client for `path` whose requests urllib3 retries on connection errors and 429/5xx answers."""
    from kubernetes import client as k8s
    from kubernetes import config
    from urllib3.util.retry import Retry

    configuration = k8s.Configuration()
    config.load_kube_config(config_file=path, client_configuration=configuration)
    configuration.retries = Retry(
        total=API_RETRIES,
        status=API_RETRIES,
        status_forcelist=API_RETRY_STATUSES,
        backoff_factor=0.25,
        backoff_max=8.0,
        backoff_jitter=0.25,
        respect_retry_after_header=True,
        raise_on_status=False,  # the last answer reaches the client, which raises its ApiException
    )
    return k8s.ApiClient(configuration)


def exit_backend_lost(message: str) -> None:
    """Log `message` and end the process at once, as a JAX client whose backend vanished fails."""
    _logger.error(message)
    logging.shutdown()
    os._exit(EXIT_BACKEND_LOST)
