"""`elastic_training_fault_drill`: a short elastic run, one worker pod force-deleted at a chosen step, a report.

As the public MaxText elastic demo does: kill one slice and watch the others carry on. The report task
returns the fault, each recovery's phases (detection, waiting for slices, restore, first step) and the
steps lost, from the pretraining run report. Local runtime (docs/pipeline.md).
"""

from __future__ import annotations

from datetime import UTC, datetime

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

from elastic_training.operators.pipeline import (
    CONFIG_TASK,
    PRETRAIN_TASK,
    PretrainOperator,
    SliceFailureDrillOperator,
    drill_report,
    resolve_params,
)
from elastic_training.operators.pipeline_params import (
    SECTION_BUDGETS,
    SECTION_DRILL,
    SECTION_MODEL,
    SECTION_SCALE,
    pipeline_params,
)

with DAG(
    "elastic_training_fault_drill",
    description="Kill one slice of a short elastic run and report the recovery",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    tags=["elastic-training", "maxtext", "fault-drill"],
    default_args={"owner": "ml-platform", "retries": 0},
    params=pipeline_params(
        sections=[SECTION_MODEL, SECTION_SCALE, SECTION_BUDGETS, SECTION_DRILL],
        local_only=True,
        run_name="drill",
        steps=60,
        inject_slice_failure=True,
        failure_at_step=25,
        failure_slice=1,
    ),
    render_template_as_native_obj=True,
    doc_md=__doc__,
) as dag:
    validate = PythonOperator(task_id=CONFIG_TASK, python_callable=resolve_params)
    arm = SliceFailureDrillOperator(task_id="arm_slice_failure")
    pretrain = PretrainOperator(task_id=PRETRAIN_TASK, poll_interval=5.0)
    report = PythonOperator(task_id="recovery_report", python_callable=drill_report, trigger_rule="all_done")

    validate >> arm >> pretrain >> report
