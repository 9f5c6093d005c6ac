"""A broken environment ends in one clear line that says what to set: no Google credentials for
`elastic-training validate gs://...` (exit 2, distinct from "not valid"), and the Kubernetes connection cases
(a server that is not there, a refused token, a cluster without the JobSet API) through `JobSetHook`."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from elastic_training.local.kubeconfig import read_endpoint, render_kubeconfig
from elastic_training.local.upstream_cluster import UpstreamCluster
from tests.support.airflow_dags import operators_kubeconfig, operators_role_without

REPO = Path(__file__).resolve().parents[2]


def _validate_without_credentials(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"  # no ~/.config/gcloud: no Application Default Credentials
    home.mkdir(exist_ok=True)
    clean = {"PATH": os.environ["PATH"], "HOME": str(home), "PYTHONPATH": str(REPO), **env}
    return subprocess.run(
        [sys.executable, "-m", "elastic_training.cli", "validate", "gs://some-bucket/run/checkpoints"],
        capture_output=True,
        text=True,
        timeout=180,
        env=clean,
        cwd=REPO,
    )


@pytest.mark.parametrize(
    ("credentials", "says"),
    [
        (None, "no Google Cloud credentials were found"),
        ("missing.json", "GOOGLE_APPLICATION_CREDENTIALS is set, but its file is missing or not a credentials file"),
        ("garbage.json", "GOOGLE_APPLICATION_CREDENTIALS is set, but its file is missing or not a credentials file"),
    ],
)
def test_validate_without_google_credentials_exits_2_with_one_line(
    tmp_path: Path, credentials: str | None, says: str
) -> None:
    env = {}
    if credentials is not None:
        path = tmp_path / "secret-place" / credentials
        path.parent.mkdir()
        if credentials == "garbage.json":
            path.write_text('{"type": "service_account", "private_key": "FAKE-KEY-CONTENT"}')
        env["GOOGLE_APPLICATION_CREDENTIALS"] = str(path)
    result = _validate_without_credentials(tmp_path, **env)
    assert result.returncode == 2, result.stderr  # not 1: the checkpoint was never looked at
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("elastic-training validate: error: cannot read gs://: ")
    assert says in line
    assert "GOOGLE_APPLICATION_CREDENTIALS" in line and "gcloud auth application-default login" in line
    assert "secret-place" not in line and "FAKE-KEY-CONTENT" not in line  # never the credentials' path or content


# ---- the Kubernetes connection -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(cluster_connection: UpstreamCluster) -> UpstreamCluster:
    """The process's upstream cluster (these tests never run a pod), with the operators' ServiceAccount and its
    kubeconfig through the API fault proxy (:func:`operators_kubeconfig`)."""
    return cluster_connection


@pytest.fixture(scope="module")
def token(cluster: UpstreamCluster) -> str:
    """A bearer token kube-apiserver accepts: the admin's, from its ``--token-auth-file``."""
    token = read_endpoint(cluster.kubeconfig_path).token
    assert token
    return token


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, extra: dict[str, Any]) -> str:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    return conn_id


def _kubeconfig_for(server: str, token: str, ca_pem: bytes | None = None) -> dict[str, Any]:
    return render_kubeconfig(server, token, ca_pem=ca_pem)


def _elastic(conn_id: str) -> Any:
    from elastic_training.operators import ElasticJobSetOperator

    return ElasticJobSetOperator(
        task_id="pretrain",
        run_name="env-test",
        base_output_directory="/tmp/env-test",
        steps=10,
        checkpoint_period=5,
        num_slices=1,
        runtime="local",
        kubernetes_conn_id=conn_id,
        deferrable=False,
    )


class _TaskInstance:
    """The part of a task instance `execute` reads before its first API call."""

    dag_id, task_id, run_id, map_index = "env_dag", "pretrain", "manual__1", -1

    def xcom_push(self, key: str, value: Any) -> None:
        raise AssertionError(f"nothing may reach XCom before the cluster answered: {key}={value!r}")


def _execute_error(operator: Any) -> str:
    from airflow.sdk.exceptions import AirflowException

    with pytest.raises(AirflowException) as raised:
        operator.execute({"ti": _TaskInstance()})
    message = str(raised.value)
    assert "\n" not in message and "Traceback" not in message
    return message


PROVIDER_RETRY_LOGGER = "airflow.providers.cncf.kubernetes.kubernetes_helper_functions"


class _Retries(logging.Handler):
    """The provider's retry warnings (tenacity's ``before_sleep_log``: "Retrying ... in N seconds ...")."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "Retrying" in record.getMessage():
            self.messages.append(record.getMessage())


@pytest.fixture
def retries() -> Iterator[list[str]]:
    """Attached to the provider's logger itself, after importing Airflow (whose first import configures its
    logging, which empties the handlers of existing loggers)."""
    import airflow.settings  # noqa: F401

    handler = _Retries()
    logger = logging.getLogger(PROVIDER_RETRY_LOGGER)
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


def test_a_server_that_is_not_there(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, retries: list[str]) -> None:
    """A refused connection is retried (an API server restarting refuses connections for seconds) before the
    clear error: the provider's 5 attempts, 1 + 2 + 4 + 8 s apart."""
    server = f"http://127.0.0.1:{_closed_port()}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(_kubeconfig_for(server, "FAKE-TOKEN-NOWHERE")))
    conn_id = _connection(monkeypatch, "k8s_nowhere", {"kube_config_path": str(kubeconfig)})
    message = _execute_error(_elastic(conn_id))
    assert message.startswith(f"cannot reach the Kubernetes API server {server} of connection 'k8s_nowhere'")
    assert "check the server in the kubeconfig" in message
    assert "FAKE-TOKEN-NOWHERE" not in message
    assert len(retries) == 4


def test_a_kubeconfig_path_that_is_not_there(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    conn_id = _connection(monkeypatch, "k8s_no_file", {"kube_config_path": str(tmp_path / "secret-dir" / "nope")})
    message = _execute_error(_elastic(conn_id))
    assert message.startswith("connection 'k8s_no_file': cannot load a Kubernetes configuration")
    assert "set kube_config_path, kube_config or in_cluster" in message
    assert "secret-dir" not in message


def test_an_inline_kube_config_that_is_not_yaml_is_not_quoted(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = "users:\n- name: u\n  user: {token: FAKE-TOKEN-IN-BROKEN-YAML\n"  # unclosed flow mapping
    conn_id = _connection(monkeypatch, "k8s_bad_yaml", {"kube_config": broken})
    message = _execute_error(_elastic(conn_id))
    assert "its kubeconfig is not valid YAML" in message
    assert "FAKE-TOKEN" not in message


def test_a_kubeconfig_without_the_clusters_ca(
    cluster: UpstreamCluster, token: str, monkeypatch: pytest.MonkeyPatch, retries: list[str]
) -> None:
    """kube-apiserver serves TLS with the cluster's own CA: a kubeconfig that does not carry it is told so, not
    retried on."""
    conn_id = _connection(monkeypatch, "k8s_no_ca", {"kube_config": _kubeconfig_for(cluster.url, token)})
    message = _execute_error(_elastic(conn_id))
    assert message.startswith(
        f"the Kubernetes API server {cluster.url} of connection 'k8s_no_ca' presented a certificate that is not trusted"
    )
    assert "certificate-authority-data" in message
    assert token not in message
    assert retries == []  # no attempt changes a certificate the client does not trust


def test_a_refused_token(cluster: UpstreamCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """kube-apiserver checks bearer tokens (its ``--token-auth-file``, ServiceAccount tokens): a wrong one gets 401."""
    kubeconfig = _kubeconfig_for(cluster.url, "FAKE-EXPIRED-TOKEN", cluster.ca_pem)
    conn_id = _connection(monkeypatch, "k8s_expired", {"kube_config": kubeconfig})
    message = _execute_error(_elastic(conn_id))
    assert message.startswith(
        f"the Kubernetes API server {cluster.url} refused the credentials of connection 'k8s_expired' (HTTP 401"
    )
    assert "renew it in the kubeconfig" in message and "FAKE-EXPIRED-TOKEN" not in message


@pytest.fixture
def no_jobset_api(cluster: UpstreamCluster) -> Iterator[None]:
    """The API fault proxy answers for the JobSet group as a real API server without the CRD does: 404 on every
    path, discovery included (`/apis/jobset.x-k8s.io/...`), while the core API keeps working."""
    cluster.faults.fail_requests(404, path=r"^/apis/jobset\.x-k8s\.io(/|$)")
    try:
        yield
    finally:
        cluster.faults.clear_api_faults()


def test_a_cluster_without_the_jobset_api(
    cluster: UpstreamCluster, monkeypatch: pytest.MonkeyPatch, no_jobset_api: None
) -> None:
    from elastic_training.operators import JobSetOperator

    # The operators' kubeconfig: through the fault proxy, which is the server its messages name.
    conn_id = _connection(monkeypatch, "k8s_no_crd", {"kube_config_path": str(operators_kubeconfig(cluster))})
    for operator in (
        _elastic(conn_id),
        JobSetOperator(
            task_id="job",
            name="job",
            image="local",
            command=["true"],
            runtime="local",
            kubernetes_conn_id=conn_id,
            deferrable=False,
        ),
    ):
        message = _execute_error(operator)
        assert message == (
            "the JobSet CRD (jobset.x-k8s.io/v1alpha2) is not installed on the cluster "
            f"{cluster.faults_url} of connection 'k8s_no_crd'; install kubernetes-sigs/jobset "
            "(https://jobset.sigs.k8s.io/docs/installation/)"
        )


def test_a_missing_namespace_is_not_a_missing_crd(cluster: UpstreamCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    from elastic_training.operators.hooks import ClusterAccessError, JobSetHook
    from elastic_training.operators.manifests import JobSpec, plain_jobset

    hook = JobSetHook(conn_id=_connection(monkeypatch, "k8s_ok", {"kube_config_path": str(cluster.kubeconfig_path)}))
    body = plain_jobset(
        JobSpec(image="local", command=["true"], runtime="local"),
        name="x-abcdef",
        namespace="no-such-namespace",
        labels={},
        stage="job",
    )
    with pytest.raises(ClusterAccessError, match="namespace 'no-such-namespace' does not exist on the cluster"):
        hook.create_jobset(body, "no-such-namespace")


def test_a_verb_the_role_does_not_grant(cluster: UpstreamCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """The operators' ServiceAccount under a Role without ``list`` on jobsets: kube-apiserver's RBAC answers 403."""
    from elastic_training.operators.hooks import ClusterAccessError, JobSetHook

    kubeconfig = str(operators_kubeconfig(cluster))
    hook = JobSetHook(conn_id=_connection(monkeypatch, "k8s_rbac", {"kube_config_path": kubeconfig}))
    with operators_role_without(cluster.api, "jobsets", "list"), pytest.raises(ClusterAccessError) as raised:
        _until_refused(lambda: hook.list_jobsets("default", "a=b"))
    assert str(raised.value).startswith("connection 'k8s_rbac' may not list jobsets in namespace 'default'")
    assert "deploy/rbac.yaml" in str(raised.value)


def _until_refused(call: Callable[[], object], seconds: float = 30.0) -> None:
    """Call until it raises: kube-apiserver's RBAC authorizer sees a Role's change through its informer, a moment
    after the write."""
    deadline = time.monotonic() + seconds
    while True:
        call()
        if time.monotonic() > deadline:
            raise AssertionError(f"still allowed {seconds:.0f} s after the Role changed")
        time.sleep(0.1)


async def _first_trigger_event(conn_id: str) -> Any:
    """The first event of a JobSet trigger watching through `conn_id` (long budgets: only access can end it)."""
    from elastic_training.operators.triggers import JobSetTrigger

    trigger = JobSetTrigger(
        name="run-abcdef",
        namespace="default",
        uid="u-1",
        target_step=10,
        budgets={
            "max_slice_restarts": 1,
            "slice_restart_window_seconds": 3600.0,
            "stall_timeout_seconds": 3600.0,
            "max_full_restarts": 1,
        },
        kubernetes_conn_id=conn_id,
        poll_interval=1.0,
    )
    return await asyncio.wait_for(trigger.run().asend(None), timeout=240)


async def test_a_trigger_whose_token_is_refused_ends_with_the_reason(
    cluster: UpstreamCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token that expires while the task is deferred: the watches give up after a few refusals (not forever,
    and not as a stall escalation 30 minutes later) and the event names the status and what to renew."""
    conn_id = _connection(
        monkeypatch, "k8s_expired_async", {"kube_config": _kubeconfig_for(cluster.url, "EXPIRED", cluster.ca_pem)}
    )
    event = await _first_trigger_event(conn_id)
    assert event.payload["status"] == "error"
    message = event.payload["message"]
    assert message.startswith("ClusterAccessError: watching through connection 'k8s_expired_async'")
    assert "HTTP 401 Unauthorized" in message and "renew the token" in message and "EXPIRED" not in message


async def test_a_trigger_whose_server_certificate_is_not_trusted_ends_with_the_reason(
    cluster: UpstreamCluster, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cluster's CA lost from the connection while the task is deferred (a rotation, an edited connection):
    the watch ends at once naming the certificate, instead of retrying a verification no attempt can pass."""
    conn_id = _connection(monkeypatch, "k8s_no_ca_async", {"kube_config": _kubeconfig_for(cluster.url, token)})
    event = await _first_trigger_event(conn_id)
    assert event.payload["status"] == "error"
    message = event.payload["message"]
    assert message.startswith("ClusterAccessError: watching through connection 'k8s_no_ca_async'")
    assert "certificate that is not trusted" in message and "certificate-authority-data" in message
    assert token not in message
