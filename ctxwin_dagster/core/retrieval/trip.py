"""A question's context in one trip: the search, then the enhancement or the sentence focus, as
one :class:`~ctxwin_dagster.core.retrieval.settings.RetrievalSettings` says.

What retrieval reads of an index is behind a small protocol, :class:`Source`: one variant's
chunks, searched within one document or across the folder, their documents' texts, their stored
vectors, and the embedder that built them. ``ask/retriever.py`` implements it over the LanceDB
index; :func:`retrieve` does the rest here:

* ``enhance_mode="focus"`` — the vector ranking (``4 * k`` deep when hybrid, the fusion's depth)
  and every chunk of the hit documents become a sentence-focus context
  (:func:`~ctxwin_dagster.core.retrieval.focus.focus_context`);
* ``"neighbors"``, ``"budget"``, ``"none"`` — the top-``k`` chunks (fused with the index's
  full-text search when hybrid) grown by :func:`~ctxwin_dagster.core.retrieval.enhance.enhance`.

Either way the documents the search was routed to (see
:class:`~ctxwin_dagster.core.retrieval.routing.DocumentRouter`) are kept in the context's ``routed_to``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np

from ctxwin_dagster.core.retrieval.enhance import EnhancedContext, enhance
from ctxwin_dagster.core.retrieval.focus import focus_context
from ctxwin_dagster.core.retrieval.lexical import LexicalIndexes
from ctxwin_dagster.core.retrieval.question import question_signals
from ctxwin_dagster.core.retrieval.settings import RetrievalSettings
from ctxwin_dagster.core.text.splitting import Chunk

__all__ = ["Source", "retrieve"]


class Source(Protocol):
    """One variant's indexed rows, as retrieval reads them (within one document, or across the
    documents a search may see)."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts`` by the embedder that built the rows (one row per text)."""
        ...

    def search(
        self, question: str, vector: np.ndarray, *, k: int, hybrid: bool, route_to: int
    ) -> tuple[list[tuple[Chunk, float]], list[str] | None]:
        """The top-``k`` chunks for ``vector``, best first, with their scores (the cosine
        similarity; the fused score when ``hybrid`` fuses it with the full-text search of
        ``question``), and the documents the search was routed to (``route_to`` > 0 and the
        question tells them apart; else None)."""
        ...

    def chunks(self, doc_ids: Sequence[str]) -> tuple[list[Chunk], dict[str, str]]:
        """Every chunk of ``doc_ids`` and their documents' texts."""
        ...

    def vectors(self, doc_id: str) -> dict[str, np.ndarray]:
        """The stored vector of each chunk of ``doc_id``, by ``chunk_id``."""
        ...


def retrieve(question: str, settings: RetrievalSettings, source: Source, *, lexical: LexicalIndexes) -> EnhancedContext:
    """The merged context windows of ``question`` from ``source``, best first, as ``settings``
    say. ``lexical`` keeps the documents' BM25 indexes between questions."""
    vector = np.asarray(source.embed([question])[0], dtype=np.float32)
    focus, hybrid, k = settings.enhance_mode == "focus", settings.hybrid, settings.effective_k
    # focus mode fuses with BM25 over the hit documents itself, from a ranking 4 * k deep
    hits, routed = source.search(
        question,
        vector,
        k=4 * k if focus and hybrid else k,
        hybrid=hybrid and not focus,
        route_to=settings.route_to,
    )
    if not hits:
        return EnhancedContext([], settings.enhance_mode)
    chunks, texts = source.chunks(list(dict.fromkeys(c.doc_id for c, _ in hits)))
    if focus:
        vector_score = _stored_vector_score(source, vector)
        score_sentences, lexical_query = question_signals(question, vector, settings, source.embed)
        ctx = focus_context(
            question,
            hits,
            chunks,
            settings=settings,
            score_sentences=score_sentences,
            lexical_query=lexical_query,
            doc_texts=texts,
            lexical=lexical,
            vector_score=vector_score,
        )
    else:
        ctx = enhance(hits, chunks, settings, doc_texts=texts)
    return replace(ctx, routed_to=routed) if routed else ctx


def _stored_vector_score(source: Source, vector: np.ndarray) -> Callable[[Chunk], float]:
    """Cosine similarity of a chunk that only full-text search found, from its stored vector
    (each document's vectors read once)."""
    vectors: dict[str, np.ndarray] = {}
    loaded: set[str] = set()

    def vector_score(chunk: Chunk) -> float:
        if chunk.doc_id not in loaded:
            vectors.update(source.vectors(chunk.doc_id))
            loaded.add(chunk.doc_id)
        v = vectors.get(chunk.chunk_id)
        return float(v @ vector) if v is not None else 0.0

    return vector_score
