"""Moving a step aside never loses data: GCS (through a proxy with GCS's paging and
preconditions, in front of the emulator) and local disk, on real Orbax checkpoints."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from elastic_training.operators.checkpoints import GCSStorage, quarantine_step, validate_checkpoints
from elastic_training.operators.checkpoints.moving import MoveError
from elastic_training.operators.checkpoints.storage import LocalStorage, StorageError, default_retry, split_gcs
from tests.support.gcs_emulator import GCSEmulator, StrictProxy

EXTRA = 45  # with pages of 20, the step spans several pages
PAGE = 20


def _objects(emulator: GCSEmulator, uri: str) -> dict[str, tuple[int, str, str]]:
    """name (relative to `uri`) -> (size, crc32c, generation), straight from the emulator."""
    bucket, key = split_gcs(uri)
    prefix = f"{key}/"
    return {
        b.name[len(prefix) :]: (b.size, b.crc32c, str(b.generation))
        for b in emulator.client().list_blobs(bucket, prefix=prefix)
    }


def _content(objs: dict[str, tuple[int, str, str]]) -> dict[str, tuple[int, str]]:
    return {name: (size, crc) for name, (size, crc, _gen) in objs.items()}


@pytest.fixture
def gcs_step(gcs_emulator: GCSEmulator, gcs_bucket: str, run_copy: Callable[[str], Path]) -> str:
    """A real OCDBT run on the emulator whose step 20 is invalid and holds more than two pages of objects."""
    run = run_copy("ocdbt")
    step = run / "checkpoints" / "20"
    (step / "commit_success.txt").unlink()
    for i in range(EXTRA):
        (step / "items" / "extra" / f"{i:04d}").parent.mkdir(exist_ok=True)
        (step / "items" / "extra" / f"{i:04d}").write_bytes(os.urandom(64 + i))
    gcs_emulator.upload_dir(run, f"{gcs_bucket}/run")
    return f"{gcs_bucket}/run/checkpoints"


def _storage(emulator: GCSEmulator, proxy: StrictProxy) -> GCSStorage:
    return GCSStorage(
        emulator.client(proxy.endpoint), retry=default_retry(deadline=10, initial_delay=0.01), page_size=PAGE
    )


def test_move_pages_through_every_object(gcs_emulator: GCSEmulator, gcs_step: str, strict_gcs: StrictProxy) -> None:
    src = f"{gcs_step}/20"
    before = _objects(gcs_emulator, src)
    assert len(before) > 2 * PAGE
    strict_gcs.list_pages = 0
    moved = quarantine_step(gcs_step, "20", storage=_storage(gcs_emulator, strict_gcs), now=0)
    assert moved == f"{gcs_step}/quarantine/20.19700101T000000Z"
    assert _objects(gcs_emulator, src) == {}
    assert _content(_objects(gcs_emulator, moved)) == _content(before)
    assert strict_gcs.list_pages >= len(before) // PAGE  # the source listing took several pages
    assert strict_gcs.ops.get("copy") == strict_gcs.ops.get("delete") == len(before), strict_gcs.ops
    after = validate_checkpoints(gcs_step.removesuffix("/checkpoints"))
    assert after.valid and after.target_step == 10


def test_existing_destination_is_refused_before_anything_is_copied(
    gcs_emulator: GCSEmulator, gcs_step: str, strict_gcs: StrictProxy
) -> None:
    src, dst = f"{gcs_step}/20", f"{gcs_step}/quarantine/20.x"
    before = _objects(gcs_emulator, src)
    bucket, key = split_gcs(dst)
    gcs_emulator.client().bucket(bucket).blob(f"{key}/items/_METADATA").upload_from_string(b"someone else's")
    with pytest.raises(FileExistsError, match=r"quarantine/20\.x/items/_METADATA"):
        _storage(gcs_emulator, strict_gcs).move(src, dst)
    assert _objects(gcs_emulator, src) == before
    assert "copy" not in strict_gcs.ops


def test_copy_conflict_leaves_the_source_and_names_the_object(
    gcs_emulator: GCSEmulator, gcs_step: str, strict_gcs: StrictProxy
) -> None:
    """Another writer makes the object the 7th copy is about to make: GCS answers 412 (ifGenerationMatch=0)."""
    src, dst = f"{gcs_step}/20", f"{gcs_step}/quarantine/20.x"
    before = _objects(gcs_emulator, src)
    taken: list[str] = []

    def other_writer(names: list[str]) -> None:
        dst_bucket, dst_name = names[2], names[3]
        gcs_emulator.client().bucket(dst_bucket).blob(dst_name).upload_from_string(b"not the checkpoint")
        taken.append(dst_name)

    strict_gcs.on("copy", 7, before=other_writer)
    with pytest.raises(MoveError) as info:
        _storage(gcs_emulator, strict_gcs).move(src, dst)
    err = info.value
    (conflict,) = taken
    assert f"gs://{split_gcs(dst)[0]}/{conflict} already exists" in str(err)
    assert "no source object was deleted" in str(err)
    assert _objects(gcs_emulator, src) == before  # every source object, same generation
    assert set(err.only_at_src) == set(before) and not err.at_both and not err.only_at_dst
    # The copies this move made are gone again; the other writer's object is untouched.
    assert _content(_objects(gcs_emulator, dst)) == {
        conflict.removeprefix(split_gcs(dst)[1] + "/"): (18, _crc(b"not the checkpoint"))
    }
    assert "delete" in strict_gcs.ops and strict_gcs.ops["copy"] >= 7


def _crc(data: bytes) -> str:
    import base64

    import google_crc32c

    return base64.b64encode(google_crc32c.Checksum(data).digest()).decode()


def test_error_in_the_middle_of_the_copies_leaves_every_source(
    gcs_emulator: GCSEmulator, gcs_step: str, strict_gcs: StrictProxy
) -> None:
    src, dst = f"{gcs_step}/20", f"{gcs_step}/quarantine/20.x"
    before = _objects(gcs_emulator, src)
    strict_gcs.on("copy", 25, status=403)
    with pytest.raises(MoveError, match="injected 403") as info:
        _storage(gcs_emulator, strict_gcs).move(src, dst)
    assert _objects(gcs_emulator, src) == before
    assert _objects(gcs_emulator, dst) == {}  # the 24 or so copies made were removed
    assert set(info.value.only_at_src) == set(before)
    assert strict_gcs.ops["copy"] >= 25
    assert f"{len(before)} object(s) only under {src}" in str(info.value)


def test_error_in_the_middle_of_the_deletes_leaves_a_whole_copy(
    gcs_emulator: GCSEmulator, gcs_step: str, strict_gcs: StrictProxy
) -> None:
    src, dst = f"{gcs_step}/20", f"{gcs_step}/quarantine/20.x"
    before = _objects(gcs_emulator, src)
    strict_gcs.on("delete", 15, status=403)
    with pytest.raises(MoveError, match="every object was copied") as info:
        _storage(gcs_emulator, strict_gcs).move(src, dst)
    err = info.value
    left, copied = _objects(gcs_emulator, src), _objects(gcs_emulator, dst)
    assert _content(copied) == _content(before)  # a whole, checked copy
    assert set(left) == set(err.at_both) and left == {k: before[k] for k in left}
    assert set(err.only_at_dst) == set(before) - set(left)
    assert 14 <= len(err.only_at_dst) < len(before)


@pytest.mark.parametrize("preconditions", [True, False], ids=["gcs-412", "emulator-checksum"])
def test_a_source_rewritten_during_the_move_is_kept(
    gcs_emulator: GCSEmulator, gcs_step: str, strict_gcs: StrictProxy, preconditions: bool
) -> None:
    """With GCS's preconditions the copy is refused (ifSourceGenerationMatch); without them the
    copy's checksum does not match what was listed. Either way nothing is deleted."""
    src, dst = f"{gcs_step}/20", f"{gcs_step}/quarantine/20.x"
    strict_gcs.preconditions = preconditions
    rewritten: list[str] = []

    def writer(names: list[str]) -> None:
        gcs_emulator.client().bucket(names[0]).blob(names[1]).upload_from_string(b"a newer version")
        rewritten.append(names[1])

    strict_gcs.on("copy", 3, before=writer)
    before = _objects(gcs_emulator, src)
    with pytest.raises(MoveError) as info:
        _storage(gcs_emulator, strict_gcs).move(src, dst)
    (name,) = rewritten
    rel = name.removeprefix(split_gcs(src)[1] + "/")
    why = "changed since it was listed" if preconditions else "does not match its source"
    assert f"{rel}: " in str(info.value) and why in str(info.value)
    after = _objects(gcs_emulator, src)
    assert set(after) == set(before) and after[rel][1] == _crc(b"a newer version")
    assert {k: v for k, v in after.items() if k != rel} == {k: v for k, v in before.items() if k != rel}
    assert _objects(gcs_emulator, dst) == {}


# Local disk


def test_local_move_never_replaces_a_destination(run_copy: Callable[[str], Path]) -> None:
    ckpt = run_copy("zarr") / "checkpoints"
    files = sorted(p.relative_to(ckpt / "20") for p in (ckpt / "20").rglob("*"))
    storage = LocalStorage()
    (ckpt / "empty").mkdir()  # rename(2) alone would silently replace an empty directory
    (ckpt / "file").write_text("x")
    for dst in ("empty", "file", "10"):
        with pytest.raises(FileExistsError):
            storage.move(str(ckpt / "20"), str(ckpt / dst))
    assert sorted(p.relative_to(ckpt / "20") for p in (ckpt / "20").rglob("*")) == files
    with pytest.raises(FileNotFoundError):
        storage.move(str(ckpt / "missing"), str(ckpt / "elsewhere"))
    storage.move(str(ckpt / "20"), str(ckpt / "q" / "20.x"))
    assert sorted(p.relative_to(ckpt / "q" / "20.x") for p in (ckpt / "q" / "20.x").rglob("*")) == files


def test_local_move_across_filesystems_moves_nothing(run_copy: Callable[[str], Path]) -> None:
    ckpt = run_copy("zarr") / "checkpoints"
    other = Path("/dev/shm")
    if not other.is_dir() or os.stat(other).st_dev == os.stat(ckpt).st_dev:
        pytest.skip("no second filesystem at /dev/shm")
    dst = other / f"quarantine-test-{os.getpid()}"
    files = sorted(p.relative_to(ckpt / "20") for p in (ckpt / "20").rglob("*"))
    try:
        with pytest.raises(StorageError, match="different filesystems; nothing was moved"):
            LocalStorage().move(str(ckpt / "20"), str(dst / "20"))
    finally:
        shutil.rmtree(dst, ignore_errors=True)
    assert sorted(p.relative_to(ckpt / "20") for p in (ckpt / "20").rglob("*")) == files


def test_quarantine_keeps_its_signature() -> None:
    import inspect

    sig = inspect.signature(quarantine_step)
    assert list(sig.parameters) == ["root", "step_name", "storage", "quarantine_dir", "now"]
    assert [p.kind for p in sig.parameters.values()][2:] == [inspect.Parameter.KEYWORD_ONLY] * 3
    assert sig.return_annotation in (str, "str")


def test_quarantine_takes_the_next_name_when_the_move_refuses(run_copy: Callable[[str], Path]) -> None:
    """A file where the quarantine directory would go: not a directory, yet the move refuses it."""
    ckpt = run_copy("zarr") / "checkpoints"
    (ckpt / "quarantine").mkdir()
    (ckpt / "quarantine" / "20.19700101T000000Z").write_text("someone else's")
    moved = quarantine_step(str(ckpt), "20", now=0)
    assert moved == str(ckpt / "quarantine" / "20.19700101T000000Z-2")
    assert (ckpt / "quarantine" / "20.19700101T000000Z").read_text() == "someone else's"
    assert (Path(moved) / "commit_success.txt").is_file() and not (ckpt / "20").exists()
