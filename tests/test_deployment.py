"""docker-compose.yml, Dockerfile and deploy/helm/values.yaml: no Docker or Helm engine here, so check what can be
checked without one (the Helm values against the official Apache Airflow chart's values schema, 2.0 line: the parts
it sets, copied verbatim from apache/airflow chart/values.schema.json @ 07e2e351fcc25335b3527bb96cca1cab8f1676d4 into
tests/data/airflow_chart/, see its SOURCE.md)."""

from __future__ import annotations

import copy
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[1]
AIRFLOW_SERVICES = {
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
}


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def _helm() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "deploy" / "helm" / "values.yaml").read_text())
    return loaded


def _rbac() -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()) if doc}


def _airflow_pin() -> str:
    """The Airflow version the image runs: requirements.lock's (pyproject.toml holds only a range)."""
    [pin] = re.findall(r"^apache-airflow==(\S+)$", (ROOT / "requirements.lock").read_text(), re.M)
    return str(pin)


def test_compose_runs_every_airflow_component_from_one_image() -> None:
    services = _compose()["services"]
    assert set(services) >= AIRFLOW_SERVICES
    commands = {name: services[name]["command"][0] for name in AIRFLOW_SERVICES}
    assert commands == {
        "airflow-init": "version",
        "airflow-apiserver": "api-server",
        "airflow-scheduler": "scheduler",
        "airflow-dag-processor": "dag-processor",
        "airflow-triggerer": "triggerer",
    }
    assert {services[name]["image"] for name in AIRFLOW_SERVICES} == {"elastic-training-airflow:0.1.0"}
    for name in AIRFLOW_SERVICES - {"airflow-init"}:
        assert services[name]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"


def test_compose_kubernetes_connection_is_valid_json_pointing_at_the_mounted_kubeconfig() -> None:
    env = _compose()["services"]["airflow-scheduler"]["environment"]
    connection = json.loads(env["AIRFLOW_CONN_KUBERNETES_DEFAULT"])
    assert connection["conn_type"] == "kubernetes"
    mounted = [v.rsplit(":", 2)[1] for v in _compose()["services"]["airflow-scheduler"]["volumes"]]
    assert str(Path(connection["extra"]["kube_config_path"]).parent) in mounted
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].startswith("http://airflow-apiserver:8080/")
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/elastic-training/dags"


def test_dockerfile_builds_on_the_pinned_airflow_and_copies_every_package() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG AIRFLOW_VERSION=(\S+)$", dockerfile, re.M)[1] == _airflow_pin()  # type: ignore[index]
    copied = set(re.findall(r"^COPY \S+ (\w+) ", dockerfile, re.M))
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert {p.rstrip("*") for p in packages["include"]} <= copied
    for directory in copied:
        assert (ROOT / directory).is_dir(), f"Dockerfile copies {directory}/, which does not exist"


FAB_AUTH_MANAGER = "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager"
# The parts of the official chart's values.schema.json (2.0 line) that deploy/helm/values.yaml sets; see SOURCE.md.
CHART_SCHEMA = ROOT / "tests" / "data" / "airflow_chart" / "values.schema.subset.json"


def _chart_schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(CHART_SCHEMA.read_text())
    return loaded


def _chart_errors(values: dict[str, Any]) -> list[str]:
    schema = _chart_schema()
    # The file names its own dialect (2020-12 on the chart's 2.0 line, draft-07 before).
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    return sorted(
        f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in validator_class(schema).iter_errors(values)
    )


def _cut_mismatches(schema: dict[str, Any], values: dict[str, Any], path: str = "") -> list[str]:
    """Where the vendored subset differs from SOURCE.md's cut rule for these values: a key the values set that
    the subset does not describe, or a key the subset keeps that the values do not set."""
    properties = schema.get("properties")
    if properties is None:
        return []
    mismatches = [f"{path}{key}: not in the subset" for key in values if key not in properties]
    mismatches += [f"{path}{key}: kept but not set" for key in properties if key not in values]
    for key, value in values.items():
        if key in properties and isinstance(value, dict):
            mismatches += _cut_mismatches(properties[key], value, f"{path}{key}.")
    return mismatches


def test_helm_values_pass_the_official_charts_schema() -> None:
    assert _chart_schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert _chart_errors(_helm()) == []


def test_the_subset_is_cut_exactly_at_what_the_values_set() -> None:
    values = _helm()
    assert _cut_mismatches(_chart_schema(), values) == []
    # The chart's root is open, so a misspelt top-level key passes its schema; the cut rule is what catches it.
    typo = copy.deepcopy(values)
    typo["triggerr"] = {"enabled": True}
    assert _chart_errors(typo) == []
    assert _cut_mismatches(_chart_schema(), typo) == ["triggerr: not in the subset"]


def test_the_chart_schema_refuses_what_the_2_0_line_refuses() -> None:
    values = _helm()
    legacy = copy.deepcopy(values)
    legacy["workers"]["serviceAccount"] = {"create": False, "name": "elastic-training"}  # removed in 2.0 (#66671)
    assert _chart_errors(legacy) == ["workers: Additional properties are not allowed ('serviceAccount' was unexpected)"]
    typo = copy.deepcopy(values)
    typo["triggerer"]["serviceAcount"] = {"create": False}
    assert _chart_errors(typo) == ["triggerer: Additional properties are not allowed ('serviceAcount' was unexpected)"]
    wrong_type = copy.deepcopy(values)
    wrong_type["createUserJob"]["enabled"] = "true"
    assert _chart_errors(wrong_type) == ["createUserJob.enabled: 'true' is not of type 'boolean'"]
    lowercase_executor = copy.deepcopy(values)
    lowercase_executor["executor"] = "kubernetes"
    assert [e.split(":")[0] for e in _chart_errors(lowercase_executor)] == ["executor"]


def test_helm_creates_the_admin_user_the_2_0_line_would_not() -> None:
    job = _helm()["createUserJob"]
    user_schema = _chart_schema()["properties"]["createUserJob"]["properties"]
    assert user_schema["enabled"]["default"] is False
    assert job["enabled"] is True  # without it no user exists and nobody can log in
    assert job["defaultUser"]["role"] == "Admin"
    # The 2.0 line refuses to render an enabled job without a username and password of the values' own
    # (a template check, PR #72209, not in the schema): set both, and not the old well-known password.
    assert job["defaultUser"]["username"] and job["defaultUser"]["password"]
    assert job["defaultUser"]["password"] != user_schema["defaultUser"]["properties"]["password"]["default"]


def test_helm_runs_the_projects_image_with_a_pod_executor_and_a_triggerer() -> None:
    values = _helm()
    assert values["executor"] in {"KubernetesExecutor", "CeleryExecutor"}
    assert values["airflowVersion"] == _airflow_pin()
    image = values["images"]["airflow"]
    compose_repository, compose_tag = _compose()["x-airflow-common"]["image"].split(":")
    assert (image["repository"], image["tag"]) == (compose_repository, compose_tag)
    assert values["triggerer"]["enabled"] is True
    assert values["dagProcessor"]["enabled"] is True
    # The DAGs ship in the image, where the Dockerfile copies them.
    assert re.search(r"^COPY \S+ dags \./dags$", (ROOT / "Dockerfile").read_text(), re.M)
    assert values["config"]["core"]["dags_folder"] == "/opt/elastic-training/dags"
    assert values["dags"]["gitSync"]["enabled"] is False


def test_helm_kubernetes_connection_is_in_cluster_as_the_shipped_rbac_service_account() -> None:
    values = _helm()
    rbac = _rbac()
    account = rbac["ServiceAccount"]["metadata"]
    binding = rbac["RoleBinding"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    ]
    assert binding["roleRef"]["name"] == rbac["Role"]["metadata"]["name"]
    env = {item["name"]: item["value"] for item in values["env"]}
    connection = json.loads(env["AIRFLOW_CONN_KUBERNETES_DEFAULT"])
    assert connection == {"conn_type": "kubernetes", "extra": {"in_cluster": True, "namespace": account["namespace"]}}
    assert values["config"]["kubernetes_executor"]["namespace"] == account["namespace"]
    # Task pods create JobSets, the triggerer watches them: both run as the account the Role is bound to,
    # which deploy/rbac.yaml creates (so the chart must not).
    assert values["triggerer"]["serviceAccount"] == {"create": False, "name": account["name"]}
    assert values["workers"]["kubernetes"]["serviceAccount"] == {"create": False, "name": account["name"]}
    assert "serviceAccount" not in values["workers"]


def test_compose_and_helm_use_the_fab_auth_manager_which_only_the_image_installs() -> None:
    assert _helm()["config"]["core"]["auth_manager"] == FAB_AUTH_MANAGER
    compose = _compose()
    assert compose["x-airflow-common"]["environment"]["AIRFLOW__CORE__AUTH_MANAGER"] == FAB_AUTH_MANAGER
    init_env = compose["services"]["airflow-init"]["environment"]
    assert init_env["_AIRFLOW_WWW_USER_CREATE"] == "true"
    assert init_env["_AIRFLOW_WWW_USER_PASSWORD"].startswith("${AIRFLOW_ADMIN_PASSWORD:?")
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"AIRFLOW__CORE__AUTH_MANAGER={FAB_AUTH_MANAGER}" in dockerfile
    assert '"apache-airflow-providers-fab==${FAB_PROVIDER_VERSION}"' in dockerfile
    # FAB's Flask-AppBuilder caps python-dateutil below the lock's: it must stay out of requirements.lock.
    assert "apache-airflow-providers-fab" not in (ROOT / "requirements.lock").read_text()


def test_dockerfile_installs_with_the_lock_as_constraints_minus_only_the_fab_conflict() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM apache/airflow:slim-\$\{AIRFLOW_VERSION\}-python3\.11$", dockerfile, re.M)
    assert re.search(r"^COPY \S+ .*\brequirements\.lock\b", dockerfile, re.M)
    dropped = re.findall(r"grep -v '\^([^=]+)==' requirements\.lock > (\S+)", dockerfile)
    assert dropped == [("python-dateutil", "/tmp/constraints.txt")]
    assert "pip install --no-cache-dir -c /tmp/constraints.txt" in dockerfile
    lock = (ROOT / "requirements.lock").read_text()
    assert re.search(r"^python-dateutil==4\.", lock, re.M), "the conflict is gone: drop the grep from the Dockerfile"


def test_compose_publishes_the_ui_on_loopback_and_requires_its_secrets() -> None:
    compose = _compose()
    assert compose["services"]["airflow-apiserver"]["ports"] == ["127.0.0.1:8080:8080"]
    env = compose["x-airflow-common"]["environment"]
    for name in ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY"):
        assert re.fullmatch(r"\$\{[A-Z_]+:\?.+\}", env[name]), f"{name} must be required, not defaulted"


# --- the paths for an Airflow that already exists (docs/deploy.md) -------------------------------------------

EXISTING_VALUES = ROOT / "deploy" / "helm" / "values-existing-airflow.yaml"
EXISTING_SCHEMA = ROOT / "tests" / "data" / "airflow_chart" / "values-existing-airflow.schema.subset.json"


def _existing() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(EXISTING_VALUES.read_text())
    return loaded


def _existing_errors(values: dict[str, Any]) -> list[str]:
    schema: dict[str, Any] = json.loads(EXISTING_SCHEMA.read_text())
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    return sorted(
        f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in validator_class(schema).iter_errors(values)
    )


def test_the_existing_airflow_overlay_passes_the_charts_schema_and_is_cut_exactly() -> None:
    values = _existing()
    schema = json.loads(EXISTING_SCHEMA.read_text())
    assert _existing_errors(values) == []
    assert _cut_mismatches(schema, values) == []
    # Every node it keeps is the chart's own: the same as in the values.yaml subset, or (gitSync's keys) read
    # from the chart at the same commit (SOURCE.md).
    base = _chart_schema()["properties"]
    assert schema["properties"]["triggerer"]["properties"]["enabled"] == base["triggerer"]["properties"]["enabled"]
    git_sync = schema["properties"]["dags"]["properties"]["gitSync"]
    assert git_sync["additionalProperties"] is False
    typo = copy.deepcopy(values)
    typo["dags"]["gitSync"]["repository"] = "https://example.com/dags.git"
    assert _existing_errors(typo) == [
        "dags.gitSync: Additional properties are not allowed ('repository' was unexpected)"
    ]


def test_the_existing_airflow_overlay_binds_no_account_to_every_task_pod() -> None:
    values = _existing()
    assert "workers" not in values, "the tasks ask for their account with a pod_override (docs/deploy.md)"
    assert values["dags"]["gitSync"]["enabled"] is True and values["dags"]["gitSync"]["repo"]
    assert values["triggerer"]["enabled"] is True
    assert "executor" not in values and "config" not in values  # the release keeps its own


def test_the_add_on_dockerfile_keeps_the_teams_airflow_and_its_constraints() -> None:
    text = (ROOT / "deploy" / "helm" / "Dockerfile.add-elastic-training").read_text()
    assert re.search(r"^ARG BASE_IMAGE$", text, re.M) and re.search(r"^FROM \$\{BASE_IMAGE\}$", text, re.M)
    assert '"apache-airflow==${AIRFLOW_VERSION}"' in text
    assert "constraints-${AIRFLOW_VERSION}/constraints-${PYTHON_VERSION}.txt" in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert f'"{project["name"]}[gke]==${{ELASTIC_TRAINING_VERSION}}"' in text
    assert f"ARG ELASTIC_TRAINING_VERSION={project['version']}" in text
    assert "gke" in project["optional-dependencies"]


def _existing_rbac() -> list[dict[str, Any]]:
    text = (ROOT / "deploy" / "helm" / "rbac-existing-airflow.yaml").read_text()
    return [doc for doc in yaml.safe_load_all(text) if doc]


def test_the_existing_airflow_rbac_grants_the_operators_role_and_a_read_only_live_view() -> None:
    from elastic_training.operators.rbac import RULES

    docs = {(d["kind"], d["metadata"]["name"]): d for d in _existing_rbac()}
    operators = docs[("Role", "elastic-training")]
    assert [(tuple(r["apiGroups"]), tuple(r["resources"]), tuple(r["verbs"])) for r in operators["rules"]] == list(
        RULES
    )
    live = docs[("Role", "elastic-training-live-view")]
    assert live["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    ]
    bound = {
        name: [(s["namespace"], s["name"]) for s in d["subjects"]]
        for (kind, name), d in docs.items()
        if kind == "RoleBinding"
    }
    assert bound == {
        "elastic-training": [("airflow", "elastic-training"), ("airflow", "airflow-triggerer")],
        "elastic-training-live-view": [("airflow", "airflow-api-server")],
    }
    account = docs[("ServiceAccount", "elastic-training")]
    assert account["metadata"]["annotations"]["iam.gke.io/gcp-service-account"].endswith(".iam.gserviceaccount.com")
    # avoid_failing_node_pools: the node-reading ClusterRole of operators/rbac.py, bound to the tasks' account only.
    from elastic_training.operators.rbac import node_pool_reader_manifests

    role, _ = node_pool_reader_manifests("airflow")
    assert docs[("ClusterRole", role["metadata"]["name"])]["rules"] == role["rules"]
    [binding] = [d for (kind, _), d in docs.items() if kind == "ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert [(s["namespace"], s["name"]) for s in binding["subjects"]] == [("airflow", "elastic-training")]


# Cloud Composer's API (composer.googleapis.com, v1 `SoftwareConfig`): `pypiPackages` keys are lowercase package
# names, values their extras and version specifier; `airflowConfigOverrides` keys are `section-name`, where the
# section has no hyphen, bracket or period and the property is snake_case without `=`, `;` or a period.
COMPOSER = ROOT / "deploy" / "composer"
CONFIG_OVERRIDE_KEY = re.compile(r"^(?P<section>[^-\[\].]+)-(?P<name>[a-z0-9_]+)$")
CODE_OPTIONS = ("gke_project", "gke_location", "gke_cluster", "view_kubernetes_conn_id", "defer_settle_seconds")


def test_the_composer_pypi_packages_are_one_valid_requirement_of_this_distribution() -> None:
    from packaging.requirements import Requirement

    lines = [
        line.strip()
        for line in (COMPOSER / "pypi-packages.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [requirement] = [Requirement(line) for line in lines]
    assert requirement.name == project["name"] == requirement.name.lower()
    assert requirement.extras <= set(project["optional-dependencies"]) and "gke" in requirement.extras
    assert str(requirement.specifier) == f"=={project['version']}"


def test_the_composer_flags_file_overrides_only_options_the_code_reads() -> None:
    flags = yaml.safe_load((COMPOSER / "environment-update.yaml").read_text())
    assert set(flags) == {"--update-airflow-configs"}
    source = (
        "\n".join(p.read_text() for p in (ROOT / "operators").rglob("*.py")) + (ROOT / "plugin" / "live.py").read_text()
    )
    for key, value in flags["--update-airflow-configs"].items():
        match = CONFIG_OVERRIDE_KEY.match(key)
        assert match, f"{key}: not section-name as Composer takes it"
        assert match["section"] == "elastic_training" and match["name"] in CODE_OPTIONS, key
        assert f'"{match["name"]}"' in source, f"{key}: no code reads it"
        assert isinstance(value, str) and value
    assert flags["--update-airflow-configs"]["elastic_training-view_kubernetes_conn_id"] == "gke_tpu"
