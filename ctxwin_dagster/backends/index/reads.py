"""Reads of one document kept per table version, and the exact search over them.

Asking question after question about one document reads the same rows again and again: its
count (is it indexed?), its chunks (to rebuild the context) and its vectors (to search). Each
LanceDB query costs a few milliseconds of planning whatever its size, so
:class:`VersionedReads` keeps the results with the table version they were read at. A write,
by this process or another, makes a new version, and the next read goes to LanceDB again (the
connection checks for a newer version on every read). A table dropped and made again starts
at version 1 again: the dropping index forgets its reads (:meth:`VersionedReads.forget`).

:meth:`VersionedReads.scan` is the search within one document: the flat scan LanceDB runs for a
prefiltered query without its vector index (cosine similarity over that document's rows), done
as one matrix product over the vectors held for the version.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar, cast

import numpy as np
import pyarrow as pa

__all__ = ["READ_CACHE_ENTRIES", "VersionedReads", "fuse_rankings"]

#: Reads kept per index (the least recently used dropped).
READ_CACHE_ENTRIES = 64

T = TypeVar("T")


class VersionedReads:
    """Results of reads keyed by ``(kind, table name, …)``, each with the version it was read at."""

    def __init__(self, entries: int = READ_CACHE_ENTRIES) -> None:
        self.entries = entries
        self._kept: OrderedDict[tuple[Hashable, ...], tuple[int, object]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, table: Any, key: tuple[Hashable, ...], read: Callable[[], T]) -> T:
        """``read()``, or its result at the table's current version when it was read before
        (``key`` names the read, so what it keeps is what ``read`` gives)."""
        version = table.version
        with self._lock:
            hit = self._kept.get(key)
            if hit is not None and hit[0] == version:
                self._kept.move_to_end(key)
                return cast(T, hit[1])
        value = read()
        with self._lock:
            self._kept[key] = (version, value)
            while len(self._kept) > self.entries:
                self._kept.popitem(last=False)
        return value

    def forget(self, table_name: str) -> None:
        """Drop every read of ``table_name`` (the table was dropped)."""
        with self._lock:
            for key in [k for k in self._kept if k[1] == table_name]:
                del self._kept[key]

    def scan(self, table: Any, where: str, vector_column: str, vector: np.ndarray, depth: int) -> list[dict[str, Any]]:
        """The ``depth`` rows matching ``where`` (one document) closest to ``vector`` by cosine
        similarity, best first (ties in table order), each with ``score``: exactly LanceDB's flat scan."""

        def read() -> tuple[pa.Table, np.ndarray]:
            rows = table.search().where(where, prefilter=True).limit(10**9).to_arrow()
            dim = rows.schema.field(vector_column).type.list_size
            flat = rows.column(vector_column).combine_chunks().flatten().to_numpy(zero_copy_only=False)
            mat = np.asarray(flat, dtype=np.float32).reshape(-1, dim)
            norms = np.linalg.norm(mat, axis=1)
            norms[norms == 0] = 1.0
            return rows, mat / norms[:, None]

        rows, mat = self.get(table, ("scan", table.name, where), read)
        if not len(mat):
            return []
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        sims = mat @ (q / (float(np.linalg.norm(q)) or 1.0))
        order = np.argsort(-sims, kind="stable")[:depth]
        hits: list[dict[str, Any]] = rows.take(pa.array(order)).to_pylist()
        for h, i in zip(hits, order, strict=True):
            h["score"] = float(sims[i])
        return hits


def fuse_rankings(rankings: Sequence[Sequence[dict[str, Any]]], *, k: int, rrf_k: int = 60) -> list[dict[str, Any]]:
    """The top ``k`` rows of several rankings (vector and full-text search) by reciprocal rank
    fusion: each row scores ``1 / (rrf_k + rank)`` per ranking it is in (``rrf_score``; ``score``
    is kept from the vector ranking, 0.0 for a row only full-text search found)."""
    fused: dict[str, dict[str, Any]] = {}
    rank_score: dict[str, float] = {}
    for ranked in rankings:
        for rank, h in enumerate(ranked):
            cid = h["chunk_id"]
            rank_score[cid] = rank_score.get(cid, 0.0) + 1.0 / (rrf_k + rank + 1)
            fused.setdefault(cid, h)
    out = []
    for cid in sorted(rank_score, key=lambda c: -rank_score[c])[:k]:
        h = dict(fused[cid])
        h.pop("_score", None)
        h["rrf_score"] = rank_score[cid]
        h.setdefault("score", 0.0)
        out.append(h)
    return out
