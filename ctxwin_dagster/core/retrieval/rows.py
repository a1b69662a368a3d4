"""Index rows as chunks: the rows an index returns (dicts with ``chunk_id``, ``doc_id``,
``chunk_index``, ``start``, ``end``, ``text``, and ``score`` for a search's) turned into
:class:`~ctxwin_dagster.core.text.splitting.Chunk` objects and ``(chunk, score)`` hits, checked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ctxwin_dagster.core.text.splitting import Chunk

__all__ = ["Hit", "chunk_from_row", "chunks_from_rows", "hits_from_rows"]

#: A retrieved chunk and its score.
Hit = tuple[Chunk, float]


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
