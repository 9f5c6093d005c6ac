"""The GKE connection: the sync hook, the trigger and the live view reach the cluster with Google tokens that expire.

kube-apiserver stands in for the GKE control plane (TLS with its own CA, tokens checked on every request through
its token webhook, uncached); `google_stand_in.GoogleStandIn` for Google's OAuth token endpoint, the GKE API and
GKE's authenticator behind that webhook. Tokens live 4 s, so each test outlives several: every request must carry
a live one, or kube-apiserver answers 401.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.cluster_access import ClusterAccessError, EndpointKind, GkeTarget
from elastic_training.operators.constants import (
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    LABEL_JOB_INDEX,
    LABEL_JOBSET_NAME,
)
from elastic_training.operators.hooks import AsyncJobSetHook, JobSetHook
from elastic_training.operators.observations import MonitorState
from elastic_training.operators.triggers import JobSetTrigger
from elastic_training.plugin.live import kubernetes_reader
from tests.support.gke import NAMESPACE, GkeConnection, gke_connection
from tests.support.local_cluster import K8s
from tests.support.trigger_runs import BUDGETS, sleeping_jobset

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gke(cluster: UpstreamCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GkeConnection]:
    yield from gke_connection(cluster, tmp_path_factory.mktemp("gke"))


def wait_until(what: str, probe: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.1)
    raise TimeoutError(what)


async def await_until(what: str, probe: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        await asyncio.sleep(0.1)
    raise TimeoutError(what)


def newest_token_expired(gke: GkeConnection) -> Callable[[], bool]:
    """A probe: the newest token issued so far has expired (so every later request needs a new one)."""
    newest = gke.google.ledger.issued[-1][0]
    return lambda: gke.google.expired(newest)


def status_with_token(cluster: UpstreamCluster, token: str) -> int:
    request = urllib.request.Request(
        f"{cluster.url}/api/v1/namespaces/{NAMESPACE}/pods", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, context=cluster.control_plane.ssl_context(), timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_the_sync_hook_reaches_the_cluster_while_its_tokens_expire(gke: GkeConnection) -> None:
    hook = JobSetHook(conn_id=gke.conn_id)
    name = "gke-sync"
    created = hook.create_jobset(sleeping_jobset(name, 1), NAMESPACE)
    first_token = gke.google.ledger.issued[0][0]
    try:
        assert status_with_token(gke.cluster, first_token) == 200  # the Google account, bound to the Role
        wait_until("the first token expired", lambda: gke.google.expired(first_token))
        # kube-apiserver caches a token it accepted for 10 s (its token authenticators' success cache, no flag), so
        # an expired token is refused once that has lapsed too.
        wait_until("the expired token refused", lambda: status_with_token(gke.cluster, first_token) == 401, 60)
        found = hook.get_jobset(name, NAMESPACE)  # the same hook and client: the token was refreshed
        assert found is not None and found["metadata"]["uid"] == created["metadata"]["uid"]
        wait_until("the JobSet's pods", lambda: hook.list_pods(NAMESPACE, f"{LABEL_JOBSET_NAME}={name}"))
        wait_until("the second token expired", newest_token_expired(gke))
        assert name in [j["metadata"]["name"] for j in hook.list_jobsets(NAMESPACE, "")]
        assert len(gke.google.ledger.issued) >= 3
    finally:
        hook.delete_jobset(name, NAMESPACE)
        hook.require_jobset_gone(name, NAMESPACE, timeout=60)
    assert gke.google.ledger.cluster_lookups == 1, "the endpoint and CA are looked up once per process"


def test_a_token_the_cluster_refuses_is_replaced_and_the_call_retried_once(gke: GkeConnection) -> None:
    hook = JobSetHook(conn_id=gke.conn_id)
    assert hook.get_jobset("absent", NAMESPACE) is None
    issued = len(gke.google.ledger.issued)
    gke.cluster.faults.fail_requests(401, count=1, method="GET")  # as for a revoked token
    try:
        assert hook.get_jobset("absent", NAMESPACE) is None
    finally:
        gke.cluster.faults.clear_api_faults()
    assert len(gke.google.ledger.issued) > issued, "the refused token was dropped and a new one fetched"
    gke.cluster.faults.fail_requests(401, count=2, method="GET")  # refused again with the new one: say so
    try:
        with pytest.raises(ClusterAccessError, match="refused its Google access token"):
            hook.get_jobset("absent", NAMESPACE)
    finally:
        gke.cluster.faults.clear_api_faults()


async def test_the_trigger_watches_through_expiring_tokens(gke: GkeConnection, k8s: K8s) -> None:
    name = "gke-watch"
    created = k8s.custom.create_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, sleeping_jobset(name, 2)
    )
    uid = created["metadata"]["uid"]

    def running_worker(index: int, not_uid: str | None = None) -> Any:
        pods = k8s.core.list_namespaced_pod(
            NAMESPACE, label_selector=f"{LABEL_JOBSET_NAME}={name},{LABEL_JOB_INDEX}={index}"
        ).items
        return next(
            (
                p
                for p in pods
                if "worker" in p.metadata.name
                and p.status.phase == "Running"
                and p.metadata.deletion_timestamp is None
                and p.metadata.uid != not_uid
            ),
            None,
        )

    try:
        first = [await await_until(f"slice {i} running", lambda i=i: running_worker(i)) for i in (0, 1)]
        trigger = JobSetTrigger(
            name=name,
            namespace=NAMESPACE,
            uid=uid,
            target_step=10,
            budgets=BUDGETS,
            state=MonitorState(jobset_uid=uid, started_at=time.time()).to_json(),
            poll_interval=0.5,
            kubernetes_conn_id=gke.conn_id,
        )
        issued_before = len(gke.google.ledger.issued)
        watching = asyncio.create_task(anext(trigger.run()))
        for _ in range(3):  # tokens expire under open watches; each reopening must carry a new one
            await await_until("a token in use expired", newest_token_expired(gke))
            issued = len(gke.google.ledger.issued)
            gke.cluster.faults.expire_watches()
            await await_until(
                "the watches reopened with a new token", lambda issued=issued: len(gke.google.ledger.issued) > issued
            )
        gke.cluster.faults.delete_pod(NAMESPACE, first[0].metadata.name)  # restart 1: within the budget
        await await_until("slice 0 replaced", lambda: running_worker(0, first[0].metadata.uid))
        await await_until("a token in use expired", newest_token_expired(gke))
        assert not watching.done(), "one restart is within the budget, and no expired token failed the watch"
        gke.cluster.faults.delete_pod(NAMESPACE, first[1].metadata.name)  # restart 2: over the budget
        event = (await asyncio.wait_for(watching, timeout=60)).payload
        assert event["status"] == "decision" and event["reason"] == "slice_restart_budget_spent", event
        assert MonitorState.from_json(event["state"]).slice_restarts == 2
        assert len(gke.google.ledger.issued) - issued_before >= 3, "tokens were refreshed during the watch"
    finally:
        k8s.custom.delete_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, name, propagation_policy="Foreground"
        )


def test_the_live_view_reads_the_head_pod_while_tokens_expire(gke: GkeConnection, k8s: K8s) -> None:
    name = "gke-live"
    k8s.custom.create_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, sleeping_jobset(name, 1)
    )
    read = kubernetes_reader(gke.conn_id)
    try:
        first = wait_until("the head pod", lambda: (log := read(NAMESPACE, name)).pod and log)
        assert first.error is None
        wait_until("a token in use expired", newest_token_expired(gke))
        again = read(NAMESPACE, name)  # a new hook, as each view request makes: the process's tokens
        assert again.error is None and again.pod == first.pod
    finally:
        k8s.custom.delete_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, name, propagation_policy="Foreground"
        )


def test_without_google_credentials_every_path_says_what_to_set(
    gke: GkeConnection, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    extra = {"gke_cluster": "projects/p/locations/l/clusters/no-credentials", "gke_api_url": gke.google.url}
    monkeypatch.setenv("AIRFLOW_CONN_GKE_NO_CREDENTIALS", json.dumps({"conn_type": "kubernetes", "extra": extra}))

    def says_what_to_set(message: str) -> None:
        assert "no Google credentials found for the GKE connection" in message, message
        assert "GOOGLE_APPLICATION_CREDENTIALS" in message and "Workload Identity" in message, message

    with pytest.raises(ClusterAccessError) as sync_error:
        JobSetHook(conn_id="gke_no_credentials").get_jobset("any", NAMESPACE)
    says_what_to_set(str(sync_error.value))

    async def watch() -> None:
        hook = AsyncJobSetHook(conn_id="gke_no_credentials")
        try:
            async for _ in hook.watch_jobset("any", NAMESPACE):
                raise AssertionError("a watch without credentials must not start")
        finally:
            await hook.close()

    with pytest.raises(ClusterAccessError) as async_error:
        asyncio.run(asyncio.wait_for(watch(), timeout=60))  # raised, not retried forever
    says_what_to_set(str(async_error.value))

    log = kubernetes_reader("gke_no_credentials")(NAMESPACE, "any")
    assert log.error is not None
    says_what_to_set(log.error)


def test_an_environment_with_no_credentials_at_all_is_named(tmp_path: Path) -> None:
    """No variable, no gcloud configuration, not on GCE: google.auth's DefaultCredentialsError, explained."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "CLOUDSDK_", "GCE_"))}
    env.update({"HOME": str(tmp_path), "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"), "NO_GCE_CHECK": "true"})
    code = "from elastic_training.operators.cluster_access import GoogleTokenSource; GoogleTokenSource().fetch()"
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("elastic_training.operators.cluster_access.ClusterAccessError: no Google credentials")
    assert "GOOGLE_APPLICATION_CREDENTIALS" in last and "gcloud auth application-default login" in last


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ({"gke_cluster": "c"}, "but not its gke_project and gke_location"),
        ({"gke_cluster": "a/b"}, "is neither a cluster name nor projects/P/locations/L/clusters/C"),
        ({"gke_cluster": "c", "gke_project": "p", "gke_location": "l", "gke_endpoint": "vpn"}, "not one of public"),
        ({"gke_cluster": "c", "kube_config_path": "/k"}, "sets gke_cluster and kube_config_path"),
    ],
)
def test_a_gke_extra_that_cannot_work_is_refused(extra: dict[str, str], problem: str) -> None:
    with pytest.raises(ClusterAccessError, match=problem):
        GkeTarget.from_extras(extra, conn_id="tpu")


def test_project_and_location_default_to_the_config_section() -> None:
    target = GkeTarget.from_extras(
        {"gke_cluster": "tpu", "gke_endpoint": "private"},
        conn_id="tpu",
        defaults={"gke_project": "p", "gke_location": "us-east5"},
    )
    assert target == GkeTarget("p", "us-east5", "tpu", EndpointKind.PRIVATE)
    assert target.name == "projects/p/locations/us-east5/clusters/tpu"
    assert GkeTarget.from_extras({"kube_config_path": "/k"}, conn_id="k8s") is None


def test_a_connection_made_with_the_gke_form_reaches_the_cluster(
    gke: GkeConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ``elastic_training_gke`` connection as the UI's form stores it (each field under its own name in the
    extra; the short cluster name with its project and location) reaches the same cluster as the ``kubernetes``
    one with ``gke_cluster`` in its extra; the extra box, still shown, takes the advanced keys (here the API URL
    of the stand-in). One without a cluster says which field to fill."""
    from elastic_training.operators.gke_connection import CONN_TYPE
    from elastic_training.operators.hooks import GkeJobSetHook
    from tests.support.gke import CLUSTER, LOCATION, PROJECT

    form = {"gke_project": PROJECT, "gke_location": LOCATION, "gke_cluster": CLUSTER, "namespace": NAMESPACE}
    extra = {**form, "gke_api_url": gke.google.url}
    monkeypatch.setenv("AIRFLOW_CONN_GKE_FORM", json.dumps({"conn_type": CONN_TYPE, "extra": extra}))
    hook = GkeJobSetHook(conn_id="gke_form")
    assert hook.get_jobset("absent", NAMESPACE) is None
    assert (
        hook.gke is not None and hook.gke.target.name == f"projects/{PROJECT}/locations/{LOCATION}/clusters/{CLUSTER}"
    )
    assert JobSetHook(conn_id="gke_form").list_jobsets(NAMESPACE, "") == hook.list_jobsets(NAMESPACE, "")

    monkeypatch.setenv(
        "AIRFLOW_CONN_GKE_EMPTY", json.dumps({"conn_type": CONN_TYPE, "extra": {"gke_project": PROJECT}})
    )
    with pytest.raises(ClusterAccessError, match="names no cluster: set its Cluster field"):
        JobSetHook(conn_id="gke_empty").get_jobset("absent", NAMESPACE)
