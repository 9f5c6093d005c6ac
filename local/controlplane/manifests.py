"""JobSet's and Kueue's released manifests, put on loopback as envtest does.

The manifests are their releases' own (``kubectl kustomize config/default`` of each module, kept with the build).
Of them this installs what a controller needs from the API: the Namespace, the CRDs, the ServiceAccount and RBAC,
and the webhook configurations. It leaves out what runs the controller in a cluster (the Deployment, Services,
the metrics and visibility APIServices, the manager ConfigMap: the processes here are started with their own
configuration) and the empty webhook Secret (Kueue's is made by :mod:`pki`).

No Service can route here (no kube-proxy; Endpoints refuse loopback addresses), so every webhook's and every
conversion webhook's ``clientConfig.service`` becomes a ``url`` on 127.0.0.1 at the manager's port, with the
``caBundle`` of the CA that signed the certificate it serves: what envtest does for both projects' own tests.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from elastic_training.local.controlplane.pki import b64

KEPT_KINDS = (
    "Namespace",
    "CustomResourceDefinition",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
)
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def load(path: Path) -> list[dict[str, Any]]:
    """The documents of a multi-document YAML file (empty ones left out)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, 5x faster, where PyYAML was built with it
    return [doc for doc in yaml.load_all(path.read_text(), Loader=loader) if doc]


def on_loopback(documents: Iterable[dict[str, Any]], port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """The kept documents, their webhook and conversion endpoints rewritten to ``https://127.0.0.1:<port>``."""
    kept = []
    for document in documents:
        kind = document.get("kind")
        if kind not in KEPT_KINDS:
            continue
        if kind in WEBHOOK_KINDS:
            for webhook in document.get("webhooks") or []:
                webhook["clientConfig"] = _url_config(webhook.get("clientConfig") or {}, port, ca_pem)
        elif kind == "CustomResourceDefinition":
            _conversion_on_loopback(document, port, ca_pem)
        kept.append(document)
    return kept


def _url_config(client_config: dict[str, Any], port: int, ca_pem: bytes) -> dict[str, Any]:
    path = (client_config.get("service") or {}).get("path") or ""
    return {"url": f"https://127.0.0.1:{port}{path}", "caBundle": b64(ca_pem)}


def _conversion_on_loopback(crd: dict[str, Any], port: int, ca_pem: bytes) -> None:
    webhook = ((crd.get("spec") or {}).get("conversion") or {}).get("webhook")
    if webhook:
        webhook["clientConfig"] = _url_config(webhook.get("clientConfig") or {}, port, ca_pem)


def crds(documents: Iterable[dict[str, Any]]) -> list[str]:
    """The names of the CRDs among ``documents``."""
    return [d["metadata"]["name"] for d in documents if d.get("kind") == "CustomResourceDefinition"]
