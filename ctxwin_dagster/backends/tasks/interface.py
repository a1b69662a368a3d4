"""The tasks' interface, one for both engines: each public method hands its arguments to the
engine's step of that task, which its task module holds beside the other engine's
(:mod:`.summaries`, :mod:`.cc_contexts`, :mod:`.swb_contexts`, :mod:`.answers`).

:class:`~ctxwin_dagster.backends.tasks.llm.LLMTasks` and
:class:`~ctxwin_dagster.backends.tasks.extractive.ExtractiveTasks` are their task classes and
:class:`EngineTasks`, whose methods call the task classes' steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctxwin_dagster.backends.tasks.results import AnswerResult, ContextResult, SummaryResult
from ctxwin_dagster.core.defaults import PAPER
from ctxwin_dagster.core.methods.swb import ChunkLike, SWBPrompts, swb_batch_prompts

__all__ = ["EngineTasks", "Question", "SWBJob"]

#: A question to answer: ``(question, passages as (chunk id, text), doc_id)``.
Question = tuple[str, Sequence[tuple[str, str]], str]


@dataclass(frozen=True, slots=True)
class SWBJob:
    """An SWB-RAG contextualization asked of an engine: the document, its chunks (the order the
    contexts come back in), the batch prompts built for them (never without batches), the batch
    size and window they were built with, and the document's title."""

    document_text: str
    chunks: list[ChunkLike]
    swb: SWBPrompts
    doc_id: str
    batch_size: int
    window_chars: int
    title: str | None


class EngineTasks:
    """Summaries, CC/SWB contexts and answers, each by the engine's own step."""

    def summarize(
        self,
        text: str,
        *,
        doc_id: str,
        max_tokens: int = PAPER.summary_max_tokens,
        segment_chars: int = PAPER.summary_segment_chars,
        language: str | None = None,
    ) -> SummaryResult:
        """The document's global summary: one per segment of ≤ ``segment_chars``, then an
        overview of ≤ ``max_tokens`` (how: the engine's ``_summarize``). Whatever was cut to fit
        is listed in ``notes``."""
        return self._summarize(text, doc_id, max_tokens, segment_chars, language)

    def contextualize_cc(
        self, document_text: str, chunks: Sequence[ChunkLike], *, doc_id: str, title: str | None = None
    ) -> list[ContextResult]:
        """Each chunk situated in the whole document (CC-RAG; how: the engine's
        ``_contextualize_cc``). ``title``: the document's title, which the extractive engine puts
        before each context (the LLM engine's prompt has none)."""
        return self._contextualize_cc(document_text, list(chunks), doc_id, title)

    def contextualize_swb(
        self,
        document_text: str,
        chunks: Sequence[ChunkLike],
        summary: str,
        *,
        doc_id: str,
        batch_size: int = PAPER.swb_batch_size,
        window_chars: int = PAPER.swb_window_chars,
        title: str | None = None,
    ) -> list[ContextResult]:
        """Chunks situated in batches of ``batch_size`` from the summary and ±``window_chars``
        around the batch (SWB-RAG; how: the engine's ``_contextualize_swb``), each batch's prompt
        built by :func:`~ctxwin_dagster.core.methods.swb.swb_batch_prompts`. ``title`` as for
        :meth:`contextualize_cc`."""
        chunk_list = list(chunks)
        swb = swb_batch_prompts(document_text, chunk_list, summary, batch_size=batch_size, window_chars=window_chars)
        if not swb.batches:
            return []
        return self._contextualize_swb(SWBJob(document_text, chunk_list, swb, doc_id, batch_size, window_chars, title))

    def answer(
        self,
        question: str,
        passages: Sequence[tuple[str, str]],
        *,
        doc_id: str = "",
        starts: Sequence[int | None] | None = None,
    ) -> AnswerResult:
        """An answer from ``passages`` (``(chunk id, text)``, best first) citing their chunk ids,
        or ``NOT_IN_DOCUMENTS`` (how: the engine's ``_answer``); ``starts`` are the passages'
        offsets in their documents when known."""
        return self._answer(question, passages, doc_id, starts)

    def answer_many(self, items: Sequence[Question]) -> list[AnswerResult]:
        """:meth:`answer` for many ``(question, passages, doc_id)``."""
        return self._answer_many(items)

    # The engine's steps, each in its task class (:mod:`.summaries` ...).
    _summarize: Callable[[str, str, int, int, str | None], SummaryResult]
    _contextualize_cc: Callable[[str, list[ChunkLike], str, str | None], list[ContextResult]]
    _contextualize_swb: Callable[[SWBJob], list[ContextResult]]
    _answer: Callable[[str, Sequence[tuple[str, str]], str, Sequence[int | None] | None], AnswerResult]
    _answer_many: Callable[[Sequence[Question]], list[AnswerResult]]
