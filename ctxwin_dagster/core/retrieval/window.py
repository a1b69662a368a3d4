"""A window of a document, and the merging and joining of windows.

:class:`Window` is a block of one document: ``text`` is the document text ``[start, end)``.
:func:`merge_windows` folds the windows of a document that overlap or touch into one, so no
character is given twice; :func:`join_windows` joins the blocks with a blank line.

Example::

    >>> merged = merge_windows([Window("d", 0, 4, "abcd", 0.5), Window("d", 3, 7, "defg", 0.9)])
    >>> [(w.start, w.end, w.text, w.score) for w in merged]
    [(0, 7, 'abcdefg', 0.9)]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from ctxwin_dagster.core.json_types import JSONObject

__all__ = ["Window", "join_windows", "merge_windows"]


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
