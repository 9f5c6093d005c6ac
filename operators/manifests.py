"""JobSet manifests: the elastic Pathways JobSet and the plain one-job JobSet, rendered and then linted.

The elastic JobSet follows xpk's Pathways template (`xpk: src/xpk/templates/pathways_workload_create.yaml.j2`,
`commands/workload.py:_generate_pathways_workload_yaml`) with the fixes of docs/architecture.md §3:
`failurePolicy.maxRestarts` is explicit (xpk omits it, so its `--max-restarts` is silently 0 for Pathways),
the worker Job's `backoffLimit` is `max_slice_restarts * vms_per_slice` (xpk's elastic formula), and the
JobSet carries the Airflow identity labels the operator adopts it by.

The worker ReplicatedJob's Job template carries `alpha.jobset.sigs.k8s.io/exclusive-topology:
cloud.google.com/gke-nodepool`, as xpk renders it (`src/xpk/core/scheduling.py`
`ONE_TO_ONE_REPLICA_NODE_POOL_ASSIGNMENT_ANNOTATION`, at 367c838) and google/pathways-job sets it
(`internal/controller/pathwaysjob_controller.go` `MakeWorkerJob`, at c0cc759; there on the pod template). JobSet
reads it from the JobSet or the ReplicatedJob template (`api/jobset/v1alpha2/jobset_types.go` `ExclusiveKey`,
`pkg/controllers/jobset_controller.go` `labelAndAnnotateObject`, at 08dfbdf) and places each child Job, one slice,
alone in one node pool.

The GKE failure policy follows JobSet's rules (`api/jobset/v1alpha2/jobset_types.go` `FailurePolicyRule`) and its
host-maintenance example (`site/static/examples/failure-policy/host-maintenance-event-model.yaml`): the head Job's
`podFailurePolicy` turns a `DisruptionTarget` pod into the Job failure reason `PodFailurePolicy`, which the first
rule restarts with `RestartJobSetAndIgnoreMaxRestarts`. Workers get no `podFailurePolicy`: Kubernetes refuses it
unless `restartPolicy` is `Never` (kubernetes `pkg/apis/batch/validation/validation.go`), and Pathways workers
restart `OnFailure`. The GKE knobs (Pathways images, `/tmp` mount, xpk's worker env, node pool, service account,
priority class, Kueue queue, pull policy, extra env) are compared with xpk field by field in architecture §3.1.

The `local` runtime renders the very same JobSet (the same bytes for the same spec): `runtime` chooses the
cluster and what its images mean, not the shape. The local cluster's kubelet runs the MaxText image's
trainer command and the Pathways images through its image catalogue (local/nodeagent/images.py); the local
runtime only defaults the image, TPU type and topology when the spec leaves them unset (`operators.spec`:
`LOCAL_MAXTEXT_IMAGE`, `LOCAL_TPU_TYPE` v5e, `LOCAL_TPU_TOPOLOGY` 2x2). `operators/` never imports `local/`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from elastic_training.operators.constants import (
    ANNOTATION_COORDINATOR,
    ANNOTATION_EXCLUSIVE_TOPOLOGY,
    HEAD_MAIN_CONTAINER,
    HEAD_REPLICATED_JOB,
    JOBSET_KIND,
    LABEL_GKE_NODEPOOL,
    LABEL_GKE_TPU_ACCELERATOR,
    LABEL_GKE_TPU_TOPOLOGY,
    LABEL_HOSTNAME,
    LABEL_JOB_INDEX,
    LABEL_JOBSET_NAME,
    LABEL_KUEUE_PRIORITY_CLASS,
    LABEL_KUEUE_QUEUE_NAME,
    LABEL_REPLICATED_JOB_NAME,
    LABEL_REPLICATED_JOB_REPLICAS,
    LABEL_RUN_NAME,
    LABEL_STAGE,
    TPU_RESOURCE,
    WORKER_CONTAINER,
    WORKER_REPLICATED_JOB,
)
from elastic_training.operators.image_reference import image_reference_error
from elastic_training.operators.kube_names import (
    check_jobset_name,
    check_labels,
    check_namespace,
    label_value,
)
from elastic_training.operators.manifest_lint import API_VERSION, is_int_in, lint_manifest
from elastic_training.operators.shown import shown
from elastic_training.operators.spec import (
    DEFAULT_HEAD_NODE_POOL,
    INT32_MAX,
    MAXTEXT_TRAIN_MODULE,
    ElasticRunSpec,
    Runtime,
    SpecError,
    check_runtime,
    is_dns1123_label,
)
from elastic_training.operators.spec import (
    PATHWAYS_PROXY_IMAGE as PATHWAYS_PROXY_IMAGE,
)
from elastic_training.operators.spec import (
    PATHWAYS_SERVER_IMAGE as PATHWAYS_SERVER_IMAGE,
)

PLAIN_REPLICATED_JOB: Final = "main"
PLAIN_CONTAINER: Final = "main"

# Pathways settings as xpk renders them (commands/workload.py, parser/workload.py); the images' defaults are pinned
# in operators.spec (PATHWAYS_SERVER_IMAGE, PATHWAYS_PROXY_IMAGE, re-exported here).
PATHWAYS_DEFAULT_SCRATCH: Final = "gs://cloud-pathways-staging/tmp"
PATHWAYS_PROXY_PORT: Final = 29000
PATHWAYS_RM_PORT: Final = 29001
PATHWAYS_WORKER_PORT: Final = 29005
HEAD_NODE_POOL: Final = DEFAULT_HEAD_NODE_POOL
# Host /tmp shared by the trainer, the workers and any sidecar, as xpk and pathways-job mount it.
SHARED_TMP_VOLUME: Final[Mapping[str, Any]] = {
    "name": "shared-tmp",
    "hostPath": {"path": "/tmp", "type": "DirectoryOrCreate"},
}
SHARED_TMP_MOUNT: Final[Mapping[str, str]] = {"name": "shared-tmp", "mountPath": "/tmp"}
# xpk's worker env values (pathways_workload_create.yaml.j2); `worker_env` may replace them.
WORKER_DEFAULT_ENV: Final[Mapping[str, str]] = {
    "TPU_MIN_LOG_LEVEL": "0",
    "TF_CPP_MIN_LOG_LEVEL": "0",
    "MEGASCALE_GRPC_ENABLE_XOR_TRACER": "false",
}
LABEL_KUEUE_QUEUE: Final = LABEL_KUEUE_QUEUE_NAME

# The GKE JobSet's failure policy, written out (docs/architecture.md §3, "Failure policy"). The head Job turns a
# disruption of its pod (condition DisruptionTarget: a drain for maintenance or an upgrade, a preemption, a
# taint eviction) into the Job failure reason PodFailurePolicy, which JobSet restarts without spending
# maxRestarts. Workers cannot: podFailurePolicy needs restartPolicy Never, and Pathways workers restart OnFailure.
POD_FAILURE_REASON: Final = "PodFailurePolicy"
RULE_HEAD_DISRUPTED: Final = "headDisrupted"
RULE_SLICE_RESTARTS_SPENT: Final = "sliceRestartsSpent"
RULE_HEAD_FAILED: Final = "headFailed"
HEAD_POD_FAILURE_POLICY: Final[Mapping[str, Any]] = {
    "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
}
WORKER_TERMINATION_GRACE_SECONDS: Final = 30

# The local runtime's plain JobSets (eval, synth): the image whose command the local cluster runs as written.
LOCAL_IMAGE: Final = "local"
LOCAL_TERMINATION_GRACE_SECONDS: Final = 5

# An env var name as Kubernetes validates it without the RelaxedEnvironmentVariableValidation gate (apimachinery
# validation.IsEnvVarName: letters, digits, '-', '.', '_', not starting with a digit); the relaxed rule (any
# printable but '=') is not on every cluster, so the strict one is held.
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*\Z")


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _value_env(env: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"name": name, "value": value} for name, value in env.items()]


def _local_env(extra: Mapping[str, str] | None) -> list[dict[str, Any]]:
    """The environment every local container gets, as local/workloads expects it."""
    return [
        _field_env("JOBSET_NAME", f"metadata.labels['{LABEL_JOBSET_NAME}']"),
        _field_env("POD_NAMESPACE", "metadata.namespace"),
        _field_env("POD_NAME", "metadata.name"),
        {"name": "JAX_PLATFORMS", "value": "cpu"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        *_value_env(extra or {}),
    ]


def _job_labels(labels: Mapping[str, str], spec_run_name: str | None, stage: str) -> dict[str, str]:
    merged = dict(labels)
    if spec_run_name is not None:
        merged[LABEL_RUN_NAME] = label_value(spec_run_name)
    merged[LABEL_STAGE] = label_value(stage)
    return merged


def _replicated_job(
    name: str,
    *,
    replicas: int,
    pods: int,
    backoff_limit: int,
    labels: Mapping[str, str],
    pod_spec: dict[str, Any],
    job_annotations: Mapping[str, str] | None = None,
    active_deadline_seconds: int | None = None,
    pod_failure_policy: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    job_spec: dict[str, Any] = {
        "backoffLimit": backoff_limit,
        "completionMode": "Indexed",
        "completions": pods,
        "parallelism": pods,
    }
    if active_deadline_seconds is not None:
        job_spec["activeDeadlineSeconds"] = active_deadline_seconds
    if pod_failure_policy is not None:
        job_spec["podFailurePolicy"] = pod_failure_policy
    job_spec["template"] = {"metadata": {"labels": dict(labels)}, "spec": pod_spec}
    template: dict[str, Any] = {}
    if job_annotations:
        template["metadata"] = {"annotations": dict(job_annotations)}
    template["spec"] = job_spec
    return {"name": name, "replicas": replicas, "template": template}


def _jobset(name: str, namespace: str, labels: Mapping[str, str], spec: dict[str, Any]) -> dict[str, Any]:
    # A JSON round trip, not deepcopy (which keeps shared parts shared): env entries and label maps used in
    # several places while building must not alias in the result, and the manifest is plain JSON data.
    manifest: dict[str, Any] = json.loads(
        json.dumps(
            {
                "apiVersion": API_VERSION,
                "kind": JOBSET_KIND,
                "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
                "spec": spec,
            }
        )
    )
    return manifest


def elastic_jobset(
    spec: ElasticRunSpec,
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    stage: str = "pretrain",
) -> dict[str, Any]:
    """The Pathways elastic JobSet of `spec` (docs/architecture.md §3), the same for GKE and the local cluster.

    `labels` (usually `identity_labels(...)`) plus the run-name and stage labels go on the JobSet and on
    every pod template. `runtime` chooses the cluster, not the shape: both runtimes get the same bytes for the
    same spec (the local runtime defaults an unset image and TPU shape). The spec must have passed `lint`.
    """
    check_jobset_name(name)
    check_namespace(namespace)
    check_labels(labels)
    all_labels = _job_labels(labels, spec.run_name, stage)
    replicated_jobs = _elastic_replicated_jobs(spec, all_labels)
    failure_policy: dict[str, Any] = {
        "restartStrategy": "Recreate",
        "maxRestarts": spec.jobset_max_restarts,
        "rules": gke_failure_rules(),
    }
    jobset_labels = dict(all_labels)
    jobset_labels.update(kueue_labels(spec.queue_name, spec.workload_priority_class))
    manifest = _jobset(
        name,
        namespace,
        jobset_labels,
        {
            "coordinator": {"replicatedJob": HEAD_REPLICATED_JOB},
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            # xpk's order: the head (proxy and resource manager) is up before workers dial it, so workers do
            # not spend their restart budget on an unreachable resource manager.
            "startupPolicy": {"startupPolicyOrder": "InOrder"},
            "failurePolicy": failure_policy,
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [HEAD_REPLICATED_JOB]},
            "replicatedJobs": replicated_jobs,
        },
    )
    lint_manifest(manifest)
    return manifest


def _elastic_replicated_jobs(spec: ElasticRunSpec, labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """The head (one pod: the Pathways proxy, resource manager and trainer) and the workers (a Job per slice)."""
    vms = spec.vms_per_slice
    head_spec, worker_spec = _gke_pod_specs(spec)
    head_annotations = {ANNOTATION_EXCLUSIVE_TOPOLOGY: LABEL_HOSTNAME}
    # One slice (one child Job) per node pool: without it a multi-host slice can straddle two pools and
    # never form. On the ReplicatedJob's Job template, where JobSet reads it (xpk's place).
    worker_annotations = {ANNOTATION_EXCLUSIVE_TOPOLOGY: LABEL_GKE_NODEPOOL}
    return [
        _replicated_job(
            HEAD_REPLICATED_JOB,
            replicas=1,
            pods=1,
            backoff_limit=0,
            labels=labels,
            pod_spec=head_spec,
            job_annotations=head_annotations,
            pod_failure_policy=HEAD_POD_FAILURE_POLICY,
        ),
        _replicated_job(
            WORKER_REPLICATED_JOB,
            replicas=spec.num_slices,
            pods=vms,
            backoff_limit=spec.max_slice_restarts * vms,
            labels=labels,
            pod_spec=worker_spec,
            job_annotations=worker_annotations,
        ),
    ]


def gke_failure_rules() -> list[dict[str, Any]]:
    """The GKE JobSet's `failurePolicy.rules`, first match wins (JobSet `FailurePolicyRule`).

    1. `headDisrupted`: the head Job failed with reason `PodFailurePolicy` (its pod was disrupted: the head Job's
       `podFailurePolicy` fails it on `DisruptionTarget`) → `RestartJobSetAndIgnoreMaxRestarts`: recreate every
       Job, resume from the last checkpoint, and keep `maxRestarts` for real failures (JobSet's host-maintenance
       example, `site/static/examples/failure-policy/host-maintenance-event-model.yaml`).
    2. `sliceRestartsSpent`: a worker Job failed (its `backoffLimit`, max_slice_restarts x VMs, is spent, whatever
       the cause: evictions included) → `RestartJobSet`, counted against `maxRestarts`.
    3. `headFailed`: any other head failure (MaxText crashed) → `RestartJobSet`, counted.

    Rules 2 and 3 are JobSet's default action written out, so the manifest says what happens.
    """
    return [
        {
            "name": RULE_HEAD_DISRUPTED,
            "action": "RestartJobSetAndIgnoreMaxRestarts",
            "onJobFailureReasons": [POD_FAILURE_REASON],
            "targetReplicatedJobs": [HEAD_REPLICATED_JOB],
        },
        {"name": RULE_SLICE_RESTARTS_SPENT, "action": "RestartJobSet", "targetReplicatedJobs": [WORKER_REPLICATED_JOB]},
        {"name": RULE_HEAD_FAILED, "action": "RestartJobSet", "targetReplicatedJobs": [HEAD_REPLICATED_JOB]},
    ]


@dataclass(frozen=True)
class _PathwaysShared:
    """What the head's and the workers' containers share: scratch, pull policy, the head's address env."""

    scratch: str
    pull: Mapping[str, Any]
    pathways_head: Mapping[str, Any]
    replicated_job_name: Mapping[str, Any]
    jobset_name_env: Mapping[str, Any]
    rm_address: str


def _gke_pod_specs(spec: ElasticRunSpec) -> tuple[dict[str, Any], ...]:
    scratch = (
        f"{spec.run_directory}/pathways-scratch"
        if spec.base_output_directory.startswith("gs://")
        else PATHWAYS_DEFAULT_SCRATCH
    )
    shared = _PathwaysShared(
        scratch=scratch,
        pull={"imagePullPolicy": spec.image_pull_policy} if spec.image_pull_policy else {},
        pathways_head=_field_env("PATHWAYS_HEAD", f"metadata.labels['{ANNOTATION_COORDINATOR}']"),
        replicated_job_name=_field_env("REPLICATED_JOB_NAME", f"metadata.annotations['{LABEL_REPLICATED_JOB_NAME}']"),
        jobset_name_env=_field_env("JOBSET_NAME", f"metadata.annotations['{LABEL_JOBSET_NAME}']"),
        rm_address=f"--resource_manager_address=$(PATHWAYS_HEAD):{PATHWAYS_RM_PORT}",
    )
    return _head_pod_spec(spec, shared), _worker_pod_spec(spec, shared)


def _head_sidecars(spec: ElasticRunSpec, shared: _PathwaysShared) -> list[dict[str, Any]]:
    tpu = spec.tpu
    topology = spec.topology
    # Native sidecars (initContainers with restartPolicy Always), as current xpk renders them: they start
    # before the trainer and stop after it, so the head pod completes when jax-tpu exits.
    proxy = {
        "name": "pathways-proxy",
        "image": spec.pathways_proxy_image,
        **shared.pull,
        "args": [
            f"--server_port={PATHWAYS_PROXY_PORT}",
            shared.rm_address,
            f"--gcs_scratch_location={shared.scratch}",
            f"--num_elastic_slices={spec.effective_elastic_slices}",
        ],
        "env": [shared.pathways_head],
        "ports": [{"containerPort": PATHWAYS_PROXY_PORT, "protocol": "TCP"}],
        "resources": {"limits": {"cpu": "16", "memory": "100G"}},
        "restartPolicy": "Always",
    }
    resource_manager = {
        "name": "pathways-rm",
        "image": spec.pathways_server_image,
        **shared.pull,
        "args": [
            f"--server_port={PATHWAYS_RM_PORT}",
            f"--gcs_scratch_location={shared.scratch}",
            "--node_type=resource_manager",
            f"--instance_count={spec.num_slices}",
            f"--instance_type={tpu.pathways_instance_type}:{topology}",
        ],
        "env": [
            shared.replicated_job_name,
            shared.jobset_name_env,
            _field_env("HOST_ADDRESS", f"metadata.labels['{ANNOTATION_COORDINATOR}']"),
            {"name": "TPU_SKIP_MDS_QUERY", "value": "true"},
        ],
        "ports": [
            {"containerPort": PATHWAYS_RM_PORT, "protocol": "TCP"},
            {"containerPort": PATHWAYS_RM_PORT + 1, "protocol": "TCP"},
        ],
        "resources": {"limits": {"cpu": "8", "memory": "32G"}},
        "restartPolicy": "Always",
    }
    return [proxy, resource_manager]


def _head_pod_spec(spec: ElasticRunSpec, shared: _PathwaysShared) -> dict[str, Any]:
    trainer = {
        "name": HEAD_MAIN_CONTAINER,
        "image": spec.trainer_image,
        **shared.pull,
        "command": ["python3", "-m", MAXTEXT_TRAIN_MODULE],
        "args": [spec.config_file, *spec.maxtext_keys()],
        "env": [
            shared.pathways_head,
            {"name": "JAX_PLATFORMS", "value": "proxy"},
            {"name": "XCLOUD_ENVIRONMENT", "value": "GCP"},
            {"name": "JAX_BACKEND_TARGET", "value": f"grpc://$(PATHWAYS_HEAD):{PATHWAYS_PROXY_PORT}"},
            *_value_env(spec.trainer_env),
        ],
        "resources": {"limits": {"cpu": "24", "memory": "100G"}},
        "volumeMounts": [SHARED_TMP_MOUNT],
    }
    head = {
        "restartPolicy": "Never",
        **_identity_and_priority(spec),
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "nodeSelector": {LABEL_GKE_NODEPOOL: spec.head_node_pool},
        "initContainers": _head_sidecars(spec, shared),
        "containers": [trainer],
        "volumes": [SHARED_TMP_VOLUME],
    }
    return head


def _worker_pod_spec(spec: ElasticRunSpec, shared: _PathwaysShared) -> dict[str, Any]:
    tpu = spec.tpu
    topology = spec.topology
    # xpk's defaults, each replaceable through worker_env (which keeps their place); the rest of worker_env follows.
    worker_defaults = {**WORKER_DEFAULT_ENV, **{k: v for k, v in spec.worker_env.items() if k in WORKER_DEFAULT_ENV}}
    worker_container = {
        "name": WORKER_CONTAINER,
        "image": spec.pathways_server_image,
        **shared.pull,
        "args": [
            f"--server_port={PATHWAYS_WORKER_PORT}",
            shared.rm_address,
            f"--gcs_scratch_location={shared.scratch}",
        ],
        "env": [
            {"name": "TPU_MIN_LOG_LEVEL", "value": worker_defaults["TPU_MIN_LOG_LEVEL"]},
            {"name": "TF_CPP_MIN_LOG_LEVEL", "value": worker_defaults["TF_CPP_MIN_LOG_LEVEL"]},
            {"name": "XCLOUD_ENVIRONMENT", "value": "GCP"},
            {"name": "MEGASCALE_GRPC_ENABLE_XOR_TRACER", "value": worker_defaults["MEGASCALE_GRPC_ENABLE_XOR_TRACER"]},
            _field_env("MEGASCALE_NUM_SLICES", f"metadata.labels['{LABEL_REPLICATED_JOB_REPLICAS}']"),
            shared.jobset_name_env,
            shared.replicated_job_name,
            _field_env("MEGASCALE_SLICE_ID", f"metadata.labels['{LABEL_JOB_INDEX}']"),
            shared.pathways_head,
            _field_env("MEGASCALE_COORDINATOR_ADDRESS", f"metadata.labels['{ANNOTATION_COORDINATOR}']"),
            *_value_env({k: v for k, v in spec.worker_env.items() if k not in WORKER_DEFAULT_ENV}),
        ],
        "ports": [
            {"containerPort": port, "protocol": "TCP"}
            for port in (PATHWAYS_WORKER_PORT, PATHWAYS_WORKER_PORT + 1, 8471, 8080)
        ],
        "resources": {"limits": {TPU_RESOURCE: str(tpu.chips_per_vm_for(topology))}},
        "volumeMounts": [SHARED_TMP_MOUNT],
    }
    worker = {
        "restartPolicy": "OnFailure",
        **_identity_and_priority(spec),
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "terminationGracePeriodSeconds": WORKER_TERMINATION_GRACE_SECONDS,
        "nodeSelector": {LABEL_GKE_TPU_ACCELERATOR: tpu.gke_accelerator, LABEL_GKE_TPU_TOPOLOGY: topology},
        "tolerations": [{"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [worker_container],
        "volumes": [SHARED_TMP_VOLUME],
    }
    if spec.avoid_node_pools:
        worker["affinity"] = avoid_node_pools_affinity(spec.avoid_node_pools)
    return worker


def worker_node_selector(spec: ElasticRunSpec) -> str:
    """The label selector of the nodes ``spec``'s TPU workers may run on, as their pod template selects them (what
    ``avoid_failing_node_pools`` lists to count the pools that can hold a slice)."""
    body = elastic_jobset(spec, name="pool-check", namespace="default", labels={})
    worker = next(r for r in body["spec"]["replicatedJobs"] if r["name"] == WORKER_REPLICATED_JOB)
    selector = worker["template"]["spec"]["template"]["spec"].get("nodeSelector") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def avoid_node_pools_affinity(pools: Sequence[str]) -> dict[str, Any]:
    """A required node affinity keeping pods off ``pools`` (GKE's ``cloud.google.com/gke-nodepool`` label):
    ``avoid_failing_node_pools`` (:mod:`operators.pool_avoidance`)."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": LABEL_GKE_NODEPOOL, "operator": "NotIn", "values": sorted(pools)}]}
                ]
            }
        }
    }


def _identity_and_priority(spec: ElasticRunSpec) -> dict[str, str]:
    """`serviceAccountName` (Workload Identity: GCS access of the trainer, RM and workers) and `priorityClassName`."""
    fields = {}
    if spec.service_account:
        fields["serviceAccountName"] = spec.service_account
    if spec.priority_class:
        fields["priorityClassName"] = spec.priority_class
    return fields


@dataclass(frozen=True)
class JobSpec:
    """A plain one-job JobSet that must complete (evaluation, synthesis): one pod, run once."""

    image: str
    command: Sequence[str]
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    runtime: Runtime = "gke"
    backoff_limit: int = 0
    active_deadline_seconds: int | None = None
    resources: Mapping[str, str] | None = None
    service_account: str | None = None
    # Where the pod may run on GKE (a TPU node pool: its labels, and the TPU taint tolerated).
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, str]] = ()
    # Kueue: the LocalQueue (kueue.x-k8s.io/queue-name) and WorkloadPriorityClass of the JobSet, or None.
    queue_name: str | None = None
    workload_priority_class: str | None = None


def lint_job(job: JobSpec) -> None:
    """Raise `SpecError` for the first problem of `job`."""
    check_runtime(job.runtime)
    if job.runtime == "gke":
        image_error = image_reference_error(job.image)
        if image_error:
            raise SpecError("image", image_error)
    for name, argv in (("command", job.command), ("args", job.args)):
        if isinstance(argv, str) or not isinstance(argv, Sequence):
            raise SpecError(name, f"must be a list of strings, got {type(argv).__name__}")
        for index, item in enumerate(argv):
            if not isinstance(item, str):
                raise SpecError(f"{name}[{index}]", f"must be a string, got {type(item).__name__} {shown(item)}")
    if not job.command or not job.command[0]:
        raise SpecError("command", "must name the program to run (an empty command runs the image's entrypoint)")
    if not isinstance(job.env, Mapping):
        raise SpecError("env", f"must be a mapping of names to values, got {type(job.env).__name__}")
    for key, value in job.env.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise SpecError("env", f"{shown(key)} is not an environment variable name (letters, digits, '_', '-', '.')")
        if not isinstance(value, str):
            raise SpecError(f"env.{key}", f"must be a string, got {type(value).__name__}")
    if not is_int_in(job.backoff_limit, 0, INT32_MAX):
        raise SpecError("backoff_limit", f"must be an integer from 0 to {INT32_MAX}, got {shown(job.backoff_limit)}")
    deadline = job.active_deadline_seconds
    if deadline is not None and not is_int_in(deadline, 1, 2**63 - 1):
        raise SpecError("active_deadline_seconds", f"must be a positive integer or None, got {shown(deadline)}")
    resources = job.resources or {}
    if not isinstance(resources, Mapping):
        raise SpecError("resources", f"must be a mapping of resource names to quantities, got {shown(resources)}")
    for key, quantity in resources.items():
        if not isinstance(key, str) or not key or not isinstance(quantity, str) or not quantity:
            raise SpecError(
                "resources", f"{shown(key)}: {shown(quantity)} must map a resource name to a quantity string"
            )
    if job.service_account is not None and not _is_subdomain(job.service_account):
        raise SpecError("service_account", f"{shown(job.service_account)} is not a service account name")
    if not isinstance(job.node_selector, Mapping):
        raise SpecError("node_selector", f"must be a mapping of node labels to values, got {shown(job.node_selector)}")
    check_labels(job.node_selector, "node_selector")
    _check_kueue_labels(job.queue_name, job.workload_priority_class)
    if isinstance(job.tolerations, str) or not isinstance(job.tolerations, Sequence):
        raise SpecError("tolerations", f"must be a list of tolerations, got {shown(job.tolerations)}")
    for index, toleration in enumerate(job.tolerations):
        if not isinstance(toleration, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in toleration.items()
        ):
            raise SpecError(f"tolerations[{index}]", f"must map toleration fields to strings, got {shown(toleration)}")


def kueue_labels(queue_name: str | None, workload_priority_class: str | None) -> dict[str, str]:
    """The JobSet labels Kueue's JobSet integration reads: its LocalQueue, and its WorkloadPriorityClass.

    On the JobSet only (kubernetes-sigs/kueue ``pkg/controller/jobs/jobset``): Kueue admits the whole JobSet as one
    Workload, suspending it until then.
    """
    labels = {}
    if queue_name:
        labels[LABEL_KUEUE_QUEUE] = queue_name
    if workload_priority_class:
        labels[LABEL_KUEUE_PRIORITY_CLASS] = workload_priority_class
    return labels


def _check_kueue_labels(queue_name: object, priority_class: object) -> None:
    for field_name, value, what in (
        ("queue_name", queue_name, "a Kueue LocalQueue name"),
        ("workload_priority_class", priority_class, "a Kueue WorkloadPriorityClass name"),
    ):
        if value is not None and (not isinstance(value, str) or not is_dns1123_label(value)):
            raise SpecError(
                field_name, f"{shown(value)} is not {what} usable as a label value (a DNS-1123 label), or None"
            )


def _is_subdomain(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 253 and all(is_dns1123_label(part) for part in value.split("."))


def plain_jobset(job: JobSpec, *, name: str, namespace: str, labels: Mapping[str, str], stage: str) -> dict[str, Any]:
    """A JobSet of one replicated job `main` (one pod, `restartPolicy: Never`) that must complete.

    On the local runtime the image is `local` and the pod gets the local environment (downward-API
    `JOBSET_NAME`, `POD_NAMESPACE`, `POD_NAME`, CPU JAX, unbuffered output) before `job.env`.
    """
    lint_job(job)
    check_jobset_name(name)
    check_namespace(namespace)
    check_labels(labels)
    all_labels = _job_labels(labels, None, stage)
    jobset_labels = {**all_labels, **kueue_labels(job.queue_name, job.workload_priority_class)}
    container: dict[str, Any] = {
        "name": PLAIN_CONTAINER,
        "image": LOCAL_IMAGE if job.runtime == "local" else job.image,
        "command": list(job.command),
    }
    if job.args:
        container["args"] = list(job.args)
    env = _local_env(job.env) if job.runtime == "local" else _value_env(job.env)
    if env:
        container["env"] = env
    if job.resources:
        container["resources"] = {"limits": dict(job.resources)}
    pod_spec: dict[str, Any] = {"restartPolicy": "Never"}
    if job.service_account:
        pod_spec["serviceAccountName"] = job.service_account
    if job.node_selector:
        pod_spec["nodeSelector"] = dict(job.node_selector)
    if job.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in job.tolerations]
    if job.runtime == "local":
        pod_spec["terminationGracePeriodSeconds"] = LOCAL_TERMINATION_GRACE_SECONDS
    pod_spec["containers"] = [container]
    manifest = _jobset(
        name,
        namespace,
        jobset_labels,
        {
            "failurePolicy": {"restartStrategy": "Recreate", "maxRestarts": 0},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [PLAIN_REPLICATED_JOB]},
            "replicatedJobs": [
                _replicated_job(
                    PLAIN_REPLICATED_JOB,
                    replicas=1,
                    pods=1,
                    backoff_limit=job.backoff_limit,
                    labels=all_labels,
                    pod_spec=pod_spec,
                    active_deadline_seconds=job.active_deadline_seconds,
                )
            ],
        },
    )
    lint_manifest(manifest)
    return manifest
