"""The ``ctxwin`` command.

ctxwin answers questions over documents longer than a model's context window and measures which
way does it best: T-RAG (plain chunks), CC-RAG (each chunk in the light of the whole document)
and SWB-RAG (a global summary and sliding windows). `ctxwin run` builds the three indexes of a
documents folder (the sample without options) as runs of the experiment's Dagster instance,
`ctxwin evaluate` answers and scores its questions and writes the verdict, `ctxwin ask` asks
them yourself, `ctxwin dev` opens the Dagster UI. Every option's default is in `--help`.

One module per group of subcommands; each adds its own subcommands, their arguments and the
function that runs them with a ``register(sub)`` function. The machinery they share (homes,
launching and following runs) is in :mod:`ctxwin_dagster.runner`.
"""

from __future__ import annotations

import argparse
from importlib.metadata import PackageNotFoundError, version

from ctxwin_dagster.cli import ask, compare, dev, pipeline, plan, prune, qa, review
from ctxwin_dagster.cli.options import DefaultsFormatter, Subcommands

__all__ = ["COMMANDS", "build_parser", "main"]

#: The modules of the subcommands, in the order ``ctxwin --help`` lists them.
COMMANDS = (pipeline, compare, plan, ask, dev, prune, qa, review)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctxwin", description=__doc__.split("\n\n")[1], formatter_class=DefaultsFormatter
    )
    parser.add_argument("--version", action="version", version=f"ctxwin {_version()}")
    sub = Subcommands(parser, dest="command", required=True)
    for module in COMMANDS:
        module.register(sub)
    return parser


def _version() -> str:
    try:
        return version("ctxwin")
    except PackageNotFoundError:  # run from a checkout that was not installed
        return "(not installed)"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))
