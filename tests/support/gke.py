"""A GKE connection to the local cluster: Google's token endpoint and GKE API stood in, tokens that expire.

The connection is what a Composer environment would use (``gke_cluster`` in a ``kubernetes`` connection's
extra, no kubeconfig); Application Default Credentials are an ``authorized_user`` file whose token URI is
the stand-in, so ``google.auth`` itself fetches and refreshes the tokens. kube-apiserver asks its token webhook
(``UpstreamCluster.add_token_webhook``, as GKE's authenticator) about them: the stand-in accepts a live token as
the Google account (bound to the operators' Role by a RoleBinding, least privilege) and refuses an expired one, so
kube-apiserver answers 401. The cluster endpoint the GKE API gives is the cluster's API fault proxy, so the
connection meets ``cluster.faults``' API faults.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client, config, utils

from elastic_training.local.upstream_cluster import UpstreamCluster
from elastic_training.operators.rbac import ROLE_NAME, rbac_manifests
from tests.support.google_stand_in import GoogleStandIn

PROJECT, LOCATION, CLUSTER = "tpu-project", "us-east5", "tpu-cluster"
CONN_ID = "gke_tpu"
NAMESPACE = "default"
TOKEN_SECONDS = 4.0  # short enough to expire several times during one test


@dataclass(frozen=True)
class GkeConnection:
    cluster: UpstreamCluster
    google: GoogleStandIn
    conn_id: str
    credentials: Path


def bind_google_account(cluster: UpstreamCluster, email: str, namespace: str = NAMESPACE) -> None:
    """The operators' Role (deploy/rbac.yaml) in ``namespace``, bound to the Google account ``email``."""
    admin = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    try:
        rbac = client.RbacAuthorizationV1Api(admin)
        for manifest in rbac_manifests(namespace):
            if manifest["kind"] == "Role":  # the shared cluster may have it from an earlier module: replaced
                try:
                    utils.create_from_dict(admin, manifest, namespace=namespace)
                except utils.FailToCreateError as error:
                    if any(e.status != 409 for e in error.api_exceptions):
                        raise
                    rbac.replace_namespaced_role(ROLE_NAME, namespace, manifest)
        binding = {
            "metadata": {"name": f"{ROLE_NAME}-google"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE_NAME},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": email}],
        }
        try:
            rbac.create_namespaced_role_binding(namespace, binding)
        except client.ApiException as error:
            if error.status != 409:
                raise
            rbac.replace_namespaced_role_binding(binding["metadata"]["name"], namespace, binding)
    finally:
        admin.close()


@dataclass
class _Env:
    saved: dict[str, str | None]

    @classmethod
    def set(cls, values: dict[str, str]) -> _Env:
        saved = {key: os.environ.get(key) for key in values}
        os.environ.update(values)
        return cls(saved)

    def restore(self) -> None:
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def gke_connection(
    cluster: UpstreamCluster, workdir: Path, *, token_seconds: float = TOKEN_SECONDS
) -> Iterator[GkeConnection]:
    """Start the stand-in, trust its tokens, bind its account, and set ADC and the Airflow connection."""
    with GoogleStandIn(
        project=PROJECT,
        location=LOCATION,
        cluster=CLUSTER,
        endpoint=cluster.faults_url.removeprefix("https://"),
        ca_pem=cluster.ca_pem,
        token_seconds=token_seconds,
    ) as google:
        cluster.add_token_webhook(google.review)
        bind_google_account(cluster, google.email)
        credentials = google.write_credentials(workdir / "adc.json")
        extra = {
            "gke_cluster": f"projects/{PROJECT}/locations/{LOCATION}/clusters/{CLUSTER}",
            "gke_api_url": google.url,
            "namespace": NAMESPACE,
        }
        env = _Env.set(
            {
                "GOOGLE_APPLICATION_CREDENTIALS": str(credentials),
                f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps({"conn_type": "kubernetes", "extra": extra}),
            }
        )
        try:
            yield GkeConnection(cluster, google, CONN_ID, credentials)
        finally:
            env.restore()
            cluster.remove_token_webhook(google.review)
