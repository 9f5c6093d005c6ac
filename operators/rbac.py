"""Kubernetes RBAC for the operators: a ServiceAccount, a namespaced Role and its RoleBinding.

Least privilege for exactly the calls the hooks make (Kubernetes RBAC, rbac.authorization.k8s.io/v1):
JobSets are created, read, listed, watched and deleted (foreground deletion needs no extra verb: the API
server adds the `foregroundDeletion` finalizer itself); worker Jobs are listed and watched (their failed
counters); worker and head pods are listed and watched, and deleted by a full restart whose old trainer is past
saving (hung, starting, waiting for slices) to shorten their grace period; head-pod logs are read through the `pods/log`
subresource; Kueue's Workloads (kueue.x-k8s.io/v1beta2) are listed and watched, read-only, for the admission of a
JobSet with a queue label. Nothing patches or updates anything, and no secret is readable. The end-to-end tests run
as this account on the local cluster, which enforces RBAC (docs/rbac.md).

`deploy/rbac.yaml` is `render_yaml(rbac_manifests("default"))`; regenerate it with
`python -m elastic_training.operators.rbac default > deploy/rbac.yaml`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, Final

import yaml

from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_PLURAL, KUEUE_GROUP, WORKLOAD_PLURAL
from elastic_training.operators.kueue_config import CONFIG_MAP_NAME as KUEUE_CONFIG_MAP
from elastic_training.operators.kueue_config import CONFIG_MAP_NAMESPACE as KUEUE_CONFIG_NAMESPACE

DEFAULT_SERVICE_ACCOUNT: Final = "elastic-training"
ROLE_NAME: Final = "elastic-training"
RBAC_API_VERSION: Final = "rbac.authorization.k8s.io/v1"
_LABELS: Final = {"app.kubernetes.io/name": "elastic-training", "app.kubernetes.io/component": "airflow-operators"}

# (apiGroups, resources, verbs): every rule the operators need, and no more.
RULES: Final[tuple[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]], ...]] = (
    ((JOBSET_GROUP,), (JOBSET_PLURAL,), ("create", "get", "list", "watch", "delete")),
    (("batch",), ("jobs",), ("list", "watch")),  # the worker Jobs' failed counters (slice restarts)
    # delete: a full restart stops the old pods of a trainer past saving with a short grace period.
    (("",), ("pods",), ("list", "watch", "delete")),
    (("",), ("pods/log",), ("get",)),
    # Kueue's Workloads, read-only: the queue's reason for a JobSet it holds (queued, preempted, in no queue).
    ((KUEUE_GROUP,), (WORKLOAD_PLURAL,), ("list", "watch")),
)


def rbac_manifests(namespace: str, service_account: str = DEFAULT_SERVICE_ACCOUNT) -> list[dict[str, Any]]:
    """ServiceAccount, Role and RoleBinding granting `service_account` the operators' verbs in `namespace`."""
    metadata = {"name": ROLE_NAME, "namespace": namespace, "labels": dict(_LABELS)}
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {**metadata, "name": service_account, "labels": dict(_LABELS)},
        },
        {
            "apiVersion": RBAC_API_VERSION,
            "kind": "Role",
            "metadata": {**metadata, "labels": dict(_LABELS)},
            "rules": [
                {"apiGroups": list(groups), "resources": list(resources), "verbs": list(verbs)}
                for groups, resources, verbs in RULES
            ],
        },
        {
            "apiVersion": RBAC_API_VERSION,
            "kind": "RoleBinding",
            "metadata": {**metadata, "labels": dict(_LABELS)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE_NAME},
            "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
        },
    ]


NODE_POOLS_ROLE_NAME: Final = "elastic-training-node-pools"


def node_pool_reader_manifests(namespace: str, service_account: str = DEFAULT_SERVICE_ACCOUNT) -> list[dict[str, Any]]:
    """A ClusterRole to ``list`` nodes and its ClusterRoleBinding to ``service_account``: only for
    ``avoid_failing_node_pools``, which counts the node pools a run's slices may land on (nodes are cluster-scoped,
    so no Role can grant it). Read-only, one verb; without it the option avoids nothing and says why."""
    labels = dict(_LABELS)
    return [
        {
            "apiVersion": RBAC_API_VERSION,
            "kind": "ClusterRole",
            "metadata": {"name": NODE_POOLS_ROLE_NAME, "labels": labels},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}],
        },
        {
            "apiVersion": RBAC_API_VERSION,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{NODE_POOLS_ROLE_NAME}-{namespace}-{service_account}"[:253], "labels": dict(labels)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NODE_POOLS_ROLE_NAME},
            "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
        },
    ]


KUEUE_CONFIG_ROLE_NAME: Final = "elastic-training-kueue-config"


def kueue_config_reader_manifests(
    namespace: str, service_account: str = DEFAULT_SERVICE_ACCOUNT
) -> list[dict[str, Any]]:
    """A Role in ``kueue-system`` to ``get`` the one ConfigMap ``kueue-manager-config`` (Kueue's Configuration: its
    ``waitForPodsReady`` timeouts), and its RoleBinding to ``service_account`` of ``namespace``. Optional: without it
    the operator reads the timeouts from its ``kueue_*`` options, or says they are unknown (docs/rbac.md)."""
    labels = dict(_LABELS)
    metadata = {"name": KUEUE_CONFIG_ROLE_NAME, "namespace": KUEUE_CONFIG_NAMESPACE, "labels": labels}
    return [
        {
            "apiVersion": RBAC_API_VERSION,
            "kind": "Role",
            "metadata": metadata,
            "rules": [
                {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [KUEUE_CONFIG_MAP], "verbs": ["get"]}
            ],
        },
        {
            "apiVersion": RBAC_API_VERSION,
            "kind": "RoleBinding",
            "metadata": {**metadata, "name": f"{KUEUE_CONFIG_ROLE_NAME}-{namespace}-{service_account}"[:253]},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": KUEUE_CONFIG_ROLE_NAME},
            "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
        },
    ]


def render_yaml(manifests: Sequence[dict[str, Any]]) -> str:
    """Manifests as one multi-document YAML stream, in order, keys as written."""
    return yaml.safe_dump_all(list(manifests), sort_keys=False, explicit_start=True)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m elastic_training.operators.rbac [namespace [service_account]]`: print the RBAC manifests as YAML."""
    args = list(sys.argv[1:] if argv is None else argv)
    node_pools, kueue_config = "--node-pools" in args, "--kueue-config" in args
    args = [a for a in args if a not in ("--node-pools", "--kueue-config")]
    if len(args) > 2 or (node_pools and kueue_config):
        print(
            "usage: python -m elastic_training.operators.rbac [--node-pools | --kueue-config] "
            "[namespace [service_account]]",
            file=sys.stderr,
        )
        return 2
    namespace = args[0] if args else "default"
    service_account = args[1] if len(args) > 1 else DEFAULT_SERVICE_ACCOUNT
    if kueue_config:
        header = "# Generated by `python -m elastic_training.operators.rbac --kueue-config`; see docs/rbac.md.\n"
        sys.stdout.write(header + render_yaml(kueue_config_reader_manifests(namespace, service_account)))
        return 0
    if node_pools:
        header = "# Generated by `python -m elastic_training.operators.rbac --node-pools`; see docs/rbac.md.\n"
        sys.stdout.write(header + render_yaml(node_pool_reader_manifests(namespace, service_account)))
        return 0
    header = "# Generated by `python -m elastic_training.operators.rbac`; see docs/rbac.md.\n"
    sys.stdout.write(header + render_yaml(rbac_manifests(namespace, service_account)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
