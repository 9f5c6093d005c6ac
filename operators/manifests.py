"""JobSet manifests, deterministic names and Airflow identity labels.

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

Names are checked the way the upstream JobSet webhook checks them (`jobset: pkg/webhooks/jobset_webhook.go`):
every child Job `<jobset>-<replicatedJob>-<jobIndex>` and every pod `<jobset>-<replicatedJob>-<jobIndex>-
<podIndex>-<5 random>` must be a DNS-1035 label of at most 63 characters. With `pathways-head` that leaves
63 - len("-pathways-head-0-0-abcde") = 39 characters for the JobSet name, the limit `jobset_name` keeps.

The `local` runtime renders the very same JobSet (the same bytes for the same spec): `runtime` chooses the
cluster and what its images mean, not the shape. The local cluster's kubelet runs the MaxText image's
trainer command and the Pathways images through its image catalogue (local/cluster/images.py); the local
runtime only defaults the image, TPU type and topology when the spec leaves them unset (`operators.spec`:
`LOCAL_MAXTEXT_IMAGE`, `LOCAL_TPU_TYPE` v5e, `LOCAL_TPU_TOPOLOGY` 2x2). `operators/` never imports `local/`.
"""

from __future__ import annotations

import hashlib
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
    JOBSET_GROUP,
    JOBSET_KIND,
    JOBSET_VERSION,
    LABEL_DAG_ID,
    LABEL_GKE_NODEPOOL,
    LABEL_GKE_TPU_ACCELERATOR,
    LABEL_GKE_TPU_TOPOLOGY,
    LABEL_HOSTNAME,
    LABEL_JOB_INDEX,
    LABEL_JOBSET_NAME,
    LABEL_KUEUE_PRIORITY_CLASS,
    LABEL_KUEUE_QUEUE_NAME,
    LABEL_MAP_INDEX,
    LABEL_REPLICATED_JOB_NAME,
    LABEL_REPLICATED_JOB_REPLICAS,
    LABEL_RUN_ID,
    LABEL_RUN_NAME,
    LABEL_STAGE,
    LABEL_TASK_ID,
    TPU_RESOURCE,
    WORKER_CONTAINER,
    WORKER_REPLICATED_JOB,
)
from elastic_training.operators.spec import (
    DEFAULT_HEAD_NODE_POOL,
    INT32_MAX,
    MAXTEXT_TRAIN_MODULE,
    ElasticRunSpec,
    Runtime,
    SpecError,
    image_reference_error,
    is_dns1123_label,
    shown,
)
from elastic_training.operators.spec import (
    PATHWAYS_PROXY_IMAGE as PATHWAYS_PROXY_IMAGE,
)
from elastic_training.operators.spec import (
    PATHWAYS_SERVER_IMAGE as PATHWAYS_SERVER_IMAGE,
)

API_VERSION: Final = f"{JOBSET_GROUP}/{JOBSET_VERSION}"

# Upstream webhook: the longest pod name is the deterministic part plus "-" and 5 random characters.
POD_NAME_RANDOM_SUFFIX: Final = "-abcde"
NAME_MAX: Final = 63
# Upstream JobSet labels and annotates every Job and pod with the coordinator's stable endpoint,
# `<jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<jobset>`; as a label value it must fit 63 characters,
# or the child Jobs are invalid and never created. With `pathways-head` as coordinator that leaves 22.
COORDINATOR_SUFFIX: Final = f"-{HEAD_REPLICATED_JOB}-0-0."
JOBSET_NAME_MAX: Final = (NAME_MAX - len(COORDINATOR_SUFFIX)) // 2  # 22
NAME_HASH_LENGTH: Final = 6
# The readable part of a JobSet name, kept the same length on every attempt so names sort and read alike.
NAME_PREFIX_MAX: Final = 11
MAX_ATTEMPT: Final = 99
LABEL_HASH_LENGTH: Final = 8

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
FAILURE_POLICY_ACTIONS: Final = frozenset(
    {"FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts", "RestartJob", "RestartJobAndIgnoreMaxRestarts"}
)
_RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?\Z")
HEAD_POD_FAILURE_POLICY: Final[Mapping[str, Any]] = {
    "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
}
WORKER_TERMINATION_GRACE_SECONDS: Final = 30

# The local runtime's plain JobSets (eval, synth): the image whose command the local cluster runs as written.
LOCAL_IMAGE: Final = "local"
LOCAL_TERMINATION_GRACE_SECONDS: Final = 5

_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
_LABEL_VALUE_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?)?\Z")
# A label key: an optional DNS-1123 subdomain prefix and '/', then a name of at most 63 characters.
_LABEL_KEY_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")
# Kubernetes accepts any printable name without '='; a C identifier is what shells and Python read reliably.
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*\Z")


def _short_hash(*parts: object, length: int) -> str:
    digest = hashlib.sha256(json.dumps(list(parts), separators=(",", ":")).encode()).hexdigest()
    return digest[:length]


def _slug(text: str) -> str:
    """Lowercase letters, digits and single dashes, starting with a letter (a DNS-1035 label's alphabet)."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    # A run name may start with a digit (a date); a DNS-1035 label may not.
    return f"run-{slug}" if slug[:1].isdigit() else slug


def jobset_name(
    *, dag_id: str, task_id: str, run_id: str, map_index: int, attempt: int, prefix: str | None = None
) -> str:
    """The JobSet name of one task instance's full-restart `attempt`: same inputs, same name.

    `<slug of prefix or dag-task>-<6 hex of sha256(dag, task, run, map_index)>[-r<attempt>]`, a DNS-1035
    label of at most `JOBSET_NAME_MAX` (22) characters so that every child Job and pod name, and the
    coordinator endpoint label upstream JobSet puts on them, fit 63.
    """
    if attempt < 0 or attempt > MAX_ATTEMPT:
        raise ValueError(f"attempt must be 0..{MAX_ATTEMPT}, got {attempt}")
    digest = _short_hash(dag_id, task_id, run_id, map_index, length=NAME_HASH_LENGTH)
    suffix = f"-{digest}" + (f"-r{attempt}" if attempt else "")
    slug = _slug(prefix if prefix else f"{dag_id}-{task_id}")
    slug = slug[: min(NAME_PREFIX_MAX, JOBSET_NAME_MAX - len(suffix))].rstrip("-") or "run"
    return slug + suffix


def label_value(value: str) -> str:
    """`value` as a label value: itself when valid, else a safe prefix plus a hash of the whole value.

    Valid label values are at most 63 characters of `[A-Za-z0-9._-]` with alphanumeric ends; two different
    inputs never share a rewritten value (the hash covers the original).
    """
    if len(value) <= NAME_MAX and _LABEL_VALUE.match(value):
        return value
    digest = _short_hash(value, length=LABEL_HASH_LENGTH)
    safe = _LABEL_VALUE_UNSAFE.sub("_", value)
    safe = re.sub(r"^[^A-Za-z0-9]+", "", safe)[: NAME_MAX - LABEL_HASH_LENGTH - 1]
    safe = re.sub(r"[^A-Za-z0-9]+$", "", safe)
    return f"{safe}-{digest}" if safe else digest


def identity_labels(*, dag_id: str, task_id: str, run_id: str, map_index: int) -> dict[str, str]:
    """The Airflow identity of a task instance as labels a selector can find (values made label-safe).

    An unmapped task (`map_index` -1) is labelled `none`, since "-1" is not a label value.
    """
    return {
        LABEL_DAG_ID: label_value(dag_id),
        LABEL_TASK_ID: label_value(task_id),
        LABEL_RUN_ID: label_value(run_id),
        LABEL_MAP_INDEX: str(map_index) if map_index >= 0 else "none",
    }


def label_selector(labels: Mapping[str, str]) -> str:
    """An equality label selector matching every one of `labels` (`k=v,k=v`, keys sorted)."""
    return ",".join(f"{key}={labels[key]}" for key in sorted(labels))


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


def _check_name(name: str) -> None:
    if not isinstance(name, str) or len(name) > JOBSET_NAME_MAX or not _DNS1035_LABEL.match(name):
        raise SpecError(
            "name",
            f"{shown(name)} must be a DNS-1035 label of at most {JOBSET_NAME_MAX} characters (use jobset_name())",
        )


def check_namespace(namespace: object) -> None:
    """`SpecError("namespace", ...)` unless `namespace` is a DNS-1123 label (what a namespace name is)."""
    if not isinstance(namespace, str) or not is_dns1123_label(namespace):
        raise SpecError(
            "namespace",
            f"{shown(namespace)} is not a namespace name: lowercase letters, digits and '-', at most 63 characters",
        )


def is_label_key(key: object) -> bool:
    """Whether `key` is a label key: ``[prefix/]name``, a DNS-1123 subdomain prefix and a 63-character name."""
    if not isinstance(key, str):
        return False
    prefix, _, name = key.rpartition("/")
    if prefix and not (len(prefix) <= 253 and all(is_dns1123_label(part) for part in prefix.split("."))):
        return False
    return len(name) <= NAME_MAX and bool(_LABEL_KEY_NAME.match(name))


def _is_label_value(value: object) -> bool:
    return isinstance(value, str) and len(value) <= NAME_MAX and bool(_LABEL_VALUE.match(value))


def _check_labels(labels: Mapping[str, str], where: str = "labels") -> None:
    if not isinstance(labels, Mapping):
        raise SpecError(where, f"must be a mapping of label keys to values, got {type(labels).__name__}")
    for key, value in labels.items():
        if not is_label_key(key):
            raise SpecError(where, f"{shown(key)} is not a label key")
        if not _is_label_value(value):
            raise SpecError(f"{where}.{key}", f"{shown(value)} is not a label value (use identity_labels())")


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
    _check_name(name)
    check_namespace(namespace)
    _check_labels(labels)
    all_labels = _job_labels(labels, spec.run_name, stage)
    vms = spec.vms_per_slice
    head_spec, worker_spec = _gke_pod_specs(spec)
    head_annotations = {ANNOTATION_EXCLUSIVE_TOPOLOGY: LABEL_HOSTNAME}
    # One slice (one child Job) per node pool: without it a multi-host slice can straddle two pools and
    # never form. On the ReplicatedJob's Job template, where JobSet reads it (xpk's place).
    worker_annotations = {ANNOTATION_EXCLUSIVE_TOPOLOGY: LABEL_GKE_NODEPOOL}
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
            "replicatedJobs": [
                _replicated_job(
                    HEAD_REPLICATED_JOB,
                    replicas=1,
                    pods=1,
                    backoff_limit=0,
                    labels=all_labels,
                    pod_spec=head_spec,
                    job_annotations=head_annotations,
                    pod_failure_policy=HEAD_POD_FAILURE_POLICY,
                ),
                _replicated_job(
                    WORKER_REPLICATED_JOB,
                    replicas=spec.num_slices,
                    pods=vms,
                    backoff_limit=spec.max_slice_restarts * vms,
                    labels=all_labels,
                    pod_spec=worker_spec,
                    job_annotations=worker_annotations,
                ),
            ],
        },
    )
    lint_manifest(manifest)
    return manifest


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


def _gke_pod_specs(spec: ElasticRunSpec) -> tuple[dict[str, Any], ...]:
    tpu = spec.tpu
    topology = spec.topology
    scratch = (
        f"{spec.run_directory}/pathways-scratch"
        if spec.base_output_directory.startswith("gs://")
        else PATHWAYS_DEFAULT_SCRATCH
    )
    pull = {"imagePullPolicy": spec.image_pull_policy} if spec.image_pull_policy else {}
    pathways_head = _field_env("PATHWAYS_HEAD", f"metadata.labels['{ANNOTATION_COORDINATOR}']")
    replicated_job_name = _field_env("REPLICATED_JOB_NAME", f"metadata.annotations['{LABEL_REPLICATED_JOB_NAME}']")
    jobset_name_env = _field_env("JOBSET_NAME", f"metadata.annotations['{LABEL_JOBSET_NAME}']")
    rm_address = f"--resource_manager_address=$(PATHWAYS_HEAD):{PATHWAYS_RM_PORT}"
    # Native sidecars (initContainers with restartPolicy Always), as current xpk renders them: they start
    # before the trainer and stop after it, so the head pod completes when jax-tpu exits.
    proxy = {
        "name": "pathways-proxy",
        "image": spec.pathways_proxy_image,
        **pull,
        "args": [
            f"--server_port={PATHWAYS_PROXY_PORT}",
            rm_address,
            f"--gcs_scratch_location={scratch}",
            f"--num_elastic_slices={spec.effective_elastic_slices}",
        ],
        "env": [pathways_head],
        "ports": [{"containerPort": PATHWAYS_PROXY_PORT, "protocol": "TCP"}],
        "resources": {"limits": {"cpu": "16", "memory": "100G"}},
        "restartPolicy": "Always",
    }
    resource_manager = {
        "name": "pathways-rm",
        "image": spec.pathways_server_image,
        **pull,
        "args": [
            f"--server_port={PATHWAYS_RM_PORT}",
            f"--gcs_scratch_location={scratch}",
            "--node_type=resource_manager",
            f"--instance_count={spec.num_slices}",
            f"--instance_type={tpu.pathways_instance_type}:{topology}",
        ],
        "env": [
            replicated_job_name,
            jobset_name_env,
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
    trainer = {
        "name": HEAD_MAIN_CONTAINER,
        "image": spec.trainer_image,
        **pull,
        "command": ["python3", "-m", MAXTEXT_TRAIN_MODULE],
        "args": [spec.config_file, *spec.maxtext_keys()],
        "env": [
            pathways_head,
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
        "initContainers": [proxy, resource_manager],
        "containers": [trainer],
        "volumes": [SHARED_TMP_VOLUME],
    }
    # xpk's defaults, each replaceable through worker_env (which keeps their place); the rest of worker_env follows.
    worker_defaults = {**WORKER_DEFAULT_ENV, **{k: v for k, v in spec.worker_env.items() if k in WORKER_DEFAULT_ENV}}
    worker_container = {
        "name": WORKER_CONTAINER,
        "image": spec.pathways_server_image,
        **pull,
        "args": [
            f"--server_port={PATHWAYS_WORKER_PORT}",
            rm_address,
            f"--gcs_scratch_location={scratch}",
        ],
        "env": [
            {"name": "TPU_MIN_LOG_LEVEL", "value": worker_defaults["TPU_MIN_LOG_LEVEL"]},
            {"name": "TF_CPP_MIN_LOG_LEVEL", "value": worker_defaults["TF_CPP_MIN_LOG_LEVEL"]},
            {"name": "XCLOUD_ENVIRONMENT", "value": "GCP"},
            {"name": "MEGASCALE_GRPC_ENABLE_XOR_TRACER", "value": worker_defaults["MEGASCALE_GRPC_ENABLE_XOR_TRACER"]},
            _field_env("MEGASCALE_NUM_SLICES", f"metadata.labels['{LABEL_REPLICATED_JOB_REPLICAS}']"),
            jobset_name_env,
            replicated_job_name,
            _field_env("MEGASCALE_SLICE_ID", f"metadata.labels['{LABEL_JOB_INDEX}']"),
            pathways_head,
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
    return head, worker


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
    if job.runtime not in ("gke", "local"):
        raise SpecError("runtime", f"must be gke or local, got {shown(job.runtime)}")
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
    if not _is_int_in(job.backoff_limit, 0, INT32_MAX):
        raise SpecError("backoff_limit", f"must be an integer from 0 to {INT32_MAX}, got {shown(job.backoff_limit)}")
    deadline = job.active_deadline_seconds
    if deadline is not None and not _is_int_in(deadline, 1, 2**63 - 1):
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
    _check_labels(job.node_selector, "node_selector")
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


def _is_int_in(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _is_subdomain(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 253 and all(is_dns1123_label(part) for part in value.split("."))


def plain_jobset(job: JobSpec, *, name: str, namespace: str, labels: Mapping[str, str], stage: str) -> dict[str, Any]:
    """A JobSet of one replicated job `main` (one pod, `restartPolicy: Never`) that must complete.

    On the local runtime the image is `local` and the pod gets the local environment (downward-API
    `JOBSET_NAME`, `POD_NAMESPACE`, `POD_NAME`, CPU JAX, unbuffered output) before `job.env`.
    """
    lint_job(job)
    _check_name(name)
    check_namespace(namespace)
    _check_labels(labels)
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


def lint_manifest(manifest: Mapping[str, Any]) -> None:
    """Raise `SpecError` for a malformed JobSet manifest (e.g. one a user passes instead of a spec).

    Checks what the API server and the JobSet webhook would refuse, with field paths: apiVersion and kind,
    label keys and values, replicated job names (DNS-1035, unique), int32 counts, a pod template with named
    containers, policy targets and the coordinator naming replicated jobs, and, when the manifest is named,
    that every child Job and pod name fits 63 characters. Any document gives `SpecError` or passes.
    """
    if not isinstance(manifest, Mapping):
        raise SpecError("manifest", f"must be a mapping, got {type(manifest).__name__}")
    if manifest.get("apiVersion") != API_VERSION:
        raise SpecError("apiVersion", f"must be {API_VERSION}, got {shown(manifest.get('apiVersion'))}")
    if manifest.get("kind") != JOBSET_KIND:
        raise SpecError("kind", f"must be {JOBSET_KIND}, got {shown(manifest.get('kind'))}")
    metadata = manifest.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise SpecError("metadata", "must be a mapping")
    name = metadata.get("name")
    if name is not None and (not isinstance(name, str) or not _DNS1035_LABEL.match(name) or len(name) > NAME_MAX):
        raise SpecError("metadata.name", f"{shown(name)} must be a DNS-1035 label (lowercase, starting with a letter)")
    _check_labels(metadata.get("labels") or {}, "metadata.labels")
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        raise SpecError("spec", "is required")
    rjobs = spec.get("replicatedJobs")
    if not isinstance(rjobs, list) or not rjobs:
        raise SpecError("spec.replicatedJobs", "must be a non-empty list")
    seen: set[str] = set()
    for index, rjob in enumerate(rjobs):
        _lint_replicated_job(rjob, f"spec.replicatedJobs[{index}]", seen, name)
    for policy_field in ("successPolicy", "failurePolicy"):
        policy = spec.get(policy_field) or {}
        if not isinstance(policy, Mapping):
            raise SpecError(f"spec.{policy_field}", "must be a mapping")
        targets = policy.get("targetReplicatedJobs") or []
        if not isinstance(targets, list):
            raise SpecError(f"spec.{policy_field}.targetReplicatedJobs", "must be a list of replicated job names")
        for target in targets:
            if not isinstance(target, str) or target not in seen:
                raise SpecError(f"spec.{policy_field}.targetReplicatedJobs", f"{shown(target)} is not a replicated job")
        if "maxRestarts" in policy and not _is_int_in(policy["maxRestarts"], 0, INT32_MAX):
            raise SpecError(
                f"spec.{policy_field}.maxRestarts", f"must be an int32 >= 0, got {shown(policy['maxRestarts'])}"
            )
    _lint_failure_rules(spec.get("failurePolicy") or {}, seen)
    coordinator = spec.get("coordinator")
    if coordinator is None:
        return
    if not isinstance(coordinator, Mapping):
        raise SpecError("spec.coordinator", "must be a mapping")
    coordinator_job = coordinator.get("replicatedJob")
    if not isinstance(coordinator_job, str) or coordinator_job not in seen:
        raise SpecError("spec.coordinator.replicatedJob", f"{shown(coordinator_job)} is not a replicated job")
    for index_field in ("jobIndex", "podIndex"):
        if not _is_int_in(coordinator.get(index_field, 0), 0, INT32_MAX):
            raise SpecError(
                f"spec.coordinator.{index_field}", f"must be an int32 >= 0, got {shown(coordinator[index_field])}"
            )
    if isinstance(name, str):
        endpoint = f"{name}-{coordinator_job}-{coordinator.get('jobIndex', 0)}-{coordinator.get('podIndex', 0)}.{name}"
        if len(endpoint) > NAME_MAX:
            raise SpecError(
                "metadata.name",
                f"{name!r} is too long for a coordinator: JobSet labels every Job and pod with the endpoint "
                f"{endpoint!r} ({len(endpoint)} characters, at most {NAME_MAX})",
            )


def _lint_failure_rules(policy: Mapping[str, Any], replicated_jobs: set[str]) -> None:
    """JobSet's `FailurePolicyRule` schema and webhook: a named rule, a known action, targets that exist."""
    rules = policy.get("rules") or []
    if not isinstance(rules, list):
        raise SpecError("spec.failurePolicy.rules", "must be a list of rules")
    names: set[str] = set()
    for index, rule in enumerate(rules):
        where = f"spec.failurePolicy.rules[{index}]"
        if not isinstance(rule, Mapping):
            raise SpecError(where, "must be a mapping")
        name = rule.get("name")
        if not isinstance(name, str) or len(name) > 128 or not _RULE_NAME.match(name) or name in names:
            raise SpecError(f"{where}.name", f"{shown(name)} must be a unique rule name such as {RULE_HEAD_FAILED!r}")
        names.add(name)
        action = rule.get("action")
        if not isinstance(action, str) or action not in FAILURE_POLICY_ACTIONS:
            raise SpecError(
                f"{where}.action",
                f"{shown(rule.get('action'))} is not one of {', '.join(sorted(FAILURE_POLICY_ACTIONS))}",
            )
        for list_field in ("onJobFailureReasons", "onJobFailureMessagePatterns", "targetReplicatedJobs"):
            values = rule.get(list_field) or []
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                raise SpecError(f"{where}.{list_field}", "must be a list of strings")
        for target in rule.get("targetReplicatedJobs") or []:
            if target not in replicated_jobs:
                raise SpecError(f"{where}.targetReplicatedJobs", f"{shown(target)} is not a replicated job")


def _lint_replicated_job(rjob: Any, where: str, seen: set[str], jobset: str | None) -> None:
    if not isinstance(rjob, Mapping):
        raise SpecError(where, "must be a mapping")
    rname = rjob.get("name")
    if not isinstance(rname, str) or not _DNS1035_LABEL.match(rname) or len(rname) > NAME_MAX:
        raise SpecError(f"{where}.name", f"{shown(rname)} must be a DNS-1035 label")
    if rname in seen:
        raise SpecError(f"{where}.name", f"{rname!r} is used twice")
    seen.add(rname)
    replicas = rjob.get("replicas", 1)
    if not _is_int_in(replicas, 1, INT32_MAX):
        raise SpecError(f"{where}.replicas", f"must be an integer from 1 to {INT32_MAX}, got {shown(replicas)}")
    template = rjob.get("template")
    job_spec = template.get("spec") if isinstance(template, Mapping) else None
    if not isinstance(job_spec, Mapping):
        raise SpecError(f"{where}.template.spec", "is required (a batch/v1 JobSpec)")
    for count in ("completions", "parallelism", "backoffLimit"):
        if count in job_spec and not _is_int_in(job_spec[count], 0, INT32_MAX):
            raise SpecError(f"{where}.template.spec.{count}", f"must be an int32 >= 0, got {shown(job_spec[count])}")
    pod_template = job_spec.get("template")
    pod_spec = pod_template.get("spec") if isinstance(pod_template, Mapping) else None
    if not isinstance(pod_spec, Mapping):
        raise SpecError(f"{where}.template.spec.template.spec", "is required (a PodSpec)")
    pod_metadata = pod_template.get("metadata") if isinstance(pod_template, Mapping) else None
    if isinstance(pod_metadata, Mapping):
        _check_labels(pod_metadata.get("labels") or {}, f"{where}.template.spec.template.metadata.labels")
    elif pod_metadata is not None:
        raise SpecError(f"{where}.template.spec.template.metadata", "must be a mapping")
    if "podFailurePolicy" in job_spec and pod_spec.get("restartPolicy") != "Never":
        # The API server refuses it only when the JobSet controller creates the Job: the JobSet would exist,
        # its child Jobs never.
        raise SpecError(
            f"{where}.template.spec.podFailurePolicy",
            'needs the pod\'s restartPolicy "Never" (Kubernetes refuses it with any other restartPolicy)',
        )
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise SpecError(f"{where}.template.spec.template.spec.containers", "must be a non-empty list")
    init_containers = pod_spec.get("initContainers") or []
    if not isinstance(init_containers, list):
        raise SpecError(f"{where}.template.spec.template.spec.initContainers", "must be a list")
    for kind, listed in (("containers", containers), ("initContainers", init_containers)):
        for cindex, container in enumerate(listed):
            _lint_container(container, f"{where}.template.spec.template.spec.{kind}[{cindex}]")
    if jobset:
        _check_child_names(jobset, rname, replicas, job_spec, where)


def _lint_container(container: Any, where: str) -> None:
    if not isinstance(container, Mapping) or not isinstance(container.get("name"), str) or not container["name"]:
        raise SpecError(f"{where}.name", "is required")
    if not isinstance(container.get("image"), str) or not container["image"]:
        raise SpecError(f"{where}.image", "is required")
    for argv_field in ("command", "args"):
        argv = container.get(argv_field, [])
        if not isinstance(argv, list) or not all(isinstance(item, str) for item in argv):
            raise SpecError(f"{where}.{argv_field}", "must be a list of strings (an argv, never a shell string)")


def _check_child_names(jobset: str, rname: str, replicas: int, job_spec: Mapping[str, Any], where: str) -> None:
    """The upstream webhook's rule: the longest child Job and pod names are DNS-1035 labels <= 63."""
    longest_job = f"{jobset}-{rname}-{replicas - 1}"
    if len(longest_job) > NAME_MAX:
        raise SpecError(
            "metadata.name",
            f"{jobset!r} is too long: the child Job name {longest_job!r} of {where} exceeds {NAME_MAX} characters",
        )
    completions = job_spec.get("completions")
    if job_spec.get("completionMode") == "Indexed" and isinstance(completions, int) and completions >= 1:
        longest_pod = f"{longest_job}-{completions - 1}{POD_NAME_RANDOM_SUFFIX}"
        if len(longest_pod) > NAME_MAX:
            raise SpecError(
                "metadata.name",
                f"{jobset!r} is too long: pod names of {where} such as {longest_pod!r} exceed {NAME_MAX} characters",
            )
