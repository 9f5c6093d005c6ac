"""The kubeconfig that points the official clients (and Airflow's connection) at the local cluster."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CONTEXT_NAME = "elastic-training-local"


def render_kubeconfig(url: str, token: str, namespace: str = "default") -> dict[str, Any]:
    """A kubeconfig document with one cluster, user and context, the context current."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT_NAME, "cluster": {"server": url}}],
        "users": [{"name": CONTEXT_NAME, "user": {"token": token}}],
        "contexts": [
            {"name": CONTEXT_NAME, "context": {"cluster": CONTEXT_NAME, "user": CONTEXT_NAME, "namespace": namespace}}
        ],
        "current-context": CONTEXT_NAME,
        "preferences": {},
    }


def write_kubeconfig(path: Path, url: str, token: str, namespace: str = "default") -> Path:
    """Write the kubeconfig (owner-only permissions: it holds the token) atomically; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        yaml.safe_dump(render_kubeconfig(url, token, namespace), handle, sort_keys=False)
    partial.replace(path)
    return path


@dataclass(frozen=True)
class Endpoint:
    """Where a kubeconfig's current context points: the server URL and the bearer token."""

    url: str
    token: str | None


def read_endpoint(path: Path) -> Endpoint:
    """The server and token of the current context of a kubeconfig; ``ValueError`` when it has none."""
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    current = document.get("current-context")
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
    return Endpoint(str(server).rstrip("/"), token)
