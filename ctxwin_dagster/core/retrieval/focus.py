"""A question's focus context from ranked vector hits, with the signals of the retrieval
settings: hybrid candidates, the question's meaningful parts, full-text sentence scores,
structure-following windows and the adaptive budget.

One function for ``ctxwin ask`` and ``evaluations/retrieval_quality.py``, so the evaluation
measures what users get:

1. **Candidates** — the top-``k`` chunks: the vector hits, or with ``hybrid`` their reciprocal
   rank fusion with BM25 over the hit documents' chunks
   (:func:`~ctxwin_dagster.core.retrieval.lexical.hybrid_hits`).
2. **Sentence scores** — the caller's dense ``score_sentences`` (with ``question_parts``, the
   similarity to the question and to its meaningful parts, weighted by :func:`query_weights`, see
   :func:`dense_scorer`) plus, with a ``lexical_weight``, BM25 over the document's sentences
   (:class:`~ctxwin_dagster.core.retrieval.lexical.TextBM25`), queried with the question and its
   parts. The parts add weight and never replace the question, so a question whose form looks
   like a template ("… DPO is defined as: 365 * …") keeps its company, year and metric.
3. **Windows** — :func:`~ctxwin_dagster.core.retrieval.sentence_focus.focus_windows` with the budget,
   score drop and structure of the settings, merged by :func:`~ctxwin_dagster.core.retrieval.enhance.enhance`.
4. **Openings** — with ``opening_chars``, each document in the context also gives its opening
   (:mod:`~ctxwin_dagster.core.retrieval.opening`), on top of the budget.

:class:`LexicalIndexes` keeps each document's BM25 indexes (sentences, chunks), built once per
document text; its ``build_seconds`` is the extra index build time.

Plain Python and numpy: no Dagster, RAGAS or LanceDB.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from ctxwin_dagster.core.retrieval.enhance import EnhancedContext, enhance
from ctxwin_dagster.core.retrieval.lexical import TextBM25, hybrid_hits, question_parts
from ctxwin_dagster.core.retrieval.opening import opening_end
from ctxwin_dagster.core.retrieval.settings import RetrievalSettings
from ctxwin_dagster.core.retrieval.statements import named_statements, statement_chunks
from ctxwin_dagster.core.retrieval.window import Window, merge_windows
from ctxwin_dagster.core.text.sentences import split_sentences
from ctxwin_dagster.core.text.splitting import Chunk

__all__ = ["QUESTION_SHARE", "LexicalIndexes", "dense_scorer", "focus_context", "query_texts", "query_weights"]

Hit = tuple[Chunk, float]

#: The question's share of a sentence's dense score when the question has meaningful parts; the
#: parts share the rest equally. Chosen on the tuning split among 0.25, 0.5 and equal shares
#: (``evaluations/question_parts.py``: CUAD tune 67.4 % against 66.4 % and 66.9 %; SQuAD and
#: FinanceBench lose nothing to the whole question).
QUESTION_SHARE = 0.25


def query_texts(question: str, settings: RetrievalSettings) -> list[str]:
    """The texts whose vectors score sentences: the question itself first, then, with
    ``settings.question_parts``, its meaningful parts
    (:func:`~ctxwin_dagster.core.retrieval.lexical.question_parts`). The parts add weight; they
    never replace the question.

    Example::

        >>> settings = RetrievalSettings.named("ask")
        >>> query_texts('What does "force majeure" mean here?', settings)
        ['What does "force majeure" mean here?', 'force majeure']
        >>> query_texts("Who ruled Normandy?", settings)
        ['Who ruled Normandy?']
    """
    if not settings.question_parts:
        return [question]
    parts = [p for p in question_parts(question) if p.strip() != question.strip()]
    return [question, *parts]


def query_weights(n_texts: int, *, question_share: float = QUESTION_SHARE) -> np.ndarray:
    """The weights of :func:`query_texts`' vectors: the question ``question_share`` and its
    parts the rest equally; a question without parts weighs 1.

    Example::

        >>> query_weights(3).tolist()
        [0.25, 0.375, 0.375]
        >>> query_weights(1).tolist()
        [1.0]
    """
    if n_texts < 1:
        raise ValueError("a query has at least the question itself")
    if n_texts == 1:
        return np.ones(1, dtype=np.float32)
    rest = (1.0 - question_share) / (n_texts - 1)
    return np.array([question_share] + [rest] * (n_texts - 1), dtype=np.float32)


def dense_scorer(
    sentence_vectors: Callable[[Sequence[str]], np.ndarray],
    query_vectors: np.ndarray,
    weights: Sequence[float] | np.ndarray | None = None,
) -> Callable[[Sequence[str]], np.ndarray]:
    """``texts -> weighted mean cosine similarity to the query vectors`` (rows L2-normalized;
    ``weights`` default to equal, and are scaled to sum to 1).

    Example::

        >>> vecs = {"a": np.array([1.0, 0.0]), "b": np.array([0.0, 1.0])}
        >>> score = dense_scorer(lambda ts: np.stack([vecs[t] for t in ts]), np.array([[1.0, 0.0], [0.0, 1.0]]))
        >>> score(["a", "b"]).tolist()
        [0.5, 0.5]
        >>> dense_scorer(lambda ts: np.stack([vecs[t] for t in ts]), np.eye(2), [3, 1])(["a"]).tolist()
        [0.75]
    """
    q = np.atleast_2d(np.asarray(query_vectors, dtype=np.float32))
    w = np.ones(len(q), dtype=np.float32) if weights is None else np.asarray(weights, dtype=np.float32)
    if w.shape != (len(q),) or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"weights must be {len(q)} non-negative numbers, not all 0; got {w.tolist()}")
    w = w / w.sum()

    def score(texts: Sequence[str]) -> np.ndarray:
        return np.asarray(np.asarray(sentence_vectors(texts) @ q.T) @ w)

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
    lexical_query: str | None = None,
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
        lexical_query: the full-text query (default: :func:`query_texts` joined); the
            evaluation passes others to compare rules.
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
    if settings.statements and (asked := named_statements(question)):
        # the statements the question names: their title chunks lead the candidates
        titled = [
            c
            for d in doc_ids
            if by_doc.get(d)
            for c in statement_chunks(_doc_text(d, by_doc[d], doc_texts), by_doc[d], asked)
        ]
        if titled:
            ids = {c.chunk_id for c in titled}
            best = hits[0][1]
            hits = [(c, best) for c in titled] + [h for h in hits if h[0].chunk_id not in ids]
    lex_query = lexical_query if lexical_query is not None else " ".join(query_texts(question, settings))
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
            return np.asarray(np.max(np.stack([np.asarray(s(texts)) for s in scorers]), axis=0))

    ctx = enhance(
        hits,
        chunks,
        settings,
        doc_texts=doc_texts,
        split_sentences=split_sentences,
        score_sentences=score_sentences,
        lexical_scores=lex_scores,
    )
    return _with_openings(ctx, settings.opening_chars or 0, by_doc, doc_texts)


def _with_openings(
    ctx: EnhancedContext, chars: int, by_doc: Mapping[str, Sequence[Chunk]], doc_texts: Mapping[str, str] | None
) -> EnhancedContext:
    """``ctx`` with the opening of each of its documents (:func:`~ctxwin_dagster.core.retrieval.
    opening.opening_end`), merged with the windows it overlaps; an opening scores 0.0, so it
    comes after the retrieved windows unless it joins one of them."""
    if chars <= 0 or not ctx.windows:
        return ctx
    openings = []
    texts: dict[str, str] = {}
    for d in dict.fromkeys(w.doc_id for w in ctx.windows):
        text = texts[d] = _doc_text(d, by_doc.get(d, []), doc_texts)
        end = opening_end(text, chars)
        if end > 0:
            ids = tuple(c.chunk_id for c in sorted(by_doc.get(d, []), key=lambda c: c.chunk_index) if c.start < end)
            openings.append(Window(doc_id=d, start=0, end=end, text=text[:end], score=0.0, chunk_ids=ids))
    return replace(ctx, windows=merge_windows([*ctx.windows, *openings], doc_texts=texts))
