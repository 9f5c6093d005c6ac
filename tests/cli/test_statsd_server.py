"""The local StatsD server reads the line protocol as statsd/statsd defines it, with Airflow's InfluxDB-style
tags, and keeps every line; what a StatsD would drop it sets aside, naming it."""

from __future__ import annotations

import socket

import pytest

from elastic_training.cli.statsd_server import Metric, StatsdServer


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("airflow.gorets:1|c", Metric("gorets", 1.0, "c")),
        ("airflow.gorets:1|c|@0.1", Metric("gorets", 1.0, "c", rate=0.1)),
        ("airflow.glork:320|ms", Metric("glork", 320.0, "ms")),
        ("airflow.gaugor:+4|g", Metric("gaugor", 4.0, "g")),
        ("airflow.a.b,dag_id=d,task_id=t:2|c", Metric("a.b", 2.0, "c", {"dag_id": "d", "task_id": "t"})),
        ("other.gorets:1|c", Metric("other.gorets", 1.0, "c")),  # another prefix: kept whole
    ],
)
def test_a_line_is_read_as_statsd_reads_it(line: str, expected: Metric) -> None:
    assert Metric.parse(line, "airflow") == expected


@pytest.mark.parametrize("line", ["gorets", ":1|c", "gorets:1|x", "gorets:one|c"])
def test_a_line_statsd_would_drop_is_refused(line: str) -> None:
    with pytest.raises(ValueError):
        Metric.parse(line)


def test_a_packet_of_several_lines_and_a_bad_one() -> None:
    server = StatsdServer()
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
            client.sendto(b"airflow.gorets:1|c\nairflow.glork:320|ms\nnonsense", ("127.0.0.1", server.port))
        received = server.read(lambda got: len(got) >= 2, timeout=30)
        assert [(m.name, m.kind) for m in received] == [("gorets", "c"), ("glork", "ms")]
        assert server.dropped == ["nonsense"] and server.read() == received  # nothing more arrived
        assert server.airflow_environment()["AIRFLOW__METRICS__STATSD_PORT"] == str(server.port)
    finally:
        server.close()
