"""The files the upstream components start with: identities, kubeconfigs, the audit policy, manager configs.

Every client authenticates with a bearer token from kube-apiserver's ``--token-auth-file``: the user's (group
``system:masters``, as a GKE cluster admin), kube-controller-manager's and kube-scheduler's (their built-in
identities, which the default RBAC binds), the JobSet and Kueue managers' (their service accounts, which their
released RBAC binds) and the node agent's. The user's kubeconfig keeps the shape the project always wrote: one
cluster with its CA, one user with a token, the context ``elastic-training-local`` with namespace ``default``.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from elastic_training.local.kubeconfig import write_kubeconfig


@dataclass(frozen=True)
class Identity:
    """One client of kube-apiserver: its user name, groups and token."""

    user: str
    groups: tuple[str, ...]
    token: str


def identities() -> dict[str, Identity]:
    """Each component's identity, with a new random token."""

    def make(user: str, *groups: str) -> Identity:
        return Identity(user, groups, secrets.token_urlsafe(32))

    return {
        "admin": make("elastic-training-admin", "system:masters", "system:authenticated"),
        "kube-controller-manager": make("system:kube-controller-manager", "system:authenticated"),
        "kube-scheduler": make("system:kube-scheduler", "system:authenticated"),
        "jobset": make(
            "system:serviceaccount:jobset-system:jobset-controller-manager",
            "system:serviceaccounts",
            "system:serviceaccounts:jobset-system",
            "system:authenticated",
        ),
        "kueue": make(
            "system:serviceaccount:kueue-system:kueue-controller-manager",
            "system:serviceaccounts",
            "system:serviceaccounts:kueue-system",
            "system:authenticated",
        ),
        # One agent plays every node's kubelet; one identity per node would be the Node authorizer's way.
        "node-agent": make("elastic-training-node-agent", "system:masters", "system:authenticated"),
    }


def write_token_file(path: Path, clients: dict[str, Identity]) -> Path:
    """kube-apiserver's ``--token-auth-file``: ``token,user,uid,"group1,group2"`` lines (mode 0600)."""
    lines = [f'{c.token},{c.user},{c.user},"{",".join(c.groups)}"' for c in clients.values()]
    path.touch(mode=0o600)
    path.write_text("\n".join(lines) + "\n")
    return path


def write_kubeconfigs(directory: Path, url: str, ca_pem: bytes, clients: dict[str, Identity]) -> dict[str, Path]:
    """One kubeconfig per client, ``<directory>/<name>.kubeconfig`` (0600)."""
    directory.mkdir(parents=True, exist_ok=True)
    return {
        name: write_kubeconfig(directory / f"{name}.kubeconfig", url, c.token, ca_pem=ca_pem)
        for name, c in clients.items()
    }


# Metadata for every request, as GKE's default policy records most of them, at the RequestReceived stage only: a
# watch is one event when it opens, however long it stays open (tests count what a client asked); events and leases
# (the controllers' and the node agent's noise) are left out.
AUDIT_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["ResponseStarted", "ResponseComplete"],
    "rules": [
        {
            "level": "None",
            "resources": [
                {"group": "", "resources": ["events"]},
                {"group": "coordination.k8s.io", "resources": ["leases"]},
            ],
        },
        {"level": "Metadata"},
    ],
}


def write_yaml(path: Path, document: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def jobset_configuration(webhook_port: int, cert_dir: Path) -> dict[str, Any]:
    """JobSet's manager Configuration: its webhook on loopback with certificates from the cluster CA.

    ``internalCertManagement`` is off: its rotator writes to a fixed folder under /tmp (clusters side by side
    would share it) and would issue for the Service name alone. Metrics and probes are off (port "0").
    """
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": "0"},
        "clientConnection": {"qps": 500, "burst": 500},
    }


KUEUE_FRAMEWORKS = ("batch/job", "jobset.x-k8s.io/jobset")  # what the cluster runs: Jobs and JobSets


def kueue_configuration(base: Mapping[str, Any], webhook_port: int, cert_dir: Path) -> dict[str, Any]:
    """Kueue's manager Configuration: ``base`` (the description's or a fault's, e.g. ``waitForPodsReady``, as written:
    Kueue checks and defaults it when it starts) with the integrations the cluster needs and where it runs.

    Its own certificate management stays on (Kueue's default); it finds the Secret made for it (``pki``).
    """
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        **base,
        "integrations": _with_frameworks(base.get("integrations")),
        "namespace": "kueue-system",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {
            "enable": True,
            "webhookServiceName": "kueue-webhook-service",
            "webhookSecretName": "kueue-webhook-server-cert",
        },
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": "0"},
        "clientConnection": {"qps": 50, "burst": 100},
    }


def _with_frameworks(integrations: Any) -> Any:
    """``integrations`` with :data:`KUEUE_FRAMEWORKS` in its ``frameworks`` (another shape: for Kueue to refuse)."""
    integrations = {} if integrations is None else integrations
    frameworks = (integrations.get("frameworks") or []) if isinstance(integrations, Mapping) else None
    if not isinstance(frameworks, list):
        return integrations
    return {**integrations, "frameworks": [*frameworks, *(f for f in KUEUE_FRAMEWORKS if f not in frameworks)]}
