"""The metrics tests' StatsD: the local stand-in server (``cli/statsd_server.py``) waited on with a deadline, and
Airflow's stats initialised from an environment as the task runner's ``main()`` does, for code that runs where
``main()`` does not (``dag.test()`` runs a task in its own process).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping

from elastic_training.cli.statsd_server import Metric, StatsdServer


class StatsdListener(StatsdServer):
    """:class:`StatsdServer` whose :meth:`wait_for` raises ``TimeoutError`` naming what it read by the deadline."""

    def environment(self) -> dict[str, str]:
        return self.airflow_environment()

    def wait_for(self, done: Callable[[list[Metric]], bool], timeout: float = 60.0) -> list[Metric]:
        received = self.read(done, timeout)
        if not done(received):
            raise TimeoutError(f"no such metrics within {timeout:.0f} s; read: {received}")
        return received


@contextlib.contextmanager
def airflow_stats_from_environment(environment: Mapping[str, str]) -> Iterator[None]:
    """Airflow's stats initialised from ``environment`` as the task runner's ``main()`` does; off again after."""
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
    from airflow.sdk.configuration import conf
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    saved = {key: os.environ.get(key) for key in environment}
    os.environ.update(environment)
    try:
        legacy = conf.getboolean("metrics", "legacy_names_on")
        stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=legacy)
        yield
    finally:
        stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
