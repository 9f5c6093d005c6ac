"""JobSet manifests: golden files per runtime, the fields of docs/architecture.md §3 one by one, names and labels.

Regenerate the golden files after an intended change with
`UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/operators/test_manifests.py` and review the diff.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from elastic_training.operators.constants import (
    HEAD_MAIN_CONTAINER,
    HEAD_REPLICATED_JOB,
    LABEL_DAG_ID,
    LABEL_MAP_INDEX,
    LABEL_RUN_ID,
    LABEL_RUN_NAME,
    LABEL_STAGE,
    LABEL_TASK_ID,
    WORKER_CONTAINER,
    WORKER_REPLICATED_JOB,
)
from elastic_training.operators.kube_names import (
    JOBSET_NAME_MAX,
    identity_labels,
    jobset_name,
    label_selector,
    label_value,
)
from elastic_training.operators.manifest_lint import lint_manifest
from elastic_training.operators.manifests import JobSpec, elastic_jobset, lint_job, plain_jobset
from elastic_training.operators.spec import LOCAL_MAXTEXT_IMAGE, ElasticRunSpec, SpecError, lint

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"

DAG, TASK, RUN = "nightly_pretrain", "pretrain", "scheduled__2026-11-30T00:00:00+00:00"
LABELS = identity_labels(dag_id=DAG, task_id=TASK, run_id=RUN, map_index=-1)

GKE_SPEC = ElasticRunSpec(
    run_name="llama3-nightly",
    base_output_directory="gs://ml-runs/pretrain",
    steps=1000,
    checkpoint_period=100,
    num_slices=4,
    image="us-docker.pkg.dev/my-project/maxtext/maxtext:2026-11-30",
    tpu_type="v5p",
    tpu_topology="2x2x4",
    maxtext_args={"model_name": "llama3-8b", "per_device_batch_size": "4"},
    max_slice_restarts=5,
    jobset_max_restarts=1,
    elastic_min_slice_count=2,
)
LOCAL_SPEC = ElasticRunSpec(
    run_name="demo",
    base_output_directory="/tmp/elastic-runs",
    steps=40,
    checkpoint_period=10,
    num_slices=2,
    runtime="local",
    maxtext_args={"per_device_batch_size": "2"},
    max_slice_restarts=3,
)
EVAL_ARGS = ["base_output_directory=/tmp/elastic-runs", "run_name=demo", "checkpoint_step=39"]


def _name(spec: ElasticRunSpec, attempt: int = 0) -> str:
    return jobset_name(dag_id=DAG, task_id=TASK, run_id=RUN, map_index=-1, attempt=attempt, prefix=spec.run_name)


def gke_elastic() -> dict[str, Any]:
    return elastic_jobset(GKE_SPEC, name=_name(GKE_SPEC), namespace="training", labels=LABELS)


def local_elastic() -> dict[str, Any]:
    spec = dataclasses.replace(LOCAL_SPEC, trainer_env={"LOCAL_FAULT_X": "1"})
    return elastic_jobset(spec, name=_name(LOCAL_SPEC), namespace="default", labels=LABELS)


def gke_plain() -> dict[str, Any]:
    job = JobSpec(
        image="us-docker.pkg.dev/my-project/maxtext/maxtext:2026-11-30",
        command=["python3", "-m", "maxtext.inference.decode"],
        args=["src/maxtext/configs/base.yml", "run_name=llama3-nightly"],
        env={"JAX_PLATFORMS": "tpu"},
        backoff_limit=1,
        active_deadline_seconds=3600,
        resources={"cpu": "8", "memory": "32G"},
        service_account="training-runner",
    )
    name = jobset_name(dag_id=DAG, task_id="evaluate", run_id=RUN, map_index=2, attempt=0, prefix="llama3-eval")
    labels = identity_labels(dag_id=DAG, task_id="evaluate", run_id=RUN, map_index=2)
    return plain_jobset(job, name=name, namespace="training", labels=labels, stage="evaluate")


def local_plain() -> dict[str, Any]:
    job = JobSpec(
        image="ignored",
        command=["python", "-m", "elastic_training.local.workloads.evaluate", *EVAL_ARGS],
        env={"EXTRA": "1"},
        runtime="local",
    )
    name = jobset_name(dag_id=DAG, task_id="evaluate", run_id=RUN, map_index=-1, attempt=0)
    labels = identity_labels(dag_id=DAG, task_id="evaluate", run_id=RUN, map_index=-1)
    return plain_jobset(job, name=name, namespace="default", labels=labels, stage="evaluate")


RENDERERS = {
    "elastic-gke": gke_elastic,
    "elastic-local": local_elastic,
    "plain-gke": gke_plain,
    "plain-local": local_plain,
}


@pytest.mark.parametrize("golden", sorted(RENDERERS))
def test_golden(golden: str) -> None:
    rendered = yaml.safe_dump(RENDERERS[golden](), sort_keys=False)
    path = GOLDEN / f"{golden}.yaml"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(rendered)
    assert path.exists(), f"missing {path}: run with UPDATE_GOLDEN=1"
    assert rendered == path.read_text(), f"{path} differs: review, then regenerate with UPDATE_GOLDEN=1"


def _rjob(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    (rjob,) = [r for r in manifest["spec"]["replicatedJobs"] if r["name"] == name]
    return rjob


def _pod(rjob: dict[str, Any]) -> dict[str, Any]:
    return rjob["template"]["spec"]["template"]["spec"]


def _container(pod: dict[str, Any], name: str, *, init: bool = False) -> dict[str, Any]:
    (container,) = [c for c in pod["initContainers" if init else "containers"] if c["name"] == name]
    return container


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize("render", [gke_elastic, local_elastic], ids=["gke", "local"])
def test_design_jobset_fields(render: Any) -> None:
    manifest = render()
    assert manifest["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert manifest["kind"] == "JobSet"
    spec = manifest["spec"]
    assert spec["coordinator"] == {"replicatedJob": "pathways-head"}
    assert spec["network"]["enableDNSHostnames"] is True
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["pathways-head"]}
    assert [r["name"] for r in spec["replicatedJobs"]] == [HEAD_REPLICATED_JOB, WORKER_REPLICATED_JOB]


def test_design_failure_policy_is_explicit() -> None:
    for manifest, spec in ((gke_elastic(), GKE_SPEC), (local_elastic(), LOCAL_SPEC)):
        policy = manifest["spec"]["failurePolicy"]
        assert (policy["restartStrategy"], policy["maxRestarts"]) == ("Recreate", spec.jobset_max_restarts)
    assert local_elastic()["spec"]["failurePolicy"]["rules"] == gke_elastic()["spec"]["failurePolicy"]["rules"]
    zero = elastic_jobset(dataclasses.replace(GKE_SPEC, jobset_max_restarts=0), name="a", namespace="d", labels={})
    assert zero["spec"]["failurePolicy"]["maxRestarts"] == 0  # written out even when 0 (xpk omits it)


@pytest.mark.parametrize("render", [gke_elastic, local_elastic], ids=["gke", "local"])
def test_design_head(render: Any) -> None:
    head = _rjob(render(), HEAD_REPLICATED_JOB)
    assert head["replicas"] == 1
    assert head["template"]["spec"]["backoffLimit"] == 0
    assert _pod(head)["restartPolicy"] == "Never"
    assert [c["name"] for c in _pod(head)["containers"]] == [HEAD_MAIN_CONTAINER]


def test_design_gke_head_sidecars_and_trainer() -> None:
    pod = _pod(_rjob(gke_elastic(), HEAD_REPLICATED_JOB))
    assert [c["name"] for c in pod["initContainers"]] == ["pathways-proxy", "pathways-rm"]
    proxy = _container(pod, "pathways-proxy", init=True)
    rm = _container(pod, "pathways-rm", init=True)
    assert proxy["restartPolicy"] == rm["restartPolicy"] == "Always"  # native sidecars
    # The slices the run may lose (xpk's --elastic-slices): 4 slices, elastic_min_slice_count=2, so 2.
    assert "--num_elastic_slices=2" in proxy["args"]
    assert f"--instance_count={GKE_SPEC.num_slices}" in rm["args"]
    assert "--instance_type=tpuv5:2x2x4" in rm["args"]
    trainer = _container(pod, "jax-tpu")
    assert trainer["image"] == GKE_SPEC.image
    assert trainer["command"] == ["python3", "-m", "maxtext.trainers.pre_train.train"]
    assert trainer["args"][0] == "src/maxtext/configs/base.yml"
    args = trainer["args"][1:]
    for key in (
        "base_output_directory=gs://ml-runs/pretrain",
        "run_name=llama3-nightly",
        "enable_checkpointing=true",
        "checkpoint_period=100",
        "enable_single_controller=True",
        "elastic_enabled=true",
        "elastic_timeout_seconds=300",
        "elastic_max_retries=6",
        "elastic_min_slice_count=2",
        "model_name=llama3-8b",
    ):
        assert key in args
    env = _env(trainer)
    assert env["JAX_PLATFORMS"] == "proxy"
    assert env["JAX_BACKEND_TARGET"] == "grpc://$(PATHWAYS_HEAD):29000"
    assert env["PATHWAYS_HEAD"] == {"fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/coordinator']"}}


def test_design_gke_workers() -> None:
    worker = _rjob(gke_elastic(), WORKER_REPLICATED_JOB)
    assert worker["replicas"] == GKE_SPEC.num_slices
    job = worker["template"]["spec"]
    vms = GKE_SPEC.vms_per_slice
    assert vms == 4  # 2x2x4 = 16 chips at 4 per VM
    assert job["completionMode"] == "Indexed"
    assert job["completions"] == job["parallelism"] == vms
    assert job["backoffLimit"] == GKE_SPEC.max_slice_restarts * vms
    pod = _pod(worker)
    assert pod["restartPolicy"] == "OnFailure"
    container = _container(pod, WORKER_CONTAINER)
    assert container["resources"]["limits"]["google.com/tpu"] == "4"
    assert {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
        "cloud.google.com/gke-tpu-topology": "2x2x4",
    }


def test_gke_failure_rules_keep_disruptions_off_the_restart_budget() -> None:
    """A disrupted head restarts the JobSet without spending maxRestarts; every other failure is counted."""
    manifest = gke_elastic()
    assert manifest["spec"]["failurePolicy"]["rules"] == [
        {
            "name": "headDisrupted",
            "action": "RestartJobSetAndIgnoreMaxRestarts",
            "onJobFailureReasons": ["PodFailurePolicy"],
            "targetReplicatedJobs": ["pathways-head"],
        },
        {"name": "sliceRestartsSpent", "action": "RestartJobSet", "targetReplicatedJobs": ["worker"]},
        {"name": "headFailed", "action": "RestartJobSet", "targetReplicatedJobs": ["pathways-head"]},
    ]
    head = _rjob(manifest, HEAD_REPLICATED_JOB)["template"]["spec"]
    assert head["podFailurePolicy"] == {
        "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
    }
    assert head["template"]["spec"]["restartPolicy"] == "Never"  # what podFailurePolicy requires
    worker = _rjob(manifest, WORKER_REPLICATED_JOB)["template"]["spec"]
    assert "podFailurePolicy" not in worker  # the API refuses it with restartPolicy OnFailure
    assert worker["template"]["spec"]["restartPolicy"] == "OnFailure"


def test_gke_slices_are_placed_one_per_node_pool() -> None:
    """xpk and google/pathways-job set JobSet's exclusive placement on the worker Job template: one slice per pool."""
    manifest = gke_elastic()
    worker = _rjob(manifest, WORKER_REPLICATED_JOB)
    assert worker["template"]["metadata"]["annotations"] == {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"
    }
    assert "annotations" not in worker["template"]["spec"]["template"].get("metadata", {})  # not the pod's
    head = _rjob(manifest, HEAD_REPLICATED_JOB)
    assert head["template"]["metadata"]["annotations"] == {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "kubernetes.io/hostname"
    }


KNOBS = dataclasses.replace(
    GKE_SPEC,
    pathways_server_image="us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.10.0",
    pathways_proxy_image="us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server@sha256:" + "a" * 64,
    head_node_pool="head-pool",
    service_account="maxtext-gcs",
    priority_class="high",
    queue_name="multislice-queue",
    image_pull_policy="Always",
    trainer_env={"ENABLE_PATHWAYS_PERSISTENCE": "1"},
    worker_env={"TPU_MIN_LOG_LEVEL": "2", "EXTRA_FLAG": "x"},
)


def test_gke_pathways_images_default_to_pinned_jax_tags() -> None:
    images = {c["name"]: c["image"] for pod in _pods(gke_elastic()) for c in _all_containers(pod)}
    assert images["pathways-proxy"] == "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:jax-0.10.2"
    assert images["pathways-rm"] == images[WORKER_CONTAINER]
    assert images[WORKER_CONTAINER] == "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.10.2"


def test_gke_knobs_render_where_xpk_puts_them() -> None:
    manifest = elastic_jobset(KNOBS, name="knobs-abcdef", namespace="training", labels=LABELS)
    assert manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "multislice-queue"
    head = _pod(_rjob(manifest, HEAD_REPLICATED_JOB))
    worker = _pod(_rjob(manifest, WORKER_REPLICATED_JOB))
    assert head["nodeSelector"] == {"cloud.google.com/gke-nodepool": "head-pool"}
    for pod in (head, worker):
        assert pod["serviceAccountName"] == "maxtext-gcs"
        assert pod["priorityClassName"] == "high"
        assert pod["volumes"] == [{"name": "shared-tmp", "hostPath": {"path": "/tmp", "type": "DirectoryOrCreate"}}]
        assert all(c["imagePullPolicy"] == "Always" for c in _all_containers(pod))
    for rjob in manifest["spec"]["replicatedJobs"]:  # the queue label is the JobSet's, not a pod's
        assert "kueue.x-k8s.io/queue-name" not in rjob["template"]["spec"]["template"]["metadata"]["labels"]
    images = {c["name"]: c["image"] for pod in (head, worker) for c in _all_containers(pod)}
    assert images["pathways-rm"] == images[WORKER_CONTAINER] == KNOBS.pathways_server_image
    assert images["pathways-proxy"] == KNOBS.pathways_proxy_image
    trainer = _container(head, HEAD_MAIN_CONTAINER)
    assert trainer["volumeMounts"] == [{"name": "shared-tmp", "mountPath": "/tmp"}]
    assert trainer["env"][-1] == {"name": "ENABLE_PATHWAYS_PERSISTENCE", "value": "1"}
    assert _env(trainer)["JAX_PLATFORMS"] == "proxy"
    container = _container(worker, WORKER_CONTAINER)
    assert container["volumeMounts"] == [{"name": "shared-tmp", "mountPath": "/tmp"}]
    names = [e["name"] for e in container["env"]]
    assert len(names) == len(set(names))  # an override replaces xpk's value in place, never a second entry
    env = _env(container)
    assert env["TPU_MIN_LOG_LEVEL"] == "2"
    assert env["TF_CPP_MIN_LOG_LEVEL"] == "0"
    assert env["MEGASCALE_GRPC_ENABLE_XOR_TRACER"] == "false"
    assert env["EXTRA_FLAG"] == "x"
    assert env["REPLICATED_JOB_NAME"] == {
        "fieldRef": {"fieldPath": "metadata.annotations['jobset.sigs.k8s.io/replicatedjob-name']"}
    }
    lint_manifest(manifest)


@pytest.mark.parametrize(
    ("fields", "rendered"),
    [
        ({"elastic_min_slice_count": -1}, 1),  # pause-resume: MaxText's guide and xpk's recipes, 1 of 3
        ({"elastic_min_slice_count": 1}, 3),  # replica-resize down to one slice: the other three may go
        ({"elastic_min_slice_count": 2}, 2),
        ({"elastic_min_slice_count": -1, "elastic_slices": 3}, 3),  # set: rendered as it is
    ],
)
def test_num_elastic_slices_is_the_slices_the_run_may_lose(fields: dict[str, Any], rendered: int) -> None:
    spec = dataclasses.replace(GKE_SPEC, **fields)
    lint(spec)
    proxy = _container(
        _pod(_rjob(elastic_jobset(spec, name="e", namespace="d", labels={}), HEAD_REPLICATED_JOB)),
        "pathways-proxy",
        init=True,
    )
    assert [a for a in proxy["args"] if a.startswith("--num_elastic_slices=")] == [f"--num_elastic_slices={rendered}"]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"elastic_slices": 0}, "elastic_slices"),  # 0 is xpk's "not elastic": the operator always runs elastic
        ({"elastic_slices": 5}, "elastic_slices"),  # more than the run has
        ({"elastic_slices": 1, "elastic_min_slice_count": 2}, "elastic_slices"),  # the proxy would end it first
        ({"stall_timeout_seconds": 300.0}, "stall_timeout"),  # equal to elastic_timeout_seconds: does not exceed it
        ({"stall_timeout_seconds": 120.0}, "stall_timeout"),
        ({"startup_timeout_seconds": 300.0}, "startup_timeout"),  # the start-up's wait for slices may last that long
        ({"startup_timeout_seconds": 0.0}, "startup_timeout"),
        ({"startup_timeout_seconds": float(2**31)}, "startup_timeout"),
        ({"workload_priority_class": "Not A Label"}, "workload_priority_class"),
    ],
)
def test_lint_refuses_elastic_slices_stall_timeout_and_priority_out_of_range(
    fields: dict[str, Any], field: str
) -> None:
    with pytest.raises(SpecError) as raised:
        lint(dataclasses.replace(GKE_SPEC, **fields))
    assert raised.value.field == field


def test_stall_timeout_lint_says_by_how_much() -> None:
    with pytest.raises(
        SpecError, match=r"120 s does not exceed elastic_timeout_seconds=300 \(it is 180 s short of that wait"
    ):
        lint(dataclasses.replace(GKE_SPEC, stall_timeout_seconds=120.0))
    lint(dataclasses.replace(GKE_SPEC, stall_timeout_seconds=301.0))


def test_startup_timeout_lint_names_it_and_the_wait_before_the_first_step() -> None:
    with pytest.raises(SpecError) as raised:
        lint(dataclasses.replace(GKE_SPEC, startup_timeout_seconds=240.0))
    assert str(raised.value) == (
        "startup_timeout: 240 s does not exceed elastic_timeout_seconds=300 (pathwaysutils' wait for slices before "
        "the first step may take that long, and the restore and compilation come after it): raise it above 300 s, "
        "or lower elastic_timeout_seconds"
    )
    with pytest.raises(SpecError, match=r"^startup_timeout: must be a positive number of seconds, got nan"):
        lint(dataclasses.replace(GKE_SPEC, startup_timeout_seconds=math.nan))
    # Shorter than the stall timeout is fine: the two clocks never run at once.
    lint(dataclasses.replace(GKE_SPEC, startup_timeout_seconds=301.0, stall_timeout_seconds=3600.0))


def test_kueue_labels_go_on_the_jobset_only() -> None:
    spec = dataclasses.replace(KNOBS, workload_priority_class="high-priority")
    manifest = elastic_jobset(spec, name="q-abcdef", namespace="training", labels=LABELS)
    labels = manifest["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "multislice-queue"
    assert labels["kueue.x-k8s.io/priority-class"] == "high-priority"
    for rjob in manifest["spec"]["replicatedJobs"]:
        pod_labels = rjob["template"]["spec"]["template"]["metadata"]["labels"]
        assert not any(k.startswith("kueue.x-k8s.io/") for k in pod_labels)
    job = JobSpec(image="img", command=["eval"], queue_name="multislice-queue", workload_priority_class="low")
    plain = plain_jobset(job, name="eval-abcdef", namespace="training", labels=LABELS, stage="evaluate")
    assert plain["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "multislice-queue"
    assert plain["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "low"
    with pytest.raises(SpecError) as raised:
        lint_job(dataclasses.replace(job, queue_name="Bad_Queue"))
    assert raised.value.field == "queue_name"


def test_gke_knobs_left_unset_render_nothing() -> None:
    manifest = gke_elastic()
    assert "kueue.x-k8s.io/queue-name" not in manifest["metadata"]["labels"]
    for pod in _pods(manifest):
        assert "serviceAccountName" not in pod and "priorityClassName" not in pod
        assert not any("imagePullPolicy" in c for c in _all_containers(pod))  # Kubernetes' default: pinned tags


def test_local_runtime_renders_the_gke_knobs_too() -> None:
    """The same manifest on both runtimes: the GKE knobs render on local exactly as on gke."""
    knobs = {f: getattr(KNOBS, f) for f in ("head_node_pool", "service_account", "priority_class", "queue_name")}
    local = dataclasses.replace(LOCAL_SPEC, **knobs, trainer_env={"A": "1"}, image_pull_policy="Never")
    as_gke = dataclasses.replace(local, runtime="gke", image=LOCAL_MAXTEXT_IMAGE, tpu_type="v5e", tpu_topology="4x4")
    assert elastic_jobset(local, name="a", namespace="d", labels={}) == elastic_jobset(
        as_gke, name="a", namespace="d", labels={}
    )


def _pods(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    return [_pod(rjob) for rjob in manifest["spec"]["replicatedJobs"]]


def _all_containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def test_local_runtime_renders_the_gke_jobset_with_local_defaults() -> None:
    """`runtime` chooses the cluster, not the shape: the local manifest is the GKE one for the same spec,
    with the local runtime's defaults for an unset image (the catalogue's MaxText stand-in) and v5e 4x4."""
    manifest = local_elastic()
    as_gke = dataclasses.replace(
        LOCAL_SPEC, runtime="gke", image=LOCAL_MAXTEXT_IMAGE, tpu_type="v5e", tpu_topology="4x4"
    )
    as_gke = dataclasses.replace(as_gke, trainer_env={"LOCAL_FAULT_X": "1"})
    lint(as_gke)
    assert manifest == elastic_jobset(as_gke, name=_name(LOCAL_SPEC), namespace="default", labels=LABELS)
    head_pod = _pod(_rjob(manifest, HEAD_REPLICATED_JOB))
    trainer = _container(head_pod, HEAD_MAIN_CONTAINER)
    assert trainer["args"] == [LOCAL_SPEC.config_file, *LOCAL_SPEC.maxtext_keys()]
    assert _env(trainer)["LOCAL_FAULT_X"] == "1"  # the trainer env: added last, on both runtimes
    worker_rjob = _rjob(manifest, WORKER_REPLICATED_JOB)
    assert worker_rjob["template"]["spec"]["completions"] == 4  # v5e 4x4: four hosts
    assert worker_rjob["template"]["spec"]["backoffLimit"] == LOCAL_SPEC.max_slice_restarts * 4
    assert "LOCAL_FAULT_X" not in _env(_container(_pod(worker_rjob), WORKER_CONTAINER))


@pytest.mark.parametrize("render", list(RENDERERS.values()), ids=list(RENDERERS))
def test_labels_on_jobset_and_every_pod_template(render: Any) -> None:
    manifest = render()
    labels = manifest["metadata"]["labels"]
    for key in (LABEL_DAG_ID, LABEL_TASK_ID, LABEL_RUN_ID, LABEL_MAP_INDEX, LABEL_STAGE):
        assert key in labels
    for rjob in manifest["spec"]["replicatedJobs"]:
        assert rjob["template"]["spec"]["template"]["metadata"]["labels"] == labels
    lint_manifest(manifest)


def test_elastic_labels_carry_run_name_and_stage() -> None:
    labels = gke_elastic()["metadata"]["labels"]
    assert labels[LABEL_RUN_NAME] == "llama3-nightly"
    assert labels[LABEL_STAGE] == "pretrain"


def test_plain_jobset_fields() -> None:
    manifest = gke_plain()
    spec = manifest["spec"]
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["main"]}
    assert spec["failurePolicy"]["maxRestarts"] == 0
    (rjob,) = spec["replicatedJobs"]
    assert (rjob["name"], rjob["replicas"]) == ("main", 1)
    job = rjob["template"]["spec"]
    assert (job["backoffLimit"], job["activeDeadlineSeconds"]) == (1, 3600)
    pod = _pod(rjob)
    assert pod["restartPolicy"] == "Never"
    assert pod["serviceAccountName"] == "training-runner"
    (container,) = pod["containers"]
    assert container["resources"] == {"limits": {"cpu": "8", "memory": "32G"}}
    assert container["env"] == [{"name": "JAX_PLATFORMS", "value": "tpu"}]


def test_plain_local_uses_local_image_and_command_as_given() -> None:
    (container,) = _pod(local_plain()["spec"]["replicatedJobs"][0])["containers"]
    assert container["image"] == "local"
    assert container["command"] == ["python", "-m", "elastic_training.local.workloads.evaluate", *EVAL_ARGS]
    env = _env(container)
    assert env["JAX_PLATFORMS"] == "cpu" and env["EXTRA"] == "1"


def test_manifests_do_not_alias() -> None:
    manifest = local_elastic()
    head = _container(_pod(_rjob(manifest, HEAD_REPLICATED_JOB)), HEAD_MAIN_CONTAINER)
    worker = _container(_pod(_rjob(manifest, WORKER_REPLICATED_JOB)), WORKER_CONTAINER)
    head["env"].append({"name": "ONLY_HEAD", "value": "1"})
    assert "ONLY_HEAD" not in _env(worker)
    assert "&id" not in yaml.safe_dump(gke_elastic())


def test_rendering_refuses_bad_names_and_labels() -> None:
    with pytest.raises(SpecError) as caught:
        elastic_jobset(LOCAL_SPEC, name="x" * (JOBSET_NAME_MAX + 1), namespace="default", labels={})
    assert caught.value.field == "name"
    with pytest.raises(SpecError) as caught:
        elastic_jobset(LOCAL_SPEC, name="ok", namespace="default", labels={LABEL_RUN_ID: "a:b"})
    assert caught.value.field == f"labels.{LABEL_RUN_ID}"


# ---- names ---------------------------------------------------------------------------------------------

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?)?$")
text = st.text(min_size=0, max_size=300)


def test_name_shape() -> None:
    name = _name(GKE_SPEC)
    assert re.fullmatch(r"llama3-nigh-[0-9a-f]{6}", name)
    assert _name(GKE_SPEC, attempt=2) == f"{name}-r2"
    assert jobset_name(dag_id="My_DAG", task_id="Pre.Train", run_id=RUN, map_index=0, attempt=0).startswith(
        "my-dag-pre-"
    )
    dated = jobset_name(dag_id="d", task_id="t", run_id="r", map_index=-1, attempt=0, prefix="2026-11-30-nightly")
    assert dated.startswith("run-2026-11-")
    assert jobset_name(dag_id="d", task_id="t", run_id="r", map_index=-1, attempt=0, prefix="__").startswith("run-")


def test_name_limit_fits_child_pod_names_and_the_coordinator_label() -> None:
    # The JobSet webhook: <jobset>-pathways-head-0-0-<5 random> must fit 63 characters; and JobSet labels
    # every Job and pod with the coordinator endpoint <jobset>-pathways-head-0-0.<jobset>, a label value.
    assert JOBSET_NAME_MAX == (63 - len("-pathways-head-0-0.")) // 2 == 22
    longest = "a" * JOBSET_NAME_MAX
    assert len(f"{longest}-pathways-head-0-0.{longest}") <= 63
    assert len(f"{longest}-pathways-head-0-0-abcde") <= 63


def test_a_name_too_long_for_its_coordinator_is_refused() -> None:
    manifest = elastic_jobset(GKE_SPEC, name=_name(GKE_SPEC), namespace="d", labels={})
    manifest["metadata"]["name"] = "a" * 23
    with pytest.raises(SpecError, match="too long for a coordinator"):
        lint_manifest(manifest)


@settings(max_examples=300, deadline=None)
@given(
    dag=text,
    task=text,
    run=text,
    map_index=st.integers(-1, 10**6),
    attempt=st.integers(0, 99),
    prefix=st.none() | text,
)
def test_name_properties(dag: str, task: str, run: str, map_index: int, attempt: int, prefix: str | None) -> None:
    name = jobset_name(dag_id=dag, task_id=task, run_id=run, map_index=map_index, attempt=attempt, prefix=prefix)
    assert len(name) <= JOBSET_NAME_MAX
    assert _DNS1035.match(name), name
    again = jobset_name(dag_id=dag, task_id=task, run_id=run, map_index=map_index, attempt=attempt, prefix=prefix)
    assert again == name
    other = jobset_name(dag_id=dag, task_id=task, run_id=run, map_index=map_index + 1, attempt=attempt, prefix=prefix)
    assert other != name
    if attempt:
        assert name.endswith(f"-r{attempt}")


@settings(max_examples=100, deadline=None)
@given(run=text, attempt=st.integers(0, 98))
def test_names_differ_per_attempt_and_fit_worker_pods(run: str, attempt: int) -> None:
    names = {jobset_name(dag_id="d", task_id="t", run_id=run, map_index=-1, attempt=a) for a in (attempt, attempt + 1)}
    assert len(names) == 2
    for name in names:
        spec = dataclasses.replace(GKE_SPEC, num_slices=64, tpu_topology="4x4x8")
        lint_manifest(elastic_jobset(spec, name=name, namespace="d", labels={}))


def test_attempt_out_of_range() -> None:
    with pytest.raises(ValueError):
        jobset_name(dag_id="d", task_id="t", run_id="r", map_index=-1, attempt=-1)


@settings(max_examples=300, deadline=None)
@given(value=text)
def test_label_values_always_valid_and_injective(value: str) -> None:
    safe = label_value(value)
    assert len(safe) <= 63 and _LABEL_VALUE.match(safe), safe
    assert label_value(value) == safe
    if safe == value:
        return
    assert label_value(value + "x") != safe


@settings(max_examples=200, deadline=None)
@given(dag=text, task=text, run=text, map_index=st.integers(-1, 10**9))
def test_identity_labels_valid(dag: str, task: str, run: str, map_index: int) -> None:
    labels = identity_labels(dag_id=dag, task_id=task, run_id=run, map_index=map_index)
    assert set(labels) == {LABEL_DAG_ID, LABEL_TASK_ID, LABEL_RUN_ID, LABEL_MAP_INDEX}
    for value in labels.values():
        assert len(value) <= 63 and _LABEL_VALUE.match(value)
    assert labels == identity_labels(dag_id=dag, task_id=task, run_id=run, map_index=map_index)


def test_identity_labels_keep_readable_values() -> None:
    labels = identity_labels(dag_id="nightly_pretrain", task_id="group.pretrain", run_id="manual_1", map_index=3)
    assert labels[LABEL_DAG_ID] == "nightly_pretrain"
    assert labels[LABEL_TASK_ID] == "group.pretrain"
    assert labels[LABEL_MAP_INDEX] == "3"
    assert identity_labels(dag_id="d", task_id="t", run_id="r", map_index=-1)[LABEL_MAP_INDEX] == "none"
    assert LABELS[LABEL_RUN_ID].startswith("scheduled__2026-11-30T00_00_00_00_00-")


def test_label_selector() -> None:
    assert label_selector({"b": "2", "a": "1"}) == "a=1,b=2"


# ---- user manifests and job specs -------------------------------------------------------------------------


def _broken(path: str, value: Any, manifest: dict[str, Any] | None = None) -> dict[str, Any]:
    manifest = local_plain() if manifest is None else manifest
    target: Any = manifest
    *parents, last = path.split(".")
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    if value is _DELETE:
        del target[int(last) if last.isdigit() else last]
    else:
        target[int(last) if last.isdigit() else last] = value
    return manifest


_DELETE = object()
RJOB = "spec.replicatedJobs.0"


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("apiVersion", "jobset.x-k8s.io/v1alpha1", "apiVersion"),
        ("kind", "Job", "kind"),
        ("metadata.name", "9starts-with-digit", "metadata.name"),
        ("metadata.labels.x", "bad value", "metadata.labels.x"),
        ("spec", _DELETE, "spec"),
        ("spec.replicatedJobs", [], "spec.replicatedJobs"),
        (f"{RJOB}.name", "Main", "spec.replicatedJobs[0].name"),
        (f"{RJOB}.replicas", 0, "spec.replicatedJobs[0].replicas"),
        (f"{RJOB}.template", {}, "spec.replicatedJobs[0].template.spec"),
        (f"{RJOB}.template.spec.template", {}, "spec.replicatedJobs[0].template.spec.template.spec"),
        (
            f"{RJOB}.template.spec.template.spec.containers",
            [],
            "spec.replicatedJobs[0].template.spec.template.spec.containers",
        ),
        (
            f"{RJOB}.template.spec.template.spec.containers.0.image",
            "",
            "spec.replicatedJobs[0].template.spec.template.spec.containers[0].image",
        ),
        ("spec.successPolicy.targetReplicatedJobs", ["nope"], "spec.successPolicy.targetReplicatedJobs"),
        ("spec.coordinator", {"replicatedJob": "nope"}, "spec.coordinator.replicatedJob"),
    ],
)
def test_lint_manifest(path: str, value: Any, field: str) -> None:
    lint_manifest(local_plain())
    with pytest.raises(SpecError) as caught:
        lint_manifest(_broken(path, value))
    assert caught.value.field == field


def test_lint_manifest_duplicate_and_too_long_names() -> None:
    manifest = local_plain()
    manifest["spec"]["replicatedJobs"].append(manifest["spec"]["replicatedJobs"][0])
    with pytest.raises(SpecError, match="used twice"):
        lint_manifest(manifest)
    manifest = local_plain()
    manifest["metadata"]["name"] = "a" * 55
    with pytest.raises(SpecError) as caught:
        lint_manifest(manifest)
    assert caught.value.field == "metadata.name" and "63" in caught.value.message


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"command": []}, "command"),
        ({"command": [""]}, "command"),
        ({"command": "python -m x"}, "command"),
        ({"command": ["python", 3]}, "command[1]"),
        ({"args": ["ok", None]}, "args[1]"),
        ({"env": {"BAD NAME": "1"}}, "env"),
        ({"env": {"1=2": "1"}}, "env"),
        ({"env": {"OK": 1}}, "env.OK"),
        ({"image": "bad image"}, "image"),
        ({"image": ""}, "image"),
        ({"backoff_limit": -1}, "backoff_limit"),
        ({"active_deadline_seconds": 0}, "active_deadline_seconds"),
        ({"resources": {"cpu": 8}}, "resources"),
        ({"service_account": "Bad_SA"}, "service_account"),
        ({"runtime": "k8s"}, "runtime"),
    ],
)
def test_lint_job(changes: dict[str, Any], field: str) -> None:
    job = JobSpec(image="maxtext:1", command=["python3", "-m", "x"])
    lint_job(job)
    with pytest.raises(SpecError) as caught:
        lint_job(dataclasses.replace(job, **changes))
    assert caught.value.field == field


def test_lint_job_local_ignores_image() -> None:
    lint_job(JobSpec(image="", command=["python", "-m", "elastic_training.local.workloads.evaluate"], runtime="local"))


# -- the rendered GKE JobSet against the upstream JobSet CRD's OpenAPI schema (tests/operators/data/SOURCE.md) --

CRD_SCHEMA = Path(__file__).parent / "data" / "jobset-v0.12.0-openapi-v1alpha2.yaml"
INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def _closed(schema: Any) -> Any:
    """The schema with unknown fields refused, as the API server's strict field validation does."""
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {key: _closed(value) for key, value in schema.items()}
    open_object = "additionalProperties" in closed or closed.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in closed and not open_object:
        closed["additionalProperties"] = False
    return closed


@pytest.fixture(scope="module")
def crd_validator() -> Any:
    jsonschema = pytest.importorskip("jsonschema")
    formats = jsonschema.FormatChecker()
    for name, (low, high) in INT_RANGES.items():
        formats.checks(name)(lambda value, low=low, high=high: not isinstance(value, int) or low <= value <= high)
    schema = _closed(yaml.safe_load(CRD_SCHEMA.read_text()))
    return jsonschema.Draft7Validator(schema, format_checker=formats)


def _schema_errors(validator: Any, manifest: dict[str, Any]) -> list[str]:
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(manifest)]
    spec = manifest["spec"]  # the one CEL rule that is not about updates
    if spec.get("startupPolicy", {}).get("startupPolicyOrder") == "InOrder":
        errors += [f"{r['name']}: dependsOn with InOrder" for r in spec["replicatedJobs"] if "dependsOn" in r]
    return errors


SCHEMA_SPECS = {
    "v5e-4x4-1-slice": dataclasses.replace(
        GKE_SPEC, num_slices=1, tpu_type="v5e", tpu_topology="4x4", elastic_min_slice_count=-1
    ),
    "v5e-4x4-3-slices-all-knobs": dataclasses.replace(KNOBS, num_slices=3, tpu_type="v5e", tpu_topology="4x4"),
    "v6e-2x4-3-slices": dataclasses.replace(GKE_SPEC, num_slices=3, tpu_type="v6e", tpu_topology="2x4"),
    "v6e-1x1-all-knobs": dataclasses.replace(
        KNOBS, num_slices=2, tpu_type="v6e", tpu_topology="1x1", elastic_min_slice_count=1
    ),
    "v5p-2x2x4-all-knobs": KNOBS,
}


@pytest.mark.parametrize("spec", list(SCHEMA_SPECS.values()), ids=list(SCHEMA_SPECS))
def test_gke_jobset_matches_the_upstream_crd_schema(crd_validator: Any, spec: ElasticRunSpec) -> None:
    manifest = elastic_jobset(spec, name=_name(spec), namespace="training", labels=LABELS)
    assert _schema_errors(crd_validator, manifest) == []


@pytest.mark.parametrize(
    ("path", "value", "error"),
    [
        ("spec.failurePolicy.rules.0.action", "Restart", "spec.failurePolicy.rules.0.action"),
        ("spec.failurePolicy.rules.1.name", _DELETE, "'name' is a required property"),
        ("spec.replicatedJobs.0.template.spec.podFailurePolicy.rules.0.onPodConditions", "DisruptionTarget", "onPod"),
        ("spec.replicatedJobs.1.template.spec.backoffLimit", 2**31, "backoffLimit"),
        ("spec.replicatedJobs.1.replicas", "3", "replicas"),
        ("spec.replicatedJobs.1.template.spec.template.spec.containers.0.name", _DELETE, "'name' is a required"),
        ("spec.replicatedJobs.0.template.spec.template.spec.volumes.0.hostPath.path", _DELETE, "'path' is a required"),
        ("spec.replicatedJobs.1.template.spec.template.spec.priorityClass", "high", "priorityClass"),  # a typo
        ("spec.startupPolicy.startupPolicyOrder", "Sequential", "startupPolicyOrder"),
        ("spec.network.enableDnsHostnames", True, "enableDnsHostnames"),
    ],
)
def test_the_crd_schema_refuses_what_the_api_refuses(crd_validator: Any, path: str, value: Any, error: str) -> None:
    """The check can fail. (The CRD carries no enums of batch/v1 and core/v1, e.g. restartPolicy: those the API
    server checks when the JobSet controller creates the Job, too late for a create-time test.)"""
    manifest = elastic_jobset(KNOBS, name=_name(KNOBS), namespace="training", labels=LABELS)
    broken = _broken(path, value, manifest)
    errors = _schema_errors(crd_validator, broken)
    assert errors and any(error in e for e in errors), errors


def test_a_plain_job_can_be_placed_on_a_tpu_node_pool() -> None:
    job = JobSpec(
        image="us-docker.pkg.dev/p/r/maxtext-eval:1",
        command=["python3", "-m", "maxtext.eval.runner.run"],
        resources={"google.com/tpu": "4"},
        node_selector={"cloud.google.com/gke-tpu-topology": "2x2"},
        tolerations=[{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    body = plain_jobset(job, name="evaluate-abc123", namespace="default", labels={}, stage="evaluate")
    pod = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-tpu-topology": "2x2"}
    assert pod["tolerations"] == [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
    bare = plain_jobset(
        dataclasses.replace(job, node_selector={}, tolerations=()), name="e", namespace="d", labels={}, stage="s"
    )
    assert "nodeSelector" not in bare["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    with pytest.raises(SpecError, match=r"node_selector: 'bad key!' is not a label key"):
        lint_job(dataclasses.replace(job, node_selector={"bad key!": "x"}))
    with pytest.raises(SpecError, match=r"tolerations\[0\]: must map toleration fields to strings"):
        lint_job(dataclasses.replace(job, tolerations=[{"key": 1}]))  # type: ignore[dict-item]
