"""Helpers for the workload tests: run the real entry points as processes."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

# The local cluster and its clients, for the tests that run the operator's JobSet (test_pathways_session.py).
from tests.local.cluster.conftest import cluster, k8s

__all__ = ["cluster", "k8s"]

REPO = Path(__file__).resolve().parents[3]
# Workload processes share one persistent XLA compilation cache, so only the first of them compiles.
COMPILATION_CACHE = Path(tempfile.gettempdir()) / "elastic-training-tests-xla-cache"
COMPILATION_CACHE_ENV = {
    "JAX_COMPILATION_CACHE_DIR": str(COMPILATION_CACHE),
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
}


def workload_env(**extra: str) -> dict[str, str]:
    """The test environment for a workload process: CPU JAX, no cluster, no inherited XLA device count."""
    env = {k: v for k, v in os.environ.items() if k not in {"XLA_FLAGS", "JOBSET_NAME", "KUBECONFIG"}}
    env.update(
        {
            "JAX_PLATFORMS": "cpu",
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": str(REPO),
            **COMPILATION_CACHE_ENV,
        },
        **extra,
    )
    return env


def run_module(
    module: str, args: Sequence[str], *, timeout: float = 600, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run `python -m module args...` to completion, capturing its output.

    ``timeout`` only bounds a hung process: a run returns as soon as it ends. 120 s was met by runs that take
    20 s on an idle box, on a loaded one (JAX start and compile on a shared CPU).
    """
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env=workload_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_module(module: str, args: Sequence[str], **env: str) -> subprocess.Popen[str]:
    """Start `python -m module args...` with stdout (and stderr) piped line by line."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env=workload_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )


@pytest.fixture
def small_model() -> list[str]:
    """Model keys that keep a test run to a few milliseconds per step."""
    return ["base_emb_dim=32", "base_num_decoder_layers=1", "vocab_size=32", "max_target_length=16"]


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    """A small run trained in this process (one slice): checkpoints 0, 10, 20 and 29. Returns (base, keys)."""
    from elastic_training.local.workloads.config import TrainConfig, parse_args
    from elastic_training.local.workloads.slices import StaticSliceHealth
    from elastic_training.local.workloads.trainer import Trainer

    base = str(tmp_path_factory.mktemp("trained"))
    keys = [f"base_output_directory={base}", "run_name=trained", "base_emb_dim=32", "vocab_size=32"]
    config = parse_args(TrainConfig, [*keys, "steps=30", "checkpoint_period=10"])
    assert Trainer(config, StaticSliceHealth(1)).run() == 0
    return base, keys
