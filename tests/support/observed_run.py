"""``dag.test()`` of a DAG file in a fresh Python process, Airflow configured by its environment alone: whatever
``[metrics]`` and ``[openlineage]`` the caller put there are read by this process's first look at them, as an
Airflow component reads them (the OpenLineage provider decides at import whether its listener is on, and caches it:
a pytest process that loaded the plugins already cannot turn it on).

``python tests/support/observed_run.py DAG_FILE`` prints the run's ``{"dag_id": ..., "run_id": ...}`` on a line of
its own after :data:`MARKER`; :func:`run_observed` writes an elastic DAG (:func:`tests.support.elastic_runs.
elastic_dag`), runs it so and waits. The script imports nothing of the repository but the DAG file, and runs outside
the repository's root: with the root on ``sys.path`` its ``elastic_training.egg-info`` (the editable install's) is a
second distribution of the same plugin, and Airflow 3.3.2's plugin loader stops at a plugin name it has seen
(``_get_plugins``' ``__register_plugins`` returns there), so no plugin after it, OpenLineage's among them, loads.

``dag.test()`` runs the task in this process, where the task runner's ``main()``, which initialises Airflow's stats
from ``[metrics]``, never runs: this does what it does first (``task_runner.main``: ``stats.initialize(factory=
stats_utils.get_stats_factory(), ...)``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

MARKER = "observed run: "  # Airflow logs to stdout too


def run_observed(dag_id: str, base: Path, environment: Mapping[str, str], **overrides: Any) -> Any:
    """The finished run of ``elastic_dag(dag_id, base, **overrides)`` (``dag_id``, ``run_id``, and its ``log``)."""
    from airflow.configuration import conf

    from tests.support.elastic_runs import elastic_dag

    elastic_dag(dag_id, base, **overrides)  # writes the DAG file
    dag_file = Path(conf.get("core", "dags_folder")) / f"{dag_id}.py"
    done = subprocess.run(
        [sys.executable, __file__, str(dag_file)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tempfile.gettempdir(),
        env={**os.environ, **environment},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith(MARKER)]
    finished = json.loads(line.removeprefix(MARKER))
    return SimpleNamespace(dag_id=finished["dag_id"], run_id=finished["run_id"], log=done.stdout + done.stderr)


def main(dag_file: str) -> None:
    from airflow.sdk.configuration import conf
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    stats.initialize(
        factory=stats_utils.get_stats_factory(), export_legacy_names=conf.getboolean("metrics", "legacy_names_on")
    )
    spec = importlib.util.spec_from_file_location(Path(dag_file).stem, dag_file)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {dag_file}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dag_run = module.dag.test()
    print(MARKER + json.dumps({"dag_id": dag_run.dag_id, "run_id": dag_run.run_id}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
