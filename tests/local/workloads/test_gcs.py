"""gs:// output against the GCS emulator: Orbax writes MaxText's layout in place, markers decide."""

from __future__ import annotations

import pytest

from local.workloads.config import EvalConfig, parse_args
from local.workloads.evaluate import evaluate
from local.workloads.recovery_log import RecoveryLog, RecoveryRecord
from operators.constants import COMMIT_SUCCESS_FILE, RESTORING_STEP_RE
from tests.local.workloads.conftest import run_module
from tests.support.gcs_emulator import GCSEmulator

pytestmark = pytest.mark.slow


def test_train_resume_and_evaluate_on_gcs(gcs_emulator: GCSEmulator, gcs_bucket: str, small_model: list[str]) -> None:
    # Single controller (Pathways) means MaxText's zarr2 arrays without OCDBT: tensorstore's OCDBT
    # manifest writes intermittently fail against gcp-storage-emulator ("Malformed StorageGeneration").
    base = f"{gcs_bucket}/runs"
    run = [f"base_output_directory={base}", "run_name=g", *small_model]
    keys = [*run, "checkpoint_period=5", "enable_single_controller=true"]
    first = run_module("local.workloads.train", [*keys, "steps=2"])
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    bucket = gcs_emulator.client().bucket(gcs_bucket.removeprefix("gs://"))
    names = {blob.name for blob in bucket.list_blobs(prefix="runs/g/checkpoints/")}
    for step in (0, 1):
        assert f"runs/g/checkpoints/{step}/{COMMIT_SUCCESS_FILE}" in names
        assert f"runs/g/checkpoints/{step}/items/{COMMIT_SUCCESS_FILE}" in names

    second = run_module("local.workloads.train", [*keys, "steps=3"])
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
