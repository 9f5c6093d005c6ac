"""The run's configuration, as the pipeline's first task resolved it: one frozen value the stages read.

:func:`operators.pipeline_params.validate_params` makes it from the trigger form (the params and the Airflow
Variables) and the DAG run; the ``validate_params`` task returns :meth:`PipelineConfig.to_json` as its XCom
(the keys the DAG's templates read, ``run_directory`` among them), and every stage reads it back with
:meth:`PipelineConfig.from_json`. It builds what the pretraining runs from, the operator's
option groups (:meth:`PipelineConfig.options`, and the run spec of them), so no stage copies its fields one by
one. Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final, Literal

from elastic_training.operators import run_layout
from elastic_training.operators.advice import AUTO_PERIOD
from elastic_training.operators.options import Capacity, RunOptions, Scale, Training
from elastic_training.operators.spec import ElasticRunSpec, Runtime, render_value

Stage = Literal["evaluate", "synthesize"]
# MaxText's default max_target_length (maxtext: src/maxtext/configs/base.yml @ e591f30).
MAXTEXT_MAX_TARGET_LENGTH: Final = 2048
# The operator's default startup_timeout (30 min): a big model's restore and compilation on GKE fit in it.
DEFAULT_STARTUP_TIMEOUT_MINUTES: Final = 30


@dataclass(frozen=True)
class StageCommand:
    """What a stage's pod runs: its image and its command (the arguments come from the run)."""

    image: str
    command: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """``{"image": ..., "command": [...]}``: the stage's entry of the configuration's XCom."""
        return {"image": self.image, "command": list(self.command)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StageCommand:
        """The stage :meth:`to_json` wrote."""
        return cls(image=str(data["image"]), command=tuple(str(item) for item in data["command"]))


@dataclass(frozen=True)
class PipelineConfig:
    """The checked configuration of one pipeline run (docs/pipeline.md lists every field's param).

    ``run_name`` is the run directory's name (this DAG run's, or the earlier run ``continue_run_name`` named:
    ``continued``); durations are in the form's minutes. ``image``, ``tpu_type``, ``tpu_topology``,
    ``max_target_length``, ``hf_path`` and the stages' commands are resolved on both runtimes (local: the local
    MaxText image and model), so the stages render the same JobSets on both.
    """

    runtime: Runtime
    run_name: str
    continued: bool
    base_output_directory: str
    model_name: str
    per_device_batch_size: int
    steps: int
    checkpoint_period: int
    num_slices: int
    max_slice_restarts: int
    slice_restart_window_minutes: int
    max_full_restarts: int
    stall_timeout_minutes: int
    max_eval_loss: float
    num_samples: int
    inject_slice_failure: bool
    failure_at_step: int
    failure_slice: int
    image: str
    tpu_type: str
    tpu_topology: str
    evaluate: StageCommand
    synthesize: StageCommand
    maxtext_args: Mapping[str, str | int] = field(default_factory=dict)
    # Read as absent-means-default, as a configuration from before these fields were added had none.
    queue_timeout_minutes: int | None = None
    queue_name: str | None = None
    avoid_failing_node_pools: bool = False
    auto_checkpoint_period: bool = False
    max_target_length: int = MAXTEXT_MAX_TARGET_LENGTH
    hf_path: str = ""
    startup_timeout_minutes: int = DEFAULT_STARTUP_TIMEOUT_MINUTES

    @property
    def run_directory(self) -> str:
        """``<base_output_directory>/<run_name>``: where every stage of the run reads and writes."""
        return run_layout.run_directory(self.base_output_directory, self.run_name)

    @property
    def target_step(self) -> int:
        """The last step (MaxText counts from 0): the pretraining succeeds with a committed ``steps - 1``."""
        return self.steps - 1

    @property
    def queue_timeout_seconds(self) -> float | None:
        """``queue_timeout_minutes`` in seconds (``None``: no bound on a wait for Kueue's admission)."""
        return None if self.queue_timeout_minutes is None else 60.0 * self.queue_timeout_minutes

    def stage(self, name: Stage) -> StageCommand:
        """The image and command of the ``evaluate`` or ``synthesize`` stage."""
        return self.evaluate if name == "evaluate" else self.synthesize

    def options(self, onto: RunOptions | None = None) -> RunOptions:
        """The pretraining's option groups (:mod:`operators.options`): the form's fields over ``onto``'s (the
        operator's own: its elastic timeouts, Pathways images, ...). The one place the form's params become the
        operator's options (docs/pipeline.md lists which param fills which field).

        ``auto_checkpoint_period``: ``Training.checkpoint_period="auto"``; the form's ``checkpoint_period`` is then
        the fallback while there is no history (the operator's ``auto_fallback_period``).
        """
        if onto is None:
            onto = RunOptions(
                training=Training(run_name="", base_output_directory="", steps=0, checkpoint_period=0),
                scale=Scale(num_slices=0),
            )
        return RunOptions(
            training=dataclasses.replace(
                onto.training,
                run_name=self.run_name,
                base_output_directory=self.base_output_directory,
                steps=self.steps,
                checkpoint_period=AUTO_PERIOD if self.auto_checkpoint_period else self.checkpoint_period,
                maxtext_args={key: render_value(value) for key, value in self.maxtext_args.items()},
                image=self.image,
            ),
            scale=dataclasses.replace(
                onto.scale, num_slices=self.num_slices, tpu_type=self.tpu_type, tpu_topology=self.tpu_topology
            ),
            budgets=dataclasses.replace(
                onto.budgets,
                max_slice_restarts=self.max_slice_restarts,
                slice_restart_window=timedelta(minutes=self.slice_restart_window_minutes),
                max_full_restarts=self.max_full_restarts,
                stall_timeout=timedelta(minutes=self.stall_timeout_minutes),
                startup_timeout=timedelta(minutes=self.startup_timeout_minutes),
            ),
            capacity=self.capacity(onto.capacity),
            history=dataclasses.replace(onto.history, avoid_failing_node_pools=self.avoid_failing_node_pools),
        )

    def capacity(self, onto: Capacity | None = None) -> Capacity:
        """The form's queue and its timeout over ``onto``: the pretraining's and the stages' (one queue, one wait)."""
        timeout = None if self.queue_timeout_minutes is None else timedelta(minutes=self.queue_timeout_minutes)
        return dataclasses.replace(onto or Capacity(), queue_name=self.queue_name, queue_timeout=timeout)

    def spec(self) -> ElasticRunSpec:
        """The pretraining's run spec of :meth:`options` (``auto``: linted with the form's period, its fallback).

        Not linted here: the form lints it (:func:`operators.pipeline_params.validate_params`) and the operator
        lints it again with its own options before anything is created.
        """
        return self.options().spec(runtime=self.runtime, auto_period=self.checkpoint_period)

    def to_json(self) -> dict[str, Any]:
        """The ``validate_params`` task's XCom: every field, then ``run_directory`` and ``target_step``."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["maxtext_args"] = dict(self.maxtext_args)
        data["evaluate"] = self.evaluate.to_json()
        data["synthesize"] = self.synthesize.to_json()
        data["run_directory"] = self.run_directory
        data["target_step"] = self.target_step
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PipelineConfig:
        """The configuration :meth:`to_json` wrote (the derived keys are recomputed, not read)."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {key: value for key, value in data.items() if key in names}
        values["maxtext_args"] = dict(values.get("maxtext_args") or {})
        values["evaluate"] = StageCommand.from_json(data["evaluate"])
        values["synthesize"] = StageCommand.from_json(data["synthesize"])
        return cls(**values)
