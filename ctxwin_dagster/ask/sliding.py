"""The asker's sliding-window answers: a whole document read window by window (``mode="sliding"``),
or an assembled context too long for the answer model read the same way (``mode="auto"``).

:class:`SlidingAnswers` holds what a sliding run needs (the window reader, the token counter,
the documents and the index's chunks) and turns a run of
:func:`~ctxwin_dagster.core.methods.sliding_qa.sliding_window_qa` into an
:class:`~ctxwin_dagster.ask.results.AskResult`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ctxwin_dagster.ask.results import AskError, AskResult, normalize_variant, sliding_result
from ctxwin_dagster.core.methods.sliding_qa import (
    DEFAULT_OVERLAP_TOKENS,
    DEFAULT_WAVE_SIZE,
    DEFAULT_WINDOW_TOKENS,
    LimitedReader,
    SlidingAnswer,
    WindowReader,
    sliding_window_qa,
)
from ctxwin_dagster.core.retrieval.window import Window, span_text
from ctxwin_dagster.core.text.splitting import Chunk

if TYPE_CHECKING:
    from ctxwin_dagster.ask.indexed_documents import IndexedDocuments
    from ctxwin_dagster.backends.base import Embedder
    from ctxwin_dagster.backends.index.vectorstore import ChunkIndex
    from ctxwin_dagster.backends.tasks.results import TaskEngine
    from ctxwin_dagster.core.budget.fit import FitReport
    from ctxwin_dagster.core.budget.limits import ModelLimits
    from ctxwin_dagster.core.budget.tokens import TokenCounter
    from ctxwin_dagster.core.retrieval.enhance import EnhancedContext

__all__ = ["SlidingAnswers", "SlidingOptions"]


@dataclass(frozen=True)
class SlidingOptions:
    """The sliding-window options of one question (see :meth:`Asker.ask <ctxwin_dagster.ask.service.Asker.ask>`)."""

    window_tokens: int | None = None
    overlap_tokens: int = DEFAULT_OVERLAP_TOKENS
    summary: str | None = None
    early_stop: float | None = None
    wave_size: int = DEFAULT_WAVE_SIZE
    progress: Callable[[int, int], None] | None = None


class SlidingAnswers:
    """Sliding-window answers over the asker's documents and index.

    Args:
        tasks: the answer engine; its chat model reads the windows (an LLM engine), else its
            embedder or ``embedder`` does (the extractive engine).
        documents: the asker's documents (files, or text rebuilt from the index).
        index: the index (None: documents from files only).
        limits, counter: the answer model's limits and token counter.
        reader: the window reader (default: built from ``tasks`` on first use).
    """

    def __init__(
        self,
        *,
        tasks: TaskEngine,
        embedder: Embedder | None,
        documents: IndexedDocuments,
        index: ChunkIndex | None,
        limits: ModelLimits,
        counter: TokenCounter,
        reader: WindowReader | None = None,
    ) -> None:
        self.tasks, self.embedder, self.documents, self.index = tasks, embedder, documents, index
        self.limits, self.counter = limits, counter
        self._reader = reader

    @property
    def reader(self) -> WindowReader:
        """The sliding-window reader (built on first use)."""
        if self._reader is None:
            from ctxwin_dagster.backends.tasks.extractive import DEFAULT_ANSWER_THRESHOLD
            from ctxwin_dagster.backends.tasks.window_readers import ExtractiveWindowReader, LLMWindowReader

            tasks = self.tasks
            if tasks.chat is not None:
                self._reader = LLMWindowReader(tasks.chat, limits=self.limits, counter=self.counter)
            else:
                embedder = tasks.embedder or self.embedder
                if embedder is None:
                    raise AskError("sliding-window QA with the extractive engine needs an embedder; pass embedder=")
                threshold = tasks.answer_threshold
                self._reader = ExtractiveWindowReader(
                    embedder,
                    ledger=tasks.ledger,
                    counter=self.counter,
                    threshold=DEFAULT_ANSWER_THRESHOLD if threshold is None else threshold,
                )
        return self._reader

    def ask_document(self, question: str, options: SlidingOptions, *, variant: str, doc_id: str) -> AskResult:
        """Read the whole of ``doc_id`` (its file, else its indexed chunks) window by window."""
        notes: list[str] = []
        chunks: list[Chunk] = []
        v: str | None = None
        texts: dict[str, str] = {}
        if self.index is not None:
            v = normalize_variant(variant)
        if v is not None and self.index is not None and self.index.count(v, doc_id=doc_id):
            chunks, texts = self.documents.chunks(v, [doc_id])
        elif (t := self.documents.text(doc_id)) is not None:
            texts[doc_id] = t
        text = texts.get(doc_id)
        if text is None:
            if not chunks:
                where = f" in {self.documents.documents_dir}" if self.documents.documents_dir else ""
                raise AskError(
                    f"no text for document {doc_id!r}: no file{where} and no indexed chunks; put the file in the documents "
                    "folder (--documents) or index it with `ctxwin run`"
                )
            text = span_text(chunks, 0, max(c.end for c in chunks))
            texts = {doc_id: text}
            notes.append(
                "document text rebuilt from the index rows (no document file); white space between chunks may differ"
            )
        run = self._run(question, text, options, doc_id=doc_id)
        return sliding_result(
            question, run, mode="sliding", variant=v, doc_id=doc_id, texts=texts, chunks=chunks, notes=notes
        )

    def ask_context(
        self,
        question: str,
        ctx: EnhancedContext,
        options: SlidingOptions,
        *,
        variant: str,
        doc_id: str | None,
        fit: FitReport,
    ) -> AskResult:
        """Read an assembled context that does not fit the answer model window by window."""
        notes = [
            f"the assembled context ({fit.prompt_tokens:,} prompt tokens) does not fit {self.limits.model} "
            f"(limit {fit.limit:,}, over by {fit.overflow:,}): sliding-window QA over it"
        ]
        run = self._run(question, ctx.windows, options, doc_id=doc_id or "")
        doc_ids = list(dict.fromkeys(w.doc_id for w in ctx.windows))
        doc_texts = {d: t for d in doc_ids if (t := self.documents.text(d)) is not None}
        chunks, _ = self.documents.chunks(variant, doc_ids) if self.index is not None else ([], {})
        result = sliding_result(
            question, run, mode="auto", variant=variant, doc_id=doc_id, texts=doc_texts, chunks=chunks, notes=notes
        )
        result.fit = fit
        result.context = ctx
        return result

    def _window_tokens(self, options: SlidingOptions, question: str) -> int:
        if options.window_tokens is not None:
            return options.window_tokens
        reader = self.reader
        most = (
            reader.window_token_limit(summary=options.summary, question=question)
            if isinstance(reader, LimitedReader)
            else None
        )
        size = DEFAULT_WINDOW_TOKENS if most is None else min(DEFAULT_WINDOW_TOKENS, most)
        if size <= DEFAULT_OVERLAP_TOKENS:
            raise AskError(
                f"{reader.model} leaves room for only {size} tokens of text per window; use a model with a longer "
                "context, a shorter summary, or pass window_tokens= and overlap_tokens= explicitly"
            )
        return size

    def _run(
        self, question: str, source: str | Sequence[Window], options: SlidingOptions, *, doc_id: str
    ) -> SlidingAnswer:
        enc = self.counter.encoding
        size = self._window_tokens(options, question)
        try:
            return sliding_window_qa(
                question,
                source,
                reader=self.reader,
                encode=enc.encode_ordinary,
                decode=enc.decode,
                doc_id=doc_id,
                window_tokens=size,
                overlap_tokens=options.overlap_tokens,
                summary=options.summary,
                early_stop=options.early_stop,
                wave_size=options.wave_size,
                progress=options.progress,
            )
        except ValueError as exc:
            if isinstance(exc, AskError):
                raise
            raise AskError(str(exc)) from exc
