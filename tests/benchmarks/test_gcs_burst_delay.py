"""The burst-delay benchmark: a save that meets a burst of 503s still commits, and the table says what it cost."""

from __future__ import annotations

import pytest

from benchmarks.gcs_burst_delay import measure, table
from tests.support.gcs_emulator import FlakyProxy, GCSEmulator


def test_a_save_rides_out_a_burst_and_the_table_compares_it_with_a_clean_save(
    gcs_emulator: GCSEmulator, flaky_gcs: FlakyProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", flaky_gcs.endpoint)
    monkeypatch.setenv("TENSORSTORE_GCS_HTTP_URL", flaky_gcs.endpoint)
    saves = measure(gcs_emulator.create_bucket(), flaky_gcs, [0, 2], (0.0,), 1)  # raises unless the last committed
    assert [(s.count, s.failed) for s in saves] == [(0, 0), (2, 2)]
    rendered = table(saves)
    assert "| none (baseline) | 1 |" in rendered and "| 2 | 1 |" in rendered
