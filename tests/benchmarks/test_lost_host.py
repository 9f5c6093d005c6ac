"""benchmarks/lost_host.py: its table and its refusals (its run, about 5 minutes a repetition, is recorded in
benchmarks/RESULTS.md, not run by the suite: tests/local/cluster/test_gke_placement.py holds the lost host's path)."""

from __future__ import annotations

import pytest

from benchmarks.lost_host import _jobset, main, markdown

RUNS = [
    {
        "baseline": {"replacement_created": 10.4, "running": 10.9},
        "lost_host": {"marked": 54.0, "nodes_deleted": 58.1, "pods_gone": 99.3, "replacement_created": 133.8,
                      "running": 134.6},
    },
    {
        "baseline": {"replacement_created": 10.2, "running": 11.1},
        "lost_host": {"marked": 52.0, "nodes_deleted": 56.0, "pods_gone": 97.0, "replacement_created": 131.0,
                      "running": 132.0},
    },
]  # fmt: skip


def test_the_table_gives_each_phase_as_a_median_and_range_and_the_ratio_of_running_again() -> None:
    text = markdown(RUNS, {"start": [1.0, 2.0, 3.0], "end": [2.0, 2.0, 3.0]})
    assert "| worker pod force-deleted | - | - | - | 10.3 s (10.2-10.4) | 11.0 s (10.9-11.1) |" in text
    assert "| one host of a 4-host slice lost | 53.0 s (52.0-54.0) | 57.0 s (56.0-58.1) |" in text
    # 134.6 / 10.9 = 12.3 and 132.0 / 11.1 = 11.9: the median of the two
    assert "Running again, lost host / force-deleted pod: 12.1x (median of 2)." in text
    assert text.endswith("Load average (1, 5, 15 min) at start 1.0, 2.0, 3.0, at the end 2.0, 2.0, 3.0.")


def test_the_jobset_is_the_operators_gke_one_with_sleeping_containers() -> None:
    jobset = _jobset("lost-host-0")
    jobs = {r["name"]: r for r in jobset["spec"]["replicatedJobs"]}
    assert jobs["worker"]["replicas"] == 3
    assert jobs["worker"]["template"]["spec"]["parallelism"] == 4  # 4 hosts a slice
    commands = [
        c.get("command") for r in jobs.values() for c in r["template"]["spec"]["template"]["spec"]["containers"]
    ]
    assert ["sleep", "3600"] in commands


def test_no_repetition_is_refused_before_a_cluster_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--repeat", "0"])
    assert exited.value.code == 2
    assert "--repeat must be at least 1, got 0" in capsys.readouterr().err
