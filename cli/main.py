"""The `elastic-training` console script: one subcommand module per verb.

Each subcommand module keeps its heavy imports inside `run`, so `validate` never pays for
the local cluster's imports and vice versa.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

# verb -> module exposing `add_arguments(parser)` and `run(args) -> int`
_COMMANDS: dict[str, tuple[str, str]] = {
    "cluster": ("elastic_training.cli.cluster", "run and control the one-machine Kubernetes stand-in"),
    "validate": ("elastic_training.cli.validate", "validate Orbax checkpoints on local disk or gs://"),
    "demo": ("elastic_training.cli.demo", "train on the local cluster, kill a slice, print the recovery report"),
    "airflow": (
        "elastic_training.cli.airflow",
        "Airflow's UI, scheduler, dag-processor and triggerer on 127.0.0.1 with the local cluster",
    ),
    "advise": ("elastic_training.cli.advise", "the checkpoint period that fits a run report's own failure rate"),
}


class _Parser(argparse.ArgumentParser):
    """argparse, with the user's text escaped in errors: a usage error stays one line whatever was typed."""

    def error(self, message: str) -> NoReturn:
        super().error("".join(c if c.isprintable() else repr(c)[1:-1] for c in message))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="elastic-training", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for verb, (module_name, help_text) in _COMMANDS.items():
        sub_parser = sub.add_parser(verb, help=help_text)
        sub_parser.set_defaults(_module=module_name)
        importlib.import_module(module_name).add_arguments(sub_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    module = importlib.import_module(args._module)
    result: int = module.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
