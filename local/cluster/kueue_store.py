"""The imitation's own copies of the description's Kueue objects and configuration (deleted with it)."""

from __future__ import annotations

import copy

import yaml

from elastic_training.local.cluster import resources
from elastic_training.local.cluster.resources import CONFIG_MAPS, NAMESPACES, ApiError
from elastic_training.local.cluster.store import Store
from elastic_training.local.descriptions.kueue_config import (
    CONFIG_KEY,
    CONFIG_MAP,
    CONFIG_NAMESPACE,
    KueueConfiguration,
)
from elastic_training.local.descriptions.queue_description import QueueObject

_BY_KIND = {
    t.kind: t
    for t in (
        resources.RESOURCE_FLAVORS,
        resources.CLUSTER_QUEUES,
        resources.LOCAL_QUEUES,
        resources.WORKLOAD_PRIORITY_CLASSES,
        resources.PRIORITY_CLASSES,
        resources.PROVISIONING_REQUEST_CONFIGS,
        resources.ADMISSION_CHECKS,
    )
}


def register_queues(store: Store, objects: tuple[QueueObject, ...]) -> list[str]:
    """Create every described object that does not exist yet (flavors and classes before queues); the names."""
    created = []
    for obj in objects:
        try:
            store.create(_BY_KIND[obj.rtype.kind], copy.deepcopy(dict(obj.body)))
        except ApiError as err:
            if err.code != 409:
                raise
            continue
        created.append(obj.name)
    return created


def publish(store: Store, configuration: KueueConfiguration) -> None:
    """Kueue's ConfigMap as its manifests install it (``kueue-system/kueue-manager-config``, key
    ``controller_manager_config.yaml``), holding ``configuration``: where an operator reads Kueue's timeouts."""
    try:
        store.create(NAMESPACES, {"metadata": {"name": CONFIG_NAMESPACE}})
    except ApiError as err:
        if err.code != 409:
            raise
    data = {CONFIG_KEY: yaml.safe_dump(configuration.manifest(), sort_keys=False)}
    found = store.find(CONFIG_MAPS, CONFIG_NAMESPACE, CONFIG_MAP)
    if found is None:
        store.create(CONFIG_MAPS, {"metadata": {"name": CONFIG_MAP, "namespace": CONFIG_NAMESPACE}, "data": data})
    elif found.get("data") != data:
        store.mutate(CONFIG_MAPS, CONFIG_NAMESPACE, CONFIG_MAP, lambda o: o.__setitem__("data", data))
