"""The stages of the training pipelines (dags/elastic_training_nightly.py, dags/elastic_training_fault_drill.py).

Every stage reads the run's configuration from the first task's XCom (``validate_params``: the trigger
form checked by :func:`operators.pipeline_params.validate_params`), so a value is checked once, before
anything is created, and the stages never re-parse params. The operators' own arguments that are not
templated (the runtime, the budgets, commands) are applied from that configuration when the task renders
its templates, which Airflow does on every start of the task, a resume after deferral included.

Stages: ``validate_params`` → ``arm_slice_failure`` (the drill pod, when asked) → ``pretrain``
(:class:`PretrainOperator`) → ``validate_checkpoint`` → ``evaluate`` (:class:`StageJobSetOperator`) →
``gate_on_eval`` → ``synthesize`` → ``publish_synthetic_dataset``; ``slice_failure_result`` collects
the drill's outcome.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from airflow.sdk import Asset, AssetAlias, BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from elastic_training.operators import kube_names, manifests
from elastic_training.operators.checkpoint_operator import checkpoint_asset_uri
from elastic_training.operators.checkpoints.storage import EntryKind, StorageError, storage_for
from elastic_training.operators.constants import (
    LABEL_GKE_TPU_ACCELERATOR,
    LABEL_GKE_TPU_TOPOLOGY,
    LABEL_JOBSET_NAME,
    LOCAL_STEP_SECONDS_ENV,
    TPU_RESOURCE,
)
from elastic_training.operators.elastic_operator import ElasticJobSetOperator
from elastic_training.operators.eval_results import (
    EVAL_RUNNER,
    EVAL_TASK,
    EvalResult,
    EvalResultError,
    newest_for_checkpoint,
    parse_result,
    results_directory,
)
from elastic_training.operators.jobset_operator import JobSetOperator
from elastic_training.operators.lifecycle import JobSetLifecycle
from elastic_training.operators.lineage import stage_lineage
from elastic_training.operators.manifests import JobSpec
from elastic_training.operators.options import Scale, Training
from elastic_training.operators.pipeline_config import PipelineConfig
from elastic_training.operators.pipeline_params import (
    DRILL_STEP_SECONDS,
    VARIABLES,
    DagRunIdentity,
    ParamError,
    validate_params,
)
from elastic_training.operators.run_report import RunReport
from elastic_training.operators.slice_drill import drill_command
from elastic_training.operators.slice_drill import parse_result as parse_drill_result
from elastic_training.operators.spec import DEFAULT_CONFIG_FILE, render_value
from elastic_training.operators.tpu_types import TPU_TYPES

if TYPE_CHECKING:
    from airflow.sdk import Context

CONFIG_TASK: Final = "validate_params"
PRETRAIN_TASK: Final = "pretrain"
CHECKPOINT_TASK: Final = "validate_checkpoint"
DRILL_TASK: Final = "arm_slice_failure"
STAGES: Final = ("evaluate", "synthesize")
DRILL_TIMEOUT_SECONDS: Final = 3600
_MAX_RESULT_BYTES: Final = 1 << 20
_MAX_RESULT_FILES: Final = 10_000
# MaxText's default (maxtext: src/maxtext/configs/base.yml @ e591f30) max_prefill_predict_length is 64; its
# max_target_length (2048) and the local model's (32) are the run configuration's `max_target_length`.
MAXTEXT_MAX_PREFILL_LENGTH: Final = 64
SYNTH_TEMPERATURE: Final = 1.0
SYNTH_SEED: Final = 0
SINGLE_HOST_TOPOLOGY_2D: Final = "2x2"
SINGLE_HOST_TOPOLOGY_3D: Final = "2x2x1"
TPU_TOLERATION: Final[Mapping[str, str]] = {"key": TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}


def pipeline_config(context: Mapping[str, Any]) -> PipelineConfig:
    """The run's validated configuration (the ``validate_params`` task's return value)."""
    config = context["ti"].xcom_pull(task_ids=CONFIG_TASK)
    if not isinstance(config, Mapping):
        raise AirflowFailException(f"no configuration from {CONFIG_TASK!r}: run the DAG from its first task")
    try:
        return PipelineConfig.from_json(config)
    except (KeyError, TypeError, ValueError) as error:
        raise AirflowFailException(f"the configuration from {CONFIG_TASK!r} cannot be read: {error!r}") from None


def resolve_params(**context: Any) -> dict[str, Any]:
    """The ``validate_params`` task: check the params and Variables strictly, return the run's configuration.

    The return value (the task's XCom) is :meth:`PipelineConfig.to_json`; the stages read it with `pipeline_config`.
    """
    from airflow.sdk import Variable

    variables = {name: Variable.get(name, default=None) for name in VARIABLES}
    try:
        config = validate_params(
            dict(context["params"]),
            run=dag_run_identity(context["dag_run"]),
            variables=variables,
            directory_exists=_directory_exists,
        )
    except ParamError as error:
        context["ti"].xcom_push(key="refused", value={"param": error.param, "message": error.message})
        raise AirflowFailException(f"refused before anything was created: {error}") from None
    context["task"].log.info(
        "run directory: %s (%s)",
        config.run_directory,
        "continued from continue_run_name" if config.continued else "this DAG run's own",
    )
    return config.to_json()


def dag_run_identity(dag_run: Any) -> DagRunIdentity:
    """The identity a run directory is named after, from the task context's ``dag_run``."""
    run_type = getattr(dag_run, "run_type", None)
    return DagRunIdentity(
        dag_id=str(dag_run.dag_id),
        run_id=str(dag_run.run_id),
        run_type=str(getattr(run_type, "value", run_type) or ""),
        logical_date=getattr(dag_run, "logical_date", None),
    )


def _directory_exists(path: str) -> bool:
    try:
        return storage_for(path).exists_dir(path)
    except StorageError as error:
        raise ParamError("continue_run_name", f"cannot check {path}: {error}") from None


def _validated_step(context: Mapping[str, Any]) -> int:
    verdict = context["ti"].xcom_pull(task_ids=CHECKPOINT_TASK)
    if not isinstance(verdict, Mapping) or not isinstance(verdict.get("step"), int):
        raise AirflowFailException(f"no validated checkpoint step from {CHECKPOINT_TASK!r}")
    return int(verdict["step"])


def checkpoint_items_path(config: PipelineConfig, step: int) -> str:
    """The Orbax item of `step` that MaxText's tools load (`--checkpoint_path`, `load_parameters_path`)."""
    return f"{config.run_directory}/checkpoints/{step}/items"


def eval_results_directory(config: PipelineConfig) -> str:
    """Where MaxText's evaluation framework writes the run's result files (`<run directory>/eval_results`)."""
    return results_directory(config.base_output_directory, config.run_name)


def synthetic_output_directory(config: PipelineConfig, step: int) -> str:
    """Where the synthesis stage writes the dataset sampled from ``step``."""
    return f"{config.run_directory}/synthetic/step_{step}"


@dataclass(frozen=True)
class StageHost:
    """The TPU host a stage runs on: one VM of the run's TPU type, all its chips."""

    accelerator: str
    topology: str
    chips: int

    def node_selector(self) -> dict[str, str]:
        """GKE's labels of a node pool of this shape, as the trainer's workers select theirs."""
        return {LABEL_GKE_TPU_ACCELERATOR: self.accelerator, LABEL_GKE_TPU_TOPOLOGY: self.topology}


def stage_host(config: PipelineConfig) -> StageHost:
    """One host of the run's TPU type: the run's own shape when its slices are single-host, else 2x2 (2x2x1).

    MaxText's evaluation serves the model with vLLM on one host (`--tensor_parallel_size` = its chips) and
    the synthesis program runs the OfflineEngine on one host's devices; a pod on one VM of a multi-host
    slice would not get a usable TPU (the slice forms only with all its hosts), so a multi-host run's
    stages need a single-host node pool of the same type.
    """
    tpu = TPU_TYPES[config.tpu_type]
    topology = config.tpu_topology
    if tpu.vms_per_slice(topology) != 1:
        topology = SINGLE_HOST_TOPOLOGY_2D if tpu.topology_dims == 2 else SINGLE_HOST_TOPOLOGY_3D
    return StageHost(tpu.gke_accelerator, topology, tpu.chips_per_vm_for(topology))


def hf_path(config: PipelineConfig) -> str:
    """The tokenizer MaxText's evaluation loads (`--hf_path`): the run's `hf_path` (local: `LOCAL_HF_PATH`)."""
    if not config.hf_path:
        raise AirflowFailException("evaluation needs hf_path (MaxText's eval --hf_path): no hf_path in the run")
    return config.hf_path


def max_target_length(config: PipelineConfig) -> int:
    """The model's `max_target_length`: the trainer's MaxText argument, else the run's (its image's default).

    The run's is MaxText's default on gke (`pipeline_config.MAXTEXT_MAX_TARGET_LENGTH`) and the local model's on
    local (`pipeline_params.LOCAL_MAX_TARGET_LENGTH`); a configuration without one is taken as MaxText's.
    """
    value = config.maxtext_args.get("max_target_length")
    return int(config.max_target_length if value is None else value)


def evaluate_args(config: PipelineConfig, step: int) -> list[str]:
    """The flags of `python3 -m maxtext.eval.runner.run` (lm-eval harness) evaluating `step`.

    vLLM serves the model on the stage's host, tensor-parallel over all its chips (`stage_host`).
    """
    chips = stage_host(config).chips
    return [
        f"--runner={EVAL_RUNNER}",
        f"--checkpoint_path={checkpoint_items_path(config, step)}",
        f"--model_name={config.model_name}",
        f"--hf_path={hf_path(config)}",
        f"--tasks={EVAL_TASK}",
        f"--base_output_directory={config.base_output_directory}",
        f"--run_name={config.run_name}",
        f"--max_model_len={max_target_length(config)}",
        f"--tensor_parallel_size={chips}",
    ]


def _tokenizer_keys(config: PipelineConfig, maxtext_args: Mapping[str, str]) -> dict[str, str]:
    """The evaluation's tokenizer (`hf_path`) for MaxText too, unless the trainer's arguments name one."""
    if "tokenizer_path" in maxtext_args:
        return {}
    return {"tokenizer_type": "huggingface", "tokenizer_path": hf_path(config)}


def synthesize_args(config: PipelineConfig, step: int) -> list[str]:
    """The argv of our synthesis program: its own flags, then a MaxText config file and MaxText keys only.

    The MaxText keys are the trainer's (`maxtext_args`: the same model and batch; the tokenizer is `hf_path`,
    the evaluation's, as `tokenizer_type=huggingface`, unless the trainer's keys name one), the checkpoint
    to load, the lengths (prefill: MaxText's default 64, or half of a shorter `max_target_length`) and the
    sampling: `decode_sampling_strategy=weighted` at `decode_sampling_temperature`; OfflineEngine needs
    `return_log_prob=true`.
    """
    length = max_target_length(config)
    maxtext_args = {key: render_value(value) for key, value in config.maxtext_args.items()}
    keys = {
        "run_name": config.run_name,
        "base_output_directory": config.base_output_directory,
        **maxtext_args,
        **_tokenizer_keys(config, maxtext_args),
        "load_parameters_path": checkpoint_items_path(config, step),
        "max_target_length": str(length),
        "max_prefill_predict_length": str(min(MAXTEXT_MAX_PREFILL_LENGTH, length // 2)),
        "return_log_prob": "true",
        "decode_sampling_strategy": "weighted",
        "decode_sampling_temperature": render_value(SYNTH_TEMPERATURE),
    }
    return [
        f"--num_samples={config.num_samples}",
        f"--sample_seed={SYNTH_SEED}",
        f"--output_directory={synthetic_output_directory(config, step)}",
        DEFAULT_CONFIG_FILE,
        *(f"{key}={value}" for key, value in keys.items()),
    ]


class PretrainOperator(ElasticJobSetOperator):
    """``ElasticJobSetOperator`` whose options come from the pipeline's configuration.

    The groups it is given are the defaults under the form (a DAG file has no configuration yet): when the task
    renders its templates, on every start, :meth:`configure` puts the form's fields over them
    (:meth:`PipelineConfig.options`), while the fields the form has not (the elastic timeouts, the Pathways images,
    ...) stay the operator's.
    """

    def __init__(
        self, *, training: Training | None = None, scale: Scale | None = None, runtime: str = "local", **kwargs: Any
    ) -> None:
        placeholder = Training(run_name="", base_output_directory="", steps=0, checkpoint_period=0)
        super().__init__(
            training=training or placeholder, scale=scale or Scale(num_slices=0), runtime=runtime, **kwargs
        )
        self.run_config: PipelineConfig | None = None

    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        super().render_template_fields(context, jinja_env)
        self.configure(pipeline_config(context))

    def configure(self, config: PipelineConfig) -> None:
        """Run the pretraining of ``config``: its option groups (:meth:`PipelineConfig.options`) and runtime."""
        self.run_config = config
        self.options = config.options(onto=self.options)
        self.runtime = config.runtime
        # "auto": chosen from the history, the form's period the fallback while there is none
        self.auto_fallback_period = config.checkpoint_period
        if config.inject_slice_failure:  # local only (the form says so)
            # The local model steps in milliseconds: the drill reads its step in the log, then deletes a pod, and
            # the run must still be training when the slice is lost (as a TPU step of seconds would be).
            training = self.options.training
            env = {LOCAL_STEP_SECONDS_ENV: DRILL_STEP_SECONDS, **(training.local_env or {})}
            self.options = replace(self.options, training=replace(training, local_env=env))


class StageJobSetOperator(JobSetOperator):
    """``JobSetOperator`` running a pipeline stage (``evaluate`` or ``synthesize``) on the validated step.

    The stage's image and command come from the configuration (gke: the params or Airflow Variables,
    MaxText's ``python3 -m maxtext.eval.runner.run`` and our ``python3 -m maxtext_synthesize``; local: the
    same commands in the local MaxText image, which the local cluster's image catalogue runs as the stand-ins
    in ``local.workloads``), the arguments from the run (``evaluate_args``, ``synthesize_args``). The pod
    asks for one TPU host like the trainer's workers: all its chips (``google.com/tpu``), the node pool's GKE
    labels and the TPU taint tolerated (``stage_host``). `runtime` chooses the cluster, not the JobSet: a
    configuration renders the same bytes on both runtimes (the JobSet as for GKE, never the ``local``
    image's).
    """

    def __init__(self, *, stage: str, **kwargs: Any) -> None:
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
        super().__init__(name=stage, image="local", command=["true"], runtime="local", stage=stage, **kwargs)
        self.host: StageHost | None = None
        self.lineage_paths: tuple[list[str], list[str]] | None = None  # (read, written), set by `configure`

    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        super().render_template_fields(context, jinja_env)
        self.configure(pipeline_config(context), _validated_step(context))

    def configure(self, config: PipelineConfig, step: int) -> None:
        """Set the image, command, arguments and TPU host of the stage on `step` of the run."""
        job = config.stage("evaluate" if self.stage == "evaluate" else "synthesize")
        self.runtime = config.runtime
        self.image = job.image
        self.command = list(job.command)
        self.args = evaluate_args(config, step) if self.stage == "evaluate" else synthesize_args(config, step)
        self.host = stage_host(config)
        evaluate = self.stage == "evaluate"
        written = eval_results_directory(config) if evaluate else synthetic_output_directory(config, step)
        self.lineage_paths = ([config.spec().checkpoint_directory], [written])
        # The same queue as the pretraining, and the same waiting: queued and preempted are never failures.
        self.capacity = config.capacity(self.capacity)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage (operators/lineage.py): the checkpoint directory in, the eval results or the synthetic
        dataset out (``None``: not configured, or no provider)."""
        return None if self.lineage_paths is None else stage_lineage(*self.lineage_paths)

    def build_job(self) -> JobSpec:
        """The job on one TPU host of the run's type, rendered as for GKE whichever the runtime."""
        return self._linted("job", self._stage_job)

    def _stage_job(self) -> JobSpec:
        job = self._job()
        if self.host is None:  # not configured yet: the placeholder a DAG file builds
            return job
        # JobSpec's `local` runtime is the `local` image's rendering (the command run as written, local-only env):
        # a stage's JobSet is the GKE one on both runtimes, so it renders as `gke`.
        staged = replace(
            job,
            runtime="gke",
            resources={TPU_RESOURCE: str(self.host.chips)},
            node_selector=self.host.node_selector(),
            tolerations=[dict(TPU_TOLERATION)],
        )
        manifests.lint_job(staged)
        return staged


def _read_json(path: str) -> Any:
    try:
        return json.loads(storage_for(path).read(path, _MAX_RESULT_BYTES))
    except (StorageError, OSError, ValueError) as error:
        raise AirflowFailException(f"cannot read {path}: {error}") from None


def _read_object(path: str) -> dict[str, Any]:
    data = _read_json(path)
    if not isinstance(data, dict):
        raise AirflowFailException(f"{path} does not hold a JSON object")
    return data


def evaluation_of(config: PipelineConfig, step: int) -> EvalResult:
    """The newest MaxText evaluation result of `step`'s checkpoint under the run's `eval_results`."""
    directory = eval_results_directory(config)
    wanted = checkpoint_items_path(config, step)
    storage = storage_for(directory)
    try:
        entries = storage.list_dir(directory, limit=_MAX_RESULT_FILES)
    except (StorageError, OSError) as error:
        raise AirflowFailException(f"cannot list {directory}: {error}") from None
    results: list[EvalResult] = []
    for entry in sorted(entries, key=lambda e: e.name):
        if entry.kind != EntryKind.FILE or not entry.name.endswith(".json"):
            continue
        path = storage.join(directory, entry.name)
        try:
            results.append(parse_result(path, _read_json(path)))
        except EvalResultError as error:
            raise AirflowFailException(f"{path} is not a MaxText evaluation result: {error}") from None
    found = newest_for_checkpoint(results, wanted)
    if found is None:
        seen = sorted({r.checkpoint_path for r in results}) or "none"
        raise AirflowFailException(
            f"no MaxText evaluation result of {wanted} in {directory} (checkpoints evaluated there: {seen})"
        )
    return found


def gate_on_eval(**context: Any) -> dict[str, Any]:
    """The gate: the validated step's evaluation must have a finite loss at most ``max_eval_loss``.

    The loss is ln(perplexity) of MaxText's lm-eval result for ``lambada_openai`` (``operators.eval_results``).
    """
    config = pipeline_config(context)
    step = _validated_step(context)
    result = evaluation_of(config, step)
    loss = result.loss
    limit = config.max_eval_loss
    metrics = {
        "step": step,
        "loss": loss,
        "perplexity": result.perplexity,
        "accuracy": result.accuracy,
        "task": result.task,
        "benchmark": result.benchmark,
        "model_name": result.model_name,
        "timestamp_utc": result.timestamp_utc,
        "checkpoint_path": result.checkpoint_path,
        "scores": dict(result.scores),
    }
    summary = (
        f"step {step}: {result.task} loss {loss} (perplexity {result.perplexity}), accuracy {result.accuracy}, "
        f"max_eval_loss {limit} ({result.path})"
    )
    context["ti"].xcom_push(key="metrics", value={**metrics, "max_eval_loss": limit, "path": result.path})
    if not math.isfinite(loss):
        raise AirflowFailException(f"evaluation gate failed: the loss is not a finite number: {summary}")
    if loss > limit:
        raise AirflowFailException(f"evaluation gate failed: loss {loss:.4f} > max_eval_loss {limit}: {summary}")
    context["task"].log.info("evaluation gate passed: %s", summary)
    return {**metrics, "max_eval_loss": limit, "path": result.path, "passed": True}


def synthetic_alias(dag_id: str) -> AssetAlias:
    """The alias under which a DAG's synthetic dataset events are emitted (schedule consumers on it)."""
    return AssetAlias(f"synthetic-data:{dag_id}")


def publish_synthetic_dataset(**context: Any) -> dict[str, Any]:
    """Emit the Asset event of the synthetic dataset, its manifest in ``extra``, under the task's alias outlet."""
    aliases = [o for o in context["task"].outlets if isinstance(o, AssetAlias)]
    if len(aliases) != 1:
        raise AirflowFailException("publish_synthetic_dataset needs exactly one AssetAlias outlet")
    alias = aliases[0]
    config = pipeline_config(context)
    step = _validated_step(context)
    directory = synthetic_output_directory(config, step)
    manifest = _read_object(f"{directory}/manifest.json")
    if manifest.get("step") != step or not isinstance(manifest.get("count"), int):
        raise AirflowFailException(f"the synthetic dataset manifest under {directory} does not match step {step}")
    checkpoint = context["ti"].xcom_pull(task_ids=CHECKPOINT_TASK) or {}
    extra = {
        "path": directory,
        "samples": manifest["count"],
        "samples_file": f"{directory}/{manifest.get('samples_file', 'samples.jsonl')}",
        "source_step": step,
        "checkpoint": checkpoint.get("path") or manifest.get("source"),
        "run_name": config.run_name,
        "temperature": manifest.get("temperature"),
        "sample_seed": manifest.get("sample_seed"),
    }
    asset = Asset(checkpoint_asset_uri(directory))
    context["outlet_events"][alias].add(asset, extra=extra)
    return {**extra, "uri": asset.uri}


class SliceFailureDrillOperator(BaseOperator):
    """Arm the slice-failure drill: create the drill pod (``operators.slice_drill``) and return at once.

    The drill pod waits beside the pretraining for ``failure_at_step`` and force-deletes one worker
    pod. Returns ``{"armed": False}`` when the run asked for no drill. Local runtime only.
    """

    ui_color = "#fadbd8"

    def __init__(self, *, namespace: str = "default", kubernetes_conn_id: str = "kubernetes_default", **kwargs: Any):
        super().__init__(**kwargs)
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        config = pipeline_config(context)
        if not config.inject_slice_failure:
            return {"armed": False}
        task = kube_names.TaskIdentity.of(context["ti"])
        identity = task.labels()
        name = task.jobset_name(attempt=0, prefix="drill")
        from elastic_training.operators.hooks import JobSetHook  # the Kubernetes clients: see JobSetTaskOperator._hook

        cluster = JobSetLifecycle(
            JobSetHook(conn_id=self.kubernetes_conn_id), namespace=self.namespace, identity=identity, log=self.log
        )
        existing = cluster.get(name)
        if existing is not None:
            cluster.refuse_foreign(existing)
            self.log.info("the drill JobSet %s already exists: adopting it", name)
        else:
            job = JobSpec(
                image="local",
                command=drill_command(
                    run_name=config.run_name,
                    at_step=config.failure_at_step,
                    slice_index=config.failure_slice,
                    namespace=self.namespace,
                    timeout=DRILL_TIMEOUT_SECONDS,
                ),
                runtime="local",
                active_deadline_seconds=DRILL_TIMEOUT_SECONDS + 60,
            )
            body = manifests.plain_jobset(job, name=name, namespace=self.namespace, labels=identity, stage="drill")
            cluster.create(body)
            self.log.info(
                "drill armed: JobSet %s deletes a worker pod of slice %s after step %s of %s",
                name,
                config.failure_slice,
                config.failure_at_step,
                config.run_name,
            )
        return {
            "armed": True,
            "jobset_name": name,
            "namespace": self.namespace,
            "at_step": config.failure_at_step,
            "slice": config.failure_slice,
        }


def collect_drill(
    kubernetes_conn_id: str = "kubernetes_default", wait_seconds: float = 60, **context: Any
) -> dict[str, Any]:
    """The drill's outcome from its pod's log; deletes the drill JobSet (it is done, or no longer wanted)."""
    armed = context["ti"].xcom_pull(task_ids=DRILL_TASK) or {}
    if not armed.get("armed"):
        return {"armed": False}
    from elastic_training.operators.hooks import JobSetHook  # the Kubernetes clients: see JobSetTaskOperator._hook

    hook = JobSetHook(conn_id=kubernetes_conn_id)
    name, namespace = str(armed["jobset_name"]), str(armed["namespace"])
    selector = f"{LABEL_JOBSET_NAME}={name}"
    result: dict[str, Any] | None = None
    deadline = time.monotonic() + wait_seconds
    while result is None and time.monotonic() < deadline:
        pods = hook.list_pods(namespace, selector)
        for pod in pods:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                result = parse_drill_result(
                    hook.read_log_tail(pod["metadata"]["name"], namespace, manifests.PLAIN_CONTAINER, tail_lines=20)
                )
        if result is None:
            time.sleep(1.0)
    if hook.get_jobset(name, namespace) is not None:
        hook.delete_jobset(name, namespace)
    if result is None:
        return {**armed, "fired": False, "reason": "the drill pod reported nothing (still waiting when collected)"}
    return {**armed, **result}


def pretrain_report(context: Mapping[str, Any]) -> RunReport | None:
    """The pretraining run report: its return value, or the report it pushed before failing."""
    ti = context["ti"]
    report = ti.xcom_pull(task_ids=PRETRAIN_TASK)
    if not isinstance(report, Mapping):
        report = ti.xcom_pull(task_ids=PRETRAIN_TASK, key="report")
    return RunReport.from_json(report) if isinstance(report, Mapping) else None


def drill_report(**context: Any) -> dict[str, Any]:
    """The fault drill's report: the fault, each recovery's phases, steps lost, escalations; fails when training did."""
    from elastic_training.operators.pipeline_report import recovery_summary

    drill = collect_drill(**context)
    report = pretrain_report(context)
    if report is None:
        raise AirflowFailException("the pretraining left no run report")
    summary = recovery_summary(report, drill)
    for line in summary["lines"]:
        context["task"].log.info("%s", line)
    if report.failure:
        raise AirflowFailException(f"pretraining failed: {report.failure}")
    return summary
