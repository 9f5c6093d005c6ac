"""A one-task DAG of `JobSetOperator` running one command on the local cluster, written into the test dags folder."""

from __future__ import annotations

from typing import Any

from tests.support.airflow_dags import dag_from_source

HEADER = "from airflow.sdk import DAG\nfrom operators import Capacity, JobSetOperator"
ALERTING = (
    "\nfrom elastic_training.operators.alerts import Alerts\nfrom tests.support.alert_notifier import FileNotifier"
)
# JobSetOperator's Kueue arguments, written in its Capacity group.
_CAPACITY = ("queue_name", "workload_priority_class", "queue_timeout")


def one_job_dag(dag_id: str, command: list[str], **extra: Any) -> Any:
    capacity = ", ".join(f"{k}={extra.pop(k)!r}" for k in _CAPACITY if k in extra)
    if capacity:
        extra["capacity"] = _Code(f"Capacity({capacity})")
    header = HEADER
    if "alerts" in extra:  # code, e.g. "Alerts((FileNotifier(path=...),), queued_after=5)"
        extra["alerts"] = _Code(extra["alerts"])
        header += ALERTING
    arguments = ", ".join(f"{k}={v!r}" for k, v in extra.items())
    body = f"""
    with DAG({dag_id!r}, schedule=None) as dag:
        JobSetOperator(
            task_id="job", name={dag_id.replace("_", "-")!r}, image="local", command={command!r},
            runtime="local", stage="evaluate", deferrable=True, poll_interval=1.0, {arguments}
        )
    """
    return dag_from_source(dag_id, body, header)


class _Code(str):
    """Text written into the DAG file as code, not as a string literal."""

    def __repr__(self) -> str:
        return str(self)
