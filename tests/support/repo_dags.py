"""The repository's DAG files (``dags/``) loaded into the test Airflow, for ``dag.test()``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.airflow_dags import dag_from_source

DAGS = Path(__file__).resolve().parents[2] / "dags"


def repo_dag(dag_id: str) -> Any:
    """The DAG of ``dags/<dag_id>.py``, written into the test dags folder (``dag.test()`` needs a bundle)."""
    return dag_from_source(dag_id, (DAGS / f"{dag_id}.py").read_text(), "")
