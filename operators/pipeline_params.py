"""The trigger form of the training pipelines and the checks every value passes before anything is created.

`pipeline_params()` gives Airflow ``Param``s (JSON Schema: types, enums, minimums, maximums, and the
``section`` key Airflow's trigger form groups fields by). The schema is what the form enforces; a run
created through the REST API, the CLI or ``dag.test(run_conf=...)`` is checked against the same schema by
Airflow, and then once more, strictly, by :func:`validate_params`, which reads each field's bounds from
that table, checks what only the form knows (the base directory against the allowed roots, shell
metacharacters, the stages' commands, the fault drill's cross-field rules), and leaves every rule of the
pretraining's run (the checkpoint period against the steps, the stall timeout, the image, the TPU shape,
the queue name) to the run spec's own lint (:func:`operators.spec.lint`), naming the param it came from.
It returns a :class:`~operators.pipeline_config.PipelineConfig`. `validate_params` is pure (no Airflow,
no I/O besides resolving a local path and the caller's ``directory_exists``): the DAG's first task calls
it and fails naming the param, so nothing is created from a bad value.

Upstream behaviour followed (apache/airflow, Airflow 3.3): the trigger form requires every field whose
schema ``type`` lacks ``"null"`` and refuses to trigger while one is empty
(airflow-core/src/airflow/ui/src/components/FlexibleForm/isParamRequired.tsx @607ff45f, FlexibleForm.tsx
@0a90b7cf, FieldRow.tsx @1a0e2e96), sends an emptied text or list field as ``null`` (FieldString.tsx
@0f707dce, FieldStringArray.tsx @4b9f215e), and hides a ``const`` field (Row.tsx @0a90b7cf); so optional
fields are nullable. Run ids are ``<run type>__<run_after ISO timestamp>[_<random>]`` unless given
(airflow-core/src/airflow/models/dagrun.py ``DagRun.generate_run_id``; run types in
airflow-core/src/airflow/utils/types.py ``DagRunType``), and a retry or a clear keeps the run id and the
logical date: the run directory is named from them (:func:`run_directory_name`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from elastic_training.operators import kube_names, run_layout
from elastic_training.operators.image_reference import SHELL_META, image_reference_error
from elastic_training.operators.pipeline_config import (
    DEFAULT_STARTUP_TIMEOUT_MINUTES,
    MAXTEXT_MAX_TARGET_LENGTH,
    PipelineConfig,
    StageCommand,
)
from elastic_training.operators.spec import (
    DEFAULT_ELASTIC_TIMEOUT_SECONDS,
    DNS1123_LABEL_MAX,
    DNS1123_LABEL_PATTERN,
    LOCAL_MAXTEXT_IMAGE,
    LOCAL_TPU_TOPOLOGY,
    LOCAL_TPU_TYPE,
    MIN_STEPS,
    Runtime,
    SpecError,
    check_output_directory,
    check_runtime,
    is_dns1123_label,
    lint,
)
from elastic_training.operators.tpu_types import TPU_TYPES

# Airflow Variables the pipelines read (documented in docs/pipeline.md).
VARIABLE_ALLOWED_ROOTS: Final = "elastic_training_allowed_roots"
VARIABLE_MAXTEXT_IMAGE: Final = "elastic_training_maxtext_image"
VARIABLE_EVAL_IMAGE: Final = "elastic_training_eval_image"
VARIABLE_EVAL_COMMAND: Final = "elastic_training_eval_command"
VARIABLE_SYNTH_IMAGE: Final = "elastic_training_synthesize_image"
VARIABLE_SYNTH_COMMAND: Final = "elastic_training_synthesize_command"
VARIABLE_HF_PATH: Final = "elastic_training_hf_path"
VARIABLES: Final = (
    VARIABLE_ALLOWED_ROOTS,
    VARIABLE_MAXTEXT_IMAGE,
    VARIABLE_EVAL_IMAGE,
    VARIABLE_EVAL_COMMAND,
    VARIABLE_SYNTH_IMAGE,
    VARIABLE_SYNTH_COMMAND,
    VARIABLE_HF_PATH,
)

DATA_DIR_ENV: Final = "ELASTIC_TRAINING_DATA_DIR"
RUN_NAME_MAX: Final = 40
# What follows "<run_name>-" in a run's directory name, which is a label value (at most 63 characters).
RUN_SUFFIX_MAX: Final = DNS1123_LABEL_MAX - RUN_NAME_MAX - 1
# Run types whose directory is named by the logical date (airflow.utils.types.DagRunType values).
DATED_RUN_TYPES: Final = frozenset({"scheduled", "backfill"})
# The LocalQueue every stage's JobSet joins (the kueue.x-k8s.io/queue-name label): xpk's name, the one the local
# cluster's v5e-small description declares in namespace default.
DEFAULT_QUEUE_NAME: Final = "multislice-queue"
# The shortest stall timeout the form offers: over MaxText's default wait for slices (the spec lint's rule).
STALL_TIMEOUT_MIN_MINUTES: Final = DEFAULT_ELASTIC_TIMEOUT_SECONDS // 60 + 1
SECTION_MODEL: Final = "Model and data"
SECTION_SCALE: Final = "Scale"
SECTION_BUDGETS: Final = "Resilience budgets"
SECTION_STAGES: Final = "Evaluation and synthesis"
SECTION_DRILL: Final = "Fault drill"
DRILL_STEP_SECONDS: Final = "0.2"  # a drilled local run's step time (LOCAL_STEP_SECONDS): 12 s over 60 steps

# The local runtime's evaluation and synthesis commands: the ones a gke run is given, MaxText's evaluation
# framework (maxtext e591f30: src/maxtext/eval/runner/run.py) and the project's synthesis program
# (deploy/images/maxtext-synthesize), in the local MaxText image (spec.LOCAL_MAXTEXT_IMAGE), whose programs
# the local cluster's image catalogue (local/nodeagent/images.py) maps to the stand-ins in local.workloads.
LOCAL_EVAL_COMMAND: Final = ("python3", "-m", "maxtext.eval.runner.run")
LOCAL_SYNTH_COMMAND: Final = ("python3", "-m", "maxtext_synthesize")
# The local model's max_target_length (local/workloads/config.py; MaxText's base.yml default is 2048) and its
# tokenizer for the evaluation's required `--hf_path` (the local model has none: the name is only recorded).
LOCAL_MAX_TARGET_LENGTH: Final = 32
LOCAL_HF_PATH: Final = "local/markov-128"

MAXTEXT_DEFAULT_MODEL: Final = "default"  # MaxText's base.yml model_name

_MODEL_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
ARGV_ITEM_MAX: Final = 512
_ARGV_ITEM = re.compile(rf"^[A-Za-z0-9_./:=@+,%-]{{1,{ARGV_ITEM_MAX}}}$")


class ParamError(ValueError):
    """A trigger-form value that is refused; ``str()`` names the param first."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"param {param}: {message}")
        self.param = param
        self.message = message


def local_data_directory(environ: Mapping[str, str] | None = None) -> str:
    """Where local runs write: ``$ELASTIC_TRAINING_DATA_DIR``, else ``<AIRFLOW_HOME>/data``."""
    env = os.environ if environ is None else environ
    explicit = env.get(DATA_DIR_ENV)
    if explicit:
        return os.path.abspath(explicit)
    home = env.get("AIRFLOW_HOME") or os.path.join(os.path.expanduser("~"), "airflow")
    return os.path.join(os.path.abspath(home), "data")


def default_allowed_roots(environ: Mapping[str, str] | None = None) -> list[str]:
    """The allowed roots when the Variable is unset: the local data directory and any ``gs://`` bucket."""
    return [local_data_directory(environ), "gs://"]


@dataclass(frozen=True)
class DagRunIdentity:
    """The DAG run a pipeline run belongs to: what its run directory is named after.

    A retry of a task and a clear of the DAG run keep all four (Airflow keeps the run id and the logical
    date of a cleared run), so they resolve to the same directory and resume it.
    """

    dag_id: str
    run_id: str
    run_type: str
    logical_date: datetime | None


_GENERATED_RUN_ID = re.compile(r"^[a-z_]+__(?P<when>\d{4}-\d{2}-\d{2}T[^_]+)(?:_[A-Za-z0-9]+)?$")


def run_suffix(run: DagRunIdentity) -> str:
    """What follows ``<run_name>-`` in the run's directory name; a DNS-1123 label of at most `RUN_SUFFIX_MAX`.

    A scheduled or backfill run: its logical date, ``YYYYMMDD`` (each night is a run). Any other run
    (manual, asset- or operator-triggered): its own name, from its run id and DAG id, so two such runs
    never share a directory: ``YYYYMMDD-HHMM`` when the id is Airflow's ``<type>__<timestamp>[_<random>]``
    (``DagRun.generate_run_id``), else the id made safe (lowercase, runs of other characters as ``-``,
    cut to 13), then ``-`` and 8 hex digits of a hash of both ids. That form never equals a date suffix.
    """
    if run.run_type in DATED_RUN_TYPES and run.logical_date is not None:
        return f"{run.logical_date:%Y%m%d}"
    readable = ""
    generated = _GENERATED_RUN_ID.match(run.run_id)
    if generated:
        try:
            when = datetime.fromisoformat(generated["when"])
        except ValueError:
            pass
        else:
            readable = f"{when.astimezone(UTC) if when.tzinfo else when:%Y%m%d-%H%M}"
    if not readable:
        readable = re.sub(r"[^a-z0-9]+", "-", run.run_id.lower()).strip("-")[:13].strip("-") or "run"
    digest = hashlib.sha256(f"{run.dag_id}\n{run.run_id}".encode()).hexdigest()[:8]
    return f"{readable}-{digest}"


def run_directory_name(run_name: str, run: DagRunIdentity) -> str:
    """``<run_name>-<run_suffix(run)>``: the name of the run's directory under the base output directory."""
    return f"{run_name}-{run_suffix(run)}"


@dataclass(frozen=True)
class ParamDef:
    """One field of the trigger form: its default, JSON Schema, and whether only the ``gke`` runtime reads it."""

    name: str
    default: Any
    schema: Mapping[str, Any]
    gke_only: bool = False


def is_form_required(schema: Mapping[str, Any]) -> bool:
    """Whether Airflow's trigger form requires a value: a ``type`` that does not include ``"null"``.

    The form (airflow-core/src/airflow/ui/src/components/FlexibleForm/isParamRequired.tsx) marks a field
    required when its schema has a type and the type is not a list holding ``"null"``; a required field
    whose value is ``null``, ``undefined`` or ``""`` turns its section red and disables Trigger. An emptied
    text or list field is sent as ``null`` (FieldString.tsx, FieldStringArray.tsx), so every optional
    field here is typed ``["null", ...]``.
    """
    kind = schema.get("type")
    return bool(kind) and not (isinstance(kind, list) and "null" in kind)


def param_definitions(*, steps: int = 80, data_directory: str | None = None) -> list[ParamDef]:
    """The form's fields, in form order. ``steps`` lets the drill DAG default to a shorter run."""
    return [
        *_run_fields(data_directory or local_data_directory()),
        *_model_fields(),
        *_scale_fields(steps),
        *_restart_budget_fields(),
        *_time_budget_fields(),
        *_capacity_fields(),
        *_stage_fields(),
        *_synthesis_fields(),
        *_drill_fields(),
    ]


def _integer_field(title: str, description: str, section: str, minimum: int, maximum: int) -> dict[str, Any]:
    """An integer field's schema, bounded."""
    return {
        "type": "integer",
        "title": title,
        "description": description,
        "section": section,
        "minimum": minimum,
        "maximum": maximum,
    }


def _run_fields(base: str) -> list[ParamDef]:
    """The run: where it runs, its name, the run it continues, where its outputs go."""
    return [
        ParamDef(
            "runtime",
            "local",
            {
                "type": "string",
                "enum": ["local", "gke"],
                "title": "Runtime",
                "description": "local: the one-machine cluster and stand-in workloads. gke: MaxText on Pathways "
                "on TPU through the kubernetes_default connection.",
                "section": SECTION_MODEL,
            },
        ),
        ParamDef(
            "run_name",
            "nightly",
            {
                "type": "string",
                "title": "Run name",
                "description": "DNS-1123 label (lowercase letters, digits, '-'). The run writes "
                "<base_output_directory>/<run_name>-<suffix>: a scheduled run <run_name>-<YYYYMMDD of its "
                "logical date>; a run triggered here its own directory, <run_name>-<YYYYMMDD-HHMM (UTC) of "
                "the trigger>-<8 hex digits of its run id> (the validate_params task logs it). A retry or a clear "
                "of the same DAG run resumes its directory; to continue another run, use Continue run.",
                "section": SECTION_MODEL,
                "minLength": 1,
                "maxLength": RUN_NAME_MAX,
                "pattern": f"^{DNS1123_LABEL_PATTERN}$",
            },
        ),
        ParamDef(
            "continue_run_name",
            None,
            {
                "type": ["null", "string"],
                "title": "Continue run",
                "description": "Empty: this DAG run's own directory (above). Else the directory name of an "
                "earlier run under the base output directory, e.g. nightly-20261130: this run resumes it from "
                "its last checkpoint (run_name is then not used). The directory must exist.",
                "section": SECTION_MODEL,
                "maxLength": DNS1123_LABEL_MAX,
                "pattern": f"^{DNS1123_LABEL_PATTERN}$",
            },
        ),
        ParamDef(
            "base_output_directory",
            base,
            {
                "type": "string",
                "title": "Base output directory",
                "description": "Absolute local path or gs://bucket/prefix, under one of the roots in the "
                f"Airflow Variable {VARIABLE_ALLOWED_ROOTS}.",
                "section": SECTION_MODEL,
                "minLength": 1,
                "maxLength": 1024,
            },
        ),
    ]


def _model_fields() -> list[ParamDef]:
    """The model and the images it trains in."""
    return [
        ParamDef(
            "model_name",
            None,
            {
                "type": ["null", "string"],
                "title": "MaxText model (gke)",
                "description": f"MaxText model_name, e.g. llama3-8b; empty: {MAXTEXT_DEFAULT_MODEL!r}. The local "
                "trainer has one small model and ignores it.",
                "section": SECTION_MODEL,
                "pattern": _MODEL_NAME.pattern,
            },
            gke_only=True,
        ),
        ParamDef(
            "per_device_batch_size",
            8,
            _integer_field("Per-device batch size", "MaxText per_device_batch_size.", SECTION_MODEL, 1, 1024),
        ),
        ParamDef(
            "image",
            None,
            {
                "type": ["null", "string"],
                "title": "MaxText image (gke)",
                "description": f"The pretraining image; empty: the Airflow Variable {VARIABLE_MAXTEXT_IMAGE}.",
                "section": SECTION_MODEL,
                "maxLength": 512,
            },
            gke_only=True,
        ),
    ]


def _scale_fields(steps: int) -> list[ParamDef]:
    """How long and how wide: steps, checkpoint period, slices, TPU type and topology."""
    tpu_types = sorted(TPU_TYPES)
    return [
        ParamDef(
            "steps",
            steps,
            _integer_field(
                "Training steps",
                "MaxText steps; the run ends with a checkpoint at steps-1.",
                SECTION_SCALE,
                MIN_STEPS,
                10_000_000,
            ),
        ),
        ParamDef(
            "checkpoint_period",
            10,
            _integer_field(
                "Checkpoint period",
                "Steps between checkpoints; at most half the steps. A slice failure loses at most one period.",
                SECTION_SCALE,
                1,
                1_000_000,
            ),
        ),
        ParamDef("num_slices", 2, _integer_field("Slices", "TPU slices (worker replicas).", SECTION_SCALE, 1, 256)),
        ParamDef(
            "tpu_type",
            "v5p",
            {
                "type": "string",
                "enum": tpu_types,
                "title": "TPU type (gke)",
                "description": "The slices' TPU generation.",
                "section": SECTION_SCALE,
            },
            gke_only=True,
        ),
        ParamDef(
            "tpu_topology",
            "2x2x1",
            {
                "type": "string",
                "title": "TPU topology (gke)",
                "description": "One slice's shape, e.g. 2x2x1 (v4, v5p) or 2x2 (v5e, v6e).",
                "section": SECTION_SCALE,
                "pattern": "^[0-9]{1,3}(x[0-9]{1,3}){1,2}$",
            },
            gke_only=True,
        ),
    ]


def _restart_budget_fields() -> list[ParamDef]:
    """The restart budgets: slice restarts in a window, full restarts."""
    return [
        ParamDef(
            "max_slice_restarts",
            3,
            _integer_field(
                "Slice restarts",
                "Slice restarts absorbed within the window before a full restart.",
                SECTION_BUDGETS,
                0,
                100,
            ),
        ),
        ParamDef(
            "slice_restart_window_minutes",
            60,
            _integer_field(
                "Slice restart window (minutes)", "The sliding window of the slice budget.", SECTION_BUDGETS, 1, 10_080
            ),
        ),
        ParamDef(
            "max_full_restarts",
            2,
            _integer_field(
                "Full restarts",
                "Times the JobSet may be deleted and recreated (resuming from the last valid checkpoint).",
                SECTION_BUDGETS,
                0,
                kube_names.MAX_ATTEMPT,
            ),
        ),
    ]


def _time_budget_fields() -> list[ParamDef]:
    """The time budgets: stall, start-up and queue timeouts."""
    return [
        ParamDef(
            "stall_timeout_minutes",
            10,
            _integer_field(
                "Stall timeout (minutes)",
                "No training progress for this long while admitted and training: a full restart. It must exceed "
                "MaxText's wait for lost slices (elastic_timeout_seconds, 5 min); queue time and the trainer's "
                "start-up (until its first step) never count.",
                SECTION_BUDGETS,
                STALL_TIMEOUT_MIN_MINUTES,
                1_440,
            ),
        ),
        ParamDef(
            "startup_timeout_minutes",
            DEFAULT_STARTUP_TIMEOUT_MINUTES,
            _integer_field(
                "Start-up timeout (minutes)",
                "How long the trainer may take from its start to its first step (JAX's start, the wait for slices, "
                "the checkpoint's restore, the compilation): then a full restart. The stall timeout runs only after "
                "it; it must exceed MaxText's wait for slices too.",
                SECTION_BUDGETS,
                STALL_TIMEOUT_MIN_MINUTES,
                1_440,
            ),
        ),
        ParamDef(
            "queue_timeout_minutes",
            None,
            {
                "type": ["null", "integer"],
                "title": "Queue timeout (minutes)",
                "description": "How long a stage may wait for Kueue to admit it (queued, or preempted and waiting "
                "to be admitted again) before its JobSet is deleted and the run fails, saying why. Empty: no limit. "
                "Queue time never counts as a stall.",
                "section": SECTION_BUDGETS,
                "minimum": 1,
                "maximum": 10_080,
            },
        ),
    ]


def _capacity_fields() -> list[ParamDef]:
    """Capacity and planning: the Kueue queue, pools avoided, the checkpoint period from history."""
    return [
        ParamDef(
            "queue_name",
            DEFAULT_QUEUE_NAME,
            {
                "type": ["null", "string"],
                "title": "Kueue LocalQueue",
                "description": "Every stage's JobSet joins this queue (label kueue.x-k8s.io/queue-name), as xpk "
                "submits workloads. Empty: no label, and Kueue leaves the JobSets alone.",
                "section": SECTION_SCALE,
                "maxLength": DNS1123_LABEL_MAX,
            },
        ),
        ParamDef(
            "avoid_failing_node_pools",
            False,
            {
                "type": "boolean",
                "title": "Avoid failing node pools",
                "description": "Keep pretraining's slices off GKE node pools with more than 1 slice failure (lost "
                "host, trainer error) in the last 3 runs of this DAG (older failures, and clean runs since, weigh "
                "less), while the other pools can hold every slice (needs list on nodes: "
                "deploy/rbac-node-pools.yaml). Workers left unschedulable by it for a minute drop it. The run "
                "report says which and why.",
                "section": SECTION_BUDGETS,
            },
        ),
        ParamDef(
            "auto_checkpoint_period",
            False,
            {
                "type": "boolean",
                "title": "Checkpoint period from history",
                "description": "Pretraining's checkpoint_period=auto: the Young/Daly period from the failure rate "
                "(per slice and hour of training) and save time of earlier runs of the same model and shape, the "
                "newest weighing most. Until half a run of this shape has trained: from the model's size, the TPU "
                "and a stated prior rate (the period above only where they cannot be estimated). Between one "
                "save's steps and half the run, at most 4x longer or 8x shorter than the last run's; a run failing "
                "far more often than planned may restart once with a shorter period. The report shows the "
                "period, why, its 90% interval, the predicted and the achieved goodput.",
                "section": SECTION_BUDGETS,
            },
        ),
    ]


def _stage_fields() -> list[ParamDef]:
    """The later stages: the evaluation gate, the samples, the evaluation job."""
    return [
        ParamDef(
            "max_eval_loss",
            4.0,
            {
                "type": "number",
                "title": "Maximum eval loss",
                "description": "The gate: the pipeline stops when the validated checkpoint's eval loss is higher.",
                "section": SECTION_STAGES,
                "exclusiveMinimum": 0,
                "maximum": 1_000,
            },
        ),
        ParamDef(
            "num_samples",
            16,
            _integer_field("Synthetic samples", "Samples the synthesis stage writes.", SECTION_STAGES, 1, 100_000),
        ),
        ParamDef(
            "eval_image",
            None,
            {
                "type": ["null", "string"],
                "title": "Evaluation image (gke)",
                "description": f"Empty: the Airflow Variable {VARIABLE_EVAL_IMAGE}.",
                "section": SECTION_STAGES,
                "maxLength": 512,
            },
            gke_only=True,
        ),
        ParamDef(
            "hf_path",
            None,
            {
                "type": ["null", "string"],
                "title": "Tokenizer for evaluation (gke)",
                "description": "MaxText's eval --hf_path: a Hugging Face model id or a path in the image; empty: "
                f"the Airflow Variable {VARIABLE_HF_PATH}.",
                "section": SECTION_STAGES,
                "maxLength": ARGV_ITEM_MAX,
            },
            gke_only=True,
        ),
        ParamDef(
            "eval_command",
            None,
            {
                "type": ["null", "array"],
                "items": {"type": "string"},
                "title": "Evaluation command (gke)",
                "description": f"argv, one item per line; empty: the Airflow Variable {VARIABLE_EVAL_COMMAND} "
                "(a JSON list).",
                "section": SECTION_STAGES,
                "maxItems": 32,
            },
            gke_only=True,
        ),
    ]


def _synthesis_fields() -> list[ParamDef]:
    """The synthesis job."""
    return [
        ParamDef(
            "synthesize_image",
            None,
            {
                "type": ["null", "string"],
                "title": "Synthesis image (gke)",
                "description": f"Empty: the Airflow Variable {VARIABLE_SYNTH_IMAGE}.",
                "section": SECTION_STAGES,
                "maxLength": 512,
            },
            gke_only=True,
        ),
        ParamDef(
            "synthesize_command",
            None,
            {
                "type": ["null", "array"],
                "items": {"type": "string"},
                "title": "Synthesis command (gke)",
                "description": f"argv; empty: the Airflow Variable {VARIABLE_SYNTH_COMMAND} (a JSON list).",
                "section": SECTION_STAGES,
                "maxItems": 32,
            },
            gke_only=True,
        ),
    ]


def _drill_fields() -> list[ParamDef]:
    """The fault drill: a slice failure injected at a step."""
    return [
        ParamDef(
            "inject_slice_failure",
            False,
            {
                "type": "boolean",
                "title": "Inject a slice failure",
                "description": (
                    "local runtime: force-delete one worker pod when training completes the step below. The run's "
                    f"steps then take {DRILL_STEP_SECONDS} s each, so the slice is lost while it trains (the local "
                    "model steps in milliseconds)."
                ),
                "section": SECTION_DRILL,
            },
        ),
        ParamDef(
            "failure_at_step",
            30,
            _integer_field(
                "Failure at step", "The step after which the worker pod is deleted.", SECTION_DRILL, 1, 10_000_000
            ),
        ),
        ParamDef(
            "failure_slice",
            0,
            _integer_field("Slice to fail", "The job-index of the worker pod deleted.", SECTION_DRILL, 0, 255),
        ),
    ]


def pipeline_params(
    *, sections: Sequence[str] | None = None, local_only: bool = False, **overrides: Any
) -> dict[str, Any]:
    """The ``params`` of a pipeline DAG: the fields of ``sections`` (default all); ``overrides`` replace defaults.

    ``local_only`` (a DAG that runs on the local runtime only) leaves out the fields only ``gke`` reads and
    fixes ``runtime`` to ``local`` as a ``const``, which Airflow's form hides (FlexibleForm/Row.tsx).
    """
    from airflow.sdk import Param

    steps = int(overrides.pop("steps", 80))
    params: dict[str, Any] = {}
    for item in param_definitions(steps=steps):
        if sections is not None and item.schema["section"] not in sections:
            continue
        if local_only and item.gke_only:
            continue
        schema = dict(item.schema)
        default = overrides.pop(item.name, item.default)
        if local_only and item.name == "runtime":
            if default != "local":
                raise ValueError(f"a local_only DAG runs on the local runtime, not {default!r}")
            schema["const"] = "local"
        description = schema.pop("description")
        params[item.name] = Param(default, description=description, **schema)
    if overrides:
        raise TypeError(f"unknown params: {', '.join(sorted(overrides))}")
    return params


# -- validation ----------------------------------------------------------------------------------


def parse_allowed_roots(value: Any, environ: Mapping[str, str] | None = None) -> list[str]:
    """The Variable's value (a JSON list or comma-separated roots; unset: the defaults) as roots."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return default_allowed_roots(environ)
    if isinstance(value, str):
        text = value.strip()
        items: Any = json.loads(text) if text.startswith("[") else text.split(",")
    else:
        items = value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ParamError(VARIABLE_ALLOWED_ROOTS, f"must be a list of roots, got {value!r}")
    roots = [i.strip() for i in items if i.strip()]
    if not roots:
        raise ParamError(VARIABLE_ALLOWED_ROOTS, "names no root: every base_output_directory would be refused")
    return roots


@functools.cache
def _form_schemas() -> dict[str, Mapping[str, Any]]:
    return {d.name: d.schema for d in param_definitions(data_directory="/")}


@functools.cache
def _form_defaults() -> dict[str, Any]:
    return {d.name: d.default for d in param_definitions(data_directory="/")}


def _integer(params: Mapping[str, Any], name: str, minimum: int | None = None) -> int:
    """``params[name]`` within its form field's bounds (``minimum``: a lower bound, for a rule that explains more)."""
    schema = _form_schemas()[name]
    maximum: int = schema["maximum"]
    if minimum is None:
        minimum = int(schema["minimum"])
    value = params.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParamError(name, f"must be an integer, got {value!r}")
    if not minimum <= value <= maximum:
        raise ParamError(name, f"must be between {minimum} and {maximum}, got {value}")
    return value


def _optional_integer(params: Mapping[str, Any], name: str) -> int | None:
    return None if params.get(name) is None else _integer(params, name)


def _number(params: Mapping[str, Any], name: str) -> float:
    """``params[name]``, a number within its form field's ``(exclusiveMinimum, maximum]``."""
    schema = _form_schemas()[name]
    low, high = schema["exclusiveMinimum"], schema["maximum"]
    value = params.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low < value <= high:
        raise ParamError(name, f"must be a number in ({low}, {high}], got {value!r}")
    return float(value)


def _boolean(params: Mapping[str, Any], name: str) -> bool:
    value = params.get(name)
    if not isinstance(value, bool):
        raise ParamError(name, f"must be true or false, got {value!r}")
    return value


def _string(params: Mapping[str, Any], name: str) -> str:
    """``params[name]``, printable text within its form field's ``maxLength``."""
    value = params.get(name)
    if not isinstance(value, str):
        raise ParamError(name, f"must be a string, got {value!r}")
    if any(not c.isprintable() for c in value):
        raise ParamError(name, f"must not contain control characters: {value!r}")
    limit = _form_schemas()[name].get("maxLength")
    if limit is not None and len(value) > limit:
        raise ParamError(name, f"must be at most {limit} characters, got {len(value)}")
    return value


def _optional_string(params: Mapping[str, Any], name: str) -> str | None:
    """A nullable field: ``None`` (or ``""``, as the REST API may send it) when empty, else its checked string."""
    if params.get(name) is None:
        return None
    return _string(params, name) or None


def _runtime(params: Mapping[str, Any]) -> Runtime:
    try:
        return check_runtime(_string(params, "runtime"))
    except SpecError as error:
        raise ParamError("runtime", error.message) from None


def _run_name(params: Mapping[str, Any]) -> str:
    run_name = _string(params, "run_name")
    if not is_dns1123_label(run_name):
        raise ParamError(
            "run_name",
            f"{run_name!r} is not a DNS-1123 label: lowercase letters, digits and '-', starting and ending "
            "with a letter or digit",
        )
    return run_name


def _continued(params: Mapping[str, Any], base: str, directory_exists: Callable[[str], bool] | None) -> str | None:
    """The earlier run's directory name ``continue_run_name`` gives (it must exist), or ``None``."""
    continued = _optional_string(params, "continue_run_name")
    if continued is None:
        return None
    if not is_dns1123_label(continued):
        raise ParamError(
            "continue_run_name",
            f"{continued!r} is not a run directory name (a DNS-1123 label of at most {DNS1123_LABEL_MAX} "
            "characters: lowercase letters, digits and '-')",
        )
    directory = run_layout.run_directory(base, continued)
    if directory_exists is not None and not directory_exists(directory):
        raise ParamError("continue_run_name", f"there is no run directory {directory}")
    return continued


def _model_name(params: Mapping[str, Any]) -> str:
    model_name = _optional_string(params, "model_name") or MAXTEXT_DEFAULT_MODEL
    if not _MODEL_NAME.match(model_name):
        raise ParamError("model_name", f"{model_name!r} is not a model name (lowercase letters, digits, . _ -)")
    return model_name


def _hf_path(value: str) -> str:
    """MaxText's evaluation needs a tokenizer (`--hf_path`): a Hugging Face id or a path, one argv item."""
    if not value:
        raise ParamError(
            "hf_path", f"is required on gke (the tokenizer MaxText's evaluation loads): set it or {VARIABLE_HF_PATH}"
        )
    if not _ARGV_ITEM.match(value):
        raise ParamError("hf_path", f"{value!r} has characters other than letters, digits and _./:=@+,%-")
    return value


def check_base_directory(value: str, roots: Sequence[str]) -> str:
    """`value` when it is an absolute path or ``gs://`` URI inside one of `roots`; else `ParamError`.

    The path's grammar is the spec's (:func:`operators.spec.check_output_directory`); the form adds what a
    value typed by a user must also be: free of shell metacharacters, and inside an allowed root.
    """
    name = "base_output_directory"
    try:
        check_output_directory(value)
    except SpecError as error:
        raise ParamError(name, error.message) from None
    bad = sorted({c for c in value if c in SHELL_META})
    if bad:
        raise ParamError(name, f"must not contain whitespace or shell metacharacters {''.join(bad)!r}: {value!r}")
    if value.startswith("gs://"):
        # A GCS prefix is compared as text: a '.' segment would name another prefix than it seems to.
        if "." in value[len("gs://") :].split("/"):
            raise ParamError(name, f"must not contain '.' segments: {value!r}")
        inside = any(root.startswith("gs://") and _under_gcs(value, root) for root in roots)
    else:
        resolved = os.path.realpath(value)
        inside = any(not root.startswith("gs://") and _under_local(resolved, os.path.realpath(root)) for root in roots)
    if not inside:
        raise ParamError(
            name,
            f"{value!r} is outside the allowed roots {list(roots)} (Airflow Variable {VARIABLE_ALLOWED_ROOTS})",
        )
    return value.rstrip("/") or "/"


def _under_local(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _under_gcs(uri: str, root: str) -> bool:
    root = root.rstrip("/")
    return root == "gs:/" or uri.rstrip("/") == root or uri.startswith(root + "/")


def _image(params: Mapping[str, Any], name: str, fallback: Any) -> str:
    """The image field ``name``, else the Airflow Variable's ``fallback``, as an image reference."""
    value = _optional_string(params, name) or str(fallback or "")
    error = image_reference_error(value)
    if error:
        raise ParamError(name, error)
    return value


def _command(params: Mapping[str, Any], name: str, fallback: Any) -> tuple[str, ...]:
    """The command field ``name`` (less the blank lines the form's text area leaves), else the Variable's JSON list."""
    value = params.get(name)
    if isinstance(value, list):
        value = [item for item in value if item != ""]
    value = value or fallback
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ParamError(name, f"must be a JSON list of arguments, got {value!r}") from None
    if not isinstance(value, list) or not value or not all(isinstance(i, str) for i in value):
        raise ParamError(name, f"must be a non-empty list of arguments, got {value!r}")
    limit: int = _form_schemas()[name]["maxItems"]
    if len(value) > limit:
        raise ParamError(name, f"has {len(value)} arguments; at most {limit}")
    for item in value:
        if not _ARGV_ITEM.match(item):
            raise ParamError(name, f"argument {item!r} has characters other than letters, digits and _./:=@+,%-")
    return tuple(value)


# The spec's fields the form sets under another name (the rest have the param's name).
_PARAM_OF_SPEC_FIELD: Final[Mapping[str, str]] = {
    "stall_timeout": "stall_timeout_minutes",
    "startup_timeout": "startup_timeout_minutes",
    "maxtext_args.model_name": "model_name",
    "maxtext_args.per_device_batch_size": "per_device_batch_size",
}


def validate_params(
    params: Mapping[str, Any],
    *,
    run: DagRunIdentity,
    variables: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    directory_exists: Callable[[str], bool] | None = None,
) -> PipelineConfig:
    """Check every param strictly and resolve the run's configuration; `ParamError` names the first bad one.

    Each value is checked against its form field (type, bounds), the fault drill's cross-field rules here,
    and everything the pretraining's run spec decides by the spec's own lint (:func:`operators.spec.lint`:
    the checkpoint period against the steps, the stall timeout against MaxText's wait for slices, the image,
    the TPU type and topology, the queue name), its `SpecError` turned into a `ParamError` naming the param.

    :param params: the DAG run's params (defaults merged with its conf).
    :param run: the DAG run: names the run directory (:func:`run_directory_name`) unless
        ``continue_run_name`` names an earlier run's.
    :param variables: the Airflow Variables of ``VARIABLES`` (unset ones absent or ``None``).
    :param environ: the environment (for the local data directory), default ``os.environ``.
    :param directory_exists: checks that the directory ``continue_run_name`` names exists (the caller's
        storage; ``None``: not checked, this function does no I/O).
    """
    variables = variables or {}
    # A DAG may show only some fields (the drill DAG has no evaluation stage): the rest keep their defaults.
    values = {**_form_defaults(), **params}
    roots = parse_allowed_roots(variables.get(VARIABLE_ALLOWED_ROOTS), environ)
    config = _form_config(values, run=run, roots=roots, variables=variables, directory_exists=directory_exists)
    _check_drill(config)
    try:
        lint(config.spec())
    except SpecError as error:
        raise ParamError(_PARAM_OF_SPEC_FIELD.get(error.field, error.field), error.message) from None
    if config.runtime == "local":
        return config
    return dataclasses.replace(
        config,
        hf_path=_hf_path(_optional_string(values, "hf_path") or str(variables.get(VARIABLE_HF_PATH) or "")),
        evaluate=StageCommand(
            _image(values, "eval_image", variables.get(VARIABLE_EVAL_IMAGE)),
            _command(values, "eval_command", variables.get(VARIABLE_EVAL_COMMAND)),
        ),
        synthesize=StageCommand(
            _image(values, "synthesize_image", variables.get(VARIABLE_SYNTH_IMAGE)),
            _command(values, "synthesize_command", variables.get(VARIABLE_SYNTH_COMMAND)),
        ),
    )


def _form_config(
    values: Mapping[str, Any],
    *,
    run: DagRunIdentity,
    roots: Sequence[str],
    variables: Mapping[str, Any],
    directory_exists: Callable[[str], bool] | None,
) -> PipelineConfig:
    """The configuration of the form's values, each checked against its field (the spec's rules not yet).

    The stages' tokenizer, images and commands are the local runtime's: a gke run's replace them once its
    spec passed the lint (:func:`validate_params`).
    """
    runtime = _runtime(values)
    run_name = _run_name(values)
    base = check_base_directory(_string(values, "base_output_directory"), roots)
    model_name = _model_name(values)
    batch = _integer(values, "per_device_batch_size")
    continued = _continued(values, base, directory_exists)
    local = runtime == "local"
    if local:  # what a gke run is given, with the local defaults: the stages render the same JobSet on both
        image, tpu_type, topology = LOCAL_MAXTEXT_IMAGE, LOCAL_TPU_TYPE, LOCAL_TPU_TOPOLOGY
        maxtext_args: dict[str, str | int] = {"per_device_batch_size": batch}
    else:
        image = _optional_string(values, "image") or str(variables.get(VARIABLE_MAXTEXT_IMAGE) or "")
        tpu_type, topology = _string(values, "tpu_type"), _string(values, "tpu_topology")
        maxtext_args = {"model_name": model_name, "per_device_batch_size": batch}
    return PipelineConfig(
        runtime=runtime,
        run_name=run_directory_name(run_name, run) if continued is None else continued,
        continued=continued is not None,
        base_output_directory=base,
        model_name=model_name,
        per_device_batch_size=batch,
        steps=_integer(values, "steps"),
        checkpoint_period=_integer(values, "checkpoint_period"),
        num_slices=_integer(values, "num_slices"),
        max_slice_restarts=_integer(values, "max_slice_restarts"),
        slice_restart_window_minutes=_integer(values, "slice_restart_window_minutes"),
        max_full_restarts=_integer(values, "max_full_restarts"),
        # Under the form's minimum, the spec's lint says why: the pretraining runs MaxText's default wait for slices.
        stall_timeout_minutes=_integer(values, "stall_timeout_minutes", minimum=1),
        startup_timeout_minutes=_integer(values, "startup_timeout_minutes", minimum=1),
        queue_timeout_minutes=_optional_integer(values, "queue_timeout_minutes"),
        queue_name=_optional_string(values, "queue_name"),
        avoid_failing_node_pools=_boolean(values, "avoid_failing_node_pools"),
        auto_checkpoint_period=_boolean(values, "auto_checkpoint_period"),
        max_eval_loss=_number(values, "max_eval_loss"),
        num_samples=_integer(values, "num_samples"),
        inject_slice_failure=_boolean(values, "inject_slice_failure"),
        failure_at_step=_integer(values, "failure_at_step"),
        failure_slice=_integer(values, "failure_slice"),
        image=image,
        tpu_type=tpu_type,
        tpu_topology=topology,
        maxtext_args=maxtext_args,
        max_target_length=LOCAL_MAX_TARGET_LENGTH if local else MAXTEXT_MAX_TARGET_LENGTH,
        hf_path=LOCAL_HF_PATH,
        evaluate=StageCommand(LOCAL_MAXTEXT_IMAGE, LOCAL_EVAL_COMMAND),
        synthesize=StageCommand(LOCAL_MAXTEXT_IMAGE, LOCAL_SYNTH_COMMAND),
    )


def _check_drill(config: PipelineConfig) -> None:
    """The fault drill's rules: local only, at least 2 slices, the failure inside the run and its slices."""
    if not config.inject_slice_failure:
        return
    if config.runtime != "local":
        raise ParamError("inject_slice_failure", "the fault drill runs on the local runtime only")
    if config.num_slices < 2:
        raise ParamError("num_slices", "a fault drill needs at least 2 slices (one fails, the rest carry on)")
    if config.failure_at_step >= config.target_step:
        raise ParamError(
            "failure_at_step", f"must be before the last step ({config.target_step}), got {config.failure_at_step}"
        )
    if config.failure_slice >= config.num_slices:
        raise ParamError(
            "failure_slice",
            f"must be a slice index below num_slices ({config.num_slices}), got {config.failure_slice}",
        )
