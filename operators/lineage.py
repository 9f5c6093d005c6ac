"""OpenLineage for the operators: the datasets a run reads and writes, and a run facet of its recoveries.

The OpenLineage provider (``apache-airflow-providers-openlineage``, the ``[lineage]`` extra) asks an operator for
``get_openlineage_facets_on_complete(task_instance)`` / ``..._on_failure`` after it ran (its ``DefaultExtractor``,
``providers/openlineage/src/airflow/providers/openlineage/extractors/base.py``) and sends what they return, an
``OperatorLineage``, in the task's COMPLETE or FAIL event. The provider is imported only here and only when asked
(:func:`operator_lineage`): without it the operators run as before and return ``None``, which the provider's
extractor reads as "no facets".

Dataset names follow OpenLineage's naming (``openlineage.client.naming.dataset``: ``GCS`` is namespace
``gs://<bucket>``, name the object path; ``LocalFileSystem`` is namespace ``file``, name the absolute path; a
Hugging Face Hub dataset is a ``RemoteFileSystem``: ``https://huggingface.co``, ``datasets/<repo id>``). The inputs
come from MaxText's own keys (:data:`MAXTEXT_INPUT_KEYS`); a relative path or a value that is not text names
nothing (a relative path is relative to the image's working directory, which lineage cannot know).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from elastic_training.operators.run_report import RunReport
from elastic_training.operators.spec import ElasticRunSpec

FACET_NAME = "elasticTraining"
MAX_PATH = 1024  # a longer value is not a path anyone wrote; it names nothing
MAX_INPUTS = 32
MAX_RECOVERIES = 50  # the newest ones: an event stays small however long the run

# MaxText keys (src/MaxText/configs/base.yml) that name data a run reads: the tfds directory, Grain's and Hugging
# Face's file patterns (";"-separated mixtures, each "pattern[,weight]"), the tokenizer, a checkpoint to start from.
MAXTEXT_INPUT_KEYS = (
    "dataset_path",
    "grain_train_files",
    "hf_train_files",
    "hf_data_dir",
    "tokenizer_path",
    "load_parameters_path",
    "load_full_state_path",
)
HF_HUB = "https://huggingface.co"


@dataclass(frozen=True)
class LineageDataset:
    """One OpenLineage dataset: its namespace and name."""

    namespace: str
    name: str


def dataset_of(path: Any) -> LineageDataset | None:
    """The dataset a ``gs://`` or absolute local path names (a glob: the directory before its first wildcard)."""
    if not isinstance(path, str) or not path.strip() or len(path) > MAX_PATH:
        return None
    path = path.strip()
    if path.startswith("gs://"):
        bucket, _, key = path[len("gs://") :].partition("/")
        key = _before_wildcard(key).strip("/")
        return LineageDataset(f"gs://{bucket}", key or "/") if bucket else None
    if path.startswith("/"):
        return LineageDataset("file", posixpath.normpath(_before_wildcard(path)) or "/")
    return None


def _before_wildcard(path: str) -> str:
    parts = path.split("/")
    for index, part in enumerate(parts):
        if any(c in part for c in "*?["):
            return "/".join(parts[:index])
    return path


def maxtext_inputs(args: Mapping[str, Any]) -> list[LineageDataset]:
    """The datasets MaxText's ``args`` read (:data:`MAXTEXT_INPUT_KEYS`, and ``hf_path``'s Hub dataset), in order,
    each once, at most :data:`MAX_INPUTS`."""
    found: list[LineageDataset] = []
    for key in MAXTEXT_INPUT_KEYS:
        value = args.get(key)
        patterns = value.split(";") if isinstance(value, str) and len(value) <= MAX_PATH else [value]
        found.extend(d for d in (dataset_of(p.split(",")[0] if isinstance(p, str) else p) for p in patterns) if d)
    hub = args.get("hf_path")
    if isinstance(hub, str) and hub.strip() and len(hub) <= MAX_PATH:
        found.append(dataset_of(hub) or LineageDataset(HF_HUB, f"datasets/{hub.strip().strip('/')}"))
    return list(dict.fromkeys(found))[:MAX_INPUTS]


def run_facet_fields(report: RunReport) -> dict[str, Any]:
    """The custom run facet's fields: the run's recoveries (each, the newest :data:`MAX_RECOVERIES`) and what they
    cost, its full restarts and its goodput."""
    return {
        "targetStep": report.target_step,
        "finalStep": report.final_step,
        "sliceRestarts": report.slice_restarts,
        "inProcessRecoveries": report.in_process_recoveries,
        "fullRestarts": report.full_restarts,
        "preemptions": report.preemption_count,
        "stepsLost": report.steps_lost,
        "goodput": report.goodput,
        "recoveries": [
            {
                "kind": r.kind,
                "failedStep": r.failed_step,
                "restoredStep": r.restored_step,
                "stepsLost": r.steps_lost,
                "seconds": r.phase_seconds.total,
            }
            for r in report.recoveries[-MAX_RECOVERIES:]
        ],
        "jobsets": list(report.jobsets),
        "failure": report.failure,
    }


def operator_lineage(
    inputs: Iterable[LineageDataset], outputs: Iterable[LineageDataset], report: RunReport | None = None
) -> Any | None:
    """The provider's ``OperatorLineage`` of these datasets (and ``report``'s run facet), or ``None`` when the
    OpenLineage provider is not installed."""
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
        from openlineage.client.event_v2 import Dataset
        from openlineage.client.facet_v2 import RunFacet
    except ImportError:
        return None
    facets = {} if report is None else {FACET_NAME: RunFacet().with_additional_properties(**run_facet_fields(report))}
    return OperatorLineage(
        inputs=[Dataset(namespace=d.namespace, name=d.name) for d in inputs],
        outputs=[Dataset(namespace=d.namespace, name=d.name) for d in outputs],
        run_facets=facets,
    )


def elastic_run_lineage(spec: ElasticRunSpec, report: RunReport | None) -> Any | None:
    """An elastic run's lineage: MaxText's inputs in, the checkpoint directory out, the report's facet."""
    return operator_lineage(maxtext_inputs(spec.maxtext_args), _known([spec.checkpoint_directory]), report)


def stage_lineage(inputs: Iterable[str], outputs: Iterable[str]) -> Any | None:
    """A pipeline stage's lineage (evaluation, synthesis): the paths it reads and writes."""
    return operator_lineage(_known(inputs), _known(outputs))


def _known(paths: Iterable[str]) -> list[LineageDataset]:
    return [d for d in map(dataset_of, paths) if d is not None]
