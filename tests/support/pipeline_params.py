"""The nightly pipeline's form validated the way its ``validate_params`` task does it: the form's defaults with
changes, the allowed-roots Variable set, a scheduled run; and the Variables a GKE deployment sets."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from elastic_training.operators.pipeline_config import PipelineConfig
from elastic_training.operators.pipeline_params import (
    VARIABLE_ALLOWED_ROOTS,
    VARIABLE_EVAL_COMMAND,
    VARIABLE_EVAL_IMAGE,
    VARIABLE_HF_PATH,
    VARIABLE_MAXTEXT_IMAGE,
    VARIABLE_SYNTH_COMMAND,
    VARIABLE_SYNTH_IMAGE,
    DagRunIdentity,
    param_definitions,
    validate_params,
)

WHEN = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
SCHEDULED = DagRunIdentity("elastic_training_nightly", f"scheduled__{WHEN.isoformat()}", "scheduled", WHEN)


# A scheduled nightly run on GKE as the stage operators are configured for it (the pipeline-stage and lineage tests).
STAGES_RUN = DagRunIdentity(
    dag_id="elastic_training_nightly",
    run_id="scheduled__2026-12-01T00:00:00+00:00",
    run_type="scheduled",
    logical_date=datetime(2026, 12, 1, tzinfo=UTC),
)
GKE_STAGE_PARAMS: dict[str, Any] = {
    "runtime": "gke",
    "base_output_directory": "gs://team-bucket/llm",
    "image": "us-docker.pkg.dev/p/r/maxtext:1",
    "eval_image": "us-docker.pkg.dev/p/r/maxtext-eval:1",
    "eval_command": ["python3", "-m", "maxtext.eval.runner.run"],
    "synthesize_image": "us-docker.pkg.dev/p/r/maxtext-synthesize:1",
    "synthesize_command": ["python3", "-m", "maxtext_synthesize"],
    "tpu_type": "v5e",
    "tpu_topology": "4x4",
}


def defaults(root: Path, **changes: Any) -> dict[str, Any]:
    params = {d.name: d.default for d in param_definitions(data_directory=str(root))}
    params.update(changes)
    return params


def check(root: Path, variables: dict[str, Any] | None = None, **changes: Any) -> PipelineConfig:
    variables = {VARIABLE_ALLOWED_ROOTS: f'["{root}", "gs://"]', **(variables or {})}
    return validate_params(defaults(root, **changes), run=SCHEDULED, variables=variables)


GKE_VARIABLES = {
    VARIABLE_MAXTEXT_IMAGE: "us-docker.pkg.dev/p/r/maxtext:2026-11",
    VARIABLE_EVAL_IMAGE: "us-docker.pkg.dev/p/r/eval:1",
    VARIABLE_EVAL_COMMAND: '["python3", "-m", "team.eval"]',
    VARIABLE_SYNTH_IMAGE: "us-docker.pkg.dev/p/r/synth:1",
    VARIABLE_SYNTH_COMMAND: '["python3", "-m", "team.synth"]',
    VARIABLE_HF_PATH: "meta-llama/Llama-3.1-8B",
}
