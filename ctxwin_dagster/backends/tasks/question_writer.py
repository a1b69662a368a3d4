"""Questions generated from a document by a chat model, each one verified before it is kept.

:class:`QuestionWriter` asks a chat model (any :class:`~ctxwin_dagster.backends.base.ChatBackend`:
an OpenAI-compatible server or the local SmolLM2) for questions of three kinds (see
:data:`~ctxwin_dagster.core.evaluation.qa.generation.KINDS`):

* ``single`` — a passage of the document; the model quotes one sentence, gives the answer from
  it and writes the question. The reference span is the answer's place inside the quoted sentence.
* ``two_passages`` — two passages far apart that share words; the model quotes a sentence of
  each, answers from both and asks. The reference spans are the two sentences.
* ``unanswerable`` — a passage; the model asks for a detail the passage does not give. The
  question is kept only if no sentence of the document holds all its words and the same model,
  shown the passage and the document's passages most like the question (BM25), finds no answer.

Every reply is JSON held to a schema (structured output: ``response_format`` on a server,
constrained decoding on the local model), and the quotes are an ``enum`` of the passage's
sentences, so a model held to the schema cannot invent one. Every reply is still parsed and
every span located in the document (:mod:`~ctxwin_dagster.core.evaluation.qa.generation`), so a
server that ignores the schema is caught: a quote or an answer that is not found rejects the
draft. Answerable questions that the model answers correctly without the document are
dropped, and so are near-duplicates. Nothing is kept on trust, and every rejection is counted
in the :class:`~ctxwin_dagster.core.evaluation.qa.generation.GenerationReport`. A draft reply is
read, and its quotes and answer found, by :mod:`.question_drafts`.

Example::

    from ctxwin_dagster.backends.chat.factory import make_chat_backend
    writer = QuestionWriter(make_chat_backend("local:smollm2"))
    result = writer.generate("squad_Normans", text, count=5)
    result.items, result.report.lines()
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ctxwin_dagster.backends.base import CallTags, ChatBackend, ChatRequest, ChatResult, chat_limits, decodes_any_schema
from ctxwin_dagster.backends.tasks.llm import check_sampling
from ctxwin_dagster.backends.tasks.question_drafts import Draft, read_draft, reply_fields
from ctxwin_dagster.core.budget.limits import ModelLimits
from ctxwin_dagster.core.budget.tokens import TokenCounter, get_token_counter
from ctxwin_dagster.core.evaluation.qa.generation import (
    KINDS,
    GenerationReport,
    Passage,
    closed_book_correct,
    far_pairs,
    is_duplicate,
    kind_counts,
    lexical_answer,
    locate_quote,
    passages_of,
    question_id,
    same_answer,
    spread,
)
from ctxwin_dagster.core.evaluation.qa.items import QAItem
from ctxwin_dagster.core.json_types import JSONObject
from ctxwin_dagster.core.methods.prompts.schemas import CHARS_PER_TOKEN_FLOOR, ReplySchema, qa_schema
from ctxwin_dagster.core.methods.prompts.tables import NOT_IN_DOCUMENTS, QA_TEMPLATES
from ctxwin_dagster.core.text.sentences import split_sentences

__all__ = ["SOURCE", "GeneratedQuestions", "QuestionWriter"]

log = logging.getLogger(__name__)

#: ``meta["source"]`` of every generated question.
SOURCE = "ctxwin qa generate"
#: The stage of the calls in the ledger.
STAGE = "generate_questions"
#: Longest question or answer a local model may write, in characters.
MAX_TEXT_CHARS = 160
#: Draft rounds per kind: the first asks for twice the questions still wanted, the next for what is still missing.
ROUNDS = 2


@dataclass(frozen=True)
class GeneratedQuestions:
    """The questions kept, in the project's QA format, and the report of every draft."""

    items: list[QAItem]
    report: GenerationReport


class QuestionWriter:
    """Generates verified questions from documents with ``chat`` (see the module docstring).

    Args:
        chat: the chat backend; its ledger gets every call.
        temperature, top_p: sampling of the drafts (varied questions); the checks are greedy.
        closed_book: drop answerable questions the model answers correctly without the document.
        counter, limits: the model's token counter and limits (default: the model's own).
    """

    def __init__(
        self,
        chat: ChatBackend,
        *,
        temperature: float = 0.7,
        top_p: float = 0.95,
        closed_book: bool = True,
        counter: TokenCounter | None = None,
        limits: ModelLimits | None = None,
    ) -> None:
        check_sampling(temperature, top_p)
        self.chat = chat
        self.model = chat.model
        self.temperature = temperature
        self.top_p = top_p
        self.closed_book = closed_book
        self.limits = chat_limits(chat, limits)
        self.counter = counter or get_token_counter(chat.model)
        self.local = decodes_any_schema(chat)

    def __repr__(self) -> str:
        return f"QuestionWriter(model={self.model!r}, temperature={self.temperature}, closed_book={self.closed_book})"

    # ----------------------------------------------------------------- requests
    def _schema(
        self, name: str, quotes: Mapping[str, Sequence[str]], texts: Sequence[str], *, answer_within: str | None = None
    ) -> tuple[ReplySchema, int]:
        """The reply's schema and its token budget: the longest quotes plus the free texts
        (a local decoder gets the tight schema: an answer copied from its quote, one question)."""
        cap = MAX_TEXT_CHARS if self.local else None
        quote_tokens = sum(max((self.counter.count(q) for q in opts), default=0) + 8 for opts in quotes.values())
        text_tokens = len(texts) * (MAX_TEXT_CHARS // CHARS_PER_TOKEN_FLOOR + 8)
        budget = min(quote_tokens + text_tokens + 16, self.limits.max_completion_tokens)
        return qa_schema(
            name, quotes, texts, max_chars=cap, answer_within=answer_within, no_answer=NOT_IN_DOCUMENTS
        ), budget

    @staticmethod
    def _options(passage: Passage, text: str) -> list[str]:
        """The sentences of ``passage`` a question may quote: those of five words or more (all, if none is)."""
        sentences = [t for t in passage.sentence_texts(text) if any(ch.isalnum() for ch in t)]
        full = [t for t in sentences if len(t.split()) >= 5]
        return full or sentences

    def _request(
        self,
        template: str,
        values: Mapping[str, object],
        schema: ReplySchema,
        max_tokens: int,
        doc_id: str,
        *,
        draft: bool,
    ) -> ChatRequest | None:
        """The request, or None when its prompt does not fit the model's window."""
        messages = QA_TEMPLATES[template].render(**values)
        if self.counter.count_messages(messages) > self.limits.available_prompt_tokens(max_tokens):
            return None
        return ChatRequest(
            messages=tuple(messages),
            temperature=self.temperature if draft else 0.0,
            top_p=self.top_p if draft else 1.0,
            max_tokens=max_tokens,
            json_mode=True,
            prompt_version=QA_TEMPLATES[template].id,
            tags=CallTags(stage=STAGE, doc_id=doc_id, variant=template),
            schema=schema,
        )

    def _run(self, requests: Sequence[ChatRequest | None]) -> list[ChatResult | None]:
        real = [r for r in requests if r is not None]
        replies = iter(self.chat.complete_many(real) if real else [])
        return [next(replies) if r is not None else None for r in requests]

    # ----------------------------------------------------------------- drafts
    def _draft_requests(
        self, kind: str, text: str, title: str, doc_id: str, groups: list[list[Passage]]
    ) -> list[ChatRequest | None]:
        out: list[ChatRequest | None] = []
        for group in groups:
            if kind == "single":
                (p,) = group
                schema, budget = self._schema(
                    "qa_single", {"quote": self._options(p, text)}, ["answer", "question"], answer_within="quote"
                )
                values: dict[str, object] = {"title": title, "text": p.text(text)}
                out.append(self._request("qa_single", values, schema, budget, doc_id, draft=True))
            elif kind == "two_passages":
                a, b = group
                quotes = {"quote_1": self._options(a, text), "quote_2": self._options(b, text)}
                schema, budget = self._schema("qa_two_passages", quotes, ["answer", "question"])
                values = {"title": title, "text_1": a.text(text), "text_2": b.text(text)}
                out.append(self._request("qa_two_passages", values, schema, budget, doc_id, draft=True))
            else:
                (p,) = group
                schema, budget = self._schema("qa_unanswerable", {}, ["missing", "question"])
                values = {"title": title, "text": p.text(text)}
                out.append(self._request("qa_unanswerable", values, schema, budget, doc_id, draft=True))
        return out

    # ----------------------------------------------------------------- checks
    def _checks(self, drafts: list[Draft], text: str, title: str, doc_id: str, report: GenerationReport) -> list[Draft]:
        """The drafts that pass the checks. Every draft is asked back, with its passage(s) among
        the passages most like it: an answerable one must get the same answer back (round
        trip), an unanswerable one none. Answerable drafts are also asked without the document
        (closed book) and must not be answered right."""
        sentences = split_sentences(text)
        passages = passages_of(text, min_letters=0)
        requests: list[ChatRequest | None] = []
        asked: list[tuple[Draft, str]] = []
        failed: set[int] = set()
        for d in drafts:
            if d.kind == "unanswerable" and lexical_answer(d.question, text, sentences) is not None:
                report.reject(d.kind, "answered_lexically")
                failed.add(id(d))
                continue
            excerpts = self._excerpts(d, text, passages)
            options = [s for p in excerpts for s in self._options(p, text)] + [""]
            schema, budget = self._schema("qa_check", {"quote": options}, ["answer"], answer_within="quote")
            values = {
                "title": title,
                "excerpts": "\n\n".join(f"<excerpt>\n{p.text(text)}\n</excerpt>" for p in excerpts),
                "question": d.question,
            }
            requests.append(self._request("qa_check", values, schema, budget, doc_id, draft=False))
            asked.append((d, "check"))
            if d.kind != "unanswerable" and self.closed_book:
                schema, budget = self._schema("qa_closed_book", {}, ["answer"])
                requests.append(
                    self._request("qa_closed_book", {"question": d.question}, schema, budget, doc_id, draft=False)
                )
                asked.append((d, "closed_book"))
        for (d, what), result in zip(asked, self._run(requests), strict=True):
            if id(d) in failed:
                continue
            if what == "check":
                what = "answerability" if d.kind == "unanswerable" else "round_trip"
            report.checks[what] += 1
            if what == "closed_book":
                got = reply_fields(result, ["answer"])
                d.closed_book_answer = got["answer"] if got else ""
                if closed_book_correct(d.closed_book_answer, d.answer):
                    report.reject(d.kind, "closed_book")
                    failed.add(id(d))
                continue
            got = reply_fields(result, ["quote", "answer"])
            quote, answer = (got["quote"], got["answer"]) if got else ("", "")
            found = NOT_IN_DOCUMENTS not in answer.upper() and bool(quote or answer)
            if d.kind == "unanswerable":
                if found and quote:
                    report.reject(d.kind, "answered_by_model")
                    failed.add(id(d))
                continue
            span = locate_quote(text, passages, quote)[0] if quote else None
            if not found or not same_answer(span, answer, d.quotes, d.answer):
                report.reject(d.kind, "round_trip")
                failed.add(id(d))
        return [d for d in drafts if id(d) not in failed]

    def _excerpts(self, draft: Draft, text: str, passages: list[Passage], n: int = 3) -> list[Passage]:
        """The draft's own passage and the passages most like its question (BM25), ``n`` in all, in document order."""
        from ctxwin_dagster.core.retrieval.lexical import TextBM25

        own = draft.passages[0]
        others = [p for p in passages if not (p.start < own.end and p.end > own.start)]
        picked = [own]
        if others:
            texts = [p.text(text) for p in others]
            scores = TextBM25(texts).scorer(draft.question)(texts)
            order = sorted(range(len(others)), key=lambda i: -float(scores[i]))
            picked += [others[i] for i in order[: n - 1] if scores[i] > 0]
        return sorted(picked, key=lambda p: p.start)

    # ----------------------------------------------------------------- the whole document
    def generate(
        self,
        doc_id: str,
        text: str,
        *,
        count: int,
        kinds: Sequence[str] = KINDS,
        title: str | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> GeneratedQuestions:
        """Up to ``count`` verified questions about ``text`` (shared between ``kinds``), and the report."""
        say = progress or (lambda _msg: None)
        title = title or doc_id
        report = GenerationReport(documents=1)
        wanted = kind_counts(count, kinds)
        report.wanted.update(wanted)
        passages = passages_of(text)
        if not passages:
            report.no_passages.append(doc_id)
            return GeneratedQuestions([], report)
        kept: list[Draft] = []
        for kind in KINDS:
            used: list[Passage] = []
            for round_ in range(ROUNDS):
                short = wanted.get(kind, 0) - report.kept[kind]
                if short <= 0:
                    break
                free = [p for p in passages if p not in used]
                if kind == "two_passages":
                    groups = [list(pair) for pair in far_pairs(text, free, 2 * short)]
                else:
                    groups = [[p] for p in spread(free or passages, 2 * short, seed=round_)]
                if not groups:
                    break
                used += [p for g in groups for p in g]
                say(f"{doc_id}: drafting {len(groups)} {kind.replace('_', ' ')} question(s)")
                replies = self._run(self._draft_requests(kind, text, title, doc_id, groups))
                report.drafted[kind] += len(groups)
                drafts = [
                    d
                    for g, r in zip(groups, replies, strict=True)
                    if (d := read_draft(kind, text, g, r, report)) is not None
                ]
                if drafts:
                    say(f"{doc_id}: checking {len(drafts)} {kind.replace('_', ' ')} draft(s)")
                for d in self._checks(drafts, text, title, doc_id, report):
                    if report.kept[kind] >= wanted[kind]:
                        break
                    if is_duplicate(d.question, [k.question for k in kept]):
                        report.reject(kind, "duplicate")
                        continue
                    kept.append(d)
                    report.kept[kind] += 1
        return GeneratedQuestions([self._item(doc_id, d) for d in kept], report)

    def _item(self, doc_id: str, d: Draft) -> QAItem:
        meta: JSONObject = {
            "source": SOURCE,
            "kind": d.kind,
            "model": self.model,
            "passages": [[p.start, p.end] for p in d.passages],
            "reply_format": d.reply_format,
        }
        if d.quotes:
            meta["quotes"] = [[s, e] for s, e in d.quotes]
            meta["found"] = d.found
        if d.closed_book_answer:
            meta["closed_book_answer"] = d.closed_book_answer
        if d.kind == "unanswerable":
            return QAItem(question_id(doc_id, d.kind, d.question), doc_id, d.question, "", (), True, meta)
        return QAItem(
            question_id(doc_id, d.kind, d.question), doc_id, d.question, d.answer, tuple(d.spans), False, meta
        )
