"""`ctxwin ask` says what it is doing when a step takes longer than a second."""

from __future__ import annotations

import io
import time

import pytest

from ctxwin_dagster.cli.ask import SlowSteps


def test_a_slow_step_is_named_and_a_quick_one_is_not():
    out = io.StringIO()
    steps = SlowSteps(out, after=0.05)
    with steps.step("loading the models"):
        time.sleep(0.5)
    with SlowSteps(out, after=60).step("searching"):
        pass
    time.sleep(0.1)  # a timer that fired late would write now
    assert out.getvalue() == "ctxwin ask: loading the models…\n"


def test_the_command_starts_light():
    """`ctxwin ask` starts without the asking stack (a question to the ask server then costs a
    fraction of a second): its choices come from light modules."""
    import subprocess
    import sys

    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, ctxwin_dagster.cli, ctxwin_dagster.cli.ask; print(sorted(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for heavy in ("'dagster'", "'lancedb'", "'torch'", "'numpy'", "'ctxwin_dagster.ask.service'"):
        assert heavy not in loaded, f"`ctxwin` imports {heavy} before it knows the command"


def test_the_opening_option_reaches_the_retrieval_setting():
    import argparse

    from ctxwin_dagster.cli.ask import _add_arguments, ask_kwargs, question_options

    parser = argparse.ArgumentParser()
    _add_arguments(parser)
    default = ask_kwargs(question_options(parser.parse_args(["Who are the parties?"])))["retrieval"]
    assert default.opening_chars == 500
    none = ask_kwargs(question_options(parser.parse_args(["Who are the parties?", "--opening-chars", "0"])))
    assert none["retrieval"].opening_chars == 0 and "opening" not in none["retrieval"].describe()


def test_every_retrieval_option_is_a_flag_and_reaches_the_settings():
    """The flags come from the one table of retrieval options: each sets its settings field."""
    import argparse

    from ctxwin_dagster.cli.ask import _add_arguments, ask_kwargs, question_options
    from ctxwin_dagster.core.retrieval.options import RETRIEVAL_OPTIONS
    from ctxwin_dagster.core.retrieval.settings import RetrievalSettings

    parser = argparse.ArgumentParser()
    _add_arguments(parser)
    focus_values = {int: "7", float: "0.5"}
    for option in RETRIEVAL_OPTIONS:
        mode = {"num_neighbors": "neighbors", "context_window_size": "budget"}.get(option.field, "focus")
        base = ["q"] if mode == "focus" else ["q", "--retrieval", "paper"]
        flag = [option.flag] if option.kind is bool else [option.flag, focus_values[option.kind]]
        settings: RetrievalSettings = ask_kwargs(question_options(parser.parse_args(base + flag)))["retrieval"]
        expected = True if option.kind is bool else option.kind(focus_values[option.kind])
        assert getattr(settings, option.field) == expected, option
        assert settings.enhance_mode == mode, option
    no = ask_kwargs(question_options(parser.parse_args(["q", "--no-hybrid", "--no-question-parts"])))["retrieval"]
    assert no.hybrid is False and no.question_parts is False
    with pytest.raises(SystemExit):
        parser.parse_args(["q", "--neighbors", "1", "--focus-chars", "10"])
