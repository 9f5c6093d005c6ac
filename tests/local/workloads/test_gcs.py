"""gs:// output against the GCS emulator: Orbax writes MaxText's layout in place, markers decide.

One run for the module (:func:`killed_and_resumed`): killed in the middle of a save, then resumed to its end; the
tests read what it left (the crash, the resume, an evaluation and synthetic data from its last checkpoint).
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from elastic_training.local.workloads.checkpointing import KILL_DURING_SAVE_ENV
from elastic_training.local.workloads.config import EvalConfig, SynthesizeConfig, parse_args
from elastic_training.local.workloads.evaluate import evaluate
from elastic_training.local.workloads.inference import CheckpointNotFoundError
from elastic_training.local.workloads.recovery_log import RecoveryLog, RecoveryRecord
from elastic_training.local.workloads.synthesize import MANIFEST_FILE, SAMPLES_FILE, synthesize
from elastic_training.operators.checkpoints import CheckpointReport, Problem, validate_checkpoints
from elastic_training.operators.constants import (
    ASYNC_SAVE_STARTED_RE,
    COMMIT_SUCCESS_FILE,
    COMPLETED_STEP_RE,
    RESTORING_STEP_RE,
)
from tests.support.gcs_emulator import GCSEmulator
from tests.support.workload_processes import run_module

pytestmark = pytest.mark.slow

# The small_model fixture's keys (a module fixture cannot ask for a test's).
SMALL_MODEL = ["base_emb_dim=32", "base_num_decoder_layers=1", "vocab_size=32", "max_target_length=16"]


@dataclass(frozen=True)
class GcsRun:
    bucket: str  # gs://name
    base: str  # the base output directory, gs://name/runs
    run: list[str]  # the run's keys (output directory, name, model)
    crashed: subprocess.CompletedProcess[str]
    names_at_crash: set[str]  # the checkpoint objects the crash left
    report_at_crash: CheckpointReport
    resumed: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def killed_and_resumed(gcs_emulator_server: GCSEmulator) -> Iterator[GcsRun]:
    # Single controller (Pathways) means MaxText's zarr2 arrays without OCDBT: tensorstore's OCDBT
    # manifest writes intermittently fail against gcp-storage-emulator ("Malformed StorageGeneration").
    with gcs_emulator_server.environment():
        bucket = gcs_emulator_server.create_bucket()
        base = f"{bucket}/runs"
        run = [f"base_output_directory={base}", "run_name=k", *SMALL_MODEL]
        args = [*run, "steps=4", "checkpoint_period=2", "enable_single_controller=true"]
        crashed = run_module("elastic_training.local.workloads.train", args, **{KILL_DURING_SAVE_ENV: "2"})
        client = gcs_emulator_server.client().bucket(bucket.removeprefix("gs://"))
        names = {blob.name for blob in client.list_blobs(prefix="runs/k/checkpoints/")}
        report = validate_checkpoints(f"{base}/k")
        resumed = run_module("elastic_training.local.workloads.train", args)
    yield GcsRun(bucket, base, run, crashed, names, report, resumed)


def _bucket(gcs_emulator: GCSEmulator, uri: str) -> Any:
    return gcs_emulator.client().bucket(uri.removeprefix("gs://"))


def test_kill_9_in_the_middle_of_a_save_on_gcs(gcs_emulator: GCSEmulator, killed_and_resumed: GcsRun) -> None:
    crashed, names = killed_and_resumed.crashed, killed_and_resumed.names_at_crash
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout[-3000:] + crashed.stderr[-3000:]
    assert ASYNC_SAVE_STARTED_RE.findall(crashed.stdout) == ["0", "2"]
    assert f"Fault injection ({KILL_DURING_SAVE_ENV}): killing the process before the commit marker" in crashed.stdout

    # GCS has no rename, so no temporary directory: step 2 is in place, with its arrays and item marker only.
    steps = {name.split("/")[3] for name in names}
    assert steps == {"0", "2"}, sorted(names)
    assert not [n for n in names if "tmp" in n], sorted(names)
    committed = sorted(int(s) for s in steps if f"runs/k/checkpoints/{s}/{COMMIT_SUCCESS_FILE}" in names)
    assert committed == [0]
    assert f"runs/k/checkpoints/2/items/{COMMIT_SUCCESS_FILE}" in names
    assert any(n.startswith("runs/k/checkpoints/2/items/params") for n in names), sorted(names)
    report = killed_and_resumed.report_at_crash
    assert report.error is None and report.latest_valid_step == 0, report.to_json()
    half, previous = report.verdict(2), report.verdict(0)
    assert half is not None and previous is not None and not half.valid
    assert {f.code for f in half.problems} == {Problem.COMMIT_MARKER_MISSING, Problem.COMMIT_TIMESTAMP_MISSING}
    assert half.items == previous.items

    resumed = killed_and_resumed.resumed
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert RESTORING_STEP_RE.findall(resumed.stdout) == ["0"]
    assert [int(m[1]) for m in COMPLETED_STEP_RE.finditer(resumed.stdout)] == list(range(1, 4))
    final = validate_checkpoints(f"{killed_and_resumed.base}/k")
    assert final.error is None and final.valid, final.to_json()
    assert [v.step for v in final.steps] == [3, 2, 0]
    assert all(v.valid for v in final.steps), final.to_json()


def test_train_resume_and_evaluate_on_gcs(gcs_emulator: GCSEmulator, killed_and_resumed: GcsRun) -> None:
    resumed, base = killed_and_resumed.resumed, killed_and_resumed.base
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert RESTORING_STEP_RE.search(resumed.stdout)[1] == "0"  # type: ignore[index]
    bucket = _bucket(gcs_emulator, killed_and_resumed.bucket)
    names = {blob.name for blob in bucket.list_blobs(prefix="runs/k/checkpoints/")}
    for step in (0, 2, 3):  # the first run's committed step, the resumed run's period and final saves
        assert f"runs/k/checkpoints/{step}/{COMMIT_SUCCESS_FILE}" in names
        assert f"runs/k/checkpoints/{step}/items/{COMMIT_SUCCESS_FILE}" in names

    result = evaluate(parse_args(EvalConfig, killed_and_resumed.run))
    assert result["step"] == 3 and result["checkpoint_path"] == f"{base}/k/checkpoints/3"
    assert "runs/k/eval/step_3.json" in {blob.name for blob in bucket.list_blobs(prefix="runs/k/eval/")}


def test_recovery_records_append_on_gcs(gcs_bucket: str) -> None:
    log = RecoveryLog(f"{gcs_bucket}/runs/r")
    for attempt in (1, 2):
        log.write(
            RecoveryRecord(
                run_name="r",
                kind="slice_down",
                failed_attempt=attempt,
                failure_detected_at=1.0,
                error="DATA_LOSS",
                lost_slices=[1],
                step_at_failure=3,
                slices_before=[0, 1],
            )
        )
    assert [r["failed_attempt"] for r in log.read()] == [1, 2]


def _read(bucket: Any, name: str) -> str:
    return str(bucket.blob(name).download_as_text())


def test_synthesize_from_and_to_gcs(gcs_emulator: GCSEmulator, killed_and_resumed: GcsRun) -> None:
    base, gcs_bucket = killed_and_resumed.base, killed_and_resumed.bucket
    bucket = _bucket(gcs_emulator, gcs_bucket)

    def synth(*extra: str) -> dict[str, object]:
        keys = [*killed_and_resumed.run, "num_samples=4", "temperature=0.8", *extra]
        return synthesize(parse_args(SynthesizeConfig, keys))

    # The default output directory is under the gs:// run directory; the manifest is written last.
    manifest = synth("sample_seed=3")
    assert manifest == {
        "count": 4,
        "step": 3,
        "source": f"{base}/k/checkpoints/3",
        "run_name": "k",
        "samples_file": SAMPLES_FILE,
        "temperature": 0.8,
        "sample_seed": 3,
        "sample_length": 16,
        "vocab_size": 32,
    }
    default = "runs/k/synthetic/step_3"
    assert {b.name for b in bucket.list_blobs(prefix=f"{default}/")} == {
        f"{default}/{SAMPLES_FILE}",
        f"{default}/{MANIFEST_FILE}",
    }
    assert json.loads(_read(bucket, f"{default}/{MANIFEST_FILE}")) == manifest
    samples = _read(bucket, f"{default}/{SAMPLES_FILE}")
    rows = [json.loads(line) for line in samples.splitlines()]
    assert [r["index"] for r in rows] == list(range(4))
    assert all(len(r["tokens"]) == 16 and all(0 <= t < 32 for t in r["tokens"]) for r in rows)

    # An explicit gs:// output directory: the same seed gives the same bytes, another seed others.
    again = synth("sample_seed=3", f"synthetic_output_directory={gcs_bucket}/out/a")
    other = synth("sample_seed=4", f"synthetic_output_directory={gcs_bucket}/out/b")
    assert again == manifest and _read(bucket, f"out/a/{SAMPLES_FILE}") == samples
    assert json.loads(_read(bucket, f"out/a/{MANIFEST_FILE}")) == manifest
    assert other["sample_seed"] == 4 and _read(bucket, f"out/b/{SAMPLES_FILE}") != samples
    with pytest.raises(CheckpointNotFoundError, match="has no step 7"):
        synth("checkpoint_step=7", f"synthetic_output_directory={gcs_bucket}/out/d")
    assert not list(bucket.list_blobs(prefix="out/d"))
