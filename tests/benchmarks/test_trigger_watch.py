"""`benchmarks/trigger_watch.py` runs end to end with tiny numbers and reports well-formed results.

No timing is asserted: only that both triggers saw every deleted worker pod for the right reason and
that the request counter classified the requests each trigger makes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.trigger_watch import AGENT_PREFIX, _by_client, _jobset, _streams, main, markdown

ROOT = Path(__file__).resolve().parents[2]


def test_requests_are_attributed_by_user_agent() -> None:
    before = {"bench-polling-trigger\tget": 2, "OpenAPI-Generator/1/python\twatch": 1}
    after = {
        "bench-polling-trigger\tget": 5,
        "bench-polling-trigger\tlist": 3,
        "OpenAPI-Generator/1/python\twatch": 3,
        "bench-driver\tlist": 4,
    }
    # Any other agent is the cluster's own: the controllers, the scheduler, JobSet, Kueue, the node agent.
    assert _by_client(before, after) == {
        "watch": {},
        "polling": {"get": 3, "list": 3},
        "driver": {"list": 4},
        "cluster": {"watch": 2},
    }


def test_watch_triggerers_are_told_apart_by_their_label() -> None:
    after = {f"{AGENT_PREFIX}watch\twatch": 40, f"{AGENT_PREFIX}baseline\tlog follow": 1, "bench-driver\tlist": 2}
    assert _by_client({}, after, ("watch", "baseline")) == {
        "watch": {"watch": 40},
        "baseline": {"log follow": 1},
        "driver": {"list": 2},
        "cluster": {},
    }


def test_a_queued_jobset_joins_the_queue_and_asks_for_what_the_quota_counts() -> None:
    queued = _jobset("q", in_queue=True)
    assert queued["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "bench-queue"
    pods = [r["template"]["spec"]["template"]["spec"] for r in queued["spec"]["replicatedJobs"]]
    assert [p["containers"][0]["resources"] for p in pods] == [{"requests": {"cpu": "10m"}}] * 2
    assert "kueue.x-k8s.io/queue-name" not in _jobset("plain")["metadata"]["labels"]
    # A triggerer shares one watch per kind (the Workloads' too when the JobSets are queued), however many JobSets,
    # and follows no log until a head runs.
    assert _streams(["a", "b", "c"], running={"a"}, in_queue=True) == (4, 1)
    assert _streams(["a", "b"], running={"a", "b"}, in_queue=False) == (3, 2)


@pytest.mark.parametrize(
    "argv",
    [
        ["--queued", "1"],
        ["--queued", "-0.1"],
        ["--jobsets", "10", "--queued", "0.99"],  # rounds to 10 queued: none would run
        ["--jobsets", "10", "--baseline", "watch", "--baseline-jobsets", "11"],
        ["--jobsets", "10", "--queued", "0.8", "--deletes", "3"],  # only 2 run
    ],
)
def test_bad_counts_are_refused_before_anything_starts(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2 and "error:" in capsys.readouterr().err


def test_the_scale_form_compares_the_two_watch_triggerers() -> None:
    def row(jobsets: int, queued: int, cpu: float, requests: int, p99: float) -> dict[str, object]:
        return {
            "kind": "watch",
            "jobsets": jobsets,
            "queued": queued,
            "same_as_running": queued == 0,
            "detections": 2,
            "deletes": 2,
            "reasons": ["slice_restart_budget_spent"],
            "counted_median": 0.1,
            "latency_median": 0.3,
            "latency_p95": p99,
            "latency_p99": p99,
            "latency_max": p99,
            "startup_requests_per_jobset": 8.0,
            "steady_requests": requests,
            "steady_requests_per_jobset_hour": requests / jobsets * 6,
            "steady_requests_per_jobset_minute": requests / jobsets / 10,
            "cpu_share_of_one_core": cpu,
            "rss_mib": 300.0,
            "rss_mib_before_triggers": 200.0,
        }

    result = {
        "jobsets": 1000,
        "queued": 900,
        "pending_message": "couldn't assign flavors",
        "baseline": "baseline",
        "window_seconds": 600.0,
        "poll_interval_seconds": 10.0,
        "load_average": {"start": [1.0, 1.0, 1.0], "window_start": [2.0, 2.0, 2.0], "window_end": [3.0, 3.0, 3.0]},
        "startup_requests": {"watch": {"list": 4000}, "baseline": {"list": 400}},
        "window_requests": {"watch": {"watch": 4400}, "baseline": {"watch": 440}},
        "cluster_cpu_share_of_one_core": 0.5,
        "triggerers": {"watch": row(1000, 900, 0.02, 4400, 0.4), "baseline": row(100, 0, 0.005, 440, 0.35)},
    }
    text = markdown(result)
    assert text.startswith("1000 JobSets, 900 of them queued by Kueue")
    assert "| `JobSetTrigger` (watch) | 1000 (900) | 2/2 |" in text
    assert "| `JobSetTrigger` (watch), baseline | 100 (0) | 2/2 |" in text
    assert "1000 against 100 JobSets (10x) in one run: CPU 4.0x, steady requests 10.0x" in text
    assert "detection p99 400 ms against 350 ms" in text
    # The baseline is the running JobSets: what is left is the cost of the queued ones.
    assert "the 900 queued ones: 1.50 % of one core in all, 0.44 requests per queued JobSet-minute" in text
    assert "over the window 2.0, 2.0, 2.0 -> 3.0, 3.0, 3.0" in text


TINY_RUNS = {
    # 2 JobSets, the polling baseline beside the watch trigger
    "polling": ["--jobsets", "2", "--window", "3", "--deletes", "2", "--poll-interval", "2"],
    # 2 of 4 JobSets queued by Kueue behind the 2 running ones, which the baseline triggerer watches alone
    "queued": [
        "--jobsets",
        "4",
        "--queued",
        "0.5",
        "--baseline",
        "watch",
        "--baseline-jobsets",
        "2",
        "--window",
        "3",
        "--deletes",
        "2",
    ],
}


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[int, str, str, Path]]]:
    """Both tiny runs, started together: each has its own cluster, and most of a run's wall time is waiting (for
    its cluster, its pods, its triggerers' start), so side by side they take little more than one. Their output
    goes to files: a pipe nobody reads while the other run is awaited could fill and stall a run."""
    root = tmp_path_factory.mktemp("trigger-watch")
    started: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, argv in TINY_RUNS.items():
            command = [sys.executable, "-m", "benchmarks.trigger_watch", *argv, "--json", str(root / f"{name}.json")]
            with (root / f"{name}.out").open("wb") as stdout, (root / f"{name}.err").open("wb") as stderr:
                started[name] = subprocess.Popen(command, cwd=ROOT, stdout=stdout, stderr=stderr)
        done = {}
        for name, child in started.items():
            child.wait(timeout=600)
            text = {part: (root / f"{name}.{part}").read_text(errors="replace") for part in ("out", "err")}
            done[name] = (child.returncode, text["out"], text["err"], root / f"{name}.json")
        yield done
    finally:
        for child in started.values():
            if child.poll() is None:
                child.kill()
                child.wait()


@pytest.mark.slow
def test_tiny_run_reports_both_triggers(tiny_runs: dict[str, tuple[int, str, str, Path]]) -> None:
    returncode, stdout, stderr, out = tiny_runs["polling"]
    assert returncode == 0, stderr[-4000:]
    result = json.loads(out.read_text())
    assert "| `JobSetTrigger` (watch) | 2 (0) | 2/2 |" in stdout
    assert stdout.startswith(markdown(result).splitlines()[0])

    for kind in ("watch", "polling"):
        row = result["triggerers"][kind]
        assert (row["detections"], row["deletes"]) == (2, 2)
        assert row["reasons"] == ["slice_restart_budget_spent"]
        assert len(row["latency_seconds"]) == 2 and len(row["counted_seconds"]) == 2
        pairs = zip(row["counted_seconds"], row["latency_seconds"], strict=True)
        assert all(counted <= event for counted, event in pairs)
        assert row["cpu_share_of_one_core"] >= 0 and row["rss_mib"] > 0
    # The triggers share one list and one watch of the JobSets, pods and Jobs; each follows its head pod's log.
    assert result["startup_requests"]["watch"] == {"list": 3, "watch": 3, "log follow": 2}
    # Before yielding, a fired trigger reads the end of the head pod's log once.
    assert result["detection_phase_requests"]["watch"]["log read"] == 2
    # Nothing changes in the window: no relist, no reopen within the watches' 300 s.
    assert result["window_requests"]["watch"] == {}
    # The polling baseline only ever gets the JobSet and lists its Jobs, one of each per poll (the count is taken
    # at any moment: a poll per JobSet may be between its get and its list).
    polled = result["startup_requests"]["polling"]
    assert set(polled) == {"get", "list"} and polled["list"] >= 2
    assert 0 <= polled["get"] - polled["list"] <= 2, polled
    assert set(result["window_requests"]["polling"]) <= {"get", "list"}


@pytest.mark.slow
def test_tiny_queued_run_beside_a_watch_baseline(tiny_runs: dict[str, tuple[int, str, str, Path]]) -> None:
    """2 of 4 JobSets queued by Kueue behind the 2 running ones, which the baseline triggerer watches alone."""
    returncode, _, stderr, out = tiny_runs["queued"]
    assert returncode == 0, stderr[-4000:]
    result = json.loads(out.read_text())
    assert (result["jobsets"], result["queued"]) == (4, 2)
    assert "insufficient unused quota for cpu in flavor bench-flavor" in result["pending_message"]
    watch, baseline = result["triggerers"]["watch"], result["triggerers"]["baseline"]
    assert (watch["jobsets"], watch["queued"], baseline["jobsets"], baseline["queued"]) == (4, 2, 2, 0)
    assert baseline["same_as_running"] and not watch["same_as_running"]
    for row in (watch, baseline):
        assert (row["detections"], row["deletes"]) == (2, 2)
        assert row["reasons"] == ["slice_restart_budget_spent"]
    # In a queue, each triggerer lists and watches the JobSets, pods, Jobs and Workloads once, whatever the number of
    # its triggers; only a running JobSet's head log is followed.
    assert result["startup_requests"]["watch"] == {"list": 4, "watch": 4, "log follow": 2}
    assert result["startup_requests"]["baseline"] == {"list": 4, "watch": 4, "log follow": 2}
    assert result["window_requests"]["watch"] == {} and result["window_requests"]["baseline"] == {}
