"""Context window enhancement: grow retrieved chunks into windows of their documents.

Retrieval finds small chunks; a model answers better from the text around them
("small-to-big", "sentence window"). :func:`enhance` turns ranked hits into the blocks a model
is given, as a :class:`~ctxwin_dagster.core.retrieval.settings.RetrievalSettings`' enhancement
mode says:

``"none"``
    each hit's own chunk;
``"neighbors"``
    each hit plus ``num_neighbors`` chunks on each side, bounded by its document's ends
    (:func:`~ctxwin_dagster.core.retrieval.window.neighbor_windows`);
``"budget"``
    each hit grown by adjacent chunks while its span stays within ``context_window_size``
    characters (:func:`~ctxwin_dagster.core.retrieval.window.stitch_windows`);
``"focus"``
    sentence focus (:func:`focus_windows`): the sentences of the retrieved chunks are ranked
    by their similarity to the question (plus a weight × their chunk's score), and the best
    ones grow into sentence-aligned windows of at most 700 characters until the context holds
    ``focus_chars`` characters. It needs a sentence scorer (the embedding model) and splits
    sentences with :func:`~ctxwin_dagster.core.text.sentences.split_sentences` unless given
    another splitter, and gives the best hit rate per character measured
    (evaluations/reports/retrieval_quality.md).

Then, per document, windows that overlap or touch are merged (no character twice), a merged
window keeps the highest score of its parts, and the windows are ordered by score, best first
(:func:`~ctxwin_dagster.core.retrieval.window.merge_windows`). Every window carries its document
span (``doc_id``, ``start``, ``end``) and the ids of the chunks it was built from.

Window text is exact document text when ``doc_texts`` holds the document; without it the
text is rebuilt from the chunks, which is exact except inside the rare whitespace gaps the
splitter dropped between two chunks (see
:func:`~ctxwin_dagster.core.retrieval.window.span_text`).

Hits usually come from an index as rows: :mod:`~ctxwin_dagster.core.retrieval.rows` turns them
into :class:`~ctxwin_dagster.core.text.splitting.Chunk` objects.

Plain Python: no Dagster, RAGAS or LanceDB.

Example::

    >>> from ctxwin_dagster.core.text.splitting import RecursiveSplitter
    >>> text = "aa bb cc dd ee ff"
    >>> chunks = RecursiveSplitter(chunk_size=3, chunk_overlap=0).split(text, doc_id="d", doc_sha256="0")
    >>> hits = [(chunks[1], 0.9), (chunks[2], 0.8), (chunks[5], 0.4)]
    >>> neighbors = RetrievalSettings(enhance_mode="neighbors", num_neighbors=1)
    >>> ctx = enhance(hits, chunks, neighbors, doc_texts={"d": text})
    >>> [(w.text, w.start, w.end, w.score) for w in ctx.windows]
    [('aa bb cc dd', 0, 11, 0.9), ('ee ff', 12, 17, 0.4)]
    >>> ctx.n_chars, ctx.text
    (16, 'aa bb cc dd\\n\\nee ff')
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ctxwin_dagster.core.json_types import JSONObject, JSONValue
from ctxwin_dagster.core.retrieval.sentence_focus import SentenceScorer, SentenceSplitter, focus_windows
from ctxwin_dagster.core.retrieval.settings import (
    DEFAULT_CONTEXT_WINDOW_SIZE,
    DEFAULT_FOCUS_BUDGET_CHARS,
    DEFAULT_FOCUS_CHUNK_WEIGHT,
    DEFAULT_FOCUS_LEXICAL_WEIGHT,
    DEFAULT_FOCUS_WINDOW_CHARS,
    DEFAULT_NUM_NEIGHBORS,
    RetrievalSettings,
)
from ctxwin_dagster.core.retrieval.window import (
    Window,
    document_text,
    join_windows,
    merge_windows,
    neighbor_windows,
    stitch_windows,
    with_openings,
)
from ctxwin_dagster.core.text.sentences import split_sentences as _split
from ctxwin_dagster.core.text.splitting import Chunk

__all__ = [
    "EnhancedContext",
    "enhance",
    "focus_windows",
]

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
    focus: JSONObject | None = None
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

    def to_dict(self, *, include_text: bool = True) -> JSONObject:
        """A JSON-ready dict (window texts left out with ``include_text=False``)."""
        windows: list[JSONValue] = []
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
# Enhancement
# --------------------------------------------------------------------------------------


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
    settings: RetrievalSettings,
    *,
    doc_texts: Mapping[str, str] | None = None,
    split_sentences: SentenceSplitter | None = None,
    score_sentences: SentenceScorer | None = None,
    lexical_scores: SentenceScorer | None = None,
    window_chars: int | None = None,
    chunk_weight: float | None = None,
) -> EnhancedContext:
    """The merged context windows of ranked ``hits`` (see the module docstring), enhanced as
    ``settings`` say: its mode and that mode's options (``num_neighbors``,
    ``context_window_size``; ``focus_chars``, ``lexical_weight``, ``structure``, ``score_drop``,
    ``opening_chars``).
    ``settings.k`` and the search options are the search's business, not read here.

    Args:
        hits: ``(chunk, score)`` pairs, best first (any number of documents).
        chunks: the ordered chunks of the hits' documents (all of them: neighbours come from here).
        settings: the retrieval settings (:class:`~ctxwin_dagster.core.retrieval.settings.RetrievalSettings`).
        doc_texts: ``doc_id -> text`` for exact window text; a given text must match the chunks.
        split_sentences, score_sentences: the sentence splitter (default
            :func:`~ctxwin_dagster.core.text.sentences.split_sentences`) and the question's sentence
            scorer (required) of the focus mode (see :func:`focus_windows`).
        lexical_scores: the sentences' full-text scores in focus mode, weighed by
            ``settings.lexical_weight`` (:data:`DEFAULT_FOCUS_LEXICAL_WEIGHT` when it is None).
        window_chars, chunk_weight: the focus mode's largest window and the weight of a chunk's
            score in its sentences' (defaults :data:`DEFAULT_FOCUS_WINDOW_CHARS`,
            :data:`DEFAULT_FOCUS_CHUNK_WEIGHT`), for evaluations that vary them.

    Raises:
        ValueError: focus options outside the focus mode, a missing sentence scorer, a hit not
            among ``chunks``, or a document text that no longer matches its chunks.

    Example::

        >>> from ctxwin_dagster.core.text.splitting import RecursiveSplitter
        >>> text = "aa bb cc dd ee"
        >>> chunks = RecursiveSplitter(chunk_size=3, chunk_overlap=0).split(text, doc_id="d", doc_sha256="0")
        >>> budget = RetrievalSettings(enhance_mode="budget", context_window_size=8)
        >>> enhance([(chunks[2], 1.0)], chunks, budget, doc_texts={"d": text}).windows[0].text
        'bb cc dd'
        >>> enhance([(chunks[2], 1.0)], chunks, RetrievalSettings(enhance_mode="none"), window_chars=100)
        Traceback (most recent call last):
        ...
        ValueError: window_chars apply to the focus mode only (the mode is 'none'); drop them or use enhance_mode='focus'
    """
    mode = settings.enhance_mode
    _check_focus_options(
        mode,
        split_sentences=split_sentences,
        score_sentences=score_sentences,
        lexical_scores=lexical_scores,
        window_chars=window_chars,
        chunk_weight=chunk_weight,
    )
    hits = [(c, float(s)) for c, s in hits]
    chunks = list(chunks)
    exact = _check_texts(hits, doc_texts)
    num_neighbors: int | None = None
    context_window_size: int | None = None
    focus: JSONObject | None = None
    if mode == "focus":
        windows, focus = _focus(
            hits,
            chunks,
            settings,
            doc_texts=doc_texts,
            split_sentences=split_sentences,
            score_sentences=score_sentences,
            lexical_scores=lexical_scores,
            window_chars=window_chars,
            chunk_weight=chunk_weight,
        )
    elif mode == "budget":
        context_window_size = (
            DEFAULT_CONTEXT_WINDOW_SIZE if settings.context_window_size is None else settings.context_window_size
        )
        windows = stitch_windows(hits, chunks, context_window_size=context_window_size, doc_texts=doc_texts)
    else:
        n = DEFAULT_NUM_NEIGHBORS if settings.num_neighbors is None else settings.num_neighbors
        n = 0 if mode == "none" else n
        windows = neighbor_windows(hits, chunks, num_neighbors=n, doc_texts=doc_texts)
        num_neighbors = n if mode == "neighbors" else None
    merged = merge_windows(windows, doc_texts=doc_texts)
    if mode == "focus" and settings.opening_chars:  # each document in the context also gives its opening
        merged = with_openings(merged, settings.opening_chars, chunks, doc_texts, split=split_sentences or _split)
    return EnhancedContext(
        windows=merged,
        mode=mode,
        num_neighbors=num_neighbors,
        context_window_size=context_window_size,
        hits=[(c.chunk_id, s) for c, s in hits],
        exact=exact,
        focus=focus,
    )


def _check_hits_among(hits: Sequence[Hit], chunks: Sequence[Chunk]) -> None:
    known = {c.chunk_id for c in chunks}
    for c, _ in hits:
        if c.chunk_id not in known:
            raise ValueError(
                f"hit chunk {c.chunk_id!r} (document {c.doc_id!r}) is not in chunks; pass the full chunk list of every "
                "hit's document"
            )


def _check_focus_options(mode: str, **options: object) -> None:
    """Raise when an option of the focus mode is given in another mode."""
    given = [name for name, value in options.items() if value is not None]
    if mode != "focus" and given:
        raise ValueError(
            f"{', '.join(given)} apply to the focus mode only (the mode is {mode!r}); drop them or use "
            "enhance_mode='focus'"
        )


def _focus(
    hits: list[Hit],
    chunks: list[Chunk],
    settings: RetrievalSettings,
    *,
    doc_texts: Mapping[str, str] | None,
    split_sentences: SentenceSplitter | None,
    score_sentences: SentenceScorer | None,
    lexical_scores: SentenceScorer | None,
    window_chars: int | None,
    chunk_weight: float | None,
) -> tuple[list[Window], JSONObject]:
    """The focus mode's windows, and the focus settings they were made with."""
    if score_sentences is None:
        raise ValueError(
            "the focus mode ranks sentences: pass score_sentences= (texts -> similarities to the question, e.g. "
            "lambda ts: embedder.embed(ts) @ question_vector); pass split_sentences= (text -> [(start, end)]) "
            "only to replace the default splitter, ctxwin_dagster.core.text.sentences.split_sentences"
        )
    _check_hits_among(hits, chunks)
    # the sentences are cut from each hit document's text: given, or rebuilt from its chunks
    texts = {
        d: document_text(d, [c for c in chunks if c.doc_id == d], doc_texts)
        for d in dict.fromkeys(c.doc_id for c, _ in hits)
    }
    width = DEFAULT_FOCUS_WINDOW_CHARS if window_chars is None else window_chars
    budget = settings.focus_chars or DEFAULT_FOCUS_BUDGET_CHARS
    weight = DEFAULT_FOCUS_CHUNK_WEIGHT if chunk_weight is None else chunk_weight
    lexical_weight = 0.0
    if lexical_scores is not None:
        lexical_weight = DEFAULT_FOCUS_LEXICAL_WEIGHT if settings.lexical_weight is None else settings.lexical_weight
    windows = focus_windows(
        hits,
        chunks,
        split_sentences=split_sentences or _split,
        score_sentences=score_sentences,
        doc_texts=texts,
        lexical_scores=lexical_scores,
        window_chars=width,
        budget_chars=budget,
        chunk_weight=weight,
        lexical_weight=lexical_weight,
        structure=settings.structure,
        score_drop=settings.score_drop,
    )
    focus: JSONObject = {
        "window_chars": width,
        "budget_chars": budget,
        "chunk_weight": weight,
        "lexical_weight": lexical_weight,
        "structure": settings.structure,
        "score_drop": settings.score_drop,
    }
    return windows, focus
