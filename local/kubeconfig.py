"""The kubeconfig that points the official clients (and Airflow's connection) at the local cluster.

Laid out as ``kubectl config view --raw`` shows one: the cluster entry carries the server URL and the
CA as ``certificate-authority-data`` (base64 PEM), the user entry the bearer token.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CONTEXT_NAME = "elastic-training-local"
# The upstream cluster's second context: the same API through its fault proxy, where `cluster fault` sends faults.
FAULTS_CONTEXT = "elastic-training-local-faults"


def render_kubeconfig(
    url: str, token: str, namespace: str = "default", ca_pem: bytes | None = None, faults_url: str | None = None
) -> dict[str, Any]:
    """A kubeconfig document with one cluster, user and context, the context current; with ``faults_url`` also the
    context :data:`FAULTS_CONTEXT` (same user) whose server is the fault proxy."""
    servers = {CONTEXT_NAME: url, **({FAULTS_CONTEXT: faults_url} if faults_url else {})}
    clusters = []
    for name, server in servers.items():
        cluster: dict[str, Any] = {"server": server}
        if ca_pem is not None:
            cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode("ascii")
        clusters.append({"name": name, "cluster": cluster})
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": clusters,
        "users": [{"name": CONTEXT_NAME, "user": {"token": token}}],
        "contexts": [
            {"name": name, "context": {"cluster": name, "user": CONTEXT_NAME, "namespace": namespace}}
            for name in servers
        ],
        "current-context": CONTEXT_NAME,
        "preferences": {},
    }


def write_kubeconfig(
    path: Path,
    url: str,
    token: str,
    namespace: str = "default",
    ca_pem: bytes | None = None,
    faults_url: str | None = None,
) -> Path:
    """Write the kubeconfig (owner-only permissions: it holds the token) atomically; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        yaml.safe_dump(render_kubeconfig(url, token, namespace, ca_pem, faults_url), handle, sort_keys=False)
    partial.replace(path)
    return path


@dataclass(frozen=True)
class Endpoint:
    """Where a kubeconfig's current context points: the server URL, the bearer token, the CA to trust."""

    url: str
    token: str | None
    ca_pem: bytes | None = None

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client context trusting only the kubeconfig's CA; None for ``http://`` or no CA given."""
        if not self.url.startswith("https://"):
            return None
        if self.ca_pem is None:
            return ssl.create_default_context()
        context = ssl.create_default_context(cadata=self.ca_pem.decode("ascii"))
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context


def read_endpoint(path: Path, *, faults: bool = False) -> Endpoint:
    """The server and token of the current context of a kubeconfig; ``ValueError`` when it has none.

    ``faults``: the context :data:`FAULTS_CONTEXT` when the kubeconfig has it (an upstream cluster's fault
    endpoint), else the current one (the imitation serves its faults on its API).
    """
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    current = document.get("current-context")
    if faults and any(c.get("name") == FAULTS_CONTEXT for c in document.get("contexts") or []):
        current = FAULTS_CONTEXT
    contexts = {c.get("name"): c.get("context") or {} for c in document.get("contexts") or []}
    context = contexts.get(current)
    if context is None:
        raise ValueError(f"{path}: no current context")
    clusters = {c.get("name"): c.get("cluster") or {} for c in document.get("clusters") or []}
    users = {u.get("name"): u.get("user") or {} for u in document.get("users") or []}
    server = clusters.get(context.get("cluster"), {}).get("server")
    if not server:
        raise ValueError(f"{path}: the current context names no cluster server")
    token = users.get(context.get("user"), {}).get("token")
    cluster = clusters.get(context.get("cluster"), {})
    ca_pem: bytes | None = None
    if cluster.get("certificate-authority-data"):
        try:
            ca_pem = base64.b64decode(cluster["certificate-authority-data"], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"{path}: certificate-authority-data is not base64: {exc}") from exc
    elif cluster.get("certificate-authority"):
        ca_file = Path(cluster["certificate-authority"])
        ca_pem = (ca_file if ca_file.is_absolute() else path.parent / ca_file).read_bytes()
    return Endpoint(str(server).rstrip("/"), token, ca_pem)
