"""The layering rules of docs/architecture.md §2 hold, are enforced by import-linter, and the page's graph is current.

``lint-imports`` is the command ``make lint`` runs; here it runs against the installed package (the contracts
hold) and against a copy of the package with one forbidden import added (the contracts catch it), so a contract
that can never fail cannot pass this file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from tests.support import import_graph

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **({"PYTHONPATH": str(pythonpath)} if pythonpath else {})}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache", str(ROOT / "pyproject.toml")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_contracts_hold() -> None:
    done = _lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 kept, 0 broken" in done.stdout


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the ``elastic_training`` package with its symlinks followed, importable before the editable one."""
    top = tmp_path_factory.mktemp("copy")
    shutil.copytree(
        ROOT / "elastic_training", top / "elastic_training", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    return top


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("operators/policy.py", "import elastic_training.local.cluster.nodes", "cli over plugin and local"),
        ("operators/policy.py", "import airflow.sdk", "import no Airflow"),
        ("operators/spec.py", "import elastic_training.operators.hooks", "one way through a run"),
        ("local/cluster/nodes.py", "import elastic_training.operators.spec", "only the shared constants"),
    ],
)
def test_a_forbidden_import_breaks_the_lint(package_copy: Path, module: str, line: str, contract: str) -> None:
    path = package_copy / "elastic_training" / module
    original = path.read_text()
    path.write_text(f"{original}\n{line}  # deliberately forbidden\n")
    try:
        done = _lint_imports(package_copy, pythonpath=package_copy)
    finally:
        path.write_text(original)
    assert done.returncode == 1, done.stdout + done.stderr
    broken = [block for block in done.stdout.split("\n\n") if "BROKEN" in block]
    assert any(contract in block for block in broken), done.stdout
    assert "1 broken" in done.stdout


def test_the_pages_graph_is_the_packages() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    assert import_graph.current_section(page) == import_graph.section(grimp.build_graph("elastic_training")), (
        "docs/architecture.md's import graph is out of date: run `make graph`"
    )
