"""The pipeline report's time summary: where a pretraining run's wall time went, and what its goodput is made of."""

from __future__ import annotations

from elastic_training.operators.pipeline_report import recovery_summary, time_summary
from elastic_training.operators.run_report import RunReport

# The shape of a short local run behind Kueue: most of its wall time is not steps.
REPORT = {
    "target_step": 29,
    "wall_seconds": 40.0,
    "queued_seconds": 5.0,
    "admission_to_first_step_seconds": 12.0,
    "training_seconds": 14.0,
    "tail_seconds": 6.0,
    "goodput": 0.1,
    "goodput_with_queue": 0.0857,
    "preemptions": [],
}


def test_the_wall_time_is_split_into_queue_startup_training_and_tail() -> None:
    lines = time_summary(RunReport.from_json(REPORT), "multislice-queue")
    assert lines[0] == "time: 40.00 s wall (behind Kueue LocalQueue multislice-queue; 0 preemptions)"
    text = "\n".join(lines)
    assert "queued before admission   : 5.00 s (waiting for quota" in text
    assert "admission -> first step   : 12.00 s (pods scheduled and started" in text
    # 0.1 of the 35 s the run held capacity were steps kept: 3.5 s; the other 10.5 s of training were not.
    assert "first step -> last step   : 14.00 s (3.50 s of steps kept; 10.50 s recoveries" in text
    assert "after the last step (tail): 6.00 s (final checkpoint save" in text
    assert "other                     : 3.00 s" in text
    assert lines[-1] == (
        "goodput 0.100 = 3.50 s of steps kept / 35.00 s holding capacity (queue time apart); "
        "0.086 over the whole wall time"
    )


def test_airflow_resuming_the_task_is_said_after_the_goodput_and_outside_the_wall_time() -> None:
    lines = time_summary(RunReport.from_json(REPORT | {"resume_seconds": 14.2}))
    assert lines[0].startswith("time: 40.00 s wall")
    assert lines[-2].startswith("goodput 0.100 = 3.50 s of steps kept / 35.00 s holding capacity")
    assert lines[-1] == (
        "then, no capacity held: 14.20 s from the JobSet's end to the report "
        "(Airflow resuming the deferred task, and any retry of it; outside the wall time and goodput)"
    )


def test_what_a_report_does_not_know_reads_n_a_and_no_queue_is_said() -> None:
    lines = time_summary(RunReport.from_json({"target_step": 9, "wall_seconds": 10.0, "preemptions": [{}]}))
    assert lines[0] == "time: 10.00 s wall (no Kueue queue; 1 preemption)"
    assert "after the last step (tail): n/a" in "\n".join(lines)
    assert lines[-1].startswith("goodput n/a = n/a of steps kept / 10.00 s holding capacity")


def test_counts_are_told_with_their_noun_singular_only_for_one() -> None:
    from elastic_training.operators.pipeline_report import counted

    assert [counted(n, "step") for n in (0, 1, 2)] == ["0 steps", "1 step", "2 steps"]
    assert counted(1, "in-process recovery", "in-process recoveries") == "1 in-process recovery"
    assert counted(3, "in-process recovery", "in-process recoveries") == "3 in-process recoveries"


def test_a_share_reads_to_three_places_and_n_a_where_it_is_not_a_number() -> None:
    from elastic_training.operators.pipeline_report import share

    assert [share(v) for v in (0.5357, 1, 0.0)] == ["0.536", "1.000", "0.000"]
    assert [share(v) for v in (None, "0.5", True)] == ["n/a", "n/a", "n/a"]


def test_a_scale_up_before_the_fault_is_named_so_and_not_taken_for_its_detection() -> None:
    # Under load the slices can come up late at the start: the trainer scales up in process before the drill's kill.
    report = RunReport.from_json(
        {
            "target_step": 59,
            "recoveries": [
                {"detected_at": 100.0, "failed_step": 0, "restored_step": 0, "steps_lost": 0, "kind": "scale_up"},
                {"detected_at": 130.4, "failed_step": 25, "restored_step": 20, "steps_lost": 5, "kind": "slice_down"},
            ],
        }
    )
    drill = {"fired": True, "pod": "run-worker-1-0-x", "slice": 1, "step_seen": 25, "at_step": 25, "deleted_at": 130.0}
    summary = recovery_summary(report, drill)
    assert [r["detection_seconds"] for r in summary["recoveries"]] == [None, 0.4]
    text = "\n".join(summary["lines"])
    assert "recovery 1: scale-up in process (slices added), failed at step 0" in text
    assert "recovery 2: in-process, failed at step 25, restored step 20, 5 steps lost" in text
    assert text.count("fault -> detection") == 1
