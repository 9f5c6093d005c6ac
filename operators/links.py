"""Operator extra links of ``ElasticJobSetOperator``: the run's "Elastic training" view, and for ``gke`` runs
the Cloud Console workload page and its logs.

Airflow 3 computes each link on the worker when the task finishes and keeps it in XCom under
``_link_<class name>`` (``airflow.sdk.execution_time.task_runner.finalize``); the API server only reads
it back. The classes are registered by the plugin (``plugin.airflow_plugin``) so serialized DAGs name
them. The Console URLs follow the ones xpk prints for a JobSet (``/kubernetes/service/<location>/
<cluster>/<namespace>/<name>/details``) and a Logs Explorer query on the JobSet's pods; the project,
location and cluster come from the ``[elastic_training]`` Airflow config section
(``gke_project``, ``gke_location``, ``gke_cluster``), since neither the JobSet nor its connection names
them. A link that does not apply (a ``local`` run) is the empty string, which the UI leaves out.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

from elastic_training.operators import config

VIEW_URL_ROUTE = "elastic-training"
CONSOLE = "https://console.cloud.google.com"
CONFIG_SECTION = config.SECTION


def _base_url() -> str:
    from airflow.configuration import conf

    return str(conf.get("api", "base_url", fallback="") or "").rstrip("/")


def _gke(option: config.Option) -> str:
    return config.get_option(option)


def view_url(dag_id: str, run_id: str) -> str:
    """The Airflow UI page of a DAG run with the plugin's "Elastic training" tab open."""
    return f"{_base_url()}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/plugin/{VIEW_URL_ROUTE}"


def console_workload_url(name: str, namespace: str, *, project: str, location: str, cluster: str) -> str:
    """The Cloud Console page of a JobSet (the form xpk prints); the workloads list when a part is unknown."""
    if not (project and location and cluster):
        suffix = f"?project={quote(project, safe='')}" if project else ""
        return f"{CONSOLE}/kubernetes/workload/overview{suffix}"
    parts = "/".join(quote(p, safe="") for p in (location, cluster, namespace, name))
    return f"{CONSOLE}/kubernetes/service/{parts}/details?project={quote(project, safe='')}"


def console_logs_url(name: str, namespace: str, *, project: str, location: str, cluster: str) -> str:
    """Logs Explorer on every container of the JobSet's pods (their names start with the JobSet's)."""
    clauses = ['resource.type="k8s_container"', f'resource.labels.namespace_name="{namespace}"']
    if project:
        clauses.append(f'resource.labels.project_id="{project}"')
    if location:
        clauses.append(f'resource.labels.location="{location}"')
    if cluster:
        clauses.append(f'resource.labels.cluster_name="{cluster}"')
    clauses.append(f'resource.labels.pod_name:"{name}-"')
    query = quote("\n".join(clauses), safe="")
    suffix = f"?project={quote(project, safe='')}" if project else ""
    return f"{CONSOLE}/logs/query;query={query};duration=P7D{suffix}"


def _jobset_name(ti_key: Any) -> str | None:
    from airflow.sdk.bases.xcom import BaseXCom

    value = BaseXCom.get_value(ti_key=ti_key, key="jobset_name")
    return str(value) if value else None


class ElasticTrainingViewLink(BaseOperatorLink):
    """The run's "Elastic training" view in the Airflow UI."""

    name = "Elastic training"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return view_url(ti_key.dag_id, ti_key.run_id)


class GkeWorkloadLink(BaseOperatorLink):
    """The JobSet in the Cloud Console (``gke`` runs only)."""

    name = "GKE workload"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        name = _jobset_name(ti_key) if getattr(operator, "runtime", None) == "gke" else None
        if not name:
            return ""
        return console_workload_url(
            name,
            str(operator.namespace),
            project=_gke(config.GKE_PROJECT),
            location=_gke(config.GKE_LOCATION),
            cluster=_gke(config.GKE_CLUSTER),
        )


class GkeLogsLink(BaseOperatorLink):
    """The JobSet's container logs in Logs Explorer (``gke`` runs only)."""

    name = "GKE logs"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        name = _jobset_name(ti_key) if getattr(operator, "runtime", None) == "gke" else None
        if not name:
            return ""
        return console_logs_url(
            name,
            str(operator.namespace),
            project=_gke(config.GKE_PROJECT),
            location=_gke(config.GKE_LOCATION),
            cluster=_gke(config.GKE_CLUSTER),
        )
