"""Sentence selection for the extractive engine: a document's sentence index and MMR.

A :class:`SentenceIndex` holds a text's sentences (spans from
:func:`~ctxwin_dagster.core.text.sentences.split_sentences`) with their embeddings and token
counts; :func:`mmr` picks rows by relevance against redundancy within a token budget;
:func:`central_rows` and :func:`top_rows` are the two ways the engine uses it (a summary of a
span of sentences; a context from the most relevant candidates). NumPy only: the embeddings are
computed by the engine. The answer is :mod:`.answering`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "MIN_USABLE_CHARS",
    "MIN_USABLE_WORDS",
    "SentenceIndex",
    "central_rows",
    "mmr",
    "top_rows",
]

#: A sentence stands as a context or summary sentence when it has this many characters and words
#: (headings and fragments are used only when there is nothing else).
MIN_USABLE_CHARS = 25
MIN_USABLE_WORDS = 4


@dataclass(slots=True)
class SentenceIndex:
    """A document's sentences (spans, texts) with their embeddings and token counts."""

    starts: np.ndarray
    ends: np.ndarray
    texts: list[str]
    vectors: np.ndarray
    tokens: np.ndarray
    usable: np.ndarray  # long enough to stand as a context/summary sentence

    @classmethod
    def build(
        cls, spans: Sequence[tuple[int, int]], texts: list[str], vectors: np.ndarray, tokens: Sequence[int]
    ) -> SentenceIndex:
        """The index of sentences at ``spans`` with their ``texts``, embeddings and token counts."""
        usable = [len(t) >= MIN_USABLE_CHARS and len(t.split()) >= MIN_USABLE_WORDS for t in texts]
        return cls(
            np.asarray([s for s, _ in spans], dtype=np.int64),
            np.asarray([e for _, e in spans], dtype=np.int64),
            texts,
            np.asarray(vectors, dtype=np.float32),
            np.asarray(tokens, dtype=np.int64),
            np.asarray(usable, dtype=bool),
        )

    def in_range(self, start: int, end: int) -> np.ndarray:
        """Indices of the sentences lying wholly inside ``[start, end)``."""
        lo = int(np.searchsorted(self.starts, start, side="left"))
        hi = int(np.searchsorted(self.starts, end, side="left"))
        idx = np.arange(lo, hi)
        return idx[self.ends[idx] <= end]

    def overlapping(self, start: int, end: int) -> np.ndarray:
        """Indices of the sentences that share any character with ``[start, end)``."""
        lo = int(np.searchsorted(self.ends, start, side="right"))
        hi = int(np.searchsorted(self.starts, end, side="left"))
        return np.arange(lo, max(lo, hi))


def mmr(
    vectors: np.ndarray, relevance: np.ndarray, tokens: np.ndarray, budget: int, max_items: int | None, lam: float
) -> list[int]:
    """Greedy MMR over rows: relevance vs. redundancy, within a token budget (row order).

    ``lam`` weighs relevance against redundancy (1 = relevance only); at most ``max_items``
    rows (None: as many as the budget holds).
    """
    n = len(relevance)
    if n == 0 or budget <= 0:
        return []
    chosen: list[int] = []
    used = 0
    redundancy = np.full(n, -1.0, dtype=np.float32)
    available = tokens.astype(np.int64) + 1 <= budget
    while available.any():
        score = lam * relevance - (1 - lam) * np.maximum(redundancy, 0.0)
        score = np.where(available, score, -np.inf)
        best = int(np.argmax(score))  # ties: lowest index (document order) — deterministic
        chosen.append(best)
        used += int(tokens[best]) + 1
        available[best] = False
        if max_items is not None and len(chosen) >= max_items:
            break
        available &= tokens + 1 <= budget - used
        redundancy = np.maximum(redundancy, vectors @ vectors[best])
    return chosen


def central_rows(idx: SentenceIndex, rows: np.ndarray, budget: int, lam: float) -> list[int]:
    """Rows (document order) of a summary of ``rows`` within ``budget`` tokens: MMR around their centroid."""
    if len(rows) == 0:
        return []
    if idx.usable[rows].any():  # headings and fragments only when there is nothing else
        rows = rows[idx.usable[rows]]
    vecs = idx.vectors[rows]
    centroid = vecs.mean(axis=0)
    norm = float(np.linalg.norm(centroid))
    relevance = vecs @ (centroid / norm) if norm > 0 else np.zeros(len(rows), dtype=np.float32)
    picked = mmr(vecs, relevance, idx.tokens[rows], budget, None, lam)
    return sorted(int(rows[i]) for i in picked)


def top_rows(
    vectors: np.ndarray, relevance: np.ndarray, tokens: np.ndarray, budget: int, max_items: int, lam: float
) -> list[int]:
    """Rows picked by MMR among the most relevant candidates (``-inf`` relevance = excluded)."""
    finite = np.isfinite(relevance)
    n_valid = int(finite.sum())
    if n_valid == 0:
        return []
    # Only the most relevant candidates can win; MMR over a short list keeps it fast.
    k = min(n_valid, max(32, 8 * max_items))
    top = (
        np.argpartition(-np.where(finite, relevance, -np.inf), k - 1)[:k]
        if k < len(relevance)
        else np.arange(len(relevance))
    )
    top = top[finite[top]]
    top = top[np.lexsort((top, -relevance[top]))]  # by relevance, ties by position
    picked = mmr(vectors[top], relevance[top], tokens[top], budget, max_items, lam)
    return [int(top[i]) for i in picked]
