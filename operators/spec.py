"""Typed run specs for elastic MaxText training, and the lint that runs before anything is created.

What the lint enforces follows upstream behaviour (docs/architecture.md §5 and §8):

- MaxText (`src/maxtext/configs/types.py`) refuses `elastic_enabled` without `enable_single_controller=True`
  (Pathways), creates no checkpoint manager when `enable_checkpointing=false`, auto-resumes only from
  `<base_output_directory>/<run_name>/checkpoints`, and falls back to `JOBSET_NAME` or a timestamp when
  `run_name` is empty (so a recreated JobSet would start from scratch).
- pathwaysutils' `elastic_retry(max_retries=N)` allows N *attempts*, the first run included, and MaxText maps
  `elastic_min_slice_count=-1` to "wait for all slices".
- TPU accelerator labels, chips per VM and topology shapes follow xpk's `core/system_characteristics.py`
  (GKE's `cloud.google.com/gke-tpu-accelerator` values, 4 chips per multi-host VM, 1 for a 1x1 slice).
- Google tags the Pathways server and proxy images `jax-<version>` (pathways-utils
  `pathwaysutils/experimental/shared_pathways_service/deploy_pathways_service.py` at 8950a34 builds
  `.../pathways/server:jax-{jax_version}`; MaxText's `src/dependencies/scripts/build_upload_colocated_python_image.sh`
  at e591f30 picks the Pathways-side tag from the `jax>=` floor of its TPU requirements). The defaults match the
  MaxText commit this project follows (e591f30: `generated_requirements/tpu-requirements.txt` has `jax>=0.10.2`).
  xpk and google/pathways-job default to `:latest`, which a full restart may resolve to a newer server than the JAX
  in the MaxText image; the lint refuses `:latest` and untagged Pathways images.

This module is pure: no Airflow, no Kubernetes client. `SpecError` carries the offending field so the
operator can turn it into an `AirflowFailException` naming it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, cast, get_args

from elastic_training.operators import run_layout
from elastic_training.operators.image_reference import image_reference_error
from elastic_training.operators.shown import shown
from elastic_training.operators.tpu_types import TPU_TYPES, TpuType

Runtime = Literal["gke", "local"]
RUNTIMES: Final[tuple[str, ...]] = get_args(Runtime)

# MaxText's pre-training entry point and its base config inside the MaxText image
# (maxtext: src/maxtext/trainers/pre_train/train.py, src/maxtext/configs/base.yml).
MAXTEXT_TRAIN_MODULE: Final = "maxtext.trainers.pre_train.train"
DEFAULT_CONFIG_FILE: Final = "src/maxtext/configs/base.yml"
# The `local` runtime's defaults when the spec leaves them unset: the same JobSet as on GKE, with an image
# the local cluster's image catalogue runs as the MaxText stand-in (local/nodeagent/images.py) and the seed's
# slice, v5e-16 (4x4: 4 hosts of 4 chips, so 4 worker pods a slice), which the local cluster's default
# description (`v5e-small`: four 4x4 node pools, a 2x2 one for the pipeline's stages, and `cpu-np`) has pools for.
LOCAL_MAXTEXT_IMAGE: Final = "localhost/maxtext:local-stand-in"
LOCAL_TPU_TYPE: Final = "v5e"
LOCAL_TPU_TOPOLOGY: Final = "4x4"

DNS1123_LABEL_MAX: Final = 63
# Replicas, backoffLimit, maxRestarts and completions are int32 in the JobSet and batch/v1 APIs; every integer
# of a spec is held to that range so a huge templated value is a lint error, not a rejected create.
INT32_MAX: Final = 2**31 - 1
# A DNS-1123 label's grammar (without anchors: the trigger form's JSON Schema pattern is this one too).
DNS1123_LABEL_PATTERN: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL = re.compile(rf"^{DNS1123_LABEL_PATTERN}\Z")
# MaxText saves the final step, steps - 1, on completion: a run has at least one step before it.
MIN_STEPS: Final = 2
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
# gs:// bucket names (cloud.google.com/storage/docs/buckets#naming), dotted names up to 222 chars.
_GCS_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]\Z")


# The Pathways images (resource manager and worker share the server image; the proxy is the IFRT proxy), tagged
# with the JAX release they serve: keep them equal to the JAX in the MaxText image (docs/operators.md).
PATHWAYS_JAX_VERSION: Final = "0.10.2"
PATHWAYS_IMAGE_REPOSITORY: Final = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways"
PATHWAYS_SERVER_IMAGE: Final = f"{PATHWAYS_IMAGE_REPOSITORY}/server:jax-{PATHWAYS_JAX_VERSION}"
PATHWAYS_PROXY_IMAGE: Final = f"{PATHWAYS_IMAGE_REPOSITORY}/proxy_server:jax-{PATHWAYS_JAX_VERSION}"

# xpk's CPU node pool for the Pathways head (`xpk cluster create-pathways` makes `cpu-np`).
DEFAULT_HEAD_NODE_POOL: Final = "cpu-np"
ImagePullPolicy = Literal["Always", "IfNotPresent", "Never"]
IMAGE_PULL_POLICIES: Final[tuple[str, ...]] = get_args(ImagePullPolicy)
# Variables the GKE JobSet sets itself (docs/operators.md): `trainer_env` and `worker_env` may not replace them,
# since the Pathways wiring (proxy address, slice identity, coordinator) breaks without them.
TRAINER_ENV_RESERVED: Final = frozenset({"PATHWAYS_HEAD", "JAX_PLATFORMS", "JAX_BACKEND_TARGET", "XCLOUD_ENVIRONMENT"})
WORKER_ENV_RESERVED: Final = frozenset(
    {
        "XCLOUD_ENVIRONMENT",
        "MEGASCALE_NUM_SLICES",
        "MEGASCALE_SLICE_ID",
        "MEGASCALE_COORDINATOR_ADDRESS",
        "JOBSET_NAME",
        "REPLICATED_JOB_NAME",
        "PATHWAYS_HEAD",
    }
)
# A C identifier: what shells and Python read reliably (Kubernetes itself takes any printable name without '=').
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_ENV_VALUE_MAX: Final = 32_768

# MaxText keys the operator renders itself, mapped to the operator parameter that sets them.
OPERATOR_OWNED_KEYS: Final[Mapping[str, str]] = {
    "run_name": "run_name",
    "base_output_directory": "base_output_directory",
    "steps": "steps",
    "checkpoint_period": "checkpoint_period",
    "num_slices": "num_slices",
    "elastic_timeout_seconds": "elastic_timeout_seconds",
    "elastic_max_retries": "elastic_max_retries",
    "elastic_min_slice_count": "elastic_min_slice_count",
}
# Always on for an elastic run: MaxText's elastic mode needs Pathways and restores from checkpoints.
ALWAYS_ON_KEYS: Final[Mapping[str, str]] = {
    "elastic_enabled": "the operator always runs MaxText elastic (use JobSetOperator for a non-elastic job)",
    "enable_single_controller": "MaxText elastic training is only supported with Pathways "
    "(enable_single_controller=True), which the operator always sets",
    "enable_checkpointing": "elastic recovery and full restarts resume from committed checkpoints, "
    "so the operator always sets enable_checkpointing=true",
}
_FALSE_WORDS = frozenset({"false", "0", "no", "off"})

# How long an elastic attempt may wait for slices on GKE (docs/architecture.md §3, "Elastic timeout"). Below the
# minimum not even a worker container restarted in place (kubelet back-off from 10 s, Pathways worker start and
# registration with the resource manager) comes back, so every slice hiccup would end the run. GKE's node
# auto-repair starts after about 10 minutes NotReady, then drains and recreates the node
# (cloud.google.com/kubernetes-engine/docs/how-to/node-auto-repair), and a host event interrupts the whole
# multi-host slice (cloud.google.com/kubernetes-engine/docs/concepts/handle-disruption-gpu-tpu): riding out a lost
# host in process needs a timeout of that order plus the slice's restart.
ELASTIC_TIMEOUT_MIN_GKE_SECONDS: Final = 60
GKE_AUTO_REPAIR_DETECTION_SECONDS: Final = 600
ELASTIC_TIMEOUT_HOST_REPAIR_SECONDS: Final = 1200
# A save on gs:// that meets a few 503s in a row waits out its clients' backoff (gcsfs and tensorstore: 1+2+4+8+16 s
# and jitter for five; benchmarks/gcs_burst_delay.py measured up to 36 s alone, and 65 s was seen under load): a
# stall timeout under two minutes can take that wait for a stall.
GCS_SAVE_BACKOFF_STALL_SECONDS: Final = 120


class SpecError(ValueError):
    """A run spec, job spec or manifest field is invalid. `str()` is ``"<field>: <message>"``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


DEFAULT_ELASTIC_TIMEOUT_SECONDS: Final = 300  # MaxText's own default


@dataclass(frozen=True)
class ElasticRunSpec:
    """Everything that decides the elastic MaxText JobSet of one run.

    Values are checked by `lint`, not here, so a spec can be built from templated values and linted with
    one clear error. See docs/operators.md for every field and rule.
    """

    run_name: str
    base_output_directory: str
    steps: int
    checkpoint_period: int
    num_slices: int
    runtime: Runtime = "gke"
    maxtext_args: Mapping[str, str] = field(default_factory=dict)
    image: str | None = None
    tpu_type: str | None = None
    tpu_topology: str | None = None
    max_slice_restarts: int = 3
    jobset_max_restarts: int = 0
    elastic_max_retries: int | None = None
    elastic_timeout_seconds: int = DEFAULT_ELASTIC_TIMEOUT_SECONDS
    elastic_min_slice_count: int = -1
    config_file: str = DEFAULT_CONFIG_FILE
    pathways_server_image: str = PATHWAYS_SERVER_IMAGE
    pathways_proxy_image: str = PATHWAYS_PROXY_IMAGE
    head_node_pool: str = DEFAULT_HEAD_NODE_POOL
    service_account: str | None = None
    priority_class: str | None = None
    queue_name: str | None = None
    workload_priority_class: str | None = None
    elastic_slices: int | None = None
    stall_timeout_seconds: float | None = None
    startup_timeout_seconds: float | None = None
    image_pull_policy: ImagePullPolicy | None = None
    trainer_env: Mapping[str, str] = field(default_factory=dict)
    worker_env: Mapping[str, str] = field(default_factory=dict)
    # GKE node pools the workers keep off (avoid_failing_node_pools, operators/pool_avoidance.py)
    avoid_node_pools: tuple[str, ...] = ()

    @property
    def run_directory(self) -> str:
        """`<base_output_directory>/<run_name>`: where MaxText writes everything of this run."""
        return run_layout.run_directory(self.base_output_directory, self.run_name)

    @property
    def checkpoint_directory(self) -> str:
        """`<run_directory>/checkpoints`: the Orbax CheckpointManager root MaxText resumes from."""
        return f"{self.run_directory}/checkpoints"

    @property
    def target_step(self) -> int:
        """The last step: MaxText counts from 0 and saves step `steps - 1` on completion."""
        return self.steps - 1

    @property
    def effective_elastic_slices(self) -> int:
        """``elastic_slices`` (the proxy's ``--num_elastic_slices``: the slices the run may lose), or its default.

        xpk leaves ``--elastic-slices`` to the user (default 0: not elastic); its elastic recipes and MaxText's guide
        use 1 (pause-resume: wait for the lost slice), and ml-auto-solutions' replica-resize runs the slices the run
        may continue without, ``num_slices - elastic_min_slice_count``.
        """
        if self.elastic_slices is not None:
            return self.elastic_slices
        if self.elastic_min_slice_count != -1 and _is_int(self.num_slices) and _is_int(self.elastic_min_slice_count):
            return max(1, self.num_slices - self.elastic_min_slice_count)
        return 1

    @property
    def effective_elastic_max_retries(self) -> int:
        """`elastic_max_retries`, or its default: one attempt per allowed slice restart plus the first run."""
        if self.elastic_max_retries is not None:
            return self.elastic_max_retries
        return self.max_slice_restarts + 1

    @property
    def tpu(self) -> TpuType:
        """The `TpuType` of `tpu_type` (`SpecError` when unknown or unset; `LOCAL_TPU_TYPE` on local)."""
        tpu_type = self.tpu_type
        if tpu_type is None and self.runtime == "local" and self.tpu_topology is None:
            tpu_type = LOCAL_TPU_TYPE
        if tpu_type is None:
            raise SpecError("tpu_type", "is required for the gke runtime")
        tpu = TPU_TYPES.get(tpu_type)
        if tpu is None:
            raise SpecError("tpu_type", f"unknown TPU type {shown(tpu_type)}; known: {', '.join(TPU_TYPES)}")
        return tpu

    @property
    def topology(self) -> str:
        """`tpu_topology`, or `LOCAL_TPU_TOPOLOGY` on the local runtime when neither TPU field is set."""
        return self._topology()

    @property
    def trainer_image(self) -> str:
        """`image`, or `LOCAL_MAXTEXT_IMAGE` on the local runtime (`SpecError` on gke when unset)."""
        if self.image is not None:
            return self.image
        if self.runtime == "local":
            return LOCAL_MAXTEXT_IMAGE
        raise SpecError("image", "is required for the gke runtime")

    @property
    def vms_per_slice(self) -> int:
        """Worker pods per slice, from the TPU type and topology (on both runtimes)."""
        return self.tpu.vms_per_slice(self._topology())

    @property
    def chips_per_slice(self) -> int:
        """Accelerator chips per slice, from the TPU type and topology (on both runtimes)."""
        return self.tpu.chips(self._topology())

    @property
    def total_chips(self) -> int:
        """Chips of the whole run, the unit of cost accounting."""
        return self.chips_per_slice * self.num_slices

    def maxtext_keys(self) -> list[str]:
        """The ordered `key=value` arguments the head runs: the operator's keys, then `maxtext_args`."""
        keys = [
            f"base_output_directory={self.base_output_directory}",
            f"run_name={self.run_name}",
            f"steps={self.steps}",
            "enable_checkpointing=true",
            f"checkpoint_period={self.checkpoint_period}",
            "enable_single_controller=True",
            "elastic_enabled=true",
            f"elastic_timeout_seconds={self.elastic_timeout_seconds}",
            f"elastic_max_retries={self.effective_elastic_max_retries}",
        ]
        if self.elastic_min_slice_count != -1:
            keys.append(f"elastic_min_slice_count={self.elastic_min_slice_count}")
        keys += [f"{key}={render_value(value)}" for key, value in self.maxtext_args.items()]
        return keys

    def _topology(self) -> str:
        if self.tpu_topology is None and self.runtime == "local" and self.tpu_type is None:
            return LOCAL_TPU_TOPOLOGY
        if self.tpu_topology is None:
            raise SpecError("tpu_topology", "is required for the gke runtime")
        return self.tpu_topology


def render_value(value: object) -> str:
    """A `maxtext_args` value as MaxText reads it: strings as is, booleans lowercase, numbers via `str`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def lint(spec: ElasticRunSpec) -> None:
    """Raise `SpecError(field, message)` for the first problem of `spec`, before anything is created."""
    _lint_runtime(spec)
    _lint_run_name(spec.run_name)
    check_output_directory(spec.base_output_directory)
    _lint_steps(spec)
    _lint_slices(spec)
    _lint_budgets(spec)
    _lint_accelerator(spec)
    _lint_worker_backoff(spec)
    _lint_config_file(spec.config_file)
    _lint_maxtext_args(spec.maxtext_args)
    _lint_pathways_images(spec)
    _lint_gke_placement(spec)
    _lint_env("trainer_env", spec.trainer_env, TRAINER_ENV_RESERVED)
    _lint_env("worker_env", spec.worker_env, WORKER_ENV_RESERVED)


def lint_warnings(spec: ElasticRunSpec) -> list[str]:
    """Advice on a spec that passed `lint`: valid choices whose cost the user should know. Pure; may be empty."""
    warnings = []
    timeout = spec.elastic_timeout_seconds
    if spec.runtime == "gke" and spec.elastic_min_slice_count == -1 and timeout < ELASTIC_TIMEOUT_HOST_REPAIR_SECONDS:
        warnings.append(
            f"elastic_timeout_seconds={timeout} waits for all slices for less than GKE takes to repair a lost host "
            f"(auto-repair starts after ~{GKE_AUTO_REPAIR_DETECTION_SECONDS // 60} min NotReady, then the multi-host "
            "slice is recreated): such a failure will end the attempt and cost a JobSet or full restart instead of "
            f"an in-process recovery. Raise it to {ELASTIC_TIMEOUT_HOST_REPAIR_SECONDS} or more to ride out host "
            "repairs, or set elastic_min_slice_count to continue on fewer slices."
        )
    stall = spec.stall_timeout_seconds
    if spec.base_output_directory.startswith("gs://") and stall is not None and stall < GCS_SAVE_BACKOFF_STALL_SECONDS:
        warnings.append(
            f"stall_timeout={stall:g} s on gs://: a checkpoint save that meets a few GCS errors in a row waits out "
            "the storage clients' backoff (1+2+4+8+16 s for five, longer on a loaded host), and a trainer waiting "
            "for that save makes no progress: such a wait can be judged a stall and cost a full restart. Use "
            f"{GCS_SAVE_BACKOFF_STALL_SECONDS} s or more."
        )
    return warnings


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require_int(name: str, value: object, minimum: int, maximum: int = INT32_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(name, f"must be an integer, got {shown(value)}")
    if value < minimum:
        raise SpecError(name, f"must be at least {minimum}, got {shown(value)}")
    if value > maximum:
        raise SpecError(name, f"must be at most {maximum}, got {shown(value)}")
    return value


def checkpoint_period_error(checkpoint_period: int, steps: int) -> str | None:
    """Why ``checkpoint_period`` is not well under ``steps`` (more than half of them), or ``None`` when it is."""
    if checkpoint_period * 2 <= steps:
        return None
    return (
        f"{checkpoint_period} is not well under steps ({steps}): it must be at most steps/2 ({steps // 2}), so at "
        "least one checkpoint is committed before the final save and a failure loses at most one period of work"
    )


def stall_timeout_error(stall_timeout_seconds: float, elastic_timeout_seconds: int) -> str | None:
    """Why ``stall_timeout`` is too short for MaxText's wait for slices, or ``None`` when it exceeds it.

    pathwaysutils' wait for slices is progress only up to ``elastic_timeout_seconds``; after it the restore and the
    step function's compilation come before the next step, so a stall timeout at or under that wait would cut short
    an in-process recovery that MaxText is still allowed to finish.
    """
    if stall_timeout_seconds > elastic_timeout_seconds:
        return None
    # An elastic timeout past float's range (the lint refuses it elsewhere too) must not raise OverflowError here.
    short = elastic_timeout_seconds - stall_timeout_seconds if elastic_timeout_seconds < 2**53 else math.inf
    by = "it equals that wait" if short == 0 else f"it is {short:g} s short of that wait"
    return (
        f"{stall_timeout_seconds:g} s does not exceed elastic_timeout_seconds={elastic_timeout_seconds} "
        f"({by}, and the restore and compilation come after it): raise it above "
        f"{elastic_timeout_seconds} s, or lower elastic_timeout_seconds"
    )


def startup_timeout_error(startup_timeout_seconds: float, elastic_timeout_seconds: int) -> str | None:
    """Why ``startup_timeout`` is too short for the start-up's wait for slices, or ``None`` when it exceeds it.

    pathwaysutils waits for the slices before the first attempt too, for up to ``elastic_timeout_seconds``; JAX's
    start before it and the restore and compilation after it are start-up as well.
    """
    if startup_timeout_seconds > elastic_timeout_seconds:
        return None
    return (
        f"{startup_timeout_seconds:g} s does not exceed elastic_timeout_seconds={elastic_timeout_seconds} "
        "(pathwaysutils' wait for slices before the first step may take that long, and the restore and "
        f"compilation come after it): raise it above {elastic_timeout_seconds} s, or lower elastic_timeout_seconds"
    )


def _lint_timeout(name: str, value: object, elastic_timeout: int, judge: Callable[[float, int], str | None]) -> None:
    """``stall_timeout`` or ``startup_timeout`` (seconds): positive, at most INT32_MAX, and what ``judge`` says of it
    against the wait for slices."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 or value != value:
        raise SpecError(name, f"must be a positive number of seconds, got {shown(value)}")
    if value > INT32_MAX:  # also keeps an int past float's range from raising OverflowError below
        raise SpecError(name, f"must be at most {INT32_MAX} seconds, got {shown(value)}")
    error = judge(float(value), elastic_timeout)
    if error is not None:
        raise SpecError(name, error)


def _lint_elastic_slices(spec: ElasticRunSpec) -> None:
    if spec.elastic_slices is None:
        return
    slices = spec.num_slices
    lost = _require_int("elastic_slices", spec.elastic_slices, 1, slices)
    minimum = spec.elastic_min_slice_count
    if minimum != -1 and lost < slices - minimum:
        raise SpecError(
            "elastic_slices",
            f"{lost} is fewer than the slices elastic_min_slice_count={minimum} lets the run go on without "
            f"({slices} - {minimum} = {slices - minimum}): the proxy would end the run before MaxText's minimum",
        )


def check_runtime(value: object) -> Runtime:
    """``value`` as a `Runtime`, or `SpecError` naming ``runtime``: the one check of that value."""
    if not isinstance(value, str) or value not in RUNTIMES:
        raise SpecError("runtime", f"must be one of {', '.join(RUNTIMES)}, got {shown(value)}")
    return cast(Runtime, value)


def _lint_runtime(spec: ElasticRunSpec) -> None:
    check_runtime(spec.runtime)


def is_dns1123_label(value: str) -> bool:
    """Whether `value` is a DNS-1123 label (lowercase alphanumerics and '-', alphanumeric ends, <= 63)."""
    return len(value) <= DNS1123_LABEL_MAX and bool(_DNS1123_LABEL.match(value))


def _lint_run_name(run_name: object) -> None:
    if run_name is not None and not isinstance(run_name, str):
        raise SpecError("run_name", f"must be a string, got {shown(run_name)}")
    if not run_name:
        raise SpecError(
            "run_name",
            "is required: MaxText resumes only from <base_output_directory>/<run_name>, and an empty run_name "
            "falls back to the JobSet name or a timestamp, so a full restart would start from scratch",
        )
    if len(run_name) > DNS1123_LABEL_MAX:
        raise SpecError(
            "run_name",
            f"must be at most {DNS1123_LABEL_MAX} characters (it is a label value), got {len(run_name)}",
        )
    if not _DNS1123_LABEL.match(run_name):
        raise SpecError(
            "run_name",
            f"{shown(run_name)} is not a DNS-1123 label: use lowercase letters, digits and '-', "
            "starting and ending with a letter or digit",
        )


def _has_unsafe_chars(value: str) -> bool:
    return any(c.isspace() or not c.isprintable() for c in value)


def is_gcs_bucket(name: str) -> bool:
    """Whether ``name`` is a GCS bucket name (cloud.google.com/storage/docs/buckets#naming)."""
    return bool(_GCS_BUCKET.match(name)) and ".." not in name


def check_output_directory(path: object) -> None:
    """`SpecError` naming ``base_output_directory`` unless ``path`` is an absolute path or ``gs://bucket/prefix``.

    Without whitespace or control characters, and without ``..`` segments: the one check of that grammar.
    """
    name = "base_output_directory"
    if path is not None and not isinstance(path, str):
        raise SpecError(name, f"must be a string, got {shown(path)}")
    if not path:
        raise SpecError(name, "is required: a gs://bucket/prefix URI or an absolute local path")
    if _has_unsafe_chars(path):
        raise SpecError(name, f"must not contain whitespace or control characters: {shown(path)}")
    if path.startswith("gs://"):
        bucket, _, rest = path[len("gs://") :].partition("/")
        if not is_gcs_bucket(bucket):
            raise SpecError(name, f"{shown(bucket)} is not a valid GCS bucket name in {shown(path)}")
        segments = rest.split("/")
    elif path.startswith("/"):
        segments = path.split("/")
    else:
        raise SpecError(name, f"must be a gs://bucket/prefix URI or an absolute local path, got {shown(path)}")
    if ".." in segments:
        raise SpecError(name, f"must not contain '..' segments: {shown(path)}")


def _lint_steps(spec: ElasticRunSpec) -> None:
    steps = _require_int("steps", spec.steps, MIN_STEPS)
    period = _require_int("checkpoint_period", spec.checkpoint_period, 1)
    if (period_error := checkpoint_period_error(period, steps)) is not None:
        raise SpecError("checkpoint_period", period_error)


def _lint_slices(spec: ElasticRunSpec) -> None:
    slices = _require_int("num_slices", spec.num_slices, 1)
    minimum = _require_int("elastic_min_slice_count", spec.elastic_min_slice_count, -1)
    if minimum == -1:
        return
    if slices == 1:
        raise SpecError(
            "elastic_min_slice_count",
            f"must be -1 (wait for all slices) with a single slice, got {minimum}",
        )
    if not 1 <= minimum <= slices - 1:
        raise SpecError(
            "elastic_min_slice_count",
            f"must be -1 (wait for all {slices} slices) or 1..{slices - 1} (continue on fewer slices), got {minimum}",
        )


def _lint_budgets(spec: ElasticRunSpec) -> None:
    restarts = _require_int("max_slice_restarts", spec.max_slice_restarts, 0)
    _require_int("jobset_max_restarts", spec.jobset_max_restarts, 0)
    timeout = _require_int("elastic_timeout_seconds", spec.elastic_timeout_seconds, 1)
    if spec.runtime == "gke" and timeout < ELASTIC_TIMEOUT_MIN_GKE_SECONDS:
        raise SpecError(
            "elastic_timeout_seconds",
            f"{timeout} s is shorter than a Pathways worker's restart on GKE (kubelet back-off, server start, "
            f"registration with the resource manager): use at least {ELASTIC_TIMEOUT_MIN_GKE_SECONDS} "
            f"(MaxText's default is 300; a lost host takes {ELASTIC_TIMEOUT_HOST_REPAIR_SECONDS} s or more to repair)",
        )
    _lint_timeout("stall_timeout", spec.stall_timeout_seconds, timeout, stall_timeout_error)
    _lint_timeout("startup_timeout", spec.startup_timeout_seconds, timeout, startup_timeout_error)
    _lint_elastic_slices(spec)
    if spec.elastic_max_retries is None:
        return
    retries = _require_int("elastic_max_retries", spec.elastic_max_retries, 1)
    if retries < restarts + 1:
        raise SpecError(
            "elastic_max_retries",
            f"{retries} is inconsistent with max_slice_restarts={restarts}: it counts attempts (the first run "
            f"included), so it must be at least max_slice_restarts + 1 = {restarts + 1}, or MaxText gives up "
            "before the slice restart budget is spent",
        )


def _lint_accelerator(spec: ElasticRunSpec) -> None:
    gke = spec.runtime == "gke"
    if spec.image is None:
        if gke:
            raise SpecError("image", "is required for the gke runtime (the MaxText image the head runs)")
    else:
        image_error = image_reference_error(spec.image)
        if image_error:
            raise SpecError("image", image_error)
    if spec.tpu_type is None:
        if gke:
            raise SpecError("tpu_type", f"is required for the gke runtime; known: {', '.join(TPU_TYPES)}")
    elif not isinstance(spec.tpu_type, str) or spec.tpu_type not in TPU_TYPES:
        raise SpecError("tpu_type", f"unknown TPU type {shown(spec.tpu_type)}; known: {', '.join(TPU_TYPES)}")
    if spec.tpu_topology is None:
        if gke or spec.tpu_type is not None:
            raise SpecError(
                "tpu_topology",
                "is required with tpu_type (and always on the gke runtime), e.g. 2x2x1 (v4, v5p) or 2x2 (v5e, v6e)",
            )
        return
    if not isinstance(spec.tpu_topology, str):
        raise SpecError("tpu_topology", f"must be a string such as 2x2x1, got {shown(spec.tpu_topology)}")
    if spec.tpu_type is None:
        raise SpecError("tpu_type", "is required when tpu_topology is set")
    topology_error = TPU_TYPES[spec.tpu_type].topology_error(spec.tpu_topology)
    if topology_error:
        raise SpecError("tpu_topology", topology_error)


def _lint_worker_backoff(spec: ElasticRunSpec) -> None:
    vms = spec.vms_per_slice
    if spec.max_slice_restarts * vms > INT32_MAX:
        raise SpecError(
            "max_slice_restarts",
            f"{spec.max_slice_restarts} x {vms} VMs per slice is the worker Job's backoffLimit, which must be at most "
            f"{INT32_MAX}",
        )


def _lint_pathways_images(spec: ElasticRunSpec) -> None:
    for name in ("pathways_server_image", "pathways_proxy_image"):
        image = getattr(spec, name)
        error = image_reference_error(image) or _floating_tag_error(image)
        if error:
            raise SpecError(name, error)


def is_dns1123_subdomain(value: object) -> bool:
    """Whether `value` is a DNS-1123 subdomain (labels joined by dots, <= 253), as ServiceAccount names are."""
    return isinstance(value, str) and 0 < len(value) <= 253 and all(is_dns1123_label(part) for part in value.split("."))


def _lint_gke_placement(spec: ElasticRunSpec) -> None:
    pool = spec.head_node_pool
    if not isinstance(pool, str) or not is_dns1123_label(pool):
        raise SpecError(
            "head_node_pool",
            f"{shown(pool)} is not a GKE node pool name (lowercase letters, digits and '-', at most 63 characters)",
        )
    for name, kind in (
        ("service_account", "ServiceAccount"),
        ("priority_class", "PriorityClass"),
        ("workload_priority_class", "Kueue WorkloadPriorityClass"),
    ):
        value = getattr(spec, name)
        if value is not None and not is_dns1123_subdomain(value):
            raise SpecError(name, f"{shown(value)} is not a {kind} name (a DNS-1123 subdomain), or None")
    queue = spec.queue_name
    if queue is not None and (not isinstance(queue, str) or not is_dns1123_label(queue)):
        raise SpecError(
            "queue_name",
            f"{shown(queue)} is not a Kueue LocalQueue name usable as the kueue.x-k8s.io/queue-name label value "
            "(a DNS-1123 label), or None",
        )
    avoided = spec.avoid_node_pools
    if not isinstance(avoided, tuple) or not all(isinstance(p, str) and is_dns1123_label(p) for p in avoided):
        raise SpecError("avoid_node_pools", f"must be a tuple of GKE node pool names, got {shown(avoided)}")
    policy = spec.image_pull_policy
    if policy is not None and (not isinstance(policy, str) or policy not in IMAGE_PULL_POLICIES):
        raise SpecError(
            "image_pull_policy", f"must be one of {', '.join(IMAGE_PULL_POLICIES)} or None, got {shown(policy)}"
        )


def _lint_env(name: str, env: object, reserved: frozenset[str]) -> None:
    if not isinstance(env, Mapping):
        raise SpecError(name, f"must be a mapping of variable names to string values, got {type(env).__name__}")
    for key, value in env.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise SpecError(name, f"{shown(key)} is not an environment variable name (letters, digits, '_')")
        if key in reserved:
            raise SpecError(f"{name}.{key}", "is set by the operator's Pathways wiring and cannot be replaced")
        if not isinstance(value, str):
            raise SpecError(f"{name}.{key}", f"must be a string (quote numbers: '1'), got {type(value).__name__}")
        if len(value) > _ENV_VALUE_MAX:
            raise SpecError(f"{name}.{key}", f"is {len(value)} characters long; at most {_ENV_VALUE_MAX}")


def _floating_tag_error(image: str) -> str | None:
    """Why a Pathways image reference may change under a running job (`:latest` or no tag), or None."""
    if "@" in image:
        return None  # a digest pins the bytes whatever the tag says
    last = image.rsplit("/", 1)[-1]
    tag = last.partition(":")[2]
    if not tag or tag == "latest":
        floating = ":latest" if tag else "no tag"
        return (
            f"{shown(image)} floats ({floating}): a full restart could pull a Pathways server newer than the JAX in "
            "the MaxText image; pin a jax-<version> tag matching it (or a @sha256 digest)"
        )
    return None


def _lint_config_file(config_file: object) -> None:
    if not isinstance(config_file, str) or not config_file:
        raise SpecError("config_file", "is required: the MaxText base config path inside the image")
    if config_file.startswith("-"):
        raise SpecError(
            "config_file",
            f"must not start with '-' (MaxText's absl flag parser would read it as a flag): {shown(config_file)}",
        )
    if _has_unsafe_chars(config_file) or "=" in config_file:
        raise SpecError(
            "config_file",
            f"must be a path without '=', whitespace or control characters (it is the first argument), got "
            f"{shown(config_file)}",
        )


def _lint_maxtext_args(args: object) -> None:
    if not isinstance(args, Mapping):
        raise SpecError("maxtext_args", f"must be a mapping of MaxText keys to values, got {type(args).__name__}")
    for key, value in args.items():
        if not isinstance(key, str) or not _IDENTIFIER.match(key):
            raise SpecError("maxtext_args", f"key {shown(key)} is not a MaxText key (a Python identifier)")
        where = f"maxtext_args.{key}"
        if key in ALWAYS_ON_KEYS:
            try:
                rendered = render_value(value).strip().lower()
            except ValueError:  # an int too large to print is not a false word either
                rendered = ""
            if rendered in _FALSE_WORDS:
                raise SpecError(where, f"cannot be {shown(value)}: {ALWAYS_ON_KEYS[key]}")
            raise SpecError(where, f"is set by the operator; remove it ({ALWAYS_ON_KEYS[key]})")
        if key in OPERATOR_OWNED_KEYS:
            raise SpecError(
                where, f"is owned by the operator: set it with the operator's {OPERATOR_OWNED_KEYS[key]} parameter"
            )
        if key.startswith("elastic_"):
            raise SpecError(
                where,
                "elastic settings are the operator's: use its elastic_timeout_seconds, elastic_max_retries and "
                "elastic_min_slice_count parameters",
            )
        _lint_maxtext_value(where, key, value)


def _lint_maxtext_value(where: str, key: str, value: object) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(where, f"must be a finite number, got {shown(value)}")
    if not isinstance(value, str | int | float):
        raise SpecError(where, f"must be a string, number or boolean, got {type(value).__name__}")
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise SpecError(where, f"{shown(value)} is out of range for a MaxText integer (64 bits)")
    text = render_value(value)
    if not text:
        raise SpecError(where, "must not be empty (omit the key to keep MaxText's default)")
    if "=" in text:
        raise SpecError(where, f"must not contain '=' (it would smuggle a second key into {key}=...): {shown(text)}")
    if _has_unsafe_chars(text):
        raise SpecError(
            where, f"must not contain whitespace or control characters (it would split the argument): {shown(text)}"
        )
    if key == "save_checkpoint_on_completion" and text.lower() in _FALSE_WORDS:
        raise SpecError(
            where,
            "cannot be false: success needs a committed checkpoint at the final step (steps - 1), which MaxText "
            "writes on completion",
        )
    if key == "profiler":
        raise SpecError(where, "profiling is not supported in elastic runs (MaxText's elastic training guide)")
