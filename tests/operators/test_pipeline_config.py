"""`PipelineConfig`: the run's configuration as one typed value, its XCom form, and the option groups it builds."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from elastic_training.operators.options import Budgets, Capacity, History, RunOptions, Scale, Training
from elastic_training.operators.pipeline import PretrainOperator
from elastic_training.operators.pipeline_config import PipelineConfig, StageCommand
from elastic_training.operators.pipeline_params import ParamError
from elastic_training.operators.policy import Budgets as PolicyBudgets
from elastic_training.operators.spec import checkpoint_period_error, lint
from tests.support.pipeline_params import GKE_VARIABLES, check

# The keys of the validate_params task's XCom: the DAG's templates (`['run_directory']`), the CLI's demo report
# and the tests of whole runs read them.
XCOM_KEYS = {
    "runtime",
    "run_name",
    "continued",
    "base_output_directory",
    "run_directory",
    "model_name",
    "per_device_batch_size",
    "steps",
    "target_step",
    "checkpoint_period",
    "num_slices",
    "max_slice_restarts",
    "slice_restart_window_minutes",
    "max_full_restarts",
    "stall_timeout_minutes",
    "startup_timeout_minutes",
    "queue_timeout_minutes",
    "queue_name",
    "avoid_failing_node_pools",
    "auto_checkpoint_period",
    "max_eval_loss",
    "num_samples",
    "inject_slice_failure",
    "failure_at_step",
    "failure_slice",
    "image",
    "tpu_type",
    "tpu_topology",
    "maxtext_args",
    "max_target_length",
    "hf_path",
    "evaluate",
    "synthesize",
}


@pytest.mark.parametrize("runtime", ["local", "gke"])
def test_the_xcom_keeps_its_keys_and_reads_back_equal(tmp_path: Path, runtime: str) -> None:
    config = check(tmp_path, GKE_VARIABLES, runtime=runtime, queue_timeout_minutes=30)
    data = config.to_json()
    assert set(data) == XCOM_KEYS
    assert data["run_directory"] == config.run_directory and data["target_step"] == config.steps - 1
    assert isinstance(data["evaluate"]["command"], list)  # JSON, as XCom stores it
    assert PipelineConfig.from_json(data) == config


def test_a_configuration_from_before_the_later_fields_reads_with_their_defaults(tmp_path: Path) -> None:
    later = ("queue_name", "queue_timeout_minutes", "startup_timeout_minutes")
    older = {k: v for k, v in check(tmp_path).to_json().items() if k not in later}
    config = PipelineConfig.from_json(older)
    assert (config.queue_name, config.queue_timeout_seconds, config.startup_timeout_minutes) == (None, None, 30)


def test_it_builds_the_spec_the_form_linted(tmp_path: Path) -> None:
    config = check(
        tmp_path, stall_timeout_minutes=7, startup_timeout_minutes=45, queue_name="team-queue", max_slice_restarts=4
    )
    spec = config.spec()
    lint(spec)
    assert spec.run_directory == config.run_directory and spec.target_step == config.target_step
    assert (spec.steps, spec.checkpoint_period, spec.num_slices) == (80, 10, 2)
    assert (spec.max_slice_restarts, spec.stall_timeout_seconds, spec.queue_name) == (4, 420.0, "team-queue")
    assert spec.startup_timeout_seconds == 2700.0
    assert (spec.runtime, spec.image, spec.tpu_type, spec.tpu_topology) == (
        "local",
        "localhost/maxtext:local-stand-in",
        "v5e",
        "4x4",
    )
    assert spec.maxtext_keys()[-1] == "per_device_batch_size=8"


def test_the_options_keep_the_operators_own_fields(tmp_path: Path) -> None:
    onto = RunOptions(
        training=Training(
            run_name="", base_output_directory="", steps=0, checkpoint_period=0, image_pull_policy="Always"
        ),
        scale=Scale(num_slices=0, elastic_min_slice_count=1),
        budgets=Budgets(elastic_timeout_seconds=900, jobset_max_restarts=2),
        capacity=Capacity(workload_priority_class="nightly"),
        history=History(failure_history_runs=7),
    )
    options = check(tmp_path).options(onto=onto)
    assert options.training.run_name == "nightly-20261130" and options.training.image_pull_policy == "Always"
    assert (options.budgets.elastic_timeout_seconds, options.budgets.jobset_max_restarts) == (900, 2)
    assert options.scale.elastic_min_slice_count == 1 and options.scale.num_slices == 2
    assert options.capacity.workload_priority_class == "nightly" and options.history.failure_history_runs == 7
    assert options.spec(runtime="local").elastic_timeout_seconds == 900


def test_it_builds_the_budgets_in_seconds(tmp_path: Path) -> None:
    config = check(tmp_path, slice_restart_window_minutes=30, queue_timeout_minutes=5)
    assert config.options().policy_budgets() == PolicyBudgets(
        max_slice_restarts=3,
        slice_restart_window_seconds=1800.0,
        stall_timeout_seconds=600.0,
        max_full_restarts=2,
        queue_timeout_seconds=300.0,
        elastic_timeout_seconds=300.0,
        startup_timeout_seconds=1800.0,
        max_pods_ready_evictions=3,
    )


def test_the_stage_commands(tmp_path: Path) -> None:
    config = check(tmp_path, GKE_VARIABLES, runtime="gke")
    assert config.stage("evaluate") == StageCommand("us-docker.pkg.dev/p/r/eval:1", ("python3", "-m", "team.eval"))
    assert config.stage("synthesize").command == ("python3", "-m", "team.synth")


def test_the_pretrain_stage_runs_the_configurations_spec_with_its_own_knobs(tmp_path: Path) -> None:
    config = check(tmp_path, max_slice_restarts=5, stall_timeout_minutes=8, queue_name=None)
    operator = PretrainOperator(
        task_id="pretrain", budgets=Budgets(elastic_timeout_seconds=400, stall_timeout=timedelta(hours=2))
    )
    operator.configure(config)
    spec = operator.build_spec()
    mine = config.options(onto=operator.options).spec(runtime=config.runtime)
    assert spec == mine  # every run field is the configuration's, the others the operator's
    assert (spec.elastic_timeout_seconds, spec.queue_name, spec.max_slice_restarts) == (400, None, 5)
    assert spec.stall_timeout_seconds == 480.0
    assert operator.policy_budgets == config.options(onto=operator.options).policy_budgets()
    assert operator.policy_budgets.max_pods_ready_evictions == 3  # the operator's (the form has none)


def test_a_drilled_local_run_steps_slowly_enough_for_its_slice_to_be_lost_while_it_trains(tmp_path: Path) -> None:
    """Found on an idle machine: the local model did steps 26-59 before its deleted slice was noticed, and the drill
    reported no recovery. A drilled run's steps take 0.2 s (the drill is local only); the user's own local_env wins."""

    def trainer_env(config: PipelineConfig, operator: PretrainOperator | None = None) -> dict[str, str]:
        operator = operator or PretrainOperator(task_id="pretrain")
        operator.configure(config)
        return dict(operator.build_spec().trainer_env)

    assert trainer_env(check(tmp_path, inject_slice_failure=True))["LOCAL_STEP_SECONDS"] == "0.2"
    assert "LOCAL_STEP_SECONDS" not in trainer_env(check(tmp_path, inject_slice_failure=False))
    own = PretrainOperator(
        task_id="pretrain",
        training=Training(
            run_name="", base_output_directory="", steps=0, checkpoint_period=0, local_env={"LOCAL_STEP_SECONDS": "0.3"}
        ),
    )
    assert trainer_env(check(tmp_path, inject_slice_failure=True), own)["LOCAL_STEP_SECONDS"] == "0.3"


def test_a_rule_of_the_run_is_the_spec_lints_named_by_the_param(tmp_path: Path) -> None:
    """The form asks the spec's lint; its message comes through, naming the param the value came from."""
    with pytest.raises(ParamError) as caught:
        check(tmp_path, checkpoint_period=50)
    assert str(caught.value) == f"param checkpoint_period: {checkpoint_period_error(50, 80)}"
    with pytest.raises(ParamError, match=r"^param stall_timeout_minutes: 300 s does not exceed"):
        check(tmp_path, stall_timeout_minutes=5)
    with pytest.raises(ParamError, match=r"^param startup_timeout_minutes: 300 s does not exceed .* before the first"):
        check(tmp_path, startup_timeout_minutes=5)
    with pytest.raises(ParamError, match=r"^param queue_name: 'Team' is not a Kueue LocalQueue name"):
        check(tmp_path, queue_name="Team")
