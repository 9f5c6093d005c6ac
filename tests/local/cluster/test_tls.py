"""kube-apiserver is HTTPS with the cluster CA made at start (local/controlplane/pki.py): every client the project
uses verifies it, and one trusting another CA fails."""

from __future__ import annotations

import datetime
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import kubernetes_asyncio
import pytest
import urllib3
from cryptography import x509
from kubernetes import client, config

from elastic_training.local.controlplane.pki import Authority
from elastic_training.local.kubeconfig import read_endpoint, write_kubeconfig
from elastic_training.local.upstream_cluster import UpstreamCluster

NAMESPACE_PATH = "/api/v1/namespaces/default"


@pytest.fixture(scope="module")
def foreign_kubeconfig(cluster: UpstreamCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cluster's URL, fault proxy and token, but the CA of another cluster: verification must fail."""
    other = Authority("another-cluster-ca", datetime.timedelta(days=1))
    return write_kubeconfig(
        tmp_path_factory.mktemp("foreign") / "kubeconfig",
        cluster.url,
        _token(cluster),
        ca_pem=other.cert_pem,
        faults_url=cluster.faults_url,
    )


def _token(cluster: UpstreamCluster) -> str:
    token = read_endpoint(cluster.kubeconfig_path).token
    assert token
    return token


@pytest.fixture
def airflow_connection(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # The hooks load the kubeconfig into the clients' process-wide default Configuration; put it back.
    monkeypatch.setattr(client.Configuration, "_default", client.Configuration._default)
    monkeypatch.setattr(
        kubernetes_asyncio.client.Configuration, "_default", kubernetes_asyncio.client.Configuration._default
    )
    yield


def _use_connection(monkeypatch: pytest.MonkeyPatch, kubeconfig: Path) -> None:
    extra = {"kube_config_path": str(kubeconfig), "namespace": "default"}
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps({"conn_type": "kubernetes", "extra": extra}))


def test_the_serving_certificate_names_loopback_and_the_kubeconfig_carries_the_ca(cluster: UpstreamCluster) -> None:
    assert cluster.url.startswith("https://127.0.0.1:")
    endpoint = read_endpoint(cluster.kubeconfig_path)
    assert (endpoint.url, endpoint.ca_pem) == (cluster.url, cluster.ca_pem)
    assert endpoint.token
    served = ssl.get_server_certificate(("127.0.0.1", cluster.port), ca_certs=str(cluster.ca_path))
    certificate = x509.load_pem_x509_certificate(served.encode())
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "127.0.0.1" in [str(ip) for ip in names.get_values_for_type(x509.IPAddress)]
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    assert cluster.control_plane.pki is not None
    _, key = cluster.control_plane.pki.apiserver
    assert key.stat().st_mode & 0o777 == 0o600


def test_raw_https_verifies_with_the_ca_and_by_host_name(cluster: UpstreamCluster) -> None:
    headers = {"Authorization": f"Bearer {_token(cluster)}"}
    trusting = ssl.create_default_context(cafile=str(cluster.ca_path))
    for host in ("127.0.0.1", "localhost"):
        request = urllib.request.Request(f"https://{host}:{cluster.port}{NAMESPACE_PATH}", headers=headers)
        with urllib.request.urlopen(request, timeout=10, context=trusting) as response:
            assert json.loads(response.read())["metadata"]["name"] == "default"
    with pytest.raises(urllib.error.URLError) as failed:
        urllib.request.urlopen(
            urllib.request.Request(cluster.url + NAMESPACE_PATH, headers=headers),
            timeout=10,
            context=ssl.create_default_context(),  # the system's CAs know nothing of this one
        )
    assert isinstance(failed.value.reason, ssl.SSLCertVerificationError)


def test_plain_http_is_not_served(cluster: UpstreamCluster) -> None:
    request = urllib.request.Request(f"http://127.0.0.1:{cluster.port}/version")
    with pytest.raises(urllib.error.HTTPError) as refused:  # Go's TLS server answers plain HTTP with a 400
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    assert b"Client sent an HTTP request to an HTTPS server" in refused.value.read()


def test_sync_client_verifies_and_fails_with_another_ca(cluster: UpstreamCluster, foreign_kubeconfig: Path) -> None:
    api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    with api_client:
        assert api_client.configuration.verify_ssl is True
        assert client.CoreV1Api(api_client).read_namespace("default").metadata.name == "default"
    foreign = config.new_client_from_config(config_file=str(foreign_kubeconfig))
    foreign.configuration.retries = False
    with foreign, pytest.raises(urllib3.exceptions.MaxRetryError) as failed:
        client.CoreV1Api(foreign).read_namespace("default")
    assert isinstance(failed.value.reason, urllib3.exceptions.SSLError)
    assert "CERTIFICATE_VERIFY_FAILED" in str(failed.value.reason)


async def test_async_client_verifies_and_fails_with_another_ca(
    cluster: UpstreamCluster, foreign_kubeconfig: Path
) -> None:
    for kubeconfig, trusted in ((cluster.kubeconfig_path, True), (foreign_kubeconfig, False)):
        configuration = kubernetes_asyncio.client.Configuration()
        await kubernetes_asyncio.config.load_kube_config(
            config_file=str(kubeconfig), client_configuration=configuration
        )
        assert configuration.verify_ssl is True
        async with kubernetes_asyncio.client.ApiClient(configuration) as api_client:
            core = kubernetes_asyncio.client.CoreV1Api(api_client)
            if trusted:
                assert (await core.read_namespace("default")).metadata.name == "default"
            else:
                with pytest.raises(aiohttp.ClientConnectorCertificateError):
                    await core.read_namespace("default")


def test_kubernetes_hook_verifies_and_fails_with_another_ca(
    cluster: UpstreamCluster, foreign_kubeconfig: Path, airflow_connection: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    _use_connection(monkeypatch, cluster.kubeconfig_path)
    assert KubernetesHook().core_v1_client.read_namespace("default").metadata.name == "default"
    _use_connection(monkeypatch, foreign_kubeconfig)
    api_client = KubernetesHook().get_conn()
    api_client.configuration.retries = False
    with pytest.raises(urllib3.exceptions.MaxRetryError) as failed:
        client.CoreV1Api(api_client).read_namespace("default", _request_timeout=10)
    assert "CERTIFICATE_VERIFY_FAILED" in str(failed.value.reason)


async def test_async_kubernetes_hook_verifies_and_fails_with_another_ca(
    cluster: UpstreamCluster, foreign_kubeconfig: Path, airflow_connection: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

    _use_connection(monkeypatch, cluster.kubeconfig_path)
    async with AsyncKubernetesHook().get_conn() as api_client:
        namespace = await kubernetes_asyncio.client.CoreV1Api(api_client).read_namespace("default")
        assert namespace.metadata.name == "default"
    _use_connection(monkeypatch, foreign_kubeconfig)
    async with AsyncKubernetesHook().get_conn() as api_client:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await kubernetes_asyncio.client.CoreV1Api(api_client).read_namespace("default")


def test_cluster_fault_cli_verifies_the_ca(
    cluster: UpstreamCluster, foreign_kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from elastic_training.cli.main import main

    assert main(["cluster", "fault", "--kubeconfig", str(cluster.kubeconfig_path), "show"]) == 0
    capsys.readouterr()
    assert main(["cluster", "fault", "--kubeconfig", str(foreign_kubeconfig), "show"]) == 2
    assert "CERTIFICATE_VERIFY_FAILED" in capsys.readouterr().err
