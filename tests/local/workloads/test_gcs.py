"""gs:// output against the GCS emulator: Orbax writes MaxText's layout in place, markers decide."""

from __future__ import annotations

import json
import signal
from typing import Any

import pytest

from elastic_training.local.workloads.checkpointing import KILL_DURING_SAVE_ENV
from elastic_training.local.workloads.config import EvalConfig, SynthesizeConfig, TrainConfig, parse_args
from elastic_training.local.workloads.evaluate import evaluate
from elastic_training.local.workloads.inference import CheckpointNotFoundError
from elastic_training.local.workloads.recovery_log import RecoveryLog, RecoveryRecord
from elastic_training.local.workloads.slices import StaticSliceHealth
from elastic_training.local.workloads.synthesize import MANIFEST_FILE, SAMPLES_FILE, synthesize
from elastic_training.local.workloads.trainer import Trainer
from elastic_training.operators.checkpoints import Problem, validate_checkpoints
from elastic_training.operators.constants import (
    ASYNC_SAVE_STARTED_RE,
    COMMIT_SUCCESS_FILE,
    COMPLETED_STEP_RE,
    RESTORING_STEP_RE,
)
from tests.support.gcs_emulator import GCSEmulator
from tests.support.workload_processes import run_module

pytestmark = pytest.mark.slow


def test_train_resume_and_evaluate_on_gcs(gcs_emulator: GCSEmulator, gcs_bucket: str, small_model: list[str]) -> None:
    # Single controller (Pathways) means MaxText's zarr2 arrays without OCDBT: tensorstore's OCDBT
    # manifest writes intermittently fail against gcp-storage-emulator ("Malformed StorageGeneration").
    base = f"{gcs_bucket}/runs"
    run = [f"base_output_directory={base}", "run_name=g", *small_model]
    keys = [*run, "checkpoint_period=5", "enable_single_controller=true"]
    first = run_module("elastic_training.local.workloads.train", [*keys, "steps=2"])
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    bucket = gcs_emulator.client().bucket(gcs_bucket.removeprefix("gs://"))
    names = {blob.name for blob in bucket.list_blobs(prefix="runs/g/checkpoints/")}
    for step in (0, 1):
        assert f"runs/g/checkpoints/{step}/{COMMIT_SUCCESS_FILE}" in names
        assert f"runs/g/checkpoints/{step}/items/{COMMIT_SUCCESS_FILE}" in names

    second = run_module("elastic_training.local.workloads.train", [*keys, "steps=3"])
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert RESTORING_STEP_RE.search(second.stdout)[1] == "1"  # type: ignore[index]

    result = evaluate(parse_args(EvalConfig, run))
    assert result["step"] == 2 and result["checkpoint_path"] == f"{base}/g/checkpoints/2"
    assert "runs/g/eval/step_2.json" in {blob.name for blob in bucket.list_blobs(prefix="runs/g/eval/")}


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


def test_synthesize_from_and_to_gcs(gcs_emulator: GCSEmulator, gcs_bucket: str, small_model: list[str]) -> None:
    base = f"{gcs_bucket}/runs"
    run = [f"base_output_directory={base}", "run_name=s", *small_model]
    # In process (the emulator's environment is set for this test): no second JAX start-up.
    train = parse_args(TrainConfig, [*run, "steps=1", "enable_single_controller=true"])
    assert Trainer(train, StaticSliceHealth(1)).run() == 0
    bucket = gcs_emulator.client().bucket(gcs_bucket.removeprefix("gs://"))

    def synth(*extra: str) -> dict[str, object]:
        return synthesize(parse_args(SynthesizeConfig, [*run, "num_samples=4", "temperature=0.8", *extra]))

    # The default output directory is under the gs:// run directory; the manifest is written last.
    manifest = synth("sample_seed=3")
    assert manifest == {
        "count": 4,
        "step": 0,
        "source": f"{base}/s/checkpoints/0",
        "run_name": "s",
        "samples_file": SAMPLES_FILE,
        "temperature": 0.8,
        "sample_seed": 3,
        "sample_length": 16,
        "vocab_size": 32,
    }
    default = "runs/s/synthetic/step_0"
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


def test_kill_9_in_the_middle_of_a_save_on_gcs(
    gcs_emulator: GCSEmulator, gcs_bucket: str, small_model: list[str]
) -> None:
    base = f"{gcs_bucket}/runs"
    args = [f"base_output_directory={base}", "run_name=k", "steps=4", "checkpoint_period=2", *small_model]
    args.append("enable_single_controller=true")  # zarr2 without OCDBT (see the first test)
    crashed = run_module("elastic_training.local.workloads.train", args, **{KILL_DURING_SAVE_ENV: "2"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout[-3000:] + crashed.stderr[-3000:]
    assert ASYNC_SAVE_STARTED_RE.findall(crashed.stdout) == ["0", "2"]
    assert f"Fault injection ({KILL_DURING_SAVE_ENV}): killing the process before the commit marker" in crashed.stdout

    # GCS has no rename, so no temporary directory: step 2 is in place, with its arrays and item marker only.
    bucket = gcs_emulator.client().bucket(gcs_bucket.removeprefix("gs://"))
    names = {blob.name for blob in bucket.list_blobs(prefix="runs/k/checkpoints/")}
    steps = {name.split("/")[3] for name in names}
    assert steps == {"0", "2"}, sorted(names)
    assert not [n for n in names if "tmp" in n], sorted(names)
    committed = sorted(int(s) for s in steps if f"runs/k/checkpoints/{s}/{COMMIT_SUCCESS_FILE}" in names)
    assert committed == [0]
    assert f"runs/k/checkpoints/2/items/{COMMIT_SUCCESS_FILE}" in names
    assert any(n.startswith("runs/k/checkpoints/2/items/params") for n in names), sorted(names)
    report = validate_checkpoints(f"{base}/k")
    assert report.error is None and report.latest_valid_step == 0, report.to_json()
    half, previous = report.verdict(2), report.verdict(0)
    assert half is not None and previous is not None and not half.valid
    assert {f.code for f in half.problems} == {Problem.COMMIT_MARKER_MISSING, Problem.COMMIT_TIMESTAMP_MISSING}
    assert half.items == previous.items

    resumed = run_module("elastic_training.local.workloads.train", args)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert RESTORING_STEP_RE.findall(resumed.stdout) == ["0"]
    assert [int(m[1]) for m in COMPLETED_STEP_RE.finditer(resumed.stdout)] == list(range(1, 4))
    final = validate_checkpoints(f"{base}/k")
    assert final.error is None and final.valid, final.to_json()
    assert [v.step for v in final.steps] == [3, 2, 0]
    assert all(v.valid for v in final.steps), final.to_json()
