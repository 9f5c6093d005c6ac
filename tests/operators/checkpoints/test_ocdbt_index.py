"""OCDBT: an array missing inside the database (every file present and non-empty) is caught
by listing the database's keys, without reading array data."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from elastic_training.operators.checkpoints import Problem, ValidationOptions, validate_checkpoints
from elastic_training.operators.checkpoints.ocdbt_index import (
    IndexLimits,
    OcdbtIndexUnreadable,
    _Deadline,
    list_ocdbt_keys,
)
from tests.support.gcs_emulator import GCSEmulator
from tests.support.orbax_checkpoints import make_tree, write_run

MISSING = "opt.mu"


def _without_mu(step: int) -> dict[str, Any]:
    tree = make_tree(step)
    del tree["opt"]
    return tree


@pytest.fixture(scope="session")
def fewer_arrays_step(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Step 20's ``items`` of a checkpoint written by Orbax without ``opt.mu``."""
    root = write_run(tmp_path_factory.mktemp("ocdbt-fewer"), ocdbt=True, steps=(20,), tree_fn=_without_mu)
    return root / "20" / "items"


def _swap_in_database(fewer_items: Path) -> Callable[[Path], None]:
    """Replace the step's OCDBT manifests by those of `fewer_items`, and add its data files.

    Every original file stays present and non-empty; the database the manifest describes is a
    whole, readable one that simply has no ``opt.mu``.
    """

    def damage(step: Path) -> None:
        items = step / "items"
        for src in fewer_items.rglob("*"):
            rel = src.relative_to(fewer_items)
            if src.is_file() and (src.name == "manifest.ocdbt" or rel.parent.name == "d"):
                dst = items / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)

    return damage


def test_array_missing_inside_the_database(run_copy: Callable[[str], Path], fewer_arrays_step: Path) -> None:
    run = run_copy("ocdbt")
    step = run / "checkpoints" / "20"
    before = {p.relative_to(step): p.stat().st_size for p in step.rglob("*") if p.is_file()}
    _swap_in_database(fewer_arrays_step)(step)
    after = {p.relative_to(step): p.stat().st_size for p in step.rglob("*") if p.is_file()}
    assert before.keys() <= after.keys() and all(after.values())  # nothing removed or emptied

    report = validate_checkpoints(str(run))
    problems = report.target.problems  # type: ignore[union-attr]
    assert [(p.code, p.path) for p in problems] == [(Problem.OCDBT_ARRAY_MISSING, f"items/{MISSING}")]
    assert report.latest_valid_step == 10
    assert [v.step for v in report.steps if v.valid] == [10, 0]

    # The file checks alone cannot see it.
    assert validate_checkpoints(str(run), options=ValidationOptions(check_ocdbt_index=False)).valid


def test_cli_names_the_missing_array(run_copy: Callable[[str], Path], fewer_arrays_step: Path) -> None:
    run = run_copy("ocdbt")
    _swap_in_database(fewer_arrays_step)(run / "checkpoints" / "20")
    code = "from elastic_training.cli.main import main; raise SystemExit(main())"
    proc = subprocess.run(
        [sys.executable, "-c", code, "validate", str(run)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, proc.stderr
    assert f"ocdbt_array_missing (items/{MISSING})" in proc.stdout
    assert proc.stdout.rstrip().endswith("step 20: INVALID; latest valid step: 10")


def test_garbage_manifest_is_a_named_problem(run_copy: Callable[[str], Path]) -> None:
    run = run_copy("ocdbt")
    (run / "checkpoints" / "20" / "items" / "manifest.ocdbt").write_bytes(b"\x00garbage" * 64)
    report = validate_checkpoints(str(run))
    assert {p.code for p in report.target.problems} == {Problem.OCDBT_INDEX_UNREADABLE}  # type: ignore[union-attr]
    assert report.latest_valid_step == 10


def test_key_cap_is_a_named_problem(orbax_runs: dict[str, Path]) -> None:
    report = validate_checkpoints(str(orbax_runs["ocdbt"]), options=ValidationOptions(max_ocdbt_keys=3))
    problems = report.target.problems  # type: ignore[union-attr]
    assert [p.code for p in problems] == [Problem.OCDBT_INDEX_UNREADABLE]
    assert "more than 3 keys" in problems[0].detail
    assert report.latest_valid_step is None


def test_a_database_that_never_answers_times_out() -> None:
    import tensorstore as ts

    _promise, future = ts.Promise.new()
    with pytest.raises(OcdbtIndexUnreadable, match=r"longer than 0\.05 s"):
        _Deadline(0.05).wait(future, "listing")


def test_importing_the_package_does_not_import_tensorstore() -> None:
    code = "import sys, elastic_training.operators.checkpoints; print('tensorstore' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.usefixtures("gcs_emulator")
def test_array_missing_inside_the_database_on_gcs(
    gcs_emulator: GCSEmulator, gcs_bucket: str, run_copy: Callable[[str], Path], fewer_arrays_step: Path
) -> None:
    run = run_copy("ocdbt")
    _swap_in_database(fewer_arrays_step)(run / "checkpoints" / "20")
    gcs_emulator.upload_dir(run, f"{gcs_bucket}/run")
    report = validate_checkpoints(f"{gcs_bucket}/run")
    problems = report.target.problems  # type: ignore[union-attr]
    assert [(p.code, p.path) for p in problems] == [(Problem.OCDBT_ARRAY_MISSING, f"items/{MISSING}")]
    assert report.latest_valid_step == 10


def test_a_spec_tensorstore_refuses_is_a_named_problem() -> None:
    from elastic_training.operators.checkpoints.ocdbt_index import check_ocdbt_index

    (finding,) = check_ocdbt_index("gs://b/run/checkpoints/1/items", "items", ["opt.mu"])
    assert finding.code is Problem.OCDBT_INDEX_UNREADABLE and "bucket" in finding.detail


@pytest.fixture(scope="module")
def deep_database(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A real OCDBT database with tiny B+tree nodes (several levels) and 600 keys."""
    import tensorstore as ts

    path = tmp_path_factory.mktemp("deep-ocdbt")
    kv = ts.KvStore.open(
        {"driver": "ocdbt", "base": f"file://{path}/", "config": {"max_decoded_node_bytes": 300}}
    ).result()
    with ts.Transaction() as txn:
        for i in range(600):
            kv.with_transaction(txn)[f"arr{i % 7}/{i}.0".encode()] = b"x" * 5
    return path, sorted(k.decode() for k in kv.list().result())


def test_btree_walk_gives_every_key_in_order(deep_database: tuple[Path, list[str]]) -> None:
    path, expected = deep_database
    listing = list_ocdbt_keys(str(path))
    assert list(listing.keys) == expected  # the same keys as tensorstore's own listing
    assert listing.nodes_read > 10  # several levels of small nodes were walked


def test_key_cap_stops_the_walk(deep_database: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorstore as ts

    path, _ = deep_database
    full = list_ocdbt_keys(str(path)).nodes_read
    real_dump = ts.ocdbt.dump
    read: list[object] = []

    def counting_dump(*args: Any, **kwargs: Any) -> Any:
        read.append(args[1:])
        return real_dump(*args, **kwargs)

    monkeypatch.setattr(ts.ocdbt, "dump", counting_dump)
    with pytest.raises(OcdbtIndexUnreadable, match="more than 20 keys"):
        list_ocdbt_keys(str(path), IndexLimits(max_keys=20))
    # The manifest and the nodes down to the 21st key, not the whole tree.
    assert 1 < len(read) < full // 4


def _validate_without(modules: tuple[str, ...], *args: str) -> subprocess.CompletedProcess[str]:
    """``elastic-training validate ARGS`` in a process where importing any of `modules` fails."""
    code = (
        f"import sys; sys.modules.update(dict.fromkeys({modules!r}))\n"
        "from elastic_training.cli.main import main; raise SystemExit(main())"
    )
    return subprocess.run([sys.executable, "-c", code, "validate", *args], capture_output=True, text=True, timeout=120)


def test_without_tensorstore_the_index_check_answers_unknown(
    run_copy: Callable[[str], Path], fewer_arrays_step: Path
) -> None:
    """The damage only the index check sees: without tensorstore the step is not valid, and the reason is said."""
    run = run_copy("ocdbt")
    _swap_in_database(fewer_arrays_step)(run / "checkpoints" / "20")
    proc = _validate_without(("tensorstore",), "--json", str(run))
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    step = next(s for s in report["steps"] if s["step"] == 20)
    assert step["valid"] is False
    assert [p["code"] for p in step["problems"]] == ["ocdbt_index_not_checked"]
    assert "tensorstore is not installed, so the OCDBT database was not checked" in step["problems"][0]["detail"]
    assert report["latest_valid_step"] is None  # no step was checked whole: none is called valid


def test_without_tensorstore_the_cli_says_unknown(orbax_runs: dict[str, Path]) -> None:
    proc = _validate_without(("tensorstore",), str(orbax_runs["ocdbt"]))
    assert proc.returncode == 1, proc.stderr
    assert "ocdbt_index_not_checked (items): tensorstore is not installed" in proc.stdout
    assert proc.stdout.rstrip().endswith("step 20: UNKNOWN; latest valid step: -")
