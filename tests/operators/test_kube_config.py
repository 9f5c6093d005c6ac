"""`AsyncJobSetHook`'s own configuration loading (operators/kube_config.py), on the connection's public extras:
one shared client for static credentials, a fresh one per call for an exec plugin's short-lived tokens, the
provider's refusal for a connection that sets two sources. Over HTTPS against the local cluster's kube-apiserver."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from elastic_training.local.kubeconfig import render_kubeconfig
from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.hooks import AsyncJobSetHook
from elastic_training.operators.kube_config import uses_exec_auth

TOKEN_USER = {"name": "u", "user": {"token": "t"}}
EXEC_USER = {"name": "e", "user": {"exec": {"command": "gke-gcloud-auth-plugin"}}}


def _config(*users: dict[str, Any], current: str = "c1") -> dict[str, Any]:
    return {
        "users": list(users),
        "contexts": [{"name": "c1", "context": {"user": "u"}}, {"name": "c2", "context": {"user": "e"}}],
        "current-context": current,
    }


@pytest.mark.parametrize(
    ("kubeconfig", "context", "expected"),
    [
        (_config(TOKEN_USER, EXEC_USER), None, False),
        (_config(TOKEN_USER, EXEC_USER, current="c2"), None, True),
        (_config(TOKEN_USER, EXEC_USER), "c2", True),
        (_config(TOKEN_USER), "nope", False),
        ("not a kubeconfig", None, True),
    ],
)
def test_uses_exec_auth(kubeconfig: object, context: str | None, expected: bool) -> None:
    assert uses_exec_auth(kubeconfig, context) is expected


def _connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, extra: dict[str, Any]) -> AsyncJobSetHook:
    value = json.dumps({"conn_type": "kubernetes", "extra": extra})
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", value)
    return AsyncJobSetHook(conn_id=conn_id)


def _exec_kubeconfig(cluster: UpstreamCluster, tmp_path: Path) -> Path:
    """The cluster's kubeconfig with its token handed out by an exec plugin (client.authentication.k8s.io/v1),
    as gke-gcloud-auth-plugin does; the plugin counts its runs in ``runs``."""
    plugin = tmp_path / "auth-plugin"
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential"}
    credential["status"] = {"token": cluster.control_plane.identities["admin"].token}  # type: ignore[assignment]
    plugin.write_text(
        f"#!{sys.executable}\nimport json, pathlib\n"
        f"runs = pathlib.Path({str(tmp_path / 'runs')!r})\n"
        "runs.write_text(str(int(runs.read_text() or 0) + 1) if runs.exists() else '1')\n"
        f"print(json.dumps({credential!r}))\n"
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    kubeconfig = render_kubeconfig(cluster.url, "unused", ca_pem=cluster.ca_pem)
    kubeconfig["users"][0]["user"] = {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin), "interactiveMode": "Never"}
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    return path


async def test_static_credentials_share_one_client(cluster: UpstreamCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _connection(monkeypatch, "k8s_static", {"kube_config_path": str(cluster.kubeconfig_path)})
    try:
        async with hook.api() as first, hook.api() as second:
            assert first is second
            assert await hook.get_jobset("nothing-here", "default") is None
    finally:
        await hook.close()


async def test_an_exec_plugin_gets_a_fresh_client_per_call(
    cluster: UpstreamCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = _exec_kubeconfig(cluster, tmp_path)
    hook = _connection(monkeypatch, "k8s_exec", {"kube_config_path": str(path)})
    async with hook.api() as first:
        pass
    async with hook.api() as second:
        pass
    assert first is not second
    assert await hook.get_jobset("nothing-here", "default") is None  # authenticated by the plugin's token
    assert int((tmp_path / "runs").read_text()) >= 1


async def test_two_sources_are_the_providers_refusal(cluster: UpstreamCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    extra = {"kube_config_path": str(cluster.kubeconfig_path), "in_cluster": True}
    hook = _connection(monkeypatch, "k8s_both", extra)
    with pytest.raises(Exception, match="mutually exclusive"):
        async with hook.api():
            pass
