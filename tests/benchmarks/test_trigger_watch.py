"""`benchmarks/trigger_watch.py` runs end to end with tiny numbers and reports well-formed results.

No timing is asserted: only that both triggers saw every deleted worker pod for the right reason and
that the request counter classified the requests each trigger makes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.trigger_watch import _by_client, markdown

ROOT = Path(__file__).resolve().parents[2]


def test_requests_are_attributed_by_user_agent() -> None:
    before = {"bench-polling-trigger\tget": 2, "OpenAPI-Generator/1/python\twatch": 1}
    after = {
        "bench-polling-trigger\tget": 5,
        "bench-polling-trigger\tlist": 3,
        "OpenAPI-Generator/1/python\twatch": 3,
        "bench-driver\tlist": 4,
    }
    assert _by_client(before, after) == {
        "watch": {"watch": 2},
        "polling": {"get": 3, "list": 3},
        "driver": {"list": 4},
    }


@pytest.mark.slow
def test_tiny_run_reports_both_triggers(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    command = [sys.executable, "-m", "benchmarks.trigger_watch", "--jobsets", "2", "--window", "3"]
    command += ["--deletes", "2", "--poll-interval", "2", "--json", str(out)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(out.read_text())
    assert "| `JobSetTrigger` (watch) | 2/2 |" in done.stdout
    assert done.stdout.startswith(markdown(result).splitlines()[0])

    for kind in ("watch", "polling"):
        row = result["triggerers"][kind]
        assert (row["detections"], row["deletes"]) == (2, 2)
        assert row["reasons"] == ["slice_restart_budget_spent"]
        assert len(row["latency_seconds"]) == 2 and len(row["counted_seconds"]) == 2
        pairs = zip(row["counted_seconds"], row["latency_seconds"], strict=True)
        assert all(counted <= event for counted, event in pairs)
        assert row["cpu_share_of_one_core"] >= 0 and row["rss_mib"] > 0
    # Each JobSetTrigger lists and watches its JobSet, pods and Jobs and follows the head pod's log, once.
    assert result["startup_requests"]["watch"] == {"list": 6, "watch": 6, "log follow": 2}
    # Before yielding, a fired trigger reads the end of the head pod's log once.
    assert result["detection_phase_requests"]["watch"]["log read"] == 2
    # Nothing changes in the window: no relist, no reopen within the watches' 300 s.
    assert result["window_requests"]["watch"] == {}
    # The polling baseline only ever gets the JobSet and lists its Jobs, one of each per poll.
    polled = result["startup_requests"]["polling"]
    assert set(polled) == {"get", "list"} and polled["get"] == polled["list"] >= 2
    assert set(result["window_requests"]["polling"]) <= {"get", "list"}
