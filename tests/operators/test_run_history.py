"""The run-history annotation: what the operator writes comes back whole; nothing hostile gets through."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastic_training.operators.recovery import CostModel, Incarnation, LogDigest, run_report
from elastic_training.operators.run_history import RUN_HISTORY_MAX_BYTES, parse_run_history, render_run_history
from elastic_training.operators.run_report import escalations_of

ESCALATION: dict[str, Any] = {
    "reason": "jobset_failed",
    "message": "full restart 1 of 2: the JobSet failed",
    "at": 1_796_000_000.5,
    "jobset_name": "pretrain-abc",
    "latest_step": 23,
    "quarantined": ["gs://bucket/runs/r/checkpoints/quarantine/20.20261130T184140Z"],
    "resumed_from_step": -1,
    "steps_lost": 23,
    "seconds_to_recreate": 12.5,
}
INCARNATION: dict[str, Any] = {
    "jobset_name": "pretrain-abc",
    "slice_restarts": 3,
    "jobset_restarts": 1,
    "digest": {"steps_executed": 24},
}


def _report(escalations: list[dict[str, Any]], history: list[dict[str, Any]]) -> dict[str, Any]:
    incarnations = [
        Incarnation(
            jobset_name=h["jobset_name"],
            slice_restarts=h["slice_restarts"],
            jobset_restarts=h["jobset_restarts"],
            digest=LogDigest.from_json(h["digest"]),
        )
        for h in history
    ]
    return run_report(
        incarnations=incarnations,
        escalations=escalations_of(escalations),
        namespace="default",
        run_directory="gs://bucket/runs/r",
        target_step=59,
        final_step=59,
        wall_seconds=100.0,
        costs=CostModel(chips=8, price_per_chip_hour=1.0),
        full_restart_seconds_lost=sum(float(e.get("seconds_to_recreate") or 0.0) for e in escalations),
    ).to_json()


def test_what_the_operator_writes_comes_back_without_timelines() -> None:
    escalations, history = parse_run_history(render_run_history([ESCALATION], [INCARNATION]))
    assert escalations == [ESCALATION]
    assert history == [{**INCARNATION, "digest": None}]
    report = _report(escalations, history)
    assert report["full_restarts"] == 1 and report["slice_restarts"] == 3


def test_a_history_too_large_keeps_its_newest_entries() -> None:
    many = [{**ESCALATION, "message": "m" * 4000, "jobset_name": f"js-{i}"} for i in range(40)]
    text = render_run_history(many, [INCARNATION] * 3)
    assert len(text.encode()) <= RUN_HISTORY_MAX_BYTES
    escalations, history = parse_run_history(text)
    assert escalations and escalations[-1]["jobset_name"] == "js-39" and len(escalations) < 40
    assert len(history) == 3
    long_message = render_run_history([{**ESCALATION, "message": "x" * 10_000}], [])
    assert len(parse_run_history(long_message)[0][0]["message"]) == 4096


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not json", "Expecting value"),
        ("[]", "not an object"),
        ('{"escalations": {}, "history": []}', "must be lists"),
        ('{"escalations": []}', "history"),
        ('{"escalations": [{"reason": "stalled", "at": 1, "steps_lost": Infinity}], "history": []}', "steps_lost"),
        ('{"escalations": [{"reason": "stalled", "at": NaN}], "history": []}', "at must be a number"),
        ('{"escalations": [{"reason": "stalled", "at": 1, "seconds_to_recreate": "nan"}], "history": []}', "seconds"),
        (
            '{"escalations": [{"reason": "stalled", "at": 1, "steps_lost": ' + "9" * 400 + "}], " + '"history": []}',
            "steps_lost",
        ),
        ('{"escalations": [{"reason": "stalled", "at": 1, "latest_step": true}], "history": []}', "latest_step"),
        ('{"escalations": [{"reason": 7, "at": 1}], "history": []}', "reason"),
        ('{"escalations": [{"reason": "stalled", "at": 1, "quarantined": [3]}], "history": []}', "quarantined"),
        (
            '{"escalations": [], "history": [{"jobset_name": "a", "slice_restarts": -1, "jobset_restarts": 0}]}',
            "slice_restarts",
        ),
        (
            '{"escalations": [], "history": [{"jobset_name": "a", "slice_restarts": "2", "jobset_restarts": 0}]}',
            "slice_restarts",
        ),
        ('{"escalations": [], "history": ["a"]}', "object"),
        ("[" * 100_000, None),
        ('{"escalations": [], "history": [], "pad": "' + "x" * RUN_HISTORY_MAX_BYTES + '"}', "longer than"),
    ],
)
def test_an_unsound_annotation_is_refused(text: str, problem: str | None) -> None:
    with pytest.raises((ValueError, TypeError, KeyError, OverflowError, RecursionError), match=problem):
        parse_run_history(text)


_hostile = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**15)
    | st.floats()
    | st.text(max_size=30)
    | st.lists(st.integers() | st.text(max_size=5), max_size=3)
)


def _mostly(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Valid values four times in five, so that whole entries pass often enough to reach the report."""
    return st.integers(0, 4).flatmap(lambda n: _hostile if n == 0 else valid)


_text = _mostly(st.text(max_size=30))
_step = _mostly(st.integers(-1, 10**6))
_seconds = _mostly(st.floats(0, 1e10))
_escalations = st.fixed_dictionaries(
    {"reason": _text, "at": _seconds},
    optional={
        "message": _text,
        "jobset_name": _text,
        "latest_step": _step,
        "resumed_from_step": _step,
        "steps_lost": _step,
        "seconds_to_recreate": _seconds,
        "quarantined": _mostly(st.lists(st.text(max_size=10), max_size=2)),
        "extra": _hostile,
    },
)
_incarnations = st.fixed_dictionaries(
    {"jobset_name": _text, "slice_restarts": _step, "jobset_restarts": _step},
    optional={"digest": _hostile},
)


# No per-example deadline (Hypothesis' default is 200 ms): a loaded machine failed it; a hang is pytest-timeout's.
@settings(deadline=None)
@given(st.lists(_escalations, max_size=3), st.lists(_incarnations, max_size=3))
def test_whatever_passes_makes_a_report(escalations: list[Any], history: list[Any]) -> None:
    """Hostile values either are refused or come back as values the run report can compute with."""
    text = json.dumps({"escalations": escalations, "history": history})
    try:
        parsed_escalations, parsed_history = parse_run_history(text)
    except (ValueError, TypeError, KeyError, OverflowError, RecursionError):
        return
    report = _report(parsed_escalations, parsed_history)
    json.dumps(report, allow_nan=False)
