"""Every listing cap bounds what is fetched, not only what is returned: counted at the HTTP
level by a proxy with GCS's list pages in front of the emulator, and on local disk."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from elastic_training.operators.checkpoints import GCSStorage, Problem, ValidationOptions, validate_checkpoints
from elastic_training.operators.checkpoints.storage import ListingTooLargeError, LocalStorage, default_retry
from tests.support.gcs_emulator import GCSEmulator, StrictProxy

pytestmark = pytest.mark.usefixtures("gcs_emulator")


@pytest.fixture(scope="module")
def wide(gcs_emulator_server: GCSEmulator, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A prefix with 3 sub-prefixes of 40 objects each and 30 objects at the top: 150 objects.

    Uploaded once for the module (150 uploads, one at a time on the emulator): the tests only list it.
    """
    local = tmp_path_factory.mktemp("wide")
    for d in ("a", "b", "c"):
        (local / d).mkdir()
        for i in range(40):
            (local / d / f"{i:03d}").write_bytes(b"x")
    for i in range(30):
        (local / f"top{i:03d}").write_bytes(b"y")
    bucket = gcs_emulator_server.create_bucket()
    gcs_emulator_server.upload_dir(local, f"{bucket}/wide")
    return f"{bucket}/wide"


def _storage(emulator: GCSEmulator, proxy: StrictProxy | None, page_size: int = 1000) -> GCSStorage:
    client = emulator.client(proxy.endpoint if proxy else None)
    return GCSStorage(client, retry=default_retry(deadline=10, initial_delay=0.01), page_size=page_size)


def test_walk_under_the_cap_pages_through_everything(
    gcs_emulator: GCSEmulator, wide: str, strict_gcs: StrictProxy
) -> None:
    listing = _storage(gcs_emulator, strict_gcs, page_size=7).walk(wide, limit=1000)
    assert not listing.truncated and len(listing.entries) == 150
    assert {e.name for e in listing.entries} >= {"a/000", "c/039", "top029"}
    assert strict_gcs.list_pages >= 150 // 7
    assert strict_gcs.listed == 150 + 3  # every object once, and the three prefixes


@pytest.mark.parametrize("page_size", [1000, 7])
def test_walk_cap_stops_the_listing(
    gcs_emulator: GCSEmulator, wide: str, strict_gcs: StrictProxy, page_size: int
) -> None:
    """One budget for the whole walk, shared by the parallel sub-prefix listings."""
    listing = _storage(gcs_emulator, strict_gcs, page_size).walk(wide, limit=50)
    # The cap counts every name fetched, the three top-level prefixes too.
    assert listing.truncated and len(listing.entries) == 51 - 3
    assert strict_gcs.listed <= 51  # the cap, plus one name to know there is more


def test_walk_cap_holds_when_the_server_ignores_page_sizes(gcs_emulator: GCSEmulator, wide: str) -> None:
    """The bare emulator answers every list with everything: the cap still holds in what is kept."""
    listing = _storage(gcs_emulator, None).walk(wide, limit=50)
    assert listing.truncated and len(listing.entries) == 51 - 3
    full = _storage(gcs_emulator, None).walk(wide, limit=153)
    assert not full.truncated and len(full.entries) == 150


def test_list_dir_cap(gcs_emulator: GCSEmulator, wide: str, strict_gcs: StrictProxy) -> None:
    storage = _storage(gcs_emulator, strict_gcs, page_size=5)
    assert len(storage.list_dir(wide, limit=33)) == 33  # 30 objects and 3 prefixes: exactly the cap
    strict_gcs.listed = 0
    with pytest.raises(ListingTooLargeError, match="more than 20 entries"):
        storage.list_dir(wide, limit=20)
    assert strict_gcs.listed <= 21


def test_local_list_dir_cap(tmp_path: Path) -> None:
    for i in range(30):
        (tmp_path / str(i)).write_bytes(b"")
    assert len(LocalStorage().list_dir(str(tmp_path), limit=30)) == 30
    with pytest.raises(ListingTooLargeError):
        LocalStorage().list_dir(str(tmp_path), limit=29)


def test_step_listing_cap_on_gcs_is_listing_truncated(
    gcs_emulator: GCSEmulator, gcs_bucket: str, run_copy: Callable[[str], Path], strict_gcs: StrictProxy
) -> None:
    run = run_copy("zarr")
    gcs_emulator.upload_dir(run, f"{gcs_bucket}/run")
    strict_gcs.listed = 0
    report = validate_checkpoints(
        f"{gcs_bucket}/run", step=20, storage=_storage(gcs_emulator, strict_gcs), options=ValidationOptions(max_files=5)
    )
    assert Problem.LISTING_TRUNCATED in {p.code for p in report.target.problems}  # type: ignore[union-attr]
    # No step is valid, so all three are walked, each fetching at most 6 names; discovery lists
    # the run directory (1 name) and the root (3).
    assert [v.step for v in report.steps] == [20, 10, 0]
    assert strict_gcs.listed <= 3 * 6 + 4
