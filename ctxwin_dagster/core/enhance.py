"""Context window enhancement: grow retrieved chunks into windows of their documents.

Retrieval finds small chunks; a model answers better from the text around them
("small-to-big", "sentence window"). :func:`enhance` turns ranked hits into the blocks a model
is given:

``mode="none"``
    each hit's own chunk;
``mode="neighbors"``
    each hit plus ``num_neighbors`` chunks on each side, bounded by its document's ends
    (:func:`~ctxwin_dagster.core.windows.around_hits.neighbor_windows`);
``mode="budget"``
    each hit grown by adjacent chunks while its span stays within ``context_window_size``
    characters (:func:`~ctxwin_dagster.core.windows.around_hits.stitch_windows`);
``mode="focus"``
    sentence focus (:func:`focus_windows`): the sentences of the retrieved chunks are ranked
    by their similarity to the question (plus ``chunk_weight`` × their chunk's score), and the
    best ones grow into sentence-aligned windows of at most ``window_chars`` characters until
    the context holds ``budget_chars`` characters. It needs a sentence scorer (the embedding
    model) and splits sentences with :func:`~ctxwin_dagster.core.sentences.split_sentences`
    unless given another splitter, and gives the best hit rate per character measured
    (evaluations/reports/retrieval_quality.md).

Then, per document, windows that overlap or touch are merged (no character twice), a merged
window keeps the highest score of its parts, and the windows are ordered by score, best first
(:func:`~ctxwin_dagster.core.windows.window.merge_windows`). Every window carries its document
span (``doc_id``, ``start``, ``end``) and the ids of the chunks it was built from.

Window text is exact document text when ``doc_texts`` holds the document; without it the
text is rebuilt from the chunks, which is exact except inside the rare whitespace gaps the
splitter dropped between two chunks (see
:func:`~ctxwin_dagster.core.windows.around_hits.span_text`).

Hits usually come from an index as rows (dicts with ``chunk_id``, ``doc_id``,
``chunk_index``, ``start``, ``end``, ``text``, ``score``): :func:`chunks_from_rows` and
:func:`hits_from_rows` turn them into :class:`~ctxwin_dagster.core.splitting.Chunk` objects.

Plain Python: no Dagster, RAGAS or LanceDB.

Example::

    >>> from ctxwin_dagster.core.splitting import RecursiveSplitter
    >>> text = "aa bb cc dd ee ff"
    >>> chunks = RecursiveSplitter(chunk_size=3, chunk_overlap=0).split(text, doc_id="d", doc_sha256="0")
    >>> hits = [(chunks[1], 0.9), (chunks[2], 0.8), (chunks[5], 0.4)]
    >>> ctx = enhance(hits, chunks, mode="neighbors", num_neighbors=1, doc_texts={"d": text})
    >>> [(w.text, w.start, w.end, w.score) for w in ctx.windows]
    [('aa bb cc dd', 0, 11, 0.9), ('ee ff', 12, 17, 0.4)]
    >>> ctx.n_chars, ctx.text
    (16, 'aa bb cc dd\\n\\nee ff')
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .metrics.scoring import union_length
from .sentences import split_sentences as _split_sentences
from .splitting import Chunk
from .windows.around_hits import neighbor_windows, span_text, stitch_windows
from .windows.window import Window, join_windows, merge_windows

__all__ = [
    "DEFAULT_CONTEXT_WINDOW_SIZE",
    "DEFAULT_FOCUS_BUDGET_CHARS",
    "DEFAULT_FOCUS_CANDIDATES",
    "DEFAULT_FOCUS_CHUNK_WEIGHT",
    "DEFAULT_FOCUS_WINDOW_CHARS",
    "DEFAULT_NUM_NEIGHBORS",
    "MODES",
    "EnhancedContext",
    "EnhanceMode",
    "chunk_from_row",
    "chunks_from_rows",
    "enhance",
    "focus_windows",
    "hits_from_rows",
]

EnhanceMode = Literal["none", "neighbors", "budget", "focus"]

#: The enhancement modes.
MODES: tuple[str, ...] = ("none", "neighbors", "budget", "focus")

#: Chunks added on each side of a hit in ``"neighbors"`` mode when none is given.
DEFAULT_NUM_NEIGHBORS = 1

#: Character budget of one window in ``"budget"`` mode when none is given (a 1,000-character
#: chunk plus about one neighbour on each side, overlaps counted once).
DEFAULT_CONTEXT_WINDOW_SIZE = 3000

#: ``"focus"`` mode defaults, chosen on the SQuAD/CUAD dev sets (retrieval_quality.md): the
#: largest window around one sentence, the characters of the whole context, the weight of the
#: chunk's retrieval score in a sentence's score, and how many chunks to retrieve as candidates.
DEFAULT_FOCUS_WINDOW_CHARS = 700
DEFAULT_FOCUS_BUDGET_CHARS = 4000
DEFAULT_FOCUS_CHUNK_WEIGHT = 0.5
DEFAULT_FOCUS_CANDIDATES = 16

Hit = tuple[Chunk, float]
SentenceSplitter = Callable[[str], Sequence[tuple[int, int]]]
SentenceScorer = Callable[[Sequence[str]], Sequence[float]]


@dataclass(frozen=True, slots=True)
class EnhancedContext:
    """The windows given to a model, and how they were made.

    Attributes:
        windows: merged windows, best score first; no document character appears twice.
        mode: the enhancement mode.
        num_neighbors: chunks added on each side (``"neighbors"`` mode), else None.
        context_window_size: the character budget per hit (``"budget"`` mode), else None.
        focus: the ``"focus"`` settings (``window_chars``, ``budget_chars``, ``chunk_weight``),
            else None.
        hits: ``(chunk_id, score)`` of the retrieved chunks, in retrieval order.
        exact: True when every window's text was cut from the document text (``doc_texts``);
            False when some were rebuilt from chunks (whitespace in splitter gaps may differ).
    """

    windows: list[Window]
    mode: str
    num_neighbors: int | None = None
    context_window_size: int | None = None
    hits: list[tuple[str, float]] = field(default_factory=list)
    exact: bool = True
    focus: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        """The windows' texts in order, separated by a blank line."""
        return join_windows(self.windows)

    @property
    def n_chars(self) -> int:
        """Characters of document text given (the separators not counted)."""
        return sum(len(w.text) for w in self.windows)

    @property
    def spans(self) -> list[tuple[str, int, int]]:
        """``(doc_id, start, end)`` of each window, in order."""
        return [(w.doc_id, w.start, w.end) for w in self.windows]

    def to_dict(self, *, include_text: bool = True) -> dict[str, Any]:
        """A JSON-ready dict (window texts left out with ``include_text=False``)."""
        windows = []
        for w in self.windows:
            d = w.to_dict()
            if not include_text:
                d.pop("text")
            windows.append(d)
        return {
            "mode": self.mode,
            "num_neighbors": self.num_neighbors,
            "context_window_size": self.context_window_size,
            "focus": self.focus,
            "hits": [list(h) for h in self.hits],
            "exact": self.exact,
            "n_chars": self.n_chars,
            "windows": windows,
        }


# --------------------------------------------------------------------------------------
# Index rows -> chunks
# --------------------------------------------------------------------------------------

_ROW_FIELDS = ("chunk_id", "doc_id", "chunk_index", "start", "end", "text")


def chunk_from_row(row: Mapping[str, Any]) -> Chunk:
    """A :class:`Chunk` from an index row (``chunk_id``, ``doc_id``, ``chunk_index``,
    ``start``, ``end``, ``text``, optional ``section``); other keys are ignored.

    Raises:
        ValueError: a field is missing, or ``text`` does not have ``end - start`` characters.

    Example::

        >>> chunk_from_row({"chunk_id": "c", "doc_id": "d", "chunk_index": 0, "start": 3,
        ...                 "end": 8, "text": "hello", "score": 0.5}).end
        8
    """
    missing = [f for f in _ROW_FIELDS if f not in row or row[f] is None]
    if missing:
        raise ValueError(
            f"index row {row.get('chunk_id', '?')!r} lacks {missing}; pass rows with "
            f"{list(_ROW_FIELDS)} (as ChunkIndex.rows() and .search() return them)"
        )
    start, end, text = int(row["start"]), int(row["end"]), str(row["text"])
    if end - start != len(text):
        raise ValueError(
            f"index row {row['chunk_id']!r} spans [{start}, {end}) but holds {len(text)} characters; "
            "the row's text must be the document span (re-index the document)"
        )
    section = row.get("section")
    return Chunk(
        chunk_id=str(row["chunk_id"]),
        doc_id=str(row["doc_id"]),
        chunk_index=int(row["chunk_index"]),
        start=start,
        end=end,
        text=text,
        section=None if section is None else str(section),
        doc_sha256=str(row.get("doc_sha256") or ""),
    )


def chunks_from_rows(rows: Iterable[Mapping[str, Any]]) -> list[Chunk]:
    """:func:`chunk_from_row` for every row, sorted by document and ``chunk_index``."""
    chunks = [chunk_from_row(r) for r in rows]
    chunks.sort(key=lambda c: (c.doc_id, c.chunk_index))
    return chunks


def hits_from_rows(rows: Iterable[Mapping[str, Any]], *, score_key: str = "score") -> list[Hit]:
    """``(chunk, score)`` pairs from search result rows, in the rows' order.

    Example::

        >>> row = {"chunk_id": "c", "doc_id": "d", "chunk_index": 0, "start": 0, "end": 2,
        ...        "text": "hi", "score": 0.75}
        >>> [(c.chunk_id, s) for c, s in hits_from_rows([row])]
        [('c', 0.75)]
    """
    hits: list[Hit] = []
    for r in rows:
        if score_key not in r or r[score_key] is None:
            raise ValueError(
                f"search row {r.get('chunk_id', '?')!r} has no {score_key!r}; pass the rows a search returned "
                "(they carry a score), or name the score field with score_key="
            )
        hits.append((chunk_from_row(r), float(r[score_key])))
    return hits


# --------------------------------------------------------------------------------------
# Enhancement
# --------------------------------------------------------------------------------------


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int; got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value}")
    return value


def _check_texts(hits: Sequence[Hit], doc_texts: Mapping[str, str] | None) -> bool:
    """Whether every hit's document text is given; raise when a given text does not match."""
    if doc_texts is None:
        return not hits
    exact = True
    for chunk, _ in hits:
        text = doc_texts.get(chunk.doc_id)
        if text is None:
            exact = False
            continue
        if text[chunk.start : chunk.end] != chunk.text:
            raise ValueError(
                f"doc_texts[{chunk.doc_id!r}] differs from the indexed chunk {chunk.chunk_id!r} at "
                f"[{chunk.start}, {chunk.end}): the document changed since it was indexed. Re-index it "
                "(e.g. `ctxwin run --doc " + chunk.doc_id + "`), or leave its text out of doc_texts to use the indexed text"
            )
    return exact


def _grow(starts: Sequence[int], ends: Sequence[int], center: int, limit: int) -> tuple[int, int]:
    """Sentences ``lo..hi`` around ``center``, adding one after then one before in turn while
    the span stays within ``limit`` characters (a side stops at the first that does not fit)."""
    lo = hi = center
    start, end = starts[center], ends[center]
    n = len(starts)
    can_after = can_before = True
    while can_after or can_before:
        if can_after:
            if hi + 1 < n and ends[hi + 1] - start <= limit:
                hi += 1
                end = max(end, ends[hi])
            else:
                can_after = False
        if can_before:
            if lo > 0 and end - starts[lo - 1] <= limit:
                lo -= 1
                start = min(start, starts[lo])
            else:
                can_before = False
    return start, end


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


def focus_windows(
    hits: Iterable[Hit],
    chunks: Iterable[Chunk],
    *,
    split_sentences: SentenceSplitter = _split_sentences,
    score_sentences: SentenceScorer,
    doc_texts: Mapping[str, str] | None = None,
    window_chars: int = DEFAULT_FOCUS_WINDOW_CHARS,
    budget_chars: int = DEFAULT_FOCUS_BUDGET_CHARS,
    chunk_weight: float = DEFAULT_FOCUS_CHUNK_WEIGHT,
) -> list[Window]:
    """Sentence focus: windows around the retrieved chunks' sentences closest to the question.

    1. The sentences of each hit's document around the hits are found with
       ``split_sentences(text) -> [(start, end), ...]`` (offsets into the text it is given;
       default :func:`~ctxwin_dagster.core.sentences.split_sentences`),
       applied to whole lines around each hit (± ``2 * window_chars``), so a splitter that
       works line by line gives the same sentences as on the whole document.
    2. Each sentence overlapping a hit chunk gets the score
       ``score_sentences([sentence])[0] + chunk_weight * hit_score`` (its best hit when several
       chunks hold it). ``score_sentences`` is the question's similarity to each text, e.g.
       ``lambda texts: embedder.embed(texts) @ question_vector``.
    3. Best sentence first, each grows into a window of whole sentences of at most
       ``window_chars`` characters (one sentence after, one before, in turn); a window is added
       while the merged context stays within ``budget_chars`` characters (the first always is).

    The windows are not merged yet (:func:`enhance` merges them); each carries the score of its
    sentence and the ids of the chunks it overlaps. Window text is the document text (rebuilt
    from the chunks when ``doc_texts`` lacks the document).

    Example::

        >>> from ctxwin_dagster.core.splitting import RecursiveSplitter
        >>> text = "Cats purr. Dogs bark loudly. Birds sing. Fish swim. Cows moo."
        >>> chunks = RecursiveSplitter(chunk_size=30, chunk_overlap=0).split(text, doc_id="d", doc_sha256="0")
        >>> split = lambda t: [(m.start(), m.end()) for m in __import__("re").finditer(r"[^.]+\\.", t)]
        >>> score = lambda sents: [1.0 if "Dogs" in s else 0.0 for s in sents]
        >>> ws = focus_windows([(chunks[0], 0.5)], chunks, split_sentences=split, score_sentences=score,
        ...                    doc_texts={"d": text}, window_chars=30, budget_chars=30)
        >>> [(w.text, w.score) for w in ws]
        [(' Dogs bark loudly. Birds sing.', 1.25)]
    """
    _check_int("window_chars", window_chars, 1)
    _check_int("budget_chars", budget_chars, 1)
    if not isinstance(chunk_weight, int | float) or isinstance(chunk_weight, bool):
        raise TypeError(f"chunk_weight must be a number; got {chunk_weight!r}")
    hits = [(c, float(sc)) for c, sc in hits]
    if not hits:
        return []
    by_doc: dict[str, list[Chunk]] = {}
    for c in chunks:
        by_doc.setdefault(c.doc_id, []).append(c)
    for lst in by_doc.values():
        lst.sort(key=lambda c: c.chunk_index)
    pad = 2 * window_chars
    # Per document: the regions around the hits, their sentences (document offsets), sorted.
    sentences: dict[str, tuple[list[int], list[int], str]] = {}
    for doc_id in dict.fromkeys(c.doc_id for c, _ in hits):
        doc_chunks = by_doc.get(doc_id)
        if not doc_chunks:
            raise ValueError(f"no chunks of document {doc_id!r}; pass the full chunk list of every hit's document")
        text = doc_texts.get(doc_id) if doc_texts is not None else None
        if text is None:
            text = span_text(doc_chunks, 0, max(c.end for c in doc_chunks))
        regions: list[list[int]] = []
        for a, b in sorted(_line_region(text, c.start - pad, c.end + pad) for c, _ in hits if c.doc_id == doc_id):
            if regions and a <= regions[-1][1]:
                regions[-1][1] = max(regions[-1][1], b)
            else:
                regions.append([a, b])
        starts: list[int] = []
        ends: list[int] = []
        for a, b in regions:
            for s, e in split_sentences(text[a:b]):
                if e > s:
                    starts.append(a + s)
                    ends.append(a + e)
        sentences[doc_id] = (starts, ends, text)
    # Candidate sentences: those overlapping a hit chunk, with their best hit score.
    cand: dict[tuple[str, int], float] = {}
    for c, hit_score in hits:
        starts, ends, _ = sentences[c.doc_id]
        lo = bisect_right(ends, c.start)  # ends are non-decreasing: sentences come in order
        hi = bisect_left(starts, c.end)
        for j in range(lo, hi):
            if ends[j] > c.start and starts[j] < c.end:
                key = (c.doc_id, j)
                cand[key] = max(cand.get(key, float("-inf")), hit_score)
    if not cand:  # no sentence found (empty text?): fall back to the hit chunks themselves
        return neighbor_windows(hits, [c for lst in by_doc.values() for c in lst], num_neighbors=0, doc_texts=doc_texts)
    keys = list(cand)
    texts = [sentences[d][2][sentences[d][0][j] : sentences[d][1][j]] for d, j in keys]
    sims = list(score_sentences(texts))
    if len(sims) != len(keys):
        raise ValueError(f"score_sentences returned {len(sims)} scores for {len(keys)} sentences; it must return one per text")
    scored = sorted(
        ((float(sim) + chunk_weight * cand[key], key) for sim, key in zip(sims, keys)),
        key=lambda t: (-t[0], t[1]),
    )
    chosen: list[tuple[str, int, int, float]] = []
    spans: list[tuple[str, int, int]] = []
    for score, (doc_id, j) in scored:
        starts, ends, _ = sentences[doc_id]
        s, e = _grow(starts, ends, j, window_chars)
        if chosen and _union_chars(spans + [(doc_id, s, e)]) > budget_chars:
            break
        chosen.append((doc_id, s, e, score))
        spans.append((doc_id, s, e))
    windows = []
    for doc_id, s, e, score in chosen:
        text = sentences[doc_id][2]
        ids = tuple(c.chunk_id for c in by_doc[doc_id] if c.start < e and s < c.end)
        windows.append(Window(doc_id, s, e, text[s:e], score, ids))
    return windows


def enhance(
    hits: Iterable[Hit],
    chunks: Iterable[Chunk],
    *,
    mode: EnhanceMode = "neighbors",
    num_neighbors: int | None = None,
    context_window_size: int | None = None,
    doc_texts: Mapping[str, str] | None = None,
    split_sentences: SentenceSplitter | None = None,
    score_sentences: SentenceScorer | None = None,
    window_chars: int | None = None,
    budget_chars: int | None = None,
    chunk_weight: float | None = None,
) -> EnhancedContext:
    """The merged context windows of ranked ``hits`` (see the module docstring).

    Args:
        hits: ``(chunk, score)`` pairs, best first (any number of documents).
        chunks: the ordered chunks of the hits' documents (all of them: neighbours come from here).
        mode: ``"none"``, ``"neighbors"``, ``"budget"`` or ``"focus"``.
        num_neighbors: chunks on each side in ``"neighbors"`` mode (default
            :data:`DEFAULT_NUM_NEIGHBORS`); only valid in that mode.
        context_window_size: characters per window in ``"budget"`` mode (default
            :data:`DEFAULT_CONTEXT_WINDOW_SIZE`); only valid in that mode.
        doc_texts: ``doc_id -> text`` for exact window text; a given text must match the chunks.
        split_sentences, score_sentences: the sentence splitter (default
            :func:`~ctxwin_dagster.core.sentences.split_sentences`) and the question's sentence
            scorer (required) of ``"focus"`` mode (see :func:`focus_windows`).
        window_chars, budget_chars, chunk_weight: ``"focus"`` settings (defaults
            :data:`DEFAULT_FOCUS_WINDOW_CHARS`, :data:`DEFAULT_FOCUS_BUDGET_CHARS`,
            :data:`DEFAULT_FOCUS_CHUNK_WEIGHT`); only valid in that mode.

    Raises:
        ValueError: an unknown mode, an option of another mode, a missing focus function, a
            hit not among ``chunks``, or a document text that no longer matches its chunks.

    Example::

        >>> from ctxwin_dagster.core.splitting import RecursiveSplitter
        >>> text = "aa bb cc dd ee"
        >>> chunks = RecursiveSplitter(chunk_size=3, chunk_overlap=0).split(text, doc_id="d", doc_sha256="0")
        >>> enhance([(chunks[2], 1.0)], chunks, mode="budget", context_window_size=8,
        ...         doc_texts={"d": text}).windows[0].text
        'bb cc dd'
        >>> enhance([(chunks[2], 1.0)], chunks, mode="none", num_neighbors=1)
        Traceback (most recent call last):
        ...
        ValueError: num_neighbors applies to mode='neighbors' only (mode is 'none'); drop it or pass mode='neighbors'
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got {mode!r}")
    if num_neighbors is not None and mode != "neighbors":
        raise ValueError(
            f"num_neighbors applies to mode='neighbors' only (mode is {mode!r}); drop it or pass mode='neighbors'"
        )
    if context_window_size is not None and mode != "budget":
        raise ValueError(
            f"context_window_size applies to mode='budget' only (mode is {mode!r}); drop it or pass mode='budget'"
        )
    focus_opts = {"split_sentences": split_sentences, "score_sentences": score_sentences, "window_chars": window_chars,
                  "budget_chars": budget_chars, "chunk_weight": chunk_weight}
    if mode != "focus":
        given = [k for k, v in focus_opts.items() if v is not None]
        if given:
            raise ValueError(f"{', '.join(given)} apply to mode='focus' only (mode is {mode!r}); drop them or pass mode='focus'")
    hits = [(c, float(s)) for c, s in hits]
    chunks = list(chunks)
    exact = _check_texts(hits, doc_texts)
    if mode == "focus":
        if score_sentences is None:
            raise ValueError(
                "mode='focus' ranks sentences: pass score_sentences= (texts -> similarities to the question, e.g. "
                "lambda ts: embedder.embed(ts) @ question_vector); pass split_sentences= (text -> [(start, end)]) "
                "only to replace the default splitter, ctxwin_dagster.core.sentences.split_sentences"
            )
        known = {c.chunk_id for c in chunks}
        for c, _ in hits:
            if c.chunk_id not in known:
                raise ValueError(
                    f"hit chunk {c.chunk_id!r} (document {c.doc_id!r}) is not in chunks; pass the full chunk list of every hit's document"
                )
        settings: dict[str, Any] = {"focus": {
            "window_chars": DEFAULT_FOCUS_WINDOW_CHARS if window_chars is None else window_chars,
            "budget_chars": DEFAULT_FOCUS_BUDGET_CHARS if budget_chars is None else budget_chars,
            "chunk_weight": DEFAULT_FOCUS_CHUNK_WEIGHT if chunk_weight is None else chunk_weight,
        }}
        windows = focus_windows(hits, chunks, split_sentences=split_sentences or _split_sentences, score_sentences=score_sentences,
                                doc_texts=doc_texts, **settings["focus"])
    elif mode == "budget":
        size = _check_int("context_window_size", DEFAULT_CONTEXT_WINDOW_SIZE if context_window_size is None else context_window_size, 1)
        windows = stitch_windows(hits, chunks, context_window_size=size, doc_texts=doc_texts)
        settings = {"context_window_size": size}
    else:
        n = 0 if mode == "none" else _check_int("num_neighbors", DEFAULT_NUM_NEIGHBORS if num_neighbors is None else num_neighbors, 0)
        windows = neighbor_windows(hits, chunks, num_neighbors=n, doc_texts=doc_texts)
        settings = {"num_neighbors": n} if mode == "neighbors" else {}
    merged = merge_windows(windows, doc_texts=doc_texts)
    return EnhancedContext(
        windows=merged,
        mode=mode,
        hits=[(c.chunk_id, s) for c, s in hits],
        exact=exact,
        **settings,
    )
