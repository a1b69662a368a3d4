"""Full-text scoring for hybrid retrieval: BM25 over a document's sentences or chunks, and rank
fusion.

* :class:`TextBM25` — a BM25 index (the ``bm25s`` library: sparse-matrix BM25, Lucene's
  variant, English stop words) over a list of texts, e.g. one document's sentences, built once
  per document; :meth:`TextBM25.scorer` gives a question's scores by text, the
  ``lexical_scores`` of :func:`~ctxwin_dagster.core.retrieval.sentence_focus.focus_windows`.
* :func:`reciprocal_rank_fusion` — fuse rankings by ``sum 1 / (k + rank)`` (Cormack, Clarke &
  Büttcher, SIGIR 2009), as LanceDB's hybrid search does.
* :class:`LexicalIndexes` — each document's BM25 indexes, built on first use and kept.

The full-text query of a question is its text and its meaningful parts
(:func:`~ctxwin_dagster.core.retrieval.question.question_signals`).

Plain Python and numpy (plus ``bm25s``): no Dagster, RAGAS or LanceDB.

Example::

    >>> bm25 = TextBM25(["The fee is due monthly.", "This agreement is governed by Texas law."])
    >>> score = bm25.scorer("Which law governs the agreement?")
    >>> [round(float(x), 2) > 0 for x in score(["This agreement is governed by Texas law.", "unknown text"])]
    [True, False]
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from ctxwin_dagster.core.text.sentences import split_sentences
from ctxwin_dagster.core.text.splitting import Chunk

__all__ = [
    "LexicalIndexes",
    "TextBM25",
    "hybrid_hits",
    "reciprocal_rank_fusion",
]

Hit = tuple[Chunk, float]

#: LanceDB's and the RRF paper's constant.
RRF_K = 60


class TextBM25:
    """BM25 over ``texts`` (e.g. the sentences of one document), scored by text.

    Duplicate texts share one entry. Tokens: lower-cased words of two or more letters or
    digits, English stop words dropped (``bm25s.tokenize``'s defaults); no stemming.

    Args:
        texts: the texts to index (at least one).
        k1, b: BM25's term-frequency saturation and length normalization (Lucene's defaults).
    """

    def __init__(self, texts: Iterable[str], *, k1: float = 1.5, b: float = 0.75) -> None:
        import bm25s  # a light dependency (numpy only); imported here so `import core` stays fast

        self._bm25s = bm25s
        unique = list(dict.fromkeys(texts))
        if not unique:
            raise ValueError("TextBM25 needs at least one text; pass the document's sentences or chunks")
        self.row = {t: i for i, t in enumerate(unique)}
        tokens = bm25s.tokenize(unique, stopwords="en", show_progress=False, return_ids=False)
        self.retriever = bm25s.BM25(k1=k1, b=b)
        self.retriever.index(tokens, show_progress=False)
        self.size = len(unique)

    def scores(self, query: str) -> np.ndarray:
        """The BM25 score of every indexed text for ``query``, in index order."""
        q = self._bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)[0]
        known = [t for t in q if t in self.retriever.vocab_dict]
        if not known:
            return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self.retriever.get_scores(known), dtype=np.float32)

    def scorer(self, query: str) -> Callable[[Sequence[str]], np.ndarray]:
        """``texts -> scores`` for ``query``; a text that was not indexed scores 0."""
        all_scores = self.scores(query)

        def score(texts: Sequence[str]) -> np.ndarray:
            return np.array([all_scores[self.row[t]] if t in self.row else 0.0 for t in texts], dtype=np.float32)

        return score


def reciprocal_rank_fusion(rankings: Sequence[Sequence[int]], *, k: int = RRF_K) -> dict[int, float]:
    """``item -> sum over rankings of 1 / (k + rank)`` (rank 1 = best), best first.

    Example::

        >>> {item: round(score, 4) for item, score in reciprocal_rank_fusion([[3, 1, 2], [1, 3]], k=60).items()}
        {3: 0.0325, 1: 0.0325, 2: 0.0159}
    """
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + 1.0 / (k + rank)
    return dict(sorted(fused.items(), key=lambda kv: -kv[1]))


def hybrid_hits(
    vector_hits: Sequence[Hit],
    chunks: Sequence[Chunk],
    lexical_scores: Callable[[Sequence[str]], Sequence[float] | np.ndarray],
    *,
    k: int,
    depth: int | None = None,
    vector_score: Callable[[Chunk], float] | None = None,
) -> list[Hit]:
    """Hybrid retrieval: the top-``k`` chunks by reciprocal rank fusion of the vector ranking
    (``vector_hits``, best first) and the full-text ranking of ``chunks`` (those with a
    ``lexical_scores`` above 0, best first), each cut at ``depth`` (default ``4 * k``, as
    LanceDB's hybrid search). Each hit keeps its vector score; a chunk only the full-text side
    found gets ``vector_score(chunk)`` (its cosine similarity), or the lowest vector score given.

    Example::

        >>> a, b, c = (Chunk(x, "d", i, 2 * i, 2 * i + 1, x) for i, x in enumerate("abc"))
        >>> lex = lambda texts: [{"a": 0.0, "b": 0.0, "c": 2.0}[t] for t in texts]
        >>> [(h.text, s) for h, s in hybrid_hits([(a, 0.9), (b, 0.8)], [a, b, c], lex, k=2)]
        [('a', 0.9), ('c', 0.8)]
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1; got {k!r}")
    depth = 4 * k if depth is None else depth
    vector_hits = list(vector_hits)[:depth]
    scores = np.asarray(lexical_scores([c.text for c in chunks]), dtype=np.float64)
    if len(scores) != len(chunks):
        raise ValueError(
            f"lexical_scores returned {len(scores)} scores for {len(chunks)} chunks; it must return one per text"
        )
    order = [int(i) for i in np.argsort(-scores, kind="stable") if scores[i] > 0][:depth]
    by_id: dict[str, Chunk] = {c.chunk_id: c for c, _ in vector_hits}
    by_id.update({chunks[i].chunk_id: chunks[i] for i in order})
    ids = list(by_id)
    pos = {cid: n for n, cid in enumerate(ids)}
    fused = reciprocal_rank_fusion(
        [[pos[c.chunk_id] for c, _ in vector_hits], [pos[chunks[i].chunk_id] for i in order]]
    )
    known = {c.chunk_id: s for c, s in vector_hits}
    floor = min(known.values()) if known else 0.0
    out: list[Hit] = []
    for n in list(fused)[:k]:
        chunk = by_id[ids[n]]
        score = known.get(chunk.chunk_id)
        if score is None:
            score = float(vector_score(chunk)) if vector_score is not None else floor
        out.append((chunk, score))
    return out


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
