"""Windows around retrieved chunks: neighbours on each side, or adjacent chunks within a budget.

Each hit (a retrieved chunk and its score) grows into one window of its document:
:func:`neighbor_windows` adds ``num_neighbors`` chunks on each side, :func:`stitch_windows`
adds adjacent chunks while the window's character span stays within ``context_window_size``.
Both take ``hits`` (``(chunk, score)`` pairs), ``chunks`` (all chunks of the hits' documents, in
any order; several documents allowed) and optionally ``doc_texts`` (``doc_id -> text``). A
window's text comes from the document when given, else is rebuilt from the chunks
(:func:`span_text`). Both give one window per hit, in the hits' order, carrying the hit's score.

Example::

    >>> from ctxwin_dagster.core.text.splitting import RecursiveSplitter
    >>> text = "aa bb cc dd ee"
    >>> chunks = RecursiveSplitter(chunk_size=3, chunk_overlap=0).split(text, doc_id="d", doc_sha256="00")
    >>> [c.text for c in chunks]
    ['aa', 'bb', 'cc', 'dd', 'ee']
    >>> [w.text for w in neighbor_windows([(chunks[0], 0.9), (chunks[2], 0.5)], chunks,
    ...                                   num_neighbors=1, doc_texts={"d": text})]
    ['aa bb', 'bb cc dd']
    >>> w = stitch_windows([(chunks[2], 1.0)], chunks, context_window_size=9, doc_texts={"d": text})[0]
    >>> w.text, len(w)
    ('bb cc dd', 8)
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence

from ctxwin_dagster.core.arguments import check_count
from ctxwin_dagster.core.retrieval.window import Window
from ctxwin_dagster.core.text.splitting import Chunk

__all__ = ["Hit", "neighbor_windows", "span_text", "stitch_windows"]

Hit = tuple[Chunk, float]


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
