"""The workloads' real entry points run as processes (``python -m ...``), with CPU JAX and one XLA compilation
cache shared by every process of the session."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
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
