"""Cluster descriptions: the node pools of the local cluster, rendered as the Node objects GKE makes.

A description is YAML (``local/descriptions/*.yaml``)::

    cluster: local                  # node names: gke-<cluster>-<pool>-<index>
    zone: us-west4-a                # topology.kubernetes.io/zone (region: the zone without its suffix)
    nodePools:
      - name: tpu-v5e-16-0
        machineType: ct5lp-hightpu-4t
        tpu: {accelerator: tpu-v5-lite-podslice, topology: 4x4, chipsPerNode: 4}
        nodeCount: 4                # must be the slice's hosts: chips(topology) / chipsPerNode
        cpu: "112"                  # capacity = allocatable, per node
        memory: 192Gi
        pods: 110                   # optional, default 110 (the kubelet's maxPods)
        taints: [...]               # optional; a TPU pool defaults to GKE's google.com/tpu=present:NoSchedule
        provisioning: {onDemand: true, delaySeconds: 30}  # optional: no nodes until a pending pod asks,
                                    # then all of them 30 s later (local/gke/node_pools.py);
                                    # queued: true: GKE's queued provisioning, nodes only for a
                                    # ProvisioningRequest (local/gke/provisioning_requests.py)
        repairSeconds: 120          # optional: how long a lost host keeps the pool NotReady (default 0)

Nodes carry the labels GKE sets (verified against GKE's documentation of node labels and TPU node
pools: https://cloud.google.com/kubernetes-engine/docs/concepts/tpus and
https://cloud.google.com/kubernetes-engine/docs/how-to/tpus): ``cloud.google.com/gke-nodepool``,
``cloud.google.com/machine-family``, ``node.kubernetes.io/instance-type``, ``kubernetes.io/hostname``,
``kubernetes.io/os``, ``kubernetes.io/arch``, ``topology.kubernetes.io/zone``/``region``, and on TPU
pools ``cloud.google.com/gke-tpu-accelerator``, ``cloud.google.com/gke-tpu-topology`` and
``google.com/tpu`` capacity; GKE taints TPU nodes ``google.com/tpu=present:NoSchedule``. A multi-host
slice is one node pool whose node count is the slice's host count (GKE creates a multi-host TPU slice
node pool atomically with exactly that many nodes), which is why ``nodeCount`` is checked.

A description may also declare Kueue's ResourceFlavors, ClusterQueues (quotas), LocalQueues and priority
classes under ``kueue:`` (:mod:`local.descriptions.queue_description`); they are created when the cluster starts. Its
``kueue.configuration`` is Kueue's manager Configuration (``waitForPodsReady``), handed to Kueue as written.

Without a description the cluster has :data:`SINGLE_NODE`: one untainted node ``local-node`` with
room for any plain pod (the behaviour before node pools existed).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from elastic_training.local.descriptions.quantity import QuantityError, parse_quantity
from elastic_training.local.descriptions.queue_description import (
    QueueDescriptionError,
    QueueObject,
    parse_kueue_configuration,
    parse_queues,
)
from elastic_training.local.kube_objects import now_rfc3339
from elastic_training.operators.constants import (
    LABEL_GKE_NODEPOOL,
    LABEL_GKE_TPU_ACCELERATOR,
    LABEL_GKE_TPU_TOPOLOGY,
    LABEL_HOSTNAME,
    TPU_RESOURCE,
)

LABEL_NODEPOOL = LABEL_GKE_NODEPOOL
LABEL_TPU_ACCELERATOR = LABEL_GKE_TPU_ACCELERATOR
LABEL_TPU_TOPOLOGY = LABEL_GKE_TPU_TOPOLOGY
LABEL_MACHINE_FAMILY = "cloud.google.com/machine-family"
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_GKE_QUEUED = "cloud.google.com/gke-queued"  # a queued-provisioning node pool's (GKE; xpk's --flex selector)
TPU_TAINT: Mapping[str, str] = {"key": TPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
DEFAULT_MAX_PODS = 110
KUBELET_VERSION = "v1.32.4-gke.1000"
DESCRIPTIONS_DIR = Path(__file__).parent
BUILTIN_DESCRIPTIONS = ("v5e-small", "single-node")

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_TOPOLOGY = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*){1,2}$")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class DescriptionError(ValueError):
    """A cluster description that cannot be used; the message names the field."""


@dataclass(frozen=True)
class TpuSlice:
    """The TPU slice a node pool is: GKE's accelerator label value, topology and chips per host."""

    accelerator: str
    topology: str
    chips_per_node: int

    @property
    def chips(self) -> int:
        return math.prod(int(d) for d in self.topology.split("x"))

    @property
    def hosts(self) -> int:
        return max(1, self.chips // self.chips_per_node)


@dataclass(frozen=True)
class NodePool:
    """One GKE node pool: ``node_count`` identical nodes."""

    name: str
    machine_type: str
    node_count: int
    cpu: str
    memory: str
    pods: int = DEFAULT_MAX_PODS
    tpu: TpuSlice | None = None
    taints: tuple[Mapping[str, str], ...] = ()
    node_names: tuple[str, ...] = ()  # explicit names (the single-node default); else generated
    # Provisioned on demand (GKE queued provisioning / node auto-provisioning): the nodes exist only once a
    # pending pod asks for them, `provisioning_seconds` later (local/gke/node_pools.py).
    on_demand: bool = False
    provisioning_seconds: float = 0.0
    # Queued provisioning (`--enable-queued-provisioning`): provisioned only for a ProvisioningRequest, never for a
    # pending pod; its nodes carry `cloud.google.com/gke-queued: "true"` (local/gke/provisioning_requests.py).
    queued: bool = False
    repair_seconds: float = 0.0  # how long a lost host keeps its pool NotReady unless the fault says


@dataclass(frozen=True)
class ClusterDescription:
    """The cluster's node pools."""

    cluster: str
    zone: str
    pools: tuple[NodePool, ...] = field(default_factory=tuple)
    queue_objects: tuple[QueueObject, ...] = ()  # Kueue's flavors, queues and priority classes (`kueue:`)
    kueue_configuration: Mapping[str, Any] = field(default_factory=dict)  # `kueue.configuration`, as written

    def node_names(self, pool: NodePool) -> list[str]:
        """The names of ``pool``'s nodes, ``gke-<cluster>-<pool>-<index>`` unless given."""
        if pool.node_names:
            return list(pool.node_names)
        return [f"gke-{self.cluster}-{pool.name}-{i}" for i in range(pool.node_count)]

    def nodes(self, *, on_demand: bool = True) -> list[dict[str, Any]]:
        """Every Node object, as GKE registers them (status Ready); ``on_demand=False`` leaves out the pools
        provisioned on demand (their nodes appear later)."""
        return [
            node_object(self, pool, name)
            for pool in self.pools
            if on_demand or not pool.on_demand
            for name in self.node_names(pool)
        ]

    def pool(self, name: str) -> NodePool | None:
        return next((p for p in self.pools if p.name == name), None)


SINGLE_NODE = ClusterDescription(
    cluster="local",
    zone="local-a",
    pools=(
        NodePool(
            name="default-pool",
            machine_type="local",
            node_count=1,
            cpu="1k",
            memory="4Ti",
            pods=10_000,
            node_names=("local-node",),
        ),
    ),
)


def node_object(description: ClusterDescription, pool: NodePool, name: str) -> dict[str, Any]:
    """One Node: GKE's labels and taints, capacity = allocatable, condition Ready."""
    labels = {
        LABEL_NODEPOOL: pool.name,
        LABEL_MACHINE_FAMILY: pool.machine_type.split("-")[0],
        LABEL_INSTANCE_TYPE: pool.machine_type,
        "beta.kubernetes.io/instance-type": pool.machine_type,
        LABEL_HOSTNAME: name,
        "kubernetes.io/os": "linux",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/arch": "amd64",
        LABEL_ZONE: description.zone,
        LABEL_REGION: description.zone.rsplit("-", 1)[0],
        "cloud.google.com/gke-os-distribution": "cos",
    }
    resources: dict[str, str] = {"cpu": pool.cpu, "memory": pool.memory, "pods": str(pool.pods)}
    if pool.queued:
        labels[LABEL_GKE_QUEUED] = "true"
    if pool.tpu is not None:
        labels[LABEL_TPU_ACCELERATOR] = pool.tpu.accelerator
        labels[LABEL_TPU_TOPOLOGY] = pool.tpu.topology
        resources[TPU_RESOURCE] = str(pool.tpu.chips_per_node)
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": [dict(t) for t in pool.taints]} if pool.taints else {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [ready_condition(True)],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
            "nodeInfo": {
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
                "osImage": "Container-Optimized OS from Google",
                "containerRuntimeVersion": "local://1",
                "kernelVersion": "",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        },
    }


def ready_condition(ready: bool, reason: str = "", message: str = "") -> dict[str, str]:
    """The node's ``Ready`` condition as the kubelet (``KubeletReady``) or the node lifecycle controller
    (``NodeStatusUnknown``) writes it."""
    stamp = now_rfc3339()
    return {
        "type": "Ready",
        "status": "True" if ready else "Unknown",
        "reason": reason or ("KubeletReady" if ready else "NodeStatusUnknown"),
        "message": message or ("kubelet is posting ready status" if ready else "Kubelet stopped posting node status."),
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }


def load_description(source: str | Path) -> ClusterDescription:
    """A description from a YAML file, or a built-in name (``v5e-small``, ``single-node``)."""
    text = str(source)
    if text == "single-node":
        return SINGLE_NODE
    path = DESCRIPTIONS_DIR / f"{text}.yaml" if text in BUILTIN_DESCRIPTIONS else Path(source)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise DescriptionError(f"cannot read the cluster description {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise DescriptionError(f"the cluster description {path} is not YAML: {exc}") from exc
    return parse_description(raw)


def parse_description(raw: Any) -> ClusterDescription:
    """Check a description's fields and build it; ``DescriptionError`` names the first bad field."""
    if not isinstance(raw, Mapping):
        raise DescriptionError("a cluster description must be a mapping with `nodePools`")
    _unknown(raw, ("cluster", "zone", "nodePools", "kueue"), "")
    cluster = _dns_label(raw.get("cluster", "local"), "cluster")
    zone = raw.get("zone", "us-west4-a")
    if not isinstance(zone, str) or not _DNS_LABEL.match(zone):
        raise DescriptionError(f"zone: must be a zone name such as us-west4-a, got {zone!r}")
    pools_raw = raw.get("nodePools")
    if not isinstance(pools_raw, list) or not pools_raw:
        raise DescriptionError("nodePools: must be a non-empty list of node pools")
    pools = tuple(_pool(p, f"nodePools[{i}]") for i, p in enumerate(pools_raw))
    seen: set[str] = set()
    for i, pool in enumerate(pools):
        if pool.name in seen:
            raise DescriptionError(f"nodePools[{i}].name: duplicate node pool {pool.name!r}")
        seen.add(pool.name)
    try:
        queue_objects = parse_queues(raw.get("kueue"))
        configuration = parse_kueue_configuration(raw.get("kueue"))
    except QueueDescriptionError as exc:
        raise DescriptionError(str(exc)) from exc
    return ClusterDescription(
        cluster=cluster, zone=zone, pools=pools, queue_objects=queue_objects, kueue_configuration=configuration
    )


def _pool(raw: Any, where: str) -> NodePool:
    if not isinstance(raw, Mapping):
        raise DescriptionError(f"{where}: must be a mapping")
    _unknown(
        raw,
        ("name", "machineType", "nodeCount", "cpu", "memory", "pods", "tpu", "taints", "provisioning", "repairSeconds"),
        where,
    )
    name = _dns_label(raw.get("name"), f"{where}.name")
    machine = raw.get("machineType")
    if not isinstance(machine, str) or not machine:
        raise DescriptionError(f"{where}.machineType: required, e.g. ct5lp-hightpu-4t or n2-standard-64")
    count = raw.get("nodeCount")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise DescriptionError(f"{where}.nodeCount: must be a positive integer, got {count!r}")
    cpu = _quantity(raw.get("cpu"), f"{where}.cpu")
    memory = _quantity(raw.get("memory"), f"{where}.memory")
    pods = raw.get("pods", DEFAULT_MAX_PODS)
    if isinstance(pods, bool) or not isinstance(pods, int) or pods < 1:
        raise DescriptionError(f"{where}.pods: must be a positive integer, got {pods!r}")
    tpu = _tpu(raw["tpu"], f"{where}.tpu") if raw.get("tpu") is not None else None
    if tpu is not None and count != tpu.hosts:
        raise DescriptionError(
            f"{where}.nodeCount: a {tpu.topology} slice of {tpu.chips_per_node}-chip hosts has {tpu.hosts} "
            f"host(s), so its node pool has {tpu.hosts} node(s), got {count}"
        )
    taints = _taints(raw["taints"], f"{where}.taints") if "taints" in raw else ((TPU_TAINT,) if tpu else ())
    on_demand, provisioning, queued = _provisioning(raw.get("provisioning"), f"{where}.provisioning")
    repair = _seconds(raw.get("repairSeconds", 0), f"{where}.repairSeconds")
    return NodePool(
        name,
        machine,
        count,
        cpu,
        memory,
        pods,
        tpu,
        taints,
        on_demand=on_demand,
        provisioning_seconds=provisioning,
        queued=queued,
        repair_seconds=repair,
    )


def _seconds(raw: Any, where: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not 0 <= raw <= 86_400:
        raise DescriptionError(f"{where}: must be a number of seconds between 0 and 86400, got {raw!r}")
    return float(raw)


def _provisioning(raw: Any, where: str) -> tuple[bool, float, bool]:
    if raw is None:
        return False, 0.0, False
    if not isinstance(raw, Mapping):
        raise DescriptionError(f"{where}: must be a mapping {{onDemand: true, delaySeconds: N, queued: false}}")
    _unknown(raw, ("onDemand", "delaySeconds", "queued"), where)
    on_demand, queued = raw.get("onDemand", True), raw.get("queued", False)
    for key, value in (("onDemand", on_demand), ("queued", queued)):
        if not isinstance(value, bool):
            raise DescriptionError(f"{where}.{key}: must be true or false, got {value!r}")
    if queued and not on_demand:
        raise DescriptionError(f"{where}.queued: a queued-provisioning pool is provisioned on demand (onDemand: true)")
    return on_demand, _seconds(raw.get("delaySeconds", 0), f"{where}.delaySeconds"), queued


def _tpu(raw: Any, where: str) -> TpuSlice:
    if not isinstance(raw, Mapping):
        raise DescriptionError(f"{where}: must be a mapping with accelerator, topology, chipsPerNode")
    _unknown(raw, ("accelerator", "topology", "chipsPerNode"), where)
    accelerator = _dns_label(raw.get("accelerator"), f"{where}.accelerator")
    topology = raw.get("topology")
    if not isinstance(topology, str) or not _TOPOLOGY.match(topology):
        raise DescriptionError(f"{where}.topology: must be a TPU topology such as 4x4 or 2x2x4, got {topology!r}")
    chips = raw.get("chipsPerNode", 4)
    if isinstance(chips, bool) or not isinstance(chips, int) or chips < 1:
        raise DescriptionError(f"{where}.chipsPerNode: must be a positive integer, got {chips!r}")
    tpu = TpuSlice(accelerator, topology, chips)
    if tpu.chips > 1 and tpu.chips % chips:
        raise DescriptionError(f"{where}.chipsPerNode: {topology} has {tpu.chips} chips, not a multiple of {chips}")
    return TpuSlice(accelerator, topology, min(chips, tpu.chips))


def _taints(raw: Any, where: str) -> tuple[Mapping[str, str], ...]:
    if not isinstance(raw, list):
        raise DescriptionError(f"{where}: must be a list of {{key, value, effect}}")
    taints = []
    for i, taint in enumerate(raw):
        if not isinstance(taint, Mapping) or not isinstance(taint.get("key"), str) or not taint["key"]:
            raise DescriptionError(f"{where}[{i}].key: required")
        if taint.get("effect") not in _EFFECTS:
            raise DescriptionError(f"{where}[{i}].effect: must be one of {', '.join(_EFFECTS)}")
        entry = {"key": taint["key"], "effect": taint["effect"]}
        if taint.get("value") is not None:
            entry["value"] = str(taint["value"])
        taints.append(entry)
    return tuple(taints)


def _quantity(raw: Any, where: str) -> str:
    if raw is None:
        raise DescriptionError(f"{where}: required (a quantity such as 112 or 192Gi)")
    try:
        value = parse_quantity(raw)
    except QuantityError as exc:
        raise DescriptionError(f"{where}: {raw!r} is not a quantity: {exc}") from exc
    if value <= 0:
        raise DescriptionError(f"{where}: must be positive, got {raw!r}")
    return str(raw)


def _dns_label(raw: Any, where: str) -> str:
    if not isinstance(raw, str) or len(raw) > 63 or not _DNS_LABEL.match(raw):
        raise DescriptionError(f"{where}: must be a DNS label (lower-case letters, digits, '-'), got {raw!r}")
    return raw


def _unknown(raw: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    for key in raw:
        if key not in known:
            prefix = f"{where}." if where else ""
            raise DescriptionError(f"{prefix}{key}: unknown field (known: {', '.join(known)})")
