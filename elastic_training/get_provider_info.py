"""The provider metadata Airflow reads through the ``apache_airflow_provider`` entry point.

Airflow's providers manager calls `get_provider_info` in every component (``airflow/providers_manager.py``,
checked against ``airflow/provider_info.schema.json``), as it does for the cncf-kubernetes provider's
``get_provider_info.py`` and astronomer-cosmos's: ``airflow providers list`` shows the distribution and its
version, and ``airflow config list`` the ``[elastic_training]`` section with each option's default. It imports
nothing heavy: the options come from ``elastic_training.operators.config``, the one place their defaults live.
"""

from __future__ import annotations

from typing import Any

from elastic_training import __version__
from elastic_training.operators.config import provider_config
from elastic_training.operators.gke_connection import connection_type

PACKAGE_NAME = "elastic-training"
INTEGRATION = "Elastic training"


def get_provider_info() -> dict[str, Any]:
    """The provider's metadata: name, version, modules, connection type, operator links, config section, plugin."""
    return {
        "package-name": PACKAGE_NAME,
        "name": INTEGRATION,
        "description": (
            "Operators that launch, watch (deferrable) and recover elastic MaxText JobSets "
            "(jobset.x-k8s.io) on GKE, with Orbax checkpoint validation between stages."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://jobset.sigs.k8s.io/",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "elastic_training.operators.elastic_operator",
                    "elastic_training.operators.jobset_operator",
                    "elastic_training.operators.checkpoint_operator",
                ],
            }
        ],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": ["elastic_training.operators.hooks"]}],
        "connection-types": [connection_type()],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": ["elastic_training.operators.triggers"]}],
        "extra-links": [
            "elastic_training.operators.links.ElasticTrainingViewLink",
            "elastic_training.operators.links.GkeWorkloadLink",
            "elastic_training.operators.links.GkeLogsLink",
        ],
        "config": provider_config(),
        "plugins": [
            {"name": "elastic_training", "plugin-class": "elastic_training.plugin.airflow_plugin.ElasticTrainingPlugin"}
        ],
    }
