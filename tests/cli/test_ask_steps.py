"""`ctxwin ask` says what it is doing when a step takes longer than a second."""

from __future__ import annotations

import io
import time

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


def test_the_command_starts_light_and_its_choices_are_the_askers():
    """`ctxwin ask` keeps its choices itself so it starts without the asking stack (a question to
    the ask server then costs a fraction of a second); they must be the asker's own."""
    import subprocess
    import sys

    from ctxwin_dagster.ask import ASK_MODES
    from ctxwin_dagster.cli import ask
    from ctxwin_dagster.core.methods.sliding_qa import DEFAULT_OVERLAP_TOKENS
    from ctxwin_dagster.core.retrieval.settings import RETRIEVAL_PRESETS

    assert ask.MODES == ASK_MODES and tuple(sorted(RETRIEVAL_PRESETS)) == ask.RETRIEVALS
    assert ask.DEFAULT_OVERLAP == DEFAULT_OVERLAP_TOKENS
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, ctxwin_dagster.cli; print(sorted(sys.modules))"],
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
