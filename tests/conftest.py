"""Session-wide test settings: Airflow and JAX never touch the home directory or the network."""

from __future__ import annotations

import os
import tempfile

import pytest

# Each test process (each xdist worker too: they inherit the controller's environment) gets its own home and
# SQLite DB, set before anything imports Airflow; a user's AIRFLOW_HOME is never touched.
os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="elastic-training-airflow-")
for _shared in ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CORE__DAGS_FOLDER"):  # both follow the home
    os.environ.pop(_shared, None)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
# dag.test() runs triggers inline (no scheduler race to wait out); the real-scheduler test keeps the default.
os.environ.setdefault("AIRFLOW__ELASTIC_TRAINING__DEFER_SETTLE_SECONDS", "0")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# Shared fixtures: a GCS emulator the tests start themselves, real Orbax checkpoints, real MaxText's runs.
pytest_plugins = [
    "tests.support.gcs_emulator",
    "tests.support.orbax_checkpoints",
    "tests.support.airflow_dags",
    "tests.support.real_maxtext",
]


# pytest-xdist's `--dist loadfile` hands whole files to its processes in collection order. The browser journey
# (a real Airflow stack running both shipped DAGs, about 10 minutes) goes first, so that it runs beside the rest
# of the suite instead of alone at its end.
LONGEST_FIRST = ("tests/plugin/test_browser_journey.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the longest files first (a stable sort: everything else keeps its order)."""
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
