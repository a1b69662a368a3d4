"""A question's focus context from ranked vector hits, with the signals of the retrieval
settings: hybrid candidates, the question's meaningful parts, full-text sentence scores,
structure-following windows and the adaptive budget.

One function for ``ctxwin ask`` and ``evaluations/retrieval_quality.py``, so the evaluation
measures what users get:

1. **Candidates** — the top-``k`` chunks: the vector hits, or with ``hybrid`` their reciprocal
   rank fusion with BM25 over the hit documents' chunks
   (:func:`~ctxwin_dagster.core.retrieval.lexical.hybrid_hits`).
2. **Sentence scores** — the caller's dense ``score_sentences`` (with ``question_parts``, the
   similarity to the question and to its meaningful parts, see
   :func:`~ctxwin_dagster.core.retrieval.question.question_signals`) plus, with a ``lexical_weight``, BM25 over the document's sentences
   (:class:`~ctxwin_dagster.core.retrieval.lexical.TextBM25`), queried with the question and its
   parts. The parts add weight and never replace the question, so a question whose form looks
   like a template ("… DPO is defined as: 365 * …") keeps its company, year and metric.
3. **Windows** — :func:`~ctxwin_dagster.core.retrieval.sentence_focus.focus_windows` with the budget,
   score drop and structure of the settings, merged by :func:`~ctxwin_dagster.core.retrieval.enhance.enhance`;
   with ``opening_chars``, each document in the context also gives its opening
   (:func:`~ctxwin_dagster.core.retrieval.window.with_openings`), on top of the budget.

:class:`~ctxwin_dagster.core.retrieval.lexical.LexicalIndexes` keeps each document's BM25 indexes (sentences, chunks), built once per
document text; its ``build_seconds`` is the extra index build time.

Plain Python and numpy: no Dagster, RAGAS or LanceDB.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ctxwin_dagster.core.retrieval.enhance import EnhancedContext, enhance
from ctxwin_dagster.core.retrieval.lexical import LexicalIndexes, hybrid_hits
from ctxwin_dagster.core.retrieval.settings import RetrievalSettings
from ctxwin_dagster.core.retrieval.statements import named_statements, statement_chunks
from ctxwin_dagster.core.retrieval.window import document_text
from ctxwin_dagster.core.text.sentences import split_sentences
from ctxwin_dagster.core.text.splitting import Chunk

__all__ = ["focus_context"]

Hit = tuple[Chunk, float]


def focus_context(
    question: str,
    vector_hits: Sequence[Hit],
    chunks: Sequence[Chunk],
    *,
    settings: RetrievalSettings,
    score_sentences: Callable[[Sequence[str]], Sequence[float] | np.ndarray],
    lexical_query: str,
    doc_texts: Mapping[str, str] | None = None,
    lexical: LexicalIndexes | None = None,
    vector_score: Callable[[Chunk], float] | None = None,
) -> EnhancedContext:
    """The focus context of ``question`` under ``settings`` (see the module docstring).

    Args:
        question: the question as asked.
        vector_hits: ``(chunk, cosine similarity)`` best first, at least ``4 * k`` deep when
            ``settings.hybrid`` (the fusion's depth), else at least ``k``.
        chunks: every chunk of the hits' documents.
        settings: focus-mode retrieval settings.
        score_sentences: ``texts -> dense similarity``, and
        lexical_query: the full-text query: both from
            :func:`~ctxwin_dagster.core.retrieval.question.question_signals` (an evaluation may
            pass others to compare rules).
        doc_texts: ``doc_id -> text`` for exact windows.
        lexical: the BM25 indexes (made here when None and a lexical signal is on).
        vector_score: the cosine similarity of a chunk only full-text search found.
    """
    if settings.enhance_mode != "focus":
        raise ValueError(f"focus_context needs enhance_mode='focus'; got {settings.enhance_mode!r}")
    k = settings.effective_k
    hits = list(vector_hits)
    if not hits:
        return EnhancedContext([], "focus")
    by_doc: dict[str, list[Chunk]] = {}
    for c in chunks:
        by_doc.setdefault(c.doc_id, []).append(c)
    doc_ids = list(dict.fromkeys(c.doc_id for c, _ in hits))
    # each document's text: given, or rebuilt from its chunks
    texts = {d: document_text(d, lst, doc_texts) for d, lst in by_doc.items()}
    if settings.statements and (asked := named_statements(question)):
        # the statements the question names: their title chunks lead the candidates
        titled = [c for d in doc_ids if by_doc.get(d) for c in statement_chunks(texts[d], by_doc[d], asked)]
        if titled:
            ids = {c.chunk_id for c in titled}
            best = hits[0][1]
            hits = [(c, best) for c in titled] + [h for h in hits if h[0].chunk_id not in ids]
    lex_query = lexical_query
    lexical_weight = settings.effective_lexical_weight
    if lexical is None and (settings.hybrid or lexical_weight):
        lexical = LexicalIndexes()
    if settings.hybrid and lexical is not None:
        pool = [c for d in doc_ids for c in sorted(by_doc.get(d, []), key=lambda c: c.chunk_index)]
        per_doc = {
            d: lexical.chunks(d, sorted(by_doc.get(d, []), key=lambda c: c.chunk_index)).scorer(lex_query)
            for d in doc_ids
            if by_doc.get(d)
        }

        def chunk_scores(texts: Sequence[str]) -> np.ndarray:
            out = np.zeros(len(pool), dtype=np.float32)
            for d, scorer in per_doc.items():
                idx = [i for i, c in enumerate(pool) if c.doc_id == d]
                out[idx] = scorer([texts[i] for i in idx])
            return out

        hits = hybrid_hits(hits, pool, chunk_scores, k=k, vector_score=vector_score)
    else:
        hits = hits[:k]
    lex_scores = None
    if lexical_weight and lexical is not None:
        scorers = [lexical.sentences(d, texts[d]).scorer(lex_query) for d in dict.fromkeys(c.doc_id for c, _ in hits)]

        def lex_scores(texts: Sequence[str]) -> np.ndarray:
            return np.asarray(np.max(np.stack([np.asarray(s(texts)) for s in scorers]), axis=0))

    return enhance(
        hits,
        chunks,
        settings,
        doc_texts=doc_texts,
        split_sentences=split_sentences,
        score_sentences=score_sentences,
        lexical_scores=lex_scores,
    )
