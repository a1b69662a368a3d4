"""Windows of a document: the :class:`Window`, windows around retrieved chunks, a document's
opening, and the merging and joining of windows.

A :class:`Window` is a block of one document: ``text`` is the document text ``[start, end)``.

* Around retrieved chunks, each hit (a chunk and its score) grows into one window of its
  document, in the hits' order, carrying the hit's score: :func:`neighbor_windows` adds
  ``num_neighbors`` chunks on each side, :func:`stitch_windows` adds adjacent chunks while the
  span stays within ``context_window_size`` characters. ``chunks`` are all chunks of the hits'
  documents (any order); a window's text comes from ``doc_texts`` when given, else is rebuilt
  from the chunks (:func:`span_text`).
* A document's opening (:func:`with_openings`, :func:`opening_end`): where a contract names
  itself, its parties and its date, a filing its company and period, a law its number. A
  question about these rarely scores the opening highest (its words are names and dates), so
  with ``opening_chars`` every document in a focus context also gives its opening.
* :func:`merge_windows` folds the windows of a document that overlap or touch into one, so no
  character is given twice; :func:`join_windows` joins the blocks with a blank line.

Example::

    >>> from ctxwin_dagster.core.text.splitting import RecursiveSplitter
    >>> text = "aa bb cc dd ee"
    >>> chunks = RecursiveSplitter(chunk_size=3, chunk_overlap=0).split(text, doc_id="d", doc_sha256="00")
    >>> [w.text for w in neighbor_windows([(chunks[0], 0.9), (chunks[2], 0.5)], chunks,
    ...                                   num_neighbors=1, doc_texts={"d": text})]
    ['aa bb', 'bb cc dd']
    >>> stitch_windows([(chunks[2], 1.0)], chunks, context_window_size=9, doc_texts={"d": text})[0].text
    'bb cc dd'
    >>> merged = merge_windows([Window("d", 0, 4, "abcd", 0.5), Window("d", 3, 7, "defg", 0.9)])
    >>> [(w.start, w.end, w.text, w.score) for w in merged]
    [(0, 7, 'abcdefg', 0.9)]
    >>> text = "SERVICES AGREEMENT\\n\\nThis Agreement is made on 1 May 2020 by ACME and Beta LLC. It has 12 sections."
    >>> text[:opening_end(text, 80)]
    'SERVICES AGREEMENT\\n\\nThis Agreement is made on 1 May 2020 by ACME and Beta LLC.'
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

from ctxwin_dagster.core.arguments import check_count
from ctxwin_dagster.core.json_types import JSONObject
from ctxwin_dagster.core.text.sentences import split_sentences
from ctxwin_dagster.core.text.splitting import Chunk

__all__ = [
    "Hit",
    "Window",
    "document_text",
    "join_windows",
    "merge_windows",
    "neighbor_windows",
    "opening_end",
    "with_openings",
    "span_text",
    "stitch_windows",
]

Hit = tuple[Chunk, float]


@dataclass(frozen=True, slots=True)
class Window:
    """A block of one document: ``text`` is the document text ``[start, end)``.

    ``score`` is the retrieval score it carries (0.0 for sliding windows); ``chunk_ids`` are
    the chunks it was built from, in document order.

    Example::

        >>> w = Window(doc_id="d", start=10, end=15, text="hello", score=0.8, chunk_ids=("c1",))
        >>> w.to_dict()["chunk_ids"], len(w)
        (['c1'], 5)
    """

    doc_id: str
    start: int
    end: int
    text: str
    score: float = 0.0
    chunk_ids: tuple[str, ...] = ()

    def __len__(self) -> int:
        return self.end - self.start

    def to_dict(self) -> JSONObject:
        """The window as a plain dict (``chunk_ids`` as a list)."""
        data: JSONObject = asdict(self)
        data["chunk_ids"] = list(self.chunk_ids)
        return data


def merge_windows(
    windows: Iterable[Window],
    *,
    join: str = "\n\n",
    max_gap: int = 0,
    doc_texts: Mapping[str, str] | None = None,
) -> list[Window]:
    """Merge windows of the same document that overlap or touch, so no character repeats.

    Per document the windows are sorted by position; a window starting at or before the end
    of the current merged window (``start - end <= max_gap``; by default 0, i.e. overlapping
    or touching) is folded into it. The merged window keeps the highest score and the union of
    ``chunk_ids`` in document order; its text is the document span (overlaps appear once).
    The result is ordered by score, best first, ties by document and position.

    Args:
        windows: windows of one or several documents.
        join: with ``max_gap > 0``, the text put in a gap between two merged windows when
            ``doc_texts`` does not give the document's own text for it (the merged text then
            differs from the document span inside that gap).
        max_gap: also merge windows separated by up to this many characters (>= 0).
        doc_texts: optional ``doc_id -> text``, used to fill gaps exactly.

    Example::

        >>> ws = [Window("d", 0, 5, "hello", 0.2, ("a",)), Window("d", 5, 11, " world", 0.7, ("b",)),
        ...       Window("d", 20, 23, "end", 0.9, ("c",))]
        >>> [(w.text, w.score, w.chunk_ids) for w in merge_windows(ws)]
        [('end', 0.9, ('c',)), ('hello world', 0.7, ('a', 'b'))]
    """
    if isinstance(max_gap, bool) or not isinstance(max_gap, int) or max_gap < 0:
        raise ValueError(f"max_gap must be an int >= 0 (got {max_gap!r}); pass 0 to merge only overlapping windows")
    if not isinstance(join, str):
        raise TypeError(f"join must be a str; got {type(join).__name__}")
    by_doc: dict[str, list[Window]] = {}
    for w in windows:
        if w.end < w.start:
            raise ValueError(f"window of {w.doc_id!r} ends ({w.end}) before it starts ({w.start}); pass start <= end")
        by_doc.setdefault(w.doc_id, []).append(w)
    merged: list[Window] = []
    for doc_id, ws in by_doc.items():
        ws.sort(key=lambda w: (w.start, w.end))
        doc_text = doc_texts.get(doc_id) if doc_texts is not None else None
        cur = ws[0]
        parts = [cur.text]
        cur_start, cur_end, cur_score = cur.start, cur.end, cur.score
        ids: dict[str, None] = dict.fromkeys(cur.chunk_ids)
        for w in ws[1:]:
            if w.start - cur_end <= max_gap:
                if w.end > cur_end:
                    if w.start >= cur_end:
                        if w.start > cur_end:
                            parts.append(doc_text[cur_end : w.start] if doc_text is not None else join)
                        parts.append(w.text)
                    else:
                        if len(w.text) != w.end - w.start:
                            raise _inexact_error(w)
                        parts.append(w.text[cur_end - w.start :])
                    cur_end = w.end
                cur_score = max(cur_score, w.score)
                ids.update(dict.fromkeys(w.chunk_ids))
            else:
                merged.append(Window(doc_id, cur_start, cur_end, "".join(parts), cur_score, tuple(ids)))
                parts = [w.text]
                cur_start, cur_end, cur_score = w.start, w.end, w.score
                ids = dict.fromkeys(w.chunk_ids)
        merged.append(Window(doc_id, cur_start, cur_end, "".join(parts), cur_score, tuple(ids)))
    merged.sort(key=lambda w: (-w.score, w.doc_id, w.start))
    return merged


def _inexact_error(w: Window) -> ValueError:
    return ValueError(
        f"window of {w.doc_id!r} at [{w.start}, {w.end}) has {len(w.text)} characters of text, "
        f"not {w.end - w.start}, so its overlap cannot be cut out; build windows whose text is the "
        "document span (pass doc_texts)"
    )


def join_windows(windows: Iterable[Window], *, sep: str = "\n\n") -> str:
    """Join the windows' texts in the given order, separated by a blank line.

    Example::

        >>> join_windows([Window("d", 0, 3, "one"), Window("d", 9, 12, "two")])
        'one\\n\\ntwo'
    """
    return sep.join(w.text for w in windows)


def span_text(chunks_in_order: Iterable[Chunk], start: int, end: int) -> str:
    """The document text ``[start, end)`` rebuilt from chunks of that document, in order.

    Overlapping chunk text appears once. Characters between two chunks that no chunk holds —
    only whitespace the splitter dropped at a chunk boundary — are filled with whitespace of
    the same length (``" "`` for one character, newlines for more), so offsets still line up;
    pass the document text instead when exact whitespace matters.

    Example::

        >>> a = Chunk("a", "d", 0, 0, 9, "one two t")
        >>> b = Chunk("b", "d", 1, 4, 13, "two three")
        >>> c = Chunk("c", "d", 2, 15, 19, "four")
        >>> span_text([a, b, c], 0, 19)
        'one two three\\n\\nfour'
        >>> span_text([a, b, c], 4, 11)
        'two thr'
    """
    if end < start:
        raise ValueError(f"end ({end}) must not be before start ({start})")
    parts: list[str] = []
    pos = start
    for ch in chunks_in_order:
        if ch.end <= pos or ch.start >= end:
            if ch.start >= end:
                break
            continue
        if ch.start > pos:
            gap = ch.start - pos
            parts.append(" " if gap == 1 else "\n" * gap)
            pos = ch.start
        stop = min(ch.end, end)
        parts.append(ch.text[pos - ch.start : stop - ch.start])
        pos = stop
        if pos >= end:
            break
    if pos < end:
        gap = end - pos
        parts.append(" " if gap == 1 else "\n" * gap)
    return "".join(parts)


class _ChunkIndex:
    """Chunks grouped by document and sorted by ``chunk_index``."""

    def __init__(self, chunks: Iterable[Chunk]) -> None:
        by_doc: dict[str, list[Chunk]] = {}
        for ch in chunks:
            by_doc.setdefault(ch.doc_id, []).append(ch)
        self.docs: dict[str, list[Chunk]] = {}
        self.keys: dict[str, list[int]] = {}
        for doc_id, lst in by_doc.items():
            lst.sort(key=lambda c: c.chunk_index)
            keys = [c.chunk_index for c in lst]
            for a, b in zip(keys, keys[1:]):
                if a == b:
                    raise ValueError(
                        f"chunks hold chunk_index {a} of document {doc_id!r} twice; pass each document's chunks once"
                    )
            self.docs[doc_id] = lst
            self.keys[doc_id] = keys

    def position(self, hit: Chunk) -> int:
        keys = self.keys.get(hit.doc_id)
        if keys is not None:
            i = bisect_left(keys, hit.chunk_index)
            if i < len(keys) and keys[i] == hit.chunk_index:
                found = self.docs[hit.doc_id][i]
                if found.chunk_id == hit.chunk_id:
                    return i
                raise ValueError(
                    f"hit chunk {hit.chunk_id!r} (document {hit.doc_id!r}, index {hit.chunk_index}) differs "
                    f"from chunk {found.chunk_id!r} at that index; pass the chunk list the hits came from"
                )
        raise ValueError(
            f"hit chunk {hit.chunk_id!r} (document {hit.doc_id!r}, index {hit.chunk_index}) is not in chunks; "
            "pass the full chunk list of every hit's document"
        )


def _window(
    doc_chunks: Sequence[Chunk],
    lo: int,
    hi: int,
    score: float,
    doc_texts: Mapping[str, str] | None,
) -> Window:
    """Window over ``doc_chunks[lo:hi]``."""
    part = doc_chunks[lo:hi]
    doc_id = part[0].doc_id
    start = part[0].start
    end = max(c.end for c in part)
    if doc_texts is not None and doc_id in doc_texts:
        doc_text = doc_texts[doc_id]
        if len(doc_text) < end:
            raise ValueError(
                f"doc_texts[{doc_id!r}] has {len(doc_text)} characters but its chunks reach {end}; "
                "pass the text the chunks were made from"
            )
        text = doc_text[start:end]
    else:
        text = span_text(part, start, end)
    return Window(
        doc_id=doc_id,
        start=start,
        end=end,
        text=text,
        score=float(score),
        chunk_ids=tuple(c.chunk_id for c in part),
    )


def neighbor_windows(
    hits: Iterable[Hit],
    chunks: Iterable[Chunk],
    *,
    num_neighbors: int,
    doc_texts: Mapping[str, str] | None = None,
) -> list[Window]:
    """Expand each hit to its chunk plus ``num_neighbors`` (>= 0) chunks on each side.

    Neighbours are chunks of the same ``doc_id`` with ``chunk_index`` in
    ``[i - num_neighbors, i + num_neighbors]``, bounded by the document's ends. The window
    spans the first chunk's start to the last chunk's end. Arguments and example: see the
    module docstring.
    """
    check_count("num_neighbors", num_neighbors, minimum=0, fix="pass 0 for the hit alone")
    index = _ChunkIndex(chunks)
    windows: list[Window] = []
    for hit, score in hits:
        index.position(hit)  # validates the hit
        keys = index.keys[hit.doc_id]
        lo = bisect_left(keys, hit.chunk_index - num_neighbors)
        hi = bisect_right(keys, hit.chunk_index + num_neighbors)
        windows.append(_window(index.docs[hit.doc_id], lo, hi, score, doc_texts))
    return windows


def stitch_windows(
    hits: Iterable[Hit],
    chunks: Iterable[Chunk],
    *,
    context_window_size: int,
    doc_texts: Mapping[str, str] | None = None,
) -> list[Window]:
    """Grow each hit with adjacent chunks of its document while the span fits the budget.

    Starting from the hit's chunk, the next chunk after and the next chunk before are added in
    turn; a side stops at the first chunk that would make the window's character span
    (``end - start``, so overlapping text counts once) exceed ``context_window_size``, or at
    the document's end, while the other side goes on. A hit whose own chunk is longer than
    the budget is kept as it is. ``context_window_size`` is the largest span in characters
    (>= 1). Arguments and example: see the module docstring.
    """
    check_count("context_window_size", context_window_size, minimum=1, fix="pass the character budget, e.g. 3000")
    index = _ChunkIndex(chunks)
    budget = context_window_size
    windows: list[Window] = []
    for hit, score in hits:
        i = index.position(hit)
        doc_chunks = index.docs[hit.doc_id]
        lo, hi = i, i + 1  # window = doc_chunks[lo:hi]
        start, end = doc_chunks[i].start, doc_chunks[i].end
        can_after = can_before = end - start <= budget
        while can_after or can_before:
            if can_after:
                if hi < len(doc_chunks) and max(end, doc_chunks[hi].end) - start <= budget:
                    end = max(end, doc_chunks[hi].end)
                    hi += 1
                else:
                    can_after = False
            if can_before:
                if lo > 0 and end - min(start, doc_chunks[lo - 1].start) <= budget:
                    start = min(start, doc_chunks[lo - 1].start)
                    lo -= 1
                else:
                    can_before = False
        windows.append(_window(doc_chunks, lo, hi, score, doc_texts))
    return windows


def document_text(doc_id: str, chunks: Sequence[Chunk], doc_texts: Mapping[str, str] | None) -> str:
    """The text of ``doc_id``: from ``doc_texts`` when it holds it, else rebuilt from its chunks."""
    if doc_texts is not None and doc_id in doc_texts:
        return doc_texts[doc_id]
    ordered = sorted(chunks, key=lambda c: c.chunk_index)
    return span_text(ordered, 0, max(c.end for c in ordered))


def opening_end(text: str, chars: int, *, split: Callable[[str], Sequence[tuple[int, int]]] = split_sentences) -> int:
    """Where the opening of ``text`` ends: at most ``chars`` characters, cut after the last
    sentence that ends within them; when none ends in their second half (one long preamble
    sentence), cut at the last white space instead, so the opening is never much shorter than
    asked. 0 when ``chars`` is 0.
    """
    if chars <= 0 or not text:
        return 0
    if len(text) <= chars:
        return len(text)
    # split past the cut, so a sentence the cut runs through is not taken for one that ends
    ends = [e for _, e in split(text[: chars + 400]) if e <= chars]
    if ends and ends[-1] >= chars // 2:
        return ends[-1]
    space = max(text.rfind(" ", 0, chars + 1), text.rfind("\n", 0, chars + 1))
    return space if space >= chars // 2 else chars


def with_openings(
    windows: Sequence[Window],
    chars: int,
    chunks: Iterable[Chunk],
    doc_texts: Mapping[str, str] | None,
    *,
    split: Callable[[str], Sequence[tuple[int, int]]] = split_sentences,
) -> list[Window]:
    """Merged ``windows`` with the opening of each of their documents (:func:`opening_end`,
    sentences cut by ``split``; the text given in ``doc_texts``, or rebuilt from ``chunks``),
    merged with the windows it overlaps. An opening scores 0.0, so it comes after the retrieved
    windows unless it joins one of them. ``windows`` unchanged when ``chars`` is 0 or there are none."""
    if chars <= 0 or not windows:
        return list(windows)
    by_doc: dict[str, list[Chunk]] = {}
    for c in chunks:
        by_doc.setdefault(c.doc_id, []).append(c)
    openings: list[Window] = []
    for d in dict.fromkeys(w.doc_id for w in windows):
        text = document_text(d, by_doc.get(d, []), doc_texts)
        end = opening_end(text, chars, split=split)
        if end > 0:
            ids = tuple(c.chunk_id for c in sorted(by_doc.get(d, []), key=lambda c: c.chunk_index) if c.start < end)
            openings.append(Window(doc_id=d, start=0, end=end, text=text[:end], score=0.0, chunk_ids=ids))
    return merge_windows([*windows, *openings], doc_texts=doc_texts)
