"""`TimeoutApiClient`: a request that sets no timeout of its own ends after the default (or a watch's
server-side timeout plus the margin) instead of waiting forever on a server that never answers, as on a
half-open connection; one that sets its own keeps it. Driven over HTTP against a TCP server that accepts
and reads requests but never answers, through the async hook's own connection handling."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import pytest

from elastic_training.local.kubeconfig import render_kubeconfig
from elastic_training.operators.api_client import TimeoutApiClient, request_timeout
from elastic_training.operators.constants import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION
from elastic_training.operators.hooks import AsyncJobSetHook

GIVE_UP = 60.0  # the test's own bound: far beyond every timeout under test


@pytest.mark.parametrize(
    ("server_timeout", "expected"),
    [(None, 60.0), (10, 60.0), (55, 60.0), (56, 61.0), (300, 305.0)],
)
def test_request_timeout(server_timeout: float | None, expected: float) -> None:
    assert request_timeout(server_timeout) == expected


@pytest.fixture
async def silent_server() -> AsyncIterator[str]:
    """``http://127.0.0.1:<port>``: accepts connections and reads whatever comes, never answers."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        while await reader.read(65536):
            pass

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


def _hook(monkeypatch: pytest.MonkeyPatch, server: str) -> AsyncJobSetHook:
    extra = {"kube_config": render_kubeconfig(server, "TOKEN")}
    monkeypatch.setenv("AIRFLOW_CONN_K8S_SILENT", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    return AsyncJobSetHook(conn_id="k8s_silent")


async def _seconds_until_timeout(call: object) -> float:
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(call, timeout=GIVE_UP)  # type: ignore[arg-type]
    elapsed = time.monotonic() - start
    assert elapsed < GIVE_UP - 1, "the request did not time out by itself"
    return elapsed


async def test_the_hooks_client_times_out_a_request_the_server_never_answers(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = _hook(monkeypatch, silent_server)
    hook.request_timeout = 0.5
    try:
        async with hook.api() as api:
            assert isinstance(api, TimeoutApiClient)
        assert await _seconds_until_timeout(hook.get_jobset("run-abcdef", "default")) >= 0.5
    finally:
        await hook.close()


async def test_a_watch_waits_for_its_server_side_timeout_and_the_margin(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes_asyncio import client as async_k8s

    hook = _hook(monkeypatch, silent_server)
    hook.request_timeout = 0.5
    try:
        async with hook.api() as api:
            watch = async_k8s.CustomObjectsApi(api).list_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, watch=True, timeout_seconds=1
            )
            assert await _seconds_until_timeout(watch) >= request_timeout(1, default=0.5)
    finally:
        await hook.close()


async def test_a_request_that_sets_its_own_timeout_keeps_it(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes_asyncio import client as async_k8s

    hook = _hook(monkeypatch, silent_server)  # the default 60 s would outlast the test's bound
    try:
        async with hook.api() as api:
            call = async_k8s.CustomObjectsApi(api).get_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, "default", JOBSET_PLURAL, "run-abcdef", _request_timeout=0.5
            )
            assert await _seconds_until_timeout(call) >= 0.5
    finally:
        await hook.close()
