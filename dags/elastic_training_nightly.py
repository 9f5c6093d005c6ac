"""`elastic_training_nightly`: pretrain elastically, validate the checkpoint, evaluate, gate, synthesize, publish.

validate_params → arm_slice_failure → pretrain → validate_checkpoint → evaluate → gate_on_eval →
synthesize → publish_synthetic_dataset, and slice_failure_result beside them when a drill was asked for.
The trigger form, the Airflow Variables and each stage are described in docs/pipeline.md.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

from elastic_training.operators import Budgets, CheckpointValidationOperator
from elastic_training.operators.alerts import AlertRoute, configured_deadline
from elastic_training.operators.pipeline import (
    CONFIG_TASK,
    PRETRAIN_TASK,
    PretrainOperator,
    SliceFailureDrillOperator,
    StageJobSetOperator,
    collect_drill,
    gate_on_eval,
    publish_synthetic_dataset,
    resolve_params,
    synthetic_alias,
)
from elastic_training.operators.pipeline_params import pipeline_params
from elastic_training.operators.spec import DEFAULT_ELASTIC_TIMEOUT_SECONDS

DAG_ID = "elastic_training_nightly"
CONFIG = f"ti.xcom_pull(task_ids='{CONFIG_TASK}')"
# Where the alerts and a missed deadline go (docs/operations.md, "Alerts"): one Airflow notifier, in one place. By
# default the one a deployment names in its Airflow config ([elastic_training] alert_notifier and
# alert_notifier_kwargs; none: no alerts); or name it here, e.g.
#   AlertRoute("airflow.providers.smtp.notifications.smtp.SmtpNotifier",
#              {"to": "ml-oncall@example.com", "subject": "{{ elastic_training_alert.title }}",
#               "html_content": "{{ elastic_training_alert.message }}"})
ALERT_ROUTE = AlertRoute.from_config()
ALERTS = ALERT_ROUTE.alerts() if ALERT_ROUTE is not None else None

with DAG(
    DAG_ID,
    description="Elastic MaxText pretraining, checkpoint validation, evaluation gate, synthetic data",
    schedule="@daily",
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,  # two nightly runs never train at once
    tags=["elastic-training", "maxtext", "nightly"],
    default_args={"owner": "ml-platform", "retries": 0},
    params=pipeline_params(),
    render_template_as_native_obj=True,
    dagrun_timeout=timedelta(hours=24),
    # [elastic_training] nightly_deadline: "finished by HH:MM" (UTC) or a duration; missed: told to ALERT_ROUTE
    deadline=configured_deadline(ALERT_ROUTE),
    doc_md=__doc__,
) as dag:
    validate = PythonOperator(task_id=CONFIG_TASK, python_callable=resolve_params)
    arm = SliceFailureDrillOperator(task_id="arm_slice_failure")
    # Its option groups: the form's fields fill them when the task starts (PipelineConfig.options; docs/pipeline.md,
    # "Where the params go"); what the form has not is written here, e.g. MaxText's wait for slices.
    pretrain = PretrainOperator(
        task_id=PRETRAIN_TASK,
        budgets=Budgets(elastic_timeout_seconds=DEFAULT_ELASTIC_TIMEOUT_SECONDS),
        poll_interval=5.0,
        alerts=ALERTS,
    )
    drill_result = PythonOperator(
        task_id="slice_failure_result", python_callable=collect_drill, trigger_rule="all_done"
    )
    checkpoint = CheckpointValidationOperator(
        task_id="validate_checkpoint",
        path=f"{{{{ {CONFIG}['run_directory'] }}}}",
        expected_min_step=f"{{{{ ti.xcom_pull(task_ids='{PRETRAIN_TASK}')['final_step'] }}}}",
        asset_alias=f"checkpoints:{DAG_ID}",
        alerts=ALERTS,
    )
    evaluate = StageJobSetOperator(task_id="evaluate", stage="evaluate", poll_interval=5.0, alerts=ALERTS)
    gate = PythonOperator(task_id="gate_on_eval", python_callable=gate_on_eval)
    synthesize = StageJobSetOperator(task_id="synthesize", stage="synthesize", poll_interval=5.0, alerts=ALERTS)
    publish = PythonOperator(
        task_id="publish_synthetic_dataset",
        python_callable=publish_synthetic_dataset,
        outlets=[synthetic_alias(DAG_ID)],
    )

    validate >> arm >> pretrain >> [checkpoint, drill_result]
    checkpoint >> evaluate >> gate >> synthesize >> publish
