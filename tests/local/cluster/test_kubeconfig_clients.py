"""The kubeconfig works for every client the project uses: kubernetes, kubernetes_asyncio, Airflow's hooks."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_asyncio
import pytest
from kubernetes import client, config

from elastic_training.local.upstream_cluster import UpstreamCluster
from tests.support.cluster_objects import jobset_body, pod
from tests.support.local_cluster import K8s

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"


@pytest.fixture(scope="module", autouse=True)
def _objects(k8s: K8s) -> None:
    k8s.core.create_namespaced_pod("default", pod("client-pod", labels={"app": "clients"}))
    k8s.custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, jobset_body("client-js"))


@pytest.fixture
def airflow_connection(cluster: UpstreamCluster, monkeypatch: pytest.MonkeyPatch) -> str:
    # The hooks load the kubeconfig into the clients' process-wide default Configuration, with a refresh
    # hook that sends every later request of a default-based client to this module's cluster, stopped
    # by then. Put the defaults back afterwards.
    monkeypatch.setattr(client.Configuration, "_default", client.Configuration._default)
    monkeypatch.setattr(
        kubernetes_asyncio.client.Configuration, "_default", kubernetes_asyncio.client.Configuration._default
    )
    extra = {"kube_config_path": str(cluster.kubeconfig_path), "namespace": "default"}
    # The connection the hooks use when given none, as the operators do.
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    return "kubernetes_default"


def test_kubernetes_load_kube_config(cluster: UpstreamCluster) -> None:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(cluster.kubeconfig_path), client_configuration=configuration)
    assert configuration.host == cluster.url
    with client.ApiClient(configuration) as api_client:
        pods = client.CoreV1Api(api_client).list_namespaced_pod("default", label_selector="app=clients")
        assert [p.metadata.name for p in pods.items] == ["client-pod"]
    _, active = config.list_kube_config_contexts(config_file=str(cluster.kubeconfig_path))
    assert active["context"]["namespace"] == "default"


async def test_kubernetes_asyncio_load_kube_config_list_and_watch(cluster: UpstreamCluster) -> None:
    configuration = kubernetes_asyncio.client.Configuration()
    await kubernetes_asyncio.config.load_kube_config(
        config_file=str(cluster.kubeconfig_path), client_configuration=configuration
    )
    async with kubernetes_asyncio.client.ApiClient(configuration) as api_client:
        core = kubernetes_asyncio.client.CoreV1Api(api_client)
        pods = await core.list_namespaced_pod("default")
        assert "client-pod" in [p.metadata.name for p in pods.items]
        custom = kubernetes_asyncio.client.CustomObjectsApi(api_client)
        jobset = await custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "client-js")
        assert jobset["metadata"]["name"] == "client-js"
        seen = []
        stream = kubernetes_asyncio.watch.Watch()
        async for event in stream.stream(core.list_namespaced_pod, "default", timeout_seconds=60):
            seen.append((event["type"], event["object"].metadata.name))
            stream.stop()
        assert seen == [("ADDED", "client-pod")]


def test_airflow_kubernetes_hook(airflow_connection: str) -> None:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    hook = KubernetesHook()
    assert hook.conn_id == airflow_connection
    assert hook.get_namespace() == "default"
    # (kube-apiserver's PodTopologyLabels admission adds the node's zone and region labels at binding)
    assert hook.core_v1_client.read_namespaced_pod("client-pod", "default").metadata.labels["app"] == "clients"
    jobset: dict[str, Any] = hook.get_custom_object(GROUP, VERSION, PLURAL, "client-js", namespace="default")
    assert jobset["kind"] == "JobSet"


async def test_airflow_async_kubernetes_hook(airflow_connection: str) -> None:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

    hook = AsyncKubernetesHook()
    assert hook.conn_id == airflow_connection
    found = await hook.get_pod("client-pod", "default")
    assert found.metadata.name == "client-pod"
    async with hook.get_conn() as api_client:
        custom = kubernetes_asyncio.client.CustomObjectsApi(api_client)
        listed = await custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
        assert [js["metadata"]["name"] for js in listed["items"]] == ["client-js"]
