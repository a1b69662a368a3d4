"""The ``ctxwin`` command.

``ctxwin run`` adds one partition per new document file and submits one run per document whose
assets are out of date to the Dagster instance of the experiment's home (the sample's:
``$DAGSTER_HOME`` or ``.dagster_home``; another folder's: ``data/experiments/<name>/dagster_home``),
as the code location of ``workspace.yaml``, so the runs are the UI's own (``ctxwin dev`` opens it).

One module per group of subcommands; each adds its own subcommands, their arguments and the
function that runs them with a ``register(sub)`` function. The machinery they share (homes,
launching and following runs) is in :mod:`ctxwin_dagster.runner`.
"""

from __future__ import annotations

import argparse

from ctxwin_dagster.cli import ask, dev, pipeline, plan, prune, qa, review

__all__ = ["COMMANDS", "build_parser", "main"]

#: The modules of the subcommands, in the order ``ctxwin --help`` lists them.
COMMANDS = (pipeline, plan, ask, dev, prune, qa, review)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctxwin", description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))
