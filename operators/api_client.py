"""A kubernetes_asyncio `ApiClient` that puts a client-side timeout on every request that sets none.

kubernetes_asyncio's generated API methods pass ``_request_timeout=None`` unless the caller sets one, and
aiohttp then waits forever: on a half-open connection (a load balancer that dropped it after a 429 or a
500) an awaited call never returns and a trigger never retries. The cncf-kubernetes provider fixes this in
a private class of its own (apache/airflow ``providers/cncf/kubernetes/src/airflow/providers/cncf/kubernetes/
kube_client.py``, ``_TimeoutAsyncK8sApiClient``: 60 s, or a watch's server-side timeout plus 5 s); this is
the same behaviour on kubernetes_asyncio's public ``ApiClient.call_api``, so no private name is imported.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kubernetes_asyncio import client as async_k8s

REQUEST_TIMEOUT_SECONDS = 60.0  # a request that sets no timeout of its own (the provider's API_TIMEOUT)
SERVER_TIMEOUT_MARGIN_SECONDS = 5.0  # beyond a watch's server-side ``timeoutSeconds``, for its last event


def request_timeout(
    server_timeout: float | None,
    default: float = REQUEST_TIMEOUT_SECONDS,
    margin: float = SERVER_TIMEOUT_MARGIN_SECONDS,
) -> float:
    """The client-side timeout of a request: `default`, or longer when the server may take longer."""
    if server_timeout is not None and server_timeout + margin > default:
        return server_timeout + margin
    return default


def _server_timeout(query_params: Iterable[tuple[str, Any]] | None) -> float | None:
    """The ``timeoutSeconds`` a list or watch asks the server for, if any."""
    for key, value in query_params or ():
        if key == "timeoutSeconds" and value is not None:
            return float(value)
    return None


class TimeoutApiClient(async_k8s.ApiClient):
    """`kubernetes_asyncio.client.ApiClient` whose requests time out after `default_timeout` unless they say."""

    def __init__(
        self, configuration: async_k8s.Configuration | None = None, *, default_timeout: float = REQUEST_TIMEOUT_SECONDS
    ) -> None:
        super().__init__(configuration=configuration)
        self.default_timeout = default_timeout

    async def call_api(self, *args: Any, **kwargs: Any) -> Any:
        """`ApiClient.call_api`, with ``_request_timeout`` filled in when the caller left it ``None``."""
        if kwargs.get("_request_timeout") is None:
            # call_api(resource_path, method, path_params, query_params, ...), as the generated code calls it.
            query = kwargs.get("query_params", args[3] if len(args) > 3 else None)
            kwargs["_request_timeout"] = request_timeout(_server_timeout(query), self.default_timeout)
        return await super().call_api(*args, **kwargs)
