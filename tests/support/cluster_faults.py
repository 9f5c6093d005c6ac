"""The cluster's fault-injection endpoint (``POST /_local/faults/...`` on the API fault proxy,
:mod:`elastic_training.local.faults.server`), called as a test does: over HTTPS with the cluster admin's token."""

from __future__ import annotations

import json
import ssl
import urllib.request
from typing import Any

from elastic_training.local.upstream_cluster import UpstreamCluster


def control(cluster: UpstreamCluster, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` to the fault endpoint's ``path`` as the admin, as ``elastic-training cluster fault`` does."""
    request = urllib.request.Request(
        f"{cluster.faults_url}/_local/faults/{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Authorization": f"Bearer {cluster.control_plane.identities['admin'].token}",
            "Content-Type": "application/json",
        },
    )
    context = ssl.create_default_context(cafile=str(cluster.ca_path))
    with urllib.request.urlopen(request, timeout=30, context=context) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer
