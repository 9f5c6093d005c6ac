"""`operators.alerts`: what is news to a waiting run's notifiers, how they are called (a real ``BaseNotifier``
subclass, tests/support/alert_notifier.py), the DAG's one route and its deadline (Airflow 3.3's ``DeadlineAlert``).

End to end: tests/operators/test_elastic_operator.py (``dag.test()``, a full restart and a spent budget on the
local cluster) and tests/plugin/test_alerts_stack.py (the real scheduler and triggerer)."""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from elastic_training.operators import alerts
from elastic_training.operators.alerts import Alert, AlertEvent, AlertRoute, Alerts, Seen
from elastic_training.operators.observations import MonitorState
from elastic_training.operators.policy import JobSetPhase
from tests.support.alert_notifier import FileNotifier, told

NOTIFIER = "tests.support.alert_notifier.FileNotifier"


class _TI:
    dag_id, task_id, run_id, map_index, try_number = "nightly", "pretrain", "manual__1", -1, 1


def _queued(at: float, *, preempted: bool = False) -> MonitorState:
    state = MonitorState(jobset_uid="u-1")
    if preempted:
        state.digest.admitted(at - 50)
    state.phase = JobSetPhase.SUSPENDED
    state.digest.queued(at, preempted=preempted, reason="")
    state.queue_reason = "couldn't assign flavors to pod set worker: insufficient quota"
    return state


def test_a_wait_for_admission_is_news_once_past_its_threshold() -> None:
    state, seen = _queued(100.0), Seen(jobset_uid="u-1")
    assert alerts.news(state, seen, now=159.0, queued_after=60) == []
    assert alerts.next_news_at(state, seen, queued_after=60) == 160.0
    [alert] = alerts.news(state, seen, now=160.0, queued_after=60)
    assert alert.event is AlertEvent.QUEUED_TOO_LONG and "insufficient quota" in alert.message
    assert alert.details["queued_seconds"] == 60.0
    seen = alerts.told(state, seen, now=160.0, queued_after=60)
    assert alerts.news(state, seen, now=500.0, queued_after=60) == []  # told once per wait
    assert alerts.next_news_at(state, seen, queued_after=60) is None
    assert alerts.news(state, Seen(jobset_uid="u-1"), now=10_000.0, queued_after=None) == []  # never told


def test_a_wait_is_told_with_kueues_reason_or_without_it_once_the_grace_is_over() -> None:
    """Found on the real controllers: at load 10 Kueue had not said why 13 s after the JobSet was created, and the
    alert went out with no reason. It waits for Kueue's words, and goes without them past the grace."""
    state, seen = _queued(100.0), Seen(jobset_uid="u-1")
    state.queue_reason = ""
    after = 100.0 + 60 + alerts.REASON_GRACE_SECONDS
    assert alerts.news(state, seen, now=160.0, queued_after=60) == []
    assert alerts.told(state, seen, now=160.0, queued_after=60) == seen  # nothing told: nothing marked
    assert alerts.next_news_at(state, seen, queued_after=60) == after
    [bare] = alerts.news(state, seen, now=after, queued_after=60)
    assert bare.details["reason"] == "" and bare.message.endswith("(told after 60 s)")
    state.queue_reason = "couldn't assign flavors to pod set worker: insufficient quota"  # Kueue said why
    assert alerts.next_news_at(state, seen, queued_after=60) == 160.0
    [told] = alerts.news(state, seen, now=161.0, queued_after=60)
    assert "insufficient quota" in told.message


def test_a_preemption_is_news_and_so_is_its_long_wait() -> None:
    state = _queued(1000.0, preempted=True)
    seen = Seen(jobset_uid="u-1")
    [preempted] = alerts.news(state, seen, now=1001.0, queued_after=600)
    assert preempted.event is AlertEvent.PREEMPTED and "no budget spent" in preempted.message
    seen = alerts.told(state, seen, now=1001.0, queued_after=600)
    assert seen.preemptions == 1 and alerts.news(state, seen, now=1500.0, queued_after=600) == []
    [waited] = alerts.news(state, seen, now=1600.0, queued_after=600)
    assert waited.event is AlertEvent.QUEUED_TOO_LONG


def test_an_eviction_is_news() -> None:
    state = MonitorState(jobset_uid="u-1")
    state.slice_evictions, state.slice_evictions_by_slice = 2, {"1": 2}
    [evicted] = alerts.news(state, Seen(jobset_uid="u-1", evictions=1), now=0.0, queued_after=None)
    assert evicted.event is AlertEvent.EVICTED and evicted.details["by_slice"] == {"1": 2}
    assert alerts.news(state, Seen(jobset_uid="u-1", evictions=2), now=0.0, queued_after=None) == []


@pytest.mark.parametrize(
    "stored",
    [{"jobset_uid": "u-0", "preemptions": 5}, {"jobset_uid": "u-1", "preemptions": "many"}, ["x"], None, "{"],
)
def test_what_was_told_of_another_incarnation_or_unreadable_is_nothing(stored: Any) -> None:
    assert Seen.from_json(stored, jobset_uid="u-1") == Seen(jobset_uid="u-1")


def test_each_notifier_is_called_with_its_own_rendering_and_a_broken_one_is_only_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = tmp_path / "inbox.jsonl"
    called: list[dict[str, Any]] = []
    given = Alerts(
        (FileNotifier(path=str(inbox)), FileNotifier(path=str(inbox), fail=True), lambda c: called.append(c)),
        queued_after=None,
    )
    log = logging.getLogger("test-alerts")
    first = alerts.full_restart("stalled", "full restart 1 of 2: no progress", used=1, allowed=2, latest_step=7)
    second = alerts.budget_spent("max_full_restarts", "spent", reason="x", full_restarts_used=2, allowed=2)
    with caplog.at_level(logging.WARNING, logger="test-alerts"):
        assert alerts.send(given, {"ti": _TI()}, first, log) == 2
        assert alerts.send(given, {"ti": _TI()}, second, log) == 2
    lines = told(inbox)
    # BaseNotifier renders its templates in place: without a copy per call, the second line would be the first's.
    assert [r["line"] for r in lines] == [
        "full_restart: elastic run escalated to full restart 1 of 2",
        "budget_spent: elastic run failed: max_full_restarts spent",
    ]
    assert lines[0]["alert"]["details"]["full_restarts_left"] == 1 and lines[0]["alert"]["run_id"] == "manual__1"
    assert [c[alerts.CONTEXT_KEY]["event"] for c in called] == ["full_restart", "budget_spent"]
    assert "ti" in called[0]
    assert caplog.text.count("the notifier FileNotifier failed") == 2 and "broken on purpose" in caplog.text
    assert alerts.send(None, {}, first, log) == 0


@pytest.mark.parametrize(("value", "error"), [("mail me", TypeError), ([1], TypeError), (42, TypeError)])
def test_the_alerts_argument_refuses_what_cannot_be_called(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="alerts"):
        Alerts.of(value)
    with pytest.raises(ValueError, match="queued_after must be a positive number"):
        Alerts((print,), queued_after=0)
    with pytest.raises(TypeError, match="FileNotifier is a class; pass an instance"):
        Alerts.of([FileNotifier])


def test_the_alerts_argument_takes_one_notifier_or_a_list() -> None:
    assert Alerts.of(print) == Alerts((print,))
    assert Alerts.of([print, repr]).notifiers == (print, repr)  # type: ignore[union-attr]
    assert Alerts.of(None) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("08:00", (timedelta(hours=8), True)),
        ("7:30", (timedelta(hours=7, minutes=30), True)),
        ("90m", (timedelta(minutes=90), False)),
        ("6h", (timedelta(hours=6), False)),
        ("45s", (timedelta(seconds=45), False)),
        ("", None),
    ],
)
def test_a_deadline_is_a_clock_time_or_a_duration(text: str, expected: Any) -> None:
    assert alerts.deadline_interval(text) == expected


@pytest.mark.parametrize("text", ["24:00", "8", "0s", "8d", "-1h", "nan h", "08:00 tomorrow", "200h"])
def test_a_deadline_that_cannot_be_meant_is_refused_saying_what_it_takes(text: str) -> None:
    with pytest.raises(ValueError, match=r"HH:MM .* or a duration"):
        alerts.deadline_interval(text)


def test_the_route_is_read_from_the_config_and_bad_values_name_their_option(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ALERT_NOTIFIER", "ALERT_NOTIFIER_KWARGS", "ALERT_QUEUED_AFTER", "NIGHTLY_DEADLINE"):
        monkeypatch.delenv(f"AIRFLOW__ELASTIC_TRAINING__{name}", raising=False)
    assert AlertRoute.from_config() is None
    assert alerts.configured_deadline(None) is None
    monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__ALERT_NOTIFIER", NOTIFIER)
    monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__ALERT_NOTIFIER_KWARGS", '{"path": "/tmp/inbox"}')
    monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__ALERT_QUEUED_AFTER", "600")
    route = AlertRoute.from_config()
    assert route == AlertRoute(NOTIFIER, {"path": "/tmp/inbox"}, 600.0)
    notifier: Any
    [notifier] = route.alerts().notifiers
    assert isinstance(notifier, FileNotifier) and notifier.path == "/tmp/inbox"
    monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__NIGHTLY_DEADLINE", "08:00")
    deadline = alerts.configured_deadline(route)
    from airflow.sdk.definitions.deadline import DeadlineReference

    assert deadline is not None and deadline.interval == timedelta(hours=8)
    assert deadline.reference == DeadlineReference.DAGRUN_LOGICAL_DATE
    assert deadline.callback.path == alerts.DEADLINE_CALLBACK
    assert deadline.callback.kwargs["notifier"] == NOTIFIER
    monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__NIGHTLY_DEADLINE", "90m")
    assert alerts.configured_deadline(route).reference == DeadlineReference.DAGRUN_QUEUED_AT  # type: ignore[union-attr]
    monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__NIGHTLY_DEADLINE", "soon")
    with pytest.raises(ValueError, match=r"\[elastic_training\] nightly_deadline"):
        alerts.configured_deadline(route)
    for name, value, said in [
        ("ALERT_NOTIFIER_KWARGS", "{", "alert_notifier_kwargs is not JSON"),
        ("ALERT_NOTIFIER_KWARGS", "[1]", "must be a JSON object"),
        ("ALERT_QUEUED_AFTER", "-5", "alert_queued_after must be positive"),
        ("ALERT_NOTIFIER", "not a path!", "import path of a notifier class"),
    ]:
        with monkeypatch.context() as patched:
            patched.setenv(f"AIRFLOW__ELASTIC_TRAINING__{name}", value)
            with pytest.raises(ValueError, match=said):
                AlertRoute.from_config()
    with pytest.raises(ValueError, match="cannot be imported"):
        AlertRoute("tests.support.alert_notifier.NoSuchNotifier").alerts()


def test_a_missed_deadline_reaches_the_notifier_as_the_triggerer_calls_it(tmp_path: Path) -> None:
    """As Airflow's ``CallbackTrigger`` runs an ``AsyncCallback``: the path's callable awaited with its kwargs and
    the scheduler's simple context (the DAG run as the REST API shows it, the deadline)."""
    inbox = tmp_path / "inbox.jsonl"
    context = {
        "dag_run": {"dag_id": "nightly", "dag_run_id": "scheduled__2026-12-04", "state": "running"},
        "deadline": {"id": "d-1", "deadline_time": datetime(2026, 12, 4, 8, 0, tzinfo=UTC)},
    }
    said = asyncio.run(
        alerts.deadline_missed(context, notifier=NOTIFIER, notifier_kwargs={"path": str(inbox)}, finished_by="08:00")
    )
    assert said.startswith(f"told {NOTIFIER}")
    [record] = told(inbox)
    assert record["how"] == "async" and record["line"] == "deadline_missed: nightly missed its deadline"
    alert = record["alert"]
    assert alert["run_id"] == "scheduled__2026-12-04" and alert["details"]["deadline_time"].startswith("2026-12-04T08")
    assert "was not finished by 2026-12-04T08:00:00+00:00 (finished by 08:00); it is running" in alert["message"]


def test_an_alert_payload_names_its_task() -> None:
    payload = Alert(AlertEvent.CHECKPOINT_UNKNOWN, "t", "m", {"path": "p"}).payload({"ti": _TI()})
    assert (
        payload["dag_id"] == "nightly" and payload["task_id"] == "pretrain" and payload["event"] == "checkpoint_unknown"
    )


def test_the_trigger_wakes_the_operator_with_a_notice_for_news_and_only_when_it_has_notifiers() -> None:
    """The trigger's decide loop over a JobSet queued for 100 s: with ``alerts`` (a 50 s threshold) it yields a
    ``notice``; told already (``seen``), or without alerts, it goes on waiting (cut off here by a deadline)."""
    from elastic_training.operators.triggers import EventStatus, JobSetTrigger, _Monitor
    from tests.support.trigger_runs import BUDGETS

    now = time.time()
    state = _queued(now - 100)

    def first(alerts_kwarg: dict[str, Any] | None, deadline: float | None = None) -> dict[str, Any]:
        trigger = JobSetTrigger(
            name="run-1",
            namespace="ml",
            uid="u-1",
            target_step=9,
            budgets=BUDGETS,
            alerts=alerts_kwarg,
            deadline=deadline,
            poll_interval=0.05,
        )
        monitor = _Monitor(trigger, MonitorState.from_json(state.to_json()), hook=None, watches=object())  # type: ignore[arg-type]
        return asyncio.run(monitor._decide_loop([]))

    event = first({"seen": Seen(jobset_uid="u-1").to_json(), "queued_after": 50})
    assert (event["status"], event["reason"]) == (EventStatus.NOTICE.value, "queued_too_long")
    seen = alerts.told(state, Seen(jobset_uid="u-1"), now=now, queued_after=50).to_json()
    for quiet in ({"seen": seen, "queued_after": 50}, None):
        assert first(quiet, deadline=time.time() + 0.5)["status"] == EventStatus.DEADLINE.value


def test_the_documented_smtp_example_builds_and_renders_each_alert_on_its_own() -> None:
    """docs/operations.md's working example, the SMTP provider's own ``SmtpNotifier`` (nothing is sent: its templates
    are rendered as its ``notify`` renders them, on the copy each alert gets)."""
    route = AlertRoute(
        "airflow.providers.smtp.notifications.smtp.SmtpNotifier",
        {
            "to": "ml-oncall@example.com",
            "subject": "{{ elastic_training_alert.title }}",
            "html_content": "{{ elastic_training_alert.message }}",
        },
    )
    notifier: Any
    [notifier] = route.alerts().notifiers
    subjects = []
    for alert in (
        alerts.full_restart("stalled", "full restart 1 of 2: stalled", used=1, allowed=2, latest_step=3),
        alerts.checkpoint_unknown("gs://b/run/checkpoints", "503 from storage"),
    ):
        called = copy.copy(notifier)
        called.render_template_fields({"ti": _TI(), alerts.CONTEXT_KEY: alert.payload({"ti": _TI()})})
        subjects.append((called.subject, called.html_content))
    assert subjects == [
        ("elastic run escalated to full restart 1 of 2", "full restart 1 of 2: stalled (1 full restart(s) left)"),
        (
            "checkpoints could not be checked",
            "the checkpoints under gs://b/run/checkpoints could not be checked (unknown, not invalid: nothing was "
            "moved): 503 from storage",
        ),
    ]
    assert (notifier.subject, notifier.to) == ("{{ elastic_training_alert.title }}", "ml-oncall@example.com")
    assert route.deadline("6h") is not None
