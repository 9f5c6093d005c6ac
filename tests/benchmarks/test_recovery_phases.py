"""The recovery-phases benchmark: phases cut at the right log lines, the table and the ratio."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from benchmarks.recovery_phases import (
    dag_source,
    full_restart_phases,
    in_process_phases,
    markdown,
    parse_timestamped,
    summary,
)

KILL = 1000.0


def test_in_process_phases_run_from_the_kill_through_the_recovery_record() -> None:
    report = {
        "recoveries": [
            {"detected_at": 1000.5, "slices_ready_at": 1002.0, "restored_at": 1002.25, "first_step_at": 1003.0},
            {"detected_at": 2000.0, "slices_ready_at": 2001.0, "restored_at": 2002.0, "first_step_at": 2003.0},
        ]
    }
    assert in_process_phases(report, KILL) == {
        "detection": 0.5,
        "replacement": 1.5,
        "restore": 0.25,
        "first_step": 0.75,
        "total": 3.0,
    }
    with pytest.raises(ValueError, match="no in-process recovery"):
        in_process_phases({"recoveries": []}, KILL)


def test_full_restart_phases_read_the_escalation_and_the_next_head_log() -> None:
    log = parse_timestamped(
        "2026-12-01T10:00:10.5Z starting trainer\n"
        "garbage without a stamp\n"
        "2026-12-01T10:00:12Z completed step: 3, seconds: 0.1\n"  # before the restore: not the first step after it
        "2026-12-01T10:00:14.25Z restoring from this run's directory step 20\n"
        "2026-12-01T10:00:16Z completed step: 21, seconds: 0.2\n"
        "2026-12-01T10:00:17Z completed step: 22, seconds: 0.2\n"
    )
    start = log[0][0]
    assert log[0][1] == "starting trainer" and len(log) == 5
    report = {"escalations": [{"at": start - 6.0}]}
    phases = full_restart_phases(report, start - 8.0, log)
    assert phases == {"detection": 2.0, "replacement": 6.0, "restore": 3.75, "first_step": 1.75, "total": 13.5}
    # A next incarnation that never restored leaves its phases open rather than inventing them.
    unfinished = full_restart_phases(report, start - 8.0, log[:2])
    assert unfinished["restore"] is None and unfinished["total"] is None and unfinished["replacement"] == 6.0
    with pytest.raises(ValueError, match="no full restart"):
        full_restart_phases({"escalations": []}, KILL, log)


def test_summary_and_table_give_medians_and_the_ratio() -> None:
    def row(mode: str, total: float) -> dict[str, object]:
        phases = {"detection": 1.0, "replacement": 1.0, "restore": 1.0, "first_step": total - 3.0, "total": total}
        return {"mode": mode, "phases": phases}

    rows = [row("in_process", 4.0), row("in_process", 6.0), row("full_restart", 40.0), row("full_restart", 60.0)]
    medians = summary(rows)
    assert medians["in_process"]["total"] == 5.0 and medians["full_restart"]["total"] == 50.0
    assert medians["ratio"]["total"] == 10.0 and medians["ratio"]["detection"] == 1.0
    table = markdown(rows, "python -m benchmarks.recovery_phases --repeat 2")
    assert "| total | 5.00 (4.00-6.00) | 50.00 (40.00-60.00) | 10.0x |" in table
    assert markdown([{"mode": "in_process", "phases": {}}], "x").count("| - |") >= 1


def test_the_two_modes_differ_only_in_the_slice_budget(tmp_path: Path) -> None:
    options = argparse.Namespace(steps=60, period=10, slices=2, step_seconds=0.2)
    inside = dag_source("d", "r", tmp_path, options, "in_process")
    full = dag_source("d", "r", tmp_path, options, "full_restart")
    assert inside.replace("max_slice_restarts=3", "max_slice_restarts=0") == full
    compile(full, "dag.py", "exec")
