"""Names shared by the library, the plugin and the local stand-ins: label keys and log markers.

`local/` may import this module (and only this one) from `operators/`.
"""

from __future__ import annotations

import re
from typing import Final

# Upstream JobSet labels/annotations (kubernetes-sigs/jobset, pkg/constants).
JOBSET_GROUP: Final = "jobset.x-k8s.io"
JOBSET_VERSION: Final = "v1alpha2"
JOBSET_PLURAL: Final = "jobsets"
JOBSET_KIND: Final = "JobSet"
JOBSET_PREFIX: Final = "jobset.sigs.k8s.io"
LABEL_JOBSET_NAME: Final = f"{JOBSET_PREFIX}/jobset-name"
LABEL_JOBSET_UID: Final = f"{JOBSET_PREFIX}/jobset-uid"
LABEL_REPLICATED_JOB_NAME: Final = f"{JOBSET_PREFIX}/replicatedjob-name"
LABEL_REPLICATED_JOB_REPLICAS: Final = f"{JOBSET_PREFIX}/replicatedjob-replicas"
LABEL_GLOBAL_REPLICAS: Final = f"{JOBSET_PREFIX}/global-replicas"
LABEL_JOB_INDEX: Final = f"{JOBSET_PREFIX}/job-index"
LABEL_JOB_GLOBAL_INDEX: Final = f"{JOBSET_PREFIX}/job-global-index"
LABEL_JOB_KEY: Final = f"{JOBSET_PREFIX}/job-key"
LABEL_RESTART_ATTEMPT: Final = f"{JOBSET_PREFIX}/restart-attempt"
ANNOTATION_COORDINATOR: Final = f"{JOBSET_PREFIX}/coordinator"
# JobSet's exclusive placement (api/jobset/v1alpha2/jobset_types.go `ExclusiveKey`): on the JobSet or on a
# ReplicatedJob's Job template, its value a node label; each child Job then owns one domain of that label.
ANNOTATION_EXCLUSIVE_TOPOLOGY: Final = "alpha.jobset.sigs.k8s.io/exclusive-topology"

# Kueue (kubernetes-sigs/kueue pkg/controller/constants/constants.go): the LocalQueue a job is submitted to,
# its WorkloadPriorityClass, and the label Kueue puts on a Workload naming its job's uid.
KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_VERSION: Final = "v1beta2"
LABEL_KUEUE_QUEUE_NAME: Final = "kueue.x-k8s.io/queue-name"
LABEL_KUEUE_PRIORITY_CLASS: Final = "kueue.x-k8s.io/priority-class"
LABEL_KUEUE_JOB_UID: Final = "kueue.x-k8s.io/job-uid"

# GKE node labels, taint and extended resource of TPU node pools (cloud.google.com/kubernetes-engine/docs/
# concepts/tpus; xpk core/system_characteristics.py), and the node label of a host.
LABEL_GKE_NODEPOOL: Final = "cloud.google.com/gke-nodepool"
LABEL_GKE_TPU_ACCELERATOR: Final = "cloud.google.com/gke-tpu-accelerator"
LABEL_GKE_TPU_TOPOLOGY: Final = "cloud.google.com/gke-tpu-topology"
LABEL_HOSTNAME: Final = "kubernetes.io/hostname"
TPU_RESOURCE: Final = "google.com/tpu"

# Kubernetes Job labels.
LABEL_JOB_NAME: Final = "batch.kubernetes.io/job-name"
LABEL_CONTROLLER_UID: Final = "batch.kubernetes.io/controller-uid"
LABEL_JOB_COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
ANNOTATION_JOB_COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"

# The project's own labels.
PROJECT_PREFIX: Final = "elastic-training.airflow.apache.org"
LABEL_RUN_NAME: Final = f"{PROJECT_PREFIX}/run-name"
LABEL_STAGE: Final = f"{PROJECT_PREFIX}/stage"
LABEL_DAG_ID: Final = f"{PROJECT_PREFIX}/dag-id"
LABEL_TASK_ID: Final = f"{PROJECT_PREFIX}/task-id"
LABEL_RUN_ID: Final = f"{PROJECT_PREFIX}/run-id"
LABEL_MAP_INDEX: Final = f"{PROJECT_PREFIX}/map-index"

# Replicated job and container names of a Pathways JobSet (as xpk renders it).
HEAD_REPLICATED_JOB: Final = "pathways-head"
WORKER_REPLICATED_JOB: Final = "worker"
HEAD_MAIN_CONTAINER: Final = "jax-tpu"
WORKER_CONTAINER: Final = "pathways-worker"

# MaxText / pathwaysutils log lines (docs/architecture.md §4). Unanchored: absl prefixes lines.
COMPLETED_STEP_RE: Final = re.compile(r"completed step: (\d+), seconds: ([0-9.]+)")
LIVE_SLICE_COUNT_RE: Final = re.compile(r"live slice count: (\d+)")
# Not "Elastic attempt N failed." (pathwaysutils' ElasticRuntimeError when the attempt budget is spent).
ELASTIC_ATTEMPT_RE: Final = re.compile(r"Elastic attempt (\d+)(?!\d| failed)")
ELASTIC_ATTEMPTS_SPENT_RE: Final = re.compile(r"Elastic attempt (\d+) failed\.")
ELASTIC_EVENT_RE: Final = re.compile(r"Elastic event detected")
SUFFICIENT_SLICES_RE: Final = re.compile(r"Sufficient slices active: (\d+) >= (\d+)")
RESTORING_STEP_RE: Final = re.compile(r"restoring from this run's directory step (\d+)")
NO_CHECKPOINT_RE: Final = re.compile(r"No existing checkpoints found, not restoring checkpoint\.")
ASYNC_SAVE_STARTED_RE: Final = re.compile(r"Started an asynchronous checkpoint save for step (\d+)")
SAVED_CHECKPOINT_RE: Final = re.compile(r"Saved a checkpoint at step (\d+)\.")
TRAINING_STOPPED_RE: Final = re.compile(r"Training stopped: (.*)")
# MaxText's refusal to train a run already at its target (maxtext 0.2.5 utils/train_utils.py
# validate_completed_steps): an uncaught RuntimeError, exit 1. Groups: the requested steps, the newest step.
ALREADY_AT_TARGET_RE: Final = re.compile(
    r"Requested training up to step (\d+), but a checkpoint already exists at step (\d+)"
)

# MaxText's refusal of its configuration (maxtext 0.2.5 configs/pyconfig.py _handle_config_exception): an unknown
# key, a bad value or one of its own rules, logged between two rules of `=`. Its exit code is no sign: 2 only
# outside a test framework, and the trainer's imports load unittest (via etils.epath), so on every machine the
# error is re-raised, exit 1. Group: the message's first line.
CONFIG_ERROR_RE: Final = re.compile(r"MAXTEXT CONFIG ERROR: (.*)")

# Orbax / MaxText checkpoint layout.
CHECKPOINTS_DIR: Final = "checkpoints"
COMMIT_SUCCESS_FILE: Final = "commit_success.txt"
CHECKPOINT_METADATA_FILE: Final = "_CHECKPOINT_METADATA"
TMP_DIR_SUFFIX: Final = ".orbax-checkpoint-tmp"
RECOVERY_RECORDS_FILE: Final = "recoveries.jsonl"

# Upstream JobSet group labels/annotations (kubernetes-sigs/jobset, api/jobset/v1alpha2).
LABEL_GROUP_NAME: Final = f"{JOBSET_PREFIX}/group-name"
LABEL_GROUP_REPLICAS: Final = f"{JOBSET_PREFIX}/group-replicas"
LABEL_JOB_GROUP_INDEX: Final = f"{JOBSET_PREFIX}/job-group-index"

# The Workloads the operators read (apis/kueue/v1beta2/workload_types.go).
WORKLOAD_PLURAL: Final = "workloads"

# pathwaysutils' wait for slices (pathwaysutils/elastic/elastic.py `wait_for_slices`, logged at every attempt's
# start and every poll) and its scale-up (pathwaysutils/elastic/manager.py `handle_scale_up_error`).
SLICE_WAIT_RE: Final = re.compile(r"Waiting for (\d+) slices")
SLICES_WANTED_RE: Final = re.compile(r"(\d+) slices active\. Wanting at least (\d+)")
SCALE_UP_RE: Final = re.compile(r"Scale up requested\.")

# The local trainer logs each in-process recovery as one JSON object (local/workloads/recovery_log.py).
RECOVERY_RECORD_RE: Final = re.compile(r"Recovery record: (\{.*\})")

# Local-only: seconds each step of the local trainer also takes (local/workloads/trainer.py), standing in for an
# accelerator's step time so that a fault scheduled at a step lands while training runs (the tiny local model
# otherwise does 60 steps in a second).
LOCAL_STEP_SECONDS_ENV: Final = "LOCAL_STEP_SECONDS"
