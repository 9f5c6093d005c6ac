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


OLD_IMPORT = re.compile(r"""(^\s*|["'])(from|import)\s+(operators|plugin|cli|local)(\.|\s|$)""", re.M)
OLD_MODULE_STRING = re.compile(
    r"""["'](operators|plugin|cli|local)\.[a-z_]+"""  # a dotted module path in a string
    r"""|["']-m["'],\s*["'](operators|plugin|cli|local)\b"""  # an argv's "-m", "cli"
    r"""|-m (operators|plugin|cli|local)\b"""  # `python -m operators.rbac` in a message or docstring
    r"""|(files|import_module|find_spec)\(["'](operators|plugin|cli|local)\b"""  # a package named by a string
)


def test_code_names_the_one_installed_namespace() -> None:
    """Installed, the distribution's only top-level package is `elastic_training` (pyproject.toml): an import or a
    module path (``python -m``, a trigger classpath, a patch target) under a bare ``operators``/``plugin``/
    ``cli``/``local`` works only in this checkout, where the repository root is on sys.path, and nowhere else."""
    hits = [
        f"{path.relative_to(ROOT)}:{text[: match.start()].count(chr(10)) + 1}: {match.group(0).strip()}"
        for path in _files()
        if path.suffix == ".py" and path.name != Path(__file__).name
        for text in [path.read_text()]
        for pattern in (OLD_IMPORT, OLD_MODULE_STRING)
        for match in pattern.finditer(text)
    ]
    assert hits == []


def test_the_namespace_links_each_part_of_the_repository() -> None:
    for part in ("operators", "plugin", "cli", "local"):
        link = ROOT / "elastic_training" / part
        assert link.is_symlink(), f"elastic_training/{part} must be a symlink to ../{part} (CONTRIBUTING.md)"
        assert link.resolve() == (ROOT / part).resolve()
