"""Expectations against a reference step: same tree, and (via Orbax metadata) same shapes and dtypes."""

from __future__ import annotations

from elastic_training.operators.checkpoints.libraries import require_restore_libraries
from elastic_training.operators.checkpoints.problems import Finding, Problem
from elastic_training.operators.checkpoints.validation import StepVerdict

Signature = dict[str, tuple[tuple[int, ...], str]]


def array_signature(item_path: str) -> Signature:
    """``{array name: (shape, dtype)}`` of a PyTree item, read with Orbax (no array data).

    `MissingLibraryError` when Orbax or JAX is not installed (the ``[deep]`` extra).
    """
    require_restore_libraries("comparing shapes and dtypes with a reference step")
    import orbax.checkpoint as ocp
    from etils import epath

    tree = ocp.PyTreeCheckpointHandler().metadata(epath.Path(item_path)).tree
    out: Signature = {}

    def visit(node: object, prefix: tuple[str, ...]) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                visit(v, (*prefix, str(k)))
        elif isinstance(node, list | tuple):
            for i, v in enumerate(node):
                visit(v, (*prefix, str(i)))
        elif hasattr(node, "shape"):
            shape = tuple(int(d) for d in (getattr(node, "shape", None) or ()))
            out[".".join(prefix)] = (shape, str(getattr(node, "dtype", "")))

    visit(tree, ())
    return out


def compare_trees(verdict: StepVerdict, reference: StepVerdict) -> list[Finding]:
    """Array names per item must match the reference step's (cheap: from `_METADATA` only)."""
    ref = {i.name: set(i.arrays) for i in reference.items if i.layout}
    problems: list[Finding] = []
    for item in verdict.items:
        if item.name not in ref or not item.layout:
            continue
        missing = sorted(ref[item.name] - set(item.arrays))
        extra = sorted(set(item.arrays) - ref[item.name])
        if missing or extra:
            problems.append(
                Finding(
                    Problem.TREE_MISMATCH,
                    item.name,
                    f"vs step {reference.step}: missing {_few(missing)}, unexpected {_few(extra)}",
                )
            )
    return problems


def compare_signatures(item: str, actual: Signature, expected: Signature, ref_step: int) -> list[Finding]:
    """Shape and dtype of every array present in both."""
    problems: list[Finding] = []
    for name in sorted(actual.keys() & expected.keys()):
        (shape, dtype), (ref_shape, ref_dtype) = actual[name], expected[name]
        if shape != ref_shape:
            problems.append(
                Finding(
                    Problem.SHAPE_MISMATCH,
                    f"{item}/{name}",
                    f"shape {list(shape)}, step {ref_step} has {list(ref_shape)}",
                )
            )
        if dtype != ref_dtype:
            problems.append(
                Finding(Problem.DTYPE_MISMATCH, f"{item}/{name}", f"dtype {dtype}, step {ref_step} has {ref_dtype}")
            )
    return problems


def _few(names: list[str], limit: int = 5) -> str:
    if not names:
        return "none"
    shown = ", ".join(names[:limit])
    return shown + (f" (+{len(names) - limit})" if len(names) > limit else "")
