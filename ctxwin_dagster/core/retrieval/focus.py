"""A question's focus context from ranked vector hits, with the signals of the retrieval
settings: hybrid candidates, the question's meaningful parts, full-text sentence scores,
structure-following windows and the adaptive budget.

One function for ``ctxwin ask`` and ``evaluations/retrieval_quality.py``, so the evaluation
measures what users get:

1. **Candidates** — the top-``k`` chunks: the vector hits, or with ``hybrid`` their reciprocal
   rank fusion with BM25 over the hit documents' chunks
   (:func:`~ctxwin_dagster.core.retrieval.lexical.hybrid_hits`).
2. **Sentence scores** — the caller's dense ``score_sentences`` (with ``question_parts``, the
   mean similarity to the question's meaningful parts, see :func:`dense_scorer`) plus, with a
   ``lexical_weight``, BM25 over the document's sentences
   (:class:`~ctxwin_dagster.core.retrieval.lexical.TextBM25`), queried with the question's parts.
3. **Windows** — :func:`~ctxwin_dagster.core.retrieval.sentence_focus.focus_windows` with the budget,
   score drop and structure of the settings, merged by :func:`~ctxwin_dagster.core.retrieval.enhance.enhance`.

:class:`LexicalIndexes` keeps each document's BM25 indexes (sentences, chunks), built once per
document text; its ``build_seconds`` is the extra index build time.

Plain Python and numpy: no Dagster, RAGAS or LanceDB.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ctxwin_dagster.core.retrieval.enhance import DEFAULT_FOCUS_BUDGET_CHARS, EnhancedContext, enhance
from ctxwin_dagster.core.retrieval.lexical import TextBM25, hybrid_hits, question_parts
from ctxwin_dagster.core.retrieval.settings import RetrievalSettings
from ctxwin_dagster.core.text.sentences import split_sentences
from ctxwin_dagster.core.text.splitting import Chunk

__all__ = ["LexicalIndexes", "dense_scorer", "focus_context", "query_texts"]

Hit = tuple[Chunk, float]


def query_texts(question: str, settings: RetrievalSettings) -> list[str]:
    """The texts whose vectors score sentences: the question's meaningful parts with
    ``settings.question_parts``, else the question itself."""
    return question_parts(question) if settings.question_parts else [question]


def dense_scorer(
    sentence_vectors: Callable[[Sequence[str]], np.ndarray], query_vectors: np.ndarray
) -> Callable[[Sequence[str]], np.ndarray]:
    """``texts -> mean cosine similarity to the query vectors`` (rows L2-normalized).

    Example::

        >>> vecs = {"a": np.array([1.0, 0.0]), "b": np.array([0.0, 1.0])}
        >>> score = dense_scorer(lambda ts: np.stack([vecs[t] for t in ts]), np.array([[1.0, 0.0], [0.0, 1.0]]))
        >>> score(["a", "b"]).tolist()
        [0.5, 0.5]
    """
    q = np.atleast_2d(np.asarray(query_vectors, dtype=np.float32))

    def score(texts: Sequence[str]) -> np.ndarray:
        return np.asarray(sentence_vectors(texts) @ q.T).mean(axis=1)

    return score


class LexicalIndexes:
    """BM25 indexes of documents' sentences and chunks, built on first use and kept for the
    ``max_docs`` documents used last (keyed by the document's text, so a changed document
    gets a new index)."""

    def __init__(self, *, max_docs: int = 64) -> None:
        self.max_docs = max_docs
        self._sentences: OrderedDict[tuple[str, int], TextBM25] = OrderedDict()
        self._chunks: OrderedDict[tuple[str, int], TextBM25] = OrderedDict()
        self.build_seconds = 0.0
        self.built = 0

    def _get(
        self, store: OrderedDict[tuple[str, int], TextBM25], key: tuple[str, int], texts: Callable[[], list[str]]
    ) -> TextBM25:
        found = store.get(key)
        if found is not None:
            store.move_to_end(key)
            return found
        t0 = time.perf_counter()
        index = TextBM25(texts())
        self.build_seconds += time.perf_counter() - t0
        self.built += 1
        store[key] = index
        while len(store) > self.max_docs:
            store.popitem(last=False)
        return index

    def sentences(self, doc_id: str, text: str) -> TextBM25:
        """BM25 over the sentences of ``text`` (:func:`~ctxwin_dagster.core.text.sentences.split_sentences`)."""
        return self._get(
            self._sentences, (doc_id, hash(text)), lambda: [text[s:e] for s, e in split_sentences(text)] or [text]
        )

    def chunks(self, doc_id: str, chunks: Sequence[Chunk]) -> TextBM25:
        """BM25 over the texts of one document's chunks."""
        key = (doc_id, hash(tuple(c.chunk_id for c in chunks)))
        return self._get(self._chunks, key, lambda: [c.text for c in chunks])


def _doc_text(doc_id: str, chunks: Sequence[Chunk], doc_texts: Mapping[str, str] | None) -> str:
    if doc_texts is not None and doc_id in doc_texts:
        return doc_texts[doc_id]
    from ctxwin_dagster.core.retrieval.around_hits import span_text

    ordered = sorted(chunks, key=lambda c: c.chunk_index)
    return span_text(ordered, 0, max(c.end for c in ordered))


def focus_context(
    question: str,
    vector_hits: Sequence[Hit],
    chunks: Sequence[Chunk],
    *,
    settings: RetrievalSettings,
    score_sentences: Callable[[Sequence[str]], Sequence[float] | np.ndarray],
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
        score_sentences: ``texts -> dense similarity`` (see :func:`dense_scorer`).
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
    lex_query = " ".join(query_texts(question, settings))
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
        scorers = [
            lexical.sentences(d, _doc_text(d, by_doc.get(d, []), doc_texts)).scorer(lex_query)
            for d in dict.fromkeys(c.doc_id for c, _ in hits)
        ]

        def lex_scores(texts: Sequence[str]) -> np.ndarray:
            return np.max(np.stack([np.asarray(s(texts)) for s in scorers]), axis=0)

    return enhance(
        hits,
        chunks,
        mode="focus",
        doc_texts=doc_texts,
        split_sentences=split_sentences,
        score_sentences=score_sentences,
        budget_chars=settings.focus_chars or DEFAULT_FOCUS_BUDGET_CHARS,
        lexical_scores=lex_scores,
        lexical_weight=lexical_weight if lex_scores is not None else None,
        structure=settings.structure,
        score_drop=settings.score_drop,
    )
