"""Airflow Variables for a task's Task SDK calls without an Airflow stack: a stand-in at the SDK's client boundary.

A task's ``airflow.sdk.Variable.get`` / ``keys`` / ``set`` (Airflow 3.3, ``airflow/sdk/execution_time/context.py``
``_get_variable``, ``_get_variable_keys``, ``_set_variable``, ``_delete_variable``, and the
``ExecutionAPISecretsBackend`` of ``execution_time/secrets/execution_api.py``) send ``GetVariable`` /
``GetVariableKeys`` / ``PutVariable`` / ``DeleteVariable`` through
``task_runner.SUPERVISOR_COMMS``, the seam ``dag.test()`` itself replaces with an in-process one
(``supervisor.set_supervisor_comms``). :class:`VariableComms` answers them as the supervisor relays the execution
API's answers (``request_handlers.handle_get_variable`` and the rest): a ``VariableResult``, a
``VariableKeysResult`` (keys starting with the prefix, sorted, paged as ``GET /variables/keys`` pages them), or an
``ErrorResponse``: ``VARIABLE_NOT_FOUND`` for a missing key; for the message kinds named in ``failing``, what a 5xx
from the API server becomes in a task process: the supervisor answers an error frame and the task's
``CommsDecoder._from_frame`` raises ``AirflowRuntimeError`` with its ``API_SERVER_ERROR``. A delete of a missing
key succeeds, as the execution API's ``DELETE /variables/{key}`` (204) does. Everything above the seam is the
installed Airflow's own code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


class VariableComms:
    """Answers the Task SDK's Variable messages from ``values``; the kinds in ``failing`` get an API error."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.failing: set[str] = set()
        self.sent: list[str] = []

    def send(self, msg: Any) -> Any:
        from airflow.sdk.exceptions import AirflowRuntimeError, ErrorType
        from airflow.sdk.execution_time.comms import ErrorResponse, OKResponse, VariableKeysResult, VariableResult

        kind = type(msg).__name__
        self.sent.append(kind)
        if kind in self.failing:
            raise AirflowRuntimeError(ErrorResponse(error=ErrorType.API_SERVER_ERROR, detail={"status_code": 503}))
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
        if kind == "DeleteVariable":
            self.values.pop(msg.key, None)
            return OKResponse(ok=True)
        raise AssertionError(f"unexpected message {kind}")


@contextlib.contextmanager
def variable_comms() -> Iterator[VariableComms]:
    """A :class:`VariableComms` as the task's ``SUPERVISOR_COMMS`` for the duration."""
    from airflow.sdk.execution_time.supervisor import set_supervisor_comms

    fake = VariableComms()
    with set_supervisor_comms(fake):
        yield fake
