"""The rendered manifests are accepted by a Kubernetes API with JobSet validation (the local cluster).

The JobSets are created suspended, so the controller makes their child Jobs (whose names the upstream
webhook's length rule is about) but no pod process starts: no training is needed to see the API accept the
shape. Everything else is the manifest exactly as rendered.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from elastic_training.operators.constants import (
    HEAD_REPLICATED_JOB,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    LABEL_GKE_TPU_TOPOLOGY,
    LABEL_JOBSET_NAME,
    WORKER_REPLICATED_JOB,
)
from elastic_training.operators.kube_names import identity_labels, jobset_name, label_selector
from elastic_training.operators.manifests import JobSpec, elastic_jobset, plain_jobset
from elastic_training.operators.spec import LOCAL_MAXTEXT_IMAGE, ElasticRunSpec, lint
from tests.support.local_cluster import K8s
from tests.support.waiting import wait_for

# GKE-like node pools, so the rendered JobSet's pods schedule as on GKE (four v5e-16 pools and cpu-np).
CLUSTER_DESCRIPTION = "v5e-small"
UPSTREAM = True  # the real kube-apiserver, JobSet and Kueue (issue 51)
NAMESPACE = "default"
# The longest names the operator makes, so the cluster checks the 63-character child names for real.
DAG = "a-very-long-dag-id-for-the-nightly-pretraining-pipeline"
RUN = "scheduled__2026-11-30T00:00:00.123456+00:00"


def _kept(rendered: Any, stored: Any) -> bool:
    """Whether ``stored`` holds every field of ``rendered`` with its value (fields ``stored`` adds are defaults)."""
    if isinstance(rendered, dict):
        return isinstance(stored, dict) and all(k in stored and _kept(v, stored[k]) for k, v in rendered.items())
    if isinstance(rendered, list):
        return isinstance(stored, list) and len(stored) == len(rendered) and all(map(_kept, rendered, stored))
    return bool(rendered == stored)


def _create_and_delete(k8s: K8s, manifest: dict[str, Any], child_jobs: list[str]) -> None:
    body = {**manifest, "spec": {**manifest["spec"], "suspend": True}}
    name = manifest["metadata"]["name"]
    api = k8s.custom
    created = api.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, body)
    try:
        assert created["metadata"]["name"] == name
        assert created["metadata"]["labels"] == manifest["metadata"]["labels"]
        # kube-apiserver keeps every rendered field and adds the CRD schema's defaults (groupName, ...)
        assert _kept(manifest["spec"]["replicatedJobs"], created["spec"]["replicatedJobs"]), "a rendered field changed"
        assert created["spec"]["replicatedJobs"][0]["groupName"] == "default"
        found = api.list_namespaced_custom_object(
            JOBSET_GROUP,
            JOBSET_VERSION,
            NAMESPACE,
            JOBSET_PLURAL,
            label_selector=label_selector(manifest["metadata"]["labels"]),
        )
        assert [item["metadata"]["name"] for item in found["items"]] == [name]

        def jobs() -> list[str] | None:
            listed = k8s.batch.list_namespaced_job(NAMESPACE, label_selector=f"{LABEL_JOBSET_NAME}={name}")
            names = sorted(job.metadata.name for job in listed.items)
            return names if names == sorted(child_jobs) else None

        wait_for(jobs, timeout=60)
    finally:
        api.delete_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, name, propagation_policy="Foreground"
        )

    def gone() -> bool | None:
        try:
            api.get_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, name)
        except ApiException as error:
            return True if error.status == 404 else None
        return None

    wait_for(gone, timeout=60)


def test_local_elastic_jobset_is_accepted(k8s: K8s, tmp_path: Path) -> None:
    spec = ElasticRunSpec(
        run_name="cluster-accepts-this-run-name-which-is-rather-long",
        base_output_directory=str(tmp_path),
        steps=20,
        checkpoint_period=5,
        num_slices=3,
        runtime="local",
        max_slice_restarts=2,
        trainer_env={"KNOB": "1"},
    )
    lint(spec)
    name = jobset_name(dag_id=DAG, task_id="pretrain", run_id=RUN, map_index=-1, attempt=12, prefix=spec.run_name)
    labels = identity_labels(dag_id=DAG, task_id="pretrain", run_id=RUN, map_index=-1)
    manifest = elastic_jobset(spec, name=name, namespace=NAMESPACE, labels=labels)
    children = [f"{name}-{HEAD_REPLICATED_JOB}-0"] + [f"{name}-{WORKER_REPLICATED_JOB}-{i}" for i in range(3)]
    _create_and_delete(k8s, manifest, children)


def test_gke_shaped_elastic_jobset_is_accepted(k8s: K8s, tmp_path: Path) -> None:
    """The GKE manifest too: the API takes native sidecars, TPU limits and selectors (no pod would schedule)."""
    spec = ElasticRunSpec(
        run_name="gke-shape",
        base_output_directory="gs://ml-runs/x",
        steps=20,
        checkpoint_period=5,
        num_slices=2,
        image="us-docker.pkg.dev/p/r/maxtext:1",
        tpu_type="v5p",
        tpu_topology="2x2x2",
        # Every GKE knob, so the API takes the failure rules, podFailurePolicy, hostPath volumes and pull policy.
        service_account="maxtext-gcs",
        priority_class="high",
        queue_name="multislice-queue",
        image_pull_policy="IfNotPresent",
        trainer_env={"ENABLE_PATHWAYS_PERSISTENCE": "1"},
        worker_env={"TPU_MIN_LOG_LEVEL": "1"},
    )
    lint(spec)
    name = jobset_name(dag_id=DAG, task_id="pretrain", run_id=RUN, map_index=7, attempt=0, prefix=spec.run_name)
    labels = identity_labels(dag_id=DAG, task_id="pretrain", run_id=RUN, map_index=7)
    manifest = elastic_jobset(dataclasses.replace(spec), name=name, namespace=NAMESPACE, labels=labels)
    children = [f"{name}-{HEAD_REPLICATED_JOB}-0"] + [f"{name}-{WORKER_REPLICATED_JOB}-{i}" for i in range(2)]
    _create_and_delete(k8s, manifest, children)


def test_local_plain_jobset_is_accepted(k8s: K8s, tmp_path: Path) -> None:
    job = JobSpec(
        image="local",
        command=[
            "python",
            "-m",
            "elastic_training.local.workloads.evaluate",
            f"base_output_directory={tmp_path}",
            "run_name=x",
        ],
        runtime="local",
        active_deadline_seconds=600,
    )
    name = jobset_name(dag_id=DAG, task_id="evaluate", run_id=RUN, map_index=-1, attempt=3)
    labels = identity_labels(dag_id=DAG, task_id="evaluate", run_id=RUN, map_index=-1)
    manifest = plain_jobset(job, name=name, namespace=NAMESPACE, labels=labels, stage="evaluate")
    _create_and_delete(k8s, manifest, [f"{name}-main-0"])


def test_local_plain_jobset_runs_to_completion(k8s: K8s, tmp_path: Path) -> None:
    """The plain one-job shape (evaluation, synthesis), unsuspended: the real Job and JobSet controllers complete it."""
    marker = tmp_path / "ran"
    job = JobSpec(
        image="local",
        command=["python", "-c", f"open({str(marker)!r}, 'w').write('ok')"],
        runtime="local",
        active_deadline_seconds=600,
    )
    name = jobset_name(dag_id="d", task_id="evaluate", run_id="plain", map_index=-1, attempt=0)
    labels = identity_labels(dag_id="d", task_id="evaluate", run_id="plain", map_index=-1)
    manifest = plain_jobset(job, name=name, namespace=NAMESPACE, labels=labels, stage="evaluate")
    api = k8s.custom
    api.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, manifest)
    try:

        def terminal() -> str | None:
            got = api.get_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, name)
            return got.get("status", {}).get("terminalState") or None

        assert wait_for(terminal, timeout=120, interval=0.5) == "Completed"
        assert marker.read_text() == "ok"
        job_status = k8s.batch.read_namespaced_job_status(f"{name}-main-0", NAMESPACE).status
        assert (job_status.succeeded, job_status.failed or 0) == (1, 0)
    finally:
        api.delete_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, name, propagation_policy="Foreground"
        )


def test_local_and_gke_render_the_same_bytes(tmp_path: Path) -> None:
    """`runtime` chooses the cluster, not the shape: one spec, one JobSet, whichever runtime runs it."""
    base = ElasticRunSpec(
        run_name="same-bytes",
        base_output_directory="gs://ml-runs/x",
        steps=20,
        checkpoint_period=5,
        num_slices=3,
        image="us-docker.pkg.dev/p/r/maxtext:2026-11-30",
        tpu_type="v5e",
        tpu_topology="4x4",
        max_slice_restarts=2,
        trainer_env={"ENABLE_PATHWAYS_PERSISTENCE": "1"},
        queue_name="team-a",
    )
    name = jobset_name(dag_id=DAG, task_id="pretrain", run_id=RUN, map_index=-1, attempt=0, prefix=base.run_name)
    labels = identity_labels(dag_id=DAG, task_id="pretrain", run_id=RUN, map_index=-1)
    rendered = {}
    for runtime in ("gke", "local"):
        spec = dataclasses.replace(base, runtime=runtime)
        lint(spec)
        manifest = elastic_jobset(spec, name=name, namespace=NAMESPACE, labels=labels)
        rendered[runtime] = json.dumps(manifest, sort_keys=False).encode()
    assert rendered["local"] == rendered["gke"]
    worker = json.loads(rendered["local"])["spec"]["replicatedJobs"][1]
    # v5e 4x4: 16 chips, 4 per VM, so 4 worker pods a slice, and the budget counts pods of whole slices.
    assert worker["template"]["spec"]["completions"] == 4
    assert worker["template"]["spec"]["backoffLimit"] == 2 * 4


def test_local_defaults_are_the_seeds_v5e_16_slice(tmp_path: Path) -> None:
    spec = ElasticRunSpec(
        run_name="defaults",
        base_output_directory=str(tmp_path),
        steps=6,
        checkpoint_period=3,
        num_slices=2,
        runtime="local",
    )
    lint(spec)
    manifest = elastic_jobset(spec, name="defaults-abcdef", namespace=NAMESPACE, labels={})
    head, worker = manifest["spec"]["replicatedJobs"]
    [trainer] = head["template"]["spec"]["template"]["spec"]["containers"]
    assert trainer["image"] == LOCAL_MAXTEXT_IMAGE
    assert trainer["command"] == ["python3", "-m", "maxtext.trainers.pre_train.train"]
    assert worker["template"]["spec"]["completions"] == 4
    assert worker["template"]["spec"]["template"]["spec"]["nodeSelector"][LABEL_GKE_TPU_TOPOLOGY] == "4x4"


@pytest.mark.slow
def test_local_elastic_jobset_trains_to_completion(k8s: K8s, tmp_path: Path) -> None:
    """The rendered manifest, unsuspended, runs the MaxText stand-in and 2 slices of 4 Pathways workers."""
    spec = ElasticRunSpec(
        run_name="smoke",
        base_output_directory=str(tmp_path),
        steps=6,
        checkpoint_period=3,
        num_slices=2,
        runtime="local",
        tpu_type="v5e",
        tpu_topology="4x4",
    )
    lint(spec)
    name = jobset_name(dag_id="d", task_id="t", run_id="smoke", map_index=-1, attempt=0, prefix=spec.run_name)
    labels = identity_labels(dag_id="d", task_id="t", run_id="smoke", map_index=-1)
    manifest = elastic_jobset(spec, name=name, namespace=NAMESPACE, labels=labels)
    api = k8s.custom
    api.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, manifest)
    try:

        def terminal() -> str | None:
            got = api.get_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, name)
            state = got.get("status", {}).get("terminalState")
            return str(state) if state else None

        def workers() -> int | None:
            selector = f"{LABEL_JOBSET_NAME}={name},jobset.sigs.k8s.io/replicatedjob-name=worker"
            count = len(k8s.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items)
            return count if count == 8 else None

        assert wait_for(workers, timeout=60) == 8  # 2 slices of v5e 4x4: 4 hosts each
        assert wait_for(terminal, timeout=280, interval=1.0) == "Completed"
        steps = {p.name for p in Path(spec.checkpoint_directory).iterdir() if p.name.isdigit()}
        assert str(spec.target_step) in steps
    finally:
        api.delete_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, NAMESPACE, JOBSET_PLURAL, name, propagation_policy="Foreground"
        )
