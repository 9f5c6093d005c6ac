"""The local cluster's fault-injection endpoint (``POST /_local/faults/...``, docs/local-cluster.md), called as a
test does: over HTTPS with the cluster's token."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from elastic_training.local.cluster import LocalCluster


def _control(cluster: LocalCluster, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{cluster.url}/_local/faults/{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {cluster.token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30, context=cluster.ssl_context()) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer
