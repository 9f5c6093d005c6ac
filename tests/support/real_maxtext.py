"""Real MaxText, run once per test session; its logs, exit codes and checkpoints shared between tests.

Fixture (registered from tests/conftest.py):

- ``real_maxtext`` (session): a `RealMaxText`. MaxText 0.2.5 from ``.venv-maxtext`` (built with
  ``make maxtext`` when it is missing; local/maxtext_env.py says how it is found) trains the tiny model of
  `train_argv` on CPU for 30 steps with a checkpoint every 10, into ``<dir>/out/t1``; then the same command
  again (a finished run re-run: exit 1), a resume to 40 steps in a copy of the run, and two refused command
  lines (an unknown key, a bad value). The runs share one import of MaxText (tests/support/
  real_maxtext_driver.py): about 100 s in all on 2 loaded cores.

Under pytest-xdist each worker has its own session: the first to take the lock next to the shared directory
runs MaxText, the others wait on the lock and read what it wrote (a failure included, never run twice).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from elastic_training.local import maxtext_env

MODULE: Final = "maxtext.trainers.pre_train.train"
RUN_NAME: Final = "t1"
STEPS: Final = 30
CHECKPOINT_PERIOD: Final = 10
RESUME_STEPS: Final = 40
UNKNOWN_KEY: Final = "not_a_maxtext_key"
BAD_VALUE: Final = ("steps", "many")
# What `make maxtext` and the whole plan may take on a loaded 2-core machine before the fixture gives up.
BUILD_TIMEOUT_S: Final = 900
RUN_TIMEOUT_S: Final = 900
DRIVER: Final = Path(__file__).with_name("real_maxtext_driver.py")


def model_args(base_output_directory: Path | str, *, run_name: str = RUN_NAME, steps: int = STEPS) -> list[str]:
    """The tiny model's ``key=value`` arguments (docs/local-cluster.md): what both trainers are given."""
    return [
        f"run_name={run_name}",
        f"base_output_directory={base_output_directory}",
        "hardware=cpu",
        "skip_jax_distributed_system=true",
        "dataset_type=synthetic",
        f"steps={steps}",
        f"checkpoint_period={CHECKPOINT_PERIOD}",
        "enable_checkpointing=true",
        "per_device_batch_size=1",
        "max_target_length=64",
        "base_emb_dim=64",
        "base_num_query_heads=4",
        "base_num_kv_heads=4",
        "base_mlp_dim=128",
        "base_num_decoder_layers=2",
        "head_dim=16",
        "vocab_size=256",
        "attention=dot_product",
        "log_period=5",
    ]


@dataclass(frozen=True)
class RealRun:
    """One invocation of real MaxText: its arguments, exit code and log."""

    name: str
    argv: tuple[str, ...]
    exit_code: int
    seconds: float
    log_path: Path

    @property
    def log(self) -> str:
        """Its stdout and stderr."""
        return self.log_path.read_text(errors="replace")


@dataclass(frozen=True)
class RealMaxText:
    """What the session's real MaxText runs left: never modify it (copy a run directory to damage it)."""

    python: Path
    config: Path  # MaxText's own base.yml, inside its venv
    directory: Path
    runs: dict[str, RealRun]
    import_seconds: float

    @property
    def run_directory(self) -> Path:
        """``<base_output_directory>/t1`` of the 30-step run."""
        return self.directory / "out" / RUN_NAME

    @property
    def checkpoints(self) -> Path:
        """Its ``checkpoints/`` root: steps 0, 10, 20 and 29."""
        return self.run_directory / "checkpoints"


def maxtext_python() -> Path:
    """Real MaxText's interpreter; ``make maxtext`` builds it first when there is none."""
    python = maxtext_env.maxtext_python()
    if python is not None:
        return python
    if os.environ.get(maxtext_env.PYTHON_ENV) is not None:
        pytest.skip(f"{maxtext_env.PYTHON_ENV} is empty: real MaxText is turned off")
    # One build at a time: each xdist worker that needs it waits for the first one's.
    with _locked(Path(tempfile.gettempdir()) / "elastic-training-make-maxtext.lock"):
        python = maxtext_env.maxtext_python()
        if python is not None:
            return python
        done = subprocess.run(
            ["make", "maxtext"],
            cwd=maxtext_env.REPOSITORY_ROOT,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
        python = maxtext_env.maxtext_python()
    if done.returncode != 0 or python is None:
        raise RuntimeError(f"make maxtext failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return python


def _plan(directory: Path, config: Path) -> list[dict[str, Any]]:
    out, resumed = directory / "out", directory / "resumed"
    trained = [str(config), *model_args(out)]
    runs = [
        ("train", trained, None),
        ("rerun", trained, None),
        ("resume", [str(config), *model_args(resumed, steps=RESUME_STEPS)], [str(out), str(resumed)]),
        ("unknown_key", [str(config), *model_args(directory / "refused"), f"{UNKNOWN_KEY}=1"], None),
        ("bad_value", [str(config), *model_args(directory / "refused"), "=".join(BAD_VALUE)], None),
    ]
    return [
        {"name": name, "argv": argv, "log": str(directory / f"{name}.log"), "copy": copy} for name, argv, copy in runs
    ]


def _run_once(directory: Path) -> dict[str, Any]:
    python = maxtext_python()
    config = (
        Path(
            subprocess.run(
                [str(python), "-c", "import maxtext, os; print(os.path.dirname(maxtext.__file__))"],
                capture_output=True,
                text=True,
                check=True,
                timeout=RUN_TIMEOUT_S,
            ).stdout.strip()
        )
        / "configs"
        / "base.yml"
    )
    plan = _plan(directory, config)
    (directory / "plan.json").write_text(json.dumps({"module": MODULE, "runs": plan}))
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [str(python), str(DRIVER), str(directory / "plan.json"), str(directory / "result.json")],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the MaxText driver failed ({done.returncode}):\n{done.stderr[-4000:]}")
    result = json.loads((directory / "result.json").read_text())
    return {"python": str(python), "config": str(config), "plan": plan, **result}


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _shared_directory(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    base = tmp_path_factory.getbasetemp()
    # xdist workers' base temps are siblings under one per-session parent; a lone session uses its own.
    return (base.parent if worker_id != "master" else base) / "real-maxtext"


@pytest.fixture(scope="session")
def real_maxtext(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> RealMaxText:
    """Real MaxText's runs of this session (run by the first worker that asks; the rest wait for it)."""
    directory = _shared_directory(tmp_path_factory, worker_id)
    with _locked(directory.with_suffix(".lock")):
        summary = directory / "summary.json"
        if not summary.exists():
            directory.mkdir(parents=True, exist_ok=True)
            try:
                outcome: dict[str, Any] = {"ok": _run_once(directory)}
            except Exception as exc:  # recorded so that the other workers fail the same way, not run it again
                outcome = {"error": f"{type(exc).__name__}: {exc}"}
            summary.write_text(json.dumps(outcome))
        outcome = json.loads(summary.read_text())
    if "error" in outcome:
        pytest.fail(f"real MaxText could not run: {outcome['error']}", pytrace=False)
    ok = outcome["ok"]
    runs = {
        run["name"]: RealRun(
            name=run["name"],
            argv=tuple(run["argv"]),
            exit_code=ok["runs"][run["name"]]["exit_code"],
            seconds=ok["runs"][run["name"]]["seconds"],
            log_path=Path(run["log"]),
        )
        for run in ok["plan"]
    }
    return RealMaxText(
        python=Path(ok["python"]),
        config=Path(ok["config"]),
        directory=directory,
        runs=runs,
        import_seconds=ok["import_seconds"],
    )


def describe(real: RealMaxText) -> str:
    """One line per run (for assertion messages)."""
    return "; ".join(f"{r.name}: exit {r.exit_code} in {r.seconds}s" for r in real.runs.values()) + (
        f" (import {real.import_seconds}s, python {sys.version_info[:2]})"
    )
