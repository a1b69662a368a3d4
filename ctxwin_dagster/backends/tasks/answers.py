"""The answer task: an answer to a question from retrieved passages, citing their chunk ids.

* :class:`LLMAnswers` — the chat model reads the passages (those that do not fit the model are
  dropped from the end) and answers with citations, or says
  :data:`~ctxwin_dagster.core.methods.prompts.NOT_IN_DOCUMENTS`.
* :class:`ExtractiveAnswers` — the passage sentences that answer, picked by the extractive
  answer rule (:mod:`.answering`), metered as the ``answer`` prompt the model would get.

Both prompt in the language of the question and its first passages (:func:`answer_template`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ctxwin_dagster.backends.base import CallTags
from ctxwin_dagster.backends.tasks.answering import AnswerRule, answer_from_passages
from ctxwin_dagster.backends.tasks.extractive_work import ExtractiveWork
from ctxwin_dagster.backends.tasks.interface import Question
from ctxwin_dagster.backends.tasks.llm_calls import LLMCalls
from ctxwin_dagster.backends.tasks.results import STAGE_ANSWER, AnswerResult
from ctxwin_dagster.core.evaluation.record_values import as_float, items
from ctxwin_dagster.core.methods.prompts import (
    PromptTemplate,
    detect_language,
    format_passages,
    get_template,
    parse_answer,
)

__all__ = ["ExtractiveAnswers", "LLMAnswers", "answer_template"]


def answer_template(
    question: str, passages: Sequence[tuple[str, str]]
) -> tuple[list[tuple[str, str]], str, PromptTemplate]:
    """The passages as ``(chunk id, text)`` strings, and the language and ``answer`` prompt of the
    question and its first two passages."""
    passages = [(str(cid), str(text)) for cid, text in passages]
    lang = detect_language(question + "\n" + " ".join(t for _, t in passages[:2]))
    return passages, lang, get_template("answer", lang)


class LLMAnswers(LLMCalls):
    """The LLM engine's answers."""

    def _answer(
        self, question: str, passages: Sequence[tuple[str, str]], doc_id: str, starts: Sequence[int | None] | None
    ) -> AnswerResult:
        """An answer from ``passages`` citing their chunk ids, or ``NOT_IN_DOCUMENTS``.

        Passages that do not fit the model are dropped from the end (the least relevant when
        they come ranked) and counted in ``stats["answer_passages_dropped"]``. The model reads
        the passages themselves, so ``starts`` is not used.
        """
        return self._answer_many([(question, passages, doc_id)])[0]

    def _answer_many(self, items: Sequence[Question]) -> list[AnswerResult]:
        """Every question's call at once (concurrent calls)."""
        requests = []
        metas = []
        for question, given, doc_id in items:
            passages, _lang, tpl = answer_template(question, given)
            msgs = tpl.render(question=question, passages=format_passages(passages))
            limit = self._prompt_limit(self.max_tokens)
            while self.meter.count_messages(msgs) > limit and len(passages) > 1:
                passages = passages[:-1]
                self.stats["answer_passages_dropped"] += 1
                msgs = tpl.render(question=question, passages=format_passages(passages))
            requests.append(self._request(msgs, tpl.id, CallTags(STAGE_ANSWER, doc_id)))
            metas.append((tpl, [cid for cid, _ in passages]))
        out = []
        for (tpl, ids), res in zip(metas, self._run(requests), strict=True):
            parsed = parse_answer(res.text, ids)
            out.append(
                AnswerResult(
                    parsed.text,
                    list(parsed.cited_chunk_ids),
                    parsed.not_found,
                    [res.record],
                    self.engine,
                    self.model,
                    tpl.id,
                    list(parsed.unknown_citations),
                )
            )
        return out


class ExtractiveAnswers(ExtractiveWork):
    """The extractive engine's answers."""

    answer_rule: AnswerRule

    def _answer(
        self, question: str, passages: Sequence[tuple[str, str]], doc_id: str, starts: Sequence[int | None] | None
    ) -> AnswerResult:
        """The passage sentences that answer the question (see
        :func:`~ctxwin_dagster.backends.tasks.answering.answer_from_passages`), citing their chunk
        ids; ``starts``, the passages' offsets in their documents, tell a document's opening.
        From the memo, or selected (:meth:`_select_answer`) and kept."""
        passages, lang, tpl = answer_template(question, passages)
        offsets = list(starts) if starts is not None else None
        key = self.memo.key("answer", question, passages, tpl.id, offsets)
        hit = self.memo.get(key)
        if hit is not None:
            not_found, score = bool(hit["not_found"]), hit["score"]
            if not_found:
                self.stats["answers_not_found"] += 1
            recs = self._replay(hit["records"], doc_id)
            cited = [str(c) for c in items(hit, "cited")]
            best = None if score is None else as_float(score)
            return AnswerResult(str(hit["text"]), cited, not_found, recs, self.engine, self.model, tpl.id, [], best)
        result = self._select_answer(question, passages, doc_id, tpl, english=lang == "en", starts=offsets)
        self._keep(
            key,
            result.records,
            text=result.text,
            cited=result.cited_chunk_ids,
            not_found=result.not_found,
            score=result.score,
        )
        return result

    def _answer_many(self, items: Sequence[Question]) -> list[AnswerResult]:
        """Each question's answer, one after the other."""
        return [self._answer(q, p, d, None) for q, p, d in items]

    def _select_answer(
        self,
        question: str,
        passages: list[tuple[str, str]],
        doc_id: str,
        tpl: PromptTemplate,
        *,
        english: bool,
        starts: Sequence[int | None] | None = None,
    ) -> AnswerResult:
        """The passage sentences that answer (:func:`~.answering.answer_from_passages`), metered as the prompt."""
        ts = time.perf_counter()
        msgs = tpl.render(question=question, passages=format_passages(passages))
        found = answer_from_passages(
            question, passages, self._embed, rule=self.answer_rule, english=english, starts=starts
        )
        if found.not_found:
            self.stats["answers_not_found"] += 1
        rec = self._record(STAGE_ANSWER, doc_id, "", tpl.id, msgs, found.text, time.perf_counter() - ts)
        return AnswerResult(
            found.text, found.cited, found.not_found, [rec], self.engine, self.model, tpl.id, [], found.best
        )
