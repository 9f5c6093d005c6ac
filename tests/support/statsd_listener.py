"""A StatsD server for the metrics tests: a UDP socket on 127.0.0.1 that keeps every datagram Airflow sends it.

Airflow's StatsD backend (``airflow.sdk.observability.metrics.statsd_logger``) sends one datagram per call through
the ``statsd`` client: ``<prefix>.<name>[,tag=value...]:<value>|<type>`` (``c`` counter, ``g`` gauge, ``ms``
timing), the tags on the wire only with ``[metrics] statsd_influxdb_enabled``. :meth:`StatsdListener.environment`
is the ``[metrics]`` configuration that points Airflow at this socket; :func:`airflow_stats_from_environment` does
what the task runner's ``main()`` does with it, for code that runs where ``main()`` does not (``dag.test()`` runs a
task in its own process).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

PREFIX = "airflow"  # [metrics] statsd_prefix's default


@dataclass(frozen=True)
class Datagram:
    """One StatsD line: its name (prefix and tags off), tags, value and type."""

    name: str
    tags: Mapping[str, str]
    value: float
    kind: str

    @classmethod
    def parse(cls, line: str, prefix: str = PREFIX) -> Datagram:
        stat, _, rest = line.partition(":")
        value, _, kind = rest.partition("|")
        name, *tags = stat.split(",")
        return cls(
            name=name.removeprefix(f"{prefix}."),
            tags=dict(tag.split("=", 1) for tag in tags),
            value=float(value),
            kind=kind,
        )


class StatsdListener:
    """A UDP socket on 127.0.0.1 (a free port) and the datagrams read from it so far."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.port = int(self.socket.getsockname()[1])
        self.received: list[Datagram] = []

    def environment(self, prefix: str = PREFIX) -> dict[str, str]:
        """Airflow's ``[metrics]`` pointed at this socket, tags on the wire (InfluxDB style)."""
        return {
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(self.port),
            "AIRFLOW__METRICS__STATSD_PREFIX": prefix,
            "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
        }

    def wait_for(self, done: Callable[[list[Datagram]], bool], timeout: float = 60.0) -> list[Datagram]:
        """Read datagrams until ``done(every one read so far)`` or the deadline (``TimeoutError``)."""
        deadline = time.monotonic() + timeout
        while not done(self.received):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no such datagrams within {timeout:.0f} s; read: {self.received}")
            self.socket.settimeout(min(left, 1.0))
            try:
                data = self.socket.recv(65536)
            except TimeoutError:
                continue
            self.received.extend(Datagram.parse(line) for line in data.decode().splitlines() if line)
        return self.received

    def named(self, prefix: str) -> list[Datagram]:
        """The datagrams read whose name starts with ``prefix``."""
        return [d for d in self.received if d.name.startswith(prefix)]

    def close(self) -> None:
        self.socket.close()


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
