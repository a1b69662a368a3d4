"""CC-RAG contexts: each chunk situated in the whole document (Anthropic's contextual retrieval).

* :class:`LLMCCContexts` — one ``cc_context`` call per chunk with the whole document in the
  prompt; a document too long for the model is refused before anything is sent.
* :class:`ExtractiveCCContexts` — per chunk, the sentences of the whole document most related to
  it (not its own), metered as the ``cc_context`` prompt the model would get.

Both prompt in the document's language (:func:`cc_template`), and a chunk's context carries the
volumes of its call (:func:`cc_result`).
"""

from __future__ import annotations

import time

import numpy as np

from ctxwin_dagster.backends.base import CallRecord, CallTags
from ctxwin_dagster.backends.tasks.extractive_work import ExtractiveWork, text_sha
from ctxwin_dagster.backends.tasks.llm_calls import LLMCalls
from ctxwin_dagster.backends.tasks.memo import chunk_parts, section_of
from ctxwin_dagster.backends.tasks.results import STAGE_CONTEXT, ContextResult
from ctxwin_dagster.core.budget.fit import ContextOverflowError
from ctxwin_dagster.core.methods.prompts import PromptTemplate, detect_language, get_template
from ctxwin_dagster.core.methods.swb import ChunkLike, check_chunks

__all__ = ["ExtractiveCCContexts", "LLMCCContexts", "cc_result", "cc_template"]


def cc_template(document_text: str) -> tuple[str, PromptTemplate]:
    """The document's language and the ``cc_context`` prompt in it."""
    lang = detect_language(document_text)
    return lang, get_template("cc_context", lang)


def cc_result(
    engine: str,
    model: str,
    chunk: ChunkLike,
    context: str,
    version: str,
    rec: CallRecord,
    cached: bool,
    error: str | None = None,
) -> ContextResult:
    """The context of ``chunk`` made by one call (or by the work done in its place): the call's
    volumes are the chunk's."""
    return ContextResult(
        chunk.chunk_id,
        context,
        engine,
        model,
        version,
        rec.input_tokens,
        rec.output_tokens,
        rec.input_chars,
        cached,
        False,
        error,
    )


class LLMCCContexts(LLMCalls):
    """The LLM engine's CC-RAG contexts."""

    def _contextualize_cc(
        self, document_text: str, chunks: list[ChunkLike], doc_id: str, title: str | None
    ) -> list[ContextResult]:
        """One call per chunk with the whole document (Anthropic's contextual retrieval), in
        waves; ``title`` is not in the prompt.

        Raises:
            ContextOverflowError: the document does not fit the model — nothing is cut, since
                CC-RAG is defined by the whole document; the message names the fixes.
        """
        check_chunks(document_text, chunks)
        if not chunks:
            return []
        _lang, tpl = cc_template(document_text)
        tags = CallTags(STAGE_CONTEXT, doc_id, "cc")
        longest = max(chunks, key=lambda c: len(c.text))
        need = self.meter.count_messages(tpl.render(document=document_text, chunk=longest.text))
        limit = self._prompt_limit(self.max_tokens)
        if need > limit:
            raise ContextOverflowError(
                f"CC-RAG puts the whole document in every prompt: {doc_id} needs {need} prompt tokens, but "
                f"{self.model} allows {limit} (context {self.limits.context_length} minus {self.max_tokens} "
                f"reserved for the reply), over by {need - limit}. Use a model with a longer context for the "
                "contextualizer (the SWB-RAG paper used Gemini 1.5 Flash), or use SWB-RAG, which needs only the "
                "summary and a ±window per batch. Nothing was sent."
            )
        results: list[ContextResult] = []
        for w in range(0, len(chunks), self.wave_size):
            wave = chunks[w : w + self.wave_size]
            requests = [self._request(tpl.render(document=document_text, chunk=c.text), tpl.id, tags) for c in wave]
            for c, r in zip(wave, self.chat.complete_many(requests), strict=True):
                ctx = r.text.strip()
                if not ctx:
                    self.stats["empty_contexts"] += 1
                error = None if ctx else f"{self.model} returned an empty context"
                results.append(cc_result(self.engine, self.model, c, ctx, tpl.id, r.record, r.record.cache_hit, error))
        return results


class ExtractiveCCContexts(ExtractiveWork):
    """The extractive engine's CC-RAG contexts."""

    def _contextualize_cc(
        self, document_text: str, chunks: list[ChunkLike], doc_id: str, title: str | None
    ) -> list[ContextResult]:
        """Per chunk: the most related sentences of the whole document (not the chunk's own),
        after ``title`` and the chunk's section; from the memo, or selected (:meth:`_select_cc`)
        and kept."""
        check_chunks(document_text, chunks)
        if not chunks:
            return []
        lang, tpl = cc_template(document_text)
        key = self.memo.key("cc", text_sha(document_text), chunk_parts(chunks), title, tpl.id)
        return self._memo_contexts(
            key, doc_id, lambda: self._select_cc(document_text, chunks, doc_id, title, lang, tpl)
        )

    def _select_cc(
        self,
        document_text: str,
        chunks: list[ChunkLike],
        doc_id: str,
        title: str | None,
        lang: str,
        tpl: PromptTemplate,
    ) -> list[ContextResult]:
        t0 = time.perf_counter()
        idx = self._index_text(document_text)
        queries = self._embed([c.text for c in chunks])
        base_rel = np.where(idx.usable, 0.0, -np.inf).astype(np.float32)
        results: list[ContextResult] = []
        per_chunk_latency = (time.perf_counter() - t0) / len(chunks)
        for c, q in zip(chunks, queries, strict=True):
            ts = time.perf_counter()
            relevance = idx.vectors @ q + base_rel
            relevance[idx.overlapping(c.start, c.end)] = -np.inf  # never the chunk's own sentences
            prefix = self._prefix(lang, title, section_of(c))
            rows = sorted(self._pick_context(idx.vectors, relevance, idx.tokens, prefix))  # document order
            ctx = self._with_prefix(prefix, " ".join(idx.texts[r] for r in rows))
            msgs = tpl.render(document=document_text, chunk=c.text)
            rec = self._record(
                STAGE_CONTEXT, doc_id, "cc", tpl.id, msgs, ctx, per_chunk_latency + time.perf_counter() - ts
            )
            if not ctx:
                self.stats["empty_contexts"] += 1
            results.append(cc_result(self.engine, self.model, c, ctx, tpl.id, rec, False))
        return results
