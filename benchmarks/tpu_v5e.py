"""On one TPU v5e chip: the stand-in trainer at Qwen3-0.6B's shape, its checkpoints and an in-process recovery.

    python -m benchmarks.tpu_v5e --out DIR [--repeat 3] [--dir CHECKPOINT_PARENT]

It needs a TPU: anywhere else it exits 2 and says so before anything is written (CI never runs it).
``benchmarks/RESULTS.md`` ("TPU v5e") gives the whole command for a borrowed TPU host: the packages it
installs from the host's own index and where the records land.

Real MaxText cannot run there (RESULTS.md says why), so the model is the stand-in trainer's
(:mod:`local.workloads.model`) at Qwen3-0.6B's shape: 28 decoder layers, embedding 1024, vocabulary 151,936
(16 heads), fp32 parameters and Adam's two moments, on the trainer's synthetic corpus. In one process that
holds the chip, each figure ``--repeat`` times:

- the step: its compilation, then ``--steps`` steady steps (the state donated, as MaxText jits its step);
- a checkpoint save with the trainer's own Orbax settings (:mod:`local.workloads.checkpointing`), blocking
  (``save`` returned) and committed (``commit_success.txt`` written), its bytes and files on disk, and the
  init-to-commit time Orbax records in the step (what the operator's history reads);
- an in-process recovery as the trainer performs it: the state dropped from HBM, the newest committed step
  restored to HBM, the next step run; its phases by the trainer's ``RecoveryRecord`` and by the operator's
  ``LogDigest`` folded from the log lines;
- the same recovery with the step compiled again, as a restarted process without a compilation cache pays it;
- the project's checkpoint validator on the saved step, metadata checks and ``--deep``, against the restore.

Two storage formats: ``pathways`` (no OCDBT, no Zarr3: MaxText's choice under a single controller, so the
demo's) and ``ocdbt`` (OCDBT and Zarr3: MaxText's multi-controller default).

Records in ``--out``: ``tpu_v5e.json`` (everything, rewritten after each part, so a run cut short keeps what it
measured), ``tpu_v5e.md`` (the tables), ``trainer.log`` (the log lines) and ``contract.json`` (the operator's
patterns against those lines, and what its digest made of them).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

EXIT_NO_TPU = 2
QWEN3_0_6B = {"vocab": 151_936, "emb": 1024, "layers": 28, "heads": 16}
FORMATS = {"pathways": (False, False), "ocdbt": (True, True)}  # (use_ocdbt, use_zarr3)
LEARNING_RATE = 3e-3
HBM_HEADROOM = 0.92  # of the chip's bytes_limit a step may plan to use
RUN_NAME = "tpu-v5e-qwen3-0-6b"
VERSIONED = ("jax", "jaxlib", "libtpu", "orbax-checkpoint", "tensorstore", "optax", "numpy", "etils")

_logger = logging.getLogger("benchmarks.tpu_v5e")


class NoTpuError(RuntimeError):
    """JAX sees no TPU here."""


def require_tpu() -> Any:
    """The first TPU device, or `NoTpuError` saying what JAX sees instead."""
    import jax

    try:
        devices = jax.devices()
    except RuntimeError as exc:  # JAX_PLATFORMS=tpu without a TPU: the backend fails to start
        raise NoTpuError(f"JAX could not start a TPU backend ({str(exc).splitlines()[0]})") from exc
    if not devices or devices[0].platform != "tpu":
        kinds = sorted({f"{d.platform} ({d.device_kind})" for d in devices})
        raise NoTpuError(f"JAX sees no TPU, only {', '.join(kinds) or 'no device'}")
    return devices[0]


# -- figures -------------------------------------------------------------------------------------------------------


def spread(values: Sequence[float]) -> dict[str, float | int]:
    """Median, min, max and count of `values` (empty: count 0 only)."""
    if not values:
        return {"n": 0}
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
        "n": len(values),
    }


def shown(figure: dict[str, float | int], unit: str = "s", scale: float = 1.0) -> str:
    """``median (min-max)`` of a `spread`, or ``-`` when nothing was measured."""
    if not figure.get("n"):
        return "-"
    median, low, high = (float(figure[k]) * scale for k in ("median", "min", "max"))
    return f"{median:.3g} {unit} ({low:.3g}-{high:.3g}, n={figure['n']})"


def disk_usage(path: str) -> tuple[int, int]:
    """Bytes and files under `path`."""
    total = files = 0
    for folder, _, names in os.walk(path):
        for name in names:
            total += os.path.getsize(os.path.join(folder, name))
            files += 1
    return total, files


def environment(device: Any, directory: str) -> dict[str, Any]:
    """The machine and the software versions the figures were taken with."""
    versions: dict[str, str | None] = {}
    for name in VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    stats = device.memory_stats() or {}
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "device_kind": device.device_kind,
        "device_count": len(__import__("jax").devices()),
        "hbm_bytes_limit": stats.get("bytes_limit"),
        "host_cpus": os.cpu_count(),
        "host": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
        "checkpoint_directory": directory,
        "disk_free_bytes": shutil.disk_usage(directory).free,
    }


# -- the chip ------------------------------------------------------------------------------------------------------


@dataclass
class Chip:
    """The model on the chip: its shape, batch, compiled step and synthetic batches."""

    device: Any
    dims: Any
    batch: int
    sharding: Any
    abstract: Any
    step_fn: Any
    compiled: Any
    batches: list[Any]
    compile_trials: list[dict[str, Any]] = field(default_factory=list)
    steps_run: int = 0
    last_step: int = -1

    @property
    def tokens_per_step(self) -> int:
        return self.batch * int(self.dims.length)

    def tokens_struct(self) -> Any:
        import jax
        import jax.numpy as jnp

        return jax.ShapeDtypeStruct(  # type: ignore[no-untyped-call]
            (self.batch, self.dims.length), jnp.int32, sharding=self.sharding
        )

    def hbm_in_use(self) -> int | None:
        stats = self.device.memory_stats() or {}
        value = stats.get("bytes_in_use")
        return int(value) if value is not None else None


def compile_step(step_fn: Any, abstract: Any, tokens: Any) -> tuple[Any, float, dict[str, Any]]:
    """AOT-compile the step; its seconds and XLA's memory plan in bytes."""
    started = time.perf_counter()
    compiled = step_fn.lower(abstract, tokens).compile()
    seconds = time.perf_counter() - started
    plan = compiled.memory_analysis()
    memory = {}
    if plan is not None:
        for name in ("argument", "output", "temp", "alias", "generated_code"):
            memory[name] = int(getattr(plan, f"{name}_size_in_bytes", 0))
        memory["peak_estimate"] = memory["argument"] + memory["output"] + memory["temp"] - memory["alias"]
    return compiled, seconds, memory


def build_chip(device: Any, length: int, batches: Sequence[int]) -> Chip:
    """The model at Qwen3-0.6B's shape with the largest batch (of `batches`) whose step fits in HBM."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from elastic_training.local.workloads import model

    dims = model.Dims(length=length, **QWEN3_0_6B)
    sharding = NamedSharding(Mesh(np.array([device]), ("data",)), P())  # type: ignore[no-untyped-call]
    abstract = jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding),  # type: ignore[no-untyped-call]
        jax.eval_shape(lambda: model.init_state(dims, 0, LEARNING_RATE)),
    )
    step_fn = model.make_train_step(dims.heads, LEARNING_RATE, donate_state=True)
    limit = (device.memory_stats() or {}).get("bytes_limit")
    trials: list[dict[str, Any]] = []
    for batch in batches:
        tokens = jax.ShapeDtypeStruct((batch, length), jax.numpy.int32, sharding=sharding)  # type: ignore[no-untyped-call]
        compiled, seconds, memory = compile_step(step_fn, abstract, tokens)
        fits = limit is None or memory.get("peak_estimate", 0) <= HBM_HEADROOM * limit
        trials.append({"batch": batch, "compile_seconds": round(seconds, 3), "memory": memory, "fits": fits})
        _logger.info("Step compiled for batch %d in %.1f s: %s (fits: %s)", batch, seconds, memory, fits)
        if fits or batch == batches[-1]:
            break
    corpus = [model.corpus_batch("train", i, batch, dims) for i in range(4)]
    return Chip(device, dims, batch, sharding, abstract, step_fn, compiled, corpus, trials)


def init_state(chip: Chip) -> tuple[Any, float]:
    """A fresh train state on the chip, and the seconds it took (compiled, as the trainer does)."""
    import jax

    from elastic_training.local.workloads import model

    started = time.perf_counter()
    init = jax.jit(lambda: model.init_state(chip.dims, 0, LEARNING_RATE), out_shardings=chip.sharding)
    state = jax.block_until_ready(init())  # type: ignore[no-untyped-call]
    return state, time.perf_counter() - started


def run_steps(chip: Chip, state: Any, count: int, compiled: Any = None) -> tuple[Any, list[float]]:
    """`count` steps, each timed to its loss on the host; logs the trainer's progress line."""
    import jax

    from elastic_training.local.workloads.logs import log_completed_step

    step_fn = compiled if compiled is not None else chip.compiled
    seconds: list[float] = []
    for _ in range(count):
        step = int(state["step"])  # read before the state is donated
        started = time.perf_counter()
        tokens = jax.device_put(chip.batches[step % len(chip.batches)], chip.sharding)
        state, loss = step_fn(state, tokens)
        loss_value = float(loss)
        took = time.perf_counter() - started
        seconds.append(took)
        chip.steps_run, chip.last_step = chip.steps_run + 1, step
        log_completed_step(step, took, chip.tokens_per_step / took, loss_value)
    return state, seconds


def drop_state(state: Any) -> None:
    """Free the state's HBM now, as a failed attempt's state is dropped."""
    import jax

    for leaf in jax.tree.leaves(state):
        leaf.delete()


# -- checkpoints -----------------------------------------------------------------------------------------------------


def measure_save(manager: Any, state: Any, directory: str) -> dict[str, Any]:
    """One asynchronous save of `state` (the last completed step), blocking and committed."""
    from elastic_training.local.workloads import checkpointing
    from elastic_training.operators.checkpoints.timing import save_seconds

    step = int(state["step"]) - 1
    started = time.perf_counter()
    checkpointing.save_checkpoint(manager, step, state, async_checkpointing=True, force=True)
    blocking = time.perf_counter() - started
    manager.wait_until_finished()
    committed = time.perf_counter() - started
    step_dir = os.path.join(directory, str(step))
    size, files = disk_usage(step_dir)
    recorded = save_seconds([step_dir])
    return {
        "step": step,
        "blocking_seconds": round(blocking, 4),
        "committed_seconds": round(committed, 4),
        "orbax_init_to_commit_seconds": recorded[0] if recorded else None,
        "bytes": size,
        "files": files,
        "committed": os.path.exists(os.path.join(step_dir, "commit_success.txt")),
    }


def recover(chip: Chip, manager: Any, state: Any, run_directory: str, *, recompile: bool) -> tuple[Any, dict[str, Any]]:
    """One in-process recovery as the trainer performs it: drop the state, restore the newest step, step on.

    There is one chip and no Pathways here, so no slice to wait for: the runner logs pathwaysutils' two lines
    itself (``Elastic event detected``, ``Sufficient slices active``) where the retry loop would. With
    `recompile`, JAX's caches are cleared and the step compiled again before it runs, as in a new process.
    """
    import jax

    from elastic_training.local.workloads import checkpointing
    from elastic_training.local.workloads.recovery_log import RecoveryLog, RecoveryRecord

    failed_step = int(state["step"]) - 1
    record = RecoveryRecord(
        run_name=RUN_NAME,
        kind="slice_down",
        failed_attempt=1,
        failure_detected_at=time.time(),
        error="DATA_LOSS: (runner) the state dropped, as after a slice failure",
        lost_slices=[0],
        step_at_failure=failed_step,
        slices_before=[0],
    )
    _logger.info("Elastic event detected. (runner, in place of pathwaysutils)")
    drop_state(state)
    del state
    hbm_after_drop = chip.hbm_in_use()
    record.slices_ready_at = time.time()
    _logger.info("Sufficient slices active: 1 >= 1 (runner, in place of pathwaysutils)")
    record.restore_started_at = time.time()
    loaded = checkpointing.load_state_if_possible(manager, chip.abstract)
    if loaded is None:
        raise RuntimeError("no committed checkpoint to restore")
    state = jax.block_until_ready(loaded[0])  # type: ignore[no-untyped-call]
    record.restore_finished_at, record.step_restored = time.time(), loaded[1]
    compile_seconds = None
    compiled = None
    if recompile:
        jax.clear_caches()  # type: ignore[no-untyped-call]
        compiled, compile_seconds, _ = compile_step(chip.step_fn, chip.abstract, chip.tokens_struct())
    state, seconds = run_steps(chip, state, 1, compiled)
    record.first_step_after_recovery = loaded[1] + 1
    record.first_step_completed_at = time.time()
    record.outcome = "recovered"
    RecoveryLog(run_directory).write(record)
    result = record.to_json()
    result.update(
        recompiled=recompile,
        compile_seconds=None if compile_seconds is None else round(compile_seconds, 3),
        first_step_run_seconds=round(seconds[0], 4),
        hbm_bytes_after_drop=hbm_after_drop,
    )
    return state, result


def measure_validation(root: str, repeat: int) -> dict[str, Any]:
    """The project's validator on `root`: metadata checks and ``--deep`` (its default budget), timed."""
    from elastic_training.operators.checkpoints import DeepOptions, validate_checkpoints

    found: dict[str, Any] = {}
    for mode, deep in (("default", None), ("deep", DeepOptions())):
        seconds: list[float] = []
        report = None
        for _ in range(repeat):
            started = time.perf_counter()
            report = validate_checkpoints(root, deep=deep)
            seconds.append(time.perf_counter() - started)
        target = report.target if report is not None else None
        found[mode] = {
            "seconds": [round(s, 4) for s in seconds],
            "valid": bool(report is not None and report.valid),
            "target_step": None if report is None else report.target_step,
            "deep": None if target is None else target.deep,
        }
    return found


def measure_format(
    chip: Chip, state: Any, name: str, base: str, args: argparse.Namespace
) -> tuple[Any, dict[str, Any]]:
    """Saves, in-process recoveries (then with recompilation) and validation in one storage format."""
    from elastic_training.local.workloads import checkpointing

    use_ocdbt, use_zarr3 = FORMATS[name]
    run_directory = os.path.join(base, f"{RUN_NAME}-{name}")
    directory = os.path.join(run_directory, "checkpoints")
    manager = checkpointing.create_manager(
        directory, period=1, max_to_keep=args.keep, use_ocdbt=use_ocdbt, use_zarr3=use_zarr3
    )
    found: dict[str, Any] = {"saves": [], "recoveries": [], "recompiled_recoveries": []}
    try:
        for _ in range(args.repeat):
            state, _ = run_steps(chip, state, 1)
            found["saves"].append(measure_save(manager, state, directory))
            state, _ = run_steps(chip, state, 2)  # steps the recovery loses
            state, record = recover(chip, manager, state, run_directory, recompile=False)
            found["recoveries"].append(record)
        if name in args.recompile_formats.split(","):
            for _ in range(args.repeat):
                state, record = recover(chip, manager, state, run_directory, recompile=True)
                found["recompiled_recoveries"].append(record)
        found["validation"] = measure_validation(directory, args.repeat)
    finally:
        manager.close()
        shutil.rmtree(run_directory, ignore_errors=True)  # the next format's checkpoints need the disk
    return state, found


# -- the operator's reading of the lines -------------------------------------------------------------------------------


def contract(lines: Sequence[tuple[float, str]], results: dict[str, Any]) -> dict[str, Any]:
    """Each of the operator's log patterns against the lines, and what its `LogDigest` made of them."""
    from elastic_training.operators import constants
    from elastic_training.operators.recovery import LogDigest

    patterns = {name: value for name, value in vars(constants).items() if name.endswith("_RE")}
    matched = {}
    for name, pattern in sorted(patterns.items()):
        hits = [line for _, line in lines if pattern.search(line)]
        matched[name] = {"count": len(hits), "first": hits[0] if hits else None}
    digest = LogDigest().feed_all(lines)
    recoveries = digest.all_recoveries
    formats = results.get("formats", {}).values()
    saves = sum(len(f["saves"]) for f in formats)
    restores = sum(len(f["recoveries"]) + len(f["recompiled_recoveries"]) for f in formats)
    counts = results.get("counts", {})
    checks = {
        "progress": digest.latest_step == counts.get("last_step"),
        "steps": digest.steps_executed == counts.get("steps_run"),
        "saves": matched["ASYNC_SAVE_STARTED_RE"]["count"] == saves,
        "restores": digest.restores == restores,
        "recoveries": len(recoveries) == restores and all(r.complete for r in recoveries),
    }
    return {
        "checks": checks,
        "ok": all(checks.values()),
        "patterns": matched,
        "digest": {
            "latest_step": digest.latest_step,
            "steps_executed": digest.steps_executed,
            "restores": digest.restores,
            "mean_step_seconds_from_log": round(digest.step_seconds_total / max(1, digest.steps_executed), 4),
            "recoveries": [{**r.phases(), "restored_step": r.restored_step} for r in recoveries],
        },
        "not_exercised": ["TRAINING_STOPPED_RE (a SIGTERM stop)", "elastic attempts and slice waits (no Pathways)"],
    }


# -- records -------------------------------------------------------------------------------------------------------


def _phases(records: Sequence[dict[str, Any]], phase: str) -> dict[str, float | int]:
    return spread([r["phase_seconds"][phase] for r in records if r["phase_seconds"].get(phase) is not None])


def summarize_format(found: dict[str, Any]) -> dict[str, Any]:
    """The spreads of one storage format's records."""
    saves, recoveries, recompiled = found["saves"], found["recoveries"], found["recompiled_recoveries"]
    restore = _phases(recoveries + recompiled, "restore")
    summary: dict[str, Any] = {
        "save_blocking": spread([s["blocking_seconds"] for s in saves]),
        "save_committed": spread([s["committed_seconds"] for s in saves]),
        "save_orbax_init_to_commit": spread([s["orbax_init_to_commit_seconds"] or 0.0 for s in saves]),
        "bytes": spread([s["bytes"] for s in saves]),
        "files": spread([s["files"] for s in saves]),
        "restore": restore,
        "first_step": _phases(recoveries, "first_step"),
        "total": _phases(recoveries, "total"),
        "recompiled_compile": spread([r["compile_seconds"] for r in recompiled]),
        "recompiled_first_step": _phases(recompiled, "first_step"),
        "recompiled_total": _phases(recompiled, "total"),
    }
    validation = found.get("validation") or {}
    for mode in ("default", "deep"):
        figure = spread(validation.get(mode, {}).get("seconds", []))
        summary[f"validate_{mode}"] = figure
        if figure.get("n") and restore.get("n"):
            summary[f"restore_over_validate_{mode}"] = round(float(restore["median"]) / float(figure["median"]), 1)
    return summary


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    """Spreads of every figure measured so far."""
    steps = results.get("steps", {})
    return {
        "step": spread(steps.get("steady_seconds", [])),
        "formats": {name: summarize_format(found) for name, found in results.get("formats", {}).items()},
    }


ROWS = (
    ("save, blocking", "save_blocking", "s"),
    ("save, committed", "save_committed", "s"),
    ("save, init to commit (Orbax's record)", "save_orbax_init_to_commit", "s"),
    ("bytes on disk", "bytes", "GiB"),
    ("files", "files", ""),
    ("restore to HBM", "restore", "s"),
    ("first step after restore (executable reused)", "first_step", "s"),
    ("in-process recovery, failure to first step", "total", "s"),
    ("step compiled again after restore", "recompiled_compile", "s"),
    ("first step after restore, compiled again", "recompiled_first_step", "s"),
    ("recovery with recompilation, failure to first step", "recompiled_total", "s"),
    ("validator, default (metadata)", "validate_default", "s"),
    ("validator, --deep", "validate_deep", "s"),
)


def markdown(results: dict[str, Any]) -> str:
    """The figures as Markdown: median (min-max, n) per storage format."""
    summary = results.get("summary", {})
    formats = summary.get("formats", {})
    model = results.get("model", {})
    lines = [
        f"Step ({model.get('batch')} x {model.get('length')} tokens, {model.get('parameters')} parameters): "
        f"{shown(summary.get('step', {}), 'ms', 1000.0)}",
        "",
        "| figure | " + " | ".join(formats) + " |",
        "|---|" + "---|" * len(formats),
    ]
    for label, key, unit in ROWS:
        scale = 1 / 2**30 if unit == "GiB" else 1.0
        lines.append(f"| {label} | " + " | ".join(shown(f.get(key, {}), unit, scale) for f in formats.values()) + " |")
    for mode in ("default", "deep"):
        ratios = [str(f.get(f"restore_over_validate_{mode}", "-")) for f in formats.values()]
        lines.append(f"| restore / validator {mode} | " + " | ".join(ratios) + " |")
    return "\n".join(lines) + "\n"


class LineRecorder(logging.Handler):
    """Keeps every formatted log line with its time, for the records and the operator's digest."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.created, self.format(record)))


def start_logging() -> LineRecorder:
    """The trainer's absl-style lines on stdout, and recorded."""
    from elastic_training.local.workloads.logs import configure_logging

    configure_logging()
    root = logging.getLogger()
    recorder = LineRecorder()
    recorder.setFormatter(root.handlers[0].formatter)
    root.addHandler(recorder)
    return recorder


def write_records(out: Path, results: dict[str, Any], recorder: LineRecorder) -> None:
    """(Re)write every record file from what was measured so far."""
    results["summary"] = summarize(results)
    (out / "tpu_v5e.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    (out / "tpu_v5e.md").write_text(markdown(results))
    (out / "trainer.log").write_text("".join(f"{line}\n" for _, line in recorder.lines))
    (out / "contract.json").write_text(json.dumps(contract(recorder.lines, results), indent=2) + "\n")


# -- the run -------------------------------------------------------------------------------------------------------


def measure(
    device: Any, args: argparse.Namespace, base: str, results: dict[str, Any], save: Callable[[], None]
) -> None:
    """Every part in order, the records rewritten after each; parts past ``--deadline`` are skipped."""
    import jax

    started = time.monotonic()
    chip = build_chip(device, args.length, [int(b) for b in args.batches.split(",")])
    state_bytes = sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(chip.abstract))
    params = sum(leaf.size for leaf in jax.tree.leaves(chip.abstract["params"]))
    results["model"] = {
        **QWEN3_0_6B,
        "length": args.length,
        "batch": chip.batch,
        "parameters": params,
        "state_bytes": state_bytes,
        "compile_trials": chip.compile_trials,
    }
    state, init_seconds = init_state(chip)
    state, seconds = run_steps(chip, state, args.steps + 1)
    results["steps"] = {
        "init_seconds": round(init_seconds, 3),
        "first_seconds": seconds[0],
        "steady_seconds": seconds[1:],
    }
    results["counts"] = {"steps_run": chip.steps_run, "last_step": chip.last_step}
    save()
    for name in args.formats.split(","):
        if time.monotonic() - started > args.deadline:
            results.setdefault("skipped", []).append(f"format {name}: past --deadline {args.deadline} s")
            continue
        state, results["formats"][name] = measure_format(chip, state, name, base, args)
        results["counts"] = {"steps_run": chip.steps_run, "last_step": chip.last_step}
        save()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the records")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each figure (default 3)")
    parser.add_argument("--steps", type=int, default=10, help="steady steps timed (default 10)")
    parser.add_argument("--length", type=int, default=512, help="tokens per sequence (default 512)")
    parser.add_argument("--batches", default="2,1", help="batches to try, largest first, until one fits in HBM")
    parser.add_argument("--formats", default="pathways,ocdbt", help="storage formats, of: " + ",".join(FORMATS))
    parser.add_argument("--recompile-formats", default="pathways", help="formats whose recoveries also recompile")
    parser.add_argument(
        "--keep",
        type=int,
        default=None,
        help="max_num_checkpoints_to_keep (default: all, as MaxText; 1 deletes in save)",
    )
    parser.add_argument("--dir", default=None, help="where the checkpoints go (default: a temporary folder)")
    parser.add_argument("--deadline", type=float, default=420.0, help="start no new format after this many seconds")
    args = parser.parse_args(argv)
    unknown = set(args.formats.split(",")) - set(FORMATS)
    if unknown:
        parser.error(f"--formats: unknown {sorted(unknown)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Refuse without a TPU (exit 2); else measure, leaving the records in ``--out``."""
    args = parse_args(argv)
    try:
        device = require_tpu()
    except NoTpuError as exc:
        print(f"benchmarks.tpu_v5e: {exc}: run it on a TPU host (benchmarks/RESULTS.md, 'TPU v5e')", file=sys.stderr)
        return EXIT_NO_TPU
    args.out.mkdir(parents=True, exist_ok=True)
    recorder = start_logging()
    base = tempfile.mkdtemp(prefix="tpu-v5e-", dir=args.dir)
    results: dict[str, Any] = {"argv": list(sys.argv), "environment": environment(device, base), "formats": {}}
    try:
        measure(device, args, base, results, lambda: write_records(args.out, results, recorder))
    finally:
        write_records(args.out, results, recorder)
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
