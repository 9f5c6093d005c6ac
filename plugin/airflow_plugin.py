"""The ``AirflowPlugin`` (entry point ``airflow.plugins``): the API app, the UI entries and the operator links.

Airflow 3.3's plugin interface (``airflow/plugins_manager.py``, ``api_fastapi/app.py::init_plugins``):
``fastapi_apps`` are mounted on the API server under their ``url_prefix``; ``external_views`` become
iframes in the UI. ``{DAG_ID}`` and ``{RUN_ID}`` in the ``href`` of a ``dag_run`` view are filled in
by the UI, and a ``nav`` view is an entry of the navigation bar. Both pages are served by the app, so
they share the UI's session cookie (the iframe is same-origin).
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from elastic_training.operators.links import VIEW_URL_ROUTE, ElasticTrainingViewLink, GkeLogsLink, GkeWorkloadLink
from elastic_training.plugin.app import URL_PREFIX, create_app


class ElasticTrainingPlugin(AirflowPlugin):
    """Elastic training: recovery timelines, budgets, checkpoints, goodput and advice per run."""

    # AirflowPlugin's interface is mutable class-level lists; the plugins manager edits them in place.
    name = "elastic_training"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "Elastic training"}]  # noqa: RUF012
    external_views = [  # noqa: RUF012
        {
            "name": "Elastic training",
            "href": f"{URL_PREFIX}/ui/run?dag_id={{DAG_ID}}&run_id={{RUN_ID}}",
            "destination": "dag_run",
            "url_route": VIEW_URL_ROUTE,
        },
        {
            "name": "Elastic training runs",
            "href": f"{URL_PREFIX}/ui/",
            "destination": "nav",
            "category": "browse",
            "url_route": "elastic-training-runs",
        },
    ]
    operator_extra_links = [ElasticTrainingViewLink(), GkeWorkloadLink(), GkeLogsLink()]  # noqa: RUF012
