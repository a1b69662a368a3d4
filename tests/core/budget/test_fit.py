"""check_fit, ensure_fit and truncate_text."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ctxwin_dagster.core.budget.fit import ContextOverflowError, check_fit, ensure_fit, truncate_text
from ctxwin_dagster.core.budget.limits import ModelLimits
from ctxwin_dagster.core.budget.strategies import STRATEGIES
from ctxwin_dagster.core.budget.tokens import TokenCounter

TC = TokenCounter()


def msg(role, n_words, tag=""):
    return {"role": role, "content": (tag + " " if tag else "") + "word " * n_words}


# ---------------------------------------------------------------- check_fit


def test_check_fit_arithmetic_against_model_limits():
    limits = ModelLimits("m", context_length=1_000, max_completion_tokens=200)
    text = "hello" + " hello" * 899  # 900 tokens
    r = check_fit(text, limits=limits)
    assert (r.prompt_tokens, r.limit, r.reserved_completion) == (900, 800, 200)
    assert (r.fits, r.overflow, r.headroom) == (False, 100, 0)
    r2 = check_fit(text, limits=limits, reserved_completion=50)
    assert (r2.fits, r2.limit, r2.headroom, r2.overflow) == (True, 950, 50, 0)


def test_check_fit_counts_messages_with_overhead():
    msgs = [{"role": "user", "content": "hello"}]
    r = check_fit(msgs, max_prompt_tokens=100)
    assert r.prompt_tokens == TC.count_messages(msgs)
    assert r.fits and r.context_length == 100


def test_check_fit_uses_the_registry_for_named_models():
    r = check_fit("hi", model="gpt-4o", reserved_completion=1_000)
    assert r.limit == 127_000 and r.limits_known
    assert r.encoding and r.model == "gpt-4o"


def test_check_fit_needs_a_limit():
    with pytest.raises(ValueError, match="pass model=, limits= or max_prompt_tokens="):
        check_fit("hi")


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 5_000), st.integers(0, 3_000), st.integers(0, 3_000))
def test_fit_arithmetic_property(context, completion, n_words):
    assume(1 <= completion <= context)
    limits = ModelLimits("m", context_length=context, max_completion_tokens=completion)
    text = " ".join(["w"] * n_words)
    r = check_fit(text, limits=limits)
    assert r.limit == context - completion
    assert r.fits == (r.prompt_tokens <= r.limit)
    assert r.overflow == max(0, r.prompt_tokens - r.limit)
    assert r.prompt_tokens - r.overflow <= r.limit or r.fits


# ---------------------------------------------------------------- truncate_text


@pytest.mark.parametrize("side", ["head", "tail", "middle"])
def test_truncate_text_sides(side):
    text = " ".join(f"w{i}" for i in range(300))
    cut = truncate_text(text, 50, side=side, marker="")
    assert cut.tokens_after <= 50 and TC.count(cut.text) == cut.tokens_after
    assert cut.tokens_before == TC.count(text) and cut.truncated
    if side == "tail":
        assert text.startswith(cut.text)
    elif side == "head":
        assert text.endswith(cut.text)
    else:
        assert cut.text.startswith(text[:10]) and cut.text.endswith(text[-10:])


def test_truncate_text_marker_counts_towards_budget():
    text = "alpha " * 100
    cut = truncate_text(text, 20, side="middle")
    assert " … " in cut.text and cut.tokens_after <= 20


def test_truncate_text_short_text_unchanged():
    cut = truncate_text("short text", 100)
    assert cut.text == "short text" and not cut.truncated and cut.removed_tokens == 0


def test_truncate_text_validation():
    with pytest.raises(ValueError, match="side must be"):
        truncate_text("x", 1, side="left")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_tokens must be >= 0"):
        truncate_text("x", -1)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=400), st.integers(0, 60), st.sampled_from(["head", "tail", "middle"]))
def test_truncate_text_never_exceeds_budget(text, budget, side):
    cut = truncate_text(text, budget, side=side)
    assert TC.count(cut.text) <= max(budget, 0) or cut.tokens_after == cut.tokens_before <= budget
    assert cut.tokens_after <= cut.tokens_before


# ---------------------------------------------------------------- ensure_fit


def conversation():
    return [
        msg("system", 20, "SYSTEM"),
        msg("user", 100, "FIRST"),
        msg("assistant", 100, "A1"),
        msg("user", 100, "U2"),
        msg("assistant", 100, "A2"),
        msg("user", 100, "U3"),
        msg("assistant", 100, "A3"),
        msg("user", 30, "LAST"),
    ]


def contents(report):
    return [m["content"].split()[0] for m in report.messages]


def test_fitting_messages_are_unchanged():
    msgs = conversation()
    r = ensure_fit(msgs, max_prompt_tokens=10_000)
    assert r.messages == msgs and not r.changed and r.tokens_before == r.tokens_after


def test_keep_recent_may_drop_the_system_message():
    r = ensure_fit(conversation(), max_prompt_tokens=200, strategy="keep_recent")
    assert contents(r) == ["A3", "LAST"]
    assert r.dropped_indices == (0, 1, 2, 3, 4, 5)
    assert r.fits


def test_keep_bookends_keeps_system_and_recent():
    r = ensure_fit(conversation(), max_prompt_tokens=250, strategy="keep_bookends")
    assert contents(r) == ["SYSTEM", "A3", "LAST"]
    assert [m["content"].split()[0] for m in r.dropped_messages] == ["FIRST", "A1", "U2", "A2", "U3"]


def test_sliding_window_drops_whole_turns():
    r = ensure_fit(conversation(), max_prompt_tokens=250, strategy="sliding_window")
    # A3 alone would fit, but it belongs to the U3 turn, which does not: history starts at a user message.
    assert contents(r) == ["SYSTEM", "LAST"]
    r2 = ensure_fit(conversation(), max_prompt_tokens=300, strategy="sliding_window")
    assert contents(r2) == ["SYSTEM", "U3", "A3", "LAST"]


def test_smart_truncate_keeps_system_first_user_and_recent():
    r = ensure_fit(conversation(), max_prompt_tokens=300, strategy="smart_truncate")
    assert contents(r) == ["SYSTEM", "FIRST", "A3", "LAST"]


def test_oversized_kept_message_is_cut_and_reported():
    msgs = [msg("system", 10, "SYSTEM"), msg("user", 2_000, "HUGE")]
    r = ensure_fit(msgs, max_prompt_tokens=500, strategy="keep_bookends")
    assert r.fits and r.tokens_after <= 500
    assert set(r.truncated) == {1}
    assert r.truncated[1].removed_tokens > 1_000
    assert r.messages[0] == msgs[0]
    assert "cut message 1" in r.summary()


def test_oversized_without_truncation_raises_with_the_fix():
    msgs = [msg("system", 10), msg("user", 2_000)]
    with pytest.raises(ContextOverflowError, match="truncate_oversized=True"):
        ensure_fit(msgs, max_prompt_tokens=500, truncate_oversized=False)


def test_impossible_fit_raises():
    msgs = [{"role": "user", "content": "x"}] * 3
    with pytest.raises(ContextOverflowError, match="cannot fit"):
        ensure_fit(msgs, max_prompt_tokens=5, strategy="keep_bookends")


def test_custom_strategy_callable():
    def drop_assistants(messages, budget, count):
        return [m for m in messages if m["role"] != "assistant"]

    r = ensure_fit(conversation(), max_prompt_tokens=600, strategy=drop_assistants)
    assert r.strategy == "drop_assistants"
    assert contents(r) == ["SYSTEM", "FIRST", "U2", "U3", "LAST"]
    assert r.dropped_indices == (2, 4, 6)


def test_custom_strategy_that_does_not_fit_is_an_error():
    with pytest.raises(ContextOverflowError, match="drop or shorten more"):
        ensure_fit(conversation(), max_prompt_tokens=100, strategy=lambda m, b, c: m)


def test_invalid_arguments_name_the_fix():
    with pytest.raises(ValueError, match="unknown strategy 'nope'"):
        ensure_fit(conversation(), max_prompt_tokens=10, strategy="nope")
    with pytest.raises(ValueError, match="messages is empty"):
        ensure_fit([], max_prompt_tokens=10)
    with pytest.raises(TypeError, match="truncate_text"):
        ensure_fit("text", max_prompt_tokens=10)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'role'"):
        ensure_fit([{"content": "x"}], max_prompt_tokens=10)


roles = st.sampled_from(["user", "assistant", "user", "system"])
message_lists = st.lists(
    st.tuples(roles, st.integers(0, 200)).map(lambda t: {"role": t[0], "content": "tok " * t[1]}),
    min_size=1,
    max_size=12,
)


@settings(max_examples=80, deadline=None)
@given(message_lists, st.integers(40, 1_500), st.sampled_from(STRATEGIES))
def test_truncation_never_grows_and_keeps_system(messages, limit, strategy):
    before = TC.count_messages(messages)
    try:
        r = ensure_fit(messages, max_prompt_tokens=limit, strategy=strategy)
    except ContextOverflowError:
        # only when the overhead of what must be kept cannot fit
        return
    assert r.tokens_after <= r.tokens_before == before
    assert r.tokens_after <= limit and r.fits
    assert r.tokens_after == TC.count_messages(r.messages)
    kept_plus_dropped = len(r.messages) + len(r.dropped_indices)
    assert kept_plus_dropped == len(messages)
    if strategy != "keep_recent":
        system_in = [m for m in messages if m["role"] == "system"]
        system_out = [m for m in r.messages if m["role"] == "system"]
        assert len(system_out) == len(system_in)
    # the newest message always survives (possibly shortened)
    assert r.messages[-1]["role"] == messages[-1]["role"]
