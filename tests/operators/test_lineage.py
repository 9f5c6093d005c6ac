"""The operators' OpenLineage facets: datasets named as OpenLineage names them, from MaxText's keys and the run's
directories, and the run facet of a report, in the provider's own ``OperatorLineage``.

The end-to-end run (the provider's listener in a ``dag.test()`` process, its file transport read back) is
tests/plugin/test_real_run.py's ``test_the_runs_lineage_reached_openlineage``; an operator run with the provider's
import blocked is tests/operators/test_already_at_target.py's ``test_a_run_without_the_openlineage_provider_...``."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.serde import Serde

from elastic_training.operators.lineage import (
    FACET_NAME,
    MAX_INPUTS,
    LineageDataset,
    dataset_of,
    maxtext_inputs,
    operator_lineage,
)
from elastic_training.operators.pipeline import StageJobSetOperator
from elastic_training.operators.pipeline_params import validate_params
from elastic_training.operators.run_report import RunReport
from tests.support.pipeline_params import GKE_STAGE_PARAMS
from tests.support.pipeline_params import STAGES_RUN as RUN


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("gs://corpus/c4/en", ("gs://corpus", "c4/en")),
        ("gs://corpus/c4/en/", ("gs://corpus", "c4/en")),
        ("gs://corpus", ("gs://corpus", "/")),
        ("gs://corpus/train/*.arrayrecord", ("gs://corpus", "train")),
        ("gs://corpus/shard-???/part", ("gs://corpus", "/")),
        ("/data/train/../train/*.parquet", ("file", "/data/train")),
        ("  /data/x  ", ("file", "/data/x")),
        ("assets/tokenizer.llama2", None),  # relative to the image's working directory: unknown
        ("gs://", None),
        ("", None),
        (42, None),
        (["gs://corpus/a"], None),
        ("/" + "x" * 2000, None),
    ],
)
def test_a_path_is_named_as_openlineage_names_it(path: Any, expected: tuple[str, str] | None) -> None:
    found = dataset_of(path)
    assert (None if found is None else (found.namespace, found.name)) == expected


def test_maxtexts_keys_name_what_the_run_reads() -> None:
    args = {
        "dataset_type": "grain",
        "grain_train_files": "gs://corpus/a/*.arrayrecord,0.3;gs://corpus/b/*.arrayrecord,0.7",
        "dataset_path": "gs://corpus/tfds",
        "tokenizer_path": "assets/tokenizer.llama2",
        "load_parameters_path": "gs://team/base-model/checkpoints/0/items",
        "hf_path": "allenai/c4",
        "per_device_batch_size": 4,
        "grain_eval_files": "gs://corpus/eval/*",  # evaluation data: not what the training reads
    }
    assert maxtext_inputs(args) == [
        LineageDataset("gs://corpus", "tfds"),
        LineageDataset("gs://corpus", "a"),
        LineageDataset("gs://corpus", "b"),
        LineageDataset("gs://team", "base-model/checkpoints/0/items"),
        LineageDataset("https://huggingface.co", "datasets/allenai/c4"),
    ]
    assert maxtext_inputs({"hf_path": "/mnt/datasets/c4"}) == [LineageDataset("file", "/mnt/datasets/c4")]
    assert maxtext_inputs({"dataset_type": "synthetic"}) == []


def test_hostile_args_name_nothing_or_a_bounded_list() -> None:
    assert maxtext_inputs({"dataset_path": None, "hf_path": 7, "grain_train_files": {"a": 1}}) == []
    many = ";".join(f"gs://corpus/part-{i}" for i in range(500))
    assert maxtext_inputs({"grain_train_files": many}) == []  # over MAX_PATH: not a path anyone wrote
    some = ";".join(f"gs://c/{i}" for i in range(100))
    assert len(maxtext_inputs({"grain_train_files": some})) == MAX_INPUTS


REPORT = RunReport.from_json(
    {
        "target_step": 99,
        "final_step": 80,
        "slice_restarts": 3,
        "in_process_recoveries": 2,
        "full_restarts": 1,
        "steps_lost": 7,
        "goodput": 0.81,
        "jobsets": ["run-a-r0", "run-a-r1"],
        "failure": "full-restart budget spent: max_full_restarts=1",
        "recoveries": [
            {"failed_step": 35, "restored_step": 30, "steps_lost": 5, "phase_seconds": {"total": 4.5}},
            {"kind": "scale_up", "failed_step": 60, "restored_step": 60, "steps_lost": 0},
        ],
    }
)


def test_the_providers_operator_lineage_with_the_runs_facet() -> None:
    lineage = operator_lineage([LineageDataset("gs://corpus", "tfds")], [LineageDataset("file", "/r/ckpt")], REPORT)
    assert isinstance(lineage, OperatorLineage)
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("gs://corpus", "tfds")]
    assert [(d.namespace, d.name) for d in lineage.outputs] == [("file", "/r/ckpt")]
    facet = Serde.to_dict(lineage.run_facets[FACET_NAME])
    assert facet["_schemaURL"].endswith("#/$defs/RunFacet")
    assert {k: v for k, v in facet.items() if not k.startswith("_")} == {
        "targetStep": 99,
        "finalStep": 80,
        "sliceRestarts": 3,
        "inProcessRecoveries": 2,
        "fullRestarts": 1,
        "preemptions": 0,
        "stepsLost": 7,
        "goodput": 0.81,
        "recoveries": [
            {"kind": "slice_down", "failedStep": 35, "restoredStep": 30, "stepsLost": 5, "seconds": 4.5},
            {"kind": "scale_up", "failedStep": 60, "restoredStep": 60, "stepsLost": 0},  # unknown: left out
        ],
        "jobsets": ["run-a-r0", "run-a-r1"],
        "failure": "full-restart budget spent: max_full_restarts=1",  # on failure, why
    }
    assert operator_lineage([], [], None).run_facets == {}  # type: ignore[union-attr]


def test_without_the_provider_there_is_no_lineage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "airflow.providers.openlineage.extractors", None)
    assert operator_lineage([LineageDataset("gs://corpus", "tfds")], [], REPORT) is None


GKE = {**GKE_STAGE_PARAMS, "hf_path": "meta-llama/Llama-3.1-8B"}


@pytest.mark.parametrize(
    ("stage", "written"),
    [("evaluate", "llm/nightly-20261201/eval_results"), ("synthesize", "llm/nightly-20261201/synthetic/step_79")],
)
def test_a_stage_reads_the_checkpoints_and_writes_its_results(stage: str, written: str) -> None:
    operator = StageJobSetOperator(task_id=stage, stage=stage)
    assert operator.get_openlineage_facets_on_complete(None) is None  # not configured: nothing known
    operator.configure(validate_params(GKE, run=RUN), 79)
    lineage = operator.get_openlineage_facets_on_complete(None)
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("gs://team-bucket", "llm/nightly-20261201/checkpoints")]
    assert [(d.namespace, d.name) for d in lineage.outputs] == [("gs://team-bucket", written)]
    assert lineage.run_facets == {}
