"""`JobSetHook` and `AsyncJobSetHook`: JobSet and pod access on the cncf-kubernetes provider's hooks.

The provider's hooks own connection handling (the ``kubernetes_default`` connection, ``kube_config_path``
or ``kube_config`` in its extra, in-cluster config, exec-auth token refresh in the async hook) and the
sync client's request timeouts (the async hook's shared client is `TimeoutApiClient`); they have no
custom-object list, watch or foreground delete, so those are here.
Objects come back as plain JSON dicts (the API's camelCase), whatever the client's model classes.

Errors that are the environment's, not the run's, become one `ClusterAccessError` line that names the
connection and the server and says what to set: a server that does not answer, a token the server refuses
(401), a verb the Role does not grant (403), a cluster without the JobSet CRD (404 on the collection, confirmed
by API discovery), a kubeconfig that does not load. Messages never carry the kubeconfig's content or token.

Retries: reads and deletes go through the provider's ``generic_api_retry`` (429 with Retry-After,
5xx, connection errors; not a certificate that fails verification); a create is retried only on
429/5xx and a 409 means the name is taken (the operator decides whether that is its own JobSet).
Watches relist on ``410 Gone`` and reconnect with capped exponential backoff and jitter, as
client-go's reflector does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import ssl
import time
from collections.abc import AsyncIterator, Callable
from functools import cached_property
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, KubernetesHook
from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import generic_api_retry
from airflow.sdk.exceptions import AirflowException
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from kubernetes.client.rest import ApiException
from kubernetes.config import ConfigException
from kubernetes_asyncio import client as async_k8s
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException
from urllib3.exceptions import HTTPError, SSLError
from yaml import YAMLError

from elastic_training.operators.api_client import REQUEST_TIMEOUT_SECONDS, TimeoutApiClient
from elastic_training.operators.backoff import Backoff
from elastic_training.operators.cluster_access import (
    ClusterAccessError,
    GkeAccess,
    GkeTarget,
    config_defaults,
    gke_access,
)
from elastic_training.operators.constants import (
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    KUEUE_GROUP,
    KUEUE_VERSION,
    LABEL_GKE_NODEPOOL,
    WORKLOAD_PLURAL,
)
from elastic_training.operators.gke_connection import CONN_TYPE as GKE_CONN_TYPE
from elastic_training.operators.gke_connection import HOOK_NAME as GKE_HOOK_NAME
from elastic_training.operators.kube_config import static_configuration

Obj = dict[str, Any]

F = TypeVar("F", bound=Callable[..., Any])


class _Permanent(Exception):
    """Carries an error past the provider's retry, which retries every urllib3 ``HTTPError``."""

    def __init__(self, error: HTTPError) -> None:
        super().__init__(error)
        self.error = error


def _untrusted_certificate(error: BaseException) -> bool:
    """Whether ``error`` is the server's certificate failing verification (no CA, or the wrong one)."""
    reason = getattr(error, "reason", None) or error
    return isinstance(reason, SSLError) and any(isinstance(a, ssl.SSLCertVerificationError) for a in reason.args)


def _certificate_refused(error: BaseException) -> bool:
    """Whether an asynchronous client's ``error`` is the server's certificate failing verification (aiohttp
    wraps the `ssl.SSLCertVerificationError` in a connector error; the chain and ``args`` carry it)."""
    seen: list[BaseException] = [error]
    while seen:
        current = seen.pop()
        if isinstance(current, ssl.SSLCertVerificationError):
            return True
        cause = getattr(current, "certificate_error", None)
        seen += [c for c in (cause, current.__cause__, *current.args) if isinstance(c, BaseException)]
    return False


def api_retry(method: F) -> F:
    """The provider's ``generic_api_retry`` (429 with Retry-After, 5xx, connection errors), except for a
    certificate that fails verification: no attempt changes that, so it is raised at once.

    A refused or reset connection stays retried: an API server restarting (an upgrade, a control plane
    repair) refuses connections for seconds, and the provider's backoff rides that out.
    """

    @functools.wraps(method)
    def attempt(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except HTTPError as error:
            if _untrusted_certificate(error):
                raise _Permanent(error) from error
            raise

    retried = cast(Callable[..., Any], generic_api_retry)(attempt)

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return retried(*args, **kwargs)
        except _Permanent as permanent:
            raise permanent.error from None

    return cast(F, call)


TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
# How long an operator rides out 429/5xx answers around a step it must not fail (finding, creating or
# deleting its JobSet): a throttling burst outlasts the hook's own five attempts.
TRANSIENT_API_SECONDS = 300.0
# Answers that retrying will not change unless someone acts (a renewed token, a granted verb, an installed
# CRD): a watch retries them a few times, for a token being rotated, then gives up with a clear error.
REFUSED_ATTEMPTS = 6
# The node lifecycle controller's taints of a node not (yet) Ready, which kube-scheduler's TaintToleration honours.
NOT_READY_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})
WATCH_TIMEOUT_SECONDS = 300  # server-side watch timeout; the stream is reopened from the last resourceVersion
# Client side of a long request: connect within 10 s, then allow this long between two reads. The
# provider's client would otherwise cut every request at its 60 s default, watches and log follows included.
LONG_REQUEST_TIMEOUT = (10, WATCH_TIMEOUT_SECONDS + 30)


JOBSET_INSTALL_HINT = "install kubernetes-sigs/jobset (https://jobset.sigs.k8s.io/docs/installation/)"
REFUSAL_ADVICE = {
    401: "the token is expired or invalid: renew the token in the kubeconfig the connection uses",
    403: (
        "bind the Role of deploy/rbac.yaml (`python -m elastic_training.operators.rbac <namespace>`) "
        "to its service account"
    ),
    404: f"the namespace may be gone, or the JobSet CRD not installed ({JOBSET_INSTALL_HINT})",
}
REFUSED_STATUSES = frozenset(REFUSAL_ADVICE)
# The ClusterRole the project ships for each cluster-scoped resource an operator reads.
CLUSTER_SCOPED_ADVICE = {
    "nodes": (
        "deploy/rbac-node-pools.yaml: `python -m elastic_training.operators.rbac --node-pools <namespace> "
        "[<service-account>]`, docs/rbac.md"
    )
}


GKE_UNAUTHORIZED_ADVICE = (
    "the Google access token was refused although it was refreshed: check that Airflow's Google service "
    "account may reach the cluster (roles/container.clusterViewer) and the host's clock"
)
__all__ = ["AsyncJobSetHook", "ClusterAccessError", "JobSetHook"]


def _server_of(host: object) -> str:
    """The API server URL without user info (a kubeconfig may carry ``user:password@``)."""
    parts = urlsplit(str(host))
    netloc = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{netloc}{parts.path}" if parts.scheme else str(host)


def _explained(verb: str, resource: str) -> Callable[[F], F]:
    """Turn environment errors of a `JobSetHook` method into a `ClusterAccessError` (after any retries)."""

    def decorate(method: F) -> F:
        signature = inspect.signature(method)

        @functools.wraps(method)
        def wrapper(self: JobSetHook, *args: Any, **kwargs: Any) -> Any:
            try:
                try:
                    return method(self, *args, **kwargs)
                except ApiException as error:
                    if error.status != 401 or self.gke is None:
                        raise
                    # A GKE token refused (revoked, or it expired on the way): once more with a new one.
                    self.gke.tokens.invalidate()
                    return method(self, *args, **kwargs)
            except (ApiException, HTTPError, ConfigException, YAMLError) as error:
                namespace = signature.bind(self, *args, **kwargs).arguments.get("namespace")
                explained = self.explain(error, verb=verb, resource=resource, namespace=namespace)
                if explained is None:
                    raise
                raise explained from None

        return cast(F, wrapper)

    return decorate


def _status_of(error: BaseException) -> int | None:
    status = getattr(error, "status", None)
    return int(status) if isinstance(status, int) else None


T = TypeVar("T")


def ride_out_transient(call: Callable[[], T], *, what: str, log: Any, seconds: float = TRANSIENT_API_SECONDS) -> T:
    """``call()``, retried with capped backoff while the API answers 429/5xx, for up to ``seconds``.

    The hook's retries cover a blip; a burst that outlasts them must not fail a run in the middle of
    adopting, creating or restarting its JobSet (a task without Airflow retries would end there).
    """
    deadline = time.monotonic() + seconds
    backoff = Backoff(base=1.0, cap=15.0)
    while True:
        try:
            return call()
        except ApiException as error:
            if error.status not in TRANSIENT_STATUSES or time.monotonic() >= deadline:
                raise
            log.warning("%s: HTTP %s from the API server, retrying", what, error.status)
            time.sleep(backoff.next_delay())


class JobSetHook(KubernetesHook):
    """Create, read, list and delete JobSets, and read their pods and logs (blocking)."""

    hook_name = "Kubernetes JobSet"

    @cached_property
    def gke(self) -> GkeAccess | None:
        """The GKE access of the connection (``gke_cluster`` in its extra), else ``None``."""
        target = GkeTarget.from_extras(self.conn_extras, conn_id=str(self.conn_id), defaults=config_defaults())
        if target is None and self.conn_id and self.get_connection(self.conn_id).conn_type == GKE_CONN_TYPE:
            raise ClusterAccessError(
                f"connection {self.conn_id!r} is a {GKE_HOOK_NAME} connection but names no cluster: "
                "set its Cluster field (gke_cluster)"
            )
        return gke_access(target) if target is not None else None

    def get_conn(self) -> k8s.ApiClient:
        """The API client: the provider's, or for a GKE connection one with refreshed Google tokens."""
        gke = self.gke
        if gke is None:
            return super().get_conn()
        return k8s.ApiClient(gke.sync_configuration())

    def _to_dict(self, obj: Any) -> Obj:
        data: Obj = self.api_client.sanitize_for_serialization(obj)
        return data

    def explain(
        self, error: BaseException, *, verb: str, resource: str, namespace: object = None
    ) -> ClusterAccessError | None:
        """A `ClusterAccessError` saying what to set when `error` is the environment's, else ``None``."""
        conn = f"connection {self.conn_id!r}"
        if isinstance(error, ConfigException | YAMLError):
            return ClusterAccessError(
                f"{conn}: cannot load a Kubernetes configuration ({_config_problem(error)}); set kube_config_path, "
                "kube_config or in_cluster in the connection's extra"
            )
        server = _server_of(self.api_client.configuration.host)
        if isinstance(error, HTTPError):
            reason = getattr(error, "reason", None) or error
            if _untrusted_certificate(error):
                return ClusterAccessError(
                    f"the Kubernetes API server {server} of {conn} presented a certificate that is not trusted: "
                    "put the cluster's CA in the kubeconfig (certificate-authority-data), or check the server address"
                )
            return ClusterAccessError(
                f"cannot reach the Kubernetes API server {server} of {conn} ({type(reason).__name__}): check the "
                "server in the kubeconfig the connection uses, and that the cluster is running"
            )
        status = _status_of(error)
        if status == 401 and self.gke is not None:
            self.gke.tokens.invalidate()
            return ClusterAccessError(
                f"the Kubernetes API server {server} of GKE cluster {self.gke.target.name} ({conn}) refused "
                f"its Google access token (HTTP 401 Unauthorized): {GKE_UNAUTHORIZED_ADVICE}"
            )
        if status == 401:
            return ClusterAccessError(
                f"the Kubernetes API server {server} refused the credentials of {conn} (HTTP 401 Unauthorized): "
                "the token is expired or invalid; renew it in the kubeconfig the connection uses"
            )
        if status == 403 and namespace is None:  # cluster-scoped (nodes): no namespaced Role can grant it
            advice = CLUSTER_SCOPED_ADVICE.get(resource, "docs/rbac.md")
            return ClusterAccessError(
                f"{conn} may not {verb} {resource}, which are cluster-scoped, on {server} (HTTP 403 Forbidden): bind "
                f"a ClusterRole that grants it to its service account ({advice})"
            )
        if status == 403:
            return ClusterAccessError(
                f"{conn} may not {verb} {resource} in namespace {namespace!r} on {server} (HTTP 403 Forbidden): bind "
                "the Role of deploy/rbac.yaml (`python -m elastic_training.operators.rbac <namespace>`) "
                "to its service account"
            )
        if status == 404 and resource == JOBSET_PLURAL and not self._serves_jobsets():
            return ClusterAccessError(
                f"the JobSet CRD ({JOBSET_GROUP}/{JOBSET_VERSION}) is not installed on the cluster {server} of "
                f"{conn}; {JOBSET_INSTALL_HINT}"
            )
        if status == 404 and verb in ("create", "list"):
            return ClusterAccessError(f"namespace {namespace!r} does not exist on the cluster {server} of {conn}")
        return None

    def _serves_jobsets(self) -> bool:
        """Whether API discovery lists the ``jobsets`` resource (the CRD is installed)."""
        try:
            resources = self.custom_object_client.get_api_resources(JOBSET_GROUP, JOBSET_VERSION)
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return any(r.name == JOBSET_PLURAL for r in resources.resources or [])

    @_explained("create", JOBSET_PLURAL)
    def create_jobset(self, body: Obj, namespace: str) -> Obj:
        """Create a JobSet; ``ApiException`` 409 when the name is taken (retried only on 429/5xx)."""
        backoff = Backoff(base=0.5, cap=10.0)
        for attempt in range(6):
            try:
                created: Obj = self.custom_object_client.create_namespaced_custom_object(
                    JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, body
                )
                return created
            except ApiException as error:
                if error.status not in TRANSIENT_STATUSES or attempt == 5:
                    raise
                self.log.warning("create JobSet: HTTP %s, retrying", error.status)
                time.sleep(backoff.next_delay())
        raise AssertionError("unreachable")  # pragma: no cover

    @_explained("get", JOBSET_PLURAL)
    @api_retry
    def get_jobset(self, name: str, namespace: str) -> Obj | None:
        """The JobSet, or ``None`` when there is none of that name."""
        try:
            found: Obj = self.custom_object_client.get_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, name
            )
            return found
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    @_explained("list", JOBSET_PLURAL)
    @api_retry
    def list_jobsets(self, namespace: str, label_selector: str) -> list[Obj]:
        """JobSets in ``namespace`` matching ``label_selector``."""
        listed = self.custom_object_client.list_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, label_selector=label_selector
        )
        return list(listed.get("items") or [])

    @_explained("delete", JOBSET_PLURAL)
    @api_retry
    def delete_jobset(self, name: str, namespace: str, *, uid: str | None = None, foreground: bool = True) -> bool:
        """Delete the JobSet (foreground: its Jobs and pods go first); ``False`` when it was already gone.

        With ``uid`` the delete is conditional (``preconditions.uid``), so a newer JobSet of the same
        name is never deleted by mistake.
        """
        body = k8s.V1DeleteOptions(
            propagation_policy="Foreground" if foreground else "Background",
            preconditions=k8s.V1Preconditions(uid=uid) if uid else None,
        )
        try:
            self.custom_object_client.delete_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, name, body=body
            )
            return True
        except ApiException as error:
            if error.status in (404, 409):  # gone, or a different object of that name now (uid precondition)
                return False
            raise

    @_explained("watch", JOBSET_PLURAL)
    def wait_jobset_gone(self, name: str, namespace: str, *, timeout: float, uid: str | None = None) -> bool:
        """Watch until the JobSet (with ``uid`` when given) no longer exists; ``False`` on timeout."""
        deadline = time.monotonic() + timeout
        backoff = Backoff(base=0.2, cap=5.0)
        while time.monotonic() < deadline:
            try:
                current = self.get_jobset(name, namespace)
                if current is None or (uid and current.get("metadata", {}).get("uid") != uid):
                    return True
                version = current["metadata"].get("resourceVersion")
                stream = k8s_watch.Watch()
                remaining = max(1, int(deadline - time.monotonic()))
                for event in stream.stream(
                    self.custom_object_client.list_namespaced_custom_object,
                    JOBSET_GROUP,
                    JOBSET_VERSION,
                    namespace,
                    JOBSET_PLURAL,
                    field_selector=f"metadata.name={name}",
                    resource_version=version,
                    timeout_seconds=min(remaining, 60),
                ):
                    if event["type"] == "DELETED":
                        stream.stop()
                        return True
                backoff.reset()
            except ApiException as error:
                if error.status not in TRANSIENT_STATUSES and error.status != 410:
                    raise
                time.sleep(min(backoff.next_delay(), max(0.0, deadline - time.monotonic())))
        return self.get_jobset(name, namespace) is None

    def require_jobset_gone(self, name: str, namespace: str, *, timeout: float, uid: str | None = None) -> None:
        """`wait_jobset_gone`, raising `AirflowException` when the JobSet is still there after ``timeout``."""
        if not self.wait_jobset_gone(name, namespace, uid=uid, timeout=timeout):
            raise AirflowException(f"JobSet {name} in {namespace} was still being deleted after {timeout:.0f} s")

    @_explained("list", "pods")
    @api_retry
    def list_pods(self, namespace: str, label_selector: str) -> list[Obj]:
        """Pods in ``namespace`` matching ``label_selector``, as dicts."""
        pods = self.core_v1_client.list_namespaced_pod(namespace, label_selector=label_selector)
        return [self._to_dict(p) for p in pods.items]

    @_explained("list", "jobs")
    @api_retry
    def list_jobs(self, namespace: str, label_selector: str) -> list[Obj]:
        """Jobs in ``namespace`` matching ``label_selector``, as dicts."""
        jobs = self.batch_v1_client.list_namespaced_job(namespace, label_selector=label_selector)
        return [self._to_dict(j) for j in jobs.items]

    @_explained("delete", "pods")
    @api_retry
    def delete_pod(self, name: str, namespace: str, *, uid: str, grace_period_seconds: int) -> bool | None:
        """Delete the pod (conditional on ``uid``) with ``grace_period_seconds``: ``True`` when asked, ``False`` when
        it was gone (or is another pod now), ``None`` when the role may not (403: a Role from before this verb).

        A pod already terminating keeps the shorter of its deadline and this one (``BeforeDelete`` in
        ``k8s.io/apiserver/pkg/registry/rest/delete.go`` only ever shortens a grace period).
        """
        preconditions = k8s.V1Preconditions(uid=uid)
        body = k8s.V1DeleteOptions(grace_period_seconds=grace_period_seconds, preconditions=preconditions)
        try:
            # In the query too: the audit log shows it (the API server decodes the same options from either).
            self.core_v1_client.delete_namespaced_pod(
                name, namespace, body=body, grace_period_seconds=grace_period_seconds
            )
            return True
        except ApiException as error:
            if error.status == 403:
                return None
            if error.status in (404, 409):
                return False
            raise

    @_explained("list", "nodes")
    @api_retry
    def list_node_pools(self, label_selector: str, *, hosts: int = 1) -> list[str]:
        """The GKE node pools (``cloud.google.com/gke-nodepool``) with at least ``hosts`` schedulable nodes
        matching ``label_selector``: ``Ready=True`` and not cordoned (``spec.unschedulable``), the nodes
        kube-scheduler's ``NodeUnschedulable`` filter and the node lifecycle controller's not-ready taints leave.

        Nodes are cluster-scoped: this needs ``list`` on ``nodes`` (a ClusterRole, docs/rbac.md), which only
        ``avoid_failing_node_pools`` asks for.
        """
        nodes = self.core_v1_client.list_node(label_selector=label_selector)
        schedulable: dict[str, int] = {}
        for node in nodes.items:
            pool = (node.metadata.labels or {}).get(LABEL_GKE_NODEPOOL)
            if pool and node_schedulable(node):
                schedulable[pool] = schedulable.get(pool, 0) + 1
        return sorted(p for p, count in schedulable.items() if count >= hosts)

    @api_retry
    def read_config_map(self, name: str, namespace: str) -> dict[str, str] | None:
        """A ConfigMap's ``data`` (``None``: no such ConfigMap); ``ApiException`` 403 where the Role does not let
        the operator read it (Kueue's configuration in ``kueue-system``: docs/rbac.md, optional)."""
        try:
            found = self.core_v1_client.read_namespaced_config_map(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return {str(k): str(v) for k, v in (found.data or {}).items()}

    @_explained("get", "pods/log")
    @api_retry
    def read_log_tail(self, name: str, namespace: str, container: str, *, tail_lines: int = 40) -> str:
        """The last lines of a container's log (bounded by lines and 64 KiB); '' when unreadable."""
        try:
            response = self.core_v1_client.read_namespaced_pod_log(
                name,
                namespace,
                container=container,
                tail_lines=tail_lines,
                limit_bytes=64 * 1024,
                _preload_content=False,
            )
            data: bytes = response.data
            return data.decode("utf-8", errors="replace")
        except ApiException as error:
            if error.status in (400, 404):
                return ""
            raise


def node_schedulable(node: Any) -> bool:
    """Whether a ``V1Node`` takes new pods: ``Ready=True``, not cordoned (``spec.unschedulable``) and without the
    node lifecycle controller's not-ready taints, which a node back from NotReady keeps a moment after it is Ready."""
    ready = any(
        c.type == "Ready" and c.status == "True" for c in (node.status.conditions if node.status else None) or []
    )
    spec = node.spec
    tainted = any(t.key in NOT_READY_TAINTS for t in (spec.taints if spec else None) or [])
    return ready and not tainted and not (spec and spec.unschedulable)


def _config_problem(error: BaseException) -> str:
    """What is wrong with the configuration, without quoting it (a YAML error quotes the token's line)."""
    if isinstance(error, YAMLError):
        return "its kubeconfig is not valid YAML"
    text = str(error)
    return text if len(text) <= 200 and "token" not in text.lower() else type(error).__name__


class GkeJobSetHook(JobSetHook):
    """:class:`JobSetHook` for the provider's own connection type, ``elastic_training_gke`` (the form's fields:
    project, location, cluster, namespace; see :mod:`operators.gke_connection`). Any JobSet hook reads either
    connection type; this class gives the type its name in the connection form."""

    conn_type = GKE_CONN_TYPE
    hook_name = GKE_HOOK_NAME


class AsyncJobSetHook(AsyncKubernetesHook):
    """Read and watch a JobSet, its Jobs and pods, and follow its head pod's log (kubernetes_asyncio).

    One API client serves every call and stream of a hook (each client builds its own TLS context,
    about 50 ms of CPU and most of a MiB; one per stream made a triggerer watching 100 JobSets slow and
    large). With exec-based auth (GKE, EKS) each call gets a fresh client instead, so short-lived
    tokens are refreshed as the provider intends. Lists and watches are read as raw JSON: no model
    classes, and no ``Watch`` helper (which builds yet another client).
    """

    request_timeout = REQUEST_TIMEOUT_SECONDS  # for a call that sets none (`TimeoutApiClient`)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shared: async_k8s.ApiClient | None = None
        self._shared_lock = asyncio.Lock()
        self._gke: GkeAccess | None = None

    async def _gke_access(self) -> GkeAccess | None:
        extras = await self.get_conn_extras()
        target = GkeTarget.from_extras(extras, conn_id=str(self.conn_id), defaults=config_defaults())
        return gke_access(target) if target is not None else None

    @contextlib.asynccontextmanager
    async def api(self) -> AsyncIterator[async_k8s.ApiClient]:
        """The hook's API client (a fresh one per call with exec-based auth; one with a refreshed
        Google token per request for a GKE connection)."""
        async with self._shared_lock:
            if self._shared is None and (gke := await self._gke_access()) is not None:
                self._gke = gke
                self._shared = TimeoutApiClient(
                    configuration=await gke.async_configuration(), default_timeout=self.request_timeout
                )
            if self._shared is None:
                configuration = await static_configuration(
                    await self.get_conn_extras(),
                    in_cluster=self.in_cluster,
                    cluster_context=self.cluster_context,
                    config_dict=self.config_dict,
                )
                if configuration is not None:
                    self._shared = TimeoutApiClient(configuration=configuration, default_timeout=self.request_timeout)
        if self._shared is not None:
            yield self._shared
            return
        async with self.get_conn() as fresh:
            yield fresh

    async def close(self) -> None:
        """Close the shared client (its connection pool)."""
        if self._shared is not None:
            await self._shared.close()
            self._shared = None

    async def get_jobset(self, name: str, namespace: str) -> Obj | None:
        async with self.api() as api:
            try:
                found: Obj = await async_k8s.CustomObjectsApi(api).get_namespaced_custom_object(
                    JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, name
                )
                return found
            except AsyncApiException as error:
                if error.status == 404:
                    return None
                raise

    async def delete_jobset(self, name: str, namespace: str, *, uid: str | None = None) -> bool:
        """Foreground delete (conditional on ``uid``); ``False`` when it was already gone."""
        async with self.api() as api:
            body = async_k8s.V1DeleteOptions(
                propagation_policy="Foreground", preconditions=async_k8s.V1Preconditions(uid=uid) if uid else None
            )
            try:
                await async_k8s.CustomObjectsApi(api).delete_namespaced_custom_object(
                    JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, name, body=body
                )
                return True
            except AsyncApiException as error:
                if error.status in (404, 409):
                    return False
                raise

    async def watch_jobset(self, name: str, namespace: str) -> AsyncIterator[tuple[str, Obj | None]]:
        """``("SYNC", jobset or None)`` after each (re)list, then ``(type, jobset)`` per change; forever."""
        async for kind, obj in self.watch_jobsets(namespace, field_selector=f"metadata.name={name}"):
            if kind == "SYNC":
                items = obj.get("items") or []
                yield "SYNC", (items[0] if items else None)
            else:
                yield kind, obj

    async def watch_jobsets(self, namespace: str, *, field_selector: str = "") -> AsyncIterator[tuple[str, Obj]]:
        """The JobSets in ``namespace`` (those ``field_selector`` matches): ``("SYNC", {"items": [...]})`` after each
        (re)list, then ``(type, jobset)`` per change; forever."""

        def lister(api: async_k8s.ApiClient) -> Callable[..., Any]:
            custom = async_k8s.CustomObjectsApi(api)

            def list_jobsets(**kwargs: Any) -> Any:
                return custom.list_namespaced_custom_object(
                    JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, **kwargs
                )

            return list_jobsets

        stream = self._list_watch(lister, field_selector=field_selector) if field_selector else self._list_watch(lister)
        async for kind, obj in stream:
            yield kind, obj

    async def watch_pods(self, namespace: str, label_selector: str) -> AsyncIterator[tuple[str, Obj]]:
        """``("SYNC", {"items": [...]})`` after each (re)list, then ``(type, pod)`` per change; forever."""

        def lister(api: async_k8s.ApiClient) -> Callable[..., Any]:
            core = async_k8s.CoreV1Api(api)

            def list_pods(**kwargs: Any) -> Any:
                return core.list_namespaced_pod(namespace, **kwargs)

            return list_pods

        async for kind, obj in self._list_watch(lister, label_selector=label_selector):
            yield kind, obj

    async def watch_jobs(self, namespace: str, label_selector: str) -> AsyncIterator[tuple[str, Obj]]:
        """Child Jobs: ``("SYNC", {"items": [...]})`` after each (re)list, then ``(type, job)``; forever."""

        def lister(api: async_k8s.ApiClient) -> Callable[..., Any]:
            batch = async_k8s.BatchV1Api(api)

            def list_jobs(**kwargs: Any) -> Any:
                return batch.list_namespaced_job(namespace, **kwargs)

            return list_jobs

        async for kind, obj in self._list_watch(lister, label_selector=label_selector):
            yield kind, obj

    async def watch_workloads(self, namespace: str, label_selector: str) -> AsyncIterator[tuple[str, Obj]]:
        """Kueue Workloads (``kueue.x-k8s.io/v1beta2``): ``("SYNC", {"items": [...]})``, then ``(type, workload)``."""

        def lister(api: async_k8s.ApiClient) -> Callable[..., Any]:
            custom = async_k8s.CustomObjectsApi(api)

            def list_workloads(**kwargs: Any) -> Any:
                return custom.list_namespaced_custom_object(
                    KUEUE_GROUP, KUEUE_VERSION, namespace, WORKLOAD_PLURAL, **kwargs
                )

            return list_workloads

        # A cluster without Kueue serves no Workloads (404): nothing to read, and nothing suspends the JobSet.
        async for kind, obj in self._list_watch(lister, missing_ends=True, label_selector=label_selector):
            yield kind, obj

    async def _list_watch(
        self,
        lister: Callable[[async_k8s.ApiClient], Callable[..., Any]],
        *,
        missing_ends: bool = False,
        **selectors: str,
    ) -> AsyncIterator[tuple[str, Obj]]:
        """``("SYNC", list)`` after each (re)list, then ``(type, object)`` per change, as client-go's reflector:
        each watch resumes from the last resourceVersion seen (bookmarks included), ``410 Gone`` relists."""
        backoff = Backoff()
        refused = 0
        while True:
            try:
                async with self.api() as api:
                    list_call = lister(api)
                    listed: Any = await list_call(_preload_content=False, **selectors)
                    snapshot = await _read_json(listed)
                    version = (snapshot.get("metadata") or {}).get("resourceVersion")
                    yield "SYNC", snapshot
                    backoff.reset()
                    refused = 0
                    while True:  # the server ends each watch after its timeout: reopen from the last version
                        stream: Any = await list_call(
                            watch=True,
                            resource_version=version,
                            timeout_seconds=WATCH_TIMEOUT_SECONDS,
                            allow_watch_bookmarks=True,
                            _preload_content=False,
                            _request_timeout=LONG_REQUEST_TIMEOUT,
                            **selectors,
                        )
                        try:
                            await _raise_for_status(stream)
                            async for kind, obj in _watch_events(stream):
                                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                                if kind != "BOOKMARK":
                                    yield kind, obj
                        finally:
                            stream.release()
            except (asyncio.CancelledError, ClusterAccessError):
                raise  # a GKE connection without credentials or cluster: retrying changes nothing
            except AsyncApiException as error:
                if error.status == 410:
                    self.log.info("watch: resourceVersion too old (410); relisting")
                    continue
                if error.status == 404 and missing_ends:
                    self.log.info("watch: the resource is not served (404); not watching it")
                    return
                refused = self._refused(error, refused)
            except Exception as error:  # connection refused/reset, timeouts: the API may come back
                if _certificate_refused(error):  # no attempt changes a certificate the client does not trust
                    raise ClusterAccessError(
                        f"watching through connection {self.conn_id!r}: the Kubernetes API server presented a "
                        "certificate that is not trusted: put the cluster's CA in the kubeconfig "
                        "(certificate-authority-data), or check the server address"
                    ) from None
                self.log.warning("watch: %s: %s; retrying", type(error).__name__, error)
            await asyncio.sleep(backoff.next_delay())

    def _refused(self, error: AsyncApiException, refused: int) -> int:
        """Count a watch's error answer: refusals in a row, a `ClusterAccessError` after `REFUSED_ATTEMPTS`."""
        if error.status == 401 and self._gke is not None:
            self._gke.tokens.invalidate()  # the next attempt fetches a new token
        refused = refused + 1 if error.status in REFUSED_STATUSES else 0
        if refused >= REFUSED_ATTEMPTS:
            advice = GKE_UNAUTHORIZED_ADVICE if error.status == 401 and self._gke else None
            raise ClusterAccessError(
                f"watching through connection {self.conn_id!r}: the Kubernetes API answered HTTP "
                f"{error.status} {error.reason} {refused} times in a row; {advice or REFUSAL_ADVICE[error.status]}"
            ) from None
        if error.status not in TRANSIENT_STATUSES:
            self.log.warning("watch: HTTP %s: %s; retrying", error.status, error.reason)
        return refused

    async def follow_log(
        self,
        name: str,
        namespace: str,
        container: str,
        *,
        since_seconds: int | None,
        tail_lines: int | None,
        follow: bool = True,
    ) -> AsyncIterator[tuple[str, str]]:
        """``(RFC 3339 timestamp, text)`` per line of a container's log, following until the stream ends.

        Without ``follow`` it reads what is there (at most 1 MiB) and stops.
        """
        async with self.api() as api:
            core = async_k8s.CoreV1Api(api)
            bounds: dict[str, Any] = {
                "since_seconds": since_seconds,
                "tail_lines": tail_lines,
                "limit_bytes": None if follow else 1 << 20,
            }
            response: Any = await core.read_namespaced_pod_log(
                name,
                namespace,
                container=container,
                follow=follow,
                timestamps=True,
                _preload_content=False,
                _request_timeout=LONG_REQUEST_TIMEOUT,
                **{key: value for key, value in bounds.items() if value is not None},
            )
            try:
                await _raise_for_status(response)
                async for raw in _lines(response):
                    stamp, _, text = raw.decode("utf-8", errors="replace").partition(" ")
                    yield stamp, text[:4096]
            finally:
                response.release()


MAX_LINE_BYTES = 16 << 20  # one watch event or log line; a longer one is cut (logs) or refused (events)


async def _raise_for_status(response: Any) -> None:
    """Unpreloaded responses are not checked by the client: an error body must not pass for data."""
    if not 200 <= int(response.status) <= 299:
        body = (await response.content.read(64 * 1024)).decode("utf-8", errors="replace")
        detail = body[:500]
        with contextlib.suppress(ValueError, AttributeError, RecursionError):
            detail = str(json.loads(body).get("message") or detail)[:500]  # a Status object's message
        phrase = getattr(response, "reason", None) or ""
        reason = f"{phrase}: {detail}" if phrase and detail != phrase else detail or phrase
        raise AsyncApiException(status=int(response.status), reason=reason)


async def _read_json(response: Any) -> Obj:
    """An unpreloaded response's JSON body (an error status raised), the response released."""
    try:
        await _raise_for_status(response)
        body: Obj = json.loads(await response.read())
        return body
    finally:
        response.release()


async def _watch_events(stream: Any) -> AsyncIterator[tuple[str, Obj]]:
    """``(type, object)`` per watch event; an ``ERROR`` event (``410 Gone``, ...) raised as its status."""
    async for event in _json_lines(stream):
        kind = str(event.get("type"))
        obj = event.get("object") or {}
        if kind == "ERROR":
            raise AsyncApiException(status=obj.get("code"), reason=obj.get("message"))
        yield kind, obj


async def _lines(response: Any) -> AsyncIterator[bytes]:
    """Newline-separated lines of a streamed body, without aiohttp's 64 KiB line limit."""
    buffer = b""
    async for chunk in response.content.iter_any():
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            yield line
        if len(buffer) > MAX_LINE_BYTES:
            yield buffer[:MAX_LINE_BYTES]
            buffer = b""
    if buffer:
        yield buffer


async def _json_lines(response: Any) -> AsyncIterator[Obj]:
    async for line in _lines(response):
        if line.strip():
            event: Obj = json.loads(line)
            yield event
