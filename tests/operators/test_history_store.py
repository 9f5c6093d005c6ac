"""The failure-history store (:mod:`operators.history_store`) through the real Task SDK ``Variable`` calls.

The fault is injected at the SDK's client boundary: ``task_runner.SUPERVISOR_COMMS`` (what a task's
``Variable.get`` / ``keys`` / ``set`` send their messages through, and what ``dag.test()`` itself replaces with an
in-process one) is a stand-in that answers from a dict as the supervisor relays the execution API's answers, and
answers ``ErrorResponse(API_SERVER_ERROR)`` for the message kinds it is told are failing. Everything above it
(``Variable.get`` -> ``_get_variable`` -> the ``ExecutionAPISecretsBackend``, which turns any error into "not
found"; ``Variable.keys``, which raises on one) is the installed Airflow's own code.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from elastic_training.operators.failure_history import FailureHistory, RunRecord
from elastic_training.operators.history_store import load_history, record_run

KEY = "elastic_training_failure_history.store-test.pretrain"
T0 = 1_760_000_000.0


class VariableComms:
    """Answers the Task SDK's Variable messages from ``values``; the kinds in ``failing`` get an API error."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.failing: set[str] = set()
        self.sent: list[str] = []

    def send(self, msg: Any) -> Any:
        from airflow.sdk.exceptions import ErrorType
        from airflow.sdk.execution_time.comms import ErrorResponse, VariableKeysResult, VariableResult

        kind = type(msg).__name__
        self.sent.append(kind)
        if kind in self.failing:
            return ErrorResponse(error=ErrorType.API_SERVER_ERROR, detail={"status_code": 503})
        if kind == "GetVariable":
            if msg.key not in self.values:
                return ErrorResponse(error=ErrorType.VARIABLE_NOT_FOUND, detail={"key": msg.key})
            return VariableResult(key=msg.key, value=self.values[msg.key])
        if kind == "GetVariableKeys":
            keys = sorted(k for k in self.values if k.startswith(msg.prefix or ""))
            page = keys[msg.offset : msg.offset + msg.limit]
            return VariableKeysResult(keys=page, total_entries=len(keys))
        if kind == "PutVariable":
            self.values[msg.key] = msg.value
            return None
        raise AssertionError(f"unexpected message {kind}")


@pytest.fixture
def comms() -> Iterator[VariableComms]:
    from airflow.sdk.execution_time.supervisor import set_supervisor_comms

    fake = VariableComms()
    with set_supervisor_comms(fake):
        yield fake


def run(run_id: str) -> RunRecord:
    return RunRecord(run_id=run_id, ended_at=T0, pools=("tpu-v5e-16-a",), slices=1)


def test_a_missing_history_is_absent_and_the_first_run_starts_it(comms: VariableComms) -> None:
    warnings: list[str] = []
    read = load_history(KEY, lambda *a: warnings.append(a[0] % a[1:]))
    assert read.certain and read.absent and read.history == FailureHistory()
    assert "GetVariableKeys" in comms.sent  # "absent" only after the API server said the key is not there
    written = record_run(KEY, run("r1"), lambda *a: warnings.append(a[0] % a[1:]))
    assert written is not None and FailureHistory.parse(comms.values[KEY]) == written
    assert not warnings, warnings


@pytest.mark.parametrize(
    "failing",
    [
        pytest.param({"GetVariable", "GetVariableKeys"}, id="api-server-down"),
        pytest.param({"GetVariable"}, id="listed-but-unreadable"),
    ],
)
def test_a_transient_read_error_leaves_the_stored_history_unchanged(comms: VariableComms, failing: set[str]) -> None:
    stored = FailureHistory().with_run(run("r1")).with_run(run("r2")).render()
    comms.values[KEY] = stored
    comms.failing = failing
    warnings: list[str] = []
    warn = lambda *a: warnings.append(a[0] % a[1:])  # noqa: E731

    read = load_history(KEY, warn)
    assert not read.certain and not read.absent and read.history == FailureHistory()
    assert "could not be read" in read.reason

    assert record_run(KEY, run("r3"), warn) is None
    assert "PutVariable" not in comms.sent
    assert comms.values[KEY] == stored  # both earlier runs kept, byte for byte
    assert any("was not updated with run r3" in w for w in warnings), warnings

    comms.failing = set()  # the API server is back: the next run is added to the whole history
    written = record_run(KEY, run("r4"), warn)
    assert written is not None and [r.run_id for r in written.runs] == ["r1", "r2", "r4"]
