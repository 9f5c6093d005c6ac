"""Cluster descriptions: the default v5e-like cluster, GKE's node labels and taints, and refused input."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from elastic_training.local.descriptions.cluster_description import (
    LABEL_NODEPOOL,
    SINGLE_NODE,
    TPU_TAINT,
    DescriptionError,
    load_description,
    parse_description,
)
from elastic_training.local.descriptions.quantity import QuantityError, parse_quantity
from elastic_training.operators.manifests import HEAD_NODE_POOL, elastic_jobset
from elastic_training.operators.spec import ElasticRunSpec
from tests.support.gke_jobsets import v5e_16_spec


def _requests(pod_spec: dict[str, Any]) -> dict[str, Fraction]:
    """What the scheduler reserves for a pod (no plain init containers here): its containers' and its sidecars'
    (restartable init containers') requests, a request absent beside a limit being the limit (the API server's
    defaulting)."""
    total: dict[str, Fraction] = {}
    sidecars = [c for c in pod_spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    assert len(sidecars) == len(pod_spec.get("initContainers") or [])
    for container in [*pod_spec["containers"], *sidecars]:
        resources = container.get("resources") or {}
        for name, value in {**(resources.get("limits") or {}), **(resources.get("requests") or {})}.items():
            total[name] = total.get(name, Fraction(0)) + parse_quantity(str(value))
    return total


def _fits(pod_spec: dict[str, Any], node: dict[str, Any]) -> bool:
    """The node's labels hold the pod's nodeSelector and the pod tolerates each NoSchedule taint."""
    labels = node["metadata"]["labels"]
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    tolerations = pod_spec.get("tolerations") or []

    def tolerated(taint: dict[str, Any]) -> bool:
        return any(
            (t.get("operator") == "Exists" and t.get("key") in (None, taint["key"]))
            or (t.get("key") == taint["key"] and t.get("value") == taint.get("value"))
            for t in tolerations
            if t.get("effect") in (None, taint["effect"])
        )

    return all(tolerated(t) for t in node["spec"].get("taints") or [] if t["effect"] == "NoSchedule")


def _pool(**overrides: Any) -> dict[str, Any]:
    pool: dict[str, Any] = {
        "name": "tpu-a",
        "machineType": "ct5lp-hightpu-4t",
        "tpu": {"accelerator": "tpu-v5-lite-podslice", "topology": "2x4", "chipsPerNode": 4},
        "nodeCount": 2,
        "cpu": "112",
        "memory": "192Gi",
    }
    pool.update(overrides)
    return pool


def test_default_description_is_four_v5e_16_slices_a_single_host_pool_and_a_cpu_pool() -> None:
    description = load_description("v5e-small")
    assert [p.name for p in description.pools] == [*(f"tpu-v5e-16-{i}" for i in range(4)), "tpu-v5e-4", "cpu-np"]
    nodes = description.nodes()
    assert len(nodes) == 4 * 4 + 1 + 2
    first = nodes[0]
    labels = first["metadata"]["labels"]
    assert first["metadata"]["name"] == "gke-local-tpu-v5e-16-0-0"
    assert labels["cloud.google.com/gke-nodepool"] == "tpu-v5e-16-0"
    assert labels["cloud.google.com/gke-tpu-accelerator"] == "tpu-v5-lite-podslice"
    assert labels["cloud.google.com/gke-tpu-topology"] == "4x4"
    assert labels["kubernetes.io/hostname"] == "gke-local-tpu-v5e-16-0-0"
    assert first["spec"]["taints"] == [{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}]
    assert first["status"]["allocatable"]["google.com/tpu"] == "4"
    single_host = nodes[16]
    labels = single_host["metadata"]["labels"]
    assert single_host["metadata"]["name"] == "gke-local-tpu-v5e-4-0"
    assert (labels["cloud.google.com/gke-tpu-accelerator"], labels["cloud.google.com/gke-tpu-topology"]) == (
        "tpu-v5-lite-podslice",
        "2x2",
    )
    assert single_host["spec"]["taints"] == [{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}]
    assert single_host["status"]["allocatable"]["google.com/tpu"] == "4"
    cpu_node = nodes[-1]
    assert cpu_node["metadata"]["labels"]["cloud.google.com/gke-nodepool"] == HEAD_NODE_POOL
    assert "taints" not in cpu_node["spec"]
    assert "google.com/tpu" not in cpu_node["status"]["allocatable"]


def test_default_cpu_pool_fits_the_rendered_pathways_head() -> None:
    jobset = elastic_jobset(v5e_16_spec("fit"), name="fit", namespace="default", labels={})
    head = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "pathways-head")
    head_pod = head["template"]["spec"]["template"]["spec"]
    wanted = _requests(head_pod)
    assert wanted["cpu"] == 24 + 16 + 8
    assert wanted["memory"] == parse_quantity("232G")
    cpu_np = next(n for n in load_description("v5e-small").nodes() if n["metadata"]["name"].endswith("cpu-np-0"))
    free = cpu_np["status"]["allocatable"]
    assert parse_quantity(free["cpu"]) >= wanted["cpu"]
    assert parse_quantity(free["memory"]) >= wanted["memory"]
    assert _fits(head_pod, cpu_np)


def test_the_workers_of_a_v5e_16_run_never_fit_the_single_host_pool() -> None:
    """The 2x2 pool is the stages' (one host): a 4x4 slice's worker pods select 4x4 and never land there."""
    spec = ElasticRunSpec(
        run_name="fit",
        base_output_directory="gs://bucket/runs",
        steps=100,
        checkpoint_period=10,
        num_slices=3,
        runtime="local",
    )
    jobset = elastic_jobset(spec, name="fit", namespace="default", labels={})
    worker = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "worker")
    worker_pod = worker["template"]["spec"]["template"]["spec"]
    fits = {
        n["metadata"]["labels"][LABEL_NODEPOOL] for n in load_description("v5e-small").nodes() if _fits(worker_pod, n)
    }
    assert fits == {f"tpu-v5e-16-{i}" for i in range(4)}


def test_single_node_default_keeps_local_node() -> None:
    (node,) = SINGLE_NODE.nodes()
    assert node["metadata"]["name"] == "local-node"
    assert "taints" not in node["spec"]


def test_a_description_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text(
        "cluster: demo\nnodePools:\n  - {name: cpu, machineType: n2-standard-8, nodeCount: 1, cpu: 8, memory: 32Gi}\n"
    )
    description = load_description(path)
    assert [n["metadata"]["name"] for n in description.nodes()] == ["gke-demo-cpu-0"]


def test_tpu_pool_gets_gke_taint_by_default() -> None:
    (pool,) = parse_description({"nodePools": [_pool()]}).pools
    assert pool.taints == (TPU_TAINT,)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"nodePools": [_pool(nodeCount=3)]}, "nodePools[0].nodeCount: a 2x4 slice of 4-chip hosts has 2 host(s)"),
        ({"nodePools": [_pool(), _pool()]}, "nodePools[1].name: duplicate node pool 'tpu-a'"),
        ({"nodePools": [_pool(cpu="lots")]}, "nodePools[0].cpu: 'lots' is not a quantity"),
        ({"nodePools": [_pool(colour="red")]}, "nodePools[0].colour: unknown field"),
        ({"nodePools": [_pool(name="Bad_Name")]}, "nodePools[0].name: must be a DNS label"),
        ({"nodePools": [_pool(tpu={"accelerator": "x", "topology": "4by4"})]}, "nodePools[0].tpu.topology"),
        ({"nodePools": [_pool(taints=[{"key": "k", "effect": "Never"}])]}, "nodePools[0].taints[0].effect"),
        ({"nodePools": []}, "nodePools: must be a non-empty list"),
        ({"nodePools": [_pool(provisioning={"onDemand": "yes"})]}, "nodePools[0].provisioning.onDemand: must be"),
        ({"nodePools": [_pool(provisioning={"delay": 3})]}, "nodePools[0].provisioning.delay: unknown field"),
        ({"nodePools": [_pool(provisioning={"delaySeconds": -1})]}, "nodePools[0].provisioning.delaySeconds"),
        ({"nodePools": [_pool(repairSeconds="soon")]}, "nodePools[0].repairSeconds: must be a number of seconds"),
        ([], "must be a mapping"),
    ],
)
def test_bad_descriptions_name_the_field(raw: Any, message: str) -> None:
    with pytest.raises(DescriptionError) as caught:
        parse_description(raw)
    assert message in str(caught.value)


def test_missing_file_is_a_description_error(tmp_path: Path) -> None:
    with pytest.raises(DescriptionError, match="cannot read the cluster description"):
        load_description(tmp_path / "absent.yaml")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Fraction(1, 2)),
        ("100G", 10**11),
        ("32Gi", 32 * 2**30),
        ("4", 4),
        ("1e3", 1000),
        ("0.5", Fraction(1, 2)),
    ],
)
def test_quantities(text: str, value: Fraction) -> None:
    assert parse_quantity(text) == value


def test_bad_quantity() -> None:
    with pytest.raises(QuantityError):
        parse_quantity("12 apples")


def _queues(**overrides: Any) -> dict[str, Any]:
    kueue: dict[str, Any] = {
        "resourceFlavors": [{"name": "v5e"}],
        "clusterQueues": [
            {
                "name": "cq",
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["google.com/tpu"],
                        "flavors": [{"name": "v5e", "resources": [{"name": "google.com/tpu", "nominalQuota": 8}]}],
                    }
                ],
            }
        ],
        "localQueues": [{"name": "lq", "clusterQueue": "cq"}],
    }
    kueue.update(overrides)
    return {"nodePools": [_pool()], "kueue": kueue}


def test_v5e_small_declares_xpks_kueue_objects() -> None:
    objects = {(o.rtype.kind, o.name): o.body for o in load_description("v5e-small").queue_objects}
    cq = objects[("ClusterQueue", "cluster-queue")]["spec"]
    assert "queueingStrategy" not in cq  # the default is added by Kueue's webhook (tests/local/controlplane)
    assert cq["preemption"]["withinClusterQueue"] == "LowerPriority"
    tpu = cq["resourceGroups"][0]["flavors"][0]
    assert tpu == {"name": "4xv5litepod-16", "resources": [{"name": "google.com/tpu", "nominalQuota": 64}]}
    lq = objects[("LocalQueue", "multislice-queue")]
    assert (lq["metadata"]["namespace"], lq["spec"]["clusterQueue"]) == ("default", "cluster-queue")
    assert objects[("PriorityClass", "very-high")]["value"] == 1000
    assert SINGLE_NODE.queue_objects == ()


def test_an_on_demand_pool_registers_no_node_at_start() -> None:
    description = parse_description(
        {"nodePools": [_pool(), _pool(name="flex", provisioning={"delaySeconds": 30}, repairSeconds=90)]}
    )
    flex = description.pool("flex")
    assert flex is not None
    assert (flex.on_demand, flex.provisioning_seconds, flex.repair_seconds) == (True, 30.0, 90.0)
    assert {n["metadata"]["labels"][LABEL_NODEPOOL] for n in description.nodes(on_demand=False)} == {"tpu-a"}
    assert len(description.nodes()) == 4


def test_a_description_without_kueue_has_no_queue_objects() -> None:
    assert parse_description({"nodePools": [_pool()]}).queue_objects == ()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"localQueues": [{"name": "lq", "clusterQueue": "nope"}]}, "clusterQueue 'nope' is not one of"),
        ({"resourceFlavors": [{"name": "other"}]}, "flavor 'v5e' is not one of kueue.resourceFlavors"),
        ({"colour": []}, "kueue.colour: unknown field"),
    ],
)
def test_bad_kueue_sections_name_the_field(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(DescriptionError) as caught:
        parse_description(_queues(**overrides))
    assert message in str(caught.value)
