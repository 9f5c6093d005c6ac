"""A StatsD server on 127.0.0.1 that keeps what it receives: the demo's and the tests' stand-in for a team's StatsD.

It reads the StatsD line protocol as statsd/statsd (etsy's) defines it (``docs/metric_types.md``: ``name:value|type``
with ``c`` counters, ``ms`` timers, ``g`` gauges, ``s`` sets, an optional ``|@rate``, several lines to a packet) and
the InfluxDB-style tags Airflow's StatsD backend appends with ``[metrics] statsd_influxdb_enabled``
(``name,tag=value:...``; apache/airflow ``shared/observability/.../statsd_logger.py``, ``prepare_stat_with_tags``),
as prometheus/statsd_exporter parses them. Unlike a real StatsD it aggregates nothing and flushes nowhere: it keeps
every line, in order, for the caller to read. :meth:`StatsdServer.airflow_environment` is the ``[metrics]``
configuration that points an Airflow at it.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

MAX_PACKET = 65535


@dataclass(frozen=True)
class Metric:
    """One StatsD line: its name (the prefix off), tags, value, type and sample rate."""

    name: str
    value: float
    kind: str
    tags: Mapping[str, str] = field(default_factory=dict)
    rate: float = 1.0

    @classmethod
    def parse(cls, line: str, prefix: str = "") -> Metric:
        """A line as StatsD reads it (``ValueError`` for one it would drop)."""
        stat, sep, rest = line.partition(":")
        if not sep or not stat:
            raise ValueError(f"not a StatsD line: {line!r}")
        value, _, more = rest.partition("|")
        kind, _, sampled = more.partition("|")
        if kind not in ("c", "ms", "g", "s", "h"):
            raise ValueError(f"unknown StatsD type {kind!r} in {line!r}")
        name, *tags = stat.split(",")
        if prefix and name.startswith(f"{prefix}."):
            name = name[len(prefix) + 1 :]
        return cls(
            name=name,
            value=float(value),
            kind=kind,
            tags=dict(tag.split("=", 1) for tag in tags if "=" in tag),
            rate=float(sampled[1:]) if sampled.startswith("@") else 1.0,
        )


class StatsdServer:
    """A UDP socket on 127.0.0.1 (a free port) and a thread that reads it as packets arrive, so none is dropped for a
    full socket buffer while the caller waits (a run sends Airflow's own metrics too); :meth:`read` returns them."""

    def __init__(self, prefix: str = "airflow") -> None:
        self.prefix = prefix
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.port = int(self.socket.getsockname()[1])
        self.received: list[Metric] = []
        self.dropped: list[str] = []
        self._arrived = threading.Condition()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"statsd-{self.port}", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def airflow_environment(self) -> dict[str, str]:
        """Airflow's ``[metrics]`` pointed at this server, tags on the wire (InfluxDB style)."""
        return {
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(self.port),
            "AIRFLOW__METRICS__STATSD_PREFIX": self.prefix,
            "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
        }

    def _serve(self) -> None:
        while True:
            try:
                data = self.socket.recv(MAX_PACKET)
            except TimeoutError:  # nothing waiting: the end, once asked to close
                if self._closed.is_set():
                    return
                continue
            with self._arrived:
                for line in data.decode(errors="replace").splitlines():
                    try:
                        self.received.append(Metric.parse(line, self.prefix))
                    except ValueError:
                        self.dropped.append(line[:200])
                self._arrived.notify_all()

    def read(self, until: Callable[[list[Metric]], bool] = lambda _: True, timeout: float = 0.0) -> list[Metric]:
        """The metrics read so far, once ``until(them)`` or after ``timeout`` seconds, whichever comes first."""
        with self._arrived:
            self._arrived.wait_for(lambda: until(self.received), timeout=timeout)
            return list(self.received)

    def named(self, prefix: str) -> list[Metric]:
        """The metrics read so far whose name starts with ``prefix``."""
        with self._arrived:
            return [m for m in self.received if m.name.startswith(prefix)]

    def close(self) -> None:
        """Read what is waiting, then stop; :attr:`received` holds everything that arrived."""
        self._closed.set()
        self._thread.join(timeout=30)
        self.socket.close()
