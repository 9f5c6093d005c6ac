"""The run state kept in the task state store: pure (the plugin reads it without the Task SDK), and it round-trips."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace
from typing import Any, cast

import pytest

from elastic_training.operators.run_state import STATE_KEY, RunState, StateRefused


class _Store(dict[str, Any]):
    def set(self, key: str, value: Any) -> None:
        self[key] = value


def test_run_state_imports_no_airflow() -> None:
    code = (
        "import sys, elastic_training.operators.run_state;"
        "assert not any(m == 'airflow' or m.startswith('airflow.') for m in sys.modules), 'airflow imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_saved_state_loads_back() -> None:
    store = _Store()
    ti = SimpleNamespace(dag_id="d", task_id="t", run_id="r", map_index=None)
    context = cast(Any, {"ti": ti, "task_state_store": store})
    run = RunState.load(context)
    assert (run.map_index, run.full_restarts, run.escalations) == (-1, 0, [])
    run.jobset_name, run.jobset_uid, run.full_restarts, run.budget_base = "run-a", "u-1", 2, 1
    run.escalations.append({"reason": "stalled"})
    run.close_incarnation()
    run.save(context)
    again = RunState.load(context)
    assert store[STATE_KEY]["full_restarts"] == 2 and again.budget_used == 1
    assert [i.jobset_name for i in again.incarnations()] == ["run-a"] and again.escalations == [{"reason": "stalled"}]


class _Refusing:
    """A store whose writes fail as the Task SDK's client raises an execution API answer (``.response``)."""

    def __init__(self, status: int) -> None:
        self.status = status

    def set(self, key: str, value: Any) -> None:
        error = RuntimeError("Server returned error")
        error.response = SimpleNamespace(status_code=self.status)  # type: ignore[attr-defined]
        raise error


def test_a_refused_write_says_the_try_is_gone_and_other_errors_pass_unchanged() -> None:
    ti = SimpleNamespace(dag_id="d", task_id="t", run_id="r", map_index=2)
    gone = cast(Any, {"ti": ti, "task_state_store": _Refusing(404)})
    with pytest.raises(StateRefused, match=r"'elastic_run' of d\.t \(run r, map index 2\).*cleared or retried"):
        RunState.load(cast(Any, {"ti": ti})).save(gone)
    broken = cast(Any, {"ti": ti, "task_state_store": _Refusing(500)})
    with pytest.raises(RuntimeError, match=r"^Server returned error$") as raised:
        RunState.load(cast(Any, {"ti": ti})).save(broken)
    assert type(raised.value) is RuntimeError  # not a refusal: the store's own error, as it was
