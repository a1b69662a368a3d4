"""Sentence focus: windows around the retrieved chunks' sentences closest to the question.

Retrieval finds chunks; the characters a model is given are better spent around the sentences
that answer than around whole chunks. :func:`focus_windows` ranks the sentences of the
retrieved chunks and grows the best ones into windows of whole sentences until a character
budget is spent. Besides the dense similarity of each sentence to the question, three
optional signals, each measured on the tuning split of ``evaluations/retrieval_quality.py``:

* **lexical** (``lexical_scores``, ``lexical_weight``): a full-text score of each sentence
  (BM25 over the document's sentences, :class:`~ctxwin_dagster.core.retrieval.lexical.SentenceBM25`),
  scaled to ``[0, 1]`` by the best candidate and added with a weight — the "hybrid search" of
  vector stores, applied at sentence level;
* **structure** (``structure=True``): a window first covers the paragraph or numbered clause
  its sentence belongs to (blank lines, headings and list/section numbers start a new one)
  before it grows into the neighbouring ones, so a clause is given whole when it fits;
* **adaptive budget** (``score_drop``): windows whose sentence scores more than
  ``score_drop`` below the best one are not added, so easy questions stop early and the
  characters saved are not spent on noise.

Plain Python and numpy: no Dagster, RAGAS or LanceDB.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from ctxwin_dagster.core.evaluation.metrics.scoring import union_length
from ctxwin_dagster.core.retrieval.window import Window, neighbor_windows
from ctxwin_dagster.core.text.splitting import Chunk

__all__ = ["SentenceScorer", "SentenceSplitter", "focus_windows", "structure_starts"]

Hit = tuple[Chunk, float]
SentenceSplitter = Callable[[str], Sequence[tuple[int, int]]]
SentenceScorer = Callable[[Sequence[str]], "Sequence[float] | np.ndarray"]

# A line that opens a new unit of structure: a heading number ("12.", "12.3", "Section 4",
# "ARTICLE V"), a list marker ("(a)", "(iv)", "a)"), or a short all-capitals heading.
_UNIT_START = re.compile(
    r"[ \t]*(?:(?:section|article|clause|schedule|exhibit|annex|appendix|part|§)\s*[0-9IVXLC]+"
    r"|[0-9]+(?:\.[0-9]+)*[.)]?\s|\(?[a-zA-Z0-9]{1,4}\)\s|[A-Z][A-Z0-9 ,&'\-]{2,60}$)",
    re.IGNORECASE,
)


def structure_starts(text: str, a: int = 0, b: int | None = None) -> list[int]:
    """Offsets in ``[a, b)`` where a unit of the document's structure starts: the first line
    after a blank line, and every line that opens with a section or list number or is a short
    heading in capitals (see ``_UNIT_START``).

    Example::

        >>> t = "1. Term\\nThe term is two years.\\n\\n2. Fees\\nFees are due monthly."
        >>> [t[i:i + 7] for i in structure_starts(t)]
        ['1. Term', '2. Fees']
    """
    b = len(text) if b is None else b
    starts: list[int] = []
    pos = text.rfind("\n", 0, a) + 1 if a > 0 else 0
    blank_before = pos == 0
    while pos < b:
        nl = text.find("\n", pos)
        end = b if nl < 0 or nl > b else nl
        line = text[pos:end]
        if line.strip():
            if pos >= a and (blank_before or _UNIT_START.match(line)):
                starts.append(pos + len(line) - len(line.lstrip()))
            blank_before = False
        else:
            blank_before = True
        if nl < 0:
            break
        pos = nl + 1
    return starts


def _grow(
    starts: Sequence[int], ends: Sequence[int], center: int, limit: int, lo_bound: int = 0, hi_bound: int | None = None
) -> tuple[int, int, int, int]:
    """Sentences ``lo..hi`` around ``center`` within ``[lo_bound, hi_bound]``, adding one after
    then one before in turn while the span stays within ``limit`` characters (a side stops at
    the first that does not fit). Returns ``(start, end, lo, hi)``."""
    hi_bound = len(starts) - 1 if hi_bound is None else hi_bound
    return _grow_from(starts, ends, center, center, limit, lo_bound, hi_bound)


def _grow_from(
    starts: Sequence[int], ends: Sequence[int], lo: int, hi: int, limit: int, lo_bound: int, hi_bound: int
) -> tuple[int, int, int, int]:
    start, end = starts[lo], max(ends[lo : hi + 1])
    can_after = can_before = True
    while can_after or can_before:
        if can_after:
            if hi + 1 <= hi_bound and ends[hi + 1] - start <= limit:
                hi += 1
                end = max(end, ends[hi])
            else:
                can_after = False
        if can_before:
            if lo - 1 >= lo_bound and end - starts[lo - 1] <= limit:
                lo -= 1
                start = min(start, starts[lo])
            else:
                can_before = False
    return start, end, lo, hi


def _line_region(text: str, a: int, b: int) -> tuple[int, int]:
    """``[a, b)`` clipped to the text and widened to whole lines."""
    a = max(0, min(a, len(text)))
    b = max(0, min(b, len(text)))
    a = text.rfind("\n", 0, a) + 1 if a > 0 else 0
    nl = text.find("\n", b) if b > 0 else 0
    return a, (len(text) if nl < 0 else nl)


def _union_chars(spans: list[tuple[str, int, int]]) -> int:
    by_doc: dict[str, list[tuple[int, int]]] = {}
    for d, s, e in spans:
        by_doc.setdefault(d, []).append((s, e))
    return sum(union_length(lst) for lst in by_doc.values())


def _check_number(name: str, value: object, minimum: float, *, integer: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise TypeError(f"{name} must be {'an int' if integer else 'a number'}; got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value}")


class _DocSentences:
    """The sentences of one document around its hits, in order, with their structure units."""

    def __init__(self, text: str, regions: list[list[int]], split: SentenceSplitter, structure: bool) -> None:
        self.text = text
        self.starts: list[int] = []
        self.ends: list[int] = []
        unit_starts: list[int] = []
        for a, b in regions:
            for s, e in split(text[a:b]):
                if e > s:
                    self.starts.append(a + s)
                    self.ends.append(a + e)
            if structure:
                unit_starts += structure_starts(text, a, b)
        # unit[j]: the structure unit sentence j lies in (regions are separate units too);
        # non-decreasing, as sentences come in document order
        bounds = sorted({a for a, _ in regions} | set(unit_starts))
        self.unit: list[int] = [bisect_right(bounds, s) for s in self.starts]

    def window(self, j: int, limit: int, structure: bool) -> tuple[int, int]:
        if not structure:
            s, e, _, _ = _grow(self.starts, self.ends, j, limit)
            return s, e
        # grow inside the sentence's unit first, then across units
        lo_u = bisect_left(self.unit, self.unit[j])
        hi_u = bisect_right(self.unit, self.unit[j]) - 1
        _, _, lo, hi = _grow(self.starts, self.ends, j, limit, lo_u, hi_u)
        s, e, _, _ = _grow_from(self.starts, self.ends, lo, hi, limit, 0, len(self.starts) - 1)
        return s, e


def focus_windows(
    hits: Iterable[Hit],
    chunks: Iterable[Chunk],
    *,
    split_sentences: SentenceSplitter,
    score_sentences: SentenceScorer,
    doc_texts: Mapping[str, str],
    window_chars: int = 700,
    budget_chars: int = 4000,
    chunk_weight: float = 0.5,
    lexical_scores: SentenceScorer | None = None,
    lexical_weight: float = 0.0,
    structure: bool = False,
    score_drop: float | None = None,
) -> list[Window]:
    """Sentence focus: windows around the retrieved chunks' sentences closest to the question.

    1. The sentences of each hit's document around the hits are found with
       ``split_sentences(text) -> [(start, end), ...]`` (offsets into the text it is given),
       applied to whole lines around each hit (± ``2 * window_chars``), so a splitter that
       works line by line gives the same sentences as on the whole document.
    2. Each sentence overlapping a hit chunk gets the score
       ``sim + chunk_weight * hit_score + lexical_weight * lex / max(lex)``, where ``sim`` is
       ``score_sentences([sentence])[0]`` (the question's similarity to the text, e.g.
       ``lambda texts: embedder.embed(texts) @ question_vector``), ``hit_score`` the best
       score of the hits holding it, and ``lex`` the optional ``lexical_scores`` (e.g. BM25;
       the best candidate's is 1 after scaling, 0 when no candidate matches a word).
    3. Best sentence first, each grows into a window of whole sentences of at most
       ``window_chars`` characters (one sentence after, one before, in turn; with
       ``structure=True`` inside its paragraph or clause first); a window is added while the
       merged context stays within ``budget_chars`` characters (the first always is) and, with
       ``score_drop``, while its score is at least the best score minus ``score_drop``.

    ``doc_texts`` must hold the text of every hit's document (``enhance`` rebuilds a missing one
    from its chunks). The windows are not merged yet
    (:func:`~ctxwin_dagster.core.retrieval.enhance.enhance` merges them); each carries the score
    of its sentence and the ids of the chunks it overlaps.

    Example::

        >>> from ctxwin_dagster.core.text.splitting import RecursiveSplitter
        >>> text = "Cats purr. Dogs bark loudly. Birds sing. Fish swim. Cows moo."
        >>> chunks = RecursiveSplitter(chunk_size=30, chunk_overlap=0).split(text, doc_id="d", doc_sha256="0")
        >>> split = lambda t: [(m.start(), m.end()) for m in __import__("re").finditer(r"[^.]+\\.", t)]
        >>> score = lambda sents: [1.0 if "Dogs" in s else 0.0 for s in sents]
        >>> ws = focus_windows([(chunks[0], 0.5)], chunks, split_sentences=split, score_sentences=score,
        ...                    doc_texts={"d": text}, window_chars=30, budget_chars=30)
        >>> [(w.text, w.score) for w in ws]
        [(' Dogs bark loudly. Birds sing.', 1.25)]
    """
    _check_focus_args(window_chars, budget_chars, chunk_weight, lexical_weight, score_drop, lexical_scores)
    hits = [(c, float(sc)) for c, sc in hits]
    if not hits:
        return []
    by_doc = _chunks_by_doc(chunks)
    sentences = {
        doc_id: _doc_sentences(doc_id, hits, by_doc, doc_texts, 2 * window_chars, split_sentences, structure)
        for doc_id in dict.fromkeys(c.doc_id for c, _ in hits)
    }
    cand = _candidates(hits, sentences)
    if cand:
        keys = list(cand)
        texts = [sentences[d].text[sentences[d].starts[j] : sentences[d].ends[j]] for d, j in keys]
        sims = _similarities(texts, score_sentences, lexical_scores, lexical_weight)
        scored = sorted(
            ((sim + chunk_weight * cand[key], key) for sim, key in zip(sims, keys)), key=lambda t: (-t[0], t[1])
        )
        windows = []
        for doc_id, s, e, score in _chosen(scored, sentences, window_chars, budget_chars, structure, score_drop):
            text = sentences[doc_id].text
            ids = tuple(c.chunk_id for c in by_doc[doc_id] if c.start < e and s < c.end)
            windows.append(Window(doc_id, s, e, text[s:e], score, ids))
        return windows
    # no sentence found (empty text?): fall back to the hit chunks themselves
    return neighbor_windows(hits, [c for lst in by_doc.values() for c in lst], num_neighbors=0, doc_texts=doc_texts)


def _check_focus_args(
    window_chars: int,
    budget_chars: int,
    chunk_weight: float,
    lexical_weight: float,
    score_drop: float | None,
    lexical_scores: SentenceScorer | None,
) -> None:
    _check_number("window_chars", window_chars, 1, integer=True)
    _check_number("budget_chars", budget_chars, 1, integer=True)
    _check_number("chunk_weight", chunk_weight, float("-inf"))
    _check_number("lexical_weight", lexical_weight, 0)
    if score_drop is not None:
        _check_number("score_drop", score_drop, 0)
    if lexical_weight and lexical_scores is None:
        raise ValueError(
            "lexical_weight needs lexical_scores= (texts -> full-text scores, e.g. SentenceBM25.scorer(question))"
        )


def _chunks_by_doc(chunks: Iterable[Chunk]) -> dict[str, list[Chunk]]:
    """The chunks of each document, by ``chunk_index``."""
    by_doc: dict[str, list[Chunk]] = {}
    for c in chunks:
        by_doc.setdefault(c.doc_id, []).append(c)
    for lst in by_doc.values():
        lst.sort(key=lambda c: c.chunk_index)
    return by_doc


def _doc_sentences(
    doc_id: str,
    hits: Sequence[Hit],
    by_doc: Mapping[str, Sequence[Chunk]],
    doc_texts: Mapping[str, str],
    pad: int,
    split: SentenceSplitter,
    structure: bool,
) -> _DocSentences:
    """The sentences of ``doc_id`` in the whole lines around its hits (``pad`` characters each side)."""
    doc_chunks = by_doc.get(doc_id)
    if not doc_chunks:
        raise ValueError(f"no chunks of document {doc_id!r}; pass the full chunk list of every hit's document")
    text = doc_texts.get(doc_id)
    if text is None:
        raise ValueError(
            f"no text of document {doc_id!r} in doc_texts; pass every hit's document text "
            "(enhance() rebuilds a missing one from its chunks)"
        )
    regions: list[list[int]] = []
    for a, b in sorted(_line_region(text, c.start - pad, c.end + pad) for c, _ in hits if c.doc_id == doc_id):
        if regions and a <= regions[-1][1]:
            regions[-1][1] = max(regions[-1][1], b)
        else:
            regions.append([a, b])
    return _DocSentences(text, regions, split, structure)


def _candidates(hits: Sequence[Hit], sentences: Mapping[str, _DocSentences]) -> dict[tuple[str, int], float]:
    """Candidate sentences ``(doc_id, index)``: those overlapping a hit chunk, with their best hit score."""
    cand: dict[tuple[str, int], float] = {}
    for c, hit_score in hits:
        ds = sentences[c.doc_id]
        for j in range(bisect_right(ds.ends, c.start), bisect_left(ds.starts, c.end)):
            if ds.ends[j] > c.start and ds.starts[j] < c.end:
                key = (c.doc_id, j)
                cand[key] = max(cand.get(key, float("-inf")), hit_score)
    return cand


def _similarities(
    texts: Sequence[str],
    score_sentences: SentenceScorer,
    lexical_scores: SentenceScorer | None,
    lexical_weight: float,
) -> list[float]:
    """Each sentence's similarity to the question, plus its weighted, scaled lexical score."""
    sims = [float(x) for x in score_sentences(texts)]
    if len(sims) != len(texts):
        raise ValueError(
            f"score_sentences returned {len(sims)} scores for {len(texts)} sentences; it must return one per text"
        )
    if lexical_scores is not None and lexical_weight:
        lex = [float(x) for x in lexical_scores(texts)]
        if len(lex) != len(texts):
            raise ValueError(
                f"lexical_scores returned {len(lex)} scores for {len(texts)} sentences; it must return one per text"
            )
        top = max(lex)
        sims = [s + (lexical_weight * x / top if top > 0 else 0.0) for s, x in zip(sims, lex)]
    return sims


def _chosen(
    scored: Sequence[tuple[float, tuple[str, int]]],
    sentences: Mapping[str, _DocSentences],
    window_chars: int,
    budget_chars: int,
    structure: bool,
    score_drop: float | None,
) -> list[tuple[str, int, int, float]]:
    """``(doc_id, start, end, score)`` of the windows of the best sentences, best first, while the
    merged context stays within ``budget_chars`` and the score within ``score_drop`` of the best."""
    floor = scored[0][0] - score_drop if score_drop is not None else float("-inf")
    chosen: list[tuple[str, int, int, float]] = []
    spans: list[tuple[str, int, int]] = []
    for score, (doc_id, j) in scored:
        if chosen and score < floor:
            break
        s, e = sentences[doc_id].window(j, window_chars, structure)
        if chosen and _union_chars(spans + [(doc_id, s, e)]) > budget_chars:
            break
        chosen.append((doc_id, s, e, score))
        spans.append((doc_id, s, e))
    return chosen
