"""Every ``ctxwin`` option explains itself: help text, its default, one spelling of variants."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from ctxwin_dagster.cli import build_parser
from ctxwin_dagster.cli.options import every_parser


def _options() -> list[tuple[str, argparse.ArgumentParser, argparse.Action]]:
    out = []
    for parser in every_parser(build_parser()):
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction)) or isinstance(action.choices, dict):
                continue
            out.append((parser.prog, parser, action))
    return out


def test_every_option_and_argument_has_help() -> None:
    missing = [
        f"{prog} {a.option_strings[0] if a.option_strings else a.dest}" for prog, _, a in _options() if not a.help
    ]
    assert not missing, f"options without help: {missing}"


def test_every_default_is_shown_in_help() -> None:
    unshown = []
    for prog, parser, action in _options():
        if action.default in (None, False, [], "") or not action.option_strings:
            continue
        shown = parser._get_formatter()._get_help_string(action) or ""
        if "default" not in shown.lower():
            unshown.append(f"{prog} {action.option_strings[0]}")
    assert not unshown, f"defaults not shown: {unshown}"
    dev = next(p for p in every_parser(build_parser()) if p.prog == "ctxwin dev")
    assert "the UI's port (default: 3000)" in " ".join(dev.format_help().split())


def test_version_and_description() -> None:
    out = subprocess.run([sys.executable, "-m", "ctxwin_dagster.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and re.fullmatch(r"ctxwin \d+\.\d+\.\d+\n", out.stdout), out
    text = build_parser().format_help()
    for word in ("T-RAG", "CC-RAG", "SWB-RAG", "ctxwin evaluate", "ctxwin ask", "ctxwin dev"):
        assert word in text


@pytest.mark.parametrize("given", ["t", "t_rag", "T-RAG"])
def test_variants_are_spelled_one_way_everywhere(given: str) -> None:
    parser = build_parser()
    assert parser.parse_args(["review", "export", "x", "--a", given]).a == "t_rag"
    assert parser.parse_args(["ask", "q", "--variant", given]).variant == "t_rag"
    assert parser.parse_args(["run", "--rebuild-index", given]).rebuild_index == ["t_rag"]


def test_an_unknown_variant_names_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["review", "export", "x", "--a", "tt"])
    assert "unknown variant 'tt'; use t, cc or swb" in capsys.readouterr().err
