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
