"""Metadata validation vs a full Orbax restore of the same checkpoint, local and on a GCS emulator.

    .venv/bin/python -m benchmarks.checkpoint_validation --sizes 100M,1G --targets local,gcs

Writes one real Orbax step (MaxText layout, commit-file atomicity) per size and layout (for the
emulator: written locally, then uploaded), filled
with random float32 so the bytes on disk are real, then times `validate_checkpoints` (median of
`--repeat` runs) and a restore of every array to host memory (median of `--restore-repeat`).
Prints a Markdown table; `--json` writes the raw numbers too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def _timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def write_checkpoint(root: str, total_bytes: int, arrays: int, ocdbt: bool) -> None:
    """One step (1) of `arrays` float32 arrays summing to `total_bytes`."""
    import numpy as np
    import orbax.checkpoint as ocp
    from etils import epath
    from orbax.checkpoint import options as ocp_options

    per_array = max(1, total_bytes // arrays // 4)
    cols = 1024
    rows = max(1, per_array // cols)
    rng = np.random.default_rng(0)
    tree = {"params": {f"layer_{i:04d}": rng.standard_normal((rows, cols), dtype=np.float32) for i in range(arrays)}}
    options = ocp.CheckpointManagerOptions(
        atomicity_options=ocp_options.AtomicityOptions(mode=ocp_options.AtomicityMode.COMMIT_FILE)
    )
    handler = ocp.PyTreeCheckpointHandler(use_ocdbt=ocdbt, use_zarr3=False)
    mgr = ocp.CheckpointManager(
        epath.Path(root) / "checkpoints", item_names=("items",), item_handlers={"items": handler}, options=options
    )
    mgr.save(1, args=ocp.args.Composite(items=ocp.args.PyTreeSave(tree)))
    mgr.wait_until_finished()
    mgr.close()


def full_restore(item_path: str) -> int:
    """Restore every array of the item to numpy; returns the bytes restored."""
    import jax
    import numpy as np
    import orbax.checkpoint as ocp
    from etils import epath

    handler = ocp.PyTreeCheckpointHandler()
    path = epath.Path(item_path)
    meta = handler.metadata(path).tree
    args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), meta)
    restored = handler.restore(path, args=ocp.args.PyTreeRestore(restore_args=args))
    return sum(int(np.asarray(a).nbytes) for a in jax.tree.leaves(restored))


def run_case(
    root: str,
    label: str,
    size: int,
    layout: str,
    arrays: int,
    repeat: int,
    restore_repeat: int,
    upload: Callable[[Path, str], object] | None = None,
    workers: int = 16,
) -> dict[str, Any]:
    from elastic_training.operators.checkpoints import ValidationOptions, validate_checkpoints

    options = ValidationOptions(max_workers=workers)

    start = time.perf_counter()
    if upload is None:
        write_checkpoint(root, size, arrays, ocdbt=layout == "ocdbt")
    else:
        # gcp-storage-emulator rejects Orbax's concurrent conditional OCDBT manifest writes
        # ("Malformed StorageGeneration") once there are many arrays: write locally, upload.
        with tempfile.TemporaryDirectory(prefix="ckpt-bench-") as tmp:
            write_checkpoint(tmp, size, arrays, ocdbt=layout == "ocdbt")
            upload(Path(tmp), root)
    write_s = time.perf_counter() - start
    validate_checkpoints(root, options=options)  # warm-up: imports, clients, connection pool
    validate_s, report = _timed(lambda: validate_checkpoints(root, options=options), repeat)
    assert report.valid, report.to_json()
    restore_s, restored = _timed(lambda: full_restore(f"{root}/checkpoints/1/items"), restore_repeat)
    verdict = report.target
    return {
        "target": label,
        "workers": workers,
        "layout": layout,
        "size": size,
        "arrays": arrays,
        "files": verdict.files,
        "bytes_on_storage": verdict.bytes,
        "bytes_restored": restored,
        "write_s": round(write_s, 3),
        "validate_s": round(validate_s, 5),
        "restore_s": round(restore_s, 3),
        "ratio": round(restore_s / validate_s, 1),
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="100M,1G")
    parser.add_argument("--layouts", default="ocdbt,zarr")
    parser.add_argument("--targets", default="local,gcs")
    parser.add_argument("--gcs-max-size", default="1G", help="skip larger sizes on the emulator")
    parser.add_argument("--arrays", type=int, default=256)
    parser.add_argument(
        "--workers", type=int, default=16, help="validation threads (gcp-storage-emulator slows down above ~4)"
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--restore-repeat", type=int, default=2)
    parser.add_argument("--json", type=Path)
    return parser


def _start_emulator() -> Any:
    """A GCS emulator the storage clients (and TensorStore) of this process reach."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.support.gcs_emulator import _ENV, start_emulator

    emulator = start_emulator()
    os.environ.update(
        {**_ENV, "STORAGE_EMULATOR_HOST": emulator.endpoint, "TENSORSTORE_GCS_HTTP_URL": emulator.endpoint}
    )
    return emulator


def _case(args: argparse.Namespace, target: str, size: int, layout: str, emulator: Any) -> dict[str, Any]:
    """One case on local disk (a temporary directory, removed after) or in a new bucket of the emulator."""
    tmp = tempfile.mkdtemp(prefix="ckpt-bench-") if target == "local" else ""
    root = f"{tmp}/run" if target == "local" else f"{emulator.create_bucket()}/run"
    try:
        return run_case(
            root,
            target,
            size,
            layout,
            args.arrays,
            args.repeat,
            args.restore_repeat,
            upload=emulator.upload_dir if target == "gcs" and emulator else None,
            workers=args.workers,
        )
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    sizes = [_size(s) for s in args.sizes.split(",")]
    targets = args.targets.split(",")
    results: list[dict[str, Any]] = []
    emulator = None
    try:
        if "gcs" in targets:
            emulator = _start_emulator()
        for target in targets:
            for size in sizes:
                if target == "gcs" and size > _size(args.gcs_max_size):
                    continue
                for layout in args.layouts.split(","):
                    results.append(_case(args, target, size, layout, emulator))
                    print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    finally:
        if emulator is not None:
            emulator.stop()
    print("| storage | layout | size | arrays | files | validate (median) | full restore | restore / validate |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['target']} | {r['layout']} | {r['bytes_on_storage'] / 2**20:.0f} MiB | {r['arrays']} | {r['files']} "
            f"| {r['validate_s'] * 1000:.1f} ms | {r['restore_s']:.2f} s | {r['ratio']:.0f}x |"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
