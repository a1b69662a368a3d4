"""The command has one style: each module of ``ctxwin_dagster.cli`` adds its own subcommands."""

from __future__ import annotations

import argparse
import pkgutil

import ctxwin_dagster.cli as cli
from ctxwin_dagster.cli.options import Subcommands


def _subcommands(parser: argparse.ArgumentParser, inherited=None, path=()):
    """(path, the function that runs it) for every leaf subcommand."""
    func = parser.get_default("func") or inherited
    sub = Subcommands.of(parser)
    if sub is None:
        yield path, func
        return
    for name, child in sub.parsers.items():
        yield from _subcommands(child, func, path + (name,))


def test_every_command_module_registers_its_own_subcommands():
    modules = {m.name for m in pkgutil.iter_modules(cli.__path__)} - {"__main__", "options"}  # options: shared by all
    assert modules == {m.__name__.rsplit(".", 1)[1] for m in cli.COMMANDS}, "a cli module outside COMMANDS"
    assert all(callable(getattr(m, "register", None)) for m in cli.COMMANDS)


def test_every_subcommand_runs_a_function_of_its_own_module():
    leaves = dict(_subcommands(cli.build_parser()))
    assert {p[0] for p in leaves} == {"run", "evaluate", "compare", "plan", "ask", "dev", "prune", "qa", "review"}
    assert ("review", "table4") in leaves and ("qa", "import") in leaves
    for path, func in leaves.items():
        assert callable(func), f"ctxwin {' '.join(path)} runs nothing"
        assert func.__module__.startswith("ctxwin_dagster.cli."), f"ctxwin {' '.join(path)} runs {func.__module__}"
