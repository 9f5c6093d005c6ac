"""``elastic-training validate PATH``: is the newest (or a given) Orbax step whole and readable?

Exit status: 0 valid, 1 not valid or no step, 2 usage error or a broken environment (no Google credentials).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import TYPE_CHECKING, TextIO

from elastic_training.cli.arguments import int_at_least

if TYPE_CHECKING:
    from elastic_training.operators.checkpoints import CheckpointReport

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)\s*$", re.IGNORECASE)


_non_negative = int_at_least(0)


def _size(text: str) -> int:
    match = _SIZE_RE.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size (e.g. 512M, 2G): {text!r}")
    number, unit = float(match.group(1)), match.group(2).upper()
    return int(number * 1024 ** " KMGT".index(unit or " "))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``validate`` arguments."""
    parser.description = __doc__.splitlines()[0] if __doc__ else None
    parser.add_argument(
        "path",
        metavar="PATH",
        help="checkpoints directory, MaxText run directory (containing checkpoints/), or one step; "
        "local path or gs://bucket/prefix",
    )
    parser.add_argument("--step", type=_non_negative, help="validate this step instead of the newest")
    parser.add_argument(
        "--deep", action="store_true", help="also restore arrays with Orbax on CPU and check they are finite"
    )
    parser.add_argument(
        "--deep-budget",
        type=_size,
        default=1 << 30,
        metavar="SIZE",
        help="bytes restored per item in --deep mode before sampling arrays (default 1G)",
    )
    parser.add_argument("--min-step", type=_non_negative, help="the step must be at least this")
    parser.add_argument(
        "--reference-step",
        type=_non_negative,
        help="the step must have the same arrays, shapes and dtypes as this step",
    )
    parser.add_argument(
        "--items",
        default="items",
        help="comma-separated item directories every step must have (default: items)",
    )
    parser.add_argument(
        "--no-commit-marker",
        action="store_true",
        help="accept steps without commit_success.txt (local checkpoints from Orbax < 0.12.3 only)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    """Validate and print; return the exit status."""
    from elastic_training.operators.checkpoints import (
        DeepOptions,
        MissingLibraryError,
        StorageError,
        ValidationOptions,
        validate_checkpoints,
    )
    from elastic_training.operators.checkpoints.storage import CredentialsError, is_gcs, split_gcs

    path: str = args.path
    if is_gcs(path):
        try:
            split_gcs(path)
        except ValueError as exc:
            return _usage(str(exc))
        if args.no_commit_marker:
            return _usage("--no-commit-marker: commit_success.txt is always required on gs://")
    elif not os.path.exists(path):
        return _usage(f"no such file or directory: {path}")
    elif not os.path.isdir(path):
        return _usage(f"not a directory: {path}")
    items = tuple(i.strip() for i in args.items.split(",") if i.strip())
    if any("/" in i for i in items):
        return _usage(f"--items takes directory names, not paths: {args.items!r}")
    options = ValidationOptions(
        require_commit_marker=not args.no_commit_marker, required_items=items, min_step=args.min_step
    )
    deep = DeepOptions(budget_bytes=args.deep_budget) if args.deep else None
    try:
        report = validate_checkpoints(
            path.rstrip("/") or "/",
            step=args.step,
            options=options,
            deep=deep,
            reference_step=args.reference_step,
        )
    except (CredentialsError, MissingLibraryError) as exc:  # the environment, not the checkpoint: say what to set
        return _usage(str(exc))
    except StorageError as exc:
        print(f"elastic-training validate: error: {_safe(str(exc))}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_table(report, sys.stdout)
    return 0 if report.valid else 1


def _usage(message: str) -> int:
    print(f"elastic-training validate: error: {_safe(message)}", file=sys.stderr)
    return 2


def _safe(text: str) -> str:
    """Names can hold control characters or undecodable bytes: show them escaped."""
    escaped = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in escaped)


def _human(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def print_table(report: CheckpointReport, out: TextIO) -> None:
    """The short human-readable form."""
    out.write(f"checkpoints: {_safe(report.root)}\n")
    if report.steps:
        out.write(f"{'STEP':>10}  {'VALID':5}  {'FILES':>7}  {'SIZE':>10}  PROBLEMS\n")
    for v in report.steps:
        mark = "*" if v.step == report.target_step else " "
        first = _safe(str(v.problems[0])) if v.problems else ""
        more = f" (+{len(v.problems) - 1} more)" if len(v.problems) > 1 else ""
        out.write(
            f"{mark}{v.step:>9}  {'yes' if v.valid else 'no':5}  {v.files:>7}  {_human(v.bytes):>10}  {first}{more}\n"
        )
    if report.ignored:
        shown = ", ".join(f"{_safe(i.name)} ({i.reason})" for i in report.ignored[:10])
        extra = f", +{len(report.ignored) - 10} more" if len(report.ignored) > 10 else ""
        out.write(f"ignored: {shown}{extra}\n")
    target = report.target
    if report.error:
        out.write(f"error: {_safe(report.error)}\n")
    if target is not None and target.problems:
        out.write(f"step {target.step} problems:\n")
        for p in target.problems:
            out.write(f"  - {_safe(str(p))}\n")
    from elastic_training.operators.checkpoints.answers import Answer, answer

    verdict = "VALID" if report.valid else "INVALID"
    if target is not None and not report.valid and answer(target) is Answer.UNKNOWN:
        verdict = "UNKNOWN"  # could not look (storage, or a check's missing library): not evidence either way
    out.write(
        f"step {report.target_step if report.target_step is not None else '-'}: {verdict}; "
        f"latest valid step: {report.latest_valid_step if report.latest_valid_step is not None else '-'}\n"
    )
