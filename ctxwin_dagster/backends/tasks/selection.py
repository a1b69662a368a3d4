"""Sentence selection for the extractive engine: a document's sentence index and MMR.

A :class:`SentenceIndex` holds a text's sentences (spans from
:func:`~ctxwin_dagster.core.text.sentences.split_sentences`) with their embeddings and token
counts; :func:`mmr` picks rows by relevance against redundancy within a token budget;
:func:`central_rows` and :func:`top_rows` are the two ways the engine uses it (a summary of a
span of sentences; a context or answer from the most relevant candidates). NumPy only: the
embeddings are computed by the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ctxwin_dagster.core.methods.prompts import NOT_IN_DOCUMENTS
from ctxwin_dagster.core.text.sentences import split_sentences

__all__ = [
    "MIN_USABLE_CHARS",
    "MIN_USABLE_WORDS",
    "SentenceIndex",
    "answer_from_passages",
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


def answer_from_passages(
    question: str,
    passages: Sequence[tuple[str, str]],
    embed: Callable[[Sequence[str]], np.ndarray],
    count_many: Callable[[Sequence[str]], Sequence[int]],
    *,
    threshold: float,
    sentences: int,
    mmr_lambda: float,
) -> tuple[str, list[str], float | None]:
    """The extractive answer: the passage sentences closest to the question.

    Sentences of ``passages`` (``(chunk_id, text)``) are embedded with the question (``embed``
    returns unit vectors); when the best one reaches ``threshold``, up to ``sentences`` of those
    within 0.15 of it are picked by MMR, put in passage order and cited by their chunk id
    (``"… [chunk_id]"``). Returns ``(text, cited chunk ids, best similarity)``: the text is
    :data:`NOT_IN_DOCUMENTS` below the threshold, and the similarity None without sentences.
    """
    sents: list[tuple[int, int, str]] = []  # (passage index, start, text)
    for p, (_cid, text) in enumerate(passages):
        for s, e in split_sentences(text):
            if e - s >= 10:
                sents.append((p, s, text[s:e]))
    # Headings ("Prohibited AI practices") make poor answers: prefer sentences of 4+ words.
    sents = [x for x in sents if len(x[2].split()) >= MIN_USABLE_WORDS] or sents
    if not sents:
        return NOT_IN_DOCUMENTS, [], None
    vecs = embed([question] + [t for _, _, t in sents])
    q, sv = vecs[0], vecs[1:]
    sims = sv @ q
    best = float(sims.max())
    if best < threshold:
        return NOT_IN_DOCUMENTS, [], best
    eligible = np.flatnonzero(sims >= max(threshold, best - 0.15))
    tokens = np.asarray(count_many([sents[i][2] for i in eligible]), dtype=np.int64)
    picked = mmr(sv[eligible], sims[eligible], tokens, 10_000, sentences, mmr_lambda)
    chosen = sorted((int(eligible[i]) for i in picked), key=lambda i: (sents[i][0], sents[i][1]))
    pieces: list[str] = []
    group: list[str] = []
    group_p = -1
    for i in chosen:
        p = sents[i][0]
        if group and p != group_p:
            pieces.append(" ".join(group) + f" [{passages[group_p][0]}]")
            group = []
        group.append(sents[i][2])
        group_p = p
    if group:
        pieces.append(" ".join(group) + f" [{passages[group_p][0]}]")
    cited = list(dict.fromkeys(passages[sents[i][0]][0] for i in chosen))
    return " ".join(pieces), cited, best
