"""The provider's own connection type, ``elastic_training_gke``: a GKE cluster named by project, location and name.

Airflow 3.3 builds a connection form from the provider metadata alone (``airflow/providers_manager.py``,
``_load_ui_metadata``: a ``connection-types`` entry's ``conn-fields`` become the form's extra fields and its
``ui-field-behaviour`` hides the standard ones; the hook methods ``get_connection_form_widgets`` /
``get_ui_field_behaviour`` are deprecated since 3.2 and read only when the metadata has neither), as the
cncf-kubernetes provider's ``kubernetes`` type does. The UI stores each field in the connection's extra under
its own name (``api_fastapi/core_api/services/ui/connections.py``, ``_convert_extra_fields``), so the four
fields here are the extra keys a ``kubernetes`` connection already takes for GKE
(:data:`operators.cluster_access.EXTRA_KEYS`, ``namespace``): both spellings reach the cluster through the same
code, and an existing ``kubernetes`` connection with ``gke_cluster`` in its extra keeps working. Pure data:
``get_provider_info`` imports it without importing a hook.
"""

from __future__ import annotations

from typing import Any

CONN_TYPE = "elastic_training_gke"
HOOK_CLASS = "elastic_training.operators.hooks.GkeJobSetHook"
HOOK_NAME = "GKE cluster (elastic training)"

# (extra key, label, description); the keys are cluster_access's, read by GkeTarget.from_extras.
FIELDS: tuple[tuple[str, str, str], ...] = (
    ("gke_project", "Project", "The Google Cloud project of the GKE cluster (default: [elastic_training] gke_project)"),
    (
        "gke_location",
        "Location",
        "The cluster's region or zone, e.g. us-central2 (default: [elastic_training] gke_location)",
    ),
    ("gke_cluster", "Cluster", "The GKE cluster's name, or projects/P/locations/L/clusters/C"),
    ("namespace", "Namespace", "The Kubernetes namespace the JobSets run in (the operators' default)"),
)
HIDDEN_FIELDS = ("host", "schema", "login", "password", "port")


def connection_type() -> dict[str, Any]:
    """The ``connection-types`` entry of the provider metadata."""
    return {
        "hook-class-name": HOOK_CLASS,
        "hook-name": HOOK_NAME,
        "connection-type": CONN_TYPE,
        "conn-fields": {
            key: {"label": label, "description": description, "schema": {"type": ["string", "null"]}}
            for key, label, description in FIELDS
        },
        "ui-field-behaviour": {"hidden-fields": list(HIDDEN_FIELDS)},
    }
