"""The failure-history store (:mod:`operators.history_store`) through the real Task SDK ``Variable`` calls.

The fault is injected at the SDK's client boundary: ``task_runner.SUPERVISOR_COMMS`` (what a task's
``Variable.get`` / ``keys`` / ``set`` send their messages through, and what ``dag.test()`` itself replaces with an
in-process one) is a stand-in that answers from a dict as the supervisor relays the execution API's answers, and
answers ``ErrorResponse(API_SERVER_ERROR)`` for the message kinds it is told are failing. Everything above it
(``Variable.get`` -> ``_get_variable`` -> the ``ExecutionAPISecretsBackend``, which turns any error into "not
found"; ``Variable.keys``, which raises on one) is the installed Airflow's own code.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from elastic_training.operators.failure_history import FailureHistory, RunRecord
from elastic_training.operators.history_store import corrupt_key, history_key, load_history, record_run
from tests.support.variable_comms import VariableComms, variable_comms

KEY = "elastic_training_failure_history.store-test.pretrain"
T0 = 1_760_000_000.0


@pytest.fixture
def comms() -> Iterator[VariableComms]:
    with variable_comms() as fake:
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


def test_garbage_is_copied_aside_before_the_history_is_rewritten(comms: VariableComms) -> None:
    comms.values[KEY] = "<script>x</script>{"
    warnings: list[str] = []
    read = load_history(KEY, lambda *a: warnings.append(a[0] % a[1:]))
    assert read.certain and read.history == FailureHistory() and "does not parse" in read.reason
    assert comms.values[KEY] == "<script>x</script>{"  # reading moves nothing

    written = record_run(KEY, run("r1"), lambda *a: warnings.append(a[0] % a[1:]))
    assert written is not None and [r.run_id for r in written.runs] == ["r1"]
    [copy] = [k for k in comms.values if k != KEY]
    assert copy.startswith(f"{KEY}.corrupt-") and comms.values[copy] == "<script>x</script>{"
    assert any(copy in w for w in warnings), warnings


def test_a_bad_run_is_left_out_and_the_value_kept_aside_the_rest_kept(comms: VariableComms) -> None:
    good = json.loads(FailureHistory().with_run(run("r1")).render())["runs"][0]
    hostile = {"run_id": "bad", "ended_at": T0, "pools": ["<script>x</script>"], "mean_step_seconds": 1e300}
    comms.values[KEY] = stored = json.dumps({"version": 1, "runs": [good, hostile]})
    warnings: list[str] = []
    read = load_history(KEY, lambda *a: warnings.append(a[0] % a[1:]))
    assert [r.run_id for r in read.history.runs] == ["r1"] and len(read.dropped) == 1
    assert any("runs[1] (run 'bad')" in w for w in warnings), warnings

    written = record_run(KEY, run("r2"), lambda *a: warnings.append(a[0] % a[1:]))
    assert written is not None and [r.run_id for r in written.runs] == ["r1", "r2"]
    [copy] = [k for k in comms.values if k != KEY]
    assert comms.values[copy] == stored


def test_no_rewrite_when_the_copy_aside_fails(comms: VariableComms) -> None:
    comms.values[KEY] = "garbage"
    original = comms.send

    def refuse_copies(msg: Any) -> Any:
        if type(msg).__name__ == "PutVariable" and msg.key != KEY:
            raise RuntimeError("the API server went away")
        return original(msg)

    comms.send = refuse_copies  # type: ignore[method-assign]
    warnings: list[str] = []
    assert record_run(KEY, run("r1"), lambda *a: warnings.append(a[0] % a[1:])) is None
    assert comms.values == {KEY: "garbage"}
    assert any("could not be copied aside" in w for w in warnings), warnings


def test_a_copy_name_fits_a_variable_key() -> None:
    long = "k" * 250
    assert len(corrupt_key(long)) <= 250 and ".corrupt-" in corrupt_key(long)


def test_mapped_instances_have_keys_of_their_own_an_unmapped_task_keeps_its_key() -> None:
    assert history_key("nightly", "pretrain") == "elastic_training_failure_history.nightly.pretrain"
    assert history_key("nightly", "pretrain", -1) == history_key("nightly", "pretrain")
    keys = {history_key("nightly", "pretrain", i) for i in range(3)}
    assert keys == {f"elastic_training_failure_history.nightly.pretrain.m{i}" for i in range(3)}
    assert history_key("nightly", "pretrain", 0) != history_key("nightly", "pretrain")
    long = history_key("d" * 200, "t" * 200, 12345)
    assert len(long) <= 250 and long.endswith(".m12345")


def test_mapped_instances_recorded_apart(comms: VariableComms) -> None:
    warn = lambda *a: None  # noqa: E731
    for index in (0, 1):
        assert record_run(history_key("nightly", "pretrain", index), run(f"run-{index}"), warn) is not None
    assert record_run(history_key("nightly", "pretrain", 0), run("run-0-again"), warn) is not None
    stored = {k: [r.run_id for r in FailureHistory.parse(v).runs] for k, v in comms.values.items()}
    assert stored == {
        "elastic_training_failure_history.nightly.pretrain.m0": ["run-0", "run-0-again"],
        "elastic_training_failure_history.nightly.pretrain.m1": ["run-1"],
    }
