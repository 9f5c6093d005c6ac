"""The provider metadata: valid against Airflow's own schema, and its ``[elastic_training]`` section lists every
option the code reads, with the default the code falls back to (both from ``operators/config.py``)."""

from __future__ import annotations

import json
import re
from importlib.metadata import entry_points
from importlib.resources import files
from pathlib import Path

import jsonschema
import pytest

from elastic_training import __version__
from elastic_training.get_provider_info import get_provider_info
from elastic_training.operators import config

ROOT = Path(__file__).resolve().parents[1]


def test_valid_against_airflows_provider_schema() -> None:
    schema = json.loads(files("airflow").joinpath("provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    assert info["package-name"] == "elastic-training"
    assert info["versions"] == [__version__]
    assert info["plugins"] == [
        {"name": "elastic_training", "plugin-class": "elastic_training.plugin.airflow_plugin.ElasticTrainingPlugin"}
    ]


def test_the_entry_point_is_declared() -> None:
    (point,) = [p for p in entry_points(group="apache_airflow_provider") if p.value.startswith("elastic_training.")]
    assert point.load() is get_provider_info


def test_every_option_the_code_reads_is_in_the_section() -> None:
    """Each option is read through `config.get_option` or its name from config.py; no literal section elsewhere."""
    section = get_provider_info()["config"][config.SECTION]["options"]
    assert set(section) == {
        "gke_project",
        "gke_location",
        "gke_cluster",
        "view_kubernetes_conn_id",
        "defer_settle_seconds",
        "alert_notifier",
        "alert_notifier_kwargs",
        "alert_queued_after",
        "nightly_deadline",
        "auto_replan_factor",
        "auto_replan_restart_seconds",
    }
    used: set[str] = set()
    for path in [*ROOT.glob("operators/**/*.py"), *ROOT.glob("plugin/**/*.py"), *ROOT.glob("cli/**/*.py")]:
        if path.name == "config.py" and path.parent.name == "operators":
            continue
        text = path.read_text()
        assert not re.search(r"""["']elastic_training["']\s*,\s*["']""", text), f"{path}: read the option via config.py"
        used |= {m.lower() for m in re.findall(r"\bconfig\.([A-Z][A-Z_]+)\b", text)}
    assert used - {"section"} == set(section)
    for option in config.OPTIONS:
        entry = section[option.name]
        assert entry["default"] == option.default and entry["type"] == option.type
        assert entry["description"] and entry["version_added"] == "0.1.0" and "example" in entry


def test_the_code_falls_back_to_the_published_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from elastic_training.operators.triggers import defer_settle_seconds
    from elastic_training.plugin.live import _conn_id

    for option in config.OPTIONS:
        monkeypatch.delenv(f"AIRFLOW__ELASTIC_TRAINING__{option.name.upper()}", raising=False)
    assert defer_settle_seconds() == float(config.DEFER_SETTLE_SECONDS.default) == 20.0
    assert _conn_id() == config.VIEW_KUBERNETES_CONN_ID.default == "kubernetes_default"
    monkeypatch.setenv("AIRFLOW__ELASTIC_TRAINING__DEFER_SETTLE_SECONDS", "3")
    assert defer_settle_seconds() == 3.0


def test_the_gke_connection_type_reaches_airflows_connection_form() -> None:
    """Airflow 3.3 builds the form from the metadata alone (no deprecated hook methods, so no warning); the
    hook-meta answer the UI reads carries the four fields, under the extra keys the GKE access reads."""
    import warnings

    from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService

    from elastic_training.operators.cluster_access import EXTRA_KEYS
    from elastic_training.operators.gke_connection import CONN_TYPE

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (meta,) = [hook for hook in HookMetaService.hook_meta_data() if hook.connection_type == CONN_TYPE]
    assert not [w for w in caught if "elastic_training" in str(w.message)]
    assert meta.hook_class_name == "elastic_training.operators.hooks.GkeJobSetHook"
    assert meta.hook_name == "GKE cluster (elastic training)"
    fields = meta.extra_fields or {}
    assert {key: field["schema"]["title"] for key, field in fields.items()} == {
        "gke_project": "Project",
        "gke_location": "Location",
        "gke_cluster": "Cluster",
        "namespace": "Namespace",
    }
    assert set(fields) - {"namespace"} <= set(EXTRA_KEYS)
    standard = meta.standard_fields
    assert standard is not None
    assert all(getattr(standard, name).hidden for name in ("host", "port", "login", "password"))
