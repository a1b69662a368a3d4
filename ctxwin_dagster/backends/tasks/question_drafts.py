"""A question writer's draft: the model's reply read, and its quotes and answer found in the document.

:func:`read_draft` turns the reply to a draft prompt of one of the three kinds
(:data:`~ctxwin_dagster.core.evaluation.qa.generation.KINDS`) into a :class:`Draft`: the reply's
fields read (:func:`reply_fields`), the question checked (not empty, a question, not giving
away its answer), each quote located in its passage and the answer in its quote (a two-passage
answer must draw on both quotes). A reply that fails is rejected, and the reason counted in the
:class:`~ctxwin_dagster.core.evaluation.qa.generation.GenerationReport`. The checks that follow
(round trip, closed book) are :class:`~ctxwin_dagster.backends.tasks.question_writer.QuestionWriter`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ctxwin_dagster.backends.base import ChatResult
from ctxwin_dagster.backends.chat.structured import ENFORCED
from ctxwin_dagster.core.evaluation.metrics.answers import normalize_answer
from ctxwin_dagster.core.evaluation.qa.generation import (
    GenerationReport,
    Passage,
    content_words,
    locate_answer_in,
    locate_quote,
)
from ctxwin_dagster.core.evaluation.qa.items import Span
from ctxwin_dagster.core.methods.prompts import PromptOutputError
from ctxwin_dagster.core.methods.prompts.parsing import extract_json

__all__ = ["Draft", "read_draft", "reply_fields"]


@dataclass
class Draft:
    """A drafted question: its kind, question and answer, where they were found (reference spans,
    quotes, how loosely), the passages it was drafted from, and what the checks learnt."""

    kind: str
    question: str
    answer: str
    spans: list[Span]
    passages: list[Passage]
    quotes: list[Span] = field(default_factory=list)
    found: str = ""
    reply_format: str = ""
    closed_book_answer: str = ""


def _looseness(how: str) -> int:
    """How loosely a span was found: exact 0, any case 1, other white space 2, fuzzy 3."""
    order = ("exact", "case", "whitespace")
    return order.index(how) if how in order else len(order)


def reply_fields(result: ChatResult | None, names: Sequence[str]) -> dict[str, str] | None:
    """The reply's JSON fields ``names``, stripped; None when there is no reply, it is not JSON, or a
    field is missing or not a string."""
    if result is None:
        return None
    try:
        data = extract_json(result.text)
    except PromptOutputError:
        return None
    if not isinstance(data, dict) or not all(isinstance(data.get(n), str) for n in names):
        return None
    return {n: data[n].strip() for n in names}


def read_draft(
    kind: str, text: str, group: list[Passage], result: ChatResult | None, report: GenerationReport
) -> Draft | None:
    """The draft in ``result`` (the model's reply for ``group``), its quotes and answer located in
    ``text``; None, with the reason counted in ``report``, when the reply cannot be used."""
    if result is None:
        report.reject(kind, "too_long")
        return None
    if result.record.reply_format in ENFORCED:
        report.schema_enforced[kind] += 1
    names = {
        "single": ["quote", "answer", "question"],
        "two_passages": ["quote_1", "quote_2", "answer", "question"],
        "unanswerable": ["missing", "question"],
    }[kind]
    data = reply_fields(result, names)
    if data is None:
        report.reject(kind, "unparsed")
        return None
    if not data["question"] or (kind != "unanswerable" and not data["answer"]):
        report.reject(kind, "empty")
        return None
    if not data["question"].endswith("?"):
        report.reject(kind, "not_a_question")
        return None
    if kind != "unanswerable" and normalize_answer(data["answer"]) in normalize_answer(data["question"]):
        report.reject(kind, "answer_in_question")
        return None
    draft = Draft(kind, data["question"], data.get("answer", ""), [], group, reply_format=result.record.reply_format)
    if kind == "unanswerable":
        return draft
    hows = []
    for key, passage in zip(("quote", "quote_1", "quote_2"), [group[0], group[0], group[-1]], strict=True):
        if key not in data:
            continue
        span, how = locate_quote(text, [passage], data[key])
        if span is None:
            report.reject(kind, "quote_not_found")
            return None
        draft.quotes.append(span)
        hows.append(how)
    if kind == "single":
        span, how = locate_answer_in(text, draft.quotes[0], draft.answer)
        if span is None:
            report.reject(kind, "answer_not_found")
            return None
        draft.spans, draft.answer = [span], text[span[0] : span[1]]
        hows.append(how)
    else:
        asked = content_words(f"{draft.question} {draft.answer}")
        if any(not (asked & content_words(text[s:e])) for s, e in draft.quotes):
            report.reject(kind, "one_passage")
            return None
        draft.spans = list(draft.quotes)
    draft.found = max(hows, key=_looseness)
    report.found[draft.found.split(":")[0]] += 1
    return draft
