"""Shared by the DAG tests: the repository's DAG files loaded into the test Airflow, runs under a temp root."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from elastic_training.operators.pipeline_params import VARIABLE_ALLOWED_ROOTS


@pytest.fixture(scope="module")
def allowed_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A temp directory that the ``elastic_training_allowed_roots`` Variable (from the environment) allows."""
    root = tmp_path_factory.mktemp("runs")
    key = f"AIRFLOW_VAR_{VARIABLE_ALLOWED_ROOTS.upper()}"
    previous = os.environ.get(key)
    os.environ[key] = json.dumps([str(root), "gs://"])
    try:
        yield root
    finally:
        if previous is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = previous
