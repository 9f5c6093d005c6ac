"""``elastic-training advise REPORT.json``: the checkpoint period that fits a run's own failure rate.

REPORT.json is the run report ``ElasticJobSetOperator`` returns (its XCom ``return_value``, or
``report`` of a failed task; ``-`` reads standard input). The model and its inputs are those of
:mod:`operators.advice`; ``--save-seconds`` and ``--checkpoint-period`` stand in for values a report
does not carry (reports written before they were recorded). Exit status: 0 advice printed, 2 the
file or its contents cannot give advice (the message says why).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any, TextIO

from elastic_training.cli.arguments import int_at_least

MAX_REPORT_BYTES = 16 * 1024 * 1024


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
    return value


_positive_int = int_at_least(1)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``advise`` arguments."""
    parser.add_argument("report", metavar="REPORT.json", help="a run report (JSON object), or - for stdin")
    parser.add_argument(
        "--save-seconds", type=_non_negative_float, help="checkpoint save time, when the report has none"
    )
    parser.add_argument("--checkpoint-period", type=_positive_int, help="configured period, when the report has none")
    parser.add_argument("--json", action="store_true", help="print the advice as JSON")


class _Refused(Exception):
    pass


def _read(path: str, stdin: TextIO) -> dict[str, Any]:
    try:
        if path == "-":
            text = stdin.read(MAX_REPORT_BYTES + 1)
        else:
            with open(path, encoding="utf-8") as handle:
                text = handle.read(MAX_REPORT_BYTES + 1)
    except FileNotFoundError:
        raise _Refused(f"{path}: no such file") from None
    except IsADirectoryError:
        raise _Refused(f"{path}: is a directory, not a report file") from None
    except UnicodeDecodeError:
        raise _Refused(f"{path}: not UTF-8 text (a run report is JSON)") from None
    except OSError as error:
        raise _Refused(f"{path}: cannot be read: {error.strerror or error}") from None
    if len(text) > MAX_REPORT_BYTES:
        raise _Refused(f"{path}: larger than {MAX_REPORT_BYTES} bytes; a run report is far smaller")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise _Refused(f"{path}: not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise _Refused(f"{path}: a JSON {type(data).__name__}, not a run report object")
    if "target_step" not in data:
        raise _Refused(f"{path}: not a run report (no 'target_step'; see docs/operators.md, 'The run report')")
    return data


def run(args: argparse.Namespace, *, stdin: TextIO | None = None, out: TextIO | None = None) -> int:
    """Print the advice; 2 with a message on stderr when there is none to give."""
    from elastic_training.operators.advice import AdviceError, advise
    from elastic_training.operators.run_report import ReportError, RunReport

    out = out or sys.stdout
    try:
        data = _read(args.report, stdin or sys.stdin)
        try:
            report = RunReport.from_json(data)
        except ReportError as error:
            raise _Refused(f"{args.report}: {error}") from None
        if args.save_seconds is not None:
            report = dataclasses.replace(report, checkpoint_save_seconds=args.save_seconds)
        if args.checkpoint_period is not None:
            report = dataclasses.replace(report, checkpoint_period=args.checkpoint_period)
        try:
            advice = advise(report.advice_inputs())
        except AdviceError as error:
            hint = {
                "checkpoint_save_seconds": " (pass --save-seconds)",
                "checkpoint_period": " (pass --checkpoint-period)",
            }
            extra = next((h for k, h in hint.items() if k in str(error)), "")
            raise _Refused(f"{args.report}: {error}{extra}") from None
    except _Refused as refused:
        print(f"elastic-training advise: {refused}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(advice.to_json(), out, indent=2)
        out.write("\n")
        return 0
    mtbf = "none observed" if advice.mtbf_seconds is None else f"{advice.mtbf_seconds:.1f} s"
    lines = [
        advice.summary(),
        "",
        f"{'':24}{'period (steps)':>16}{'expected goodput':>18}",
        f"{'configured':24}{advice.configured_period:>16}{advice.configured_goodput:>18.2%}",
        f"{'best for this run':24}{advice.optimal_period:>16}{advice.optimal_goodput:>18.2%}",
        "",
        f"failures {advice.failures}, mean time between failures {mtbf}, save {advice.checkpoint_save_seconds:.3g} s, "
        f"step {advice.step_seconds:.3g} s, recovery {advice.recovery_seconds:.3g} s, run {advice.steps} steps",
        f"model: {advice.model}",
    ]
    if advice.capped_at_run_length:
        lines.append("the optimum is longer than the run: checkpoint only at its end")
    out.write("\n".join(lines) + "\n")
    return 0
