"""The async client configuration of a ``kubernetes`` connection, loaded with kubernetes_asyncio's public API.

The cncf-kubernetes provider's `AsyncKubernetesHook` loads its configuration in a private method and caches
it unless the kubeconfig authenticates with an ``exec`` plugin (GKE's ``gke-gcloud-auth-plugin``, EKS'
``aws-iam-authenticator``), whose short-lived tokens it reloads on every call. `AsyncJobSetHook` shares one
API client across a trigger's calls and streams, so it needs the same two answers: the configuration, and
whether it may be kept. This module gives both from the connection's public extras and the hook's
constructor arguments, in the provider's order (``in_cluster``, ``config_dict``, ``kube_config_path``,
``kube_config``, then the default kubeconfig). A connection that sets more than one of them gets ``None``:
the hook then takes the provider's `get_conn`, which refuses it with the provider's own message.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client as async_k8s
from kubernetes_asyncio import config as async_config

EXTRA_PREFIX = "extra__kubernetes__"  # the provider's old prefixed form of an extra key


def extra_field(extras: Mapping[str, Any], name: str) -> Any:
    """An extra's value by its plain name or the provider's ``extra__kubernetes__`` form."""
    return extras[name] if name in extras else extras.get(EXTRA_PREFIX + name)


def uses_exec_auth(kubeconfig: object, context: str | None) -> bool:
    """Whether the kubeconfig's user for ``context`` (its current context when ``None``) runs an exec plugin.

    A kubeconfig that cannot be read as one counts as exec: its credentials are then reloaded per call,
    which is always safe.
    """
    if not isinstance(kubeconfig, Mapping):
        return True
    name = context or kubeconfig.get("current-context")
    contexts = {c.get("name"): c.get("context") or {} for c in kubeconfig.get("contexts") or [] if isinstance(c, dict)}
    user_name = (contexts.get(name) or {}).get("user")
    for user in kubeconfig.get("users") or []:
        if isinstance(user, dict) and user.get("name") == user_name:
            return bool((user.get("user") or {}).get("exec"))
    return False


def _read_yaml(path: str) -> object:
    return yaml.safe_load(Path(path).expanduser().read_text())


def _default_kubeconfig_path() -> str:
    first = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
    return first or str(Path("~/.kube/config").expanduser())


async def static_configuration(
    extras: Mapping[str, Any],
    *,
    in_cluster: bool | None,
    cluster_context: str | None,
    config_dict: Mapping[str, Any] | None,
) -> async_k8s.Configuration | None:
    """The connection's configuration when it may be kept for the hook's life; ``None`` when the hook must
    load it per call (an exec plugin) or let the provider refuse it (more than one source set)."""
    in_cluster = in_cluster if in_cluster is not None else bool(extra_field(extras, "in_cluster"))
    context = cluster_context or extra_field(extras, "cluster_context") or None
    path = extra_field(extras, "kube_config_path")
    inline = extra_field(extras, "kube_config")
    if sum(1 for source in (in_cluster, config_dict, path, inline) if source) > 1:
        return None
    configuration = async_k8s.Configuration()
    if in_cluster:
        async_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return configuration
    if config_dict:
        data: object = dict(config_dict)
    elif inline:
        try:
            data = inline if isinstance(inline, Mapping) else yaml.safe_load(str(inline))
        except yaml.YAMLError:
            return None
    else:
        path = str(path) if path else _default_kubeconfig_path()
        try:
            kubeconfig = _read_yaml(path)
        except (OSError, yaml.YAMLError):
            return None  # the provider's get_conn says what is wrong with it
        if uses_exec_auth(kubeconfig, context):
            return None
        await async_config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
        return configuration
    if uses_exec_auth(data, context):
        return None
    await async_config.load_kube_config_from_dict(data, context=context, client_configuration=configuration)
    return configuration
