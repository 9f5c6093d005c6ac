"""The repository stands alone: no file points at the workspace it was developed in, and every relative link in
the README and docs/ names a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ["README.md", "docs", "operators", "local", "cli", "tests", "benchmarks", "dags", "plugin", "deploy"]
# Spelled in pieces so this file does not match itself.
OUTSIDE = re.compile(
    "(" + "|".join([r"\.\./" + "shared", "shared" + r"/(DESIGN|STYLE|reference)", "DESIGN" + r"\.md"]) + ")"
)
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")


def _files() -> list[Path]:
    found: list[Path] = []
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found += [p for p in path.rglob("*") if p.suffix in {".py", ".md", ".yaml", ".yml"} and p.is_file()]
    return found


def test_nothing_points_outside_the_repository() -> None:
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert hits == []


def test_relative_links_in_the_readme_and_docs_resolve() -> None:
    broken = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target, _ in LINK.findall(path.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (path.parent / target).exists():
                broken.append(f"{path.relative_to(ROOT)} -> {target}")
    assert broken == []
