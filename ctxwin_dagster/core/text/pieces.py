"""The steps of the recursive splitter on ``(start, end)`` offsets, as LangChain takes them.

:func:`cut_pieces` cuts a span before each occurrence of a separator (kept at the start of the
following piece); :func:`merge_pieces` merges contiguous pieces greedily into chunks of at most
a size, each starting with up to an overlap of the previous one (LangChain's ``_merge_splits``);
:func:`append_stripped` keeps a chunk without its surrounding whitespace; :func:`drop_contained`
drops a chunk lying wholly inside a neighbour.

Example::

    >>> text = "aa bb cc"
    >>> pieces = cut_pieces(text, 0, len(text), " ")
    >>> pieces
    [(0, 2), (2, 5), (5, 8)]
    >>> out: list[tuple[int, int]] = []
    >>> merge_pieces(text, [(s, e, e - s) for s, e in pieces], out, size=5, overlap=0, sep_len=0)
    >>> [text[s:e] for s, e in out]
    ['aa bb', 'cc']
"""

from __future__ import annotations

__all__ = ["append_stripped", "cut_pieces", "drop_contained", "merge_pieces"]


def cut_pieces(text: str, start: int, end: int, separator: str) -> list[tuple[int, int]]:
    """Cut ``[start, end)`` before each occurrence of ``separator`` (kept at the piece start).

    Same pieces as LangChain's ``_split_text_with_regex(keep_separator=True)``; empty pieces
    are dropped. ``""`` cuts into single characters.
    """
    if not separator:
        return [(i, i + 1) for i in range(start, end)]
    cuts: list[int] = []
    step = len(separator)
    pos = text.find(separator, start, end)
    while pos != -1:
        cuts.append(pos)
        pos = text.find(separator, pos + step, end)
    pieces: list[tuple[int, int]] = []
    prev = start
    for c in cuts:
        if c > prev:
            pieces.append((prev, c))
        prev = c
    if end > prev:
        pieces.append((prev, end))
    return pieces


def merge_pieces(
    text: str,
    pieces: list[tuple[int, int, int]],
    out: list[tuple[int, int]],
    *,
    size: int,
    overlap: int,
    sep_len: int,
) -> None:
    """LangChain's ``_merge_splits`` on contiguous ``(start, end, length)`` pieces (separators
    kept, so joining is a span); appends the stripped chunks to ``out``. ``sep_len`` is the
    measured length of an empty separator (0 for characters)."""
    head = 0  # current chunk = pieces[head:tail]
    tail = 0
    total = 0
    for idx, (_, _, n) in enumerate(pieces):
        count = tail - head
        if count > 0 and total + n + sep_len > size:
            append_stripped(text, pieces[head][0], pieces[tail - 1][1], out)
            while head < tail and (
                total > overlap or (total + n + (sep_len if tail - head > 0 else 0) > size and total > 0)
            ):
                total -= pieces[head][2] + (sep_len if tail - head > 1 else 0)
                head += 1
        tail = idx + 1
        total += n + (sep_len if tail - head > 1 else 0)
    if tail > head:
        append_stripped(text, pieces[head][0], pieces[tail - 1][1], out)


def append_stripped(text: str, s: int, e: int, out: list[tuple[int, int]]) -> None:
    """Append ``[s, e)`` without leading/trailing whitespace (``str.strip``); skip if blank."""
    sub = text[s:e]
    stripped_left = sub.lstrip()
    if not stripped_left:
        return
    new_s = s + (len(sub) - len(stripped_left))
    new_e = s + len(sub.rstrip())
    out.append((new_s, new_e))


def drop_contained(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Drop spans lying wholly inside the previous or next span.

    LangChain can emit such a chunk when whitespace-only pieces sit at a chunk boundary (the
    stripped chunk then equals the start or end of its neighbour); it adds no text and breaks
    the strictly increasing starts.
    """
    if len(spans) < 2:
        return spans
    kept: list[tuple[int, int]] = []
    for s, e in spans:
        while kept and kept[-1][0] >= s and kept[-1][1] <= e:
            kept.pop()  # the previous span is inside this one
        if kept and kept[-1][0] <= s and kept[-1][1] >= e:
            continue  # this span is inside the previous one
        kept.append((s, e))
    return kept
