"""Questions generated from a document: every kept question's reference span is found in its
document, and every draft that a server left unchecked (schema ignored) is counted and rejected."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxwin_dagster.backends.chat.backend import OpenAIChatBackend
from ctxwin_dagster.backends.tasks.question_writer import SOURCE, QuestionWriter
from ctxwin_dagster.core.evaluation.qa.generation import (
    GenerationReport,
    Passage,
    closed_book_correct,
    far_pairs,
    is_duplicate,
    kind_counts,
    lexical_answer,
    locate_answer_in,
    locate_quote,
    passages_of,
    spread,
)
from ctxwin_dagster.core.evaluation.qa.items import validate_spans
from ctxwin_dagster.core.methods.prompts.schemas import qa_schema, substring_pattern
from ctxwin_dagster.core.text.sentences import split_sentences
from ctxwin_dagster.testing import FakeOpenAIServer
from ctxwin_dagster.testing.question_writer import question_writer_responder

ROOT = Path(__file__).resolve().parents[3]
DOC = "squad_Normans"
TEXT = (ROOT / "data" / "documents" / f"{DOC}.txt").read_text(encoding="utf-8")


def _writer(srv: FakeOpenAIServer, **kwargs) -> QuestionWriter:
    chat = OpenAIChatBackend(model="writer", base_url=srv.base_url, api_key="k", max_retries=0)
    return QuestionWriter(chat, **kwargs)


def test_passages_pairs_and_counts_cover_the_document():
    passages = passages_of(TEXT)
    assert passages and all(p.end - p.start <= 1200 or len(p.sentences) == 1 for p in passages)
    assert all(TEXT[p.start : p.end].strip() == TEXT[p.start : p.end] for p in passages)
    picked = spread(passages, 4)
    assert len(picked) == 4 and picked[-1].start > len(TEXT) / 2  # spread, not the first four
    assert spread(passages, 4, seed=1) != picked
    for a, b in far_pairs(TEXT, passages, 3):
        assert b.start - a.end >= max(2000, len(TEXT) // 4)
    assert kind_counts(5) == {"single": 3, "two_passages": 1, "unanswerable": 1}
    assert kind_counts(1, ["unanswerable"]) == {"unanswerable": 1}
    with pytest.raises(ValueError, match="unknown question kind"):
        kind_counts(3, ["multiple_choice"])


def test_quotes_and_answers_are_located_or_refused():
    passage = passages_of(TEXT)[0]
    first = TEXT[passage.sentences[0][0] : passage.sentences[0][1]]
    span, how = locate_quote(TEXT, [passage], first)
    assert TEXT[span[0] : span[1]] == first and how == "exact"
    span, how = locate_quote(TEXT, [passage], "  ".join(first.split(" ")))
    assert how == "whitespace" and span == passage.sentences[0]
    span, how = locate_quote(TEXT, [passage], first.replace("Normans", "Normands", 1))
    assert how.startswith("fuzzy:") and span == passage.sentences[0]
    assert locate_quote(TEXT, [passage], "The Vikings sailed to Greenland in a storm.") == (None, "none")
    span, how = locate_answer_in(TEXT, passage.sentences[0], "normandy")
    assert TEXT[span[0] : span[1]] == "Normandy" and how == "case"
    assert locate_answer_in(TEXT, passage.sentences[0], "Greenland") == (None, "none")
    sentences = split_sentences(TEXT)
    assert lexical_answer("Who was the Norse leader Rollo?", TEXT, sentences) is not None
    assert lexical_answer("What colour was the banner of the treaty?", TEXT, sentences) is None
    assert closed_book_correct("It is France.", "France") and not closed_book_correct("I do not know", "France")
    assert is_duplicate("Who led the Normans?", ["who led the normans"])
    assert not is_duplicate("Who led the Normans?", ["When was Normandy founded?"])


def test_answers_decoded_locally_are_words_of_their_quote():
    import re

    sentence = "The Normans gave their name to Normandy, a region in France."
    pattern = re.compile(substring_pattern(sentence))
    assert pattern.match("Normandy, a region") and pattern.match("France")
    assert not pattern.match("Normandyx") and not pattern.match("a region in Spain")
    local = qa_schema(
        "qa_check", {"quote": [sentence, ""]}, ["answer"], max_chars=80, answer_within="quote", no_answer="NONE"
    )
    [with_words, empty] = local.schema["anyOf"]
    assert empty["properties"]["answer"] == {"const": "NONE"}
    assert with_words["properties"]["answer"]["pattern"].startswith("^")  # JSON Schema patterns search unless anchored
    server = qa_schema("qa_check", {"quote": [sentence, ""]}, ["answer"])
    assert "anyOf" not in server.schema and server.schema["additionalProperties"] is False


def test_questions_from_a_server_with_structured_output_are_verified():
    with FakeOpenAIServer(responder=question_writer_responder(), models=["writer"], api_key="k") as srv:
        writer = _writer(srv)
        result = writer.generate(DOC, TEXT, count=5, title=f"{DOC}.txt")
    report = result.report
    kinds = [item.meta["kind"] for item in result.items]
    assert kinds.count("single") == 3 and kinds.count("unanswerable") == 1, report.lines()
    assert kinds.count("two_passages") == 1, report.lines()
    validate_spans(result.items, {DOC: TEXT})
    for item in result.items:
        assert item.meta["source"] == SOURCE and item.meta["reply_format"] == "schema"
        if item.meta["kind"] == "single":
            [(s, e)] = item.reference_spans
            assert TEXT[s:e] == item.reference_answer
            [(qs, qe)] = item.meta["quotes"]
            assert qs <= s and e <= qe
        elif item.meta["kind"] == "two_passages":
            (a, b) = item.reference_spans
            assert b[0] - a[1] >= 2000
        else:
            assert item.is_impossible and item.reference_spans == ()
    assert len({i.question_id for i in result.items}) == 5
    assert report.span_found_rate() == 1.0
    assert (
        report.checks["round_trip"] >= 4 and report.checks["closed_book"] >= 4 and report.checks["answerability"] >= 1
    )
    assert sum(report.schema_enforced.values()) == sum(report.drafted.values())


def test_replies_that_ignore_the_schema_are_counted_and_rejected_never_kept():
    faults = {"misquote": 3, "loose_answer": 4, "prose": 5, "answers_unanswerable": 2}
    with FakeOpenAIServer(
        responder=question_writer_responder(faults), models=["writer"], api_key="k", structured="ignore"
    ) as srv:
        writer = _writer(srv)
        result = writer.generate(DOC, TEXT, count=8, kinds=["single", "unanswerable"])
    report = result.report
    rejected = {reason for (_kind, reason) in report.rejected}
    assert {"quote_not_found", "answer_not_found", "unparsed", "answered_by_model"} <= rejected, report.lines()
    # the server took the schema and did not hold its replies to it: only the checks catch that
    assert sum(report.schema_enforced.values()) == sum(report.drafted.values())
    validate_spans(result.items, {DOC: TEXT})
    for item in result.items:
        assert "made up" not in item.question and item.reference_answer != "something else entirely"
        if not item.is_impossible:
            [(s, e)] = item.reference_spans
            assert TEXT[s:e] == item.reference_answer
    drafted = sum(report.drafted.values())
    assert drafted == sum(report.kept.values()) + sum(report.rejected.values())
    assert "rejected:" in "\n".join(report.lines())


def test_a_document_without_prose_gets_no_questions_and_says_so():
    table = "\n".join(f"| {i} | {i * 2} |" for i in range(50))
    with FakeOpenAIServer(responder=question_writer_responder(), models=["writer"], api_key="k") as srv:
        result = _writer(srv).generate("numbers", table, count=3)
    assert result.items == [] and result.report.no_passages == ["numbers"]
    assert "no passage" in "\n".join(result.report.lines())
    assert isinstance(GenerationReport().to_dict()["span_found_rate"], type(None))
    assert isinstance(passages_of(TEXT)[0], Passage)
