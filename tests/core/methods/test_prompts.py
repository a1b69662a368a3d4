"""Prompt templates and the parsers of their replies (pure Python, no model)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ctxwin_dagster.core.methods.prompts import (
    LANGUAGES,
    NO_ANSWER,
    NOT_IN_DOCUMENTS,
    TEMPLATES,
    PromptOutputError,
    PromptTemplate,
    detect_language,
    extract_json,
    format_chunk_batch,
    format_passages,
    format_summaries,
    get_template,
    parse_answer,
    parse_swb_contexts,
    parse_window_answer,
    summary_block,
)

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "eu_ai_act"  # DE text; EN is the sample document
EN_TEXT = Path(__file__).resolve().parents[3] / "data" / "documents" / "eu_ai_act_2024_1689_EN.txt"
NAMES = ("summarize_segment", "summarize_overview", "cc_context", "swb_batch", "answer", "window_answer")

SAMPLE_VARS = {
    "summarize_segment": dict(part=1, parts=2, text="TEXT-BODY", max_tokens=4000),
    "summarize_overview": dict(parts=2, summaries=format_summaries(["S1", "S2"]), max_tokens=4000),
    "cc_context": dict(document="WHOLE-DOC", chunk="CHUNK-TEXT"),
    "swb_batch": dict(
        summary="SUMMARY", before="BEFORE", chunks=format_chunk_batch([("id1", "C1")]), after="AFTER", n=1
    ),
    "answer": dict(passages=format_passages([("id1", "P1")]), question="QUESTION?"),
    "window_answer": dict(window=2, windows=5, text="WINDOW-TEXT", question="QUESTION?"),
}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("language", LANGUAGES)
def test_every_template_exists_and_renders_its_variables(name, language):
    tpl = get_template(name, language)
    assert (tpl.name, tpl.language) == (name, language)
    assert tpl.id == f"{name}.{language}.v{tpl.version}"
    msgs = tpl.render(**SAMPLE_VARS[name])
    assert msgs[-1]["role"] == "user"
    text = "\n".join(m["content"] for m in msgs)
    for value in SAMPLE_VARS[name].values():
        if isinstance(value, str) and value.isupper():
            assert value in text
    assert not re.search(r"\{[a-z_]+\}", text), "a placeholder was left unformatted"


def test_registry_covers_both_languages_for_every_template():
    assert {(n, lang) for n in NAMES for lang in LANGUAGES} == set(TEMPLATES)


def test_unknown_language_falls_back_to_english_and_unknown_name_fails():
    assert get_template("answer", "fr").language == "en"
    assert get_template("answer", None).language == "en"
    assert get_template("answer", "DE").language == "de"
    with pytest.raises(KeyError, match="known"):
        get_template("nope")


def test_render_rejects_missing_and_unknown_variables():
    tpl = get_template("cc_context")
    with pytest.raises(KeyError, match="chunk"):
        tpl.render(document="d")
    with pytest.raises(TypeError, match="does not use"):
        tpl.render(document="d", chunk="c", chunck="typo")


def test_values_with_braces_are_not_formatted():
    msgs = get_template("cc_context").render(document="a {b} {{c}} {0}", chunk="{chunk}")
    assert "a {b} {{c}} {0}" in msgs[0]["content"] and "<chunk>\n{chunk}\n</chunk>" in msgs[0]["content"]


def test_template_validation():
    with pytest.raises(ValueError, match="empty user"):
        PromptTemplate("x", "1", "en", "", "")
    with pytest.raises(ValueError, match="unknown variables"):
        PromptTemplate("x", "1", "en", "", "{a}", defaults={"b": 1})
    t = PromptTemplate("x", "2", "en", "sys {a}", "user {b} {a}")
    assert t.variables == ("a", "b")
    assert t.render(a=1, b=2) == [{"role": "system", "content": "sys 1"}, {"role": "user", "content": "user 2 1"}]


def test_cc_context_follows_the_contextual_retrieval_form():
    content = get_template("cc_context").render(document="DOC", chunk="CHUNK")
    assert len(content) == 1  # one user message: the document is the prompt's prefix (prompt caching)
    text = content[0]["content"]
    assert text.startswith("<document>\nDOC\n</document>")
    assert text.index("</document>") < text.index("<chunk>\nCHUNK\n</chunk>")
    for phrase in ("situate", "search retrieval", "Answer only with the succinct context"):
        assert phrase in text


def test_swb_batch_carries_summary_windows_numbered_chunks_and_the_json_shape():
    batch = format_chunk_batch([("aaa111", "first"), ("bbb222", "second")])
    msgs = get_template("swb_batch").render(summary="SUM", before="BEF", chunks=batch, after="AFT", n=2)
    user = msgs[-1]["content"]
    order = [
        user.index(x) for x in ("SUM", "BEF", 'number="1" chunk_id="aaa111"', 'number="2" chunk_id="bbb222"', "AFT")
    ]
    assert order == sorted(order)
    assert '{"contexts": [{"chunk_id": "<chunk_id>", "context": "<context>"}]}' in user
    assert "2 chunks" in user


def test_summary_prompts_carry_the_token_budget():
    seg = get_template("summarize_segment").render(part=1, parts=3, text="T", max_tokens=1234)
    ov = get_template("summarize_overview", "de").render(parts=3, summaries="S", max_tokens=777)
    assert "at most 1234 tokens" in seg[-1]["content"]
    assert "höchstens 777 Tokens" in ov[-1]["content"]


def test_answer_prompt_asks_for_citations_and_the_sentinel():
    user = get_template("answer").render(passages=format_passages([("c1", "P")]), question="Q?")[-1]["content"]
    assert "[c1]\nP" in user and "square brackets" in user and NOT_IN_DOCUMENTS in user


def test_window_answer_optional_summary_block():
    plain = get_template("window_answer").render(window=1, windows=2, text="W", question="Q")
    with_sum = get_template("window_answer", "de").render(
        window=1, windows=2, text="W", question="Q", summary_block=summary_block("SUMMARY", "de")
    )
    assert "<summary>" not in plain[-1]["content"]
    assert with_sum[-1]["content"].startswith("Zusammenfassung des ganzen Dokuments:\n<summary>\nSUMMARY")
    assert NO_ANSWER in plain[-1]["content"] and '"confidence"' in plain[-1]["content"]
    assert summary_block("", "en") == ""


def test_detect_language_on_the_real_ai_act_texts():
    en = EN_TEXT.read_text(encoding="utf-8")
    de = (CORPUS / "eu_ai_act_2024_1689_DE.txt").read_text(encoding="utf-8")
    assert detect_language(en) == "en"
    assert detect_language(de) == "de"
    assert detect_language(de[300_000:302_000]) == "de"
    assert detect_language("") == "en"


# --------------------------------------------------------------------------------------
# Parsers
# --------------------------------------------------------------------------------------

IDS = ["0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"]


def _reply(entries):
    return json.dumps({"contexts": [{"chunk_id": i, "context": c} for i, c in entries]})


def test_parse_swb_valid_object():
    assert parse_swb_contexts(_reply([(IDS[0], "A"), (IDS[1], "B")]), IDS) == {IDS[0]: "A", IDS[1]: "B"}


@pytest.mark.parametrize(
    "reply",
    [
        "```json\n" + _reply([(IDS[0], "A"), (IDS[1], "B")]) + "\n```",  # fenced
        "Here you go:\n" + _reply([(IDS[0], "A"), (IDS[1], "B")]) + "\nLet me know!",  # prose around
        json.dumps([{"chunk_id": IDS[0], "context": "A"}, {"chunk_id": IDS[1], "context": "B"}]),  # bare list
        _reply([(IDS[0][:10], "A"), (IDS[1][:8], "B")]),  # abbreviated ids
        json.dumps({"contexts": [{"chunk_id": 1, "context": "A"}, {"chunk_id": "2", "context": "B"}]}),  # numbers
        json.dumps({IDS[0]: "A", IDS[1]: "B"}),  # id -> context mapping
        "```json\n" + _reply([(IDS[0], "A"), (IDS[1], "B")]),  # fence never closed
    ],
)
def test_parse_swb_repairs(reply):
    assert parse_swb_contexts(reply, IDS) == {IDS[0]: "A", IDS[1]: "B"}


@pytest.mark.parametrize(
    ("reply", "match"),
    [
        ("I cannot help with that.", "no JSON"),
        (_reply([(IDS[0], "A")]), "missing"),
        (_reply([(IDS[0], "A"), (IDS[1], "  ")]), "no context text"),
        (_reply([(IDS[0], "A"), ("zzzzzzzzzz", "B")]), "names no chunk"),
        (_reply([(IDS[0], "A"), (IDS[0], "A2"), (IDS[1], "B")]), "more than one"),
    ],
)
def test_parse_swb_rejects_invalid(reply, match):
    with pytest.raises(PromptOutputError, match=match):
        parse_swb_contexts(reply, IDS)


def test_parse_swb_lenient_returns_the_valid_part():
    assert parse_swb_contexts(_reply([(IDS[0], "A")]), IDS, strict=False) == {IDS[0]: "A"}
    with pytest.raises(PromptOutputError):
        parse_swb_contexts("garbage", IDS, strict=False)


def test_extract_json_prefers_the_first_object():
    assert extract_json('x {"a": 1} y {"b": 2}') == {"a": 1}
    assert extract_json("[1, 2]") == [1, 2]
    with pytest.raises(PromptOutputError):
        extract_json("no json { here")


def test_parse_answer_citations_and_sentinel():
    a = parse_answer(f"Social scoring is prohibited [{IDS[0]}]. Also [{IDS[1][:9]}, {IDS[0]}] and [1].", IDS)
    assert a.cited_chunk_ids == (IDS[0], IDS[1]) and not a.not_found
    assert a.unknown_citations == ("1",)
    for reply in ("NOT_IN_DOCUMENTS", " NOT_IN_DOCUMENTS. ", '"NOT_IN_DOCUMENTS"', "not in documents"):
        parsed = parse_answer(reply, IDS)
        assert parsed.not_found and parsed.text == NOT_IN_DOCUMENTS and parsed.cited_chunk_ids == ()


def test_parse_window_answer():
    found = parse_window_answer('```json\n{"answer": "Art. 5", "confidence": 1.7, "evidence": "q"}\n```')
    assert found.found and found.answer == "Art. 5" and found.confidence == 1.0 and found.evidence == "q"
    none = parse_window_answer('{"answer": "NO_ANSWER", "confidence": 0.2, "evidence": ""}')
    assert not none.found and none.answer == NO_ANSWER
    assert not parse_window_answer("NO_ANSWER").found
    with pytest.raises(PromptOutputError):
        parse_window_answer('{"confidence": 0.5}')
    with pytest.raises(PromptOutputError):
        parse_window_answer('{"answer": "x", "confidence": "high"}')


def test_prompts_module_is_plain_python():
    import subprocess
    import sys

    code = (
        "import sys, ctxwin_dagster.core.methods.prompts\n"
        "print(','.join(sorted(n for n in sys.modules if n.split('.')[0] in ('dagster','ragas','lancedb','numpy','torch'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
