"""Session-wide test settings: Airflow and JAX never touch the home directory or the network."""

from __future__ import annotations

import os
import tempfile

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

# Shared fixtures: a GCS emulator the tests start themselves, and real Orbax checkpoints.
pytest_plugins = ["tests.support.gcs_emulator", "tests.support.orbax_checkpoints", "tests.support.airflow_dags"]
