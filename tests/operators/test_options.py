"""The operators' option groups (`operators.options`): each group's checks naming the field, the flat keyword
arguments of the last release (the same operator, a warning that says the new spelling), a flat argument and its
group refused together, templated fields rendered into a new frozen group, and the DAGs and docs in the new form."""

from __future__ import annotations

import dataclasses
import re
import runpy
import subprocess
import sys
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import jinja2
import pytest

from elastic_training import operators
from elastic_training.operators import (
    Budgets,
    Capacity,
    ElasticJobSetOperator,
    ElasticTrainingDeprecationWarning,
    History,
    JobSetOperator,
    Scale,
    Training,
)
from elastic_training.operators.options import RunOptions
from elastic_training.plugin.runs import flat_rendered

REPO = Path(__file__).resolve().parents[2]
TRAINING = Training(run_name="llama", base_output_directory="gs://runs/x", steps=100, checkpoint_period=10)
SCALE = Scale(num_slices=2, tpu_type="v5p", tpu_topology="2x2x2")
FLAT: dict[str, Any] = {
    "run_name": "llama",
    "base_output_directory": "gs://runs/x",
    "steps": 100,
    "checkpoint_period": 10,
    "num_slices": 2,
    "tpu_type": "v5p",
    "tpu_topology": "2x2x2",
}


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: Budgets(max_slice_restarts=-1), ValueError, "Budgets.max_slice_restarts must be ≥ 0, got -1"),
        (lambda: Budgets(max_slice_restarts="3"), TypeError, "Budgets.max_slice_restarts must be an integer, got '3'"),
        (lambda: Budgets(max_full_restarts=100), ValueError, "Budgets.max_full_restarts must be ≤ 99, got 100"),
        (lambda: Budgets(max_full_restarts=True), TypeError, "Budgets.max_full_restarts must be an integer, got True"),
        (lambda: Budgets(stall_timeout=timedelta(0)), ValueError, "Budgets.stall_timeout must be a positive finite"),
        (lambda: Budgets(startup_timeout="30m"), TypeError, "Budgets.startup_timeout must be a timedelta or a number"),
        (lambda: Budgets(slice_restart_window=float("nan")), ValueError, "Budgets.slice_restart_window must be a"),
        (lambda: Budgets(storage_retry_timeout=-1), ValueError, "Budgets.storage_retry_timeout must be a non-negative"),
        (lambda: Budgets(max_pods_ready_evictions=-1), ValueError, "Budgets.max_pods_ready_evictions must be ≥ 0"),
        (
            lambda: Capacity(kueue_pods_ready_timeout=0),
            ValueError,
            "Capacity.kueue_pods_ready_timeout must be a positive",
        ),
        (
            lambda: Capacity(kueue_recovery_timeout=-1),
            ValueError,
            "Capacity.kueue_recovery_timeout must be a non-negative",
        ),
        (lambda: Capacity(queue_timeout=0), ValueError, "Capacity.queue_timeout must be a positive finite duration"),
        (lambda: Capacity(queue_name=5), TypeError, "Capacity.queue_name must be text or None, got 5"),
        (lambda: History(avoid_failing_node_pools="yes"), TypeError, "History.avoid_failing_node_pools must be True"),
        (lambda: History(failure_history_runs=51), ValueError, "History.failure_history_runs must be ≤ 50, got 51"),
        (
            lambda: History(node_pool_failure_threshold=-2),
            ValueError,
            "History.node_pool_failure_threshold must be ≥ 0",
        ),
        (lambda: History(failure_history_key=""), ValueError, "History.failure_history_key must be a Variable key"),
        (
            lambda: Training(run_name="r", base_output_directory="/x", steps=1, checkpoint_period=1, local_env=["A=1"]),
            TypeError,
            "Training.local_env must be a mapping",
        ),
    ],
)
def test_each_group_refuses_a_bad_field_naming_it(make: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as caught:
        make()
    assert str(caught.value).startswith(message), caught.value


def test_groups_are_frozen_and_have_working_defaults() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Budgets().max_slice_restarts = 5
    budgets = Budgets().policy(queue_timeout_seconds=None)
    assert (budgets.max_slice_restarts, budgets.slice_restart_window_seconds, budgets.max_full_restarts) == (3, 3600, 2)
    assert (budgets.stall_timeout_seconds, budgets.startup_timeout_seconds, budgets.elastic_timeout_seconds) == (
        1800.0,
        1800.0,
        300.0,
    )


def _grouped(**groups: Any) -> ElasticJobSetOperator:
    return ElasticJobSetOperator(task_id="pretrain", training=TRAINING, scale=SCALE, **groups)


def test_flat_arguments_make_the_same_operator_and_warn_with_the_new_spelling() -> None:
    more: dict[str, Any] = {"max_slice_restarts": 5, "queue_name": "team", "avoid_failing_node_pools": True}
    more["elastic_slices"] = 1
    more["image"] = "us-docker.pkg.dev/p/r/maxtext:1"
    with pytest.warns(ElasticTrainingDeprecationWarning) as caught:
        flat = ElasticJobSetOperator(task_id="pretrain", **FLAT, **more)
    grouped = ElasticJobSetOperator(
        task_id="pretrain",
        training=dataclasses.replace(TRAINING, image="us-docker.pkg.dev/p/r/maxtext:1"),
        scale=dataclasses.replace(SCALE, elastic_slices=1),
        budgets=Budgets(max_slice_restarts=5),
        capacity=Capacity(queue_name="team"),
        history=History(avoid_failing_node_pools=True),
    )
    assert flat.options == grouped.options
    assert flat.build_spec() == grouped.build_spec() and flat.policy_budgets == grouped.policy_budgets
    assert issubclass(ElasticTrainingDeprecationWarning, DeprecationWarning) and len(caught) == 1
    text = str(caught[0].message)
    assert "ElasticJobSetOperator: flat keyword arguments are deprecated and go in the next release" in text
    assert "max_slice_restarts=5 → budgets=Budgets(max_slice_restarts=5)" in text
    assert "queue_name='team' → capacity=Capacity(queue_name='team')" in text
    assert "avoid_failing_node_pools=True → history=History(avoid_failing_node_pools=True)" in text
    assert (
        "run_name='llama', base_output_directory='gs://runs/x', steps=100, checkpoint_period=10, "
        "image='us-docker.pkg.dev/p/r/maxtext:1' → training=Training(run_name='llama', "
        "base_output_directory='gs://runs/x', steps=100, checkpoint_period=10, image='us-docker.pkg.dev/p/r/maxtext:1')"
    ) in text
    assert caught[0].filename == __file__  # it points at the DAG author's line


def test_the_grouped_form_warns_of_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", ElasticTrainingDeprecationWarning)
        _grouped(budgets=Budgets(max_slice_restarts=1))


def test_a_former_name_still_works_and_two_that_disagree_are_refused() -> None:
    with pytest.warns(
        ElasticTrainingDeprecationWarning, match=r"kueue_queue='q' → capacity=Capacity\(queue_name='q'\)"
    ):
        assert ElasticJobSetOperator(task_id="t", **FLAT, kueue_queue="q").capacity == Capacity(queue_name="q")
    with pytest.raises(ValueError, match=r"queue_name='a' and kueue_queue='b' \(its former name\) disagree"):
        ElasticJobSetOperator(task_id="t", **FLAT, queue_name="a", kueue_queue="b")


def test_the_kueue_options_are_in_their_groups() -> None:
    """max_pods_ready_evictions is a budget (a count the run may spend); Kueue's waitForPodsReady timeouts describe
    the capacity the run waits for."""
    with pytest.warns(ElasticTrainingDeprecationWarning) as caught:
        flat = ElasticJobSetOperator(
            task_id="t", **FLAT, runtime="local", max_pods_ready_evictions=None, kueue_recovery_timeout=0
        )
    text = str(caught[0].message)
    assert "max_pods_ready_evictions=None → budgets=Budgets(max_pods_ready_evictions=None)" in text
    assert "kueue_recovery_timeout=0 → capacity=Capacity(kueue_recovery_timeout=0)" in text
    assert flat.policy_budgets.max_pods_ready_evictions is None
    assert flat.capacity.kueue_pods_ready_seconds == (None, 0.0)
    assert _grouped().policy_budgets.max_pods_ready_evictions == 3  # the default


def test_a_flat_argument_beside_its_own_group_is_refused() -> None:
    with pytest.raises(TypeError) as caught:
        _grouped(budgets=Budgets(max_full_restarts=1), max_slice_restarts=3)
    assert str(caught.value) == (
        "ElasticJobSetOperator: max_slice_restarts=3 and budgets=Budgets(...) both given: put it in the group, "
        "budgets=Budgets(..., max_slice_restarts=3)"
    )
    with pytest.raises(TypeError, match=r"steps=5 and training=Training\(\.\.\.\) both given"):
        ElasticJobSetOperator(task_id="t", training=TRAINING, scale=SCALE, steps=5)


def test_a_flat_argument_of_another_group_goes_with_a_group() -> None:
    with pytest.warns(ElasticTrainingDeprecationWarning):
        operator = _grouped(budgets=Budgets(max_full_restarts=1), queue_name="q")
    assert operator.capacity == Capacity(queue_name="q") and operator.budgets == Budgets(max_full_restarts=1)


def test_a_dags_default_args_with_flat_names_still_apply_to_the_groups_not_given() -> None:
    """Airflow fills only the constructor's parameters from ``default_args``; the flat names are none, so they
    would be silently dropped: they go into a group the task does not give (with the warning), never over one."""
    from airflow.sdk import DAG

    defaults = {"max_full_restarts": 4, "queue_name": "team", "retries": 1}
    with DAG("defaults", schedule=None, default_args=defaults):
        with pytest.warns(ElasticTrainingDeprecationWarning, match=r"max_full_restarts=4 → budgets=Budgets"):
            flat = ElasticJobSetOperator(task_id="flat", training=TRAINING, scale=SCALE)
        with pytest.warns(ElasticTrainingDeprecationWarning, match=r"queue_name=.team. → capacity"):
            given = ElasticJobSetOperator(
                task_id="given", training=TRAINING, scale=SCALE, budgets=Budgets(max_full_restarts=1)
            )
    assert flat.budgets == Budgets(max_full_restarts=4) and flat.capacity == Capacity(queue_name="team")
    assert flat.retries == 1  # Airflow's own default_args as ever
    assert given.budgets == Budgets(max_full_restarts=1)  # the group given wins over the default
    assert given.capacity == Capacity(queue_name="team")


def test_missing_or_mistaken_groups_are_named() -> None:
    with pytest.raises(TypeError, match=r"^ElasticJobSetOperator needs training=Training\(run_name=\.\.\."):
        ElasticJobSetOperator(task_id="t", scale=SCALE)
    with pytest.raises(TypeError, match=r"^ElasticJobSetOperator needs scale=Scale\(num_slices=\.\.\.\)"):
        ElasticJobSetOperator(task_id="t", training=TRAINING)
    with pytest.raises(TypeError, match=r"^ElasticJobSetOperator: budgets must be a Budgets, got Capacity"):
        _grouped(budgets=Capacity())
    with pytest.raises(TypeError, match=r"unexpected keyword argument|Invalid arguments"):
        _grouped(max_slice_restart=3)  # a typo is still an unknown argument


def _render(operator: Any, **context: Any) -> None:
    operator.render_template_fields(context, jinja2.Environment())


def test_templated_fields_render_into_a_new_frozen_group() -> None:
    training = dataclasses.replace(TRAINING, run_name="run-{{ ds_nodash }}", steps="{{ steps }}")
    operator = ElasticJobSetOperator(
        task_id="pretrain",
        training=training,
        scale=dataclasses.replace(SCALE, num_slices="{{ slices }}"),
        runtime="local",
    )
    _render(operator, ds_nodash="20261204", steps=40, slices=3)
    assert (operator.training.run_name, operator.training.steps, operator.scale.num_slices) == (
        "run-20261204",
        "40",
        "3",
    )
    assert training.run_name == "run-{{ ds_nodash }}"  # the DAG's group is left as it was
    spec = operator.build_spec()
    assert (spec.run_name, spec.steps, spec.num_slices) == ("run-20261204", 40, 3)


def test_the_rendered_fields_the_plugin_reads_keep_their_names() -> None:
    assert set(ElasticJobSetOperator.template_fields_renderers) >= {
        "training.run_name",
        "training.base_output_directory",
        "training.steps",
        "scale.num_slices",
    }
    rendered = {"training": "Training(...)", "training.steps": "40", "scale.num_slices": "3", "namespace": "default"}
    assert flat_rendered(rendered) == {**rendered, "steps": "40", "num_slices": "3"}
    assert flat_rendered({"steps": 7, "training.steps": "40"})["steps"] == 7  # a flat field (an older run) wins


def test_the_plain_operator_takes_the_capacity_group() -> None:
    base: dict[str, Any] = {"task_id": "job", "name": "eval", "image": "us-docker.pkg.dev/p/r/e:1", "command": ["x"]}
    grouped = JobSetOperator(**base, capacity=Capacity(queue_name="q", queue_timeout=timedelta(minutes=5)))
    with pytest.warns(ElasticTrainingDeprecationWarning, match=r"queue_timeout=300 → capacity=Capacity\("):
        flat = JobSetOperator(**base, queue_name="q", queue_timeout=300)
    assert grouped.build_job() == flat.build_job() and grouped.build_job().queue_name == "q"
    assert grouped.capacity.queue_timeout_seconds == flat.capacity.queue_timeout_seconds == 300.0
    with pytest.raises(ValueError, match=r"Capacity.priority_class is not supported"):
        JobSetOperator(**base, capacity=Capacity(priority_class="high"))
    with pytest.raises(ValueError, match=r"kueue_recovery_timeout are the elastic operator's"):
        JobSetOperator(**base, capacity=Capacity(kueue_recovery_timeout=60))
    with pytest.raises(TypeError, match=r"queue_name='q' and capacity=Capacity\(\.\.\.\) both given"):
        JobSetOperator(**base, capacity=Capacity(), queue_name="q")


def test_run_options_make_the_spec_of_every_group() -> None:
    options = RunOptions(
        training=dataclasses.replace(TRAINING, image="us-docker.pkg.dev/p/r/maxtext:1", local_env={"A": "1"}),
        scale=dataclasses.replace(SCALE, elastic_min_slice_count=1, head_node_pool="cpu"),
        budgets=Budgets(jobset_max_restarts=2, elastic_max_retries=4),
        capacity=Capacity(queue_name="q", workload_priority_class="w", priority_class="p"),
    )
    spec = options.spec(runtime="gke", service_account="ksa")
    assert (spec.jobset_max_restarts, spec.elastic_max_retries, spec.elastic_min_slice_count) == (2, 4, 1)
    assert (spec.queue_name, spec.workload_priority_class, spec.priority_class) == ("q", "w", "p")
    assert (spec.head_node_pool, spec.service_account, dict(spec.trainer_env)) == ("cpu", "ksa", {"A": "1"})
    auto = dataclasses.replace(options, training=dataclasses.replace(TRAINING, checkpoint_period=" auto "))
    assert auto.auto_period and auto.spec(runtime="gke", auto_period=7).checkpoint_period == 7


def test_the_groups_import_no_airflow() -> None:
    """A DAG author's groups, and tools that read them (the CLI, notebooks), need no Airflow."""
    code = (
        "import sys, elastic_training.operators.options; "
        "print(sorted(m for m in sys.modules if m.startswith('airflow')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]"


def _python_blocks(doc: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S)


@pytest.mark.parametrize("dag_file", sorted((REPO / "dags").glob("*.py")), ids=lambda p: p.name)
def test_the_shipped_dags_use_the_groups(dag_file: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", ElasticTrainingDeprecationWarning)
        dag = runpy.run_path(str(dag_file))["dag"]
    pretrain = dag.get_task("pretrain")
    assert isinstance(pretrain.training, Training) and isinstance(pretrain.budgets, Budgets)


@pytest.mark.parametrize("doc", ["README.md", "docs/operators.md"])
def test_the_docs_operator_examples_run_in_the_grouped_form(doc: str) -> None:
    """The examples users copy make their operator with no deprecation warning (the flat form is shown only as the
    "before", outside a python block)."""
    blocks = [b for b in _python_blocks(REPO / doc) if "ElasticJobSetOperator(" in b]
    assert blocks
    names = {name: getattr(operators, name) for name in operators.__all__}
    for block in blocks:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ElasticTrainingDeprecationWarning)
            scope: dict[str, Any] = {**names, "timedelta": timedelta}
            exec(compile(block, doc, "exec"), scope)
        assert isinstance(scope["pretrain"].training, Training)
