"""The real import graph of the installed ``elastic_training`` package, drawn as Mermaid for docs/architecture.md.

The graph is grimp's (the library import-linter checks its contracts on, pyproject.toml ``[tool.importlinter]``), built
from the installed package, so it follows the ``elastic_training/`` symlinks the way the wheel does. Two views: the
parts of the repository (``cli``, ``plugin``, ``local``, ``operators``) with the number of imports on each arrow, and
the modules of one run's data flow inside ``operators`` (the ``data-flow`` contract's layers). ``make graph`` writes
both between the markers in docs/architecture.md; tests/test_architecture.py fails when the page is out of date.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import grimp

ROOT = "elastic_training"
PARTS = ("cli", "plugin", "local", "operators")
# The data-flow contract's modules, top layer first (pyproject.toml, contract "data-flow").
FLOW = (
    "pipeline",
    "elastic_operator",
    "jobset_operator",
    "checkpoint_operator",
    "lifecycle",
    "triggers",
    "hooks",
    "observations",
    "manifests",
    "policy",
    "spec",
)
BEGIN, END = "<!-- import-graph:begin (make graph) -->", "<!-- import-graph:end -->"
PAGE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def _part(module: str) -> str | None:
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 and pieces[0] == ROOT and pieces[1] in PARTS else None


def part_edges(graph: grimp.ImportGraph) -> Counter[tuple[str, str]]:
    """Imports between the parts of the repository, counted by (importer, imported) part."""
    edges: Counter[tuple[str, str]] = Counter()
    for module in graph.modules:
        source = _part(module)
        for imported in graph.find_modules_directly_imported_by(module):
            target = _part(imported)
            if source and target and source != target:
                edges[(source, target)] += 1
    return edges


def flow_edges(graph: grimp.ImportGraph) -> list[tuple[str, str]]:
    """Direct imports between the data-flow modules of ``operators``."""
    prefix = f"{ROOT}.operators."
    return sorted(
        (source, target)
        for source in FLOW
        for target in FLOW
        if graph.direct_import_exists(importer=prefix + source, imported=prefix + target)
    )


def mermaid(graph: grimp.ImportGraph) -> str:
    """Both views as Mermaid blocks, ready for the page."""
    parts = ["```mermaid", "flowchart TD"]
    parts += [f"    {a} -->|{n}| {b}" for (a, b), n in sorted(part_edges(graph).items())]
    parts += ["```", "", "```mermaid", "flowchart TD"]
    parts += [f"    {a} --> {b}" for a, b in flow_edges(graph)]
    parts += ["```"]
    return "\n".join(parts)


def section(graph: grimp.ImportGraph) -> str:
    return f"{BEGIN}\n{mermaid(graph)}\n{END}"


def current_section(page: str) -> str:
    start, end = page.index(BEGIN), page.index(END) + len(END)
    return page[start:end]


def main() -> int:
    graph = grimp.build_graph(ROOT)
    page = PAGE.read_text()
    PAGE.write_text(page.replace(current_section(page), section(graph)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
