"""Sentence focus for ``ctxwin ask``: the index's vector hits turned into a focus context by
:func:`~ctxwin_dagster.core.focus_select.focus_context`, the same selection the retrieval
evaluation measures (evaluations/reports/retrieval_quality.md).

The index gives the vector ranking (``4 * k`` deep when hybrid, the fusion's depth) and every
chunk of the hit documents; the BM25 indexes of those documents are built on first use and kept
by the :class:`~ctxwin_dagster.core.focus_select.LexicalIndexes` of the asker.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ctxwin_dagster.core.enhance import EnhancedContext, hits_from_rows
from ctxwin_dagster.core.focus_select import LexicalIndexes, dense_scorer, focus_context, query_texts
from ctxwin_dagster.core.retrieval_settings import RetrievalSettings
from ctxwin_dagster.core.splitting import Chunk

__all__ = ["assemble_focus"]


def assemble_focus(asker: Any, question: str, vector: Any, settings: RetrievalSettings, *, variant: str, doc_id: str | None) -> EnhancedContext:
    """The focus context of ``question`` (its vector given) from ``asker``'s index."""
    k = settings.effective_k
    rows = asker._search(question, vector, variant=variant, doc_id=doc_id, k=4 * k if settings.hybrid else k, hybrid=False)
    if not rows:
        return EnhancedContext([], "focus")
    hits = hits_from_rows(rows)
    doc_ids = list(dict.fromkeys(c.doc_id for c, _ in hits))
    chunks, texts = asker._chunks(variant, doc_ids)
    q = np.asarray(vector, dtype=np.float32)
    parts = query_texts(question, settings)
    qvecs = q[None, :] if parts == [question] else np.asarray(asker.embedder.embed(parts), dtype=np.float32)
    embedder = asker.embedder
    score = dense_scorer(lambda ts: np.asarray(embedder.embed(list(ts)), dtype=np.float32), qvecs)
    vectors: dict[str, np.ndarray] = {}
    loaded: set[str] = set()

    def vector_score(chunk: Chunk) -> float:
        """Cosine similarity of a chunk that only full-text search found (its stored vector)."""
        if chunk.doc_id not in loaded:
            got = asker.index.rows(variant, doc_id=chunk.doc_id, columns=["chunk_id", "vector"])
            vectors.update({r["chunk_id"]: np.asarray(r["vector"], dtype=np.float32) for r in got})
            loaded.add(chunk.doc_id)
        v = vectors.get(chunk.chunk_id)
        return float(v @ q) if v is not None else 0.0

    lexical = getattr(asker, "lexical", None)
    if lexical is None:
        lexical = asker.lexical = LexicalIndexes()
    return focus_context(question, hits, chunks, settings=settings, score_sentences=score, doc_texts=texts,
                         lexical=lexical, vector_score=vector_score)
