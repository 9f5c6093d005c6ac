"""The shipped DAGs' trigger forms open valid with their defaults, as Airflow 3.3's form judges them.

The form gets each param as the REST API dumps it (``GET /api/v2/dags/{dag_id}/details``:
``{name: param.dump()}`` of the serialized DAG). It marks a field required when its schema has a type
without ``"null"`` (FlexibleForm/isParamRequired.tsx) and turns a section red, with Trigger disabled,
while a required field holds ``null``, ``undefined`` or ``""`` (FlexibleForm/FlexibleForm.tsx); a
``const`` field is hidden (FlexibleForm/Row.tsx). An emptied text or list field is sent as ``null``
(FieldString.tsx, FieldStringArray.tsx). What the form posts, the API checks against each param's JSON
Schema (``ParamsDict.deep_merge(conf).validate()``, jsonschema with a FormatChecker), and then the
first task checks it once more (:func:`operators.pipeline_params.validate_params`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from elastic_training.operators.pipeline_config import PipelineConfig
from elastic_training.operators.pipeline_params import (
    VARIABLE_ALLOWED_ROOTS,
    DagRunIdentity,
    is_form_required,
    validate_params,
)
from tests.support.repo_dags import DAGS

DAG_IDS = ("elastic_training_nightly", "elastic_training_fault_drill")
WHEN = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
SCHEDULED = DagRunIdentity("elastic_training_nightly", f"scheduled__{WHEN.isoformat()}", "scheduled", WHEN)


@pytest.fixture(scope="module")
def served() -> dict[str, Any]:
    """Each DAG as the API server has it: serialized and deserialized, as the DAG processor stores it."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    return {d: DagSerialization.deserialize_dag(DagSerialization.serialize_dag(bag.dags[d])) for d in DAG_IDS}


def form_fields(dag: Any) -> dict[str, dict[str, Any]]:
    """The params as the details endpoint returns them to the form (``DAGDetailsResponse.get_params``)."""
    return {name: param.dump() for name, param in dag.params.items()}


def red_fields(fields: dict[str, dict[str, Any]]) -> list[str]:
    """The fields that make the form refuse to trigger: shown, required and empty."""
    return [
        name
        for name, field in fields.items()
        if not field["schema"].get("const") and is_form_required(field["schema"]) and field["value"] in (None, "")
    ]


def schema_errors(fields: dict[str, dict[str, Any]], values: dict[str, Any]) -> dict[str, str]:
    errors = {}
    for name, field in fields.items():
        try:
            jsonschema.validate(values[name], field["schema"], format_checker=jsonschema.FormatChecker())
        except jsonschema.ValidationError as error:
            errors[name] = error.message
    return errors


def first_task_accepts(values: dict[str, Any], root: Path) -> PipelineConfig:
    conf = {**values, "base_output_directory": str(root)}
    return validate_params(conf, run=SCHEDULED, variables={VARIABLE_ALLOWED_ROOTS: str(root)})


@pytest.mark.parametrize("dag_id", DAG_IDS)
def test_the_form_opens_valid_with_its_defaults(served: dict[str, Any], dag_id: str, tmp_path: Path) -> None:
    fields = form_fields(served[dag_id])
    assert red_fields(fields) == []
    defaults = {name: field["value"] for name, field in fields.items()}
    assert schema_errors(fields, defaults) == {}
    served[dag_id].params.deep_merge(defaults).validate()  # what the trigger endpoint runs on the posted conf
    assert first_task_accepts(defaults, tmp_path).runtime == "local"


@pytest.mark.parametrize("dag_id", DAG_IDS)
def test_every_optional_field_can_be_emptied(served: dict[str, Any], dag_id: str, tmp_path: Path) -> None:
    fields = form_fields(served[dag_id])
    optional = [name for name, field in fields.items() if not is_form_required(field["schema"])]
    emptied = {name: None if name in optional else field["value"] for name, field in fields.items()}
    assert schema_errors(fields, emptied) == {}
    served[dag_id].params.deep_merge(emptied).validate()
    first_task_accepts(emptied, tmp_path)


def test_the_nightly_form_marks_only_the_gke_overrides_optional(served: dict[str, Any]) -> None:
    fields = form_fields(served["elastic_training_nightly"])
    optional = {name for name, field in fields.items() if not is_form_required(field["schema"])}
    assert {"image", "eval_image", "eval_command", "synthesize_image", "synthesize_command", "model_name"} <= optional
    for name in ("runtime", "run_name", "base_output_directory", "steps", "num_slices", "max_eval_loss"):
        assert is_form_required(fields[name]["schema"]), name
    # The list fields render as one-argument-per-line text areas (FieldSelector.tsx: items of type string).
    assert fields["eval_command"]["schema"]["items"] == {"type": "string"}


def test_the_drill_form_hides_the_runtime_and_leaves_out_gke_fields(served: dict[str, Any]) -> None:
    fields = form_fields(served["elastic_training_fault_drill"])
    assert fields["runtime"]["schema"]["const"] == "local" and fields["runtime"]["value"] == "local"
    assert not {"image", "model_name", "tpu_type", "tpu_topology"} & set(fields)
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match="param runtime"):
        served["elastic_training_fault_drill"].params.deep_merge({"runtime": "gke"}).validate()


@pytest.mark.parametrize(
    ("name", "value"),
    [("run_name", ""), ("run_name", None), ("steps", None), ("base_output_directory", "")],
)
def test_an_emptied_required_field_still_turns_the_form_red(served: dict[str, Any], name: str, value: Any) -> None:
    fields = form_fields(served["elastic_training_nightly"])
    fields[name]["value"] = value
    assert red_fields(fields) == [name]
