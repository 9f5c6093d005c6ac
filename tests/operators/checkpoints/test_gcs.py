"""gs:// against a real GCS emulator: Orbax writing to the bucket, damaged uploads, 503 retries."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from elastic_training.operators.checkpoints import (
    DeepOptions,
    GCSStorage,
    IgnoredReason,
    Problem,
    ValidationOptions,
    quarantine_step,
    validate_checkpoints,
)
from elastic_training.operators.checkpoints.storage import Entry, default_retry
from tests.support.gcs_emulator import FlakyProxy, GCSEmulator
from tests.support.orbax_checkpoints import write_run

# Every test here talks to the emulator through the environment (STORAGE_EMULATOR_HOST, ...).
pytestmark = pytest.mark.usefixtures("gcs_emulator")


@pytest.fixture(scope="session")
def gcs_runs(gcs_emulator_server: GCSEmulator, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """MaxText-layout runs on gs://.

    zarr (what MaxText on Pathways writes) is written by Orbax straight to the bucket. OCDBT is
    written locally and uploaded: after reading ``manifest.ocdbt`` back from the emulator (which
    sends no ``x-goog-generation``), tensorstore refuses the next conditional manifest write with
    "Malformed StorageGeneration" (see tests/support/gcs_emulator.py).
    """
    from etils import epath

    with gcs_emulator_server.environment():
        bucket = gcs_emulator_server.create_bucket()
        runs = {"zarr": f"{bucket}/zarr", "ocdbt": f"{bucket}/ocdbt"}
        write_run(epath.Path(runs["zarr"]), ocdbt=False, steps=(10, 20), with_iter=True)  # type: ignore[arg-type]
        local = tmp_path_factory.mktemp("gcs-ocdbt")
        write_run(local, ocdbt=True, steps=(10, 20))
        gcs_emulator_server.upload_dir(local, runs["ocdbt"])
    return runs


def test_orbax_written_gcs_runs_are_valid(gcs_runs: dict[str, str]) -> None:
    for layout, uri in gcs_runs.items():
        report = validate_checkpoints(uri)
        assert report.valid, report.to_json()
        assert report.root == f"{uri}/checkpoints"
        assert [v.step for v in report.steps] == [20, 10]
        assert report.steps[0].layout == ("ocdbt" if layout == "ocdbt" else "zarr2")
        assert not report.ignored  # no tmp directories on GCS: files are written in place


def test_deep_restore_from_gcs(gcs_runs: dict[str, str]) -> None:
    report = validate_checkpoints(gcs_runs["ocdbt"], deep=DeepOptions())
    assert report.valid and report.target.deep["items"]["arrays_checked"] == 5  # type: ignore[index, union-attr]


def _null_timestamp(step: Path) -> None:
    meta = json.loads((step / "_CHECKPOINT_METADATA").read_text())
    meta["commit_timestamp_nsecs"] = None
    (step / "_CHECKPOINT_METADATA").write_text(json.dumps(meta))
    (step / "commit_success.txt").unlink()


@pytest.mark.parametrize(
    ("layout", "damage", "expected"),
    [
        ("zarr", _null_timestamp, {Problem.COMMIT_MARKER_MISSING, Problem.COMMIT_TIMESTAMP_MISSING}),
        ("zarr", lambda s: (s / "items" / "opt.mu" / "0.0").unlink(), {Problem.CHUNK_MISSING}),
        ("ocdbt", lambda s: (s / "items" / "manifest.ocdbt").unlink(), {Problem.OCDBT_MANIFEST_MISSING}),
        (
            "ocdbt",
            lambda s: (s / "items" / "commit_success.txt").unlink(),
            {Problem.ITEM_COMMIT_MARKER_MISSING},
        ),
    ],
    ids=["interrupted-save", "missing-chunk", "missing-manifest", "missing-item-marker"],
)
def test_damaged_uploads_match_local_verdicts(
    gcs_emulator: GCSEmulator,
    gcs_bucket: str,
    run_copy: Callable[[str], Path],
    layout: str,
    damage: Callable[[Path], None],
    expected: set[Problem],
) -> None:
    run = run_copy(layout)
    damage(run / "checkpoints" / "20")
    gcs_emulator.upload_dir(run, f"{gcs_bucket}/run")
    local, remote = validate_checkpoints(str(run)), validate_checkpoints(f"{gcs_bucket}/run")
    assert {p.code for p in remote.target.problems} == expected  # type: ignore[union-attr]
    assert [(v.step, v.valid, [p.code for p in v.problems]) for v in remote.steps] == [
        (v.step, v.valid, [p.code for p in v.problems]) for v in local.steps
    ]
    assert remote.latest_valid_step == 10


def test_step_listing_runs_its_prefixes_in_parallel(gcs_runs: dict[str, str]) -> None:
    """A zarr step has two top-level prefixes (items/, iter/): both listings must be in flight at once."""
    barrier = threading.Barrier(2, timeout=20)  # a serial walk would break it

    class Gated(GCSStorage):
        def _flat(self, path: str, budget: Any) -> list[Entry]:
            barrier.wait()
            return super()._flat(path, budget)

    step = f"{gcs_runs['zarr']}/checkpoints/20"
    listing = Gated().walk(step)
    serial = GCSStorage().walk(step)
    assert sorted(listing.entries, key=str) == sorted(serial.entries, key=str) and not listing.truncated
    names = {e.name for e in listing.entries}
    assert {"commit_success.txt", "items/_METADATA", "iter/commit_success.txt", "items/opt.mu/0.0"} <= names


def test_transient_503s_are_retried(gcs_emulator: GCSEmulator, gcs_runs: dict[str, str], flaky_gcs: FlakyProxy) -> None:
    storage = GCSStorage(gcs_emulator.client(flaky_gcs.endpoint), retry=default_retry(deadline=30, initial_delay=0.01))
    flaky_gcs.fail_next(6)
    report = validate_checkpoints(gcs_runs["zarr"], storage=storage)
    assert flaky_gcs.failed == 6
    assert report.valid and report.latest_valid_step == 20


def test_persistent_errors_give_a_verdict_not_a_traceback(
    gcs_emulator: GCSEmulator, gcs_runs: dict[str, str], flaky_gcs: FlakyProxy
) -> None:
    storage = GCSStorage(gcs_emulator.client(flaky_gcs.endpoint), retry=default_retry(deadline=1, initial_delay=0.01))
    flaky_gcs.fail_next(10**9)
    report = validate_checkpoints(gcs_runs["zarr"], storage=storage)
    assert not report.valid and report.error and "503" in report.error


def test_quarantine_on_gcs(gcs_emulator: GCSEmulator, gcs_bucket: str, run_copy: Callable[[str], Path]) -> None:
    run = run_copy("ocdbt")
    (run / "checkpoints" / "20" / "commit_success.txt").unlink()
    files = gcs_emulator.upload_dir(run, f"{gcs_bucket}/run")
    report = validate_checkpoints(f"{gcs_bucket}/run")
    assert [p.code for p in report.target.problems] == [Problem.COMMIT_MARKER_MISSING]  # type: ignore[union-attr]
    # The marker is required on gs:// whatever the options say: Orbax writes in place there.
    relaxed = validate_checkpoints(f"{gcs_bucket}/run", options=ValidationOptions(require_commit_marker=False))
    assert not relaxed.valid and relaxed.latest_valid_step == 10
    assert [p.code for p in relaxed.target.problems] == [Problem.COMMIT_MARKER_MISSING]  # type: ignore[union-attr]
    moved = quarantine_step(report.root, "20", now=0)
    assert moved == f"{gcs_bucket}/run/checkpoints/quarantine/20.19700101T000000Z"
    after = validate_checkpoints(f"{gcs_bucket}/run")
    assert after.valid and after.target_step == 10
    assert [(i.name, i.reason) for i in after.ignored] == [("quarantine", IgnoredReason.QUARANTINE)]
    storage = GCSStorage()
    kept = len(storage.walk(moved).entries) + sum(len(storage.walk(v.path).entries) for v in after.steps)
    assert kept == files  # nothing deleted


def test_cli_on_gcs(gcs_runs: dict[str, str]) -> None:
    code = "import sys; from cli.main import main; sys.exit(main(sys.argv[1:]))"
    result = subprocess.run(
        [sys.executable, "-c", code, "validate", gcs_runs["zarr"], "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if "No module named 'elastic_training.cli.cluster'" in result.stderr:
        pytest.skip("the cluster subcommand is not there yet")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["step"] == 20
