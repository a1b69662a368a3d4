"""Context window enhancement: grow retrieved chunks into windows of their documents.

Retrieval finds small chunks; a model answers better from the text around them
("small-to-big", "sentence window"). :func:`enhance` turns ranked hits into the blocks a model
is given:

``mode="none"``
    each hit's own chunk;
``mode="neighbors"``
    each hit plus ``num_neighbors`` chunks on each side, bounded by its document's ends
    (:func:`~ctxwin_dagster.core.retrieval.around_hits.neighbor_windows`);
``mode="budget"``
    each hit grown by adjacent chunks while its span stays within ``context_window_size``
    characters (:func:`~ctxwin_dagster.core.retrieval.around_hits.stitch_windows`);
``mode="focus"``
    sentence focus (:func:`focus_windows`): the sentences of the retrieved chunks are ranked
    by their similarity to the question (plus ``chunk_weight`` × their chunk's score), and the
    best ones grow into sentence-aligned windows of at most ``window_chars`` characters until
    the context holds ``budget_chars`` characters. It needs a sentence scorer (the embedding
    model) and splits sentences with :func:`~ctxwin_dagster.core.text.sentences.split_sentences`
    unless given another splitter, and gives the best hit rate per character measured
    (evaluations/reports/retrieval_quality.md).

Then, per document, windows that overlap or touch are merged (no character twice), a merged
window keeps the highest score of its parts, and the windows are ordered by score, best first
(:func:`~ctxwin_dagster.core.retrieval.window.merge_windows`). Every window carries its document
span (``doc_id``, ``start``, ``end``) and the ids of the chunks it was built from.

Window text is exact document text when ``doc_texts`` holds the document; without it the
text is rebuilt from the chunks, which is exact except inside the rare whitespace gaps the
splitter dropped between two chunks (see
:func:`~ctxwin_dagster.core.retrieval.around_hits.span_text`).

Hits usually come from an index as rows (dicts with ``chunk_id``, ``doc_id``,
``chunk_index``, ``start``, ``end``, ``text``, ``score``): :func:`chunks_from_rows` and
:func:`hits_from_rows` turn them into :class:`~ctxwin_dagster.core.text.splitting.Chunk` objects.

Plain Python: no Dagster, RAGAS or LanceDB.

Example::

    >>> from ctxwin_dagster.core.text.splitting import RecursiveSplitter
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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ctxwin_dagster.core.retrieval.around_hits import neighbor_windows, stitch_windows
from ctxwin_dagster.core.retrieval.sentence_focus import SentenceScorer, SentenceSplitter, focus_windows
from ctxwin_dagster.core.retrieval.window import Window, join_windows, merge_windows
from ctxwin_dagster.core.text.sentences import split_sentences as _split_sentences
from ctxwin_dagster.core.text.splitting import Chunk

__all__ = [
    "DEFAULT_CONTEXT_WINDOW_SIZE",
    "DEFAULT_FOCUS_BUDGET_CHARS",
    "DEFAULT_FOCUS_CANDIDATES",
    "DEFAULT_FOCUS_CHUNK_WEIGHT",
    "DEFAULT_FOCUS_LEXICAL_WEIGHT",
    "DEFAULT_FOCUS_STRUCTURE",
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
#: The weight of a sentence's full-text (BM25) score, scaled to [0, 1], when full-text scores
#: are given, and whether windows follow the document's structure (paragraphs, clauses).
DEFAULT_FOCUS_LEXICAL_WEIGHT = 0.2
DEFAULT_FOCUS_STRUCTURE = False

Hit = tuple[Chunk, float]


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
        routed_to: the documents a folder-wide search was narrowed to
            (:mod:`~ctxwin_dagster.core.retrieval.routing`), else None.
    """

    windows: list[Window]
    mode: str
    num_neighbors: int | None = None
    context_window_size: int | None = None
    hits: list[tuple[str, float]] = field(default_factory=list)
    exact: bool = True
    focus: dict[str, Any] | None = None
    routed_to: list[str] | None = None

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
                "(e.g. `ctxwin run --doc "
                + chunk.doc_id
                + "`), or leave its text out of doc_texts to use the indexed text"
            )
    return exact


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
    lexical_scores: SentenceScorer | None = None,
    lexical_weight: float | None = None,
    structure: bool | None = None,
    score_drop: float | None = None,
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
            :func:`~ctxwin_dagster.core.text.sentences.split_sentences`) and the question's sentence
            scorer (required) of ``"focus"`` mode (see :func:`focus_windows`).
        window_chars, budget_chars, chunk_weight: ``"focus"`` settings (defaults
            :data:`DEFAULT_FOCUS_WINDOW_CHARS`, :data:`DEFAULT_FOCUS_BUDGET_CHARS`,
            :data:`DEFAULT_FOCUS_CHUNK_WEIGHT`); only valid in that mode.
        lexical_scores, lexical_weight, structure, score_drop: the optional ``"focus"`` signals
            (full-text scores and their weight, structure-following windows, the adaptive
            budget's score drop; see :func:`~ctxwin_dagster.core.retrieval.sentence_focus.focus_windows`).

    Raises:
        ValueError: an unknown mode, an option of another mode, a missing focus function, a
            hit not among ``chunks``, or a document text that no longer matches its chunks.

    Example::

        >>> from ctxwin_dagster.core.text.splitting import RecursiveSplitter
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
    focus_opts = {
        "split_sentences": split_sentences,
        "score_sentences": score_sentences,
        "window_chars": window_chars,
        "budget_chars": budget_chars,
        "chunk_weight": chunk_weight,
        "lexical_scores": lexical_scores,
        "lexical_weight": lexical_weight,
        "structure": structure,
        "score_drop": score_drop,
    }
    if mode != "focus":
        given = [k for k, v in focus_opts.items() if v is not None]
        if given:
            raise ValueError(
                f"{', '.join(given)} apply to mode='focus' only (mode is {mode!r}); drop them or pass mode='focus'"
            )
    hits = [(c, float(s)) for c, s in hits]
    chunks = list(chunks)
    exact = _check_texts(hits, doc_texts)
    if mode == "focus":
        if score_sentences is None:
            raise ValueError(
                "mode='focus' ranks sentences: pass score_sentences= (texts -> similarities to the question, e.g. "
                "lambda ts: embedder.embed(ts) @ question_vector); pass split_sentences= (text -> [(start, end)]) "
                "only to replace the default splitter, ctxwin_dagster.core.text.sentences.split_sentences"
            )
        known = {c.chunk_id for c in chunks}
        for c, _ in hits:
            if c.chunk_id not in known:
                raise ValueError(
                    f"hit chunk {c.chunk_id!r} (document {c.doc_id!r}) is not in chunks; pass the full chunk list of every hit's document"
                )
        settings: dict[str, Any] = {
            "focus": {
                "window_chars": DEFAULT_FOCUS_WINDOW_CHARS if window_chars is None else window_chars,
                "budget_chars": DEFAULT_FOCUS_BUDGET_CHARS if budget_chars is None else budget_chars,
                "chunk_weight": DEFAULT_FOCUS_CHUNK_WEIGHT if chunk_weight is None else chunk_weight,
                "lexical_weight": (0.0 if lexical_scores is None else DEFAULT_FOCUS_LEXICAL_WEIGHT)
                if lexical_weight is None
                else lexical_weight,
                "structure": DEFAULT_FOCUS_STRUCTURE if structure is None else bool(structure),
                "score_drop": score_drop,
            }
        }
        windows = focus_windows(
            hits,
            chunks,
            split_sentences=split_sentences or _split_sentences,
            score_sentences=score_sentences,
            doc_texts=doc_texts,
            lexical_scores=lexical_scores,
            **settings["focus"],
        )
    elif mode == "budget":
        size = _check_int(
            "context_window_size",
            DEFAULT_CONTEXT_WINDOW_SIZE if context_window_size is None else context_window_size,
            1,
        )
        windows = stitch_windows(hits, chunks, context_window_size=size, doc_texts=doc_texts)
        settings = {"context_window_size": size}
    else:
        n = (
            0
            if mode == "none"
            else _check_int("num_neighbors", DEFAULT_NUM_NEIGHBORS if num_neighbors is None else num_neighbors, 0)
        )
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
