"""The real ``kubectl`` against the local cluster, and its table output read back by column (skip when it is not
installed, ``KUBECTL`` is None: a test module skips on it)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

KUBECTL = shutil.which("kubectl")
TIMEOUT = 120


def kubectl(
    kubeconfig: Path, *args: str, check: bool = True, stdin: str | None = None, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """Run kubectl with only this cluster in view (no user kubeconfig, no cache shared between runs)."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "KUBECACHEDIR": str(kubeconfig.parent / "kube-cache")}
    assert KUBECTL is not None
    done = subprocess.run(
        [KUBECTL, *args], env=env, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done


def header(output: str) -> list[str]:
    """The column names of kubectl's table output (split on runs of two or more spaces)."""
    return re.split(r"\s{2,}", output.splitlines()[0].strip())


def rows(output: str) -> dict[str, list[str]]:
    """Table rows by their first cell."""
    return {line.split()[0]: re.split(r"\s{2,}", line.strip()) for line in output.splitlines()[1:] if line.strip()}
