"""The failure-history store (:mod:`operators.history_store`) through the real Task SDK ``Variable`` calls.

The fault is injected at the SDK's client boundary: ``task_runner.SUPERVISOR_COMMS`` (what a task's
``Variable.get`` / ``keys`` / ``set`` / ``delete`` send their messages through, and what ``dag.test()`` itself
replaces with an in-process one) is a stand-in that answers from a dict as the supervisor relays the execution
API's answers, and fails the message kinds it is told are failing as a task process sees a 5xx. Everything above
it (``Variable.get`` -> ``_get_variable`` -> the ``ExecutionAPISecretsBackend``, which turns any error into "not
found"; ``Variable.keys``, which raises on one) is the installed Airflow's own code. Two real task processes
writing at once: tests/operators/test_history_concurrency.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from elastic_training.operators.failure_history import MAX_RUNS, MAX_TEXT, FailureHistory, RunRecord
from elastic_training.operators.history_store import (
    MAX_KEY,
    MAX_RECORDS_READ,
    corrupt_key,
    history_key,
    is_run_key,
    load_history,
    parse_record,
    record_run,
    record_run_id,
    render_record,
    run_key,
    runs_prefix,
    split_record_run_id,
)
from tests.support.variable_comms import VariableComms, variable_comms

KEY = "elastic_training_failure_history.store-test.pretrain"
T0 = 1_760_000_000.0


@pytest.fixture
def comms() -> Iterator[VariableComms]:
    with variable_comms() as fake:
        yield fake


def run(run_id: str, at: float = T0) -> RunRecord:
    return RunRecord(run_id=run_id, ended_at=at, pools=("tpu-v5e-16-a",), slices=1)


def noted(warnings: list[str]) -> Any:
    return lambda *a: warnings.append(a[0] % a[1:])


def stored_runs(comms: VariableComms, key: str = KEY) -> list[str]:
    """The run ids of the sound per-run records under ``key``, oldest first."""
    records = [parse_record(v) for k, v in comms.values.items() if is_run_key(key, k) and "<script>" not in v]
    return [r.run_id for r in sorted(records, key=lambda r: (r.ended_at, r.run_id))]


def test_a_missing_history_is_absent_and_the_first_run_writes_its_own_variable(comms: VariableComms) -> None:
    warnings: list[str] = []
    read = load_history(KEY, noted(warnings))
    assert read.certain and read.absent and read.history == FailureHistory()
    assert "GetVariableKeys" in comms.sent  # "absent" only after the API server listed no key
    written = record_run(KEY, run("r1"), noted(warnings))
    assert written.history is not None and [r.run_id for r in written.history.runs] == ["r1"]
    assert list(comms.values) == [run_key(KEY, "r1")] and KEY not in comms.values
    assert parse_record(comms.values[run_key(KEY, "r1")]) == run("r1")
    assert not warnings and not written.notes, (warnings, written.notes)


def seeded(comms: VariableComms) -> dict[str, str]:
    """An old single value (r1, r2) beside a per-run record (r3): what an upgrade leaves."""
    comms.values[KEY] = FailureHistory((run("r1", T0), run("r2", T0 + 1))).render()
    comms.values[run_key(KEY, "r3")] = render_record(run("r3", T0 + 2))
    return dict(comms.values)


@pytest.mark.parametrize(
    "failing",
    [
        pytest.param({"GetVariable", "GetVariableKeys"}, id="api-server-down"),
        pytest.param({"GetVariable"}, id="listed-but-unreadable"),
    ],
)
def test_a_transient_read_error_leaves_the_stored_history_unchanged(comms: VariableComms, failing: set[str]) -> None:
    before = seeded(comms)
    comms.failing = failing
    warnings: list[str] = []

    read = load_history(KEY, noted(warnings))
    assert not read.certain and not read.absent and read.history == FailureHistory()
    assert "could not be read" in read.reason and read.notes
    # A value listed yet unreadable may stay so (a Fernet key gone): the note says how to unblock the history.
    assert ("delete it under Admin > Variables" in read.reason) == ("GetVariableKeys" not in failing), read.reason

    written = record_run(KEY, run("r4", T0 + 3), noted(warnings))
    assert written.history is None
    assert "PutVariable" not in comms.sent and "DeleteVariable" not in comms.sent
    assert comms.values == before  # every stored value kept, byte for byte
    assert any("was not updated with run r4" in w for w in warnings), warnings
    assert any("run r4 was not recorded" in n and "could not be read" in n for n in written.notes), written.notes

    comms.failing = set()  # the API server is back: the next run is added to the whole history
    written = record_run(KEY, run("r5", T0 + 4), noted(warnings))
    assert written.history is not None and [r.run_id for r in written.history.runs] == ["r1", "r2", "r3", "r5"]


def test_a_record_pruned_between_listing_and_reading_is_gone_not_unreadable(comms: VariableComms) -> None:
    comms.values[run_key(KEY, "old")] = render_record(run("old", T0))
    comms.values[run_key(KEY, "new")] = render_record(run("new", T0 + 1))
    original = comms.send

    def concurrent_prune(msg: Any) -> Any:  # another writer deletes "old" right after this reader listed it
        if type(msg).__name__ == "GetVariable" and msg.key == run_key(KEY, "old"):
            comms.values.pop(msg.key, None)
        return original(msg)

    comms.send = concurrent_prune  # type: ignore[method-assign]
    read = load_history(KEY, noted([]))
    assert read.certain and [r.run_id for r in read.history.runs] == ["new"]


def test_the_old_single_value_is_read_moved_to_per_run_variables_then_removed(comms: VariableComms) -> None:
    seeded(comms)
    read = load_history(KEY, noted([]))
    assert [r.run_id for r in read.history.runs] == ["r1", "r2", "r3"]
    assert KEY in comms.values  # reading moves nothing

    written = record_run(KEY, run("r4", T0 + 3), noted([]))
    assert written.history is not None and [r.run_id for r in written.history.runs] == ["r1", "r2", "r3", "r4"]
    assert KEY not in comms.values and stored_runs(comms) == ["r1", "r2", "r3", "r4"]
    assert any("was moved to per-run Variables (2 run(s) copied)" in n for n in written.notes), written.notes


def test_the_old_single_value_is_kept_while_a_copy_of_its_runs_fails(comms: VariableComms) -> None:
    before = seeded(comms)
    original = comms.send

    def refuse_r1(msg: Any) -> Any:
        if type(msg).__name__ == "PutVariable" and msg.key == run_key(KEY, "r1"):
            raise RuntimeError("the API server went away")
        return original(msg)

    comms.send = refuse_r1  # type: ignore[method-assign]
    written = record_run(KEY, run("r4", T0 + 3), noted([]))
    assert written.history is not None and comms.values[KEY] == before[KEY]
    assert any("is kept: moving it failed" in n for n in written.notes), written.notes
    comms.send = original  # type: ignore[method-assign]
    assert [r.run_id for r in load_history(KEY, noted([])).history.runs] == ["r1", "r2", "r3", "r4"]
    record_run(KEY, run("r5", T0 + 4), noted([]))  # the next writer finishes the move
    assert KEY not in comms.values and stored_runs(comms) == ["r1", "r2", "r3", "r4", "r5"]


def test_an_old_value_that_does_not_parse_is_copied_aside_before_it_is_removed(comms: VariableComms) -> None:
    comms.values[KEY] = "<script>x</script>{"
    warnings: list[str] = []
    read = load_history(KEY, noted(warnings))
    assert read.certain and read.history == FailureHistory() and "does not parse" in read.notes[0]
    assert comms.values[KEY] == "<script>x</script>{"  # reading moves nothing

    written = record_run(KEY, run("r1"), noted(warnings))
    assert written.history is not None and [r.run_id for r in written.history.runs] == ["r1"]
    [copy] = [k for k in comms.values if ".corrupt-" in k]
    assert copy.startswith(f"{KEY}.corrupt-") and comms.values[copy] == "<script>x</script>{"
    assert KEY not in comms.values and any(copy in n for n in written.notes), written.notes


def test_a_run_whose_own_record_is_garbage_keeps_it_aside_before_rewriting_it(comms: VariableComms) -> None:
    # A retry of run r1 finds its own Variable edited into garbage: copied to .corrupt-*, then rewritten; where the
    # copy cannot be made, the garbage stays as it is and the run is not recorded (nothing is lost either way).
    own = run_key(KEY, "r1")
    comms.values[own] = "<script>x</script>{"
    original = comms.send

    def copy_fails(msg: Any) -> Any:
        if type(msg).__name__ == "PutVariable" and ".corrupt-" in msg.key:
            comms.failing = {"PutVariable"}
            try:
                return original(msg)
            finally:
                comms.failing = set()
        return original(msg)

    comms.send = copy_fails  # type: ignore[method-assign]
    refused = record_run(KEY, run("r1"), noted([]))
    assert refused.history is None and comms.values[own] == "<script>x</script>{"
    assert any("its own Variable holds a value not kept aside" in n for n in refused.notes), refused.notes
    comms.send = original  # type: ignore[method-assign]
    written = record_run(KEY, run("r1"), noted([]))
    assert written.history is not None and stored_runs(comms) == ["r1"]
    [copy] = [k for k in comms.values if ".corrupt-" in k]
    assert comms.values[copy] == "<script>x</script>{" and parse_record(comms.values[own]) == run("r1")


def test_a_bad_record_is_left_out_named_and_never_rewritten_or_pruned(comms: VariableComms) -> None:
    hostile = {"run_id": "bad", "ended_at": T0, "pools": ["<script>x</script>"], "mean_step_seconds": 1e300}
    bad = run_key(KEY, "bad")
    comms.values[bad] = json.dumps({"version": 1, "run": hostile})
    comms.values[run_key(KEY, "r1")] = render_record(run("r1"))
    warnings: list[str] = []
    read = load_history(KEY, noted(warnings))
    assert [r.run_id for r in read.history.runs] == ["r1"] and len(read.dropped) == 1
    assert bad in read.notes[0] and "not a Kubernetes label value" in read.notes[0]
    for n in range(MAX_RUNS + 2):  # far past the bound: the bad record, of unknown age, stays
        written = record_run(KEY, run(f"n{n}", T0 + 10 + n), noted(warnings))
        assert written.history is not None and written.notes and bad in written.notes[0]
    assert comms.values[bad] == json.dumps({"version": 1, "run": hostile})
    assert stored_runs(comms) == [f"n{n}" for n in range(2, MAX_RUNS + 2)]


def test_the_newest_writer_prunes_the_oldest_past_the_bound_never_its_own(comms: VariableComms) -> None:
    for n in range(MAX_RUNS):
        comms.values[run_key(KEY, f"n{n}")] = render_record(run(f"n{n}", T0 + 100 + n))
    written = record_run(KEY, run("newest", T0 + 1000), noted([]))
    assert written.history is not None and len(written.history.runs) == MAX_RUNS
    assert stored_runs(comms) == [f"n{n}" for n in range(1, MAX_RUNS)] + ["newest"]
    # A writer whose clock is behind: its own record is the oldest, kept past the bound; the next writer prunes it.
    written = record_run(KEY, run("skewed", T0), noted([]))
    assert written.history is not None and "skewed" not in [r.run_id for r in written.history.runs]
    assert stored_runs(comms) == ["skewed"] + [f"n{n}" for n in range(1, MAX_RUNS)] + ["newest"]
    record_run(KEY, run("next", T0 + 2000), noted([]))
    assert stored_runs(comms) == [f"n{n}" for n in range(2, MAX_RUNS)] + ["newest", "next"]


def test_a_history_flooded_with_records_is_read_in_part_said_and_pruned_back(comms: VariableComms) -> None:
    extra = 5
    for n in range(MAX_RECORDS_READ + extra):
        comms.values[run_key(KEY, f"n{n:04d}")] = render_record(run(f"n{n:04d}", T0 + n))
    read = load_history(KEY, noted([]))
    assert read.certain and len(read.history.runs) == MAX_RUNS
    assert f"{extra} stored record(s) past the first {MAX_RECORDS_READ} not read" in read.notes[0]
    assert comms.sent.count("GetVariable") == MAX_RECORDS_READ  # bounded, whatever the store holds
    record_run(KEY, run("newest", T0 + 10_000), noted([]))
    # Only records read and older than the newest 50 read were pruned: the unread (newest) ones stayed.
    assert len(stored_runs(comms)) == MAX_RUNS + extra
    record_run(KEY, run("next", T0 + 10_001), noted([]))
    assert stored_runs(comms)[-2:] == ["newest", "next"] and len(stored_runs(comms)) == MAX_RUNS


def test_a_retry_of_the_same_run_rewrites_its_own_record(comms: VariableComms) -> None:
    record_run(KEY, run("r1"), noted([]))
    retried = RunRecord(run_id="r1", ended_at=T0 + 5, succeeded=False)
    written = record_run(KEY, retried, noted([]))
    assert written.history is not None and written.history.runs == (retried,)
    assert list(comms.values) == [run_key(KEY, "r1")]


def test_writers_interleaved_at_the_worst_moment_both_recorded(comms: VariableComms) -> None:
    """Both read before either writes (what the single value lost an entry to): each writes its own key."""
    comms.values[KEY] = FailureHistory((run("r0", T0),)).render()
    original = comms.send
    second: list[Any] = []
    started: list[bool] = []

    def other_writer_between_read_and_write(msg: Any) -> Any:
        if type(msg).__name__ == "PutVariable" and not started:
            started.append(True)
            second.append(record_run(KEY, run("b", T0 + 2), noted([])))  # B reads, writes, moves, prunes
        return original(msg)

    comms.send = other_writer_between_read_and_write  # type: ignore[method-assign]
    first = record_run(KEY, run("a", T0 + 1), noted([]))
    assert first.history is not None and second[0].history is not None
    assert stored_runs(comms) == ["r0", "a", "b"] and KEY not in comms.values
    assert not first.notes and not second[0].notes[1:], (first.notes, second[0].notes)


def test_keys_fit_and_never_mix_histories() -> None:
    assert run_key(KEY, "scheduled__2026-12-04T00:00:00+00:00").startswith(f"{KEY}.r.scheduled__2026-12-04T00_00")
    assert run_key(KEY, "a/b") != run_key(KEY, "a_b")  # sanitized alike, hashed apart
    long_a, long_b = "k" * 250, "k" * 249 + "j"
    assert len(run_key(long_a, "r" * 250)) <= MAX_KEY and runs_prefix(long_a) != runs_prefix(long_b)
    assert is_run_key(long_a, run_key(long_a, "x")) and not is_run_key(long_b, run_key(long_a, "x"))
    # A history named "<KEY>.r" is not KEY's: its records' part has a dot after KEY's runs prefix.
    assert not is_run_key(KEY, run_key(f"{KEY}.r", "x")) and not is_run_key(KEY, corrupt_key(KEY))
    assert not is_run_key(KEY, run_key(history_key("store-test", "pretrain", 0), "x"))


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


def test_two_task_instances_of_one_run_id_sharing_a_key_are_recorded_apart(comms: VariableComms) -> None:
    # Two DAGs on one schedule (the same scheduled__ run id), and two tasks of one DAG run, naming one
    # failure_history_key: each keeps its record; in its own history a task keeps Airflow's run id.
    shared = "elastic_training_failure_history.team-shared"
    same = "scheduled__2026-12-05T00:00:00+00:00"
    writers = [("nightly", "pretrain", -1), ("drill", "pretrain", -1), ("nightly", "pretrain_b", -1)]
    writers.append(("nightly", "pretrain", 3))
    ids = [record_run_id(same, dag_id=d, task_id=t, map_index=m, shared=True) for d, t, m in writers]
    for number, run_id in enumerate(ids):
        assert record_run(shared, run(run_id, T0 + number), noted([])).history
    assert stored_runs(comms, shared) == [
        "nightly/pretrain/" + same,
        "drill/pretrain/" + same,
        "nightly/pretrain_b/" + same,
        "nightly/pretrain[3]/" + same,
    ]
    assert [split_record_run_id(i) for i in ids[:2]] == [("nightly", same), ("drill", same)]
    assert record_run_id(same, dag_id="nightly", task_id="pretrain", shared=False) == same
    assert split_record_run_id(same) == (None, same)
    # Ids longer than a record holds are cut with a hash of the whole: two such writers still differ.
    long = [record_run_id("r" * 240, dag_id=d, task_id="t", shared=True) for d in ("dag-a" * 9, "dag-b" * 9)]
    assert len(set(long)) == 2 and all(len(i) == MAX_TEXT for i in long)
    assert all(split_record_run_id(i) == (None, i) for i in long)


def test_mapped_instances_recorded_apart(comms: VariableComms) -> None:
    for index in (0, 1):
        assert record_run(history_key("nightly", "pretrain", index), run(f"run-{index}"), noted([])).history
    assert record_run(history_key("nightly", "pretrain", 0), run("run-0-again", T0 + 1), noted([])).history
    unmapped = history_key("nightly", "pretrain")
    assert stored_runs(comms, history_key("nightly", "pretrain", 0)) == ["run-0", "run-0-again"]
    assert stored_runs(comms, history_key("nightly", "pretrain", 1)) == ["run-1"]
    assert load_history(unmapped, noted([])).absent  # the unmapped key's prefix lists them, and takes none
